"""``iwarp decode`` on RFC 7306 traffic: the four messages decoded and checked
(fields, alignment, 8-octet Immediate Data, each Response matching its
Request), and counted per opcode. The traffic is what two RDMAP cores sent."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from analyze_traffic import Conversation, coalesced, frame, resegmented, send

from iwarp.analyze.analyzer import Analysis, analyze_file
from iwarp.analyze.atomics import AtomicMatcher
from iwarp.analyze.records import ErrorRecord, FpduRecord
from iwarp.cli import main
from iwarp.ddp.wire import UntaggedHeader
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import AtomicRequest, AtomicResponse, RdmapOpcode, rdmap_control
from iwarp.rdmap.work import CompareSwapWR, FetchAddWR, ImmediateWR, RecvWR, SendWR, Sge
from rdmap.rdmap_harness import Side, pump

ATOMIC = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC


def traffic() -> tuple[list[bytes], list[bytes]]:
    """What an initiator and a responder send: atomics, Immediate Data, Sends."""
    registry = MemoryRegistry()
    pd_a, pd_b = registry.alloc_pd(), registry.alloc_pd()
    a_stream = RdmapStream(pd_a, initiator=True, mulpdu=1024)
    b_stream = RdmapStream(pd_b, initiator=False, mulpdu=1024)
    a, b = Side(a_stream, pd_a, []), Side(b_stream, pd_b, [])
    region = pd_b.register(bytearray(16), ATOMIC, address=0x2000)
    for i in range(2):
        b_stream.post_recv(RecvWR(Sge(pd_b.register(bytearray(64), Access.LOCAL_WRITE)), i))
    a_stream.post_send(FetchAddWR(region.stag, 0x2000, 3, wr_id=1))
    a_stream.post_send(ImmediateWR(b"IMMEDIAT", wr_id=2, solicited=True))
    a_stream.post_send(CompareSwapWR(region.stag, 0x2008, 0, 9, wr_id=3))
    a_stream.post_send(SendWR(b"bye", wr_id=4))
    a_stream.post_send(FetchAddWR(region.stag, 0x2000, 1, mask=1 << 31, wr_id=5))
    pump(a, b)
    return a.sent, b.sent


def conversation(i2r: list[bytes], r2i: list[bytes]) -> Conversation:
    conv = Conversation(frame(True), frame(False))
    conv.i2r, conv.r2i = i2r, r2i
    return conv


def analyze(tmp_path: Path, conv: Conversation, cut: object = None) -> Analysis:
    cap, _ = conv.capture() if cut is None else conv.capture(cut)  # type: ignore[arg-type]
    path = tmp_path / "atomics.pcap"
    cap.write(str(path))
    return analyze_file(str(path))


def errors(analysis: Analysis) -> list[str]:
    return [r.message for r in analysis.records() if isinstance(r, ErrorRecord)]


@pytest.mark.parametrize("cut", ["aligned", "coalesced", "resegmented"])
def test_stack_traffic_decodes_cleanly_and_is_counted(tmp_path: Path, cut: str) -> None:
    i2r, r2i = traffic()
    cutter = {"aligned": None, "coalesced": coalesced(2), "resegmented": resegmented([5, 61])}
    analysis = analyze(tmp_path, conversation(i2r, r2i), cutter[cut])
    assert errors(analysis) == []
    (connection,) = analysis.connections
    initiator, responder = connection.directions
    assert initiator.messages == {
        "ATOMIC_REQUEST": 3,
        "IMMEDIATE_DATA_WITH_SE": 1,
        "SEND": 1,
    }
    assert responder.messages == {"ATOMIC_RESPONSE": 3}
    fpdus = [r for r in analysis.records() if isinstance(r, FpduRecord)]
    requests = [r.ulp["atomic_request"] for r in fpdus if "atomic_request" in r.ulp]
    responses = [r.ulp["atomic_response"] for r in fpdus if "atomic_response" in r.ulp]
    assert [q["request_id"] for q in requests] == [r["request_id"] for r in responses]  # type: ignore[index]
    assert [r["original"] for r in responses] == [0, 0, 3]  # type: ignore[index]
    (imm,) = [r.ulp["immediate_data"] for r in fpdus if "immediate_data" in r.ulp]
    assert imm == b"IMMEDIAT".hex()


def test_json_and_text_show_the_headers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    i2r, r2i = traffic()
    cap, _ = conversation(i2r, r2i).capture()
    path = tmp_path / "c.pcap"
    cap.write(str(path))
    assert main(["decode", str(path), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rdmap = [line["rdmap"] for line in lines if line["type"] == "fpdu"]
    first = rdmap[0]
    assert first["opcode_name"] == "ATOMIC_REQUEST"
    assert first["atomic_request"]["aopcode"] == 0
    assert first["atomic_request"]["data"] == 3
    assert any("atomic_response" in r for r in rdmap)
    assert any(r.get("immediate_data") == b"IMMEDIAT".hex() for r in rdmap)
    assert main(["decode", str(path), "--verbose"]) == 0
    text = capsys.readouterr().out
    assert "FetchAdd 0x3 (mask 0x0) at STag" in text
    assert "CmpSwap at STag" in text
    assert "Atomic Response: request 0x1, original value 0x0" in text
    assert f"Immediate Data: {b'IMMEDIAT'.hex()}" in text


def _request(msn: int, rid: int, to: int = 0x1000) -> bytes:
    header = UntaggedHeader(1, msn, 0, rsvdulp=rdmap_control(RdmapOpcode.ATOMIC_REQUEST))
    return header.pack() + AtomicRequest.fetch_add(rid, 0x100, to, 1).pack()


def _response(msn: int, rid: int) -> bytes:
    header = UntaggedHeader(3, msn, 0, rsvdulp=rdmap_control(RdmapOpcode.ATOMIC_RESPONSE))
    return header.pack() + AtomicResponse(rid, 0).pack()


def test_a_response_must_answer_its_request(tmp_path: Path) -> None:
    conv = conversation([_request(1, 7), _request(2, 8)], [_response(1, 7), _response(2, 9)])
    found = errors(analyze(tmp_path, conv))
    assert found == [
        "Atomic Response to request 0x9, but the Atomic Request it answers (in order) is 0x8 "
        "(RFC 7306 §5.2.2)"
    ]


def test_a_response_to_nothing_is_an_error(tmp_path: Path) -> None:
    conv = conversation([send(1, b"hello")], [_response(1, 5)])
    assert errors(analyze(tmp_path, conv)) == [
        "Atomic Response to request 0x5 answers no Atomic Request (RFC 7306 §5.2.2)"
    ]


def test_misaligned_requests_and_short_immediate_data_are_errors(tmp_path: Path) -> None:
    short = UntaggedHeader(0, 1, 0, rsvdulp=rdmap_control(RdmapOpcode.IMMEDIATE_DATA)).pack()
    conv = conversation([_request(1, 1, to=0x1003), short + b"1234567"], [_response(1, 1)])
    assert errors(analyze(tmp_path, conv)) == [
        "atomic target TO 0x1003 is not 64-bit aligned",
        "Immediate Data of 7 octets, not 8",
    ]


def test_the_matcher_pairs_in_either_order_and_is_bounded() -> None:
    matcher: AtomicMatcher[str] = AtomicMatcher()
    assert matcher.response("r", "i", 1, 10, None) is None  # seen before its Request
    assert matcher.request("i", 1, 0, None) is None
    assert matcher.request("i", 2, 0, None) is None
    mismatch = matcher.response("r", "i", 3, 20, 4)
    assert mismatch is not None and (mismatch.sender, mismatch.seq, mismatch.frame) == ("r", 20, 4)
    assert matcher.unanswered() == []
    for n in range(1 << 16):
        matcher.request("i", n, 0, None)
    assert not matcher.overflowed
    matcher.request("i", 0, 0, None)
    assert matcher.overflowed
    assert matcher.response("r", "i", 12345, 0, None) is None  # matching stopped
    assert matcher.unanswered() == []


def test_word_values_are_big_endian_on_the_wire() -> None:
    raw = _request(1, 1)
    assert struct.unpack_from(">Q", raw, 18 + 20)[0] == 1  # Add Data
