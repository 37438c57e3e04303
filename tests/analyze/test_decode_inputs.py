"""``iwarp decode``: standard input and live pipes, compressed captures, several
files at once, ``-V``, ``--csv``, ``--plot``, link types, truncated captures,
Terminate reasons and per-connection statistics."""

from __future__ import annotations

import csv
import gzip
import json
import lzma
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from analyze_traffic import (
    Conversation,
    frame,
    payload,
    pcap_records,
    read_response,
    send,
    standard,
)

from iwarp.cli import main
from iwarp.ddp.wire import UntaggedHeader
from iwarp.rdmap.wire import RdmapOpcode, TerminateHeader, rdmap_control


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["decode", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def terminate(layer: int, etype: int, code: int) -> bytes:
    header = UntaggedHeader(
        qn=2, msn=1, mo=0, last=True, rsvdulp=rdmap_control(RdmapOpcode.TERMINATE)
    )
    return header.pack() + TerminateHeader(layer, etype, code).pack()


def write_standard(path: Path, **kwargs: object) -> int:
    """The standard conversation as a pcap; returns its FPDU count."""
    conv = standard(False, True)
    cap, _ = conv.capture(**kwargs)  # type: ignore[arg-type]
    cap.write(str(path))
    return len(conv.i2r) + len(conv.r2i)


def fpdu_count(out: str) -> int:
    return sum(1 for line in json_lines(out) if line["type"] == "fpdu")


def test_statistics_of_a_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conv = standard(False, False)
    conv.r2i.append(terminate(1, 1, 0))  # named by iwarp.rdmap.terminate.terminate_name
    cap, _ = conv.capture()
    path = tmp_path / "t.pcap"
    cap.write(str(path))
    status, text, _ = run(capsys, str(path))
    assert status == 0
    assert "Terminate at frame" in text
    assert "DDP tagged buffer error: invalid STag (RFC 5041 §7.2)" in text
    assert "Read latency: 1 Reads" in text
    assert "setup: TCP SYN to MPA full operation" in text
    status, out, _ = run(capsys, str(path), "--json")
    (summary,) = [line for line in json_lines(out) if line["type"] == "stream_summary"]
    directions: Any = summary["directions"]
    initiator, responder = directions
    opcodes = initiator["stats"]["opcodes"]
    assert opcodes["SEND"] == {"fpdus": 3, "messages": 3, "octets": 1403}
    assert opcodes["RDMA_WRITE"] == {"fpdus": 2, "messages": 2, "octets": 700}
    assert initiator["stats"]["read_latency"]["count"] == 1
    assert initiator["stats"]["fpdu_sizes"]["count"] == 6
    (term,) = responder["stats"]["terminate_list"]
    assert (term["layer"], term["etype"], term["code"]) == (1, 1, 0)
    assert term["reason"] == "DDP tagged buffer error: invalid STag (RFC 5041 §7.2)"
    assert sum(initiator["stats"]["throughput"]["octets"]) == initiator["tcp_octets"]
    assert summary["setup_seconds"] is not None


def test_compressed_captures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "c.pcap"
    count = write_standard(plain)
    data = plain.read_bytes()
    (tmp_path / "c.pcap.gz").write_bytes(gzip.compress(data))
    (tmp_path / "c.pcap.xz").write_bytes(lzma.compress(data))
    for name in ("c.pcap", "c.pcap.gz", "c.pcap.xz"):
        status, out, _ = run(capsys, str(tmp_path / name), "--json")
        assert status == 0
        assert fpdu_count(out) == count
    # Zstandard: read when a reader is installed, else a clear error (no traceback).
    (tmp_path / "c.pcap.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    status, _, err = run(capsys, str(tmp_path / "c.pcap.zst"))
    assert status == 2
    assert "Zstandard" in err or "zstd" in err.lower()


def test_unsupported_link_type_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "usb.pcap"
    frame_bytes = b"\0" * 40
    path.write_bytes(
        struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 189)  # USB Linux
        + struct.pack("<IIII", 0, 0, len(frame_bytes), len(frame_bytes))
        + frame_bytes
    )
    status, out, err = run(capsys, str(path))
    assert status == 2
    assert "link type 189 is not supported" in err
    assert "0 TCP segments" not in out


def test_a_truncated_capture_is_reported_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.pcap"
    write_standard(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])
    _, out, _ = run(capsys, str(path), "--json")
    capture = json_lines(out)[-1]
    assert capture["type"] == "capture_summary"
    assert capture["truncated"] is True
    _, text, _ = run(capsys, str(path))
    assert "the capture is truncated" in text


def test_verbose_lists_every_fpdu_and_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v.pcap"
    count = write_standard(path)
    status, text, _ = run(capsys, str(path), "-V")
    assert status == 0
    assert text.count(": FPDU, ") == count
    assert text.count("    MPA: ULPDU_Length") == count
    assert "Marker at seq" in text  # markers towards the Initiator
    assert "RDMAP: version 1, RDMA_READ_REQUEST" in text
    assert "Read Request: sink STag 0x1234 TO 0x10, 4096 octets" in text
    assert ": MPA Request" in text and ": MPA Reply" in text
    assert "DDP: version 1, flags TL, STag 0xabcd" in text


def test_several_files_in_parallel_with_a_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.pcap"
    count = write_standard(good)

    def corrupt(name: str, pieces: list[bytes]) -> list[bytes]:
        if name == "responder":
            pieces[1] = pieces[1][:-1] + bytes([pieces[1][-1] ^ 0xFF])
        return pieces

    bad = tmp_path / "bad.pcap"
    cap, _ = standard(False, False).capture(mutate=corrupt)
    cap.write(str(bad))
    status, out, _ = run(capsys, str(good), str(bad), str(good), "--json", "--jobs", "2")
    assert status == 1
    lines = json_lines(out)
    captures = [line for line in lines if line["type"] == "capture_summary"]
    assert [c["capture"] for c in captures] == [str(good), str(bad), str(good)]
    assert [c["errors"] for c in captures] == [0, 1, 0]
    total = lines[-1]
    assert total["type"] == "total"
    assert (total["captures"], total["errors"], total["fpdus"]) == (3, 1, 3 * count)
    status, text, _ = run(capsys, str(good), str(tmp_path / "missing.pcap"), "--jobs", "2")
    assert status == 2
    assert "total: 2 captures" in text
    assert "missing.pcap: unreadable" in text


def test_csv_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.pcap"
    count = write_standard(path)
    tables = tmp_path / "tables"
    status, _, _ = run(capsys, str(path), str(path), "--csv", str(tables), "--jobs", "1")
    assert status == 0
    rows = {}
    for name in ("fpdus", "messages", "connections", "errors"):
        with (tables / f"{name}.csv").open(newline="") as f:
            rows[name] = list(csv.DictReader(f))
    assert len(rows["fpdus"]) == 2 * count
    assert len(rows["messages"]) == 2 * count  # every message of one FPDU here
    assert len(rows["connections"]) == 2 * 2  # one row per direction
    assert rows["errors"] == []
    assert {r["opcode_name"] for r in rows["fpdus"]} >= {"SEND", "RDMA_WRITE", "RDMA_READ_REQUEST"}
    writes = [r for r in rows["messages"] if r["opcode_name"] == "RDMA_WRITE"]
    assert writes[0]["stag"] == str(0xABCD)
    assert not [p for p in os.listdir(tables) if p.startswith(".part")]


@pytest.mark.slow
def test_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.pcap"
    write_standard(path)
    status, _, err = run(capsys, str(path), "--plot", str(tmp_path / "p.gif"))
    assert status == 2 and ".svg" in err
    pytest.importorskip("matplotlib")
    status, _, _ = run(capsys, str(path), "--plot", str(tmp_path / "p.png"))
    assert status == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status, _, _ = run(capsys, str(path), "--plot", str(tmp_path / "p.svg"))
    assert "Throughput over time" in (tmp_path / "p.svg").read_text()
    # Without matplotlib, the flag says how to get it.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status, _, err = run(capsys, str(path), "--plot", str(tmp_path / "q.png"))
    assert status == 2
    assert "pip install 'iwarp[plot]'" in err
    assert not (tmp_path / "q.png").exists()


def test_standard_input_is_decoded_as_it_arrives(tmp_path: Path) -> None:
    """A live pipe: the first connection's records come out while the
    second connection is still being written."""
    header, first = pcap_records(standard(False, False).capture()[0].to_bytes())
    conv = Conversation(frame(True), frame(False))
    conv.i2r = [send(1, payload(10, 1))]
    conv.r2i = [read_response(1, 0, payload(10, 2))]
    _, second = pcap_records(conv.capture(client=("127.0.0.1", 40001))[0].to_bytes())

    def records(frames: list[tuple[int, int, bytes]]) -> bytes:
        return b"".join(struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in frames)

    process = subprocess.Popen(
        [sys.executable, "-m", "iwarp", "decode", "-", "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(header + records(first) + records(second[:3]))
        process.stdin.flush()
        deadline = time.monotonic() + 30
        seen = b""
        while b'"type": "fpdu"' not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 1.0)
            if ready:
                seen += os.read(process.stdout.fileno(), 1 << 16)
        assert b'"type": "mpa_request"' in seen and b'"type": "fpdu"' in seen
        assert process.poll() is None  # still reading: the pipe is open
        process.stdin.write(records(second[3:]))
        process.stdin.close()
        rest, err = process.stdout.read(), process.stderr.read() if process.stderr else b""
        assert process.wait(timeout=30) == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = [json.loads(x) for x in (seen + rest).decode().splitlines()]
    assert [x["stream"] for x in lines if x["type"] == "stream_summary"] == [0, 1]
    assert lines[-1]["capture"] == "<stdin>"


def test_progress_line(capsys: pytest.CaptureFixture[str]) -> None:
    from iwarp.cli.decode import _Progress

    class Reader:
        count = 25_000_000

    meter = _Progress("big.pcap", 100_000_000, Reader())  # type: ignore[arg-type]
    meter.started -= 2.0  # as if two seconds had passed
    meter.last -= 2.0
    meter.update()
    meter.clear()
    err = capsys.readouterr().err
    assert " 25.0%" in err and "11.9 MiB/s" in err and "ETA 0:06" in err


@pytest.mark.parametrize("batch", [1, 3, 256])
def test_json_lines_in_batches_are_the_loop_s_even_when_the_capture_breaks(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    batch: int,
) -> None:
    # Plain --json writes its lines in batches; with -c (not reached) the
    # record loop writes them one by one: the same lines, also when a
    # broken pcapng block stops the capture midway (those decoded before
    # are out, then the capture's summary).
    from test_analyzer import to_pcapng

    from iwarp.cli import decode

    monkeypatch.setattr(decode, "_JSON_BATCH", batch)
    classic = tmp_path / "s.pcap"
    write_standard(classic)
    whole = to_pcapng(classic.read_bytes())
    cut = len(whole) * 2 // 3
    while struct.unpack_from("<I", whole, cut - 4)[0] % 4 or cut % 4:  # a block boundary
        cut -= 1
    broken = whole[:cut] + struct.pack("<III", 6, 7, 0) + whole[cut:]
    for name, data in (("whole", whole), ("broken", broken)):
        path = tmp_path / f"{name}.pcapng"
        path.write_bytes(data)
        status, batched, err = run(capsys, str(path), "--json")
        status_loop, looped, _ = run(capsys, str(path), "--json", "-c", str(10**9))
        assert status == status_loop
        lines, loop_lines = json_lines(batched), json_lines(looped)
        for line in (lines[-1], loop_lines[-1]):
            assert line["type"] == "capture_summary"
            for key in ("seconds", "mib_per_s"):
                line.pop(key)
        assert lines == loop_lines
        assert sum(1 for line in lines if line["type"] == "fpdu") > 2
        if name == "broken":
            assert status == 2 and "block length" in err, (status, err)
