"""What only the blocking adapter has: timeouts on every blocking call, progress
driven by the caller's thread (no threads of its own), completion queues
shared by queue pairs, and failures of startup reported by accept/connect."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iwarp.sync as rdma
from iwarp.errors import IwarpError, LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.rdma.front import RECEIVE_HIGH_WATER
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WorkOpcode
from iwarp.sync.mpa import listen as mpa_listen

REMOTE = rdma.Access.LOCAL_WRITE | rdma.Access.REMOTE_WRITE | rdma.Access.REMOTE_READ
T = 10.0  # no step of a test may take longer


@pytest.fixture
def serve() -> Iterator[Callable[..., int]]:
    """Start a sync server whose handler runs in a thread; return its port."""
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    listeners: list[rdma.Listener] = []

    def start(handler: Callable[[rdma.QueuePair], None], **options: object) -> int:
        listener = rdma.listen("127.0.0.1", 0, **options)  # type: ignore[arg-type]
        listeners.append(listener)

        def run() -> None:
            try:
                with listener.accept(timeout=T) as qp:
                    handler(qp)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return listener.port

    yield start
    for thread in threads:
        thread.join(T)
        assert not thread.is_alive()
    for listener in listeners:
        listener.close()
    if errors:
        raise errors[0]


def test_a_timed_out_receive_loses_nothing(serve: Callable[..., int]) -> None:
    go = threading.Event()

    def handler(qp: rdma.QueuePair) -> None:
        assert qp.receive(timeout=T) == b"first"  # MPA: the initiator speaks first
        go.wait(T)
        qp.send(b"late", timeout=T)
        qp.receive(timeout=T)

    port = serve(handler, receive_buffers=1)
    with rdma.connect("127.0.0.1", port, receive_buffers=1, timeout=T) as qp:
        qp.send(b"first", timeout=T)
        start = time.monotonic()
        with pytest.raises(rdma.WaitTimeoutError) as info:
            qp.receive(timeout=0.2)
        assert time.monotonic() - start >= 0.2
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, IwarpError)
        go.set()
        assert qp.receive(timeout=T) == b"late"
        qp.send(b"bye", timeout=T)


def test_a_timeout_names_the_call_and_the_peer() -> None:
    # An MPA Responder that reads every ULPDU and answers none: the Read waits.
    listener = mpa_listen("127.0.0.1", 0)

    def silent() -> None:
        with listener, contextlib.suppress(IwarpError):
            for _ in listener.accept(timeout=T):
                pass

    peer = threading.Thread(target=silent, daemon=True)
    peer.start()
    port = listener.port
    try:
        with rdma.connect("127.0.0.1", port, timeout=T) as qp:
            with pytest.raises(rdma.WaitTimeoutError) as info:
                qp.rdma_read(8, 0x1234, 0, timeout=0.2)
            message = str(info.value)
            assert message == f"timed out waiting for rdma_read to 127.0.0.1:{port} to complete"
            assert "work request" not in message  # no internal id
    finally:
        peer.join(T)


def test_the_adapter_starts_no_threads(serve: Callable[..., int]) -> None:
    def handler(qp: rdma.QueuePair) -> None:
        while qp.receive(timeout=T) != b"end":
            pass

    port = serve(handler, receive_buffers=32)  # one per Send in flight: no flow control
    before = set(threading.enumerate())
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        for _ in range(20):
            qp.send(os.urandom(5000), timeout=T)
        assert set(threading.enumerate()) == before
        qp.send(b"end", timeout=T)
    assert set(threading.enumerate()) <= before


def test_poll_never_blocks_and_wait_returns_posted_work(serve: Callable[..., int]) -> None:
    pd = rdma.ProtectionDomain()
    source = pd.register(bytearray(os.urandom(1 << 16)), REMOTE)
    served = threading.Event()

    def handler(qp: rdma.QueuePair) -> None:
        assert qp.receive(timeout=T) == b"stop"  # serves the Reads meanwhile
        served.set()

    port = serve(handler, pd=pd, receive_buffers=1)
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        start = time.monotonic()
        assert qp.send_cq.poll() == []
        assert time.monotonic() - start < 0.5
        sink = qp.register(bytearray(1 << 16))
        qp.post_send(ReadWR(Sge(sink), source.stag, 0, wr_id=42))
        completion = qp.send_cq.wait(timeout=T)
        assert (completion.wr_id, completion.opcode, completion.ok) == (
            42,
            WorkOpcode.RDMA_READ,
            True,
        )
        assert bytes(sink.view) == bytes(source.view)
        qp.send(b"stop", timeout=T)
    assert served.wait(T)


def test_one_completion_queue_serves_two_queue_pairs(serve: Callable[..., int]) -> None:
    pd = rdma.ProtectionDomain()
    sources = [pd.register(bytearray([n]) * 4096, REMOTE) for n in (1, 2)]

    def handler(qp: rdma.QueuePair) -> None:
        qp.receive(timeout=T)

    ports = [serve(handler, pd=pd, receive_buffers=1) for _ in sources]
    cq = rdma.CompletionQueue()
    qps = [rdma.connect("127.0.0.1", p, send_cq=cq, recv_cq=cq, timeout=T) for p in ports]
    sinks = [qp.register(bytearray(4096)) for qp in qps]
    for i, (qp, sink, source) in enumerate(zip(qps, sinks, sources, strict=True)):
        qp.post_send(ReadWR(Sge(sink), source.stag, 0, wr_id=i))
    done = sorted(cq.wait(timeout=T).wr_id for _ in qps)
    assert done == [0, 1]
    assert [bytes(s.view) for s in sinks] == [bytes([1]) * 4096, bytes([2]) * 4096]
    for qp in qps:
        qp.send(b"bye", timeout=T)
        qp.close()


def test_progress_lets_a_busy_target_serve_reads(serve: Callable[..., int]) -> None:
    """The target of an RDMA Read answers it from any call, here ``progress``."""
    pd = rdma.ProtectionDomain()
    data = os.urandom(100_000)
    source = pd.register(bytearray(data), REMOTE)
    finished = threading.Event()

    def handler(qp: rdma.QueuePair) -> None:
        while not finished.is_set():
            qp.progress(timeout=0.01)  # "busy" with something else, but calling in

    port = serve(handler, pd=pd)
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        sink = qp.register(bytearray(len(data)))
        assert qp.rdma_read(sink, source.stag, 0, timeout=T) == len(data)
        assert bytes(sink.view) == data
    finished.set()


def test_verbs_receive_completions_carry_wr_ids(serve: Callable[..., int]) -> None:
    def handler(qp: rdma.QueuePair) -> None:
        assert qp.receive(timeout=T) == b"go"  # MPA: the initiator speaks first
        for i in range(3):
            qp.post_send(SendWR(f"message {i}".encode(), wr_id=100 + i))
        assert [qp.send_cq.wait(timeout=T).wr_id for _ in range(3)] == [100, 101, 102]
        qp.receive(timeout=T)

    pd = rdma.ProtectionDomain()
    regions = [pd.register(bytearray(64)) for _ in range(3)]

    def setup(qp: rdma.QueuePair) -> None:
        for i, region in enumerate(regions):
            qp.post_recv(RecvWR(Sge(region), wr_id=i))

    port = serve(handler, receive_buffers=1)
    with rdma.connect("127.0.0.1", port, pd=pd, setup=setup, timeout=T) as qp:
        qp.send(b"go", timeout=T)
        got = [qp.recv_cq.wait(timeout=T) for _ in range(3)]
        assert [(c.wr_id, c.opcode, c.ok) for c in got] == [
            (i, WorkOpcode.RECV, True) for i in range(3)
        ]
        texts = [bytes(r.view[: c.byte_len]) for r, c in zip(regions, got, strict=True)]
        assert texts == [b"message 0", b"message 1", b"message 2"]
        qp.send(b"bye", timeout=T)


def test_connect_times_out_when_no_one_answers_mpa() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # TCP only, never a Reply
        port = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(rdma.WaitTimeoutError):
            rdma.connect("127.0.0.1", port, timeout=0.3)
        assert time.monotonic() - start < 5
        # The protocol's own limit ends it too, as an MPA error (code 1).
        with pytest.raises(MpaError) as info:
            rdma.connect("127.0.0.1", port, config=MpaConfig(reply_timeout=0.2), timeout=T)
        assert info.value.code == 1


def test_accept_reports_a_bad_request_and_goes_on() -> None:
    with rdma.listen("127.0.0.1", 0, receive_buffers=1) as listener:
        with socket.create_connection(("127.0.0.1", listener.port)) as bad:
            bad.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            with pytest.raises(MpaError) as info:
                listener.accept(timeout=T)
            assert info.value.code == 4
        done = threading.Event()

        def client() -> None:
            with rdma.connect("127.0.0.1", listener.port, timeout=T) as qp:
                qp.send(b"after the bad one", timeout=T)
            done.set()

        thread = threading.Thread(target=client)
        thread.start()
        with listener.accept(timeout=T) as qp:
            assert qp.receive(timeout=T) == b"after the bad one"
        thread.join(T)
        assert done.is_set()


def test_misuse_is_a_local_error() -> None:
    with pytest.raises(ValueError):
        rdma.listen("127.0.0.1", 0).accept(timeout=-1)
    with rdma.listen("127.0.0.1", 0) as listener:
        thread = threading.Thread(target=lambda: listener.accept(timeout=T).close())
        thread.start()
        with (
            rdma.connect("127.0.0.1", listener.port, receive_buffers=0, timeout=T) as qp,
            pytest.raises(LocalProtocolError),
        ):
            qp.receive(timeout=1)  # no receive pool
        thread.join(T)


def test_a_full_receive_queue_is_reported_not_a_hang(serve: Callable[..., int]) -> None:
    pd = rdma.ProtectionDomain()
    source = pd.register(bytearray(b"r" * 64), REMOTE)
    count = 80  # 80 x 64 KiB: above the 4 MiB the queue pair buffers unread

    def handler(qp: rdma.QueuePair) -> None:
        assert qp.receive(timeout=T) == b"go"
        for _ in range(count):
            qp.send(bytes(1 << 16), timeout=T)
        assert qp.receive(timeout=T) == b"bye"

    port = serve(handler, pd=pd)
    with rdma.connect("127.0.0.1", port, receive_buffers=8, timeout=T) as qp:
        qp.send(b"go", timeout=T)
        for _ in range(2000):  # until reading pauses (bounded)
            if qp.endpoint.message_octets > RECEIVE_HIGH_WATER:
                break
            qp.progress(timeout=0.01)
        sink = qp.register(bytearray(64))
        with pytest.raises(LocalProtocolError, match="receive"):
            qp.rdma_read(sink, source.stag, 0, timeout=T)
        assert [len(qp.receive(timeout=T)) for _ in range(count)] == [1 << 16] * count
        # The Read stayed posted; once reading resumed it completed, and
        # having been given up by rdma_read, its completion is in send_cq.
        done = qp.send_cq.wait(timeout=T)
        assert (done.opcode, done.ok, bytes(sink.view)) == (WorkOpcode.RDMA_READ, True, b"r" * 64)
        qp.send(b"bye", timeout=T)


@settings(max_examples=40)
@given(garbage=st.one_of(st.binary(max_size=200), st.just(b"MPA ID Req Frame")))
def test_arbitrary_bytes_before_startup_give_only_protocol_errors(garbage: bytes) -> None:
    """Whatever a peer sends and then closes, accept raises an iwarp error
    (or succeeds on a valid Request), never anything else, and never hangs."""
    with (
        rdma.listen("127.0.0.1", 0) as listener,
        socket.create_connection(("127.0.0.1", listener.port)) as peer,
    ):
        peer.sendall(garbage)
        peer.shutdown(socket.SHUT_WR)
        try:
            listener.accept(timeout=T).abort()
        except IwarpError as exc:
            assert not isinstance(exc, rdma.WaitTimeoutError), exc


class _RecordingPoll:
    """Stands in for a driver's ``select.poll`` object and keeps each timeout."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.timeouts: list[float | None] = []

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        return self.real.poll(timeout)  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


@pytest.mark.parametrize("busy_poll", [0.0, 2.0])
def test_a_wait_polls_busily_for_busy_poll_seconds_then_sleeps(
    serve: Callable[..., int], busy_poll: float
) -> None:
    """With busy_poll, a message due soon is picked up without sleeping in
    poll (the socket is read again and again, without blocking); with 0,
    the wait sleeps at once."""

    def handler(qp: rdma.QueuePair) -> None:
        qp.receive(timeout=T)
        time.sleep(0.05)  # the client is waiting by now
        qp.send(b"late", timeout=T)
        qp.receive(timeout=T)  # until the client is done

    port = serve(handler)
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        assert qp.busy_poll == rdma.BUSY_POLL
        qp.busy_poll = busy_poll
        recorder = _RecordingPoll(qp._driver._poll)
        qp._driver._poll = recorder  # type: ignore[assignment]
        reads = _CountingReads(qp._driver.sock)
        qp._driver.sock = reads  # type: ignore[assignment]
        qp.send(b"go", timeout=T)
        assert qp.receive(timeout=T) == b"late"
        looks = reads.count
        qp.send(b"done", timeout=T)
        timeouts = list(recorder.timeouts)  # (close looks once at what arrived)
    sleeping = [t for t in timeouts if t != 0]
    if busy_poll:
        assert not sleeping and looks > 1
    else:
        assert sleeping and 0 not in timeouts  # no busy look at all
        assert looks == 1  # read once, when poll said so


class _CountingReads:
    """A socket whose ``recv_into`` calls are counted."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.count = 0

    def recv_into(self, buffer: bytearray) -> int:
        self.count += 1
        return self.real.recv_into(buffer)  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


def test_busy_poll_must_be_a_time(serve: Callable[..., int]) -> None:
    port = serve(lambda qp: qp.receive(timeout=T))
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        for bad in (-1.0, float("nan")):
            with pytest.raises(ValueError):
                qp.busy_poll = bad
        assert qp.busy_poll == rdma.BUSY_POLL
        qp.send(b"done", timeout=T)


def test_bad_options_raise_before_startup_and_leave_no_socket_open() -> None:
    with socket.create_server(("127.0.0.1", 0)) as tcp:  # takes TCP, never answers
        port = tcp.getsockname()[1]
        before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
        with pytest.raises(LocalProtocolError) as caught:
            rdma.connect("127.0.0.1", port, receive_buffers=-1, timeout=T)
        # The error's traceback (kept here, as an application's handler may
        # keep it) still holds connect's frame: the socket must be closed
        # already, not merely unreferenced later.
        assert caught.traceback
        if before is not None:
            assert len(os.listdir("/proc/self/fd")) == before


def test_connect_falls_back_to_rev1_against_an_unenhanced_responder() -> None:
    """RFC 6581 §10: a Rev 1 Responder closes on a Rev 2 Request (its error
    4); the Initiator sees the close (error 1) and, with fallback_to_rev1,
    retries once on a new connection as Rev 1. A completion queue given to
    the failed attempt is left by it."""
    listener = rdma.listen("127.0.0.1", 0, config=MpaConfig(revision=1), receive_buffers=2)
    server_errors: list[int] = []

    def run() -> None:
        with listener:
            while True:
                try:
                    with listener.accept(timeout=T) as qp:
                        qp.send(qp.receive(timeout=T), timeout=T)
                        return
                except MpaError as exc:
                    server_errors.append(exc.code)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with pytest.raises(MpaError) as info:
        rdma.connect("127.0.0.1", listener.port, receive_buffers=2, timeout=T)
    assert info.value.code == 1
    cq = rdma.CompletionQueue()
    with rdma.connect(
        "127.0.0.1",
        listener.port,
        receive_buffers=2,
        send_cq=cq,
        fallback_to_rev1=True,
        timeout=T,
    ) as qp:
        assert qp.params.revision == 1 and not qp.params.enhanced
        assert len(cq._fronts) == 1 and cq._fronts[0] is qp  # the failed Rev 2 attempt left it
        qp.send(b"after fallback", timeout=T)
        assert qp.receive(timeout=T) == b"after fallback"
    thread.join(T)
    assert server_errors == [4, 4]


def test_connect_refuses_too_long_private_data_before_opening_tcp() -> None:
    with socket.create_server(("127.0.0.1", 0)) as tcp:
        tcp.setblocking(False)
        with pytest.raises(LocalProtocolError):
            rdma.connect("127.0.0.1", tcp.getsockname()[1], private_data=bytes(600), timeout=T)
        with pytest.raises(BlockingIOError):  # nobody connected
            tcp.accept()
