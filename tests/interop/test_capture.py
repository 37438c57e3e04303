"""tshark's verdict on captures: bad CRCs found, good ones (even "0x..bad..") not flagged."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from iwarp._crc32c import crc32c
from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.interop.capture import check_capture, parse_pdml

# RFC 5044 §7.1 Request/Reply with C=1, Rev 1, no private data.
REQUEST = b"MPA ID Req Frame" + bytes([0x40, 1, 0, 0])
REPLY = b"MPA ID Rep Frame" + bytes([0x40, 1, 0, 0])


def fpdu(ulpdu: bytes, *, corrupt: bool = False) -> bytes:
    """An FPDU without markers; the CRC goes least-significant octet first."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    body += bytes(-len(body) % 4)
    crc = crc32c(body) ^ (1 if corrupt else 0)
    return body + struct.pack("<I", crc)


def send_ulpdu(msn: int) -> bytes:
    """An untagged RDMAP Send (DDP L=1, DV=1, RV=1), QN 0, with 8 octets of payload."""
    return bytes([0x41, 0x43]) + bytes(4) + struct.pack(">III", 0, msn, 0) + b"payload!"


def capture(tmp_path: Path, *, corrupt: set[int]) -> Path:
    cap = TcpCapture()
    cap.send(Direction.C2S, REQUEST)
    cap.send(Direction.S2C, REPLY)
    for msn in range(1, 5):
        cap.send(Direction.C2S, fpdu(send_ulpdu(msn), corrupt=msn in corrupt))
        cap.send(Direction.S2C, fpdu(send_ulpdu(msn)))
    cap.close()
    path = tmp_path / "cap.pcap"
    cap.write(str(path))
    return path


needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")


@pytest.mark.tshark
@needs_tshark
def test_clean_capture(tmp_path: Path) -> None:
    verdict = check_capture(capture(tmp_path, corrupt=set()))
    assert verdict.ok, verdict.summary()
    assert (verdict.requests, verdict.replies) == (1, 1)
    assert verdict.fpdus == {"i>r": 4, "r>i": 4}
    assert verdict.crc_checked == 8


@pytest.mark.tshark
@needs_tshark
def test_bad_crc_found_in_its_direction(tmp_path: Path) -> None:
    verdict = check_capture(capture(tmp_path, corrupt={2}))
    assert not verdict.ok
    assert len(verdict.bad_crc_frames) == 1
    assert "bad CRC in frames" in verdict.summary()


def _pdml(*packets: str) -> str:
    return "<?xml version='1.0'?><pdml>" + "".join(packets) + "</pdml>"


def _packet(num: int, *protos: str, port: int = 5000, tcp_flag: str = "") -> str:
    geninfo = f"<proto name='geninfo'><field name='num' show='{num}'/></proto>"
    flag = f"<field name='{tcp_flag}' show=''/>" if tcp_flag else ""
    tcp = (
        "<proto name='ip'><field name='ip.src' show='127.0.0.1'/></proto>"
        f"<proto name='tcp'><field name='tcp.srcport' show='{port}'/>"
        f"<field name='tcp.len' show='40'/>{flag}</proto>"
    )
    return f"<packet>{geninfo}{tcp}{''.join(protos)}</packet>"


def test_pdml_hex_values_are_not_verdicts(tmp_path: Path) -> None:
    request = "<proto name='iwarp_mpa'><field name='iwarp_mpa.key.req' show='x'/></proto>"
    good = (
        "<proto name='iwarp_mpa'><field name='iwarp_mpa.ulpdulength' show='34'/>"
        "<field name='iwarp_mpa.crc_check' showname='CRC check: 0x482badb4 (Good CRC32)'/></proto>"
    )
    bad = good.replace("(Good CRC32)", "(Bad CRC32, should be 0x12345678)")
    malformed = "<proto name='_ws.malformed' showname='[Malformed Packet]'/>"
    path = tmp_path / "x.pdml"
    path.write_text(
        _pdml(_packet(1, request), _packet(2, good), _packet(3, bad), _packet(4, malformed))
    )
    verdict = parse_pdml(path)
    assert verdict.crc_checked == 2
    assert verdict.bad_crc_frames == [3]
    assert verdict.malformed_frames == [4]
    assert verdict.undecoded_frames == [4]


@pytest.mark.parametrize(
    "flag",
    ["tcp.analysis.lost_segment", "tcp.analysis.out_of_order", "tcp.analysis.retransmission"],
)
def test_bad_crcs_after_a_tcp_gap_are_reported_but_not_errors(tmp_path: Path, flag: str) -> None:
    """tshark reassembles segments as captured: after a segment it saw lost,
    out of order or sent again, its CRC verdicts for that sender are not
    evidence (the FPDU boundaries are lost). Another sender's still are."""
    request = "<proto name='iwarp_mpa'><field name='iwarp_mpa.key.req' show='x'/></proto>"
    bad = (
        "<proto name='iwarp_mpa'><field name='iwarp_mpa.ulpdulength' show='34'/>"
        "<field name='iwarp_mpa.crc_check' showname='CRC check: 0x1 (Bad CRC32, should be 0x2)'/>"
        "</proto>"
    )
    path = tmp_path / "x.pdml"
    path.write_text(
        _pdml(
            _packet(1, request),
            _packet(2, bad),  # before the gap: an error
            _packet(3, bad, tcp_flag=flag),  # the gap
            _packet(4, bad),
            _packet(5, bad, port=6000),  # the other sender: an error
        )
    )
    verdict = parse_pdml(path)
    assert verdict.bad_crc_frames == [2, 5]
    assert verdict.unverified_crc_frames == [3, 4]
    assert verdict.tcp_gaps == {"127.0.0.1:5000": 3}
    assert "CRC not verifiable after a TCP gap (frame 3) in frames 3, 4" in verdict.summary()
    path.write_text(_pdml(_packet(1, request), _packet(3, bad, tcp_flag=flag), _packet(4, bad)))
    assert parse_pdml(path).ok
