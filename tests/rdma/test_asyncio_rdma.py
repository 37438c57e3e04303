"""The asyncio queue pair over real loopback sockets: every opcode, sizes
0..16 MiB, markers and CRC on and off, SHA-256 of what arrived; errors."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable

import pytest

from iwarp.asyncio.rdma import (
    Access,
    ConnectionTerminatedError,
    ProtectionDomain,
    QueuePair,
    RdmaError,
    connect,
    serve,
)
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.work import CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WorkOpcode

REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def run(coro: Callable[[], Awaitable[None]], timeout: float = 60.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro(), timeout)

    asyncio.run(main())


def sha(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("size", [0, 1, 4093, 1 << 20])
def test_send_write_read_round_trips(markers: bool, crc: bool, size: int) -> None:
    config = MpaConfig(markers=markers, crc=crc)
    data = os.urandom(size)
    server_pd = ProtectionDomain()
    target = bytearray(size + 64)
    target_mr = server_pd.register(target, REMOTE, address=0x5000)

    async def main() -> None:
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def handler(qp: QueuePair) -> None:
            message = await qp.receive()  # Send 1: the data
            await got.put(message)
            await qp.send(target_mr.stag.to_bytes(4, "big"))
            await qp.receive()  # "done"

        server = await serve(
            handler,
            "127.0.0.1",
            0,
            pd=server_pd,
            config=config,
            receive_buffers=4,
            receive_size=max(size, 16),
        )
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, config=config, receive_buffers=2)
        assert qp.params.crc == crc and qp.params.markers_send == markers
        await qp.send(data)
        assert sha(await got.get()) == sha(data)
        stag = int.from_bytes(await qp.receive(), "big")
        await qp.rdma_write(data, stag, 0x5000 + 32)
        sink = qp.register(bytearray(size), Access.LOCAL_WRITE)
        assert await qp.rdma_read(sink, stag, 0x5000 + 32) == size
        assert sha(sink.view) == sha(data)
        await qp.send(b"done")
        await qp.close()
        server.close()
        await server.wait_closed()

    run(main)
    assert sha(target[32 : 32 + size]) == sha(data)
    assert target[:32] == bytes(32) and target[32 + size :] == bytes(32)


def test_sixteen_mebibytes_with_crc() -> None:
    size = 16 << 20
    data = os.urandom(size)
    server_pd = ProtectionDomain()
    target = bytearray(size)
    target_mr = server_pd.register(target, REMOTE)

    async def main() -> None:
        finished = asyncio.Event()

        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            finished.set()

        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, receive_buffers=1)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, config=MpaConfig(crc=True))
        await qp.rdma_write(data, target_mr.stag, 0)
        sink = qp.register(bytearray(size), Access.LOCAL_WRITE)
        await qp.rdma_read(sink, target_mr.stag, 0)
        assert sha(sink.view) == sha(data)
        await qp.send(b"bye")
        await finished.wait()
        await qp.close()
        server.close()
        await server.wait_closed()

    run(main, timeout=120)
    assert sha(target) == sha(data)


@pytest.mark.parametrize("rtr", [RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND])
def test_verbs_api_with_peer_to_peer_rtr(rtr: RtrFlags) -> None:
    async def main() -> None:
        received: list[bytes] = []
        server_pd = ProtectionDomain()
        buf = bytearray(32)
        region = server_pd.register(buf)

        def setup(qp: QueuePair) -> None:
            qp.post_recv(RecvWR(Sge(region), wr_id=77))

        async def handler(qp: QueuePair) -> None:
            completion = await qp.recv_cq.wait()
            assert completion.wr_id == 77 and completion.opcode is WorkOpcode.RECV
            received.append(bytes(buf[: completion.byte_len]))

        config = MpaConfig(rtr_types=RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ)
        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, setup=setup, config=config)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, config=MpaConfig(peer_to_peer=True, rtr_types=rtr))
        assert qp.params.rtr == rtr
        qp.post_send(SendWR(b"verbs!", wr_id=5, solicited=True))
        completion = await qp.send_cq.wait()
        assert (completion.wr_id, completion.status) == (5, CompletionStatus.SUCCESS)
        await qp.drain()
        await qp.closed
        assert received == [b"verbs!"]
        server.close()
        await server.wait_closed()

    run(main)


def test_remote_access_error_over_sockets() -> None:
    server_pd = ProtectionDomain()
    guarded = bytearray(b"\xa5" * 48)
    region = server_pd.register(
        memoryview(guarded)[16:32], Access.REMOTE_WRITE | Access.LOCAL_WRITE
    )

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            with pytest.raises(ConnectionTerminatedError):
                await qp.receive()
            assert qp.terminate is not None and not qp.terminate_received

        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, receive_buffers=1)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port)
        sink = qp.register(bytearray(16), Access.LOCAL_WRITE)
        with pytest.raises(RdmaError) as info:
            await qp.rdma_read(sink, region.stag, 0)  # no remote read right
        assert info.value.completion.status is CompletionStatus.REMOTE_ACCESS_ERROR
        term = info.value.terminate
        assert term is not None and (term.layer, term.etype, term.code) == (0, 1, 0x02)
        assert qp.terminate_received
        await qp.closed
        server.close()
        await server.wait_closed()

    run(main)
    assert guarded == b"\xa5" * 48


def test_no_matching_rtr_fails_connect_after_the_terminate() -> None:
    async def main() -> None:
        ended: asyncio.Future[QueuePair] = asyncio.get_running_loop().create_future()

        async def handler(qp: QueuePair) -> None:
            await qp.closed
            ended.set_result(qp)

        server = await serve(handler, "127.0.0.1", 0, config=MpaConfig(rtr_types=RtrFlags.WRITE))
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(MpaError) as info:
            await connect(
                "127.0.0.1", port, config=MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND)
            )
        assert info.value.code == 7
        qp = await ended
        assert qp.terminate is not None and qp.terminate_received
        assert (qp.terminate.layer, qp.terminate.etype, qp.terminate.code) == (2, 0, 7)
        server.close()
        await server.wait_closed()

    run(main)


def test_flush_waits_for_reads_queued_behind_ord() -> None:
    server_pd = ProtectionDomain()
    source = server_pd.register(bytearray(os.urandom(4096)), REMOTE)

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.closed

        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, config=MpaConfig(ird=1))
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, config=MpaConfig(ord=1))
        assert qp.params.ord == 1
        sinks = [qp.register(bytearray(4096)) for _ in range(4)]
        for i, sink in enumerate(sinks):
            qp.post_send(ReadWR(Sge(sink), source.stag, 0, wr_id=i))
        await qp.drain()  # the fourth Read left only after three responses came back
        done = [await qp.send_cq.wait() for _ in range(4)]
        assert [(c.wr_id, c.ok) for c in done] == [(i, True) for i in range(4)]
        assert all(bytes(s.view) == bytes(source.view) for s in sinks)
        await qp.close()
        server.close()
        await server.wait_closed()

    run(main)


def test_peer_reset_ends_waiting_operations() -> None:
    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            qp.abort()  # RST while the client waits for an answer

        server = await serve(handler, "127.0.0.1", 0, receive_buffers=1)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=1)
        await qp.send(b"hello?")
        with pytest.raises(ConnectionTerminatedError):
            await qp.receive()
        with pytest.raises(ConnectionTerminatedError):
            await qp.send(b"too late")
        assert [c.status for c in qp.recv_cq.poll()] == []  # the pool's buffer is internal
        await qp.closed
        server.close()
        await server.wait_closed()

    run(main, timeout=20)
