"""Large messages on the asyncio adapter, whose driver writes them by send lane
(non-blocking C calls from the writer callback). Both paths run these (the
suite runs again with ``IWARP_NO_ACCEL=1``, without lanes): order on the wire
and what arrives must not depend on it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from iwarp.asyncio.rdma import Access, ProtectionDomain, QueuePair, connect, serve
from iwarp.rdma import lanes
from iwarp.rdmap.work import SendWR, WriteWR

REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 8 << 20


def _loops() -> list[Any]:
    loops: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:
        return loops
    return [*loops, pytest.param(uvloop.new_event_loop, id="uvloop")]


LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def run(factory: LoopFactory, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop = factory()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()


@pytest.fixture(params=_loops())
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    """Each test on asyncio's event loop and on uvloop's (when installed)."""
    factory: LoopFactory = request.param
    return factory


def test_a_send_posted_behind_a_large_write_arrives_after_it(loop_factory: LoopFactory) -> None:
    pd = ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)
    data = os.urandom(SIZE)
    seen: list[bytes] = []

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            seen.append(await qp.receive())
            seen.append(bytes(target.view[-16:]))  # placed before the Send arrived
            await qp.send(b"seen")
            await qp.receive()

        server = await serve(handler, "127.0.0.1", 0, pd=pd, receive_buffers=2)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=1)
        assert qp._driver._fd is not None  # on the transport's socket
        qp.post_send(WriteWR(data, target.stag, 0, wr_id=1))
        qp.post_send(SendWR(b"after", wr_id=2))
        assert [(await qp.send_cq.wait()).wr_id for _ in range(2)] == [1, 2]
        assert await qp.receive() == b"seen"
        await qp.send(b"bye")
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
    assert seen == [b"after", data[-16:]]


def test_both_ends_write_large_messages_at_once(loop_factory: LoopFactory) -> None:
    pd = ProtectionDomain()
    at_server = pd.register(bytearray(SIZE), REMOTE)
    at_client = pd.register(bytearray(SIZE), REMOTE)
    to_server, to_client = os.urandom(SIZE), os.urandom(SIZE)

    async def main() -> None:
        placed = asyncio.Event()

        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            await qp.rdma_write(to_client, at_client.stag, 0)
            await qp.send(b"written")
            await qp.receive()  # after the client's Write: it is placed
            placed.set()

        server = await serve(handler, "127.0.0.1", 0, pd=pd, receive_buffers=2)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, pd=pd, receive_buffers=2)
        await qp.send(b"go")
        await qp.rdma_write(to_server, at_server.stag, 0)
        assert await qp.receive() == b"written"
        await qp.send(b"bye")
        await placed.wait()
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
    assert bytes(at_server.view) == to_server
    assert bytes(at_client.view) == to_client


def test_each_connection_holds_one_descriptor(loop_factory: LoopFactory) -> None:
    """The driver writes on the transport's own socket (no duplicate): N
    connections with both ends in this process add 2 N descriptors."""
    count = 20

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        finished = asyncio.Event()

        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            await finished.wait()

        # (Room for the message: one too long ends the stream with a Terminate.)
        server = await serve(handler, "127.0.0.1", 0, receive_buffers=1, receive_size=1 << 17)
        port = server.sockets[0].getsockname()[1]
        before = descriptors()
        qps = [await connect("127.0.0.1", port) for _ in range(count)]
        for qp in qps:
            await qp.send(b"x" * 100_000)  # established, and written on
        assert descriptors() - before == 2 * count
        finished.set()
        for qp in qps:
            await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)


class _OneLaneCore:
    """A core with one large message for the driver to write by lane."""

    borrows_input = False
    must_close = False
    has_data_to_send = False

    def __init__(self, lane: Any) -> None:
        self.lane: Any = lane
        self.taken: Any = None
        self.sent: list[Any] = []
        #: Its own lanes' port (iwarp.contract.Lanes).
        self.lanes = self

    def take_send(self) -> Any:
        self.taken, self.lane = self.lane, None
        return self.taken

    def send_done(self) -> list[Any]:
        self.sent.append(self.taken)
        return []

    def receive_ring(self) -> None:
        return None

    def data_to_send(self) -> list[bytes]:
        return []

    def take_events(self) -> list[Any]:
        return []

    def get_timer(self) -> None:
        return None

    def settled(self) -> bool:
        return not self.has_data_to_send


class _QuietFront:
    """A front that takes the driver's events and does nothing with them."""

    keep_open_after_eof = True
    fin_on_clean_close = False

    def open(self, now: float, emss: int) -> Any:
        raise AssertionError("TCP is not opened in this test")

    def dispatch(self, events: list[Any]) -> None:
        pass

    def lost(self) -> None:
        pass


class _EagerTransport:
    """A transport that takes every write at once (never pauses the
    protocol); ``stream`` is what the peer got in order: what the socket
    delivered before each piece, then the piece."""

    def __init__(self, peer: Any) -> None:
        self.peer = peer
        self.stream = bytearray()
        self.pieces = 0

    def take_socket(self) -> None:
        while True:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.stream += chunk

    def write(self, data: Any) -> None:
        self.take_socket()
        self.stream += bytes(data)
        self.pieces += 1

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


@pytest.mark.skipif(not lanes.ACTIVE, reason="no send lanes without the C accelerator")
def test_a_piece_the_transport_sends_at_once_does_not_stall_the_lane() -> None:
    """When the socket is full, the lane hands the transport a piece; if the
    transport sends it at once (no pause_writing follows), the driver must go
    on by itself, or the message would wait for an unrelated event."""
    import socket

    from iwarp.asyncio.driver import CoreDriver
    from iwarp.ddp.wire import LAST_FLAG
    from iwarp.mpa.framing import FpduEncoder
    from iwarp.mpa.runs import SegmentRun
    from iwarp.rdma.lanes import SendLane

    size = 1 << 20
    run_ = SegmentRun(bytes(14), memoryview(os.urandom(size)), 0, size, 1440, 6, 8, 0, LAST_FLAG)
    lane = SendLane(run_, markers=False, crc=True, phase=0)
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

    async def main() -> tuple[_OneLaneCore, _EagerTransport]:
        front = _QuietFront()
        driver = CoreDriver(front)
        core = _OneLaneCore(lane)
        transport = _EagerTransport(right)
        driver.core = core  # type: ignore[assignment]
        driver._lanes = core.lanes
        driver.transport = transport  # type: ignore[assignment]
        driver._fd = left.fileno()
        driver.flush()  # one call: the socket fills, pieces go to the transport
        return core, transport

    with left, right:
        core, transport = asyncio.run(main())
        assert core.sent == [lane] and lane.done
        transport.take_socket()
    assert transport.pieces > 1
    encoder = FpduEncoder(markers=False, crc=True)
    wire = b"".join(bytes(b) for u in run_.ulpdus() for b in encoder.encode(u))
    assert bytes(transport.stream) == wire
