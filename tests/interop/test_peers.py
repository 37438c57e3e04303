"""The iwarp peers for librdmacm examples, against each other over loopback."""

from __future__ import annotations

import asyncio
import socket

import pytest

from iwarp.asyncio.rdma import connect
from iwarp.interop.peers import PeerResult, echo_server, ucmatose_client, ucmatose_server
from iwarp.mpa.config import MpaConfig


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _pair(client_config: MpaConfig, timeout: float) -> tuple[PeerResult, PeerResult]:
    port = _port()
    server = asyncio.create_task(
        ucmatose_server("127.0.0.1", port, connections=4, count=3, size=100, timeout=timeout)
    )
    await asyncio.sleep(0.2)
    client = await ucmatose_client(
        "127.0.0.1", port, connections=4, count=3, size=100, config=client_config,
        timeout=timeout, stagger=0.01,
    )  # fmt: skip
    return client, await server


def test_ucmatose_exchange_with_peer_to_peer() -> None:
    client, server = asyncio.run(
        asyncio.wait_for(_pair(MpaConfig(peer_to_peer=True), timeout=10), 20)
    )
    assert client.ok and server.ok, (client, server)
    assert (client.connections, client.sent, client.received) == (4, 12, 12)
    assert (server.connections, server.sent, server.received) == (4, 12, 12)


@pytest.mark.slow
def test_ucmatose_server_cannot_send_first_without_rtr() -> None:
    # RFC 5044 §7.1.2: the Responder waits for the Initiator's first FPDU;
    # ucmatose's server speaks first, so without an RTR nothing moves.
    client, server = asyncio.run(asyncio.wait_for(_pair(MpaConfig(), timeout=1.5), 20))
    assert not client.ok and not server.ok
    assert server.sent == 0 and client.received == 0


def test_echo_server_sends_the_message_back() -> None:
    async def run() -> tuple[bytes, PeerResult]:
        port = _port()
        server = asyncio.create_task(echo_server("127.0.0.1", port, messages=1, timeout=10))
        await asyncio.sleep(0.2)
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        await qp.send(b"rdma_client says")
        echoed = await qp.receive()
        await qp.close()
        return echoed, await server

    echoed, result = asyncio.run(asyncio.wait_for(run(), 20))
    assert echoed == b"rdma_client says"
    assert result.ok and (result.received, result.sent) == (1, 1)
