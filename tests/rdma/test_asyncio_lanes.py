"""Large messages on the asyncio adapter, whose driver writes them by send lane
(non-blocking C calls from the writer callback). Both paths run these (the
suite runs again with ``IWARP_NO_ACCEL=1``, without lanes): order on the wire
and what arrives must not depend on it."""

from __future__ import annotations

import asyncio
import os

from iwarp.asyncio.rdma import Access, ProtectionDomain, QueuePair, connect, serve
from iwarp.rdmap.work import SendWR, WriteWR

REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 8 << 20


def test_a_send_posted_behind_a_large_write_arrives_after_it() -> None:
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
        qp.post_send(WriteWR(data, target.stag, 0, wr_id=1))
        qp.post_send(SendWR(b"after", wr_id=2))
        assert [(await qp.send_cq.wait()).wr_id for _ in range(2)] == [1, 2]
        assert await qp.receive() == b"seen"
        await qp.send(b"bye")
        await qp.close()
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert seen == [b"after", data[-16:]]


def test_both_ends_write_large_messages_at_once() -> None:
    pd = ProtectionDomain()
    at_server = pd.register(bytearray(SIZE), REMOTE)
    at_client = pd.register(bytearray(SIZE), REMOTE)
    to_server, to_client = os.urandom(SIZE), os.urandom(SIZE)

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            await qp.rdma_write(to_client, at_client.stag, 0)
            await qp.send(b"written")
            await qp.receive()

        server = await serve(handler, "127.0.0.1", 0, pd=pd, receive_buffers=2)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, pd=pd, receive_buffers=2)
        await qp.send(b"go")
        await qp.rdma_write(to_server, at_server.stag, 0)
        assert await qp.receive() == b"written"
        await qp.send(b"bye")
        await qp.close()
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert bytes(at_server.view) == to_server
    assert bytes(at_client.view) == to_client
