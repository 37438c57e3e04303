"""Bad peers over real loopback sockets: every one ends in a clean close
with the RFC 5044 §8 code, within the configured timeouts, while the
server keeps serving a well-behaved client at the same time."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from iwarp.asyncio.mpa import MpaSocket, connect, serve
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.wire import REPLY_KEY, REQUEST_KEY

TIMEOUTS = {"request_timeout": 0.6, "frame_timeout": 0.4, "reply_timeout": 0.6}
SERVER_CONFIG = MpaConfig(private_data_limit=256, **TIMEOUTS)  # type: ignore[arg-type]
SLACK = 1.0


def header(key: bytes = REQUEST_KEY, flags: int = 0x40, rev: int = 1, pd_length: int = 0) -> bytes:
    return key + struct.pack(">BBH", flags, rev, pd_length)


async def send_all(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def trickle(writer: asyncio.StreamWriter, data: bytes) -> None:
    for i in range(len(data)):  # a slow sender: one octet every 0.15 s
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0.15)


async def fin_after(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    writer.write_eof()
    await writer.drain()


async def rst_after(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()
    await asyncio.sleep(0.05)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def silent(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send nothing: only the other end's timeout can end the connection."""


Behaviour = Callable[[asyncio.StreamWriter, bytes], Coroutine[Any, Any, None]]

BAD_REQUESTS: dict[str, tuple[Behaviour, bytes, int, float]] = {
    # name: (behaviour, octets, expected code, expected time bound)
    "wrong key": (send_all, b"MPA ID Req Fxame" + bytes(4), 4, 0),
    "unknown revision": (send_all, header(rev=3), 4, 0),
    "PD_Length over the limit": (send_all, header(pd_length=257), 4, 0),
    "PD over 512 at any limit": (send_all, header(pd_length=513) + bytes(513), 4, 0),
    "S bit with short PD": (send_all, header(flags=0x50, rev=2, pd_length=2) + b"ab", 4, 0),
    "garbage": (send_all, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 4, 0),
    "both Responders": (send_all, header(REPLY_KEY), 4, 0),
    "truncated frame then FIN": (fin_after, header(pd_length=100) + bytes(50), 1, 0),
    "close mid-key": (fin_after, REQUEST_KEY[:7], 1, 0),
    "slow sender": (trickle, header(pd_length=8) + bytes(8), 4, 0.4),
    "silent peer": (silent, b"", 1, 0.6),
    "RST mid-frame": (rst_after, REQUEST_KEY[:12], 1, 0),
}


async def good_client(port: int, rounds: int) -> int:
    sock = await connect("127.0.0.1", port, private_data=b"good")
    for i in range(rounds):
        sock.send(i.to_bytes(4, "big") * 100)
        assert await sock.receive() == i.to_bytes(4, "big") * 100
        await asyncio.sleep(0.01)
    await sock.close()
    return rounds


async def echo(sock: MpaSocket) -> None:
    async for ulpdu in sock:
        sock.send(ulpdu)
        await sock.drain()


def test_bad_initiators_are_closed_with_the_right_code() -> None:
    async def main() -> None:
        failures: dict[object, BaseException] = {}

        def on_failure(error: BaseException, peer: object) -> None:
            failures[peer] = error

        server = await serve(echo, "127.0.0.1", 0, config=SERVER_CONFIG, on_failure=on_failure)
        port = server.sockets[0].getsockname()[1]

        async def bad(name: str) -> tuple[str, object, float, bool]:
            behaviour, data, _, _ = BAD_REQUESTS[name]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            peer = writer.get_extra_info("sockname")
            start = time.monotonic()
            sender = asyncio.create_task(behaviour(writer, data))
            try:
                closed_by_server = await reader.read() == b""  # EOF: the server closed
            except ConnectionResetError:
                closed_by_server = True
            elapsed = time.monotonic() - start
            sender.cancel()
            writer.transport.abort()
            return name, peer, elapsed, closed_by_server

        try:
            good = asyncio.create_task(good_client(port, 60))
            results = await asyncio.gather(*(bad(name) for name in BAD_REQUESTS))
            assert await good == 60  # served all along
            await asyncio.sleep(0.1)
            for name, peer, elapsed, closed in results:
                _, _, code, bound = BAD_REQUESTS[name]
                error = failures.get(peer)
                assert isinstance(error, MpaError), (name, failures)
                assert error.code == code, (name, error)
                assert error.message, name
                if name != "RST mid-frame":
                    assert closed, name
                    assert elapsed < bound + SLACK, (name, elapsed)
                    assert elapsed >= bound * 0.9, (name, elapsed)
            # Still serving after all of it.
            assert await good_client(port, 3) == 3
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 20))


# --- bad Responders: what connect() reports ---------------------------------------

BAD_REPLIES: dict[str, tuple[Behaviour, bytes, int]] = {
    "wrong key": (send_all, b"MPA ID Rep Fxame" + bytes(4), 4),
    "both Initiators": (send_all, header(REQUEST_KEY), 4),
    "unknown revision": (send_all, header(REPLY_KEY, rev=9), 4),
    "revision above the Request's": (send_all, header(REPLY_KEY, rev=2), 4),
    "garbage": (send_all, b"\x00" * 40, 4),
    "truncated then FIN": (fin_after, header(REPLY_KEY, pd_length=9) + b"abc", 1),
    "RST": (rst_after, header(REPLY_KEY)[:5], 1),
    "slow sender": (trickle, header(REPLY_KEY), 4),
    "silent": (silent, b"", 1),
}


@pytest.mark.parametrize("name", list(BAD_REPLIES))
def test_bad_responders(name: str) -> None:
    behaviour, data, code = BAD_REPLIES[name]
    config = MpaConfig(revision=1, **TIMEOUTS)  # type: ignore[arg-type]

    async def main() -> None:
        closed = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(20)  # the Request
            sender = asyncio.create_task(behaviour(writer, data))
            try:
                eof = await reader.read() == b""
            except ConnectionResetError:
                eof = True
            sender.cancel()
            closed.set_result(eof)
            writer.transport.abort()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            start = time.monotonic()
            with pytest.raises(MpaError) as info:
                await connect("127.0.0.1", port, config=config)
            assert info.value.code == code, info.value
            assert time.monotonic() - start < 0.6 + SLACK
            if name != "RST":
                assert await asyncio.wait_for(closed, 2)  # we closed the connection
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))
