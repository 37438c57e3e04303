"""Octets Linux siw really sent, decoded by ``iwarp decode``.

The interop evidence in ``tests/data/siw/`` (copied from the siw-vm
recording tool's evidence folder) records, for each
experiment with siw in a qemu guest, every chunk read from and written to
the guest, and siw's FPDUs as the recording tool decoded them. Each
experiment is laid out as a capture (one chunk per TCP segment) and decoded:
the FPDUs found must be the ones the tool recorded, with no protocol error
except those the experiment injected on the host side (zero CRCs after C=1,
an unenhanced Reply to an enhanced Request, a peer-to-peer Reply without an
RTR type): siw itself breaks no rule. Where tshark is present it must agree on
every FPDU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tshark_fields import agree, tshark_fpdus

from iwarp.analyze.analyzer import analyze_file
from iwarp.analyze.records import ErrorRecord, FpduRecord, FrameRecord
from iwarp.analyze.synth import Direction, TcpCapture

#: Copies of the recordings (siw's bytes, not code) so every clone runs these tests.
EVIDENCE = Path(__file__).resolve().parents[1] / "data" / "siw"
FILES = sorted(EVIDENCE.glob("*.json"))
#: Experiments where the host (not siw) broke a rule on purpose: the MPA
#: error code each of its errors must carry.
HOST_FAULTS: dict[str, int | None] = {
    "a_rpingsrv_nocrc_siw-crc": 2,  # zero CRC fields although C=1
    "a_rev1": None,  # an unenhanced Reply to an enhanced Request (RFC 6581 §10)
    "a_rpingsrv_p2p-nomatch_siw-p2p": 7,  # a peer-to-peer Reply with no RTR type (§9.2)
}


def build(record: dict[str, Any]) -> tuple[TcpCapture, str, list[dict[str, Any]]]:
    """The experiment as a capture; which side siw is; siw's FPDUs as recorded."""
    cap = TcpCapture(client=("10.0.2.15", 40000), server=("10.0.2.100", 4001))
    if "mode" in record:  # siw is the MPA Initiator, the host listens
        for event in record["events"]:
            if "rx_hex" in event:
                cap.send(Direction.C2S, bytes.fromhex(event["rx_hex"]))
            if "tx_hex" in event:
                cap.send(Direction.S2C, bytes.fromhex(event["tx_hex"]))
        siw, fpdus = "initiator", record.get("fpdus", [])
    else:  # the host connects, siw answers
        cap.send(Direction.C2S, bytes.fromhex(record["request_sent_hex"]))
        cap.send(Direction.S2C, bytes.fromhex(record["reply_raw_hex"]))
        for event in record["events"]:
            if "tx_hex" in event:
                cap.send(Direction.C2S, bytes.fromhex(event["tx_hex"]))
        if record.get("after_reply_hex"):
            cap.send(Direction.S2C, bytes.fromhex(record["after_reply_hex"]))
        siw, fpdus = "responder", record.get("fpdus_from_siw", [])
    cap.close()
    return cap, siw, fpdus


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_siw_traffic_decodes_as_recorded(tmp_path: Path, path: Path) -> None:
    record = json.loads(path.read_text())
    cap, siw, recorded = build(record)
    capture = tmp_path / f"{path.stem}.pcap"
    cap.write(str(capture))
    analysis = analyze_file(str(capture))
    records = list(analysis.records())
    frames = [r for r in records if isinstance(r, FrameRecord)]
    assert frames and frames[0].mpa.is_request
    # siw's own frame, as the recording tool decoded it.
    mine = frames[0] if siw == "initiator" else frames[1]
    theirs = record["mpa_request"] if siw == "initiator" else record["reply"]
    got = mine.to_json()
    assert (got["m"], got["c"], got["r"], got["s"]) == tuple(theirs[k] for k in "MCRS")
    assert (got["rev"], got["pd_length"]) == (theirs["Rev"], theirs["PD_Length"])
    enhanced = theirs.get("enhanced")
    if enhanced:
        assert (got["ird"], got["ord"]) == (enhanced["IRD"], enhanced["ORD"])
        assert got["p2p"] is bool(enhanced["A_p2p"])
    found = [r for r in records if isinstance(r, FpduRecord) and r.direction == siw]
    assert [r.ulpdu_length for r in found] == [f["ULPDU_Length"] for f in recorded]
    assert [r.ulp["opcode"] for r in found] == [f["RDMAP_opcode"] for f in recorded]
    assert all(r.crc_ok is not False for r in found)
    errors = [r for r in records if isinstance(r, ErrorRecord)]
    if path.stem in HOST_FAULTS:
        assert errors
        assert all(e.code == HOST_FAULTS[path.stem] and e.direction != siw for e in errors)
    else:
        assert errors == []
    if shutil.which("tshark") and any(isinstance(r, FpduRecord) for r in records):
        # tshark skips FPDUs that share a segment with the Reply or follow
        # another in one segment (see tools/tshark-check): every FPDU it does
        # decode must be one of ours, in order, and agree with it.
        ours = [r for r in records if isinstance(r, FpduRecord)]
        theirs = tshark_fpdus(capture)
        assert theirs
        at = 0
        for other in theirs:
            while at < len(ours) and ours[at].ulpdu_length != int(other["iwarp_mpa.ulpdulength"]):
                at += 1
            assert at < len(ours), "tshark decoded an FPDU that iwarp did not"
            agree(ours[at], other)
            at += 1
