"""The capture analyzer on captures synthesized from the project's own encoders."""

from __future__ import annotations

import contextlib
import io
import random
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from analyze_traffic import (
    C2S,
    S2C,
    Conversation,
    aligned,
    coalesced,
    drop_segments,
    frame,
    payload,
    pcap_records,
    read_request,
    resegmented,
    send,
    standard,
    write,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iwarp.analyze.analyzer import Analysis, Options, analyze_file, analyze_packets
from iwarp.analyze.capture import CaptureError, CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.records import ErrorRecord, FpduRecord, FrameRecord, NoteRecord
from iwarp.analyze.synth import TcpCapture
from iwarp.ddp.wire import UntaggedHeader
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import EnhancedData, Revision, RtrFlags
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control


def analyze(tmp_path: Path, cap: TcpCapture | bytes, options: Options | None = None) -> Analysis:
    path = tmp_path / "capture.pcap"
    path.write_bytes(cap if isinstance(cap, bytes) else cap.to_bytes())
    return analyze_file(str(path), options)


def fpdus(analysis: Analysis, direction: str) -> list[FpduRecord]:
    return [r for r in analysis.records() if isinstance(r, FpduRecord) and r.direction == direction]


def errors(analysis: Analysis) -> list[ErrorRecord]:
    return [r for r in analysis.records() if isinstance(r, ErrorRecord)]


def check_decoded(analysis: Analysis, conv: Conversation, seqs: dict[str, list[int]]) -> None:
    """Every FPDU found where it was sent, with what was sent in it, and no errors;
    the out-of-order receiver replaying the capture delivers the same FPDUs."""
    assert errors(analysis) == []
    for connection in analysis.connections:
        for summary in connection.directions:
            if summary.receiver is not None:
                assert summary.receiver.error is None
                assert summary.receiver.delivered == summary.fpdus
                assert summary.receiver.passed == summary.fpdus
    for direction, ulpdus in (("initiator", conv.i2r), ("responder", conv.r2i)):
        found = fpdus(analysis, direction)
        assert [r.seq for r in found] == seqs[direction]
        assert [r.ulpdu_length for r in found] == [len(u) for u in ulpdus]
        for record, ulpdu in zip(found, ulpdus, strict=True):
            assert record.crc_ok is (True if conv.crc else None)
            assert all(m.ok for m in record.markers)
            control, rdmap = ulpdu[0], ulpdu[1]
            assert record.ulp["tagged"] == bool(control & 0x80)
            assert record.ulp["opcode"] == rdmap & 0x0F
            if control & 0x80:
                stag, to = struct.unpack_from(">IQ", ulpdu, 2)
                assert (record.ulp["stag"], record.ulp["to"]) == (stag, to)
            else:
                qn, msn, mo = struct.unpack_from(">III", ulpdu, 6)
                assert (record.ulp["qn"], record.ulp["msn"], record.ulp["mo"]) == (qn, msn, mo)


CUTS = {
    "aligned": aligned,
    "coalesced": coalesced(3),
    "resegmented": resegmented([7, 100, 33, 1, 512]),
    "octets": resegmented([1]),
}


@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize(
    ("markers_i2r", "markers_r2i"), [(False, False), (True, True), (True, False)]
)
def test_segmentation_and_markers_decode_cleanly(
    tmp_path: Path, cut: str, markers_i2r: bool, markers_r2i: bool
) -> None:
    conv = standard(markers_i2r, markers_r2i)
    cap, seqs = conv.capture(CUTS[cut])
    analysis = analyze(tmp_path, cap)
    check_decoded(analysis, conv, seqs)
    (connection,) = analysis.connections
    assert connection.protocol == "mpa"
    initiator, responder = connection.directions
    assert initiator.framing is not None and initiator.framing.markers is markers_i2r
    assert responder.framing is not None and responder.framing.markers is markers_r2i
    assert initiator.messages == {"SEND": 3, "RDMA_WRITE": 2, "RDMA_READ_REQUEST": 1}
    frames = [r for r in analysis.records() if isinstance(r, FrameRecord)]
    assert [f.mpa.is_request for f in frames] == [True, False]


def test_fpdu_markers_are_listed_with_their_positions(tmp_path: Path) -> None:
    conv = standard(True, False)
    cap, seqs = conv.capture()
    analysis = analyze(tmp_path, cap)
    start = seqs["initiator"][0]
    for record in fpdus(analysis, "initiator"):
        expected = [
            s
            for s in range(record.seq, record.seq + record.wire_length - 4)
            if (s - start) % 512 == 0
        ]
        assert [m.seq for m in record.markers] == expected
        for m in record.markers:
            assert m.fpduptr == (
                0
                if m.seq == record.seq
                else m.seq - record.seq - (4 if (record.seq - start) % 512 == 0 else 0)
            )


def test_out_of_order_and_retransmitted_segments(tmp_path: Path) -> None:
    conv = standard(True, True)
    cap, seqs = conv.capture(resegmented([200, 90]))
    header, records = pcap_records(cap.to_bytes())
    rnd = random.Random(5)
    head, body, tail = records[:7], records[7:-3], records[-3:]
    body += rnd.sample(body, 6)  # retransmissions
    rnd.shuffle(body)
    data = header + b"".join(
        struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in head + body + tail
    )
    analysis = analyze(tmp_path, data)
    check_decoded(analysis, conv, seqs)
    initiator = analysis.connections[0].directions[0]
    assert initiator.out_of_order > 0
    assert initiator.retransmissions > 0
    # With markers, the receiver passed some ULPDUs before the gaps closed.
    assert initiator.receiver is not None
    assert initiator.receiver.passed_ahead > 0


def test_rev2_enhanced_frames(tmp_path: Path) -> None:
    conv = Conversation(
        frame(
            True,
            rev=Revision.REV2,
            enhanced=EnhancedData(16, 8, RtrFlags.PEER_TO_PEER | RtrFlags.WRITE | RtrFlags.SEND),
            private=b"pd",
        ),
        frame(
            False,
            rev=Revision.REV2,
            enhanced=EnhancedData(8, 16, RtrFlags.PEER_TO_PEER | RtrFlags.WRITE),
        ),
    )
    conv.i2r = [write(0, 0, b""), send(1, payload(40, 1))]
    conv.r2i = [send(1, payload(10, 2))]
    cap, seqs = conv.capture()
    analysis = analyze(tmp_path, cap)
    check_decoded(analysis, conv, seqs)
    request, reply = (r.to_json() for r in analysis.records() if isinstance(r, FrameRecord))
    assert request["type"] == "mpa_request"
    assert (request["rev"], request["s"], request["ird"], request["ord"]) == (2, 1, 16, 8)
    assert request["p2p"] is True
    assert request["rtr"] == ["send", "write"]
    assert request["pd_length"] == 6
    assert request["private_data"] == b"pd".hex()
    assert (reply["ird"], reply["ord"], reply["rtr"]) == (8, 16, ["write"])


def test_rev0_rdmac_mode_accepts_version_0_headers(tmp_path: Path) -> None:
    conv = Conversation(
        frame(True, markers=True, rev=Revision.REV0), frame(False, markers=True, rev=Revision.REV0)
    )
    header = UntaggedHeader(qn=0, msn=1, version=0, rsvdulp=rdmap_control(RdmapOpcode.SEND, 0))
    conv.i2r = [header.pack() + payload(30, 1)]
    cap, seqs = conv.capture()
    analysis = analyze(tmp_path, cap)
    check_decoded(analysis, conv, seqs)
    assert fpdus(analysis, "initiator")[0].ulp["ddp_version"] == 0


# -- injected faults -------------------------------------------------------------


def corrupt(
    direction: str, index: int, at: int, *, xor: int = 0x01
) -> Callable[[str, list[bytes]], list[bytes]]:
    def mutate(name: str, pieces: list[bytes]) -> list[bytes]:
        if name != direction:
            return pieces
        piece = bytearray(pieces[index])
        piece[at] ^= xor
        return [*pieces[:index], bytes(piece), *pieces[index + 1 :]]

    return mutate


def test_bad_crc_is_error_2_at_its_fpdu(tmp_path: Path) -> None:
    conv = standard(False, False)
    cap, seqs = conv.capture(mutate=corrupt("initiator", 2, 10))
    analysis = analyze(tmp_path, cap)
    (error,) = errors(analysis)
    assert (error.code, error.direction, error.seq) == (2, "initiator", seqs["initiator"][2])
    found = fpdus(analysis, "initiator")
    assert [r.crc_ok for r in found] == [True, True, False, True, True, True]
    replay = analysis.connections[0].directions[0].receiver
    assert replay is not None and replay.error is not None
    assert (replay.error.mpa_code, replay.error.stream_offset) == (2, error.seq)
    assert replay.delivered == 2


def test_bad_marker_pointer_is_error_3(tmp_path: Path) -> None:
    conv = standard(True, False, crc=False)
    cap, _ = conv.capture()
    analysis = analyze(tmp_path, cap)
    second = fpdus(analysis, "initiator")[1]  # holds a marker inside
    (marker,) = second.markers
    offset = marker.seq - second.seq + 3
    cap, _ = conv.capture(mutate=corrupt("initiator", 1, offset, xor=0x10))
    analysis = analyze(tmp_path, cap)
    (error,) = errors(analysis)
    assert (error.code, error.seq) == (3, marker.seq)
    assert not fpdus(analysis, "initiator")[1].markers[0].ok
    assert len(fpdus(analysis, "initiator")) == 6
    replay = analysis.connections[0].directions[0].receiver
    assert replay is not None and replay.error is not None
    assert (replay.error.mpa_code, replay.error.stream_offset) == (3, marker.seq)


def test_length_running_past_the_capture_is_caught_by_markers(tmp_path: Path) -> None:
    conv = standard(True, False)
    cap, seqs = conv.capture()
    lead = 4 if (seqs["initiator"][1] - seqs["initiator"][0]) % 512 == 0 else 0

    def huge_length(name: str, pieces: list[bytes]) -> list[bytes]:
        if name == "initiator":
            fpdu = bytearray(pieces[1])
            fpdu[lead : lead + 2] = b"\xf0\x00"  # 61440 octets: past the end
            pieces[1] = bytes(fpdu)
        return pieces

    cap, seqs = conv.capture(mutate=huge_length)
    analysis = analyze(tmp_path, cap)
    (error,) = errors(analysis)
    assert error.code == 3
    start = seqs["initiator"][0]
    assert (error.seq - start) % 512 == 0  # reported at the marker that disagrees
    # The walk finds its feet again at that marker and decodes the rest.
    found = [r.seq for r in fpdus(analysis, "initiator")]
    assert found[0] == seqs["initiator"][0]
    assert found[-1] == seqs["initiator"][-1]


def test_marker_reserved_and_pad_must_be_zero(tmp_path: Path) -> None:
    conv = standard(True, False, crc=False)
    conv.i2r = [send(1, payload(701, 1))]  # a 719-octet ULPDU: PAD of 3, a marker inside
    cap, _ = conv.capture()
    record = fpdus(analyze(tmp_path, cap), "initiator")[0]
    marker_at = record.markers[1].seq - record.seq
    pad_at = record.wire_length - 5

    def mutate(name: str, pieces: list[bytes]) -> list[bytes]:
        if name != "initiator":
            return pieces
        fpdu = bytearray(pieces[0])
        fpdu[marker_at] = 0x80
        fpdu[pad_at] = 0x55
        return [bytes(fpdu)]

    cap, _ = conv.capture(mutate=mutate)
    messages = [(e.code, e.message) for e in errors(analyze(tmp_path, cap))]
    assert any("Reserved" in m for _, m in messages)
    assert (None, "PAD 000055 is not zero") in messages


def test_gap_in_capture_resynchronizes_by_markers(tmp_path: Path) -> None:
    conv = standard(True, True)
    conv.i2r = [send(i, payload(300 + 37 * i, i)) for i in range(1, 12)]
    cap, seqs = conv.capture(resegmented([400]))
    start = seqs["initiator"][0]
    lost = range(start + 800, start + 1200)
    data = drop_segments(cap.to_bytes(), port=50000, seqs={lost.start})
    analysis = analyze(tmp_path, data)
    assert errors(analysis) == []
    found = [r.seq for r in fpdus(analysis, "initiator")]
    sent = seqs["initiator"]
    ends = [*sent[1:], start + 10**6]
    before = [s for s, e in zip(sent, ends, strict=True) if e <= lost.start]
    hit = [s for s, e in zip(sent, ends, strict=True) if s < lost.stop and e > lost.start]
    assert found[: len(before)] == before
    assert not set(hit) & set(found)
    # After the hole, the first marker leads back to FPDU boundaries: every
    # FPDU from the one holding that marker on is decoded again.
    marker = start + 512 * -(-(lost.stop - start) // 512)
    resumed = max(s for s in sent if s <= marker)
    assert found[len(before) :] == [s for s in sent if s >= resumed]
    notes = [r.message for r in analysis.records() if isinstance(r, NoteRecord)]
    assert any("not captured" in m for m in notes)
    assert any("found again" in m for m in notes)


def test_gap_without_markers_resynchronizes_by_crc(tmp_path: Path) -> None:
    conv = standard(False, False)
    conv.i2r = [send(i, payload(200 + 13 * i, i)) for i in range(1, 12)]
    cap, seqs = conv.capture()
    data = drop_segments(cap.to_bytes(), port=50000, seqs={seqs["initiator"][3]})
    analysis = analyze(tmp_path, data)
    assert errors(analysis) == []
    found = [r.seq for r in fpdus(analysis, "initiator")]
    assert found == seqs["initiator"][:3] + seqs["initiator"][4:]


def test_retransmission_with_different_octets_is_reported(tmp_path: Path) -> None:
    conv = standard(False, False)
    cap, seqs = conv.capture()
    start = seqs["initiator"][0] - cap.stream_start(C2S)
    cap.segment(C2S, start + 8, b"\xff\xff")
    analysis = analyze(tmp_path, cap)
    (error,) = errors(analysis)
    assert error.layer == "tcp"
    assert error.seq == seqs["initiator"][0] + 8


def test_invalid_frame_is_error_4(tmp_path: Path) -> None:
    conv = Conversation(frame(True, private=bytes(600)), frame(False, reject=True))
    cap, _ = conv.capture()
    analysis = analyze(tmp_path, cap)
    codes = [e.code for e in errors(analysis)]
    assert codes == [4]
    assert fpdus(analysis, "initiator") == []


def test_capture_starting_mid_stream(tmp_path: Path) -> None:
    conv = standard(True, False)
    cap, seqs = conv.capture()
    header, records = pcap_records(cap.to_bytes())
    # Drop the handshake and both frames: the capture starts with FPDUs.
    data = header + b"".join(
        struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in records[7:]
    )
    assert analyze(tmp_path, data).connections[0].protocol is None
    hand = Options(mpa_start=(seqs["initiator"][0], seqs["responder"][0]))
    analysis = analyze(tmp_path, data, hand)
    check_decoded(analysis, conv, seqs)
    found = analyze(tmp_path, data, Options(resync=True))
    assert [r.seq for r in fpdus(found, "initiator")] == seqs["initiator"]
    assert [r.seq for r in fpdus(found, "responder")] == seqs["responder"]
    assert errors(found) == []


# -- capture formats -------------------------------------------------------------


def to_pcapng(classic: bytes, *, linktype: int = 1, strip: int = 0, prefix: bytes = b"") -> bytes:
    _, records = pcap_records(classic)

    def block(kind: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    tsresol = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)  # nanoseconds
    out += block(1, struct.pack("<HHI", linktype, 0, 262144) + tsresol)
    for sec, usec, frame_data in records:
        data = prefix + frame_data[strip:]
        stamp = sec * 10**9 + usec * 1000
        out += block(
            6,
            struct.pack("<IIIII", 0, stamp >> 32, stamp & 0xFFFFFFFF, len(data), len(data)) + data,
        )
    return out


def to_linktype(classic: bytes, linktype: int, make: object) -> bytes:
    header, records = pcap_records(classic)
    header = header[:20] + struct.pack("<I", linktype)
    out = header
    for sec, usec, frame_data in records:
        data = make(frame_data)  # type: ignore[operator]
        out += struct.pack("<IIII", sec, usec, len(data), len(data)) + data
    return out


@pytest.mark.parametrize(
    "variant", ["pcapng", "pcapng-raw", "sll", "sll2", "raw", "ipv6", "ipv6-pcapng", "vlan"]
)
def test_link_layers_and_formats(tmp_path: Path, variant: str) -> None:
    conv = standard(True, False)
    ipv6 = variant.startswith("ipv6")
    client, server = (
        (("::1", 50000), ("::1", 4000)) if ipv6 else (("127.0.0.1", 50000), ("127.0.0.1", 4000))
    )
    cap, seqs = conv.capture(coalesced(2), client=client, server=server)
    classic = cap.to_bytes()
    data = {
        "pcapng": lambda: to_pcapng(classic),
        "pcapng-raw": lambda: to_pcapng(classic, linktype=101, strip=14),
        "sll": lambda: to_linktype(
            classic, 113, lambda f: struct.pack("!HHH8sH", 0, 772, 0, b"", 0x0800) + f[14:]
        ),
        "sll2": lambda: to_linktype(
            classic, 276, lambda f: struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 0, b"") + f[14:]
        ),
        "raw": lambda: to_linktype(classic, 101, lambda f: f[14:]),
        "ipv6": lambda: classic,
        "ipv6-pcapng": lambda: to_pcapng(classic),
        "vlan": lambda: to_linktype(classic, 1, lambda f: f[:12] + b"\x81\x00\x00\x05" + f[12:]),
    }[variant]()
    analysis = analyze(tmp_path, data)
    check_decoded(analysis, conv, seqs)
    assert analysis.stats.tcp == analysis.stats.frames


def test_not_a_capture(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(b"hello world, not a capture")
    with pytest.raises(CaptureError):
        analyze_file(str(path))


@pytest.mark.parametrize("pcapng", [False, True])
def test_a_length_field_claiming_gigabytes_allocates_nothing(tmp_path: Path, pcapng: bool) -> None:
    # A pcap record or pcapng block announcing ~4 GiB in a file of a few octets
    # (a real file: its read(n) allocates n octets first, io.BytesIO's does not).
    if pcapng:
        shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
        data = shb + struct.pack("<II", 6, 0xFFFFFFF0) + bytes(40)
    else:
        head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
        data = head + struct.pack("<IIII", 0, 0, 0xFFFFFFF0, 0xFFFFFFF0) + bytes(10)
    path = tmp_path / "claims.pcap"
    path.write_bytes(data)
    stats = CaptureStats()
    tracemalloc.start()
    try:
        with path.open("rb") as f:
            packets = list(read_tcp_packets(f, stats))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert packets == [] and stats.truncated_file
    assert peak < 4 << 20


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400), keep=st.integers(0, 2000))
def test_damaged_files_give_capture_errors_or_packets(data: bytes, keep: int) -> None:
    conv = standard(True, True)
    classic = conv.capture(coalesced(2))[0].to_bytes()
    for blob in (classic[:keep] + data, to_pcapng(classic)[:keep] + data, data):
        packets: list[TcpPacket] = []
        with contextlib.suppress(CaptureError):  # keep what was read before it
            packets.extend(read_tcp_packets(io.BytesIO(blob)))
        for report in analyze_packets(packets, Options(resync=True)):
            for record in report.records:
                record.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    garbage=st.lists(st.binary(min_size=1, max_size=300), max_size=6),
    markers=st.booleans(),
    crc=st.booleans(),
)
def test_arbitrary_stream_octets_are_reported_not_raised(
    tmp_path_factory: pytest.TempPathFactory, garbage: list[bytes], markers: bool, crc: bool
) -> None:
    conv = Conversation(
        frame(True, markers=markers, crc=crc), frame(False, markers=markers, crc=crc)
    )
    cap = TcpCapture()
    cap.send(C2S, conv.request.pack())
    cap.send(S2C, conv.reply.pack())
    for chunk in garbage:
        cap.send(C2S, chunk)
        cap.send(S2C, chunk[::-1])
    path = tmp_path_factory.mktemp("g") / "g.pcap"
    path.write_bytes(cap.to_bytes())
    analysis = analyze_file(str(path), Options(resync=True))
    for record in analysis.records():
        record.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    garbage=st.lists(st.binary(min_size=1, max_size=300), max_size=6),
    version_octet=st.booleans(),
    trailer=st.booleans(),
)
def test_arbitrary_octets_after_a_vitcp_connect_are_reported_not_raised(
    tmp_path_factory: pytest.TempPathFactory,
    garbage: list[bytes],
    version_octet: bool,
    trailer: bool,
) -> None:
    from iwarp.vitcp.wire import Attributes, CeHeader, SegmentHeader, SegmentType, encode_segment

    ce = CeHeader(Attributes.RELIABLE_DELIVERY, mtu=1500, crc=trailer)
    cap = TcpCapture()
    for direction, kind in ((C2S, SegmentType.CONNECT_REQUEST), (S2C, SegmentType.CONNECT_ACCEPT)):
        cap.send(direction, b"".join(encode_segment(SegmentHeader(kind), ce=ce, trailer=trailer)))
    for chunk in garbage:
        # A leading version 1 octet (§3.2) takes the decoder past its first check.
        cap.send(C2S, b"\x01" + chunk[1:] if version_octet else chunk)
        cap.send(S2C, chunk[::-1])
    path = tmp_path_factory.mktemp("v") / "v.pcap"
    path.write_bytes(cap.to_bytes())
    analysis = analyze_file(str(path))
    (connection,) = analysis.connections
    assert connection.protocol == "vitcp"
    for record in analysis.records():
        record.to_json()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 1500), min_size=1, max_size=5),
    lengths=st.lists(st.integers(0, 1500), min_size=1, max_size=8),
    markers=st.booleans(),
    seed=st.none() | st.integers(0, 2**32),
)
def test_any_segmentation_and_order_decodes_cleanly(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    lengths: list[int],
    markers: bool,
    seed: int | None,
) -> None:
    conv = Conversation(frame(True, markers=markers), frame(False, markers=markers))
    conv.i2r = [send(i + 1, payload(n, i)) for i, n in enumerate(lengths)]
    conv.r2i = [read_request(i + 1, n) for i, n in enumerate(lengths)]
    cap, seqs = conv.capture(resegmented(sizes))
    data = cap.to_bytes()
    if seed is not None:  # segments after the frames shuffled, some sent twice
        header, records = pcap_records(data)
        rnd = random.Random(seed)
        head, body, tail = records[:7], records[7:-3], records[-3:]
        body += rnd.sample(body, min(len(body), 3))
        rnd.shuffle(body)
        data = header + b"".join(
            struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in head + body + tail
        )
    path = tmp_path_factory.mktemp("s") / "s.pcap"
    path.write_bytes(data)
    check_decoded(analyze_file(str(path)), conv, seqs)


def test_vitcp_connection(tmp_path: Path) -> None:
    from iwarp.vitcp.wire import (
        Attributes,
        CeHeader,
        RdmaHeader,
        SegmentFlags,
        SegmentHeader,
        SegmentType,
        encode_segment,
    )

    def segment(header: SegmentHeader, **kw: object) -> bytes:
        return b"".join(encode_segment(header, **kw))  # type: ignore[arg-type]

    ce = CeHeader(Attributes.RELIABLE_DELIVERY | Attributes.RDMA_WRITE, mtu=1500, crc=True)
    cap = TcpCapture()
    cap.send(C2S, segment(SegmentHeader(SegmentType.CONNECT_REQUEST), ce=ce, trailer=True))
    cap.send(S2C, segment(SegmentHeader(SegmentType.CONNECT_ACCEPT), ce=ce, trailer=True))
    cap.send(
        C2S,
        segment(
            SegmentHeader(SegmentType.SEND, SegmentFlags.EOM, message_number=1),
            payload=b"hi",
            trailer=True,
        ),
    )
    cap.send(
        C2S,
        segment(
            SegmentHeader(SegmentType.RDMA_WRITE, SegmentFlags.EOM, message_number=2),
            rdma=RdmaHeader(address=0x1000, memory_handle=7, length=3),
            payload=b"abc",
            trailer=True,
        ),
    )
    cap.close()
    analysis = analyze(tmp_path, cap)
    (connection,) = analysis.connections
    assert connection.protocol == "vitcp"
    assert errors(analysis) == []
    kinds = [(r.direction, r.to_json()["segment_type"]) for r in analysis.records()]
    assert kinds == [
        ("initiator", "CONNECT_REQUEST"),
        ("responder", "CONNECT_ACCEPT"),
        ("initiator", "SEND"),
        ("initiator", "RDMA_WRITE"),
    ]
    write_record = list(analysis.records())[-1].to_json()
    assert write_record["rdma"] == {"address": 0x1000, "memory_handle": 7, "length": 3}
    assert write_record["crc_ok"] is True


@pytest.mark.parametrize("crc", [False, True])
def test_vitcp_carrying_an_mpa_key_stays_vitcp(tmp_path: Path, crc: bool) -> None:
    # The connection opens with a ConnectRequest (§3.3); a Send whose payload
    # happens to be an MPA Request must not turn it into MPA. The Send ends
    # the capture: the Accept's CRC option says whether a trailer follows it.
    from iwarp.vitcp.wire import Attributes, CeHeader, SegmentHeader, SegmentType, encode_segment

    ce = CeHeader(Attributes.RELIABLE_DELIVERY, mtu=1500, crc=crc)
    cap = TcpCapture()
    for direction, kind in ((C2S, SegmentType.CONNECT_REQUEST), (S2C, SegmentType.CONNECT_ACCEPT)):
        cap.send(direction, b"".join(encode_segment(SegmentHeader(kind), ce=ce, trailer=crc)))
    send = SegmentHeader(SegmentType.SEND)
    cap.send(C2S, b"".join(encode_segment(send, payload=frame(True).pack(), trailer=crc)))
    cap.close()
    analysis = analyze(tmp_path, cap)
    (connection,) = analysis.connections
    assert connection.protocol == "vitcp" and connection.request is None
    assert errors(analysis) == []
    kinds = [r.to_json()["segment_type"] for r in analysis.records()]
    assert kinds == ["CONNECT_REQUEST", "CONNECT_ACCEPT", "SEND"]


P2P = RtrFlags.PEER_TO_PEER


@pytest.mark.parametrize(
    ("request_data", "reply_data", "first", "expected"),
    [
        # A matching peer-to-peer exchange: a zero-length Write as RTR.
        (
            EnhancedData(4, 4, P2P | RtrFlags.WRITE),
            EnhancedData(4, 4, P2P | RtrFlags.WRITE),
            "write",
            [],
        ),
        (
            EnhancedData(4, 4, P2P | RtrFlags.READ),
            EnhancedData(4, 4, P2P | RtrFlags.READ),
            "read",
            [],
        ),
        # The first FPDU is not the RTR the Reply allowed (RFC 6581 §9.2).
        (
            EnhancedData(4, 4, P2P | RtrFlags.WRITE),
            EnhancedData(4, 4, P2P | RtrFlags.WRITE),
            "send",
            [7],
        ),
        (
            EnhancedData(4, 4, P2P | RtrFlags.WRITE | RtrFlags.READ),
            EnhancedData(4, 4, P2P | RtrFlags.READ),
            "write",
            [7],
        ),
        # The Responder drops the peer-to-peer model, or offers no RTR.
        (EnhancedData(4, 4, P2P | RtrFlags.WRITE), EnhancedData(4, 4), "send", [7]),
        (EnhancedData(4, 4, P2P | RtrFlags.WRITE), EnhancedData(4, 4, P2P), "write", [7, 7]),
        # Responder ORD above the Initiator IRD (§9.1): error 6.
        (EnhancedData(2, 4), EnhancedData(4, 3), "send", [6]),
        # 0x3FFF must be answered with 0x3FFF.
        (EnhancedData(0x3FFF, 4), EnhancedData(4, 4), "send", [None]),
        # RTR flags without A.
        (EnhancedData(4, 4, RtrFlags.WRITE), EnhancedData(4, 4), "send", [None]),
        # An unenhanced Reply to an enhanced Request (§10).
        (EnhancedData(4, 4), None, "send", [None]),
    ],
)
def test_rfc6581_negotiation_rules(
    tmp_path: Path,
    request_data: EnhancedData,
    reply_data: EnhancedData | None,
    first: str,
    expected: list[int | None],
) -> None:
    reply = (
        frame(False, rev=Revision.REV1)
        if reply_data is None
        else frame(False, rev=Revision.REV2, enhanced=reply_data)
    )
    conv = Conversation(frame(True, rev=Revision.REV2, enhanced=request_data), reply)
    rtr = {"write": write(1, 0, b""), "read": read_request(1, 0), "send": send(1, payload(8, 1))}
    conv.i2r = [rtr[first], send(2, payload(30, 2))]
    cap, _ = conv.capture()
    found = errors(analyze(tmp_path, cap))
    assert [e.code for e in found] == expected
    assert all(e.layer == "mpa" for e in found)


def test_culley_02_stream_without_frames(tmp_path: Path) -> None:
    # draft-culley-iwarp-mpa-02 §8.1: no Request/Reply; MPA starts at an agreed
    # point with markers and CRC always on, the first four octets a zero marker.
    cap = TcpCapture()
    cap.send(C2S, b"GO RDMA\n")  # the ULP's own negotiation, in streaming mode
    start = cap.seq(C2S)
    encoder = FpduEncoder(markers=True, crc=True, origin=start)
    ulpdus = [send(i, payload(200 * i, i)) for i in range(1, 8)]
    positions = []
    for ulpdu in ulpdus:
        positions.append(encoder.position)
        cap.send(C2S, encoder.encode_bytes(ulpdu), mss=700)
    cap.close()
    by_hand = analyze(tmp_path, cap, Options(mpa_start=(start,), markers=True, crc=True))
    assert errors(by_hand) == []
    assert [r.seq for r in fpdus(by_hand, "initiator")] == positions
    replay = by_hand.connections[0].directions[0].receiver
    assert replay is not None and replay.delivered == len(ulpdus)
    found = analyze(tmp_path, cap, Options(resync=True))
    assert [r.seq for r in fpdus(found, "initiator")] == positions
