"""tshark's view of each FPDU as plain field values, and the comparison with ours."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from iwarp.analyze.records import FpduRecord

FIELDS = (
    "iwarp_mpa.ulpdulength",
    "iwarp_mpa.crc_check",
    "iwarp_mpa.crc",
    "iwarp_mpa.marker_res",
    "iwarp_mpa.marker_fpduptr",
    "iwarp_ddp.tagged_flag",
    "iwarp_ddp.last_flag",
    "iwarp_ddp.dv",
    "iwarp_ddp.stag",
    "iwarp_ddp.tagged_offset",
    "iwarp_ddp.qn",
    "iwarp_ddp.msn",
    "iwarp_ddp.mo",
    "iwarp_rdma.version",
    "iwarp_rdma.opcode",
    "iwarp_rdma.inval_stag",
    "iwarp_rdma.sinkstag",
    "iwarp_rdma.sinkto",
    "iwarp_rdma.rdmardsz",
    "iwarp_rdma.srcstag",
    "iwarp_rdma.srcto",
    "iwarp_rdma.term_layer",
    "iwarp_rdma.term_errcode_llp",
)


def tshark_fpdus(path: Path) -> list[dict[str, str]]:
    """One dict per frame holding an FPDU: tshark's field values as shown."""
    tshark = shutil.which("tshark")
    assert tshark is not None
    cmd = [tshark, "-n", "-r", str(path), "-T", "fields", "-E", "separator=\t"]
    cmd += ["-E", "occurrence=a", "-E", "aggregator=,"]
    cmd += ["-o", "tcp.try_heuristic_first:TRUE", "-o", "tcp.desegment_tcp_streams:TRUE"]
    cmd += ["--disable-heuristic", "rpcrdma_iwarp", "--disable-heuristic", "smb_direct_iwarp"]
    cmd += ["-Y", "iwarp_mpa.ulpdulength"]
    for name in FIELDS:
        cmd += ["-e", name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


def number(text: str) -> int:
    return int(text, 0)


def flag(text: str) -> bool:
    return text.lower() in ("1", "true")


def agree(ours: FpduRecord, theirs: dict[str, str]) -> None:
    """Every field tshark shows for this FPDU matches ours."""
    assert number(theirs["iwarp_mpa.ulpdulength"]) == ours.ulpdu_length
    # tshark shows the four CRC octets read big-endian; ours is the value.
    shown = theirs["iwarp_mpa.crc_check"] or theirs["iwarp_mpa.crc"]
    assert number(shown) == int.from_bytes(ours.crc.to_bytes(4, "little"), "big")
    pointers = [number(p) for p in theirs["iwarp_mpa.marker_fpduptr"].split(",") if p]
    reserved = [number(r) for r in theirs["iwarp_mpa.marker_res"].split(",") if r]
    assert pointers == [m.fpduptr for m in ours.markers]
    assert reserved == [m.reserved for m in ours.markers]
    ulp = ours.ulp
    assert flag(theirs["iwarp_ddp.tagged_flag"]) == ulp["tagged"]
    assert flag(theirs["iwarp_ddp.last_flag"]) == ulp["last"]
    assert number(theirs["iwarp_ddp.dv"]) == ulp["ddp_version"]
    assert number(theirs["iwarp_rdma.version"]) == ulp["rdmap_version"]
    assert number(theirs["iwarp_rdma.opcode"]) == ulp["opcode"]
    if ulp["tagged"]:
        assert number(theirs["iwarp_ddp.stag"]) == ulp["stag"]
        assert number(theirs["iwarp_ddp.tagged_offset"]) == ulp["to"]
    else:
        for field in ("qn", "msn", "mo"):
            assert number(theirs[f"iwarp_ddp.{field}"]) == ulp[field]
    request = ulp.get("read_request")
    if isinstance(request, dict):
        assert number(theirs["iwarp_rdma.sinkstag"]) == request["sink_stag"]
        assert number(theirs["iwarp_rdma.sinkto"]) == request["sink_to"]
        assert number(theirs["iwarp_rdma.rdmardsz"]) == request["size"]
        assert number(theirs["iwarp_rdma.srcstag"]) == request["src_stag"]
        assert number(theirs["iwarp_rdma.srcto"]) == request["src_to"]
    terminate = ulp.get("terminate")
    if isinstance(terminate, dict):
        assert number(theirs["iwarp_rdma.term_layer"]) == terminate["layer"]
        assert number(theirs["iwarp_rdma.term_errcode_llp"]) == terminate["code"]
