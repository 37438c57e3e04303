"""One proxied connection without I/O: octets in from either end, octets,
closes and decode records out, faults applied on the way.

Each direction is followed with the analyzer's own readers
(:func:`iwarp.analyze.mpa.read_frame` for the Request and Reply,
:class:`iwarp.analyze.mpa.FpduWalker` for the FPDUs), so what the proxy
prints is what ``iwarp decode`` would print of the same octets, malformed
streams included: those are forwarded as they are and their errors
listed. While a fault may still apply to a direction, its octets are held
until the FPDU they belong to is complete (never more than one FPDU);
otherwise they go on as they come and are decoded behind.

Faults that remove or add octets (``drop-fpdu``, ``duplicate``,
``terminate``) shift the receiver's stream: with markers every FPDU after
them is framed again at its new marker phase (markers and CRC recomputed;
a CRC that was wrong stays wrong by the same bits), so nothing but the
fault itself differs from what the sender sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Final, Literal

from iwarp._crc32c import crc32c
from iwarp.analyze.fields import Where, record_row
from iwarp.analyze.mpa import (
    LOOKAHEAD,
    FpduView,
    FpduWalker,
    Framing,
    find_start,
    inspect_fpdu,
    read_frame,
)
from iwarp.analyze.records import ErrorRecord, FpduRecord, FrameRecord, NoteRecord, Record
from iwarp.analyze.tcp import StreamWindow
from iwarp.ddp.wire import QueueNumber, UntaggedHeader
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import (
    FRAME_HEADER_SIZE,
    MARKER_INTERVAL,
    MAX_ULPDU,
    RESERVED_FLAGS,
    FrameFlags,
    MpaFrame,
    Revision,
    parse_frame_header,
)
from iwarp.proxy.spec import Fault
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import RdmapOpcode, TerminateHeader, rdmap_control

__all__ = [
    "AppliedFault",
    "Close",
    "Output",
    "ProxyConnection",
    "Role",
    "Send",
    "Startup",
]

Role = Literal["initiator", "responder"]
#: How the connection starts: RFC 5044's Request/Reply (and the drafts'
#: Rev 0/1 frames), or draft-culley-iwarp-mpa-02's framing without frames.
Startup = Literal["rfc", "culley"]
ROLES: Final[tuple[Role, Role]] = ("initiator", "responder")
_DIRECTIONS: Final[tuple[tuple[Role, Role], ...]] = (
    ("initiator", "responder"),
    ("responder", "initiator"),
)
#: Octets a direction may hold while following FPDUs before it gives up
#: holding (and forwards as it comes): two of the largest FPDUs and their markers.
HOLD_LIMIT: Final = 2 * (MAX_ULPDU + 1024)
#: A Request/Reply with more private data than this is not waited for.
MAX_FRAME: Final = FRAME_HEADER_SIZE + 0xFFFF

_FRAME, _WAIT, _WALK, _RAW, _DROP, _SEEK = range(6)
_MASK32: Final = 0xFFFFFFFF
_HALF: Final = 1 << 31


@dataclass(frozen=True, slots=True)
class Send:
    """Octets to write toward ``to``, in one write."""

    to: Role
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """End the TCP connection toward ``to``: ``fin`` (a half close),
    ``rst`` (a reset), or ``close`` (all sent, then close)."""

    to: Role
    how: Literal["fin", "rst", "close"]


Output = Send | Close


@dataclass(slots=True)
class AppliedFault:
    """A fault as it was applied: which, toward which end, at which record."""

    action: str
    to: Role
    spec: str
    #: What was matched: "fpdu N" (N counts the FPDUs toward that end) or "request"/"reply".
    at: str
    seq: int
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"action": self.action, "to": self.to, "at": self.at}
        out["seq"] = self.seq
        if self.detail:
            out["detail"] = self.detail
        out["spec"] = self.spec
        return out


@dataclass(slots=True)
class _Armed:
    fault: Fault
    seen: int = 0
    spent: bool = False


@dataclass(slots=True)
class EndReport:
    """What one end did, as the proxy saw it."""

    fpdus: int = 0
    octets: int = 0
    #: The first Terminate it sent: ``(layer, etype, code)``.
    terminate: tuple[int, int, int] | None = None
    #: How its TCP ended: "close" (FIN), "reset", or "" (not yet).
    ended: str = ""
    errors: int = 0

    def after(self) -> str:
        """In a word or three: Terminate, close, reset or silence."""
        parts: list[str] = []
        if self.terminate is not None:
            layer, etype, code = self.terminate
            parts.append(f"terminate {layer}/{etype}/{code} ({terminate_name(layer, etype, code)})")
        if self.ended:
            parts.append(self.ended)
        return ", ".join(parts) or "silence"


@dataclass(slots=True)
class _Flow:
    """One direction: what the sender sends toward ``to``."""

    sender: Role
    to: Role
    window: StreamWindow
    faults: list[_Armed]
    mode: int = _FRAME
    walker: FpduWalker | None = None
    framing: Framing | None = None
    #: Offset of the next input octet not yet forwarded (or consumed by a fault).
    sent: int = 0
    #: Output offset minus input offset (octets added minus removed).
    shift: int = 0
    #: FPDUs seen toward ``to`` (1-based for the summary's "fpdu N").
    fpdus: int = 0
    #: Output held back until this time (delay, stall), in order.
    hold_until: float = 0.0
    queue: deque[Output] = field(default_factory=deque)
    #: The sender's last MSN on the Terminate queue (for an injected one).
    terminate_msn: int = 0
    eof: bool = False
    frame: MpaFrame | None = None


class ProxyConnection:
    """One connection through the proxy: sans-IO, ``now`` passed in.

    Feed octets with :meth:`receive` (``sender`` is the end they came from),
    ends with :meth:`end`; take what to do with :meth:`take_output` and the
    decode with :meth:`take_records`; arm :meth:`get_timer` and call
    :meth:`handle_timer`. :meth:`reading_paused` says when not to read a
    sender (its output is held by a delay or stall).
    """

    def __init__(
        self,
        index: int,
        faults: list[Fault],
        now: float,
        *,
        addresses: dict[Role, tuple[str, int]] | None = None,
        idle_timeout: float | None = None,
        epoch: float = 0.0,
        fpdu_records: bool = True,
        startup: Startup = "rfc",
        ddp: bool = True,
    ) -> None:
        self.index = index
        #: Whether the ULPDUs are DDP segments (False: bare, as ``--op mpa`` sends).
        self.ddp = ddp
        #: Whether FPDUs are among :meth:`take_records` (frames, errors,
        #: notes and applied faults always are); counted either way.
        self.fpdu_records = fpdu_records
        self.started = now
        self.epoch = epoch
        self.idle_timeout = idle_timeout
        self.last_activity = now
        self.addresses = addresses or {"initiator": ("initiator", 0), "responder": ("responder", 0)}
        self.flows: dict[Role, _Flow] = {}
        for sender, to in _DIRECTIONS:
            self.flows[sender] = _Flow(
                sender=sender,
                to=to,
                # Dead octets are cut off at once: what is held is what the
                # proxy holds (the bound its tests check), and that is at most
                # one FPDU, so the cut is cheap.
                window=StreamWindow(0, history=0, compact=0),
                faults=[_Armed(f) for f in faults if f.to == to],
                mode=_SEEK if startup == "culley" else _FRAME,
            )
        self.ends: dict[Role, EndReport] = {role: EndReport() for role in ROLES}
        self.applied: list[AppliedFault] = []
        self.request: MpaFrame | None = None
        self.reply: MpaFrame | None = None
        self.closed = False
        self.idle = False
        self._output: list[Output] = []
        self._records: list[Record] = []
        self._now = now

    # -- inputs ------------------------------------------------------------------------

    def receive(self, sender: Role, data: bytes, now: float) -> None:
        """Octets that arrived from ``sender``."""
        if self.closed or not data:
            return
        self._now = now
        self.last_activity = now
        flow = self.flows[sender]
        end = self.ends[sender]
        end.octets += len(data)
        if flow.mode == _DROP:
            return
        window = flow.window
        if flow.mode == _WALK and flow.sent == window.end and not self._holding(flow):
            # The clean path: the octets go on as they came (no copy of
            # ours) and are decoded behind.
            self._emit(flow, Send(flow.to, data))
            flow.sent += len(data)
            if flow.walker is not None and flow.walker.tally is not None:
                self._count_through(flow, flow.walker, memoryview(data))
                return
        window.append(window.end, data, 0)
        self._process(flow)

    def end(self, sender: Role, how: Literal["close", "reset"], now: float) -> None:
        """``sender``'s TCP ended: a FIN (``close``) or a reset."""
        self._now = now
        report = self.ends[sender]
        if report.ended:
            return
        report.ended = how
        flow = self.flows[sender]
        flow.eof = True
        if how == "reset":
            # A reset loses what was in flight anyway: pass it on at once.
            flow.queue.clear()
            flow.hold_until = 0.0
            self._output.append(Close(flow.to, "rst"))
            self.closed = True
            return
        if flow.mode != _DROP:
            flow.window.final = True
            self._process(flow)
            self._forward_raw(flow, flow.window.end)
        self._emit(flow, Close(flow.to, "fin"))

    def handle_timer(self, now: float) -> None:
        """Release held output whose time came; end an idle connection."""
        self._now = now
        for flow in self.flows.values():
            if flow.queue and flow.hold_until <= now:
                self._output.extend(flow.queue)
                flow.queue.clear()
        if (
            self.idle_timeout is not None
            and not self.closed
            and now - self.last_activity >= self.idle_timeout
            and not any(f.queue for f in self.flows.values())
        ):
            self.idle = True
            self.closed = True
            self._note(self.flows["initiator"], f"idle for {self.idle_timeout:g} s: closing")
            for role in ROLES:
                self._output.append(Close(role, "close"))

    # -- outputs ------------------------------------------------------------------------

    def take_output(self) -> list[Output]:
        out, self._output = self._output, []
        return out

    def take_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    def get_timer(self) -> float | None:
        times = [f.hold_until for f in self.flows.values() if f.queue]
        if self.idle_timeout is not None and not self.closed:
            times.append(self.last_activity + self.idle_timeout)
        return min(times) if times else None

    def reading_paused(self, sender: Role) -> bool:
        """Whether reading from ``sender`` should wait: its output is held."""
        return bool(self.flows[sender].queue)

    def where(self, record: Record) -> Where:
        """The listing's time and addresses of a record (its direction's)."""
        sender: Role = "initiator" if record.direction == "initiator" else "responder"
        src, sport = self.addresses[sender]
        dst, dport = self.addresses["responder" if sender == "initiator" else "initiator"]
        return Where(self._now - self.started, self.epoch + self._now, src, sport, dst, dport)

    def summary(self) -> dict[str, object]:
        """The connection's summary record (the CLI's layout)."""
        ini, res = self.ends["initiator"], self.ends["responder"]
        out: dict[str, object] = {
            "type": "summary",
            "connection": self.index,
            "initiator": "{}:{}".format(*self.addresses["initiator"]),
            "responder": "{}:{}".format(*self.addresses["responder"]),
            "fpdus_to_responder": ini.fpdus,
            "fpdus_to_initiator": res.fpdus,
            "octets_to_responder": ini.octets,
            "octets_to_initiator": res.octets,
            "errors": ini.errors + res.errors,
            "faults": [a.to_json() for a in self.applied],
            "initiator_after": ini.after(),
            "responder_after": res.after(),
            "seconds": round(self._now - self.started, 6),
        }
        if self.idle:
            out["idle_timeout"] = True
        return out

    # -- following a direction -------------------------------------------------------

    def _process(self, flow: _Flow) -> None:
        window = flow.window
        while True:
            if flow.mode == _FRAME:
                if not self._frame(flow):
                    break
            elif flow.mode == _WAIT:
                if window.end - flow.sent > HOLD_LIMIT or window.final:
                    self._note(flow, "octets before the peer's frame: forwarded as they are")
                    flow.mode = _RAW
                break
            elif flow.mode == _WALK:
                self._walk(flow)
                break
            elif flow.mode == _SEEK:
                if not self._seek(flow):
                    break
            else:
                break
        if flow.mode == _RAW:
            self._forward_raw(flow, window.end)
        if flow.mode in (_RAW, _DROP):
            window.discard(window.end)

    def _frame(self, flow: _Flow) -> bool:
        """The Request or Reply at the stream's start; True when done with it."""
        window = flow.window
        header = window.read(flow.sent, FRAME_HEADER_SIZE)
        if header is None:
            if window.final:
                flow.mode = _RAW
                return True
            return False
        is_request, _, _, pd_length = parse_frame_header(header)
        expected = flow.sender == "initiator"
        if is_request is None or is_request != expected:
            what = "an MPA Request" if expected else "an MPA Reply"
            self._note(flow, f"not {what}: forwarded as it is, not decoded")
            flow.mode = _RAW
            return True
        size = FRAME_HEADER_SIZE + pd_length
        if window.end - flow.sent < size and not window.final:
            return False
        record, end, extra = read_frame(window, flow.sent, where=(self.index, flow.sender))
        for r in (record, *extra):
            if r is not None:
                self._record(flow, r)
        if record is None:
            flow.mode = _RAW
            return True
        octets = window.read(flow.sent, end - flow.sent) or window.captured(flow.sent, end)
        octets = self._frame_faults(flow, record, octets)
        flow.sent = end
        frame = MpaFrame(
            is_request=bool(is_request),
            flags=record.mpa.flags,
            revision=record.mpa.revision,
            private_data=record.mpa.private_data,
        )
        # What the receiver was told, after any rewrite: that is what it frames by.
        frame = _as_sent(frame, octets)
        if is_request:
            self.request = frame
            flow.mode = _WAIT
        else:
            self.reply = frame
            self._full_operation()
        return True

    def _seek(self, flow: _Flow) -> bool:
        """draft-culley-iwarp-mpa-02 (seed 002 §8.1): no frames; each side
        streams until its ULP switches its direction to MPA, with markers and
        CRCs, markers counted from the first FPDU. The FPDUs are looked for
        as ``iwarp decode --resync`` looks (markers that lead to FPDUs with
        valid CRCs) in what is not yet forwarded; what is not found to be
        FPDUs goes on as it came (a ULP may wait for the other side's
        streaming answer before it frames). True once found (or given up)."""
        window = flow.window
        found = find_start(window, markers=True, crc=True)
        if found is None:
            self._forward_raw(flow, window.end)
            window.discard(window.end)
            if window.final or window.end > LOOKAHEAD:
                self._note(flow, "no culley-02 FPDUs found: forwarded as they are")
                flow.mode = _RAW
                return True
            return False
        framing, first = found
        self._forward_raw(flow, first)  # the streaming part
        # Seed 002's markers may count back to the FPDU's first octet.
        flow.framing = replace(framing, either_fpduptr=True, ddp=self.ddp)
        self._note(flow, f"culley-02 FPDUs from here, after {first} streaming octets")
        flow.walker = FpduWalker(window, first, flow.framing, where=(self.index, flow.sender))
        flow.mode = _WALK
        return True

    def _full_operation(self) -> None:
        """Both frames known: each direction's markers and CRC (RFC 5044 §7.1.1)."""
        request, reply = self.request, self.reply
        assert request is not None and reply is not None
        ini, res = self.flows["initiator"], self.flows["responder"]
        if reply.reject:
            for flow in (ini, res):
                if flow.mode != _DROP:
                    flow.mode = _RAW
                    self._process(flow)
            return
        rdmac = Revision.REV0 in (request.revision, reply.revision)
        crc = request.crc or reply.crc
        # M in a frame asks for markers in what is sent *to* that frame's sender.
        for flow, markers in ((ini, reply.markers), (res, request.markers)):
            if flow.mode == _DROP:
                continue
            framing = Framing(flow.sent, markers, crc, rdmac, self.ddp, either_fpduptr=rdmac)
            flow.framing = framing
            flow.walker = FpduWalker(
                flow.window, flow.sent, framing, where=(self.index, flow.sender)
            )
            flow.mode = _WALK
            self._process(flow)

    def _walk(self, flow: _Flow) -> None:
        walker, window = flow.walker, flow.window
        assert walker is not None
        holding = self._holding(flow)
        if not holding:
            # Nothing to apply: forward what came at once, in one write, and
            # decode behind it.
            self._forward_raw(flow, window.end)
        # With nothing to print or apply, clean FPDUs are only counted (the
        # accelerator checks their CRCs in bulk): no record per FPDU.
        walker.tally = None if holding or self.fpdu_records else partial(self._tally, flow)
        for record in walker.advance():
            if isinstance(record, FpduRecord):
                # Sequence numbers wrap at 2**32: the difference is signed.
                step = (record.seq - window.seq(flow.sent) + _HALF) & _MASK32
                at = flow.sent + step - _HALF
                if at >= flow.sent:
                    self._forward_raw(flow, at)  # octets no FPDU holds (a resync skipped them)
                    self._record(flow, record)
                    self._fpdu(flow, record, at)
                else:  # already forwarded as it came
                    self._record(flow, record)
                    self._count(flow, record.ulp)
                if flow.mode == _DROP:
                    window.discard(window.end)
                    return
            else:
                self._record(flow, record)
        if walker.done:
            flow.mode = _RAW
            if walker.pos < window.end:
                self._note(flow, "FPDU boundaries lost: the rest is forwarded as it is")
            return
        held = window.end - flow.sent
        if not self._holding(flow) or held > HOLD_LIMIT:
            if held > HOLD_LIMIT and self._holding(flow):
                self._note(flow, "no FPDU boundary in sight: forwarding unheld")
            self._forward_raw(flow, window.end)
        window.discard(min(walker.low_water, flow.sent))

    def _count_through(self, flow: _Flow, walker: FpduWalker, data: memoryview) -> None:
        """Decode a forwarded read behind it when its clean FPDUs are only
        counted: the window takes in no more than the FPDU it holds part of
        and what does not count as clean; the clean FPDUs are counted in
        ``data`` itself. Copying every read into the window, then cutting it
        off, would allocate and free a read's size twice per read: page
        faults that cost the proxy more than the forwarding itself."""
        window = flow.window
        if walker.wait_for > window.end:  # the rest of an FPDU begun in an earlier read
            head = min(len(data), walker.wait_for - window.end)
            window.append(window.end, data[:head], 0)
            data = data[head:]
            self._process(flow)
        if data and flow.mode == _WALK:
            data = data[walker.count_ahead(data) :]
        if data:
            window.append(window.end, data, 0)
            self._process(flow)

    def _holding(self, flow: _Flow) -> bool:
        """Whether the flow must hold octets to whole FPDUs: a fault may still
        apply, or the receiver's marker phase moved and FPDUs are reframed."""
        if any(not a.spent for a in flow.faults):
            return True
        framing = flow.framing
        return framing is not None and framing.markers and flow.shift % MARKER_INTERVAL != 0

    # -- forwarding ----------------------------------------------------------------------

    def _forward_raw(self, flow: _Flow, upto: int) -> None:
        if upto <= flow.sent:
            return
        data = flow.window.captured(flow.sent, upto)
        flow.sent = upto
        if data:
            self._emit(flow, Send(flow.to, data))

    def _emit(self, flow: _Flow, item: Output) -> None:
        if flow.queue or flow.hold_until > self._now:
            flow.queue.append(item)
        else:
            self._output.append(item)

    def _fpdu(self, flow: _Flow, record: FpduRecord, at: int) -> None:
        """The FPDU at input offset ``at``, whole: apply faults and forward it."""
        self._count(flow, record.ulp)
        framing = flow.framing
        assert framing is not None
        wire = flow.window.read(at, record.wire_length)
        assert wire is not None  # the walker yields only whole FPDUs
        flow.sent = at + record.wire_length
        fault = self._match(flow, record)
        reframe = framing.markers and flow.shift % MARKER_INTERVAL != 0
        if fault is None:
            if reframe:
                framed = self._reframe(flow, at, wire)
                flow.shift += len(framed) - len(wire)  # its markers may be more or fewer
                wire = framed
            self._emit(flow, Send(flow.to, wire))
            return
        self._apply(flow, fault, record, at, wire)

    def _tally(self, flow: _Flow, count: int) -> None:
        """Clean FPDUs the walker counted in bulk (already forwarded). None
        is a Terminate: the walker yields those as records (see _count)."""
        flow.fpdus += count
        self.ends[flow.sender].fpdus += count

    def _count(self, flow: _Flow, ulp: Mapping[str, object]) -> None:
        """Count an FPDU, and note a Terminate (the sender's answer)."""
        flow.fpdus += 1
        self.ends[flow.sender].fpdus += 1
        if ulp.get("qn") == QueueNumber.TERMINATE:
            self._terminate_seen(flow, ulp)

    def _terminate_seen(self, flow: _Flow, ulp: Mapping[str, object]) -> None:
        """The sender's Terminate: its MSN, and its code if it is the first."""
        msn = ulp.get("msn")
        if isinstance(msn, int):
            flow.terminate_msn = msn
        terminate = ulp.get("terminate")
        if isinstance(terminate, dict) and self.ends[flow.sender].terminate is None:
            self.ends[flow.sender].terminate = (
                int(terminate["layer"]),
                int(terminate["etype"]),
                int(terminate["code"]),
            )

    def _match(self, flow: _Flow, record: Record) -> Fault | None:
        is_frame = isinstance(record, FrameRecord)
        row = None
        for armed in flow.faults:
            if armed.spent:
                continue
            fault = armed.fault
            if (is_frame and not fault.frames) or (not is_frame and not fault.fpdus):
                continue
            if row is None:
                row = record_row(record, self.where(record))
            if fault.where is not None and not fault.where.matches(row):
                continue
            if fault.action == "rewrite" and not is_frame and not _has_field(row, fault.field):
                continue
            armed.seen += 1
            if fault.nth == 0:
                return fault
            if armed.seen == fault.nth:
                armed.spent = True
                return fault
        return None

    def _phase(self, flow: _Flow, at: int) -> int:
        framing = flow.framing
        assert framing is not None
        return (at + flow.shift - framing.origin) % MARKER_INTERVAL

    def _encode(self, flow: _Flow, ulpdu: bytes | bytearray, phase: int) -> bytearray:
        framing = flow.framing
        assert framing is not None
        encoder = FpduEncoder(markers=framing.markers, crc=framing.crc, position=phase)
        return bytearray(encoder.encode_bytes(ulpdu))

    def _view(self, flow: _Flow, at: int) -> FpduView:
        framing = flow.framing
        assert framing is not None
        view = inspect_fpdu(flow.window, at, framing)
        assert isinstance(view, FpduView)
        return view

    def _reframe(self, flow: _Flow, at: int, wire: bytes) -> bytes:
        """The FPDU framed at its new marker phase, its CRC error (if any) kept."""
        view = self._view(flow, at)
        out = self._encode(flow, view.ulpdu, self._phase(flow, at))
        _xor_crc(out, view.crc ^ view.crc_expected)
        return bytes(out)

    def _apply(self, flow: _Flow, fault: Fault, record: FpduRecord, at: int, wire: bytes) -> None:
        action = fault.action
        view = self._view(flow, at)
        phase = self._phase(flow, at)
        framing = flow.framing
        assert framing is not None
        reframe = framing.markers and flow.shift % MARKER_INTERVAL != 0
        before = flow.shift
        detail = ""
        out: list[bytes] = []
        if action == "corrupt-crc":
            data = bytearray(self._reframe(flow, at, wire) if reframe else wire)
            data[-1] ^= 0x01
            out.append(bytes(data))
            if not framing.crc:
                detail = "no CRC in use: the receiver ignores the field"
        elif action == "flip-payload":
            flipped = bytearray(view.ulpdu)
            if flipped:
                flipped[-1] ^= 0x01
            data = self._encode(flow, bytes(flipped), phase)
            data[-4:] = view.crc.to_bytes(4, "big")
            out.append(bytes(data))
            detail = "last ULPDU octet, bit 0"
        elif action == "rewrite":
            ulpdu, length = _rewrite_ulpdu(view.ulpdu, fault.field, fault.value)
            data = self._encode(flow, ulpdu, phase)
            if length is not None:
                _set_length(data, phase, framing.markers, length)
                if framing.crc:
                    data[-4:] = crc32c(data[:-4]).to_bytes(4, "big")
            _xor_crc(data, view.crc ^ view.crc_expected)
            out.append(bytes(data))
            detail = f"{fault.field}={fault.value:#x}"
        elif action == "drop-fpdu":
            pass
        elif action == "duplicate":
            first = self._reframe(flow, at, wire) if reframe else wire
            flow.shift += len(first)
            second = self._reframe(flow, at, wire) if framing.markers else wire
            out += [first, second]
        elif action in ("delay", "stall"):
            until = self._now + fault.seconds
            flows = self.flows.values() if action == "stall" else (flow,)
            for each in flows:
                each.hold_until = max(each.hold_until, until)
            out.append(self._reframe(flow, at, wire) if reframe else wire)
            detail = f"{fault.seconds:g} s" + (" (both directions)" if action == "stall" else "")
        elif action == "resegment":
            whole = self._reframe(flow, at, wire) if reframe else wire
            out += [whole[i : i + fault.size] for i in range(0, len(whole), fault.size)]
            detail = f"{len(out)} writes"
        elif action == "terminate":
            layer, etype, code = fault.terminate
            out.append(self._terminate(flow, phase, layer, etype, code))
            detail = terminate_name(layer, etype, code)
        elif action in ("fin", "rst"):
            pass
        if action not in ("terminate", "fin", "rst"):
            # What the receiver's stream gained or lost here moves every later
            # FPDU (with markers: their marker phase).
            flow.shift = before + sum(map(len, out)) - len(wire)
        self._applied(flow, fault, f"fpdu {flow.fpdus}", record.seq, detail)
        for piece in out:
            self._emit(flow, Send(flow.to, piece))
        if action in ("terminate", "fin", "rst"):
            self._cut(flow, action)

    def _cut(self, flow: _Flow, action: str) -> None:
        """After a Terminate, FIN or reset toward ``flow.to``: the sender's
        octets go no further."""
        flow.mode = _DROP
        flow.window.discard(flow.window.end)
        flow.sent = flow.window.end
        if action == "fin":
            self._emit(flow, Close(flow.to, "fin"))
        elif action == "rst":
            flow.queue.clear()
            self._output.append(Close(flow.to, "rst"))
            # The other leg cannot go on without this one: close it in order.
            other = self.flows[flow.to]
            self._emit(other, Close(other.to, "close"))
            other.mode = _DROP

    def _terminate(self, flow: _Flow, phase: int, layer: int, etype: int, code: int) -> bytes:
        """A Terminate (RFC 5040 §4.8) as the sender would send it toward ``flow.to``."""
        framing = flow.framing
        assert framing is not None
        version = 0 if framing.rdmac else 1
        header = UntaggedHeader(
            qn=QueueNumber.TERMINATE,
            msn=(flow.terminate_msn + 1) & 0xFFFFFFFF,
            mo=0,
            rsvdulp=rdmap_control(RdmapOpcode.TERMINATE, version),
            version=version,
        )
        ulpdu = header.pack() + TerminateHeader(layer, etype, code).pack()
        data = bytes(self._encode(flow, ulpdu, phase))
        flow.shift += len(data)
        return data

    # -- frames ---------------------------------------------------------------------------

    def _frame_faults(self, flow: _Flow, record: FrameRecord, octets: bytes) -> bytes:
        fault = self._match(flow, record)
        if fault is None:
            self._emit(flow, Send(flow.to, octets))
            return octets
        at = "request" if record.mpa.is_request else "reply"
        action = fault.action
        detail = ""
        out = [octets]
        if action == "rewrite":
            octets = _rewrite_frame(octets, fault.field, fault.value)
            out = [octets]
            detail = f"{fault.field}={fault.value}"
        elif action in ("delay", "stall"):
            until = self._now + fault.seconds
            for each in self.flows.values() if action == "stall" else (flow,):
                each.hold_until = max(each.hold_until, until)
            detail = f"{fault.seconds:g} s"
        elif action == "resegment":
            out = [octets[i : i + fault.size] for i in range(0, len(octets), fault.size)]
            detail = f"{len(out)} writes"
        elif action in ("fin", "rst"):
            out = []
        self._applied(flow, fault, at, record.seq, detail)
        for piece in out:
            self._emit(flow, Send(flow.to, piece))
        if action in ("fin", "rst"):
            self._cut(flow, action)
        return octets

    # -- records -----------------------------------------------------------------------------

    def _applied(self, flow: _Flow, fault: Fault, at: str, seq: int, detail: str) -> None:
        applied = AppliedFault(fault.action, flow.to, fault.text, at, seq, detail)
        self.applied.append(applied)
        text = f"fault {fault.action} toward the {flow.to} at {at}"
        self._records.append(
            NoteRecord(self.index, flow.sender, seq, None, text + (f": {detail}" if detail else ""))
        )

    def _record(self, flow: _Flow, record: Record) -> None:
        kind = type(record)
        if kind is ErrorRecord:
            self.ends[flow.sender].errors += 1
        elif kind is FpduRecord and not self.fpdu_records:
            return
        self._records.append(record)

    def _note(self, flow: _Flow, message: str) -> None:
        window = flow.window
        self._records.append(
            NoteRecord(self.index, flow.sender, window.seq(flow.sent), None, message)
        )


# -- octet surgery ----------------------------------------------------------------------------

_ULP_AT: Final = {
    # field: (tagged offset, untagged offset, size) in the ULPDU (RFC 5041 §4.2-4.3)
    "stag": (2, None, 4),
    "to": (6, None, 8),
    "qn": (None, 6, 4),
    "msn": (None, 10, 4),
    "mo": (None, 14, 4),
}


def _has_field(row: dict[str, object], name: str) -> bool:
    if name in ("length", "opcode", "ddp_version", "rdmap_version"):
        return "opcode" in row or name == "length"
    return name in row


def _rewrite_ulpdu(ulpdu: bytes, name: str, value: int) -> tuple[bytes, int | None]:
    """The ULPDU with one header field set; ``length`` is MPA's and returned apart."""
    if name == "length":
        return ulpdu, value
    data = bytearray(ulpdu)
    if len(data) < 2:
        return ulpdu, None
    if name == "ddp_version":
        data[0] = (data[0] & ~0x03) | value
    elif name == "rdmap_version":
        data[1] = (data[1] & 0x3F) | (value << 6)
    elif name == "opcode":
        data[1] = (data[1] & 0xF0) | value
    else:
        tagged_at, untagged_at, size = _ULP_AT[name]
        at = tagged_at if data[0] & 0x80 else untagged_at
        if at is not None and at + size <= len(data):
            data[at : at + size] = value.to_bytes(size, "big")
    return bytes(data), None


def _set_length(data: bytearray, phase: int, markers: bool, length: int) -> None:
    """Write ULPDU_Length into a framed FPDU (after a leading marker, if any)."""
    at = 4 if markers and phase == 0 else 0
    data[at : at + 2] = length.to_bytes(2, "big")


def _xor_crc(data: bytearray, error: int) -> None:
    if error:
        value = int.from_bytes(data[-4:], "big") ^ error
        data[-4:] = value.to_bytes(4, "big")


def _rewrite_frame(octets: bytes, name: str, value: int) -> bytes:
    """A Request/Reply with one field set (RFC 5044 §7.1, RFC 6581 §5)."""
    data = bytearray(octets)
    bits = {"m": 0x80, "c": 0x40, "r": 0x20}
    if name in bits:
        data[16] = (data[16] | bits[name]) if value else (data[16] & ~bits[name])
    elif name == "rev":
        data[17] = value
    elif name == "pd_length":
        data[18:20] = value.to_bytes(2, "big")
    elif len(data) >= FRAME_HEADER_SIZE + 4:  # ird / ord: the enhanced data's low 14 bits
        at = FRAME_HEADER_SIZE + (0 if name == "ird" else 2)
        word = int.from_bytes(data[at : at + 2], "big")
        data[at : at + 2] = ((word & 0xC000) | value).to_bytes(2, "big")
    return bytes(data)


def _as_sent(frame: MpaFrame, octets: bytes) -> MpaFrame:
    """``frame`` as its (possibly rewritten) octets tell it."""
    if len(octets) < FRAME_HEADER_SIZE:
        return frame
    _, flags, revision, _ = parse_frame_header(octets)
    return replace(
        frame,
        flags=FrameFlags(flags & ~RESERVED_FLAGS),
        revision=revision,
        private_data=octets[FRAME_HEADER_SIZE:],
    )
