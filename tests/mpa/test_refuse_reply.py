"""The Initiator's ULP refuses the Reply's private data: MPA exits, TCP stays
open (RFC 5044 §7.1.2 rule 3), in the sans-IO core and over real sockets."""

from __future__ import annotations

import asyncio

import pytest

from iwarp.asyncio.mpa import connect
from iwarp.errors import LocalProtocolError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import ConnectionEstablished, RequestReceived, StreamDataReceived
from iwarp.mpa.handshake import MpaState
from iwarp.mpa.wire import FrameFlags, MpaFrame

REPLY = MpaFrame(False, FrameFlags.CRC, 1, b"nope").pack()


def established_initiator(after_reply: bytes = b"") -> MpaConnection:
    conn = MpaConnection(Role.INITIATOR, MpaConfig(revision=1), private_data=b"hi")
    conn.data_to_send()
    events = conn.receive_data(REPLY + after_reply, 0.0)
    (done,) = [e for e in events if isinstance(e, ConnectionEstablished)]
    assert done.params.peer_private_data == b"nope"
    return conn


def test_refusing_the_reply_leaves_a_streaming_connection() -> None:
    conn = established_initiator(b"\x00\x05par")  # the start of an FPDU, never completed
    conn.refuse_reply()
    assert conn.state is MpaState.EXITED and conn.params is None
    assert [e for e in conn.take_events() if isinstance(e, StreamDataReceived)] == [
        StreamDataReceived(data=b"\x00\x05par")
    ]
    conn.send_stream(b"plain octets")
    assert b"".join(bytes(b) for b in conn.data_to_send()) == b"plain octets"
    events = conn.receive_data(b"more", 0.0)
    assert events == [StreamDataReceived(data=b"more")]
    with pytest.raises(LocalProtocolError):
        conn.send_ulpdu(b"no more FPDUs")


def test_too_late_or_wrong_role() -> None:
    conn = established_initiator()
    conn.send_ulpdu(b"first")
    with pytest.raises(LocalProtocolError):
        conn.refuse_reply()
    assert conn.state is MpaState.FULL_OPERATION
    responder = MpaConnection(Role.RESPONDER, MpaConfig(revision=1))
    request = MpaConnection(Role.INITIATOR, MpaConfig(revision=1)).data_to_send()
    for event in responder.receive_data(b"".join(bytes(b) for b in request), 0.0):
        if isinstance(event, RequestReceived):
            responder.accept(b"")
    with pytest.raises(LocalProtocolError):
        responder.refuse_reply()


async def _refuse_over_sockets() -> tuple[bytes, bytes, bytes]:
    seen: dict[str, bytes] = {}

    async def responder(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readexactly(20)
        await reader.readexactly(int.from_bytes(request[18:20], "big"))
        writer.write(REPLY)
        seen["after"] = await reader.readuntil(b"\n")  # streaming data, not an FPDU
        writer.write(b"still open\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(responder, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sock = await connect("127.0.0.1", port, config=MpaConfig(revision=1))
        private = sock.params.peer_private_data
        stream = sock.refuse_reply()
        stream.write(b"no thanks, plain TCP\n")
        answer = await asyncio.wait_for(stream.readuntil(b"\n"), 10)
        await stream.close()
    return private, seen["after"], answer


def test_refuse_reply_over_real_sockets() -> None:
    private, after, answer = asyncio.run(_refuse_over_sockets())
    assert private == b"nope"
    assert after == b"no thanks, plain TCP\n"
    assert answer == b"still open\n"
