"""The asyncio adapter reads a bulk transfer by receive lane: once a read
of a ring's worth arrives (on a connection the driver writes on itself),
the transport reads into the connection's ring (``get_buffer``) and the
lane checks and places what it is sure of from the read callback, one C
call per read, no thread; on asyncio's loop and uvloop's. What arrives,
completes and ends must not depend on it (the suite runs again with
``IWARP_NO_ACCEL=1``, without lanes)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from iwarp.asyncio.rdma import Access, ProtectionDomain, QueuePair, connect, serve
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import lanes
from iwarp.rdma.errors import ConnectionTerminatedError
from iwarp.rdma.lanes import RING_START, ReceiveLane

REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 4 << 20

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _loops() -> list[Any]:
    loops: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:
        return loops
    return [*loops, pytest.param(uvloop.new_event_loop, id="uvloop")]


@pytest.fixture(params=_loops())
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    factory: LoopFactory = request.param
    return factory


def run(factory: LoopFactory, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    loop = factory()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """Per lane call: (octets read into the ring, octets the lane took)."""
    counts: list[tuple[int, int]] = []
    walk = ReceiveLane.walk
    arrived = ReceiveLane.arrived

    def counting(self: ReceiveLane, *args: Any) -> Any:
        result = walk(self, *args)
        counts.append((0, result[1]))
        return result

    def arriving(self: ReceiveLane, octets: int) -> None:
        arrived(self, octets)
        counts.append((octets, 0))

    monkeypatch.setattr(ReceiveLane, "walk", counting)
    monkeypatch.setattr(ReceiveLane, "arrived", arriving)
    yield counts


@pytest.mark.parametrize("markers", [False, True])
def test_writes_sends_and_reads_arrive_by_the_lane(
    loop_factory: LoopFactory, reads: list[tuple[int, int]], markers: bool
) -> None:
    config = MpaConfig(markers=markers)
    pd = ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)
    exposed = pd.register(bytearray(os.urandom(SIZE)), REMOTE)
    written = os.urandom(SIZE)
    payloads = [os.urandom(n) for n in (SIZE, 65536, 300_001, SIZE)]
    received: list[bytes] = []

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            for _ in payloads:
                received.append(await qp.receive())
            await qp.send(b"done")
            await qp.receive()

        server = await serve(
            handler, "127.0.0.1", 0, pd=pd, config=config, receive_buffers=4, receive_size=SIZE
        )
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, config=config)
        await qp.rdma_write(written, target.stag, 0)
        for payload in payloads:
            await qp.send(payload)
        sink = await qp.rdma_read(SIZE, exposed.stag, 0)
        assert sink == bytes(exposed.view)
        assert await qp.receive() == b"done"
        await qp.send(b"bye")
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
    assert bytes(target.view) == written
    assert received == payloads
    if lanes.RECEIVE_ACTIVE:
        # Most of the 16 MiB: all after the first read of 256 KiB or more.
        assert sum(took for _, took in reads) > 2 * SIZE
        # Reads of 256 KiB and more per wake-up once the lane reads (the ring's room).
        assert max(got for got, _ in reads) >= RING_START
    else:
        assert sum(took for _, took in reads) == 0


def test_a_terminate_after_a_bulk_write(loop_factory: LoopFactory) -> None:
    """A Write past its region after MiBs went by the lane: the usual
    path's Terminate, on both ends."""
    pd = ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)
    errors: list[BaseException] = []

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            try:
                await qp.receive()
            except ConnectionTerminatedError as exc:
                errors.append(exc)

        server = await serve(handler, "127.0.0.1", 0, pd=pd)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port)
        await qp.rdma_write(os.urandom(SIZE), target.stag, 0)
        await qp.rdma_write(os.urandom(SIZE), target.stag, 0)
        with pytest.raises(ConnectionTerminatedError, match="base or bounds"):
            await qp.rdma_write(os.urandom(SIZE), target.stag, 1)
            await qp.receive()
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
    assert errors and "Terminate sent" in str(errors[0])
