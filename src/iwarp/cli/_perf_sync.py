"""``iwarp perf --sync``: the same tests on the blocking adapter
(:mod:`iwarp.sync`), and plain TCP that waits the same way for
``--compare-raw``: busy polling a non-blocking socket for as long as the
queue pairs busy-poll (``--busy-poll``), then sleeping in ``poll``; or,
with ``--busy-poll 0``, a blocking socket sleeping in ``recv``."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from array import array
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from iwarp.cli._perf import (
    CONTROL_ID,
    CONTROL_SIZE,
    PerfError,
    PerfResult,
    PerfTest,
    RawResult,
    Served,
    Ticker,
    accept_answer,
    atomic_window,
    bandwidth_window,
    check_word,
    crc_note,
    decode,
    encode,
    integer,
    no_atomics,
    op_failed,
    post_buffers,
    raw_server_side,
    seconds,
    send_receives,
    summary,
)
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.rdma.errors import AtomicsNotSupportedError
from iwarp.rdmap.memory import Access, MemoryRegion
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    FetchAddWR,
    ReadWR,
    RecvWR,
    SendQueueWR,
    SendWR,
    Sge,
    WriteWR,
)
from iwarp.sync import WaitTimeoutError
from iwarp.sync.rdma import QueuePair, connect, listen

__all__ = ["RawSocket", "raw_style", "run_client", "run_server"]

#: Seconds a connection or a raw TCP comparison may take to open, at most.
OPEN_TIMEOUT = 30.0


def raw_style(busy_poll: float) -> str:
    """How the raw TCP comparison waits, in words."""
    if busy_poll <= 0:
        return "blocking recv"
    return f"non-blocking socket busy-polled {busy_poll * 1e6:.0f} us, then poll"


class RawSocket:
    """Plain TCP that waits as an ``iwarp.sync`` queue pair waits: with
    ``busy_poll`` > 0, one ``recv`` (or ``send``) per look on a non-blocking
    socket, yielding the CPU between looks, for up to ``busy_poll`` seconds,
    then ``poll``; with 0, a blocking socket."""

    def __init__(self, sock: socket.socket, busy_poll: float) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.busy_poll = busy_poll
        sock.settimeout(None if busy_poll <= 0 else 0.0)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def _wait(self, mask: int, started: float) -> float:
        """One more look is due: yield while busy polling, else sleep in poll."""
        now = time.perf_counter()
        if not started:
            return now
        if now - started < self.busy_poll:
            os.sched_yield()
            return started
        self._poll.modify(self.sock, mask)
        self._poll.poll()
        return 0.0

    def recv_into(self, view: memoryview) -> int:
        """At least one octet into ``view``; :raises ConnectionError: the peer closed."""
        sock = self.sock
        started = 0.0
        while True:
            try:
                n = sock.recv_into(view)
            except BlockingIOError:
                started = self._wait(select.POLLIN, started)
                continue
            if not n:
                raise ConnectionError("raw TCP peer closed early")
            return n

    def recv_exactly(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            got += self.recv_into(view[got:])

    def sendall(self, data: bytes | memoryview) -> None:
        if self.busy_poll <= 0:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        started = 0.0
        while view:
            try:
                view = view[self.sock.send(view) :]
                started = 0.0
            except BlockingIOError:
                started = self._wait(select.POLLOUT, started)

    def close(self) -> None:
        self.sock.close()


# --- the server -----------------------------------------------------------------------


def run_server(
    bind: str,
    port: int,
    config: MpaConfig,
    count: int | None,
    served: Served,
    busy_poll: float,
) -> int:
    """Serve tests one after another until ``count`` were served (None:
    until interrupted); the queue pairs of a ``-q`` test together, a thread
    each."""
    controls: dict[int, MemoryRegion] = {}

    def post_control(qp: QueuePair) -> None:
        region = qp.register(bytearray(CONTROL_SIZE), Access.LOCAL_WRITE)
        controls[id(qp)] = region
        qp.post_recv(RecvWR(Sge(region), wr_id=CONTROL_ID))

    def accept(timeout: float | None) -> _Member | None:
        """The next connection and the test it describes (None: it failed, said)."""
        try:
            qp = listener.accept(timeout=timeout)
        except IwarpError as exc:  # this connection's MPA startup failed
            if isinstance(exc, WaitTimeoutError):
                raise
            served.failed(str(exc))
            return None
        qp.busy_poll = busy_poll
        member = _Member(qp, controls.pop(id(qp)), _client_of(qp))
        try:
            member.test = _describe(qp, member.control)
        except (IwarpError, PerfError, OSError) as exc:
            served.failed(str(exc), client=member.client)
            qp.abort()
            return None
        return member

    with listen(bind, port, config=config, setup=post_control) as listener:
        served.listening(listener.address)
        waiting: list[_Member] = []  # came while a -q test gathered its queue pairs
        while count is None or served.tests < count:
            first = waiting.pop(0) if waiting else accept(None)
            if first is None or first.test is None:
                continue
            group = [first]
            test = first.test
            try:
                while len(group) < test.qps:  # the rest of a -q test's queue pairs
                    member = accept(OPEN_TIMEOUT)
                    if member is not None and member.test is not None:
                        same = member.test.group == test.group
                        (group if same else waiting).append(member)
            except WaitTimeoutError:
                for member in group:
                    served.failed(
                        f"{len(group)} of the test's {test.qps} queue pairs connected "
                        f"within {OPEN_TIMEOUT:.0f} s",
                        client=member.client,
                        test=test,
                    )
                    member.qp.abort()
                continue
            _serve_group(group, served, bind)
    return 0


@dataclass
class _Member:
    """An accepted connection of the sync server and the test it describes."""

    qp: QueuePair
    control: MemoryRegion
    client: object
    test: PerfTest | None = None


def _serve_group(group: list[_Member], served: Served, bind: str) -> None:
    """Serve one test's queue pairs: in this thread when it has one, else a
    thread each (abort()ed from here on an interrupt, as iwarp.sync allows)."""
    if len(group) == 1:
        _serve_member(group[0], served, bind)
        return
    threads = [
        threading.Thread(target=_serve_member, args=(m, served, bind), daemon=True) for m in group
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # (a signal interrupts the main thread between joins)
    except BaseException:
        for member in group:
            member.qp.abort()
        raise


def _serve_member(member: _Member, served: Served, bind: str) -> None:
    qp, test = member.qp, member.test
    assert test is not None
    try:
        _serve_one(qp, member.control, test, served, bind)
    except (IwarpError, PerfError, OSError) as exc:
        served.failed(str(exc), client=member.client, test=test)
        qp.abort()
    except BaseException:
        qp.abort()
        raise
    else:
        qp.close()


def _client_of(qp: QueuePair) -> object:
    """The client's address while its connection is up (for the failure line)."""
    sock = getattr(getattr(qp, "_driver", None), "sock", None)
    try:
        return None if sock is None else sock.getpeername()
    except OSError:
        return None


def _receive(qp: QueuePair) -> Completion:
    done = qp.recv_cq.wait()
    if done.status is CompletionStatus.FLUSHED:  # the connection ended: say how
        raise qp.ended_error("receive")
    if done.status is not CompletionStatus.SUCCESS:
        raise PerfError(f"receive failed: {done.status.value}")
    return done


def _describe(qp: QueuePair, control: MemoryRegion) -> PerfTest:
    """The test a connection's first message describes.

    :raises PerfError: it is not a test description.
    """
    first = _receive(qp)
    if first.wr_id != CONTROL_ID:
        raise PerfError("the first message is not a test description")
    return PerfTest.decode(bytes(control.view[: first.byte_len]))


def _serve_one(
    qp: QueuePair, control: MemoryRegion, test: PerfTest, served: Served, bind: str
) -> None:
    sinks: list[MemoryRegion] = []

    def take(done: Completion, repost: bool = True) -> bytes:
        region = control if done.wr_id == CONTROL_ID else sinks[done.wr_id]
        data = bytes(region.view[: done.byte_len])
        if repost:
            qp.post_recv(RecvWR(Sge(region), wr_id=done.wr_id))
        return data

    served.begin(test)
    why = served.refusal(test)
    if why is not None:
        qp.send(served.refuse(why))
        return
    receives = send_receives(test.size, test.latency)
    try:
        sinks[:], target, answer = post_buffers(qp, test, control)
    except MemoryError:
        qp.send(served.refuse(f"cannot allocate buffers for {test.size}-octet messages"))
        return
    stag = 0 if target is None else target.stag
    cpu = time.process_time()
    params = qp.params
    served.settings_differ(test, params.markers_send, _client_of(qp))
    qp.send(encode(served.answer(stag, receives, params.markers_receive, params.crc)))
    if test.op == "send":
        credits = 0
        while True:
            done = _receive(qp)
            qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
            if done.solicited:
                break
            served.messages += 1
            if answer is not None:
                qp.send(Sge(answer))
                continue
            credits += 1
            if credits >= max(1, receives // 4):
                qp.send(encode({"credits": credits}))
                credits = 0
    else:
        while True:
            if take(_receive(qp)):  # {"done": true}
                break
            served.messages += 1
            qp.send(b"")
    cpu = time.process_time() - cpu
    if not test.raw:
        qp.send(encode(served.report(cpu, target)))
    else:
        with socket.create_server((bind, 0)) as listener:
            qp.send(encode({**served.report(cpu, target), "raw_port": listener.getsockname()[1]}))
            qp.send(encode(_raw_serve(listener, test, qp.busy_poll)))
    # The client's result is its last message and it closes right after:
    # no buffer goes back for it (a post_recv on the closed stream fails
    # and lost the result row).
    message = decode(take(_receive(qp), repost=False))
    if "result" in message:
        served.result(message["result"], detail=message.get("detail") is not False, test=test)


def _raw_serve(listener: socket.socket, test: PerfTest, busy_poll: float) -> dict[str, Any]:
    listener.settimeout(OPEN_TIMEOUT)
    try:
        conn, _ = listener.accept()
    except OSError as exc:
        return {"error": f"no raw TCP connection: {exc}"}
    raw = RawSocket(conn, busy_poll)
    try:
        buf = bytearray(max(test.size, 1 << 16))
        view = memoryview(buf)
        raw.recv_exactly(view[:8])
        total = int.from_bytes(view[:8], "big")
        cpu = time.process_time()
        if test.echo:  # latency, or atomics' requests and responses
            message = view[: test.size]
            for _ in range(total):
                raw.recv_exactly(message)
                raw.sendall(message)
        else:
            left = total
            while left:
                left -= raw.recv_into(view[: min(len(view), left)])
            raw.sendall(b"k")
        return {"cpu": time.process_time() - cpu, "style": raw_style(busy_poll)}
    except OSError as exc:
        return {"error": str(exc)}
    finally:
        raw.close()


# --- the client -------------------------------------------------------------------------


def run_client(
    host: str,
    port: int,
    config: MpaConfig,
    result: PerfResult,
    *,
    detail: bool,
    ticker: Ticker,
    busy_poll: float,
) -> None:
    """Run ``result.test`` against the server at ``host``:``port``; fills in ``result``."""
    test = result.test
    echo = test.op == "send" and test.latency
    qp = connect(
        host,
        port,
        config=config,
        receive_buffers=8,
        receive_size=max(CONTROL_SIZE, test.size if echo else 0),
        timeout=OPEN_TIMEOUT,
    )
    qp.busy_poll = busy_poll
    try:
        qp.send(test.encode())
        answer = decode(qp.receive())
        stag = accept_answer(answer, config.markers, result)
        result.crc = qp.params.crc
        note = crc_note(config.crc, result.crc)
        if note is not None:
            print(f"iwarp perf: {note}", file=sys.stderr, flush=True)
        region = qp.register(bytearray(test.size), Access.LOCAL_WRITE)
        cpu = result.cpu_started = time.process_time()
        if test.latency:
            _latency(qp, region, stag, result, ticker)
            report = decode(qp.receive())
        else:
            report = _bandwidth(
                qp, region, stag, result, ticker, integer(answer, "credits", 0, 1 << 20)
            )
        result.cpu_client = time.process_time() - cpu
        result.cpu_server = seconds(report, "cpu")
        check_word(report, result)
        if test.raw:
            raw = _raw_client(
                host,
                integer(report, "raw_port", 1, 0xFFFF),
                test,
                result.iterations,
                busy_poll,
                atomic_window(qp.stream.atomic_ord),
            )
            raw_server_side(raw, decode(qp.receive()))
            result.raw = raw
        qp.send(encode({"result": summary(result), "detail": detail}))
    except BaseException:
        qp.abort()
        raise
    qp.close()


def _raw_client(
    host: str, port: int, test: PerfTest, iterations: int, busy_poll: float, window: int
) -> RawResult:
    raw = RawResult(raw_style(busy_poll), iterations=iterations)
    sock = RawSocket(socket.create_connection((host, port), timeout=OPEN_TIMEOUT), busy_poll)
    data = bytes(test.size)
    clock = time.perf_counter
    cpu = time.process_time()
    try:
        if test.latency:
            sock.sendall(iterations.to_bytes(8, "big"))
            back = memoryview(bytearray(test.size))
            times = raw.times
            for _ in range(iterations):
                start = clock()
                sock.sendall(data)
                sock.recv_exactly(back)
                times.append(clock() - start)
        elif test.echo:  # atomics: requests and responses, ``window`` in flight
            sock.sendall(iterations.to_bytes(8, "big"))
            back = memoryview(bytearray(test.size))
            start = clock()
            for sent in range(1, iterations + 1):
                if sent > window:  # the oldest request in flight must be answered first
                    sock.recv_exactly(back)
                sock.sendall(data)
            for _ in range(min(window, iterations)):
                sock.recv_exactly(back)
            raw.elapsed = clock() - start
        else:
            sock.sendall((test.size * iterations).to_bytes(8, "big"))
            start = clock()
            for _ in range(iterations):
                sock.sendall(data)  # one send per message, as the RDMA side posts
            sock.recv_exactly(memoryview(bytearray(1)))
            raw.elapsed = clock() - start
    finally:
        sock.close()
    raw.cpu_client = time.process_time() - cpu
    return raw


def _message(qp: QueuePair, wait: bool) -> dict[str, Any] | None:
    """The next control message; None when none is in and ``wait`` is False."""
    try:
        return decode(qp.receive(timeout=None if wait else 0.0))
    except WaitTimeoutError:
        return None


def _bandwidth(
    qp: QueuePair,
    region: MemoryRegion,
    stag: int,
    result: PerfResult,
    ticker: Ticker,
    receives: int,
) -> dict[str, Any]:
    """Keep WINDOW messages in flight; returns the server's report."""
    test = result.test
    op = test.op
    limit = result.limit
    duration = result.duration
    posted = completed = 0
    credits = receives if op == "send" else 1 << 62
    window = bandwidth_window(qp, op)
    reports: list[dict[str, Any]] = []

    def control(wait: bool) -> None:
        nonlocal credits
        # nothing follows the report: a server sending on is not read on
        while not reports and (message := _message(qp, wait)) is not None:
            if "credits" in message:
                credits += integer(message, "credits", 0, 1 << 20)
            else:
                reports.append(message)
            wait = False

    clock = time.perf_counter
    sge = Sge(region)
    stamps = result.stamps
    posted_at = array("d") if op == "atomic" else None
    send_cq = qp.send_cq
    start = result.started = clock()
    try:
        while True:
            # What the window and the credits allow, posted as one list:
            # one write for all of them (verbs' ibv_post_send of a WR list).
            batch: list[SendQueueWR] = []
            while posted - completed < window and credits > 0:
                if posted >= limit or (duration is not None and clock() >= start + duration):
                    break
                if op == "write":
                    batch.append(WriteWR(sge, stag, 0, wr_id=posted))
                elif op == "read":
                    batch.append(ReadWR(sge, stag, 0, wr_id=posted))
                elif op == "atomic":
                    batch.append(FetchAddWR(stag, 0, 1, wr_id=posted))
                else:
                    batch.append(SendWR(sge, wr_id=posted))
                    credits -= 1
                posted += 1
            if batch:
                if posted_at is not None:
                    posted_at.extend(repeat(clock() - start, len(batch)))
                qp.post_send_list(batch)
            if completed == posted:
                if credits > 0:
                    break
                control(wait=True)
                continue
            # Every completion that is there, then post again (perftest polls
            # its CQ for a batch): the next list is as long as they freed.
            for done in send_cq.poll() or [send_cq.wait()]:
                if done.status is not CompletionStatus.SUCCESS:
                    raise op_failed(op, done, qp.terminate)
                completed += 1
                stamp = clock() - start
                stamps.append(stamp)
                if posted_at is not None:  # an atomic's time from post to response
                    result.times.append(stamp - posted_at[done.wr_id])
            result.iterations = completed
            ticker()
            if credits <= 0:
                control(wait=False)
        end = clock()
        if op == "send":
            while credits <= 0:
                control(wait=True)
            qp.send(b"", solicited=True)
        else:
            qp.send(encode({"done": True}))
        while not reports:
            control(wait=True)
        if op not in ("read", "atomic"):
            end = clock()  # the server saw every octet placed (a response says so itself)
    finally:
        ticker.finish()
    result.elapsed = end - start
    return reports[0]


def _latency(
    qp: QueuePair, region: MemoryRegion, stag: int, result: PerfResult, ticker: Ticker
) -> None:
    op = result.test.op
    limit = result.limit
    duration = result.duration
    times = result.times
    clock = time.perf_counter
    sge = Sge(region)
    begin = result.started = clock()
    try:
        while len(times) < limit and (duration is None or clock() < begin + duration):
            start = clock()
            if op == "read":
                qp.rdma_read(sge, stag, 0)
            elif op == "atomic":
                try:
                    qp.fetch_add(stag, 0, 1)
                except AtomicsNotSupportedError as exc:
                    raise no_atomics(exc) from None
            elif op == "send":
                qp.send(sge)
                qp.receive()
            else:
                qp.rdma_write(sge, stag, 0)
                qp.send(b"")
                qp.receive()
            times.append(clock() - start)
            result.iterations += 1
            ticker()
    finally:
        ticker.finish()
    if op == "send":
        qp.send(b"", solicited=True)
    else:
        qp.send(encode({"done": True}))
    result.elapsed = sum(times)
