"""The asyncio queue pair's ``timeout=``: the keywords of iwarp.sync and the
same WaitTimeoutError; connect errors that name the address and the reason."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

import iwarp
import iwarp.asyncio as aio
import iwarp.sync as blocking
from iwarp.errors import MpaError, MpaErrorCode, WaitTimeoutError

T = 0.2


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def handler(qp: aio.QueuePair) -> None:
        await qp.closed

    server = await aio.serve(handler, "127.0.0.1", 0, receive_buffers=1)
    return server, server.sockets[0].getsockname()[1]


def test_receive_and_a_completion_wait_time_out_as_in_iwarp_sync() -> None:
    async def main() -> None:
        server, port = await _echo_server()
        qp = await aio.connect("127.0.0.1", port, receive_buffers=1, timeout=5)
        with pytest.raises(WaitTimeoutError, match="a message"):
            await qp.receive(timeout=T)
        with pytest.raises(TimeoutError):  # also a TimeoutError, as in iwarp.sync
            await qp.send_cq.wait(timeout=T)
        await qp.send(b"still usable", timeout=T)
        await qp.flush(timeout=5)
        await qp.close(timeout=5)
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_connect_timeout_bounds_mpa_startup() -> None:
    """A TCP listener that never answers the MPA Request."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]

        async def main() -> None:
            with pytest.raises(WaitTimeoutError, match=f"127.0.0.1:{port}"):
                await aio.connect("127.0.0.1", port, timeout=T)

        asyncio.run(main())


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_connect_errors_name_the_address_and_the_reason_on_both_adapters() -> None:
    port = _closed_port()
    expected = (
        f"cannot connect to 127.0.0.1:{port}: connection refused: nothing listens on that port"
    )
    with pytest.raises(ConnectionRefusedError) as blocking_error:
        blocking.connect("127.0.0.1", port, timeout=5)

    async def main() -> None:
        with pytest.raises(ConnectionRefusedError) as asyncio_error:
            await aio.connect("127.0.0.1", port, timeout=5)
        assert asyncio_error.value.strerror == expected

    asyncio.run(main())
    assert blocking_error.value.strerror == expected


@pytest.mark.parametrize(
    "name",
    [
        "AtomicsNotSupportedError",
        "CompareSwapWR",
        "FetchAddWR",
        "ImmediateData",
        "ImmediateWR",
        "ReadWR",
        "SendWR",
        "WaitTimeoutError",
        "WorkOpcode",
        "WriteWR",
    ],
)
def test_every_verbs_type_is_on_both_faces_and_iwarp(name: str) -> None:
    assert getattr(aio, name) is getattr(blocking, name) is getattr(iwarp, name)
    assert name in dir(iwarp) and name in dir(aio) and name in dir(blocking)


def test_a_failed_mpa_startup_names_the_peer_on_both_adapters() -> None:
    """A TCP server that closes at once (FIN) instead of answering the MPA Request."""
    with socket.socket() as closer:
        closer.bind(("127.0.0.1", 0))
        closer.listen()
        port = closer.getsockname()[1]

        def close_two() -> None:
            for _ in range(2):
                conn, _ = closer.accept()
                with conn:  # FIN, then read to the client's close: never a reset
                    conn.settimeout(5)
                    conn.shutdown(socket.SHUT_WR)
                    while conn.recv(4096):
                        pass

        thread = threading.Thread(target=close_two, daemon=True)
        thread.start()
        with pytest.raises(MpaError) as blocking_error:
            blocking.connect("127.0.0.1", port, timeout=5)

        async def main() -> MpaError:
            with pytest.raises(MpaError) as asyncio_error:
                await aio.connect("127.0.0.1", port, timeout=5)
            return asyncio_error.value

        asyncio_value = asyncio.run(main())
        thread.join(5)
    for error in (blocking_error.value, asyncio_value):
        assert error.code == MpaErrorCode.TCP_CLOSED
        assert str(error).endswith(f"(peer 127.0.0.1:{port})")
