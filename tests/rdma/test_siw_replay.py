"""Replays of siw's recorded frames (siw-vm evidence) against our stack.

The evidence folder (``tests/data/siw``) holds what Linux siw really sent and what a hand-made
peer answered in whole rping exchanges. Here our stack plays that peer with
the ``iwarp ping`` logic (:mod:`iwarp.apps.rping`): siw's frames go in, and
what we send must equal, octet for octet, what siw accepted. Buffers are
registered at the STags and addresses the recorded peer used so that siw's
frames (and their CRCs) apply unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iwarp.apps.rping import RpingClient, RpingServer
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import ConnectionEstablished, RequestReceived
from iwarp.mpa.framing import FpduDecoder
from iwarp.mpa.wire import RtrFlags
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdmap.events import TerminateReceived
from iwarp.rdmap.memory import MemoryRegistry
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import describe_ulpdu
from iwarp.rdmap.work import Completion

EVIDENCE = Path(__file__).resolve().parents[1] / "data" / "siw"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVIDENCE / name).read_text())
    return data


class Peer:
    """Our side of a recorded exchange, collecting what it sends."""

    def __init__(self, conn: RdmaConnection, app: RpingServer | RpingClient) -> None:
        self.conn = conn
        self.app = app
        self.sent = bytearray()
        self.events: list[Any] = []

    def settle(self, events: list[Any]) -> None:
        while True:
            self.events.extend(events)
            for event in events:
                if isinstance(event, Completion):
                    self.app.handle(event)
            chunks = self.conn.data_to_send()
            self.sent += b"".join(bytes(c) for c in chunks)
            events = self.conn.take_events()
            if not events and not chunks:
                return

    def feed(self, data: bytes) -> None:
        events = self.conn.receive_data(data, 0.0)
        for event in events:
            if isinstance(event, RequestReceived):
                self.conn.accept()
                events = events + self.conn.take_events()
        self.settle(events)


SERVER_CASES = [
    ("a_rpingsrv.json", MpaConfig(crc=False, ird=1, ord=1)),
    ("a_rpingsrv_siw-crc.json", MpaConfig(crc=True, ird=1, ord=1)),
    (
        "a_rpingsrv_p2p-write_siw-p2p.json",
        MpaConfig(crc=False, ird=1, ord=1, rtr_types=RtrFlags.WRITE),
    ),
    (
        "a_rpingsrv_p2p-read_siw-p2p.json",
        MpaConfig(crc=False, ird=1, ord=1, rtr_types=RtrFlags.READ),
    ),
]


@pytest.mark.parametrize(("name", "config"), SERVER_CASES)
def test_rping_client_on_siw_against_our_server(name: str, config: MpaConfig) -> None:
    """siw runs ``rping -c -C 2 -S 32``; we are ``iwarp ping -s``."""
    record = load(name)
    pd = MemoryRegistry().alloc_pd()
    server = RpingServer(pd, size=64, regions={"rdma": (0x00515100, 0)})
    conn = RdmaConnection(Role.RESPONDER, pd, config, on_stream=server.setup)
    peer = Peer(conn, server)
    expected = bytearray()
    reply_seen = False
    for event in record["events"]:
        if "rx_hex" in event:
            peer.feed(bytes.fromhex(event["rx_hex"]))
        elif "tx_hex" in event:
            if not reply_seen:
                reply_seen = True
                assert peer.sent.hex() == event["tx_hex"], "MPA Reply differs"
                del peer.sent[:]
            else:
                expected += bytes.fromhex(event["tx_hex"])
    assert peer.sent.hex() == expected.hex()
    assert server.pings == 2 and server.error is None
    assert record["guest_rc"] == 0  # rping on siw was satisfied with these octets


CLIENT_CASES = [
    ("b_rev2_play.json", MpaConfig(crc=False, ird=1, ord=1)),
    ("b_crc_play.json", MpaConfig(crc=True, ird=1, ord=1)),
    ("b_rev2p2p_play.json", MpaConfig(crc=False, ird=1, ord=1, peer_to_peer=True)),
]


def _ulpdus(wire: bytes, crc: bool) -> list[bytes]:
    return [bytes(u) for u in FpduDecoder(crc=crc).feed(wire)]


@pytest.mark.parametrize(("name", "config"), CLIENT_CASES)
def test_our_client_against_rping_server_on_siw(name: str, config: MpaConfig) -> None:
    """siw runs ``rping -s -V``; we are ``iwarp ping -c -C 2 -S 32``."""
    record = load(name)
    pd = MemoryRegistry().alloc_pd()
    client = RpingClient(
        pd,
        size=32,
        count=2,
        validate=True,
        regions={"start": (0x0A0B0C00, 0x1000), "rdma": (0x0D0E0F00, 0x2000)},
    )
    conn = RdmaConnection(Role.INITIATOR, pd, config, on_stream=client.setup)
    peer = Peer(conn, client)
    peer.settle([])
    assert peer.sent.hex() == record["request_sent_hex"], "MPA Request differs"
    del peer.sent[:]
    # The recorded peer sent "host-ping-<n>:..." rather than rping's text:
    # put the same octets in our start buffer so that siw's echo matches.
    recorded = [bytes.fromhex(e["tx_hex"]) for e in record["events"] if "Read Response" in e["tx"]]
    pattern = [describe_ulpdu(u) for u in _ulpdus(b"".join(recorded), config.crc)]
    payloads = [u[14:] for u in _ulpdus(b"".join(recorded), config.crc)]
    assert all(p["opcode_name"] == "RDMA_READ_RESPONSE" for p in pattern)

    def copy_recorded_text() -> None:
        bufs = client._bufs
        assert bufs is not None and bufs.start is not None
        bufs.start.view[:] = payloads[client.pings]

    peer.feed(bytes.fromhex(record["reply_raw_hex"]))
    assert any(isinstance(e, ConnectionEstablished) for e in peer.events)
    client.start()
    copy_recorded_text()
    peer.settle([])
    for fpdu in record["fpdus_from_siw"]:
        before = client.pings
        peer.feed(bytes.fromhex(fpdu["hex"]))
        if client.pings != before and client.pings < 2:
            copy_recorded_text()
    expected = b"".join(bytes.fromhex(e["tx_hex"]) for e in record["events"] if "tx_hex" in e)
    ours = _ulpdus(bytes(peer.sent), config.crc)
    theirs = _ulpdus(expected, config.crc)
    if config.peer_to_peer:
        # The recorded peer's RTR used STag 0; ours uses 1 (RFC 6581 interop: Chelsio).
        assert theirs[0].hex() == "c140" + "00" * 12
        assert ours[0].hex() == "c14000000001" + "00" * 8
        ours, theirs = ours[1:], theirs[1:]
    assert len(ours) == 6
    assert [u.hex() for u in ours] == [u.hex() for u in theirs]
    assert peer.sent.hex() == expected.hex() or config.peer_to_peer
    assert client.pings == 2 and client.error is None and client.finished


def test_siw_terminate_after_bad_crc_decodes_with_the_nibble_swap() -> None:
    record = load("a_rpingsrv_nocrc_siw-crc.json")
    pd = MemoryRegistry().alloc_pd()
    server = RpingServer(pd, size=64, regions={"rdma": (0x00515100, 0)})
    conn = RdmaConnection(
        Role.RESPONDER, pd, MpaConfig(crc=True, ird=1, ord=1), on_stream=server.setup
    )
    peer = Peer(conn, server)
    for event in record["events"]:
        if "rx_hex" in event:
            peer.feed(bytes.fromhex(event["rx_hex"]))
    (term,) = [e for e in peer.events if isinstance(e, TerminateReceived)]
    # siw logs "layer 2 (LLP), type 0 (MPA), code 2 (CRC)": its wire octets 02 02.
    assert (term.header.layer, term.header.etype, term.header.code) == (0, 2, 2)
    assert term.header.siw_view() == (2, 0, 2)
    assert conn.must_close


def test_siw_terminate_for_no_matching_rtr() -> None:
    record = load("a_rpingsrv_p2p-nomatch_siw-p2p.json")
    term_hex = [e["rx_hex"] for e in record["events"] if "rx_hex" in e][1]
    (ulpdu,) = _ulpdus(bytes.fromhex(term_hex), crc=False)
    stream = RdmapStream(
        MemoryRegistry().alloc_pd(), initiator=False, mulpdu=1024, rtr=RtrFlags.WRITE
    )
    (event,) = stream.handle_ulpdu(ulpdu)
    assert isinstance(event, TerminateReceived)
    assert event.header.siw_view() == (2, 0, 7)  # LLP, MPA, no matching RTR option


def test_siw_terminate_after_its_write_overran_our_sink() -> None:
    record = load("b_rev2_play_nonul.json")
    pd = MemoryRegistry().alloc_pd()
    client = RpingClient(
        pd, size=32, count=2, regions={"start": (0x0A0B0C00, 0x1000), "rdma": (0x0D0E0F00, 0x2000)}
    )
    conn = RdmaConnection(
        Role.INITIATOR, pd, MpaConfig(crc=False, ird=1, ord=1), on_stream=client.setup
    )
    peer = Peer(conn, client)
    peer.settle([])
    peer.feed(bytes.fromhex(record["reply_raw_hex"]))
    client.start()
    peer.settle([])
    for fpdu in record["fpdus_from_siw"]:
        peer.feed(bytes.fromhex(fpdu["hex"]))
    (term,) = [e for e in peer.events if isinstance(e, TerminateReceived)]
    assert (term.header.layer, term.header.etype, term.header.code) == (0, 0, 0xFF)
    assert client.error is not None and conn.must_close
