"""``iwarp perf`` on the asyncio adapter: the server, the client's tests,
and plain TCP on the same event loop (``--compare-raw`` compares like with
like: the same loop, the same wake-ups): a ping-pong between asyncio
Protocols, or a stream with one ``send`` per message (``sock_sendall``)
into a Protocol that counts."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
import weakref
from array import array
from itertools import repeat
from typing import Any, cast

from iwarp.asyncio.rdma import Access, QueuePair, connect, serve
from iwarp.cli._perf import (
    CONTROL_ID,
    CONTROL_SIZE,
    WINDOW,
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
from iwarp.rdmap.memory import MemoryRegion
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

__all__ = ["RAW_STYLE", "run_client", "run_server"]

#: How the raw TCP comparison waits (printed next to its figures).
RAW_STYLE = "asyncio, same loop"
#: Seconds a raw TCP comparison may take to connect and finish, at most.
RAW_TIMEOUT = 120.0


# --- the server ---------------------------------------------------------------------


async def run_server(
    bind: str, port: int, config: MpaConfig, count: int | None, served: Served
) -> int:
    """Serve tests until ``count`` were served (None: until interrupted)."""
    done = asyncio.Event()
    active: set[QueuePair] = set()

    async def handler(qp: QueuePair) -> None:
        active.add(qp)
        try:
            await _serve_one(qp, served)
        except (IwarpError, PerfError, OSError, TimeoutError) as exc:
            served.failed(str(exc), client=qp.peer, test=_TESTS.get(qp))
        finally:
            active.discard(qp)
        if count is not None and served.tests >= count:
            done.set()

    server = await serve(handler, bind, port, config=config, setup=_post_control)
    served.listening(server.sockets[0].getsockname())
    try:
        async with server:
            await done.wait()
    finally:
        for qp in list(active):  # interrupted: end tests under way at once
            qp.abort()
    return 0


#: The test each server queue pair runs, once described (its failure names it).
_TESTS: weakref.WeakKeyDictionary[QueuePair, PerfTest] = weakref.WeakKeyDictionary()
#: Each server queue pair's control receive buffer.
_CONTROL_BUFFERS: weakref.WeakKeyDictionary[QueuePair, MemoryRegion] = weakref.WeakKeyDictionary()


def _post_control(qp: QueuePair) -> None:
    """Before the first FPDU: the buffer the client's test description lands in."""
    region = qp.register(bytearray(CONTROL_SIZE), Access.LOCAL_WRITE)
    _CONTROL_BUFFERS[qp] = region
    qp.post_recv(RecvWR(Sge(region), wr_id=CONTROL_ID))


async def _receive(qp: QueuePair) -> Completion:
    done = await qp.recv_cq.wait()
    if done.status is CompletionStatus.FLUSHED:  # the connection ended: say how
        raise qp.ended_error("receive")
    if done.status is not CompletionStatus.SUCCESS:
        raise PerfError(f"receive failed: {done.status.value}")
    return done


def _take(qp: QueuePair, done: Completion, sinks: list[MemoryRegion]) -> bytes:
    """The octets ``done`` received; its buffer is posted again."""
    region = _CONTROL_BUFFERS[qp] if done.wr_id == CONTROL_ID else sinks[done.wr_id]
    data = bytes(region.view[: done.byte_len])
    qp.post_recv(RecvWR(Sge(region), wr_id=done.wr_id))
    return data


async def _serve_one(qp: QueuePair, served: Served) -> None:
    first = await _receive(qp)
    if first.wr_id != CONTROL_ID:
        raise PerfError("the first message is not a test description")
    region = _CONTROL_BUFFERS[qp]
    test = PerfTest.decode(bytes(region.view[: first.byte_len]))
    _TESTS[qp] = test
    served.begin(test)
    why = served.refusal(test)
    if why is not None:
        await qp.send(served.refuse(why))
        return
    receives = send_receives(test.size, test.latency)
    try:
        sinks, target, answer = post_buffers(qp, test, region)
    except MemoryError:
        await qp.send(served.refuse(f"cannot allocate buffers for {test.size}-octet messages"))
        return
    stag = 0 if target is None else target.stag
    cpu = time.process_time()
    params = qp.params
    served.settings_differ(test, params.markers_send, _client_of(qp))
    await qp.send(encode(served.answer(stag, receives, params.markers_receive, params.crc)))
    if test.op == "send":
        credits = 0
        while True:
            done = await _receive(qp)
            qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
            if done.solicited:  # the client's last Send: every data Send is in
                break
            served.messages += 1
            if answer is not None:
                await qp.send(Sge(answer))
                continue
            credits += 1
            if credits >= max(1, receives // 4):
                await qp.send(encode({"credits": credits}))
                credits = 0
    else:
        while True:
            done = await _receive(qp)
            if _take(qp, done, sinks):  # {"done": true}
                break
            served.messages += 1
            await qp.send(b"")  # a zero-length Send after a Write: answer it
    cpu = time.process_time() - cpu
    if not test.raw:
        await qp.send(encode(served.report(cpu, target)))
    else:
        host = qp.get_extra_info("sockname", ("0.0.0.0", 0))[0]
        listener = await _RawListener.open(host, test)
        try:
            await qp.send(encode({**served.report(cpu, target), "raw_port": listener.port}))
            await qp.send(encode(await asyncio.wait_for(listener.result, RAW_TIMEOUT)))
        finally:
            listener.close()
    last = _take(qp, await _receive(qp), sinks)
    message = decode(last)
    if "result" in message:
        served.result(message["result"], detail=message.get("detail") is not False, test=test)


# --- raw TCP on the loop, for --compare-raw -------------------------------------------


class _RawServer(asyncio.Protocol):
    """Plain TCP, server side: the first 8 octets say how many octets follow
    (bandwidth: counted, then one octet answers) or how many messages to
    echo (latency and atomics: each octet is echoed as it arrives). One
    connection per test: any other is closed at once. While the peer does
    not read the echo, reading pauses (the transport's flow control), so a
    peer that only sends cannot grow the write buffer without bound."""

    def __init__(self, listener: _RawListener) -> None:
        self._test = listener.test
        self._result = listener.result
        self._listener = listener
        self._head = b""
        self._left: int | None = None
        self._cpu = 0.0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses).
        transport = cast(asyncio.Transport, transport)
        if self._listener.transport is not None or self._result.done():
            transport.abort()  # the test's connection came already
            return
        self._transport = self._listener.transport = transport

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._left is None:
            self._head += data
            if len(self._head) < 8:
                return
            total = int.from_bytes(self._head[:8], "big")
            self._left = total * self._test.size if self._test.echo else total
            self._cpu = time.process_time()
            data = self._head[8:]
        if self._test.echo and data:
            transport.write(data)
        self._left -= len(data)
        if self._left <= 0 and not self._result.done():
            if not self._test.echo:
                transport.write(b"k")
            cpu = time.process_time() - self._cpu
            self._result.set_result({"cpu": cpu, "style": RAW_STYLE})

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None and not self._result.done():
            self._result.set_result({"error": "raw TCP peer closed early"})


class _RawListener:
    """The server's plain TCP port for one ``--compare-raw`` test: the
    server socket, the test's one connection, and what it measured."""

    def __init__(self, test: PerfTest, result: asyncio.Future[dict[str, Any]]) -> None:
        self.test = test
        #: The server side's figures (or an error), once the peer sent all.
        self.result = result
        #: The test's connection, once it came.
        self.transport: asyncio.Transport | None = None
        self._server: asyncio.Server | None = None

    @classmethod
    async def open(cls, host: str, test: PerfTest) -> _RawListener:
        loop = asyncio.get_running_loop()
        listener = cls(test, loop.create_future())
        listener._server = await loop.create_server(lambda: _RawServer(listener), host, 0)
        return listener

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop listening and end the connection (a server's close leaves
        accepted connections open: a peer that never closes would keep it):
        after the test, once what is written went out; else at once."""
        if self._server is not None:
            self._server.close()
        transport = self.transport
        if transport is not None:
            result = self.result
            if result.done() and not result.cancelled() and "error" not in result.result():
                transport.close()
            else:
                transport.abort()


class _RawClient(asyncio.Protocol):
    """Plain TCP ping-pong, client side: counts what comes back."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.received = 0
        self.want = 0
        self.arrived: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= self.want and not self.arrived.done():
            self.arrived.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.arrived.done():
            self.arrived.set_exception(ConnectionError("raw TCP peer closed early"))
            self.arrived.exception()  # retrieved: only an awaiting test reads it

    async def until(self, octets: int) -> None:
        """Wait until ``octets`` in all came back."""
        self.want = octets
        if self.received < octets:
            loop = asyncio.get_running_loop()
            self.arrived = loop.create_future()
            await self.arrived


async def _raw_client(
    host: str, port: int, test: PerfTest, iterations: int, window: int
) -> RawResult:
    raw = RawResult(RAW_STYLE, iterations=iterations)
    if test.latency:
        await _raw_ping_pong(host, port, test, raw)
    elif test.echo:
        await _raw_requests(host, port, test, raw, window)
    else:
        await _raw_stream(host, port, test, raw)
    return raw


async def _raw_ping_pong(host: str, port: int, test: PerfTest, raw: RawResult) -> None:
    """A ping-pong between asyncio Protocols on this loop."""
    loop = asyncio.get_running_loop()
    transport, protocol = await asyncio.wait_for(
        loop.create_connection(_RawClient, host, port), RAW_TIMEOUT
    )
    data = bytes(test.size)
    clock = time.perf_counter
    cpu = time.process_time()
    try:
        transport.write(raw.iterations.to_bytes(8, "big"))
        times = raw.times
        for i in range(1, raw.iterations + 1):
            start = clock()
            transport.write(data)
            await protocol.until(i * test.size)
            times.append(clock() - start)
    finally:
        transport.close()
    raw.cpu_client = time.process_time() - cpu


async def _raw_requests(host: str, port: int, test: PerfTest, raw: RawResult, window: int) -> None:
    """Requests and responses of ``test.size`` octets, ``window`` in flight
    (as the atomics' rate loop keeps its FetchAdds), between asyncio
    Protocols on this loop; timed until the last response is in."""
    loop = asyncio.get_running_loop()
    transport, protocol = await asyncio.wait_for(
        loop.create_connection(_RawClient, host, port), RAW_TIMEOUT
    )
    data = bytes(test.size)
    clock = time.perf_counter
    cpu = time.process_time()
    try:
        transport.write(raw.iterations.to_bytes(8, "big"))
        start = clock()
        for sent in range(1, raw.iterations + 1):
            if sent > window:  # the oldest request in flight must be answered first
                await protocol.until((sent - window) * test.size)
            transport.write(data)
        await protocol.until(raw.iterations * test.size)
        raw.elapsed = clock() - start
    finally:
        transport.close()
    raw.cpu_client = time.process_time() - cpu


async def _raw_stream(host: str, port: int, test: PerfTest, raw: RawResult) -> None:
    """The same octets as the test, one ``send`` per message, on this loop
    (``loop.sock_sendall`` waits for the socket through the loop when it is
    full); then the server's one-octet answer."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), RAW_TIMEOUT)
        data = bytes(test.size)
        clock = time.perf_counter
        cpu = time.process_time()
        await loop.sock_sendall(sock, (test.size * raw.iterations).to_bytes(8, "big"))
        start = clock()
        for _ in range(raw.iterations):
            await loop.sock_sendall(sock, data)
        if await asyncio.wait_for(loop.sock_recv(sock, 1), RAW_TIMEOUT) != b"k":
            raise PerfError("the raw TCP server did not confirm")
        raw.elapsed = clock() - start
        raw.cpu_client = time.process_time() - cpu
    finally:
        sock.close()


# --- the client -----------------------------------------------------------------------


async def run_client(
    host: str, port: int, config: MpaConfig, result: PerfResult, *, detail: bool, ticker: Ticker
) -> None:
    """Run ``result.test`` against the server at ``host``:``port``; fills in ``result``."""
    test = result.test
    echo = test.op == "send" and test.latency
    qp = await connect(
        host,
        port,
        config=config,
        receive_buffers=8,
        receive_size=max(CONTROL_SIZE, test.size if echo else 0),
    )
    try:
        await qp.send(test.encode())
        answer = decode(await qp.receive())
        stag = accept_answer(answer, config.markers, result)
        result.crc = qp.params.crc
        note = crc_note(config.crc, result.crc)
        if note is not None:
            print(f"iwarp perf: {note}", file=sys.stderr, flush=True)
        region = qp.register(bytearray(test.size), Access.LOCAL_WRITE)
        cpu = time.process_time()
        result.cpu_started = cpu
        if test.latency:
            await _latency(qp, region, stag, result, ticker)
            report = decode(await qp.receive())
        else:
            report = await _bandwidth(
                qp, region, stag, result, ticker, integer(answer, "credits", 0, 1 << 20)
            )
        result.cpu_client = time.process_time() - cpu
        result.cpu_server = seconds(report, "cpu")
        check_word(report, result)
        if test.raw:
            raw = await _raw_client(
                host,
                integer(report, "raw_port", 1, 0xFFFF),
                test,
                result.iterations,
                atomic_window(qp.stream.atomic_ord),
            )
            raw_server_side(raw, decode(await qp.receive()))
            result.raw = raw
        await qp.send(encode({"result": summary(result), "detail": detail}))
    except BaseException:
        qp.abort()
        raise
    await qp.close()


async def _bandwidth(
    qp: QueuePair,
    region: MemoryRegion,
    stag: int,
    result: PerfResult,
    ticker: Ticker,
    receives: int,
) -> dict[str, Any]:
    """Keep WINDOW messages in flight; returns the server's report.

    ``receives``: the buffers the server posted for Sends (the first credits).
    """
    test = result.test
    op = test.op
    limit = result.limit
    deadline = result.duration
    posted = completed = yielded = 0
    credits = receives if op == "send" else 1 << 62
    window = bandwidth_window(qp, op)
    more_credits = asyncio.Event()
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    ended: list[str] = []

    async def read_control() -> None:
        nonlocal credits
        try:
            while True:
                message = decode(await qp.receive())
                if "credits" in message:
                    credits += integer(message, "credits", 0, 1 << 20)
                    more_credits.set()
                else:  # the report: nothing follows it (not read on, not queued)
                    messages.put_nowait(message)
                    return
        except (IwarpError, PerfError) as exc:
            ended.append(str(exc))
            more_credits.set()
            messages.put_nowait({"error": str(exc)})

    async def wait_credits() -> None:
        more_credits.clear()
        await more_credits.wait()
        if ended:
            raise PerfError(f"the server ended the test: {ended[0]}")

    reader = asyncio.create_task(read_control())
    clock = time.perf_counter
    sge = Sge(region)
    stamps = result.stamps
    posted_at = array("d") if op == "atomic" else None
    start = result.started = clock()
    try:
        while True:
            # What the window and the credits allow, posted as one list:
            # one write for all of them (verbs' ibv_post_send of a WR list).
            batch: list[SendQueueWR] = []
            while posted - completed < window and credits > 0:
                if posted >= limit or (deadline is not None and clock() >= start + deadline):
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
                    break  # nothing in flight and nothing more to post
                await wait_credits()
                continue
            # Every completion that is there, then post again (perftest polls
            # its CQ for a batch): the next list is as long as they freed.
            for done in qp.send_cq.poll() or [await qp.send_cq.wait()]:
                if done.status is not CompletionStatus.SUCCESS:
                    raise op_failed(op, done, qp.terminate)
                completed += 1
                stamp = clock() - start
                stamps.append(stamp)
                if posted_at is not None:  # an atomic's time from post to response
                    result.times.append(stamp - posted_at[done.wr_id])
            result.iterations = completed
            ticker()
            if completed - yielded >= WINDOW:
                # Writes that TCP took at once complete without a wait: let
                # the loop run (signals, the credits reader) once a window.
                yielded = completed
                await asyncio.sleep(0)
        end = clock()
        if op == "send":
            while credits <= 0:
                await wait_credits()
            await qp.send(b"", solicited=True)  # lands after every data Send
        else:
            await qp.send(encode({"done": True}))  # a Send arrives after the Writes
        report = await messages.get()
        if "error" in report:
            raise PerfError(f"the server ended the test: {report['error']}")
        if op not in ("read", "atomic"):
            end = clock()  # the server saw every octet placed (a response says so itself)
    finally:
        reader.cancel()
        ticker.finish()
    result.elapsed = end - start
    return report


async def _latency(
    qp: QueuePair, region: MemoryRegion, stag: int, result: PerfResult, ticker: Ticker
) -> None:
    op = result.test.op
    limit = result.limit
    deadline = result.duration
    times = result.times
    clock = time.perf_counter
    sge = Sge(region)
    begin = result.started = clock()
    try:
        while len(times) < limit and (deadline is None or clock() < begin + deadline):
            start = clock()
            if op == "read":
                await qp.rdma_read(sge, stag, 0)
            elif op == "atomic":
                try:
                    await qp.fetch_add(stag, 0, 1)
                except AtomicsNotSupportedError as exc:
                    raise no_atomics(exc) from None
            elif op == "send":
                await qp.send(sge)
                await qp.receive()
            else:
                await qp.rdma_write(sge, stag, 0)
                await qp.send(b"")
                await qp.receive()
            times.append(clock() - start)
            result.iterations += 1
            ticker()
    finally:
        ticker.finish()
    if op == "send":
        await qp.send(b"", solicited=True)
    else:
        await qp.send(encode({"done": True}))
    result.elapsed = sum(times)


def _client_of(qp: QueuePair) -> object:
    return qp.peer
