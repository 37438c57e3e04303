"""Wireshark's tshark decodes our DDP/RDMAP traffic with the fields we meant.

Both ends are the sans-IO stack; their octets are written as one TCP
connection with :mod:`iwarp.analyze.synth` and decoded by tshark's
iwarp_mpa / iwarp_ddp_rdmap dissectors (an independent implementation).
"""

from __future__ import annotations

import struct

import pytest

from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR
from rdma.rdma_harness import End, make_ends
from tsharkutil import decode, needs_tshark

pytestmark = [pytest.mark.tshark, needs_tshark]


class Wire:
    """Writes each direction as the live sender does: one FPDU per TCP segment
    (tshark's MPA dissector needs that to find markers)."""

    def __init__(self, markers: bool) -> None:
        self.capture = TcpCapture()
        self.markers = markers
        self.offset: dict[Direction, int | None] = {d: None for d in Direction}

    def send(self, direction: Direction, data: bytes) -> None:
        offset = self.offset[direction]
        if offset is None:  # the MPA Request or Reply
            self.capture.send(direction, data)
            self.offset[direction] = 0
            return
        pos = 0
        while pos < len(data):
            lead = 4 if self.markers and offset % 512 == 0 else 0
            (length,) = struct.unpack_from(">H", data, pos + lead)
            size = fpdu_wire_size(length, offset % 512, markers=self.markers)
            self.capture.send(direction, data[pos : pos + size])
            pos += size
            offset += size
        self.offset[direction] = offset


def exchange(a: End, b: End, wire: Wire) -> None:
    for _ in range(100):
        moved = False
        for src, dst, direction in ((a, b, Direction.C2S), (b, a, Direction.S2C)):
            data = b"".join(bytes(x) for x in src.conn.data_to_send())
            src.events.extend(src.conn.take_events())
            if not data:
                continue
            moved = True
            wire.send(direction, data)
            events = dst.conn.receive_data(data, 0.0)
            for event in events:
                if isinstance(event, RequestReceived):
                    dst.conn.accept()
                    events += dst.conn.take_events()
            dst.events.extend(events)
        if not moved:
            return


@pytest.mark.parametrize("markers", [False, True])
def test_tshark_decodes_every_message_type(markers: bool, tmp_path: object) -> None:
    a, b = make_ends(MpaConfig(markers=markers), MpaConfig(markers=markers))
    wire = Wire(markers)
    capture = wire.capture
    exchange(a, b, wire)
    assert b.conn.stream is not None
    b.conn.post_recv(RecvWR(Sge(b.pd.register(bytearray(100)))))
    region = b.pd.register(
        bytearray(3000), Access.REMOTE_WRITE | Access.REMOTE_READ, address=0x4000
    )
    sink = a.pd.register(bytearray(2000))
    a.conn.post_send(SendWR(b"hello", solicited=True))
    a.conn.post_send(WriteWR(b"w" * 2000, region.stag, 0x4010))
    a.conn.post_send(ReadWR(Sge(sink), region.stag, 0x4010))
    exchange(a, b, wire)
    a.conn.post_send(WriteWR(b"bad", 0x999, 0))  # b answers with a Terminate
    exchange(a, b, wire)
    capture.close()
    path = f"{tmp_path}/rdma.pcap"
    capture.write(path)
    result = decode(path)
    assert not result.malformed
    fpdus = result.fpdus
    assert all(p.crc_status == "good" for p in fpdus)
    ops = [(p.ddp["iwarp_rdma.opcode"], p.ddp["iwarp_ddp.tagged_flag"]) for p in fpdus]
    send, write, request, response, bad, term = (
        ("0x05", "0"),
        ("0x00", "1"),
        ("0x01", "0"),
        ("0x02", "1"),
        ("0x00", "1"),
        ("0x07", "0"),
    )
    # The 2000-octet Write and its Read Response take two segments each (EMSS 1460).
    assert ops == [send, write, write, request, response, response, bad, term]
    first = fpdus[0].ddp
    assert (first["iwarp_ddp.qn"], first["iwarp_ddp.msn"], first["iwarp_ddp.mo"]) == ("0", "1", "0")
    w1, w2 = fpdus[1].ddp, fpdus[2].ddp
    assert w1["iwarp_ddp.last_flag"] == "0" and w2["iwarp_ddp.last_flag"] == "1"
    assert int(w1["iwarp_ddp.stag"], 16) == region.stag
    assert int(w1["iwarp_ddp.tagged_offset"], 16) == 0x4010
    assert a.conn.params is not None
    room = a.conn.params.mulpdu - 14  # payload of a full tagged segment
    assert int(w2["iwarp_ddp.tagged_offset"], 16) == 0x4010 + room
    rr = fpdus[3].ddp
    assert (int(rr["iwarp_rdma.sinkstag"], 16), int(rr["iwarp_rdma.sinkto"], 16)) == (
        sink.stag,
        sink.address,
    )
    assert rr["iwarp_rdma.rdmardsz"] == "2000"
    assert (int(rr["iwarp_rdma.srcstag"], 16), int(rr["iwarp_rdma.srcto"], 16)) == (
        region.stag,
        0x4010,
    )
    assert int(fpdus[4].ddp["iwarp_ddp.stag"], 16) == sink.stag
    t = fpdus[7].ddp
    assert (t["iwarp_ddp.qn"], t["iwarp_rdma.term_layer"], t["iwarp_rdma.term_etype_ddp"]) == (
        "2",
        "0x01",
        "0x01",
    )
    assert t["iwarp_rdma.term_errcode_ddp_tagged"] == "0x00"
    assert (t["iwarp_rdma.term_hdrct_m"], t["iwarp_rdma.hdrct_d"], t["iwarp_rdma.hdrct_r"]) == (
        "1",
        "1",
        "0",
    )
    assert t["iwarp_rdma.term_ddp_h"].replace(":", "") == "c140000009990000000000000000"
