"""``iwarp decode``: JSON lines, the readable summary and the exit status."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from analyze_traffic import Conversation, frame, payload, pcap_records, send, standard

from iwarp.cli import main
from iwarp.mpa.wire import EnhancedData, Revision, RtrFlags


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["decode", *argv])
    return status, capsys.readouterr().out


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_json_fields_as_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conv = Conversation(
        frame(
            True,
            markers=True,
            rev=Revision.REV2,
            enhanced=EnhancedData(4, 4, RtrFlags.PEER_TO_PEER | RtrFlags.SEND),
        ),
        frame(
            False,
            rev=Revision.REV2,
            enhanced=EnhancedData(4, 4, RtrFlags.PEER_TO_PEER | RtrFlags.SEND),
        ),
    )
    conv.i2r = [send(1, b""), send(2, payload(600, 1))]
    conv.r2i = [send(1, payload(600, 2))]
    cap, seqs = conv.capture()
    path = tmp_path / "c.pcap"
    cap.write(str(path))
    status, out = run(capsys, str(path), "--json")
    assert status == 0
    lines = json_lines(out)
    kinds = [line["type"] for line in lines]
    assert kinds == [
        "mpa_request",
        "mpa_reply",
        "fpdu",
        "fpdu",
        "fpdu",
        "stream_summary",
        "capture_summary",
    ]
    capture = lines[-1]
    assert (capture["connections"], capture["iwarp_connections"], capture["fpdus"]) == (1, 1, 3)
    assert capture["truncated"] is False
    request = lines[0]
    for key in ("stream", "direction", "m", "c", "r", "s", "rev", "pd_length", "ird", "ord"):
        assert key in request
    assert (request["direction"], request["m"], request["s"], request["rev"]) == (
        "initiator",
        1,
        1,
        2,
    )
    assert (request["p2p"], request["rtr"]) == (True, ["send"])
    fpdu = lines[-3]
    assert fpdu["direction"] == "responder"
    assert fpdu["seq"] == seqs["responder"][0]
    assert fpdu["ulpdu_length"] == 618
    assert fpdu["crc_ok"] is True
    markers = fpdu["markers"]
    assert isinstance(markers, list)
    assert [m["ok"] for m in markers] == [True, True]
    assert fpdu["ddp"] == {
        "tagged": False,
        "last": True,
        "ddp_version": 1,
        "ddp_reserved": 0,
        "qn": 0,
        "msn": 1,
        "mo": 0,
        "payload_length": 600,
    }
    assert fpdu["rdmap"]["opcode_name"] == "SEND"  # type: ignore[index]


def test_errors_make_the_exit_status_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = standard(False, False)

    def corrupt(name: str, pieces: list[bytes]) -> list[bytes]:
        if name == "responder":
            pieces[1] = pieces[1][:-1] + bytes([pieces[1][-1] ^ 0xFF])
        return pieces

    cap, seqs = conv.capture(mutate=corrupt)
    path = tmp_path / "bad.pcap"
    cap.write(str(path))
    status, out = run(capsys, str(path), "--json")
    assert status == 1
    (error,) = [line for line in json_lines(out) if line["type"] == "error"]
    assert {k: error[k] for k in ("stream", "direction", "seq", "code")} == {
        "stream": 0,
        "direction": "responder",
        "seq": seqs["responder"][1],
        "code": 2,
    }
    assert "CRC" in str(error["message"])
    status, text = run(capsys, str(path))
    assert status == 1
    assert "MPA error 2 (CRC_MISMATCH)" in text
    assert "1 protocol errors" in text


def test_readable_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap, _ = standard(True, False).capture()
    path = tmp_path / "ok.pcap"
    cap.write(str(path))
    status, text = run(capsys, str(path))
    assert status == 0
    assert "Request: Rev 1, M=0 C=1 R=0 S=0" in text
    assert "Reply:   Rev 1, M=1 C=1 R=0 S=0" in text
    assert "markers on, CRC on" in text
    assert "6 FPDUs" in text
    assert "3 FPDUs" in text
    assert "0 protocol errors" in text


def test_mpa_start_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from analyze_traffic import pcap_records

    cap, seqs = standard(False, True).capture()
    header, records = pcap_records(cap.to_bytes())
    path = tmp_path / "mid.pcap"
    path.write_bytes(
        header + b"".join(struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in records[7:])
    )
    status, out = run(
        capsys,
        str(path),
        "--json",
        "--mpa-start",
        str(seqs["initiator"][0]),
        "--mpa-start",
        hex(seqs["responder"][0]),
        "--markers",
        "auto",
    )
    assert status == 0
    fpdus = [line for line in json_lines(out) if line["type"] == "fpdu"]
    assert len(fpdus) == 9


def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.pcap"
    path.write_bytes(b"nothing")
    assert main(["decode", str(path)]) == 2
    assert main(["decode", str(tmp_path / "missing.pcap")]) == 2


def test_raw_ulp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conv = Conversation(frame(True), frame(False))
    conv.i2r = [b"\xff" * 40, b"not a DDP segment"]  # MPA carrying something else
    cap, _ = conv.capture()
    path = tmp_path / "raw.pcap"
    cap.write(str(path))
    status, out = run(capsys, str(path), "--json")
    assert status == 1
    assert {line["layer"] for line in json_lines(out) if line["type"] == "error"} == {"ddp/rdmap"}
    status, out = run(capsys, str(path), "--json", "--raw-ulp")
    assert status == 0
    fpdus = [line for line in json_lines(out) if line["type"] == "fpdu"]
    assert [(f["ulpdu_length"], f["ddp"], f["rdmap"]) for f in fpdus] == [
        (40, {}, {}),
        (17, {}, {}),
    ]


def test_stream_selects_connections_and_refuses_unknown_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two connections in one file: a clean one (stream 0) and a damaged one (1).
    def corrupt(name: str, pieces: list[bytes]) -> list[bytes]:
        if name == "initiator":
            pieces[0] = pieces[0][:-1] + bytes([pieces[0][-1] ^ 0xFF])
        return pieces

    header, clean = pcap_records(standard(False, True).capture()[0].to_bytes())
    _, damaged = pcap_records(
        standard(False, True).capture(client=("127.0.0.1", 40001), mutate=corrupt)[0].to_bytes()
    )
    path = tmp_path / "two.pcap"
    path.write_bytes(
        header
        + b"".join(struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in clean + damaged)
    )
    status, out = run(capsys, str(path), "--json")
    assert status == 1
    summaries = [line for line in json_lines(out) if line["type"] == "stream_summary"]
    assert [(s["stream"], s["errors"]) for s in summaries] == [(0, 0), (1, 1)]
    status, out = run(capsys, str(path), "--json", "--stream", "0")
    assert status == 0
    assert {line.get("stream") for line in json_lines(out)} == {0, None}
    status, out = run(capsys, str(path), "--json", "--stream", "1")
    assert status == 1
    assert {line.get("stream") for line in json_lines(out)} == {1, None}
    assert main(["decode", str(path), "--stream", "2"]) == 2
    assert "no TCP connection 2" in capsys.readouterr().err
