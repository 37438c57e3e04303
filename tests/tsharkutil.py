"""Running Wireshark's ``tshark`` on a capture and reading its MPA verdicts.

tshark's iwarp_mpa dissector is an independent implementation of RFC 5044:
it finds MPA by the Request/Reply keys, strips markers and checks CRCs. The
CRC verdict exists only in the display text ("Good CRC32"/"Bad CRC32"), so
this reads PDML.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import pytest

TSHARK = shutil.which("tshark")

#: Skip marker for tests that need tshark; with IWARP_REQUIRE_TSHARK=1 (as CI
#: sets) a missing tshark fails these tests instead.
needs_tshark = pytest.mark.skipif(
    TSHARK is None and not os.environ.get("IWARP_REQUIRE_TSHARK"),
    reason="tshark is not installed (apt-get install tshark)",
)


@dataclass
class MpaPdu:
    """One MPA PDU as tshark decoded it."""

    frame: int
    kind: str  # "request", "reply" or "fpdu"
    fields: dict[str, str] = field(default_factory=dict)
    markers: list[tuple[int, int]] = field(default_factory=list)  # (reserved, fpduptr)
    crc_status: str | None = None  # "good", "bad" or None when unchecked
    #: The DDP/RDMAP header tshark decoded in this FPDU (``iwarp_ddp.*`` and
    #: ``iwarp_rdma.*`` fields; the iwarp_ddp_rdmap proto follows its MPA PDU).
    ddp: dict[str, str] = field(default_factory=dict)
    #: TCP source port of the packet that carried it (tells the direction).
    src_port: int = 0


@dataclass
class TsharkResult:
    pdus: list[MpaPdu]
    malformed: list[int]

    @property
    def fpdus(self) -> list[MpaPdu]:
        return [p for p in self.pdus if p.kind == "fpdu"]


def decode(path: str) -> TsharkResult:
    """Decode ``path`` with tshark; MPA PDUs in capture order."""
    assert TSHARK is not None, "tshark is required (IWARP_REQUIRE_TSHARK) but not installed"
    cmd = [
        TSHARK,
        "-n",
        "-r",
        path,
        "-T",
        "pdml",
        "-o",
        "tcp.try_heuristic_first:TRUE",
        "-o",
        "tcp.desegment_tcp_streams:TRUE",
        "--disable-heuristic",
        "rpcrdma_iwarp",
        "--disable-heuristic",
        "smb_direct_iwarp",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    root = ET.fromstring(proc.stdout)
    pdus: list[MpaPdu] = []
    malformed: list[int] = []
    for packet in root.iter("packet"):
        number = 0
        src_port = 0
        for proto in packet.iter("proto"):
            if proto.get("name") == "tcp":
                for f in proto.iter("field"):
                    if f.get("name") == "tcp.srcport":
                        src_port = int(f.get("show", "0"))
            if proto.get("name") == "geninfo":
                for f in proto.iter("field"):
                    if f.get("name") == "num":
                        number = int(f.get("show", "0"))
            if proto.get("name") == "_ws.malformed":
                malformed.append(number)
            if proto.get("name") == "iwarp_ddp_rdmap" and pdus and pdus[-1].frame == number:
                for f in proto.iter("field"):
                    name = f.get("name", "")
                    if name.startswith("iwarp_") and name not in pdus[-1].ddp:
                        pdus[-1].ddp[name] = f.get("show", "")
                continue
            if proto.get("name") != "iwarp_mpa":
                continue
            pdu = MpaPdu(frame=number, kind="fpdu", src_port=src_port)
            marker_res: list[int] = []
            for f in proto.iter("field"):
                name = f.get("name", "")
                show = f.get("show", "")
                if name == "iwarp_mpa.key.req":
                    pdu.kind = "request"
                elif name == "iwarp_mpa.key.rep":
                    pdu.kind = "reply"
                elif name == "iwarp_mpa.marker_res":
                    marker_res.append(int(show, 16))
                elif name == "iwarp_mpa.marker_fpduptr":
                    pdu.markers.append((marker_res[-1] if marker_res else -1, int(show)))
                elif name == "iwarp_mpa.crc_check":
                    showname = f.get("showname", "")
                    pdu.crc_status = "good" if "Good CRC32" in showname else "bad"
                    pdu.fields[name] = show
                elif name.startswith("iwarp_"):
                    pdu.fields[name] = show
            pdus.append(pdu)
    return TsharkResult(pdus=pdus, malformed=malformed)
