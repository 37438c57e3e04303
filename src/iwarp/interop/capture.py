"""Capture a case's traffic on the host loopback and have Wireshark's dissectors judge it.

The guest's TCP ends inside qemu (user-mode networking), so the host side of
every forward is an ordinary loopback connection between iwarp and qemu (or the
``socat`` qemu starts for a guest-to-host connection): capturing ``lo`` with a
port filter sees exactly one case's bytes, both directions.

The verdict comes from tshark's ``iwarp_mpa`` / ``iwarp_ddp_rdmap`` dissectors,
written by neither side of the conversation. What tshark 4.0 can tell (see
docs/interop.md): a bad CRC32c appears only in the display text of the
``iwarp_mpa.crc_check`` field; a malformed frame adds ``_ws.malformed``;
errors add ``_ws.expert`` items with error severity. It decodes MPA only when
the capture holds the Request and Reply, each starting a TCP segment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Final

from iwarp.interop.host import end_process

#: ``_ws.expert.severity`` value of an error (Wireshark's PI_ERROR).
_PI_ERROR: Final = 0x00800000

#: tshark's TCP analysis of a segment missing, out of order or sent again:
#: its MPA dissector loses the FPDU boundaries of that direction after one
#: (it reassembles the segments as captured), so its CRC verdicts there
#: cannot be trusted.
_TCP_GAP_FIELDS: Final = frozenset(
    {"tcp.analysis.lost_segment", "tcp.analysis.out_of_order", "tcp.analysis.retransmission"}
)

#: Heuristic sub-dissectors that read any RDMA Send payload as their own
#: protocol and call ordinary data malformed; they have no place here.
_ULP_HEURISTICS: Final = ("rpcrdma_iwarp", "smb_direct_iwarp")


class CaptureToolError(RuntimeError):
    """dumpcap or tshark is missing or failed."""


class Capture:
    """``dumpcap`` on ``lo`` for one TCP port, writing a pcapng file; a context manager."""

    def __init__(self, path: Path, port: int, *, start_timeout: float = 10.0) -> None:
        self.path = path
        self.port = port
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = path.with_suffix(".dumpcap.log")

    def start(self) -> Capture:
        dumpcap = shutil.which("dumpcap")
        if dumpcap is None:
            raise CaptureToolError("dumpcap not found (apt-get install tshark)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        cmd = [dumpcap, "-q", "-i", "lo", "-f", f"tcp port {self.port}", "-w", str(self.path)]
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        # dumpcap creates the file once the capture filter is installed.
        deadline = time.monotonic() + self.start_timeout
        while not (self.path.exists() and self.path.stat().st_size > 0):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CaptureToolError(f"dumpcap did not start: {self._log.read_text().strip()}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.poll() is None:
            time.sleep(0.2)  # let the last segments (FIN, RST) reach the ring buffer
            end_process(proc, signal.SIGINT, grace=10.0)

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(slots=True)
class Verdict:
    """tshark's reading of a capture."""

    requests: int = 0
    replies: int = 0
    #: FPDUs per direction: "i>r" (from the MPA Initiator) and "r>i".
    fpdus: dict[str, int] = field(default_factory=lambda: {"i>r": 0, "r>i": 0})
    crc_checked: int = 0
    bad_crc_frames: list[int] = field(default_factory=list)
    #: "Bad CRC" frames after a TCP gap in their direction (:data:`_TCP_GAP_FIELDS`):
    #: reported, not counted as errors.
    unverified_crc_frames: list[int] = field(default_factory=list)
    #: The first frame tshark's TCP analysis flagged, by sender ("addr:port").
    tcp_gaps: dict[str, int] = field(default_factory=dict)
    malformed_frames: list[int] = field(default_factory=list)
    expert_errors: list[str] = field(default_factory=list)
    tcp_payload_frames: int = 0
    undecoded_frames: list[int] = field(default_factory=list)
    #: RDMAP Terminates seen: (direction, layer, error code) as tshark decoded them.
    terminates: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No bad CRC, no malformed frame, no error-level expert info."""
        return not (self.bad_crc_frames or self.malformed_frames or self.expert_errors)

    @property
    def decoded(self) -> bool:
        return self.requests > 0

    def problems(self) -> list[str]:
        out = []
        if self.bad_crc_frames:
            out.append(f"bad CRC in frames {_frames(self.bad_crc_frames)}")
        if self.malformed_frames:
            out.append(f"malformed frames {_frames(self.malformed_frames)}")
        out.extend(f"expert error: {e}" for e in self.expert_errors[:5])
        return out

    def summary(self) -> str:
        if not self.decoded:
            return f"tshark decoded no MPA ({self.tcp_payload_frames} TCP payload frames)"
        text = (
            f"tshark: req {self.requests}, rep {self.replies}, FPDUs {self.fpdus['i>r']}"
            f" i>r / {self.fpdus['r>i']} r>i, CRC checked {self.crc_checked}"
        )
        if self.undecoded_frames:
            text += f", {len(self.undecoded_frames)} payload frames undecoded"
        if self.unverified_crc_frames:
            text += (
                f"; CRC not verifiable after a TCP gap (frame "
                f"{min(self.tcp_gaps.values())}) in frames {_frames(self.unverified_crc_frames)}"
            )
        problems = self.problems()
        return text + ("; " + "; ".join(problems) if problems else "; no errors")

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "requests": self.requests,
            "replies": self.replies,
            "fpdus": dict(self.fpdus),
            "crc_checked": self.crc_checked,
            "bad_crc_frames": self.bad_crc_frames,
            "unverified_crc_frames": self.unverified_crc_frames,
            "tcp_gaps": dict(self.tcp_gaps),
            "malformed_frames": self.malformed_frames,
            "expert_errors": self.expert_errors,
            "undecoded_frames": len(self.undecoded_frames),
            "terminates": [list(t) for t in self.terminates],
        }


def _frames(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    return shown + (f" (+{len(numbers) - 8} more)" if len(numbers) > 8 else "")


def tshark_command(pcap: Path) -> list[str]:
    tshark = shutil.which("tshark")
    if tshark is None:
        raise CaptureToolError("tshark not found (apt-get install tshark)")
    cmd = [tshark, "-n", "-r", str(pcap), "-T", "pdml"]
    # MPA is found only by its TCP heuristic; PDUs spanning segments need desegmenting.
    cmd += ["-o", "tcp.try_heuristic_first:TRUE", "-o", "tcp.desegment_tcp_streams:TRUE"]
    for name in _ULP_HEURISTICS:
        cmd += ["--disable-heuristic", name]
    return cmd


def check_capture(pcap: Path, *, timeout: float = 120.0) -> Verdict:
    """Run tshark over ``pcap`` and collect what its iWARP dissectors report."""
    env = dict(os.environ, LC_ALL="C")
    with subprocess.Popen(
        tshark_command(pcap), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stdout is not None
        try:
            verdict = parse_pdml(proc.stdout)
        except ET.ParseError as exc:
            proc.kill()
            raise CaptureToolError(f"tshark output unreadable: {exc}") from exc
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise CaptureToolError(f"tshark took more than {timeout:.0f} s") from None
        if proc.returncode != 0:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise CaptureToolError(f"tshark failed ({proc.returncode}): {err}")
    return verdict


def parse_pdml(stream: IO[bytes] | Path) -> Verdict:
    """Fold tshark's PDML (a file object or path) into a :class:`Verdict`."""
    verdict = Verdict()
    initiator: str | None = None  # "addr:port" that sent the first Request
    for _event, packet in ET.iterparse(stream, events=("end",)):
        if packet.tag != "packet":
            continue
        _fold_packet(packet, verdict, initiator)
        if initiator is None and verdict.requests:
            initiator = _endpoint(packet)
        packet.clear()
    return verdict


def _endpoint(packet: ET.Element) -> str:
    src = port = ""
    for f in packet.iter("field"):
        name = f.get("name")
        if name == "ip.src" and not src:
            src = f.get("show", "")
        elif name == "tcp.srcport" and not port:
            port = f.get("show", "")
    return f"{src}:{port}"


def _fold_packet(packet: ET.Element, verdict: Verdict, initiator: str | None) -> None:
    number = 0
    has_payload = has_mpa = False
    for proto in packet.iter("proto"):
        name = proto.get("name")
        if name == "geninfo":
            for f in proto.iter("field"):
                if f.get("name") == "num":
                    number = int(f.get("show", "0"))
        elif name == "tcp":
            for f in proto.iter("field"):
                field_name = f.get("name")
                if field_name == "tcp.len" and int(f.get("show", "0")) > 0:
                    has_payload = True
                elif field_name in _TCP_GAP_FIELDS and verdict.requests:
                    verdict.tcp_gaps.setdefault(_endpoint(packet), number)
        elif name == "_ws.malformed":
            verdict.malformed_frames.append(number)
        elif name == "iwarp_mpa":
            has_mpa = True
            _fold_mpa(proto, packet, verdict, initiator, number)
        elif name == "iwarp_ddp_rdmap":
            _fold_terminate(proto, packet, verdict, initiator)
    for f in packet.iter("field"):
        if f.get("name") == "_ws.malformed" and number not in verdict.malformed_frames:
            verdict.malformed_frames.append(number)
        if f.get("name") == "_ws.expert":
            severity = next(
                (int(s.get("value", "0"), 16) for s in f.iter("field")
                 if s.get("name") == "_ws.expert.severity"),
                0,
            )  # fmt: skip
            if severity >= _PI_ERROR:
                verdict.expert_errors.append(f"frame {number}: {f.get('showname', '?')}")
    if has_payload:
        verdict.tcp_payload_frames += 1
        if not has_mpa and verdict.requests:
            verdict.undecoded_frames.append(number)


def _direction(packet: ET.Element, initiator: str | None) -> str:
    return "i>r" if initiator is None or _endpoint(packet) == initiator else "r>i"


def _fold_terminate(
    proto: ET.Element, packet: ET.Element, verdict: Verdict, initiator: str | None
) -> None:
    layer = code = None
    for f in proto.iter("field"):
        name = f.get("name", "")
        if name == "iwarp_rdma.term_layer":
            layer = int(f.get("show", "0"), 0)
        elif name.startswith("iwarp_rdma.term_errcode"):
            code = int(f.get("show", "0"), 0)
    if layer is not None and code is not None:
        verdict.terminates.append((_direction(packet, initiator), layer, code))


def _fold_mpa(
    proto: ET.Element, packet: ET.Element, verdict: Verdict, initiator: str | None, number: int
) -> None:
    names = {f.get("name") for f in proto.iter("field")}
    if "iwarp_mpa.key.req" in names:
        verdict.requests += 1
    elif "iwarp_mpa.key.rep" in names:
        verdict.replies += 1
    elif "iwarp_mpa.ulpdulength" in names:
        count = sum(1 for f in proto.iter("field") if f.get("name") == "iwarp_mpa.ulpdulength")
        verdict.fpdus[_direction(packet, initiator)] += count
    for f in proto.iter("field"):
        if f.get("name") == "iwarp_mpa.crc_check":
            verdict.crc_checked += 1
            # The value is hex ("0x482badb4" contains "bad"): match the verdict text.
            if "bad crc" in f.get("showname", "").lower():
                gap = _endpoint(packet) in verdict.tcp_gaps
                frames = verdict.unverified_crc_frames if gap else verdict.bad_crc_frames
                if number not in frames:
                    frames.append(number)
