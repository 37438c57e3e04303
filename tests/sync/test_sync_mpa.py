"""The blocking MPA socket: against itself and against the asyncio adapter, both ways."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Iterator

import pytest

import iwarp.asyncio.mpa as aio
from iwarp.errors import LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import RequestReceived
from iwarp.sync import WaitTimeoutError, mpa

T = 10.0
CONFIGS = [MpaConfig(), MpaConfig(crc=False, markers=True)]
SIZES = [0, 1, 1000, 30_000, 64_768]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread, for the asyncio end."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop

    async def finish() -> None:  # the servers' connection tasks end before the loop
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), T)

    asyncio.run_coroutine_threadsafe(finish(), loop).result(T + 1)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(T)
    loop.close()


@pytest.mark.parametrize("config", CONFIGS, ids=["crc", "markers"])
def test_sync_client_and_asyncio_server(loop: asyncio.AbstractEventLoop, config: MpaConfig) -> None:
    async def echo(sock: aio.MpaSocket) -> None:
        async for ulpdu in sock:
            sock.send(ulpdu[::-1])
            await sock.drain()

    async def start() -> int:
        server = await aio.serve(echo, "127.0.0.1", 0, config=config)
        return int(server.sockets[0].getsockname()[1])

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(T)
    with mpa.connect("127.0.0.1", port, config=config, private_data=b"hi", timeout=T) as sock:
        assert sock.params.markers_send == config.markers and sock.params.crc == config.crc
        for size in SIZES:
            data = os.urandom(size)
            sock.send(data, timeout=T)
            assert sock.receive(timeout=T) == data[::-1]
        sock.send_many([b"a", b"bc", b"def"], timeout=T)
        assert [sock.receive(timeout=T) for _ in range(3)] == [b"a", b"cb", b"fed"]


@pytest.mark.parametrize("config", CONFIGS, ids=["crc", "markers"])
def test_asyncio_client_and_sync_server(config: MpaConfig) -> None:
    requests: list[bytes] = []

    def decide(request: RequestReceived) -> aio.Accept:
        requests.append(request.private_data)
        return aio.Accept(b"welcome")

    with mpa.listen("127.0.0.1", 0, config=config, decide=decide) as listener:

        def serve() -> None:
            with listener.accept(timeout=T) as sock:
                for ulpdu in sock:
                    sock.send(ulpdu[::-1], timeout=T)

        thread = threading.Thread(target=serve)
        thread.start()

        async def client() -> list[bytes | None]:
            sock = await aio.connect(
                "127.0.0.1", listener.port, config=config, private_data=b"hello"
            )
            assert sock.params.peer_private_data == b"welcome"
            got: list[bytes | None] = []
            for size in SIZES:
                sock.send(bytes([size % 251]) * size)
                got.append(await sock.receive())
            await sock.close()
            return got

        got = asyncio.run(asyncio.wait_for(client(), T))
        thread.join(T)
    assert got == [bytes([size % 251]) * size for size in SIZES]
    assert requests == [b"hello"]


def test_receive_ends_with_none_after_the_peer_closes() -> None:
    with mpa.listen("127.0.0.1", 0) as listener:

        def serve() -> None:
            with listener.accept(timeout=T) as sock:
                assert sock.receive(timeout=T) == b"first"
            # leaving the block closes: FIN

        thread = threading.Thread(target=serve)
        thread.start()
        with mpa.connect("127.0.0.1", listener.port, timeout=T) as sock:
            sock.send(b"first")  # lifts the Responder's fence
            assert sock.receive(timeout=T) is None
        thread.join(T)


def test_a_reject_carries_the_private_data() -> None:
    with mpa.listen("127.0.0.1", 0, decide=lambda request: aio.Reject(b"go away")) as listener:
        failures: list[BaseException] = []

        def serve() -> None:
            try:
                listener.accept(timeout=T)
            except aio.ConnectionRejectedError as exc:
                failures.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        with pytest.raises(aio.ConnectionRejectedError) as info:
            mpa.connect("127.0.0.1", listener.port, timeout=T)
        assert info.value.private_data == b"go away"
        thread.join(T)
        assert len(failures) == 1


def test_timeouts_and_misuse() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent, pytest.raises(WaitTimeoutError):
        mpa.connect("127.0.0.1", silent.getsockname()[1], timeout=0.2)
    with pytest.raises(LocalProtocolError):
        mpa.connect("127.0.0.1", 1, private_data=bytes(600))  # before any connection
    with mpa.listen("127.0.0.1", 0) as listener:
        with pytest.raises(WaitTimeoutError):
            listener.accept(timeout=0.1)
        thread = threading.Thread(target=lambda: listener.accept(timeout=T).abort())
        thread.start()
        sock = mpa.connect("127.0.0.1", listener.port, timeout=T)
        thread.join(T)
        with pytest.raises(MpaError):  # the peer's RST
            sock.receive(timeout=T)
        sock.close()
        with pytest.raises(LocalProtocolError):
            sock.send(b"after close")


def test_stream_reads_time_out_without_losing_octets() -> None:
    with mpa.listen("127.0.0.1", 0) as listener:
        stream = mpa.open_stream("127.0.0.1", listener.port, timeout=T)
        with listener.accept_stream(timeout=T) as peer:
            with pytest.raises(WaitTimeoutError):
                stream.readuntil(b"\n", timeout=0.1)
            peer.write(b"par", timeout=T)
            with pytest.raises(WaitTimeoutError):
                stream.readuntil(b"\n", timeout=0.1)
            peer.write(b"tial\nrest", timeout=T)
            assert stream.readuntil(b"\n", timeout=T) == b"partial\n"
            assert stream.readexactly(4, timeout=T) == b"rest"
        with pytest.raises(mpa.IncompleteReadError) as info:  # the peer closed
            stream.readexactly(1, timeout=T)
        assert info.value.partial == b"" and info.value.expected == 1
        assert stream.read(timeout=T) == b""
        stream.close()


def test_fallback_to_rev1_against_an_unenhanced_asyncio_responder(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """RFC 6581 §10: a Rev 1 Responder closes on a Rev 2 Request; the blocking
    Initiator retries once, on a new connection, as Rev 1."""
    failures: list[BaseException] = []

    async def echo(sock: aio.MpaSocket) -> None:
        async for ulpdu in sock:
            sock.send(ulpdu)
            await sock.drain()

    async def start() -> int:
        server = await aio.serve(
            echo,
            "127.0.0.1",
            0,
            config=MpaConfig(revision=1),
            on_failure=lambda error, peer: failures.append(error),
        )
        return int(server.sockets[0].getsockname()[1])

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(T)
    with pytest.raises(MpaError) as info:
        mpa.connect("127.0.0.1", port, timeout=T)
    assert info.value.code == 1
    with mpa.connect("127.0.0.1", port, fallback_to_rev1=True, timeout=T) as sock:
        assert sock.params.revision == 1 and not sock.params.enhanced
        sock.send(b"after fallback", timeout=T)
        assert sock.receive(timeout=T) == b"after fallback"
    assert [e.code for e in failures if isinstance(e, MpaError)] == [4, 4]
