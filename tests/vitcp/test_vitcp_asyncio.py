"""VI/TCP over real loopback sockets: the asyncio adapter and the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

import iwarp.asyncio.vitcp as aio
import iwarp.cli.vitcp as cli_vitcp
import iwarp.sockets
from iwarp.asyncio.vitcp import (
    VitcpClosedError,
    VitcpEndpoint,
    VitcpListener,
    VitcpRejectedError,
    connect,
    connect_peer,
)
from iwarp.cli import main
from iwarp.cli.vitcp import payload
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.events import (
    ConnectionRequested,
    RdmaReadServed,
    RdmaWriteReceived,
    SendCompleted,
    ViCompletionStatus,
)
from iwarp.vitcp.wire import Reliability

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def pair(
    active: VitcpConfig, passive: VitcpConfig, discriminator: bytes = b"t"
) -> tuple[VitcpListener, VitcpEndpoint, VitcpEndpoint]:
    listener = await VitcpListener.start("127.0.0.1", 0, config=passive)
    server = asyncio.create_task(listener.accept(discriminator, keep_posted=8))
    client = await connect("127.0.0.1", listener.port, discriminator, config=active)
    return listener, client, await server


SIZES = [0, 1, 999, 1000, 1001, 70_000]


@pytest.mark.parametrize("level", list(Reliability))
@pytest.mark.parametrize("use_crc", [False, True])
@pytest.mark.parametrize("flow", [False, True])
def test_every_operation_over_loopback(level: Reliability, use_crc: bool, flow: bool) -> None:
    async def body() -> None:
        config = VitcpConfig(reliability=level, crc=use_crc, flow_control=flow, mtu=1000)
        listener, client, server = await pair(config, config)
        try:
            assert client.params.crc == use_crc and server.params.mtu == 1000
            remote = server.register(bytearray(max(SIZES)))
            local = client.register(bytearray(max(SIZES)))
            for size in SIZES:
                data = payload(size, size)
                done = await client.send(data, immediate=size)
                assert done.status is ViCompletionStatus.SUCCESS
                message = await server.receive()
                assert (message.data, message.immediate_data) == (data, size)
                await client.rdma_write(
                    data, remote_address=remote.address, memory_handle=remote.handle
                )
                notice = await server.next_notice()
                assert isinstance(notice, RdmaWriteReceived) and notice.length == size
                assert bytes(remote.view[:size]) == data
                if level is Reliability.UNRELIABLE:
                    continue  # RDMA Read needs a reliable VI [VIAR]
                remote.view[:size] = data[::-1]
                read = await client.rdma_read(
                    local=local,
                    remote_address=remote.address,
                    memory_handle=remote.handle,
                    length=size,
                )
                assert read.status is ViCompletionStatus.SUCCESS
                assert bytes(local.view[:size]) == data[::-1]
                (served,) = server.pending_notices()
                assert isinstance(served, RdmaReadServed) and served.length == size
            # The other direction too.
            client.post_receive(1)
            await server.send(b"back")
            assert (await client.receive()).data == b"back"
        finally:
            await client.close()
            assert await server.wait_closed() is not None
            await listener.close()

    run(body())


@pytest.mark.parametrize("use_crc", [False, True])
def test_sixteen_mebibytes(use_crc: bool) -> None:
    async def body() -> None:
        config = VitcpConfig(reliability=Reliability.RECEPTION, crc=use_crc, mtu=65000)
        listener, client, server = await pair(config, config)
        data = os.urandom(16 << 20)
        done = await client.send(data)
        assert done.status is ViCompletionStatus.SUCCESS
        assert (await server.receive()).data == data
        if use_crc:  # RDMA Write and Read of 16 MiB too, once
            remote = server.register(bytearray(len(data)))
            local = client.register(bytearray(len(data)))
            await client.rdma_write(
                data, remote_address=remote.address, memory_handle=remote.handle
            )
            assert remote.view == data
            remote.view[:4] = b"read"
            read = await client.rdma_read(
                local=local,
                remote_address=remote.address,
                memory_handle=remote.handle,
                length=len(data),
            )
            assert read.status is ViCompletionStatus.SUCCESS
            assert bytes(local.view[:4]) == b"read" and local.view[4:] == data[4:]
        await client.close()
        await listener.close()

    run(body(), 60)


def test_listener_demultiplexes_by_discriminator() -> None:
    async def body() -> None:
        listener = await VitcpListener.start("127.0.0.1", 0)
        seen: list[tuple[bytes, bytes]] = []

        def handler(name: bytes) -> Callable[[VitcpEndpoint], Awaitable[None]]:
            async def serve(endpoint: VitcpEndpoint) -> None:
                message = await endpoint.receive()
                seen.append((name, message.data))
                await endpoint.send(name)

            return serve

        listener.serve(b"alpha", handler(b"alpha"), keep_posted=2)
        listener.serve(b"beta", handler(b"beta"), keep_posted=2)
        for name in (b"beta", b"alpha", b"beta"):
            client = await connect("127.0.0.1", listener.port, name, keep_posted=2)
            await client.send(b"to " + name)
            assert (await client.receive()).data == name
            await client.close()
        assert sorted(seen) == sorted(
            [(b"alpha", b"to alpha"), (b"beta", b"to beta"), (b"beta", b"to beta")]
        )
        with pytest.raises(VitcpRejectedError) as info:
            await connect("127.0.0.1", listener.port, b"gamma")
        assert info.value.no_match
        await listener.close()

    run(body())


def test_attribute_mismatch_is_rejected() -> None:
    async def body() -> None:
        listener = await VitcpListener.start("127.0.0.1", 0)
        waiting = asyncio.create_task(
            listener.accept(b"r", config=VitcpConfig(reliability=Reliability.RECEPTION))
        )
        await asyncio.sleep(0)
        with pytest.raises(VitcpRejectedError) as info:
            await connect("127.0.0.1", listener.port, b"r")
        assert not info.value.no_match
        with pytest.raises(VitcpRejectedError):
            await waiting
        await listener.close()

    run(body())


def test_connect_failure_and_peer_close() -> None:
    async def body() -> None:
        listener = await VitcpListener.start("127.0.0.1", 0)
        port = listener.port
        server = asyncio.create_task(listener.accept(b"x"))
        client = await connect("127.0.0.1", port, b"x", keep_posted=1)
        vi = await server
        await vi.close()
        with pytest.raises(VitcpClosedError):
            await client.receive()
        with pytest.raises(VitcpClosedError):
            await client.send(b"late")
        await listener.close()
        with pytest.raises(VitcpClosedError, match="setup failed"):
            await connect("127.0.0.1", port, b"x")

    run(body())


def test_peer_to_peer_retries_until_the_peer_waits() -> None:
    async def body() -> None:
        config = VitcpConfig(connect_timeout=5.0)
        high = await VitcpListener.start("127.0.0.2", 0)
        low = await VitcpListener.start("127.0.0.1", 0)
        # The higher address is active: it starts first and meets NoMatch
        # until the lower end waits (§4).
        active = asyncio.create_task(
            connect_peer(
                high,
                "127.0.0.1",
                low.port,
                local_discriminator=b"H",
                remote_discriminator=b"L",
                config=config,
                keep_posted=1,
            )
        )
        await asyncio.sleep(0.2)
        assert not active.done()
        passive = await connect_peer(
            low,
            "127.0.0.2",
            high.port,
            local_discriminator=b"L",
            remote_discriminator=b"H",
            config=config,
            keep_posted=1,
        )
        a = await active
        assert a.connection.role.value == "active" and passive.connection.role.value == "passive"
        await a.send(b"peer")
        assert (await passive.receive()).data == b"peer"
        await a.close()
        await high.close()
        await low.close()

    # Only a missing second loopback address may skip: an OSError from the
    # exchange itself is a failure.
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError as exc:  # pragma: no cover - hosts without 127.0.0.2
        pytest.skip(f"no second loopback address: {exc}")
    run(body())


def test_peer_to_peer_times_out() -> None:
    async def body() -> None:
        low = await VitcpListener.start("127.0.0.1", 0)
        with pytest.raises(VitcpClosedError):
            await connect(
                "127.0.0.1",
                low.port,
                b"nobody",
                config=VitcpConfig(peer_to_peer=True, connect_timeout=0.3),
            )
        await low.close()

    run(body())


@pytest.mark.parametrize("exact", [False, True])
def test_urgent_octet_only_with_an_exact_urgent_pointer(
    monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    monkeypatch.setattr(aio, "urgent_pointer_exact", lambda: exact)

    async def body() -> None:
        listener, client, server = await pair(VitcpConfig(), VitcpConfig(urgent_marker=True))
        assert client.params.urgent_allowed and not server.params.urgent_allowed
        for i in range(3):
            await client.send(b"urgent %d" % i, urgent=True)
            assert (await server.receive()).data == b"urgent %d" % i  # SO_OOBINLINE
        assert client.urgent_sent == (3 if exact else 0)
        client.post_receive(1)
        await server.send(b"never urgent", urgent=True)
        assert (await client.receive()).data == b"never urgent"
        assert server.urgent_sent == 0
        await client.close()
        await listener.close()

    run(body())


def test_urgent_follows_the_kernel_setting() -> None:
    try:
        with open("/proc/sys/net/ipv4/tcp_stdurg") as f:
            expected = f.read().strip() == "1"
    except OSError:
        expected = False
    assert iwarp.sockets.urgent_pointer_exact() is expected


# --- CLI ------------------------------------------------------------------------


def test_cli_listen_and_connect(capsys: pytest.CaptureFixture[str]) -> None:
    ops = ["send", "write", "read"]
    listener = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iwarp",
            "vitcp",
            "listen",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--count",
            str(5 * len(ops)),  # messages over all connections
            "--crc",
            "--reliability",
            "reception",
            "--flow-control",
            "--mtu",
            "4000",
            "--discriminator",
            "cli",
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        ready = json.loads(listener.stdout.readline())
        port = ready["port"]
        for op in ops:
            status = main(
                [
                    "vitcp",
                    "connect",
                    "127.0.0.1",
                    str(port),
                    "--crc",
                    "--reliability",
                    "reception",
                    "--flow-control",
                    "--mtu",
                    "9000",
                    "--discriminator",
                    "cli",
                    "--count",
                    "5",
                    "--size",
                    "10000",
                    "--op",
                    op,
                    "--json",
                ]
            )
            assert status == 0
            summary = json.loads(capsys.readouterr().out)
            assert summary["messages"] == 5 and summary["octets"] == 50000
            assert summary["mtu"] == 4000 and summary["crc"] is True
            peer = summary["peer"]
            assert peer["messages"] == 5 and peer["octets"] == 50000
            expected = hashlib.sha256(b"".join(payload(i + 1, 10000) for i in range(5)))
            # Both ends hash the same data and say what it is.
            if op in ("send", "write"):  # the data sent, or written
                assert summary["sha256"] == peer["sha256"] == expected.hexdigest()
            else:  # what the connector read is what the listener served
                reads = hashlib.sha256(payload(0, 10000) * 5).hexdigest()
                assert summary["sha256"] == peer["sha256"] == reads
            covers = {"send": ("sent", "received"), "write": ("written", "written")}
            assert (summary["sha256_of"], peer["sha256_of"]) == covers.get(op, ("read", "served"))
        out, _ = listener.communicate(timeout=10)
        summaries = [json.loads(line) for line in out.splitlines()]
        assert [s["status"] for s in summaries] == ["ok"] * 3
        assert listener.returncode == 0
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",  # not UTF-8
        b"[1, 2]",  # JSON, but not an object
        b'{"op": "send"}',  # no size
        b'{"op": "send", "size": "10"}',
        b'{"op": "send", "size": true}',
        b'{"op": "send", "size": -1}',
        b'{"op": "send", "size": 1048577}',  # above the listener's --max-size
    ],
)
def test_cli_listener_survives_bad_control_messages(body: bytes) -> None:
    """The control messages come from the network: a bad one ends that
    connection with an error status, never the listener with a traceback,
    and never makes it allocate what the peer names."""

    async def run_body() -> dict[str, Any]:
        config = VitcpConfig(discriminator=b"cli")
        listener, client, server = await pair(config, config, b"cli")
        serving = asyncio.create_task(cli_vitcp._serve_one(server, max_size=1 << 20))
        client.post_receive(1)
        await client.send(body, immediate=cli_vitcp.CONTROL_TAG)
        summary = await serving
        await client.close()
        await listener.close()
        return summary

    summary = run(run_body())
    assert str(summary["status"]).startswith("error: bad control message"), summary


@pytest.mark.parametrize("reply", [b"[1]", b'{"address": 0}', b'{"address": "0", "handle": 1}'])
def test_cli_connector_reports_a_bad_listener_reply(
    capsys: pytest.CaptureFixture[str], reply: bytes
) -> None:
    async def body() -> int:
        listener = await VitcpListener.start("127.0.0.1", 0)

        async def bad_listener() -> None:
            endpoint = await listener.accept(b"iwarp", keep_posted=4)
            await endpoint.receive()  # the connector's request
            await endpoint.send(reply, immediate=cli_vitcp.CONTROL_TAG)
            await endpoint.wait_closed()

        serving = asyncio.create_task(bad_listener())
        argv = ["vitcp", "connect", "127.0.0.1", str(listener.port), "--op", "write"]
        status = await asyncio.to_thread(main, argv)
        await serving
        await listener.close()
        return status

    assert run(body()) == 1
    assert "iwarp vitcp connect: error: " in capsys.readouterr().err


def test_cli_rejects_unknown_discriminator(capsys: pytest.CaptureFixture[str]) -> None:
    async def body() -> int:
        listener = await VitcpListener.start("127.0.0.1", 0)
        port = listener.port
        status = await asyncio.to_thread(
            main, ["vitcp", "connect", "127.0.0.1", str(port), "--discriminator", "zzz"]
        )
        await listener.close()
        return status

    assert run(body()) == 1
    assert "no matching discriminator" in capsys.readouterr().err


def test_tcp_close_while_pending_accept_reconnects() -> None:
    """§4.2 "TCP Closes - Reestablish": the active end sets TCP up again."""

    async def body() -> int:
        connections = 0

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            await reader.readexactly(24)  # the ConnectRequest's header: then hang up
            writer.close()

        server = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(VitcpClosedError, match="without a VI/TCP answer"):
            await connect("127.0.0.1", port, b"x", config=VitcpConfig(connect_timeout=0.5))
        server.close()
        await server.wait_closed()
        return connections

    assert run(body()) >= 2


@pytest.mark.parametrize(
    "first",
    [
        b"\x02\x85" + bytes(22),  # version 2
        b"\x01\x1f" + bytes(22),  # unknown type
        b"\x01\x80\x00\x18" + bytes(20),  # a Send before any ConnectRequest
        b"\x01\x85\x00\x20" + bytes(28),  # ConnectRequest shorter than its CE header
    ],
)
def test_listener_closes_on_malformed_first_segment(first: bytes) -> None:
    async def body() -> bytes:
        listener = await VitcpListener.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(first)
        await writer.drain()
        answer = await reader.read()  # EOF: the listener closed TCP
        writer.close()
        await listener.close()
        return answer

    assert run(body()) == b""


def test_listener_times_out_silent_connections() -> None:
    async def body() -> bytes:
        listener = await VitcpListener.start(
            "127.0.0.1", 0, config=VitcpConfig(incoming_timeout=0.2)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        answer = await reader.read()  # §4.3 Incoming: timeout - close TCP connection
        writer.close()
        await listener.close()
        return answer

    assert run(body(), 5) == b""


LISTEN = [sys.executable, "-m", "iwarp", "vitcp", "listen"]


def test_cli_attribute_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    listener = subprocess.Popen(
        [*LISTEN, "--port", "0", "--count", "1", "--json", "--reliability", "reception"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        port = json.loads(listener.stdout.readline())["port"]
        status = main(["vitcp", "connect", "127.0.0.1", str(port), "--reliability", "delivery"])
        assert status == 1
        assert "connection rejected" in capsys.readouterr().err
        # The listener keeps serving until its one message arrives, then
        # exits non-zero because a connection was rejected on the way.
        status = main(["vitcp", "connect", "127.0.0.1", str(port), "--reliability", "reception"])
        assert status == 0
        out, _ = listener.communicate(timeout=10)
        assert [json.loads(line)["status"] for line in out.splitlines()] == ["rejected", "ok"]
        assert listener.returncode == 1
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


def test_docs_asyncio_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "vitcp.md"
    block = re.findall(r"```python\n(.*?)\n```", docs.read_text(encoding="utf-8"), re.S)[1]
    source = "async def example():\n" + "".join(f"    {line}\n" for line in block.splitlines())
    namespace: dict[str, Any] = {"asyncio": asyncio}
    exec(compile(source, "docs/vitcp.md", "exec"), namespace)
    run(namespace["example"]())
    assert "b'hello'" in capsys.readouterr().out


def test_keep_posted_descriptors_are_there_before_the_first_message() -> None:
    """A passive end may send a message right behind its ConnectAccept, in the
    same TCP segment: the active end's ``keep_posted`` descriptors must be
    posted before the connection is up, or that Send finds none (§3.1)."""

    async def passive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        core = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
        core.tcp_accepted(loop.time())
        requested = False
        while not requested:
            chunk = await reader.read(65536)
            assert chunk, "the active end closed before its ConnectRequest"
            events = core.receive_data(chunk, loop.time())
            requested = any(isinstance(e, ConnectionRequested) for e in events)
        assert core.match()
        core.accept()
        core.send(b"right behind the accept")
        writer.write(b"".join(bytes(b) for b in core.data_to_send()))  # one segment
        await writer.drain()
        await reader.read()  # until the active end closes
        writer.close()

    async def body() -> None:
        server = await asyncio.start_server(passive, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = await connect("127.0.0.1", port, b"", keep_posted=1)
            try:
                message = await asyncio.wait_for(client.receive(), 10)
                assert bytes(message.data) == b"right behind the accept"
            finally:
                await client.close()

    run(body())


def test_several_calls_wait_on_one_vi_at_once() -> None:
    """Sends posted without waiting, a receive and a notice wait side by
    side: each call wakes when what it waits for is there."""

    async def body() -> None:
        listener, client, server = await pair(VitcpConfig(), VitcpConfig())
        try:
            futures = [client.send_nowait(b"m%d" % i) for i in range(5)]
            receives = asyncio.gather(*(server.receive() for _ in range(5)))
            done = await asyncio.gather(*futures)
            sends = [event for event in done if isinstance(event, SendCompleted)]
            assert len(sends) == 5 and all(s.status is ViCompletionStatus.SUCCESS for s in sends)
            numbers = [event.message_number for event in sends]
            assert numbers == sorted(numbers) and len(set(numbers)) == 5
            assert [m.data for m in await receives] == [b"m%d" % i for i in range(5)]
        finally:
            await client.close()
            assert await server.wait_closed() is not None
            await listener.close()

    run(body())
