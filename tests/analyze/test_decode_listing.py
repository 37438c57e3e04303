"""``iwarp decode -T text``: the one-line listing, ``-c N`` and ``-x``."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from analyze_traffic import Conversation, Cutter, aligned, coalesced, resegmented, standard
from hypothesis import given, settings
from hypothesis import strategies as st

from clitools import run_in_process
from iwarp.analyze.capture import TcpPacket, read_tcp_packets
from iwarp.analyze.listing import hex_dump
from iwarp.analyze.records import FpduRecord
from iwarp.cli import main
from iwarp.mpa.framing import FpduEncoder

LINE = re.compile(
    r"^ *(?P<frame>\d+) +(?P<time>\d+\.\d{6}) (?P<src>\S+) → (?P<dst>\S+) "
    r"(?P<proto>\S+) +(?P<info>.*)$"
)


def decode(*argv: str) -> subprocess.CompletedProcess[str]:
    """``iwarp decode ARGV`` on one capture, in this process."""
    return run_in_process("decode", *argv)


def in_process(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["decode", *argv])
    return status, out.getvalue()


def write(conv: Conversation, path: Path, cut: Cutter = aligned) -> dict[str, list[int]]:
    cap, seqs = conv.capture(cut)
    cap.write(str(path))
    return seqs


def records(path: Path) -> list[dict[str, object]]:
    done = decode(str(path), "--json")
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return [r for r in lines if r["type"] not in ("stream_summary", "capture_summary")]


def listed(text: str) -> list[re.Match[str]]:
    return [m for m in map(LINE.match, text.splitlines()) if m]


def test_one_line_per_record_with_time_addresses_and_key_fields(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    write(standard(True, False), path)
    expected = records(path)
    done = decode(str(path), "-T", "text")
    assert done.returncode == 0, done.stderr
    lines = listed(done.stdout)
    assert len(lines) == len(expected) == 2 + 6 + 3
    with open(path, "rb") as f:
        packets = {p.frame: p for p in read_tcp_packets(f)}
    first = min(p.time for p in packets.values())
    for line, record in zip(lines, expected, strict=True):
        frame = int(line["frame"])
        assert frame == record["frame"]
        packet = packets[frame]
        assert abs(float(line["time"]) - (packet.time - first)) < 1e-6
        assert line["src"] == f"{packet.src}:{packet.sport}"
        assert line["dst"] == f"{packet.dst}:{packet.dport}"
        info = line["info"]
        if record["type"] == "fpdu":
            ddp, rdmap = record["ddp"], record["rdmap"]
            assert isinstance(ddp, dict) and isinstance(rdmap, dict)
            assert line["proto"] == "RDMAP"
            assert info.startswith(str(rdmap["opcode_name"]) + " ")
            if ddp["tagged"]:
                assert f"STag {ddp['stag']:#x} TO {ddp['to']:#x}" in info
            else:
                assert f"QN {ddp['qn']} MSN {ddp['msn']} MO {ddp['mo']}" in info
            assert f"len {ddp['payload_length']}" in info
            assert f"FPDU {record['wire_length']} CRC ok" in info
            markers = record["markers"]
            assert isinstance(markers, list)
            assert (f"markers {len(markers)}" in info) is bool(markers)
        else:
            assert line["proto"] == "MPA"
            kind = "Request" if record["type"] == "mpa_request" else "Reply"
            assert info.startswith(f"{kind} Rev 1 M={record['m']} C=1 R=0 S=0")
    # The closing lines stay; no per-connection block.
    assert "0 protocol errors" in done.stdout and "stream 0:" not in done.stdout


def test_bad_crc_and_errors_are_listed(tmp_path: Path) -> None:
    conv = standard(False, False)
    path = tmp_path / "c.pcap"

    def damage(name: str, pieces: list[bytes]) -> list[bytes]:
        if name != "responder":
            return pieces
        first = bytearray(pieces[0])
        first[-1] ^= 0xFF  # the CRC's last octet
        return [bytes(first), *pieces[1:]]

    cap, _ = conv.capture(mutate=damage)
    cap.write(str(path))
    done = decode(str(path), "-T", "text")
    assert done.returncode == 1
    lines = listed(done.stdout)
    bad = [m for m in lines if "CRC BAD" in m["info"]]
    assert len(bad) == 1 and bad[0]["info"].startswith("RDMA_READ_RESPONSE")
    errors = [m for m in lines if m["proto"] == "ERROR"]
    assert len(errors) == 1 and errors[0]["info"].startswith("[mpa 2] CRC field")
    assert errors[0]["frame"] == bad[0]["frame"]


@pytest.mark.slow
def test_count_stops_after_n_records(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    write(standard(False, False), path)
    for n in (1, 3, 11, 50):
        done = decode(str(path), "-c", str(n))  # -c alone: the listing
        assert done.returncode == 0
        assert len(listed(done.stdout)) == min(n, 11)
        assert ("stopped after the first" in done.stdout) is (n <= 11)
        lines = [
            json.loads(x) for x in decode(str(path), "--json", "-c", str(n)).stdout.split("\n") if x
        ]
        kinds = [x["type"] for x in lines]
        assert kinds.count("fpdu") + kinds.count("mpa_request") + kinds.count("mpa_reply") == min(
            n, 11
        )
        assert lines[-1]["type"] == "capture_summary"
        assert lines[-1]["stopped_after"] == (n if n <= 11 else None)


def test_count_keeps_the_exit_status_of_errors_decoded(tmp_path: Path) -> None:
    conv = standard(False, False)
    path = tmp_path / "c.pcap"

    def damage(name: str, pieces: list[bytes]) -> list[bytes]:
        if name != "initiator":
            return pieces
        first = bytearray(pieces[0])
        first[-1] ^= 0xFF
        return [bytes(first), *pieces[1:]]

    cap, _ = conv.capture(mutate=damage)
    cap.write(str(path))
    early = decode(str(path), "-c", "2")  # the frames only: no error yet
    assert early.returncode == 0 and early.stdout.rstrip().endswith("0 protocol errors")
    late = decode(str(path), "-c", "4")  # the damaged FPDU and its error
    assert late.returncode == 1 and late.stdout.rstrip().endswith("1 protocol errors")


@pytest.mark.slow
def test_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    write(standard(False, False), path)
    for argv in (["-x", "--json"], ["-c", "2", "-T", "summary"], ["-c", "0"], ["-c", "x"]):
        done = decode(str(path), *argv)
        assert done.returncode == 2, argv
        assert "Traceback" not in done.stderr and done.stderr.startswith(
            ("iwarp decode: ", "usage: ")
        )


def dumps(text: str) -> list[bytes]:
    """The octets of each hex dump in the output."""
    out: list[bytes] = []
    current: bytearray | None = None
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]{4}  ", line):
            if line.startswith("0000"):
                current = bytearray()
                out.append(b"")
            assert current is not None
            current += bytes.fromhex(line[6:54])
            out[-1] = bytes(current)
    return out


def expected_fpdus(conv: Conversation, seqs: dict[str, list[int]]) -> dict[int, bytes]:
    """Each FPDU's octets on the wire, by its sequence number."""
    out: dict[int, bytes] = {}
    for name, ulpdus, markers in (
        ("initiator", conv.i2r, conv.reply.markers),
        ("responder", conv.r2i, conv.request.markers),
    ):
        encoder = FpduEncoder(markers=markers, crc=conv.crc, origin=seqs[name][0])
        for seq, ulpdu in zip(seqs[name], ulpdus, strict=True):
            assert encoder.position == seq
            out[seq] = encoder.encode_bytes(ulpdu)
    return out


@settings(max_examples=25)
@given(
    st.lists(st.integers(1, 1500), min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_hex_dump_is_each_fpdu_as_on_the_wire_at_every_cut(
    sizes: list[int], markers_i2r: bool, markers_r2i: bool
) -> None:
    import tempfile

    conv = standard(markers_i2r, markers_r2i)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "c.pcap"
        seqs = write(conv, path, resegmented(sizes))
        status, text = in_process(str(path), "-x")
    assert status == 0
    lines = listed(text)
    assert len(lines) == 11
    found = dumps(text)
    assert len(found) == len(lines)  # every frame and FPDU has its octets
    wanted = expected_fpdus(conv, seqs)
    assert sorted(found[2:]) == sorted(wanted.values())
    assert found[0].startswith(b"MPA ID Req Frame") and found[1].startswith(b"MPA ID Rep Frame")


def test_hex_dump_of_coalesced_fpdus(tmp_path: Path) -> None:
    conv = standard(False, True)
    path = tmp_path / "c.pcap"
    seqs = write(conv, path, coalesced(3))
    done = decode(str(path), "-T", "text", "-x")
    assert done.returncode == 0
    assert sorted(dumps(done.stdout)[2:]) == sorted(expected_fpdus(conv, seqs).values())


def test_hex_dump_format() -> None:
    data = bytes(range(0x40, 0x40 + 20))
    assert hex_dump(data) == [
        "0000  40 41 42 43 44 45 46 47  48 49 4a 4b 4c 4d 4e 4f  @ABCDEFGHIJKLMNO",
        "0010  50 51 52 53" + " " * 39 + "PQRS",
    ]
    assert hex_dump(b"\x00\x7f a") == ["0000  00 7f 20 61" + " " * 39 + ".. a"]


def test_sequence_numbers_that_wrap(tmp_path: Path) -> None:
    # Both directions cross 2**32 in the middle of the traffic.
    conv = standard(True, True)
    path = tmp_path / "wrap.pcap"
    cap, seqs = conv.capture(resegmented([333, 1000]), client_isn=0xFFFFF800, server_isn=0xFFFFFC00)
    cap.write(str(path))
    assert any(s < 0x1000 for s in seqs["initiator"])  # wrapped
    done = decode(str(path), "-x")
    assert done.returncode == 0
    assert sorted(dumps(done.stdout)[2:]) == sorted(expected_fpdus(conv, seqs).values())


def test_frame_index_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    from iwarp.analyze import listing
    from iwarp.analyze.records import NoteRecord

    monkeypatch.setattr(listing, "RING", 8)
    # three segments of 100 octets, each counted with what holding it costs
    monkeypatch.setattr(listing, "OCTETS_PER_FLOW", 3 * (100 + listing.SEGMENT_COST))
    index = listing.FrameIndex(keep_octets=True)

    def packet(frame: int, seq: int, payload: bytes) -> TcpPacket:
        return TcpPacket(
            frame, 100.0 + frame, "10.0.0.1", 1, "10.0.0.2", 2, seq, 0, 0x18, payload, len(payload)
        )

    data = bytes(range(256)) * 4
    for frame in range(1, 11):  # 100 octets each, from seq 0xFFFFFF80 (wrapping)
        start = (frame - 1) * 100
        index.add(packet(frame, (0xFFFFFF80 + start) & 0xFFFFFFFF, data[start : start + 100]))

    def fpdu(frame: int, offset: int, size: int) -> FpduRecord:
        seq = (0xFFFFFF80 + offset) & 0xFFFFFFFF
        return FpduRecord(0, "initiator", seq, frame, size, size - 6, (), b"", 0, 0, False)

    recent = fpdu(8, 750, 200)  # frames 8-10: still held
    assert index.octets(recent) == data[750:950]
    where = index.where(recent)
    assert where is not None and (where.time, where.epoch) == (7.0, 108.0)
    assert (where.src, where.sport, where.dst, where.dport) == ("10.0.0.1", 1, "10.0.0.2", 2)
    old = fpdu(2, 150, 100)  # frame 2 left the ring (8 frames) and its octets (3 segments)
    assert index.octets(old) is None
    assert index.where(old) == where  # the last place known for the direction
    assert index.octets(fpdu(9, 850, 200)) is None  # past what was captured
    note = NoteRecord(0, "initiator", 0, None, "no frame")
    assert index.where(note) == where and index.octets(note) is None
    index.forget(0)
    assert index.where(note) is None


def _tcp(frame: int, seq: int, payload: bytes) -> TcpPacket:
    return TcpPacket(
        frame, float(frame), "10.0.0.1", 1, "10.0.0.2", 2, seq, 0, 0x18, payload, len(payload)
    )


def _fpdu_at(seq: int, frame: int, size: int) -> FpduRecord:
    return FpduRecord(0, "initiator", seq, frame, size, size - 6, (), b"", 0, 0, False)


def test_tiny_segments_hold_bounded_memory_and_the_dump_stays_cheap() -> None:
    from iwarp.analyze import listing

    # A hostile capture of one-octet segments: what a flow holds for -x is
    # bounded by segments too, not only by payload octets.
    index = listing.FrameIndex(keep_octets=True)
    count = 50_000
    for i in range(count):
        index.add(_tcp(i + 1, i, bytes([i & 0xFF])))
    held = max(len(o.segments) for o in index._octets.values())
    assert held <= listing.OCTETS_PER_FLOW // (1 + listing.SEGMENT_COST) + 1
    size = held // 2
    start = count - size
    got = index.octets(_fpdu_at(start, start + 1, size))
    assert got == bytes(i & 0xFF for i in range(start, count))
    assert index.octets(_fpdu_at(0, 1, size)) is None  # long gone


def test_dump_takes_each_octet_from_its_first_copy() -> None:
    from iwarp.analyze import listing

    index = listing.FrameIndex(keep_octets=True)
    index.add(_tcp(1, 1000, b"A" * 5))  # octets 1000-1004
    index.add(_tcp(2, 1005, b"B" * 5))  # octets 1005-1009
    index.add(_tcp(3, 1000, b"C" * 10))  # a retransmission that differs: not used
    index.add(_tcp(4, 0xFFFFFFFE, b"W" * 4))  # wraps past 2**32
    assert index.octets(_fpdu_at(1000, 1, 10)) == b"AAAAABBBBB"
    assert index.octets(_fpdu_at(1003, 1, 4)) == b"AABB"
    assert index.octets(_fpdu_at(1000, 3, 12)) is None  # octets 1010-1011 never captured
    assert index.octets(_fpdu_at(0xFFFFFFFF, 4, 3)) == b"WWW"
    # the end captured first, then the whole again: the end keeps its first copy
    index.add(_tcp(5, 5005, b"E" * 5))
    index.add(_tcp(6, 5000, b"F" * 10))
    assert index.octets(_fpdu_at(5000, 6, 10)) == b"FFFFFEEEEE"


@pytest.mark.slow
def test_rfc7306_messages_in_the_listing_fields_and_filter(tmp_path: Path) -> None:
    from test_rfc7306_decode import conversation, traffic

    i2r, r2i = traffic()
    path = tmp_path / "atomics.pcap"
    cap, _ = conversation(i2r, r2i).capture()
    cap.write(str(path))
    rdmap = [r["rdmap"] for r in records(path) if r["type"] == "fpdu"]
    assert all(isinstance(r, dict) for r in rdmap)
    requests = [r["atomic_request"] for r in rdmap if isinstance(r, dict) and "atomic_request" in r]
    responses = [
        r["atomic_response"] for r in rdmap if isinstance(r, dict) and "atomic_response" in r
    ]
    assert len(requests) == len(responses) == 3
    lines = listed(decode(str(path), "-Y", "opcode == atomic_request").stdout)
    assert len(lines) == 3
    for line, request in zip(lines, requests, strict=True):
        assert f"AOpCode {request['aopcode']} ReqID {request['request_id']:#x}" in line["info"]
        assert f"STag {request['stag']:#x} TO {request['to']:#x}" in line["info"]
    fields = decode(
        str(path), "-e", "request_id", "-e", "original", "-Y", "opcode == atomic_response"
    ).stdout.splitlines()
    assert fields == [f"{r['request_id']:#x}\t{r['original']:#x}" for r in responses]
    imm = decode(str(path), "-e", "immediate_data", "-Y", "immediate_data contains 494d")
    assert imm.stdout.splitlines() == [b"IMMEDIAT".hex()]
    fetch_adds = decode(str(path), "-e", "atomic_data", "-Y", "aopcode == fetch_add")
    assert fetch_adds.stdout.splitlines() == ["0x3", "0x1"]
