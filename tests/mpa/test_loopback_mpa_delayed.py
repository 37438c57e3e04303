"""Delayed startup and draft-culley-iwarp-mpa-02 over real loopback sockets.

Seed 000 §6.1.2/§6.1.4: streaming data first, then the live connection is
switched into MPA as Initiator or Responder (the Responder may send a last
streaming message); octets read ahead are not lost. Seed 002 §8.1: no
Request/Reply, markers and CRC always on, each direction framed from a point
the application chose.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from iwarp.asyncio.mpa import (
    Accept,
    ConnectionRejectedError,
    MpaSocket,
    MpaStream,
    Reject,
    open_stream,
    serve_stream,
)
from iwarp.errors import LocalProtocolError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import REPLY_KEY, REQUEST_KEY, FrameFlags

Handler = Callable[[MpaStream], Awaitable[None]]


def run(main: Callable[[], Coroutine[Any, Any, None]], timeout: float = 20.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(main(), timeout)

    asyncio.run(bounded())


async def server_port(handler: Handler, config: MpaConfig | None = None) -> asyncio.Server:
    return await serve_stream(handler, "127.0.0.1", 0, config=config)


def port_of(server: asyncio.Server) -> int:
    port: int = server.sockets[0].getsockname()[1]
    return port


async def next_ulpdus(
    reader: asyncio.StreamReader, decoder: FpduDecoder, first: bytes = b""
) -> list[bytes]:
    """The ULPDUs of the first read that completes any (``first`` is what
    was read already); the peer closing before that fails the test."""
    ulpdus = [bytes(u) for u in decoder.feed(first)]
    while not ulpdus:
        chunk = await reader.read(4096)
        assert chunk, "the peer closed before a whole FPDU arrived"
        ulpdus = [bytes(u) for u in decoder.feed(chunk)]
    return ulpdus


async def echo(sock: MpaSocket) -> None:
    async for ulpdu in sock:
        sock.send(ulpdu[::-1])
        await sock.drain()


@pytest.mark.parametrize("revision", [0, 1, 2])
def test_delayed_startup_with_a_last_streaming_message(revision: int) -> None:
    """Seed 000 §6.1.4: streaming hello, the Responder's last streaming
    message, then the Initiator's Request; data flows both ways."""
    config = MpaConfig(revision=revision, markers=True)
    seen: list[bytes] = []

    async def responder(stream: MpaStream) -> None:
        assert await stream.readuntil(b"\n") == b"HELLO upgrade to MPA?\n"
        stream.write(b"streaming reply\n")

        def decide(request: RequestReceived) -> Accept:
            seen.append(request.private_data)
            return Accept(b"welcome")

        sock = await stream.start_mpa(Role.RESPONDER, last_streaming=b"SWITCH\n", decide=decide)
        assert sock.params.revision == revision and sock.params.markers_send
        await echo(sock)

    async def main() -> None:
        server = await server_port(responder, config)
        async with server:
            stream = await open_stream("127.0.0.1", port_of(server), config=config)
            stream.write(b"HELLO upgrade to MPA?\n")
            assert await stream.readuntil(b"\n") == b"streaming reply\n"
            assert await stream.readuntil(b"\n") == b"SWITCH\n"
            sock = await stream.start_mpa(Role.INITIATOR, private_data=b"pd")
            assert sock.params.peer_private_data == b"welcome"
            assert sock.params.markers_receive
            for n in (1, 100, 3000):
                payload = bytes(range(256)) * (n // 256) + b"x" * (n % 256)
                sock.send(payload)
                assert await sock.receive() == payload[::-1]
            with pytest.raises(LocalProtocolError):
                stream.write(b"MPA owns the stream now")
            await sock.close()
        assert seen == [b"pd"]

    run(main)


def test_read_ahead_request_and_fpdu_are_not_lost() -> None:
    """A peer that sends its streaming message, the Request and an FPDU in
    one segment: the Responder reads only the streaming message; the rest is
    handed to MPA at the switch."""
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def responder(stream: MpaStream) -> None:
        assert await stream.readexactly(6) == b"HELLO\n"
        sock = await stream.start_mpa(Role.RESPONDER)
        await received.put(await sock.receive() or b"")
        sock.send(b"after the fence")
        await sock.drain()
        await received.put(await sock.receive() or b"")

    async def main() -> None:
        server = await server_port(responder, MpaConfig(revision=1))
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            encoder = FpduEncoder(crc=True)
            request = REQUEST_KEY + bytes([FrameFlags.CRC, 1, 0, 0])
            writer.write(b"HELLO\n" + request + encoder.encode_bytes(b"first FPDU"))
            reply = await reader.readexactly(20)
            assert reply[:16] == REPLY_KEY and reply[17] == 1
            assert await received.get() == b"first FPDU"
            ulpdus = await next_ulpdus(reader, FpduDecoder(crc=True))
            assert ulpdus == [b"after the fence"]
            writer.write(encoder.encode_bytes(b"second"))
            assert await received.get() == b"second"
            writer.close()

    run(main)


def test_unread_hands_octets_back_to_mpa() -> None:
    """An application that read past its switch point gives the octets back."""

    async def responder(stream: MpaStream) -> None:
        data = b""
        while b"\n" not in data:
            data += await stream.read()
        line, _, rest = data.partition(b"\n")
        assert line == b"HELLO"
        stream.unread(rest)
        sock = await stream.start_mpa(Role.RESPONDER)
        await echo(sock)

    async def main() -> None:
        server = await server_port(responder, MpaConfig(revision=1))
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            encoder = FpduEncoder(crc=True)
            request = REQUEST_KEY + bytes([FrameFlags.CRC, 1, 0, 0])
            writer.write(b"HELLO\n" + request + encoder.encode_bytes(b"abc"))
            assert (await reader.readexactly(20))[:16] == REPLY_KEY
            ulpdus = await next_ulpdus(reader, FpduDecoder(crc=True))
            assert ulpdus == [b"cba"]
            writer.close()

    run(main)


def test_delayed_startup_reject() -> None:
    outcome: asyncio.Queue[str] = asyncio.Queue()

    async def responder(stream: MpaStream) -> None:
        await stream.readuntil(b"\n")
        try:
            await stream.start_mpa(Role.RESPONDER, decide=lambda req: Reject(b"not now"))
        except ConnectionRejectedError as exc:
            await outcome.put(f"server: {exc.event.reason}")

    async def main() -> None:
        server = await server_port(responder)
        async with server:
            stream = await open_stream("127.0.0.1", port_of(server))
            stream.write(b"upgrade?\n")
            with pytest.raises(ConnectionRejectedError) as info:
                await stream.start_mpa(Role.INITIATOR)
            assert info.value.private_data == b"not now"
            assert "application" in await outcome.get()
            with pytest.raises(LocalProtocolError):  # MPA starts once
                await stream.start_mpa(Role.INITIATOR)

    run(main)


def test_streaming_end_of_stream() -> None:
    async def responder(stream: MpaStream) -> None:
        stream.write(b"partial")

    async def main() -> None:
        server = await server_port(responder)
        async with server:
            stream = await open_stream("127.0.0.1", port_of(server))
            with pytest.raises(asyncio.IncompleteReadError) as info:
                await stream.readuntil(b"\n")
            assert info.value.partial == b"partial"
            assert await stream.read() == b""
            await stream.close()

    run(main)


def test_culley02_directions_start_at_their_own_points() -> None:
    """Seed 002 §8.1: each side frames its sending direction after its own
    streaming message; markers and CRC are on; data flows both ways."""

    async def responder(stream: MpaStream) -> None:
        assert await stream.readuntil(b"\n") == b"client frames from here\n"
        sock = await stream.start_framed(send=False, receive=True)
        assert await sock.receive() == b"framed from the client"
        with pytest.raises(LocalProtocolError):
            sock.send(b"not yet: our direction is still streaming")
        stream.write(b"server frames from here\n")
        again = await stream.start_framed(send=True, receive=False)
        assert again is sock
        sock.send(b"framed from the server")
        await echo(sock)

    async def main() -> None:
        server = await server_port(responder)
        async with server:
            stream = await open_stream("127.0.0.1", port_of(server))
            stream.write(b"client frames from here\n")
            sock = await stream.start_framed(send=True, receive=False)
            params = sock.params
            assert params.markers_send and params.markers_receive and params.crc
            sock.send(b"framed from the client")
            assert await stream.readuntil(b"\n") == b"server frames from here\n"
            await stream.start_framed(receive=True, send=False)
            assert await sock.receive() == b"framed from the server"
            big = bytes(range(256)) * 20  # several markers inside one FPDU
            sock.send(big)
            assert await sock.receive() == big[::-1]
            await sock.close()

    run(main)


def test_culley02_wire_format_and_read_ahead() -> None:
    """Against a hand-made peer: our first framed octets are a zero marker
    (seed 002 §8.1), and an FPDU that arrives in the same segment as the
    streaming message before it is decoded after the switch."""

    async def responder(stream: MpaStream) -> None:
        assert await stream.readuntil(b"GO\n") == b"GO\n"
        sock = await stream.start_framed()
        assert await sock.receive() == b"in the same segment"
        sock.send(b"reply")
        await sock.drain()
        assert await sock.receive() is None  # the peer closed

    async def main() -> None:
        server = await server_port(responder)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            sock_obj = writer.get_extra_info("socket")
            sock_obj.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            encoder = FpduEncoder(markers=True, crc=True)
            writer.write(b"GO\n" + encoder.encode_bytes(b"in the same segment"))
            data = await reader.readexactly(4)
            assert data == bytes(4)  # marker at stream offset 0, FPDUPTR 0
            ulpdus = await next_ulpdus(reader, FpduDecoder(markers=True, crc=True), data)
            assert ulpdus == [b"reply"]
            writer.close()
            await writer.wait_closed()

    run(main)
