"""The blocking VI/TCP endpoint: every operation, discriminator matching, and
the asyncio adapter on the other end, both ways."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

import iwarp.asyncio.vitcp as aio
from iwarp.sync import WaitTimeoutError, vitcp
from iwarp.vitcp.config import VitcpConfig
from iwarp.vitcp.events import RdmaReadServed, RdmaWriteReceived, ViCompletionStatus
from iwarp.vitcp.wire import Reliability

T = 10.0
SIZES = [0, 1, 999, 1000, 1001, 70_000]


@pytest.mark.parametrize("level", list(Reliability))
@pytest.mark.parametrize("crc", [False, True])
def test_every_operation_sync_to_sync(level: Reliability, crc: bool) -> None:
    config = VitcpConfig(reliability=level, crc=crc, mtu=1000)
    errors: list[BaseException] = []
    with vitcp.VitcpListener("127.0.0.1", 0, config=config) as listener:

        def serve() -> None:
            try:
                with listener.accept(b"t", keep_posted=8, timeout=T) as vi:
                    region = vi.register(bytearray(max(SIZES)))
                    vi.send(region.handle.to_bytes(4, "big") + region.address.to_bytes(8, "big"))
                    for size in SIZES:
                        message = vi.receive(timeout=T)
                        assert message.immediate_data == size and len(message.data) == size
                        notice = vi.next_notice(timeout=T)
                        while isinstance(notice, RdmaReadServed):  # the previous round's Read
                            notice = vi.next_notice(timeout=T)
                        assert isinstance(notice, RdmaWriteReceived) and notice.length == size
                        vi.send(bytes(region.view[:size]), timeout=T)
                    vi.wait_closed(timeout=T)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        with vitcp.connect(
            "127.0.0.1", listener.port, b"t", config=config, keep_posted=8, timeout=T
        ) as vi:
            assert vi.params.crc == crc and vi.params.mtu == 1000
            advert = vi.receive(timeout=T).data
            handle, address = int.from_bytes(advert[:4], "big"), int.from_bytes(advert[4:], "big")
            local = vi.register(bytearray(max(SIZES)))
            for size in SIZES:
                data = bytes([size % 256]) * size
                done = vi.send(data, immediate=size, timeout=T)
                assert done.status is ViCompletionStatus.SUCCESS
                vi.rdma_write(data, remote_address=address, memory_handle=handle, timeout=T)
                assert vi.receive(timeout=T).data == data  # the server's copy of its region
                if level is not Reliability.UNRELIABLE:
                    read = vi.rdma_read(
                        local=local,
                        remote_address=address,
                        memory_handle=handle,
                        length=size,
                        timeout=T,
                    )
                    assert read.status is ViCompletionStatus.SUCCESS
                    assert bytes(local.view[:size]) == data
        thread.join(T)
    assert errors == []


def test_other_discriminators_get_no_match_while_accept_waits() -> None:
    with vitcp.VitcpListener("127.0.0.1", 0) as listener:
        result: list[bytes] = []

        def serve() -> None:
            with listener.accept(b"wanted", keep_posted=1, timeout=T) as vi:
                result.append(vi.receive(timeout=T).data)

        thread = threading.Thread(target=serve)
        thread.start()
        with pytest.raises(vitcp.VitcpRejectedError) as info:
            vitcp.connect("127.0.0.1", listener.port, b"other", timeout=T)
        assert info.value.no_match
        with vitcp.connect("127.0.0.1", listener.port, b"wanted", timeout=T) as vi:
            vi.send(b"found you", timeout=T)
        thread.join(T)
        assert result == [b"found you"]
        with pytest.raises(WaitTimeoutError):
            listener.accept(b"nobody", timeout=0.1)


def test_sync_client_and_asyncio_listener() -> None:
    async def main() -> None:
        listener = await aio.VitcpListener.start("127.0.0.1", 0)

        async def reverse(ep: aio.VitcpEndpoint) -> None:
            while True:
                try:
                    message = await ep.receive()
                except aio.VitcpClosedError:
                    return
                await ep.send(message.data[::-1])

        listener.serve(b"rev", reverse, keep_posted=4)

        def client() -> list[bytes]:
            with vitcp.connect("127.0.0.1", listener.port, b"rev", keep_posted=4, timeout=T) as vi:
                out = []
                for size in SIZES:
                    vi.send(bytes(range(256)) * (size // 256) + b"x" * (size % 256), timeout=T)
                    out.append(vi.receive(timeout=T).data)
                return out

        got = await asyncio.to_thread(client)
        assert [len(g) for g in got] == SIZES and got[2].startswith(b"x")
        await listener.close()

    asyncio.run(asyncio.wait_for(main(), T))


def test_asyncio_client_and_sync_listener() -> None:
    with vitcp.VitcpListener("127.0.0.1", 0) as listener:

        def serve() -> None:
            with listener.accept(b"sync", keep_posted=4, timeout=T) as vi:
                for _ in SIZES:
                    vi.send(vi.receive(timeout=T).data[::-1], timeout=T)
                vi.wait_closed(timeout=T)

        thread = threading.Thread(target=serve)
        thread.start()

        async def client() -> list[bytes]:
            ep = await aio.connect("127.0.0.1", listener.port, b"sync", keep_posted=4)
            out = []
            for size in SIZES:
                await ep.send(b"ab" * (size // 2) + b"c" * (size % 2))
                out.append((await ep.receive()).data)
            await ep.close()
            return out

        got = asyncio.run(asyncio.wait_for(client(), T))
        thread.join(T)
    assert got == [(b"ab" * (s // 2) + b"c" * (s % 2))[::-1] for s in SIZES]


def test_peer_to_peer_retries_until_the_peer_waits() -> None:
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError as exc:  # pragma: no cover - hosts without 127.0.0.2
        pytest.skip(f"no second loopback address: {exc}")
    config = VitcpConfig(connect_timeout=5.0)
    with (
        vitcp.VitcpListener("127.0.0.2", 0) as high,
        vitcp.VitcpListener("127.0.0.1", 0) as low,
    ):
        got: list[vitcp.VitcpEndpoint] = []

        def active() -> None:  # the higher address connects, meeting NoMatch first
            got.append(
                vitcp.connect_peer(
                    high,
                    "127.0.0.1",
                    low.port,
                    local_discriminator=b"H",
                    remote_discriminator=b"L",
                    config=config,
                    keep_posted=1,
                    timeout=T,
                )
            )

        thread = threading.Thread(target=active)
        thread.start()
        time.sleep(0.2)
        assert thread.is_alive()  # still retrying: nobody waits yet
        passive = vitcp.connect_peer(
            low,
            "127.0.0.2",
            high.port,
            local_discriminator=b"L",
            remote_discriminator=b"H",
            config=config,
            keep_posted=1,
            timeout=T,
        )
        thread.join(T)
        (a,) = got
        assert a.connection.role.value == "active" and passive.connection.role.value == "passive"
        a.send(b"peer", timeout=T)
        assert passive.receive(timeout=T).data == b"peer"
        a.close()
        passive.close()


def test_a_port_that_closes_every_connection_is_named_as_no_vi_tcp_listener() -> None:
    """TCP accepted and closed without a VI/TCP answer, every time: the
    blocking connect gives up with the asyncio one's message (PeerRetry's)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def close_everything() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=close_everything)
    thread.start()
    try:
        with pytest.raises(vitcp.VitcpClosedError, match=r"is it a VI/TCP listener\?") as raised:
            vitcp.connect(
                "127.0.0.1",
                server.getsockname()[1],
                b"svc",
                config=VitcpConfig(connect_timeout=0.5),
                timeout=T,
            )
    finally:
        stop.set()
        thread.join()
        server.close()
    assert "closed the TCP connection without a VI/TCP answer" in str(raised.value)
