"""``iwarp decode`` against Wireshark's dissectors, FPDU by FPDU.

Where tshark can decode a capture (MPA Rev 1, one FPDU per TCP segment,
markers the same both ways; see tools/tshark-check/README.md), both must
agree on every FPDU: ULPDU_Length, the CRC field and its verdict, markers,
and the DDP/RDMAP fields. Where tshark cannot (several FPDUs per segment
with markers, streams cut anywhere, RFC 6581), iwarp must still decode what
was sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from analyze_traffic import (
    Conversation,
    Cutter,
    aligned,
    coalesced,
    frame,
    payload,
    read_request,
    read_response,
    resegmented,
    send,
    write,
)
from tshark_fields import agree_all

from iwarp.analyze.analyzer import analyze_file
from iwarp.analyze.records import ErrorRecord, FpduRecord
from iwarp.ddp.wire import UntaggedHeader
from iwarp.mpa.wire import EnhancedData, Revision, RtrFlags
from iwarp.rdmap.wire import RdmapOpcode, TerminateHeader, rdmap_control
from tsharkutil import needs_tshark

pytestmark = [pytest.mark.tshark, needs_tshark]


def terminate(msn: int) -> bytes:
    header = UntaggedHeader(qn=2, msn=msn, rsvdulp=rdmap_control(RdmapOpcode.TERMINATE))
    return header.pack() + TerminateHeader(layer=2, etype=0, code=2).pack()


def traffic(markers: bool, crc: bool) -> Conversation:
    conv = Conversation(
        frame(True, markers=markers, crc=crc, private=b"ask"),
        frame(False, markers=markers, crc=crc, private=b"answer"),
    )
    conv.i2r = [
        send(1, payload(100, 1)),
        write(0xABCD, 0x1000, payload(1000, 2)),
        send(2, payload(3, 3), opcode=RdmapOpcode.SEND_WITH_SE),
        read_request(1, 4096),
        send(3, payload(1300, 4)),
        write(0xABCD, 0x2000, payload(0, 5)),
    ]
    conv.r2i = [
        read_response(0x1234, 0x10, payload(900, 6)),
        send(1, payload(51, 7)),
        terminate(1),
    ]
    return conv


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [True, False])
def test_every_fpdu_agrees_with_tshark(tmp_path: Path, markers: bool, crc: bool) -> None:
    conv = traffic(markers, crc)
    cap, seqs = conv.capture(aligned)
    path = tmp_path / "agree.pcap"
    cap.write(str(path))
    analysis = analyze_file(str(path))
    ours = [r for r in analysis.records() if isinstance(r, FpduRecord)]
    assert len(ours) == len(conv.i2r) + len(conv.r2i)
    agree_all(ours, path)
    assert not [r for r in analysis.records() if isinstance(r, ErrorRecord)]
    assert sorted(r.seq for r in ours) == sorted(seqs["initiator"] + seqs["responder"])


def test_bad_crc_verdicts_agree_with_tshark(tmp_path: Path) -> None:
    import tsharkutil

    conv = traffic(True, True)

    def damage(name: str, pieces: list[bytes]) -> list[bytes]:
        if name == "initiator":
            pieces[1] = pieces[1][:40] + bytes([pieces[1][40] ^ 0x20]) + pieces[1][41:]
        return pieces

    cap, _ = conv.capture(aligned, mutate=damage)
    path = tmp_path / "bad.pcap"
    cap.write(str(path))
    ours = [r for r in analyze_file(str(path)).records() if isinstance(r, FpduRecord)]
    theirs = tsharkutil.decode(str(path)).fpdus
    assert [r.crc_ok for r in ours] == [p.crc_status == "good" for p in theirs]
    assert [r.crc_ok for r in ours].count(False) == 1


@pytest.mark.parametrize(
    "case", ["markers-coalesced", "markers-resegmented", "resegmented-octets", "rev2"]
)
def test_what_tshark_cannot_decode_iwarp_does(tmp_path: Path, case: str) -> None:
    conv = traffic(case != "resegmented-octets", True)
    cut: Cutter = aligned
    if case == "markers-coalesced":
        cut = coalesced(3)
    elif case.endswith("resegmented") or case == "resegmented-octets":
        cut = resegmented([5, 61, 700, 3])
    elif case == "rev2":
        flags = RtrFlags.PEER_TO_PEER | RtrFlags.WRITE
        conv.request = frame(True, rev=Revision.REV2, enhanced=EnhancedData(2, 2, flags))
        conv.reply = frame(False, rev=Revision.REV2, enhanced=EnhancedData(2, 2, flags))
        conv.i2r.insert(0, write(0, 0, b""))
    cap, seqs = conv.capture(cut)
    path = tmp_path / f"{case}.pcap"
    cap.write(str(path))
    analysis = analyze_file(str(path))
    assert not [r for r in analysis.records() if isinstance(r, ErrorRecord)]
    for direction, ulpdus in (("initiator", conv.i2r), ("responder", conv.r2i)):
        found = [
            r for r in analysis.records() if isinstance(r, FpduRecord) and r.direction == direction
        ]
        assert [r.seq for r in found] == seqs[direction]
        assert [r.ulpdu_length for r in found] == [len(u) for u in ulpdus]
        assert all(r.crc_ok for r in found)
    if case == "rev2":
        # tshark decodes these FPDUs too, and must agree with us on each.
        agree_all([r for r in analysis.records() if isinstance(r, FpduRecord)], path)
