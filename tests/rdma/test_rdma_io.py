"""The asyncio driver's own writing: partial ``sendmsg``, output queued behind a
full socket, close after the queue drained."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.asyncio.rdma import (
    Access,
    ConnectionTerminatedError,
    ProtectionDomain,
    QueuePair,
    connect,
    serve,
)
from iwarp.rdmap.work import CompletionStatus, SendWR, WriteWR
from iwarp.sockets import unsent_part


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    st.data(),
)
def test_unsent_part_is_the_tail(pieces: list[bytes], data: st.DataObject) -> None:
    chunks: list[bytes | bytearray | memoryview] = [
        bytearray(p) if i % 3 == 1 else memoryview(p) if i % 3 == 2 else p
        for i, p in enumerate(pieces)
    ]
    whole = b"".join(pieces)
    sent = data.draw(st.integers(0, len(whole)))
    rest = unsent_part(chunks, sent)
    assert b"".join(bytes(c) for c in rest) == whole[sent:]


def test_unsent_part_keeps_untouched_buffers() -> None:
    a, b = b"abcd", bytearray(b"efgh")
    assert unsent_part([a, b], 0)[0] is a
    assert unsent_part([a, b], 4)[0] is b
    assert bytes(unsent_part([a, b], 6)[0]) == b"gh"
    assert unsent_part([a, b], 8) == []


@pytest.mark.slow
def test_close_sends_everything_queued_behind_a_full_socket() -> None:
    """Writes and a Send posted, then close() at once, with a small socket
    buffer: FPDUs wait for the kernel, none is lost, FIN comes last."""
    size, count = 1 << 20, 4
    server_pd = ProtectionDomain()
    target = server_pd.register(bytearray(size * count), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    chunks = [os.urandom(size) for _ in range(count)]
    seen: list[bytes] = []

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            await qp.send(target.stag.to_bytes(4, "big"))
            seen.append(await qp.receive())  # the last message: the Writes are placed
            await qp.closed

        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, receive_buffers=2)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        qp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        await qp.send(b"hello")
        stag = int.from_bytes(await qp.receive(), "big")
        for i, chunk in enumerate(chunks):
            qp.post_send(WriteWR(chunk, stag, i * size, wr_id=i))
        qp.post_send(SendWR(b"done", wr_id=count))
        await qp.close()
        server.close()
        assert [c.status for c in qp.send_cq.poll()] == [CompletionStatus.SUCCESS] * (count + 1)

    asyncio.run(asyncio.wait_for(main(), 60))
    assert seen == [b"done"]
    assert bytes(target.view) == b"".join(chunks)


def test_peer_reset_with_output_queued_ends_the_queue_pair() -> None:
    """The peer resets while FPDUs wait for the kernel: the queue pair ends
    (no hang, no writer left behind) and later posts say why."""
    size = 1 << 20
    server_pd = ProtectionDomain()
    target = server_pd.register(bytearray(size), Access.LOCAL_WRITE | Access.REMOTE_WRITE)

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.receive()
            await qp.send(target.stag.to_bytes(4, "big"))
            await qp.receive()  # the first Send after the Writes started
            qp.abort()

        server = await serve(handler, "127.0.0.1", 0, pd=server_pd, receive_buffers=2)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        qp.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        await qp.send(b"hello")
        stag = int.from_bytes(await qp.receive(), "big")
        await qp.send(b"go")
        for i in range(64):
            qp.post_send(WriteWR(bytes(size), stag, 0, wr_id=i))
        await qp.closed
        assert qp._driver._lane is None and not qp._driver._out
        with pytest.raises(ConnectionTerminatedError):
            qp.post_send(WriteWR(b"late", stag, 0, wr_id=99))
        server.close()

    asyncio.run(asyncio.wait_for(main(), 60))
