"""A peer that half-closes still gets every answer its last FPDUs caused.

A peer may send its last FPDUs and its FIN together and go on reading
(RFC 5044 §7.2 leaves the other half open). Whatever those FPDUs caused
must reach it before our FIN: the Terminate for a hostile FPDU (RFC 5040
§5.4) and the whole Read Response for a Read Request. Both adapters, with
the receive lane on (a bulk transfer first) and off; the suite runs again
with ``IWARP_NO_ACCEL=1`` (the pure twin) and ``IWARP_NO_RECEIVE_LANE=1``.
The peer here is a bare core (:class:`QueuePairEndpoint`) on a blocking
socket, which sends exactly what the test says and then shuts its write
side.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import pytest

import iwarp.asyncio as aio
import iwarp.sync as blocking
from iwarp._crc32c import crc32c
from iwarp.ddp.wire import LAST_FLAG, UNTAGGED_HEADER
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.wire import CRC_FIELD, MARKER, ULPDU_LENGTH
from iwarp.rdma import lanes
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.events import Ended, Established, WorkFinished
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control
from iwarp.rdmap.work import CompletionStatus, ReadWR, SendWR, Sge, WriteWR

T = 30.0
BULK = 2 << 20
REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
BAD_STAG = 0x00DEAD00
SEND = rdmap_control(RdmapOpcode.SEND, 1)


class Peer:
    """The client: a bare queue pair core on a blocking socket."""

    def __init__(self, port: int, config: MpaConfig) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=T)
        self.pd = ProtectionDomain()
        self.core = QueuePairEndpoint(Role.INITIATOR, self.pd, config, now=time.monotonic())
        self.events: list[Any] = []
        self._send()
        while not any(isinstance(e, Established) for e in self.events):
            data = self.sock.recv(1 << 16)
            assert data, "the server closed during startup"
            self.events += self.core.receive_data(data, time.monotonic())
            self._send()

    def _send(self) -> None:
        while True:
            chunks = self.core.data_to_send()
            for chunk in chunks:
                self.sock.sendall(chunk)
            self.events += self.core.take_events()
            if not self.core.has_data_to_send:
                return

    def post_and_half_close(self, *wrs: Any) -> None:
        for wr in wrs:
            self.core.post_send(wr)
        self._send()
        self.sock.shutdown(socket.SHUT_WR)

    def read_to_end(self) -> int:
        """Read until the server's FIN (or reset), feeding the core; the
        octets read."""
        total = 0
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not data:
                self.events += self.core.receive_data(b"", time.monotonic())
                break
            total += len(data)
            self.events += self.core.receive_data(data, time.monotonic())
        self.sock.close()
        return total

    def terminated(self) -> bool:
        """A Terminate arrived: the connection ended with the server's error."""
        return any(
            isinstance(e, Ended) and e.reason.startswith("Terminate received") for e in self.events
        )


#: Receive buffers a 64 KiB Send fits (the small-message lane's head buffer).
BUFFERS: Final = 2
BUFFER_SIZE: Final = 1 << 17

Serve = Callable[[Callable[[int], None], ProtectionDomain, MpaConfig], None]


def _sync_server(client: Callable[[int], None], pd: ProtectionDomain, config: MpaConfig) -> None:
    listener = blocking.listen(
        "127.0.0.1", 0, pd=pd, config=config, receive_buffers=BUFFERS, receive_size=BUFFER_SIZE
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with listener, listener.accept(timeout=T) as qp:
                # Let the whole stream pile up (with its FIN): the reads come
                # with the FIN, the lane's first and last included.
                time.sleep(0.3)
                qp.wait_closed(timeout=T)
        except (blocking.RdmaError, blocking.ConnectionTerminatedError):
            # The close reports the Terminate this end sent (docs/errors.md).
            pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    client(listener.port)
    thread.join(T)
    assert not thread.is_alive()
    assert not errors, errors


def _asyncio_server(client: Callable[[int], None], pd: ProtectionDomain, config: MpaConfig) -> None:
    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def handler(qp: aio.QueuePair) -> None:
            try:
                await asyncio.wait_for(qp.closed, T)
            finally:
                if not done.done():
                    done.set_result(None)

        server = await aio.serve(
            handler,
            "127.0.0.1",
            0,
            pd=pd,
            config=config,
            receive_buffers=BUFFERS,
            receive_size=BUFFER_SIZE,
        )
        port = server.sockets[0].getsockname()[1]
        async with server:
            await asyncio.wait_for(asyncio.to_thread(client, port), T)
            await asyncio.wait_for(done, T)

    asyncio.run(main())


SERVERS = [pytest.param(_sync_server, id="sync"), pytest.param(_asyncio_server, id="asyncio")]
CONFIGS = [
    pytest.param(MpaConfig(), id="crc"),
    pytest.param(MpaConfig(markers=True, crc=False), id="markers"),
]


@pytest.fixture(params=[True, False], ids=["lane", "no-lane"])
def lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    on = bool(request.param)
    if on and not lanes.RECEIVE_ACTIVE:
        pytest.skip("the receive lane is off (IWARP_NO_ACCEL or IWARP_NO_RECEIVE_LANE)")
    monkeypatch.setattr(lanes, "RECEIVE_ACTIVE", on)
    return on


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("serve", SERVERS)
def test_hostile_fpdu_then_half_close_gets_its_terminate(
    serve: Serve, config: MpaConfig, lane: bool
) -> None:
    pd = ProtectionDomain()
    target = pd.register(bytearray(BULK), REMOTE)
    seen: list[Peer] = []

    def client(port: int) -> None:
        peer = Peer(port, config)
        source = peer.pd.register(bytearray(os.urandom(BULK)))
        peer.post_and_half_close(
            WriteWR(data=Sge(source), remote_stag=target.stag, remote_to=0),
            WriteWR(data=b"hostile", remote_stag=BAD_STAG, remote_to=0),
        )
        peer.read_to_end()
        seen.append(peer)

    serve(client, pd, config)
    (peer,) = seen
    assert peer.terminated(), peer.events


@pytest.mark.parametrize("size", [4096, 1 << 20])
@pytest.mark.parametrize("serve", SERVERS)
def test_read_request_then_half_close_gets_the_whole_response(
    serve: Serve, size: int, lane: bool
) -> None:
    pd = ProtectionDomain()
    exposed = pd.register(bytearray(os.urandom(size)), REMOTE)
    target = pd.register(bytearray(BULK), REMOTE)
    config = MpaConfig()
    seen: list[tuple[Peer, MemoryRegion]] = []

    def client(port: int) -> None:
        peer = Peer(port, config)
        source = peer.pd.register(bytearray(BULK))
        sink = peer.pd.register(bytearray(size), Access.LOCAL_WRITE)
        peer.core.track(7)
        # A bulk Write first (the lane starts there), the Read Request last.
        peer.post_and_half_close(
            WriteWR(data=Sge(source), remote_stag=target.stag, remote_to=0),
            ReadWR(local=Sge(sink), remote_stag=exposed.stag, remote_to=0, wr_id=7),
        )
        peer.read_to_end()
        seen.append((peer, sink))

    serve(client, pd, config)
    ((peer, sink),) = seen
    result = peer.core.result(7)
    assert result is not None and result.status is CompletionStatus.SUCCESS, peer.events
    assert any(isinstance(e, WorkFinished) for e in peer.events)
    assert bytes(sink.view) == bytes(exposed.view)


def _wrapped_send_fpdu(ulpdu: bytes, phase: int) -> bytes:
    """``ulpdu``'s marked FPDU (CRC on) from marker phase ``phase``, with
    each FPDUPTR cut to its 16 bits, as a peer that wraps it would send a
    ULPDU too long for RFC 5044 §4.3's markers."""
    n = len(ulpdu)
    content = ULPDU_LENGTH.pack(n) + ulpdu + bytes(-(2 + n) % 4)
    lead = 4 if phase == 0 else 0
    at = 512 - ((phase + lead) % 512)
    out = bytearray(lead)
    start = count = 0
    while at <= len(content):
        out += content[start:at]
        out += MARKER.pack(0, (at + 4 * count) & 0xFFFF)
        start, at, count = at, at + 508, count + 1
    out += content[start:]
    return bytes(out + CRC_FIELD.pack(crc32c(out)))


@pytest.mark.parametrize("serve", SERVERS)
def test_a_marked_send_past_64_kib_gets_mpa_error_3(serve: Serve) -> None:
    """A one-segment Send whose markers would count back past 0xFFFF, sent
    with its FPDUPTRs wrapped, to a queue pair with a receive buffer it
    fits: not placed (the small-message lane declines it, on both twins),
    but answered with MPA error 3's Terminate (RFC 5044 §8)."""
    config = MpaConfig(markers=True, crc=True)
    seen: list[Peer] = []

    def client(port: int) -> None:
        peer = Peer(port, config)
        # A good first FPDU (a Responder answers a bad first one by closing,
        # RFC 5044 §7.1.2: it may not send before one arrived).
        peer.core.post_send(SendWR(b"first"))
        peer._send()
        encoder = peer.core.conn.mpa.lane_encoder()
        assert encoder is not None
        header = UNTAGGED_HEADER.pack(1 | LAST_FLAG, SEND, 0, 0, 2, 0)
        frame = _wrapped_send_fpdu(header + bytes(0xFFFF - 18), encoder.phase)
        peer.sock.sendall(frame)
        peer.sock.shutdown(socket.SHUT_WR)
        peer.read_to_end()
        seen.append(peer)

    serve(client, ProtectionDomain(), config)
    (peer,) = seen
    assert peer.terminated(), peer.events
    (ended,) = [e for e in peer.events if isinstance(e, Ended)]
    assert "MPA" in ended.reason and "marker" in ended.reason.lower(), ended.reason


ROUNDS = 20


@pytest.mark.slow
@pytest.mark.parametrize("serve", SERVERS)
def test_the_terminate_survives_input_left_unread(serve: Serve) -> None:
    """A hostile FPDU, then more octets the server never reads (the peer
    goes on sending): the server closes after its Terminate with input
    unread. Its write side is shut and that input discarded first, so no
    reset overtakes the Terminate: every one of ``ROUNDS`` connections
    gets it."""
    pd = ProtectionDomain()
    target = pd.register(bytearray(BULK), REMOTE)
    config = MpaConfig()
    missing: list[list[Any]] = []

    def client(port: int) -> None:
        peer = Peer(port, config)
        source = peer.pd.register(bytearray(BULK))
        peer.core.post_send(WriteWR(data=b"hostile", remote_stag=BAD_STAG, remote_to=0))
        peer.core.post_send(WriteWR(data=Sge(source), remote_stag=target.stag, remote_to=0))
        # The server stops reading after the first FPDU; a reset once it
        # closed ends this send (what it sent before is read below).
        with contextlib.suppress(OSError):
            peer._send()
        with contextlib.suppress(OSError):
            peer.sock.shutdown(socket.SHUT_WR)
        peer.read_to_end()
        if not peer.terminated():
            missing.append(peer.events)

    for _ in range(ROUNDS):
        serve(client, pd, config)
    assert not missing, f"{len(missing)} of {ROUNDS} without a Terminate: {missing[0]}"
