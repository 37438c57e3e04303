"""Large messages on the blocking adapter, whose driver writes them by send lane.

Every test runs on both paths (the suite runs again with ``IWARP_NO_ACCEL=1``,
where there are no lanes): what arrives, and what completes, must not depend
on it. With lanes, the driver waits for room inside the C call; it must still
read while it waits (two ends writing to each other at once must not
deadlock) and keep the order of what it writes.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import iwarp.sync as rdma
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import lanes
from iwarp.sockets import RECEIVE_BULK, RECEIVE_CHUNK
from iwarp.sync._driver import Driver

REMOTE = rdma.Access.LOCAL_WRITE | rdma.Access.REMOTE_WRITE | rdma.Access.REMOTE_READ
T = 30.0
SIZE = 4 << 20


@pytest.fixture
def serve() -> Iterator[Callable[..., int]]:
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


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
def test_large_writes_sends_and_reads_arrive_whole(
    serve: Callable[..., int], markers: bool, crc: bool
) -> None:
    config = MpaConfig(markers=markers, crc=crc)
    pd = rdma.ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)
    source = pd.register(bytearray(os.urandom(SIZE)), REMOTE)
    payloads = [os.urandom(n) for n in (SIZE, 65536, 200_001, 3)]
    received: list[bytes] = []

    def handler(qp: rdma.QueuePair) -> None:
        for _ in payloads:
            received.append(qp.receive(timeout=T))
        qp.send(b"done", timeout=T)
        qp.receive(timeout=T)

    port = serve(handler, pd=pd, config=config, receive_buffers=4, receive_size=SIZE)
    with rdma.connect("127.0.0.1", port, config=config, timeout=T) as qp:
        written = os.urandom(SIZE - 10)
        assert qp.rdma_write(written, target.stag, 10, timeout=T) == len(written)
        for payload in payloads:
            qp.send(payload, timeout=T)
        assert qp.rdma_read(SIZE - 1, source.stag, 1, timeout=T) == bytes(source.view[1:])
        assert qp.receive(timeout=T) == b"done"
        assert bytes(target.view[10:]) == written
        qp.send(b"bye", timeout=T)
    assert received == payloads


def test_two_ends_writing_to_each_other_at_once_do_not_deadlock(
    serve: Callable[..., int],
) -> None:
    """Both wait for room in their send lanes; each must read the other's
    octets meanwhile, or neither socket ever drains."""
    pd = rdma.ProtectionDomain()
    at_server = pd.register(bytearray(4 * SIZE), REMOTE)
    at_client = pd.register(bytearray(4 * SIZE), REMOTE)
    to_client = os.urandom(4 * SIZE)
    to_server = os.urandom(4 * SIZE)

    finished = threading.Event()

    def handler(qp: rdma.QueuePair) -> None:
        qp.receive(timeout=T)
        qp.rdma_write(to_client, at_client.stag, 0, timeout=T)
        qp.send(b"written", timeout=T)
        qp.receive(timeout=T)  # after the client's Write: it is placed
        finished.set()

    port = serve(handler, pd=pd, receive_buffers=2)
    with rdma.connect("127.0.0.1", port, pd=pd, receive_buffers=2, timeout=T) as qp:
        qp.send(b"go", timeout=T)
        qp.rdma_write(to_server, at_server.stag, 0, timeout=T)
        assert qp.receive(timeout=T) == b"written"
        qp.send(b"bye", timeout=T)
    assert finished.wait(T)
    assert bytes(at_server.view) == to_server
    assert bytes(at_client.view) == to_client


def test_a_small_send_posted_behind_a_lane_goes_after_it(serve: Callable[..., int]) -> None:
    """A one-segment Send written at once (the short way) must queue behind
    a message its lane has not finished."""
    pd = rdma.ProtectionDomain()
    target = pd.register(bytearray(8 * SIZE), REMOTE)
    data = os.urandom(8 * SIZE)
    order: list[bytes] = []
    finished = threading.Event()

    def handler(qp: rdma.QueuePair) -> None:
        order.append(qp.receive(timeout=T))
        order.append(bytes(target.view[-16:]))  # the Write was placed before the Send
        qp.receive(timeout=T)
        finished.set()

    port = serve(handler, pd=pd, receive_buffers=2)
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        qp.post_send(rdma.WriteWR(data, target.stag, 0, wr_id=1))
        qp.send(b"after", timeout=T)
        assert qp.send_cq.wait(timeout=T).wr_id == 1
        qp.send(b"bye", timeout=T)
    assert finished.wait(T)
    assert order == [b"after", data[-16:]]


def test_lanes_run_when_the_accelerator_does() -> None:
    from iwarp import _accel

    off = os.environ.get("IWARP_NO_LANES", "") not in ("", "0")
    assert (_accel.ACTIVE and not off) == lanes.ACTIVE


def test_messages_read_at_once_beyond_the_pool_all_arrive(serve: Callable[..., int]) -> None:
    """Ten small Sends wait in the kernel while the receiver is busy; its
    pool of 4 buffers takes them from one read."""
    sent = threading.Event()
    got: list[bytes] = []

    def handler(qp: rdma.QueuePair) -> None:
        sent.wait(T)  # busy elsewhere: the messages wait in the kernel
        got.extend(qp.receive(timeout=T) for _ in range(10))
        qp.send(b"done", timeout=T)

    port = serve(handler, receive_buffers=4)
    with rdma.connect("127.0.0.1", port, receive_buffers=1, timeout=T) as qp:
        for i in range(10):
            qp.send(b"m%d" % i, timeout=T)
        sent.set()
        assert qp.receive(timeout=T) == b"done"
    assert got == [b"m%d" % i for i in range(10)]


class _Reads(socket.socket):
    """A socket whose reads return ``sizes`` (each clipped to the buffer),
    then would block: the driver's reading without a peer's timing."""

    sizes: list[int]

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if not self.sizes:
            raise BlockingIOError
        view = memoryview(buffer)
        n = min(self.sizes.pop(0), len(view))
        view[:n] = bytes(n)
        return n


class _Sink:
    """A core that records the size of each receive."""

    borrows_input = True
    lanes = None

    def __init__(self) -> None:
        self.got: list[int] = []

    def receive_data(self, data: Any, now: float) -> list[Any]:
        self.got.append(len(data))
        return []

    def settled(self) -> bool:
        return True  # (asked after each read, before the next)


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        # a read that fills the buffer: a bulk transfer, the next ones may be a MiB
        ([SIZE, SIZE, SIZE], [RECEIVE_CHUNK, RECEIVE_BULK, RECEIVE_BULK]),
        # reads that do not fill it never grow it
        ([100, 5000, RECEIVE_CHUNK - 1], [100, 5000, RECEIVE_CHUNK - 1]),
    ],
)
def test_a_bulk_receiver_reads_a_mebibyte_at_once(sizes: list[int], expected: list[int]) -> None:
    left, right = socket.socketpair()
    with right:
        sock = _Reads(fileno=left.detach())
        sock.sizes = list(sizes)
        core = _Sink()
        driver = Driver(sock, core, lambda events: None)  # type: ignore[arg-type]
        for _ in sizes:
            driver._read()
        driver.close()
    assert core.got == expected
