"""What a capture file claims cannot make the reader hold it: records and
blocks longer than the caps are cut to them, and a file that ends in the
middle of a record is reported as cut off (text, JSON, exit status 3).
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from analyze_traffic import standard
from test_analyzer import to_pcapng

from iwarp.analyze.capture import (
    BLOCK_CAP,
    FRAME_CAP,
    CaptureStats,
    TcpPacket,
    read_tcp_packets,
)
from iwarp.cli import main

BOMB: int = 768 << 20


def classic() -> bytes:
    """A small clean capture (pcap): the standard conversation."""
    cap, _ = standard(False, True).capture()
    return cap.to_bytes()


def sent_fpdus() -> int:
    conv = standard(False, True)
    return len(conv.i2r) + len(conv.r2i)


def write_bomb(path: Path, *, pcapng: bool) -> None:
    """One record (or Enhanced Packet Block) of 768 MiB of zeros, then the
    standard conversation, gzip'd (a few hundred KiB on disk).

    The zeros are one gzip member of 1 MiB, compressed once and written 768
    times: a file of several members is one gzip stream to its readers
    (RFC 1952, 2.2), and compressing 768 MiB took seconds of each run."""
    data = to_pcapng(classic()) if pcapng else classic()
    # The file's headers (SHB and IDB, or the pcap header), then the bomb.
    head = record_starts(data, pcapng=True)[2] if pcapng else 24
    if pcapng:
        header = struct.pack("<IIIIIII", 6, BOMB + 32, 0, 0, 0, BOMB, BOMB)
    else:
        header = struct.pack("<IIII", 0, 0, BOMB, BOMB)
    zeros = gzip.compress(bytes(1 << 20), mtime=0)
    with path.open("wb") as out:
        out.write(gzip.compress(data[:head] + header, mtime=0))
        for _ in range(BOMB >> 20):
            out.write(zeros)
        tail = struct.pack("<I", BOMB + 32) if pcapng else b""
        out.write(gzip.compress(tail + data[head:], mtime=0))


_MEASURE = """
import resource, subprocess, sys
status = subprocess.call([sys.executable, "-m", "iwarp", "decode", "--json", *sys.argv[1:]])
print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@pytest.mark.slow
@pytest.mark.parametrize("pcapng", [False, True], ids=["pcap", "pcapng"])
def test_a_gzip_bomb_stays_small(tmp_path: Path, pcapng: bool) -> None:
    path = tmp_path / "bomb.pcap.gz"
    write_bomb(path, pcapng=pcapng)
    assert path.stat().st_size < 4 << 20
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    *lines, last = done.stdout.splitlines()
    status, rss_kib = (int(x) for x in last.split())
    summary = json.loads(lines[-1])
    assert summary["type"] == "capture_summary"
    assert rss_kib < 256 << 10
    assert summary["oversized_records"] == 1 and summary["first_oversized_frame"] == 1
    assert summary["truncated"] is False
    # The frames after the bomb are all decoded.
    assert summary["fpdus"] == sent_fpdus()
    assert summary["errors"] == 0 and status == 0


def test_a_long_record_is_cut_to_the_cap_and_decodes_as_a_snaplen_cut() -> None:
    data = classic()
    frames = [p for p in read_tcp_packets(io.BytesIO(data))]
    first_payload = next(i for i, p in enumerate(frames) if p.payload)
    # Rebuild the capture with that frame padded out to twice the cap.
    out = bytearray(data[:24])
    pos, index = 24, 0
    while pos < len(data):
        seconds, fraction, caplen, _ = struct.unpack_from("<IIII", data, pos)
        frame = data[pos + 16 : pos + 16 + caplen]
        if index == first_payload:
            frame += bytes(2 * FRAME_CAP)
        out += struct.pack("<IIII", seconds, fraction, len(frame), len(frame)) + frame
        pos += 16 + caplen
        index += 1
    stats = CaptureStats()
    again = list(read_tcp_packets(io.BytesIO(bytes(out)), stats))
    assert stats.oversized == 1 and stats.first_oversized == first_payload + 1
    assert not stats.truncated_file
    # The padding lies past the IP length: the frame is what it was.
    assert again == frames


def test_a_huge_pcapng_block_is_read_past_not_held() -> None:
    data = to_pcapng(classic())
    head = record_starts(data, pcapng=True)[2]
    size = 3 * BLOCK_CAP
    custom = struct.pack("<II", 0x40000BAD, size) + bytes(size - 12) + struct.pack("<I", size)
    blob = data[:head] + custom + data[head:]
    stats = CaptureStats()
    packets = list(read_tcp_packets(io.BytesIO(blob), stats))
    assert packets == list(read_tcp_packets(io.BytesIO(data)))
    assert not stats.truncated_file and stats.oversized == 0


def record_starts(data: bytes, *, pcapng: bool) -> list[int]:
    """Offsets of the records (blocks) of a capture, and its end."""
    starts = []
    pos = 0 if pcapng else 24
    while pos < len(data):
        starts.append(pos)
        if pcapng:
            pos += struct.unpack_from("<I", data, pos + 4)[0]
        else:
            pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return [*starts, len(data)]


@pytest.mark.parametrize("pcapng", [False, True], ids=["pcap", "pcapng"])
def test_a_file_cut_at_every_point_says_where(pcapng: bool) -> None:
    data = classic()
    if pcapng:
        data = to_pcapng(data)
    starts = record_starts(data, pcapng=pcapng)
    whole: list[TcpPacket] = list(read_tcp_packets(io.BytesIO(data)))
    first = 28 if pcapng else 24
    for cut in range(first, len(data) + 1):
        stats = CaptureStats()
        packets = list(read_tcp_packets(io.BytesIO(data[:cut]), stats))
        if cut in starts:
            assert not stats.truncated_file and stats.truncated_at is None
        else:
            at = max(s for s in starts if s < cut)
            assert stats.truncated_file and stats.truncated_at == at, cut
        # What came before the cut is read as it was.
        assert packets == whole[: len(packets)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["decode", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("kind", ["pcap", "pcapng", "gzip"])
def test_a_cut_off_capture_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    data = classic()
    if kind == "pcapng":
        data = to_pcapng(data)
    starts = record_starts(data, pcapng=kind == "pcapng")
    cut = starts[-2] + 10  # inside the last record
    path = tmp_path / f"cut.{kind}"
    if kind == "gzip":
        # The compressed file itself is cut: it also lacks its end marker.
        packed = gzip.compress(data)
        path.write_bytes(packed[: len(packed) * 2 // 3])
    else:
        path.write_bytes(data[:cut])
    status, out, err = run(capsys, str(path), "--json")
    summary = json.loads(out.splitlines()[-1])
    assert summary["type"] == "capture_summary"
    assert summary["truncated"] is True
    assert isinstance(summary["truncated_at"], int)
    if kind != "gzip":
        assert summary["truncated_at"] == starts[-2]
    assert status == 3 and err == ""
    status, text, _ = run(capsys, str(path))
    assert status == 3
    at = summary["truncated_at"]
    assert f"capture cut off: the file ends in the middle of the record at octet {at}" in text
    # The whole file is clean: exit 0 and no such line.
    whole = tmp_path / "whole.pcap"
    whole.write_bytes(data)
    status, text, _ = run(capsys, str(whole))
    assert status == 0 and "cut off" not in text


def test_protocol_errors_outrank_a_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(classic())
    starts = record_starts(bytes(data), pcapng=False)
    frames = list(read_tcp_packets(io.BytesIO(bytes(data))))
    # Damage the last octet of a frame with payload in the middle (an FPDU's CRC).
    index = next(i for i in range(len(frames) // 2, len(frames)) if frames[i].payload)
    data[starts[index + 1] - 1] ^= 0xFF
    path = tmp_path / "bad-and-cut.pcap"
    path.write_bytes(bytes(data[: starts[-2] + 5]))
    status, out, _ = run(capsys, str(path))
    assert "capture cut off" in out
    assert status == 1
