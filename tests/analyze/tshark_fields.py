"""tshark's view of each FPDU as plain field values, and the comparison with ours."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
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
    "iwarp_rdma.term_etype_rdma",
    "iwarp_rdma.term_etype_ddp",
    "iwarp_rdma.term_etype_llp",
    "iwarp_rdma.term_errcode",
    "iwarp_rdma.term_errcode_rdma",
    "iwarp_rdma.term_errcode_ddp_tagged",
    "iwarp_rdma.term_errcode_ddp_untagged",
    "iwarp_rdma.term_errcode_llp",
)


def tshark_fpdus(path: Path) -> list[dict[str, str]]:
    """One dict per FPDU tshark decoded, in capture order: its field values as shown.

    Read from PDML, where each FPDU is an ``iwarp_mpa`` element followed by
    its ``iwarp_ddp_rdmap`` element; repeated fields (markers) are joined
    with commas.
    """
    tshark = shutil.which("tshark")
    assert tshark is not None
    cmd = [tshark, "-n", "-r", str(path), "-T", "pdml"]
    cmd += ["-o", "tcp.try_heuristic_first:TRUE", "-o", "tcp.desegment_tcp_streams:TRUE"]
    cmd += ["--disable-heuristic", "rpcrdma_iwarp", "--disable-heuristic", "smb_direct_iwarp"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    fpdus: list[dict[str, str]] = []
    for packet in ET.fromstring(out).iter("packet"):
        current: dict[str, str] | None = None
        for proto in packet.findall("proto"):
            name = proto.get("name")
            if name == "iwarp_mpa":
                fields = _fields(proto)
                current = None
                if "iwarp_mpa.ulpdulength" in fields:
                    current = dict.fromkeys(FIELDS, "") | fields
                    fpdus.append(current)
            elif name == "iwarp_ddp_rdmap" and current is not None:
                current.update(_fields(proto))
    return fpdus


def _fields(proto: ET.Element) -> dict[str, str]:
    values: dict[str, str] = {}
    for field in proto.iter("field"):
        name = field.get("name", "")
        if name in FIELDS:
            show = field.get("show", "")
            values[name] = f"{values[name]},{show}" if name in values else show
    return values


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
        # tshark names the EType and code fields after the layer.
        etypes = [v for k, v in theirs.items() if "term_etype_" in k and v]
        codes = [v for k, v in theirs.items() if k.startswith("iwarp_rdma.term_errcode") and v]
        assert [number(v) for v in etypes] == [terminate["etype"]]
        assert [number(v) for v in codes] == [terminate["code"]]


def agree_all(ours: list[FpduRecord], path: Path) -> None:
    """tshark decodes exactly our FPDUs of the capture at ``path``, in order,
    and agrees with us on every field of each."""
    theirs = tshark_fpdus(path)
    assert len(theirs) == len(ours), (len(theirs), len(ours))
    for mine, other in zip(ours, theirs, strict=True):
        agree(mine, other)
