"""One case's connection to the target: MPA startup helpers, FPDU I/O, expectations.

A :class:`Session` plays the role the target does not: the Initiator when
the target is a Responder, the Responder when the target is an Initiator.
Cases use it at three levels:

* raw: :meth:`Session.send_raw` and the :class:`~iwarp.conformance.link.Link`
  underneath, for broken startup frames;
* startup: :meth:`Session.read_request`, :meth:`Session.read_reply`,
  :meth:`Session.startup` (the normal way into Full Operation, an RFC 6581
  RTR included when the target wants one);
* data: :meth:`Session.data_phase` (startup plus the cooperation the target
  offers), :meth:`Session.send_ulpdu`, :meth:`Session.next_ulpdu` and the
  ``expect_*`` methods, which raise :class:`CaseFailed` with what was seen.

Octets received are decoded with our own small reader (not the library's
FPDU decoder) because the report must show what the target did wrong: a
non-zero PAD, a bad CRC, a marker out of place.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

import iwarp.conformance.craft as craft
from iwarp._crc32c import crc32c
from iwarp.apps.rping import ADVERT
from iwarp.conformance.link import Link
from iwarp.conformance.pace import BULK, Pace, StartupWait
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.ddp.wire import TAGGED_FLAG, UNTAGGED_HEADER_SIZE
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.handshake import parse_frame
from iwarp.mpa.wire import (
    CRC_FIELD,
    CRC_SIZE,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    MARKER,
    MARKER_INTERVAL,
    MARKER_SIZE,
    REPLY_KEY,
    REQUEST_KEY,
    EnhancedData,
    FrameFlags,
    MpaFrame,
    Revision,
    RtrFlags,
    pad_length,
)
from iwarp.rdmap.wire import (
    READ_REQUEST_SIZE,
    RdmapOpcode,
    ReadRequest,
    TerminateHeader,
    describe_ulpdu,
    split_control,
)

__all__ = [
    "NO_CRC",
    "NO_FIRST_FPDU",
    "NO_ENHANCED",
    "NO_FPDU",
    "NO_READ_RTR",
    "NO_WRITE_RTR",
    "NOT_P2P",
    "P2P_ONLY",
    "Answer",
    "Cooperation",
    "NEED_HINTS",
    "NO_BUFFER",
    "NOT_WRITABLE",
    "Received",
    "Region",
    "Session",
    "StartupStyle",
    "ToolValues",
    "describe_terminate",
]

#: A permissive reading of startup frames: every revision, the largest private data.
_LENIENT: Final = MpaConfig(private_data_limit=512, rev0_private_data_limit=0xFFFF)
#: Seconds the data phase waits for the target's first messages.
COOPERATION_WAIT: Final = 1.0
#: The STag our Write RTR names (RFC 6581 wants a zero-length Write; iwarp
#: and siw use a non-zero STag, siw 1).
RTR_STAG: Final = 1


#: Skip reasons of single cases, each naming what kind of target would enable the case.
NO_CRC: Final = (
    "CRC is not in use on this connection; a target that uses CRC (C=1: iwarp listen "
    "without --no-crc) enables the case"
)
NO_FPDU: Final = (
    "the target sent no FPDU; a target that sends FPDUs of its own (iwarp listen, "
    "iwarp connect, rping -c) enables the case"
)
NOT_P2P: Final = (
    "the target's Request is not peer-to-peer (A=0); an Initiator that asks for an "
    "RTR (iwarp connect --p2p) enables the case"
)
NO_ENHANCED: Final = (
    "the target's Request has no enhanced data; a Rev 2 Initiator with S=1 (iwarp "
    "connect) enables the case"
)
P2P_ONLY: Final = (
    "the target takes only peer-to-peer Requests; the case needs one that takes plain "
    "Rev 2 Requests (iwarp listen)"
)
NO_WRITE_RTR: Final = (
    "the target does not take a Write RTR; a Responder that does (iwarp listen --rtr "
    "write) enables the case"
)
NO_READ_RTR: Final = (
    "the target does not take a Read RTR; a Responder that does (iwarp listen --rtr "
    "read) enables the case"
)
NO_FIRST_FPDU: Final = (
    "the target (MPA Initiator) sent no FPDU after the Reply, and the tool, its Responder, "
    'may not send one first (RFC 5044 §7.1.2 rule 4: "MUST receive and validate at least one '
    'FPDU before sending any FPDUs"); an Initiator that sends first (rping -c, iwarp connect) '
    "enables the case"
)
#: Why a case that needs this is skipped, and what kind of target would enable it.
NEED_HINTS: Final[dict[Need, str]] = {
    Need.RECEIVE: (
        "the target sent no Send in the data phase, so no posted receive is known; a target "
        "that answers the tool's first Send (iwarp listen) or sends one first (iwarp connect, "
        "rping -c) enables the case"
    ),
    Need.REGION: (
        "the target advertised no buffer (STag, TO, length) in a 16-octet Send; a target "
        "that does (iwarp listen --op write or --op read, rping -c) enables the case"
    ),
    Need.WRITE_ONLY_REGION: (
        "the target advertised no write-only buffer; iwarp listen --op write enables the case"
    ),
    Need.ENHANCED: (
        "the target closes on Rev 2 Requests and takes Rev 1 (RFC 5044 only); this RFC 6581 "
        "case needs a target that takes Rev 2 Requests"
    ),
    Need.CULLEY: (
        "draft-culley-iwarp-mpa-02 framing (no Request/Reply): run with --mpa-mode culley "
        "against a target that frames at once (iwarp listen --mpa-mode culley --op mpa, with "
        "--culley-line for its streaming line)"
    ),
    Need.TALKS: (
        "the target sent no FPDU of its own in the data phase; a target that answers the "
        "tool's first Send (iwarp listen) or sends first (iwarp connect, rping -c) enables "
        "the case"
    ),
}


#: RFC 5041 has no access-rights code: a buffer closed to remote Write answers a Write
#: with "invalid STag" (DDP, tagged buffer, code 0). Such an answer to a Write of the
#: advertised buffer says nothing of the rule a Write case checks: the case is skipped.
#: A target with no receive posted for a message answers "no buffer available" (RFC 5041
#: §7.1 check 2, which a target may make first): the case cannot judge the field it broke.
NO_BUFFER: Final[dict[tuple[int, int, int], str]] = {
    (1, 2, 2): (
        "the target had no receive posted for the tool's second Send (DDP 'no buffer "
        "available'), so the field this case breaks was not judged; a target that keeps "
        "receives posted (iwarp listen) enables the case"
    )
}
NOT_WRITABLE: Final[dict[tuple[int, int, int], str]] = {
    (1, 1, 0): (
        "the advertised buffer is not open to remote Write (an invalid-STag Terminate for "
        "its own STag); a writable buffer (iwarp listen --op write, rping -c) enables the case"
    )
}


@dataclass(frozen=True, slots=True)
class Region:
    """A tagged buffer the target advertised: where remote access may go."""

    stag: int
    to: int
    length: int
    #: Where it came from, for the report.
    source: str
    writable: bool = True
    readable: bool = True


@dataclass(slots=True)
class Cooperation:
    """What the target offered in the data phase of one connection."""

    receive: bool = False
    region: Region | None = None
    talks: bool = False
    notes: list[str] = field(default_factory=list)

    def has(self, need: Need) -> bool:
        if need is Need.RECEIVE:
            return self.receive
        if need is Need.REGION:
            return self.region is not None
        if need is Need.WRITE_ONLY_REGION:
            return self.region is not None and not self.region.readable
        if need is Need.TALKS:
            return self.talks
        return False


@dataclass(frozen=True, slots=True)
class StartupStyle:
    """How the tool starts MPA with this target when a case does not say otherwise.

    Learned by the runner's probe: most targets take a plain Rev 2 Request;
    some (irdma) take only peer-to-peer ones.
    """

    peer_to_peer: bool = False
    rtr_types: RtrFlags = RtrFlags.WRITE | RtrFlags.READ
    #: 1 for a target that takes only Rev 1 Requests (RFC 5044 without RFC 6581).
    revision: int = int(Revision.REV2)
    #: Whether the data phase waits for the target's answer to the hello; the runner
    #: clears it once a target stayed silent for a whole wait (it does not answer).
    answers_hello: bool = True
    #: Cooperation the target did not offer within two whole waits of earlier cases: the
    #: data phase no longer waits for it (the cases that need it are skipped at once).
    unoffered: frozenset[Need] = frozenset()

    def describe(self) -> str:
        if self.revision < Revision.REV2:
            return "Rev 1 Requests (the target closes on Rev 2)"
        return "peer-to-peer Rev 2 Requests" if self.peer_to_peer else "plain Rev 2 Requests"


@dataclass(frozen=True, slots=True)
class ToolValues:
    """The values the tool is free to choose, drawn per run from a seed the report prints, so
    that a target's own constants cannot coincide with the tool's by habit (a target that
    answers a Read at its source TO would pass if the tool's sink TO were its buffer's
    start; one that echoes a fixed Request Identifier would pass if the tool used the same).
    The same seed gives the same values, and so the same octets on the wire.
    """

    seed: int
    #: The Data Sink STag of the tool's Read Requests (never 0, nor the RTR's 1).
    sink_stag: int
    #: Their Data Sink TO: 4 KiB aligned, below 2^48, so that sink_to + 1 MiB never wraps.
    sink_to: int
    #: The first RFC 7306 Request Identifier; a case's further Requests count up from it
    #: (at most 255 of them, so the count never wraps 32 bits).
    request_id: int
    #: The MSN of a Send where none is expected: on a queue that does not exist, or before
    #: the connection is in Full Operation (RFC 5041 §5.1 starts MSNs at 1 on a queue).
    free_msn: int
    #: How far past the next MSN a Send lands to be out of range (RFC 5041 §7.2 check 5
    #: names no distance): at least 2^16, below 2^24, so it never wraps around 2^31.
    msn_ahead: int
    #: The octets the tool sends as MPA private data, cut to each case's length.
    private_octets: bytes = field(repr=False)

    #: The most private data a case sends (a PD_Length beyond the 512 allowed, and more).
    PRIVATE_MAX: ClassVar[int] = 1024

    @classmethod
    def draw(cls, seed: int) -> ToolValues:
        rng = random.Random(seed)
        return cls(
            seed=seed,
            sink_stag=rng.randrange(0x100, 0xFFFF_FF00),
            sink_to=rng.randrange(1, 1 << 36) << 12,
            request_id=rng.randrange(1, (1 << 32) - 0x100),
            free_msn=rng.randrange(1, 1 << 32),
            msn_ahead=rng.randrange(1 << 16, 1 << 24),
            private_octets=rng.randbytes(cls.PRIVATE_MAX),
        )

    def private_data(self, n: int) -> bytes:
        """``n`` octets of the run's private data (at most :attr:`PRIVATE_MAX`)."""
        if not 0 <= n <= self.PRIVATE_MAX:
            raise ValueError(f"{n} octets of private data: the tool holds {self.PRIVATE_MAX}")
        return self.private_octets[:n]


#: The values of a session the runner did not set up (tests of single cases).
DEFAULT_VALUES: Final = ToolValues.draw(0)


@dataclass(slots=True)
class Received:
    """One FPDU from the target, as it arrived."""

    ulpdu: bytes
    pad: bytes
    crc: int
    crc_ok: bool
    #: Stream offset of its ULPDU_Length field (from the start of Full Operation).
    offset: int
    #: (stream offset, FPDUPTR) of every marker inside or before it.
    markers: list[tuple[int, int]] = field(default_factory=list)

    @property
    def info(self) -> dict[str, object]:
        return describe_ulpdu(self.ulpdu)

    @property
    def is_terminate(self) -> bool:
        data = self.ulpdu
        if len(data) < UNTAGGED_HEADER_SIZE or data[0] & TAGGED_FLAG:
            return False
        return split_control(data[1])[1] == RdmapOpcode.TERMINATE

    def terminate(self) -> TerminateHeader:
        return TerminateHeader.unpack_from(self.ulpdu, UNTAGGED_HEADER_SIZE)

    def describe(self) -> str:
        info = self.info
        name = info.get("opcode_name", "?")
        extra = ""
        if self.is_terminate:
            extra = " " + describe_terminate(self.terminate())
        elif info.get("stag") is not None:
            extra = f" STag {info['stag']:#x} TO {info['to']:#x}"
        elif info.get("qn") is not None:
            extra = f" QN {info['qn']} MSN {info['msn']} MO {info['mo']}"
        pad = f", PAD {self.pad.hex()}" if self.pad.strip(b"\0") else ""
        crc = "" if self.crc_ok else f", CRC {self.crc:#010x} wrong"
        return f"FPDU {name} ({len(self.ulpdu)} octets){extra}{pad}{crc}"


def describe_terminate(term: TerminateHeader) -> str:
    parts = [f"Terminate layer {term.layer} type {term.etype} code {term.code:#04x}"]
    flags = "".join(
        letter for letter, bit in (("M", 0x8000), ("D", 0x4000), ("R", 0x2000)) if term.hdrct & bit
    )
    parts.append(f"HdrCt {flags or '-'}")
    if term.reserved:
        parts.append(f"reserved {term.reserved:#06x}")
    if term.segment_length is not None:
        parts.append(f"segment length {term.segment_length}")
    if term.ddp_header is not None:
        parts.append(f"DDP header {term.ddp_header.hex()}")
    if term.rdma_header is not None:
        parts.append(f"RDMA header {term.rdma_header.hex()}")
    return ", ".join(parts)


def _hex(data: bytes, limit: int = 48) -> str:
    shown = data[:limit].hex(" ")
    return f"{shown} ..." if len(data) > limit else shown or "(nothing)"


class Session:
    """The tool's end of one connection with the target, for one case."""

    def __init__(
        self,
        link: Link,
        target: TargetRole,
        *,
        deadline: float,
        style: StartupStyle | None = None,
        cooperation_wait: float = COOPERATION_WAIT,
    ) -> None:
        self.link = link
        self.target = target
        self.deadline = deadline
        self.style = style or StartupStyle()
        self.cooperation_wait = cooperation_wait
        #: Lines for the report: what was sent and seen, in order.
        self.observed: list[str] = []
        #: The target's Request (target Initiator) or Reply (target Responder).
        self.peer_frame: MpaFrame | None = None
        #: Negotiated: CRC on, markers towards the target, markers from it.
        self.crc = True
        self.markers_send = False
        self.markers_receive = False
        self.revision = int(Revision.REV2)
        self.rtr: RtrFlags | None = None
        self.cooperation = Cooperation()
        self.received: list[Received] = []
        self._rx_offset = 0
        self._tx_offset = 0
        self._msn = {0: 1, 1: 1, 2: 1}
        #: The cooperation the case needs (set by the runner): what data_phase waits for.
        self.wants: frozenset[Need] = frozenset()
        #: draft-culley-02 runs: the streaming line each side sends before it frames (empty:
        #: both frame at once after the TCP connection).
        self.culley_line = b""
        #: Opens one more connection to a Responder target (set by the runner), else None.
        self.opener: Callable[[], Link] | None = None
        #: Sessions of the other connections this case opened (the runner closes them).
        self.others: list[Session] = []
        #: Prefix of this session's lines in the shared log.
        self.label = ""
        #: Whether the data phase waited the whole ``cooperation_wait`` (something it
        #: waited for never came), and what it waited for.
        self.waited_out = False
        self.waited_for: frozenset[Need] = frozenset()
        #: Seconds the tool waits after the target's Reply before it sends (set by the runner).
        self.settle = 0.0
        #: The tool's free values of this run (set by the runner from its seed).
        self.values = DEFAULT_VALUES
        #: When the last fence went out (see :meth:`send_fence`), and its sink STag.
        self._fence_sent: float | None = None
        self._fence_stag = 0
        #: Seconds the target took to answer the fence, once it did.
        self.fence_answered: float | None = None
        #: The target's answer times in this run (the runner shares one among its cases).
        self.pace = Pace()
        #: How long a close from the target's own startup timer is waited for (the runner's).
        self.startup_wait = StartupWait()

    # --- bookkeeping -----------------------------------------------------

    def note(self, line: str) -> None:
        self.observed.append(f"{self.link.elapsed():6.3f}s {self.label}{line}")

    def another(self) -> Session:
        """A second connection to the same Responder target, logged with this one's lines."""
        if self.opener is None:
            raise CaseSkipped("the case needs a second connection, to a target that listens")
        other = Session(
            self.opener(),
            self.target,
            deadline=self.deadline,
            style=self.style,
            cooperation_wait=self.cooperation_wait,
        )
        other.link.started = self.link.started
        other.wants = self.wants
        other.observed = self.observed
        other.label = f"[connection {len(self.others) + 2}] "
        other.values = self.values
        other.pace = self.pace
        self.others.append(other)
        return other

    def fail(self, reason: str) -> CaseFailed:
        return CaseFailed(reason)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def within(self, seconds: float) -> float:
        """A deadline ``seconds`` from now, never past the case's own."""
        return min(self.deadline, time.monotonic() + seconds)

    def answer_wait(self, cap: float, *, own: float | None = None, sent: int = 0) -> float:
        """Seconds to wait for an answer that may not come (a close, a Terminate), at most
        ``cap``: as long as the target showed it takes to answer (see :mod:`pace`).

        ``own``: its answer time to the same message on this connection. ``sent``: the
        octets just sent; beyond ``BULK`` the wait lasts at least ``cooperation_wait``,
        since answer times say nothing of how long many octets take to arrive.
        """
        seconds = self.pace.wait(own=own, cap=cap)
        why = self.pace.describe(own=own)
        if sent > BULK and seconds < self.cooperation_wait:
            seconds = min(cap, self.cooperation_wait)
            why = f"{sent} octets just sent: at least the cooperation wait"
        self.note(f"waiting up to {seconds:.2f}s for an answer ({why})")
        return seconds

    def next_msn(self, qn: int) -> int:
        msn = self._msn.get(qn, 1)
        self._msn[qn] = msn + 1
        return msn

    def unsent_msn(self, qn: int) -> None:
        """The last message on queue ``qn`` was broken on purpose and is dropped by a target
        that refuses it silently: its MSN is the one that target expects next."""
        self._msn[qn] = max(1, self._msn.get(qn, 1) - 1)

    def summary(self) -> list[str]:
        """The received octets and how the connection ended, for a failure report."""
        lines = [f"received {len(self.link.received)} octets: {_hex(bytes(self.link.received))}"]
        if self.link.ended:
            lines.append(
                f"target ended the connection with {self.link.ended} at {self.link.ended_at:.3f}s"
            )
        else:
            lines.append("connection still open")
        if self.link.send_error:
            lines.append(self.link.send_error)
        return lines

    # --- raw -----------------------------------------------------------------

    def send_raw(self, data: bytes, what: str = "") -> bool:
        self.note(f"sent {what or 'octets'} ({len(data)}): {_hex(data, 24)}")
        return self.link.send(data)

    # --- startup ---------------------------------------------------------------

    def read_frame(self, *, request: bool, within: float | None = None) -> MpaFrame:
        """Read one startup frame from the target; CaseFailed if it is broken or absent."""
        name = "Request" if request else "Reply"
        deadline = self.deadline if within is None else self.within(within)
        if not self.link.fill(FRAME_HEADER_SIZE, deadline):
            why = f"connection ended ({self.link.ended})" if self.link.ended else "timed out"
            raise CaseFailed(f"no MPA {name} from the target: {why}")
        _, _, _, pd_length = FRAME_HEADER.unpack_from(self.link.inbox, 0)
        if not self.link.fill(FRAME_HEADER_SIZE + min(pd_length, 0xFFFF), deadline):
            raise CaseFailed(
                f"the MPA {name}'s PD_Length says {pd_length} octets; "
                f"only {len(self.link.inbox) - FRAME_HEADER_SIZE} arrived"
            )
        try:
            parsed = parse_frame(self.link.inbox, _LENIENT, expect_request=request)
        except MpaError as exc:
            raw = bytes(self.link.inbox[: FRAME_HEADER_SIZE + min(pd_length, 64)])
            self.note(f"got an improperly formatted MPA {name}: {describe_raw_frame(raw)}")
            raise CaseFailed(
                f"the target's MPA {name} is improperly formatted ({exc}): "
                f"{describe_raw_frame(raw)}"
            ) from None
        assert parsed is not None
        frame, used = parsed
        raw = self.link.take(used)
        self.note(f"got MPA {name} {describe_frame(frame, raw)}")
        self.peer_frame = frame
        return frame

    def read_request(self) -> MpaFrame:
        return self.read_frame(request=True)

    def read_reply(self) -> MpaFrame:
        reply = self.read_frame(request=False)
        self._settle()
        return reply

    def _settle(self) -> None:
        if self.settle > 0:
            # The target's time to install its FPDU receive path (see Runner's ``settle``).
            time.sleep(min(self.settle, self.remaining()))
            self.note(f"waited {self.settle:g} s after the Reply (--settle)")

    def base_flags(self) -> FrameFlags:
        """The flags of the tool's normal Request: C, and S for a Rev 2 target."""
        if self.style.revision < Revision.REV2:
            return FrameFlags.CRC
        return FrameFlags.CRC | FrameFlags.ENHANCED

    def default_request(self, **overrides: object) -> bytes:
        """The tool's normal Request for this target (its revision, peer-to-peer if it wants)."""
        if self.style.revision < Revision.REV2:
            args: dict[str, object] = {
                "revision": Revision.REV1,
                "flags": self.base_flags(),
                "enhanced": None,
            }
        else:
            enhanced = EnhancedData(16, 16)
            if self.style.peer_to_peer:
                enhanced = EnhancedData(16, 16, RtrFlags.PEER_TO_PEER | self.style.rtr_types)
            args = {"flags": self.base_flags(), "enhanced": enhanced}
        args.update(overrides)
        return craft.request(**args)  # type: ignore[arg-type]

    def initiate(self, request: bytes | None = None) -> MpaFrame:
        """Target Responder: send a Request (ours by default) and read the Reply."""
        self.require(TargetRole.RESPONDER)
        data = self.default_request() if request is None else request
        self.send_raw(data, "MPA Request")
        sent = parse_frame(data, _LENIENT, expect_request=True)
        asked = time.monotonic()
        reply = self.read_frame(request=False)
        self.pace.saw(time.monotonic() - asked)
        self._settle()
        if sent is not None:
            self._negotiate(sent[0], reply)
        return reply

    def _negotiate(self, request: MpaFrame, reply: MpaFrame) -> None:
        self.crc = request.crc or reply.crc
        ours, theirs = (request, reply) if self.target is TargetRole.RESPONDER else (reply, request)
        self.markers_send = theirs.markers
        self.markers_receive = ours.markers
        self.revision = min(request.revision, reply.revision)
        enh = reply.enhanced
        if enh is not None and RtrFlags.PEER_TO_PEER in enh.flags:
            offered = request.enhanced.flags if request.enhanced else RtrFlags.NONE
            both = enh.flags & offered
            for flag in (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND):
                if flag in both:
                    self.rtr = flag
                    break

    def accept(self, reply: bytes | None = None) -> MpaFrame:
        """Target Initiator: read its Request and answer (an accepting Reply by default)."""
        self.require(TargetRole.INITIATOR)
        request = self.read_request()
        data = self.default_reply(request) if reply is None else reply
        self.send_raw(data, "MPA Reply")
        parsed = parse_frame(data, _LENIENT, expect_request=False)
        if parsed is not None:
            self._negotiate(request, parsed[0])
        return request

    def default_reply(self, request: MpaFrame, **overrides: object) -> bytes:
        """The Reply a conforming Responder gives ``request``: same Rev, C on, S echoed."""
        enhanced: EnhancedData | None = None
        flags = FrameFlags.CRC
        revision = min(request.revision, Revision.REV2)
        if request.is_enhanced:
            flags |= FrameFlags.ENHANCED
            req = request.enhanced or EnhancedData(0, 0)
            rtr = RtrFlags.NONE
            if RtrFlags.PEER_TO_PEER in req.flags:
                for flag in (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND):
                    if flag in req.flags:
                        rtr = RtrFlags.PEER_TO_PEER | flag
                        break
                else:
                    rtr = RtrFlags.PEER_TO_PEER | RtrFlags.WRITE
            ird = req.ord if req.ord != 0x3FFF else 0x3FFF
            ord_ = min(req.ird, 16) if req.ird != 0x3FFF else 0x3FFF
            enhanced = EnhancedData(max(ird, 1) if ird != 0x3FFF else ird, ord_, rtr)
        args: dict[str, object] = {"revision": revision, "flags": flags, "enhanced": enhanced}
        args.update(overrides)
        return craft.reply(**args)  # type: ignore[arg-type]

    def startup(self) -> None:
        """Bring the connection into Full Operation the normal way (RTR included)."""
        if self.target is TargetRole.RESPONDER:
            reply = self.initiate()
            if reply.reject:
                raise CaseSkipped("the target rejected the tool's default Request (R=1)")
            if self.rtr is not None:
                self.send_rtr()
            return
        self.accept()
        if self.rtr is None:
            return
        got = self.next_fpdu()
        if got is None:
            raise CaseFailed(f"no RTR ({craft.RTR_NAMES[self.rtr]}) after the Reply")
        info = got.info
        if info.get("payload_length") not in (0, READ_REQUEST_SIZE) or got.is_terminate:
            raise CaseFailed(f"the first FPDU is not a zero-length RTR: {got.describe()}")
        request = info.get("read_request")
        if isinstance(request, dict):
            # RFC 5040 §5.2.1: a zero-length Read is answered by a zero-length Read Response.
            seg = craft.read_response(int(request["sink_stag"]), int(request["sink_to"]))
            self.send_ulpdu(seg.octets, "zero-length Read Response to the Read RTR")

    def send_rtr(self) -> None:
        """RFC 6581 §9.2: the zero-length RTR message of the negotiated type."""
        if self.rtr is RtrFlags.WRITE:
            self.send_ulpdu(craft.write(RTR_STAG, 0).octets, "RTR (zero-length RDMA Write)")
        elif self.rtr is RtrFlags.READ:
            seg, _ = craft.read_request(
                ReadRequest(RTR_STAG, 0, 0, RTR_STAG, 0), msn=self.next_msn(1)
            )
            self.send_ulpdu(seg.octets, "RTR (zero-length RDMA Read Request)")
        elif self.rtr is RtrFlags.SEND:
            self.send_ulpdu(craft.send(msn=self.next_msn(0)).octets, "RTR (zero-length Send)")

    def data_phase(self, wait: Iterable[Need] | None = None) -> Cooperation:
        """Startup, then learn what the target offers: a receive, an advertised buffer.

        Target Responder: our first FPDU is a 16-octet Send shaped like rping's
        advertisement and iwarp's hello, (count, STag 0, size): iwarp listen
        answers with its own advertisements, rping -s takes it as ours.
        Target Initiator: its first FPDU (after any RTR) is read: rping -c
        advertises its buffer there, iwarp connect says hello.

        ``wait``: the cooperation to wait for (default: what the case needs,
        :attr:`wants`), and for a Responder target its first FPDU (its answer
        to the hello: it has read the hello and posted what it posts). The
        wait ends as soon as all of it arrived, or after ``cooperation_wait``
        seconds; what the target sends later is read by the case's own
        expectations, which pass over the FPDUs they do not look for.
        """
        self.startup()
        coop = self.cooperation
        said = time.monotonic()
        if self.target is TargetRole.RESPONDER:
            hello = craft.send(ADVERT.pack(64, 0, 4096), msn=self.next_msn(0))
            self.send_ulpdu(hello.octets, "hello Send (count 64, STag 0, size 4096)")
        wanted = {
            Need.REGION if need is Need.WRITE_ONLY_REGION else need
            for need in (self.wants if wait is None else wait)
        }
        if self.target is TargetRole.RESPONDER and self.style.answers_hello:
            wanted.add(Need.TALKS)
        wanted -= self.style.unoffered
        self.waited_for = frozenset(wanted)
        limit = self.within(self.cooperation_wait)
        while not all(coop.has(need) for need in wanted):
            got = self.next_ulpdu(limit)
            if got is None:
                if not self.link.ended and time.monotonic() >= limit:
                    self.waited_out = True
                break
            if not coop.talks and self.target is TargetRole.RESPONDER:
                self.pace.saw(time.monotonic() - said)  # its answer to the hello
            self.learn(got)
        return coop

    def learn(self, got: Received) -> None:
        """What ``got`` (an FPDU from the target) tells of its cooperation: it talks, has a
        receive posted (a Send), advertised a buffer (a 16-octet Send)."""
        coop = self.cooperation
        info = got.info
        coop.talks = True
        if got.is_terminate:
            raise CaseFailed(
                f"the target terminated the connection in the data phase: {got.describe()}"
            )
        opcode = info.get("opcode")
        if info.get("tagged") or opcode not in (RdmapOpcode.SEND, RdmapOpcode.SEND_WITH_SE):
            return
        payload = got.ulpdu[UNTAGGED_HEADER_SIZE:]
        coop.receive = True
        if len(payload) == ADVERT.size:
            to, stag, length = ADVERT.unpack_from(payload)
            if stag != 0 and length > 0 and coop.region is None:
                coop.region = Region(stag, to, length, "advertised in a 16-octet Send")
                self.note(f"target advertised STag {stag:#x} TO {to:#x} length {length}")

    def require(self, role: TargetRole) -> None:
        if self.target is not role:
            raise CaseSkipped(f"the case needs the target as MPA {role}")

    def need(self, need: Need) -> None:
        if not self.cooperation.has(need):
            raise CaseSkipped(NEED_HINTS[need])

    def region(self) -> Region:
        """The buffer the target advertised; CaseSkipped (saying what would help) without one."""
        region = self.cooperation.region
        if region is None:
            raise CaseSkipped(NEED_HINTS[Need.REGION])
        return region

    # --- FPDUs ----------------------------------------------------------------

    def frame_ulpdu(
        self,
        ulpdu: bytes,
        *,
        corrupt_crc: bool = False,
        pad: bytes | None = None,
        length: int | None = None,
    ) -> bytes:
        """The FPDU for ``ulpdu`` at the current send position (markers if the target wants).

        Against an Initiator target the tool is the MPA Responder, which "MUST receive and
        validate at least one FPDU before sending any FPDUs" (RFC 5044 §7.1.2 rule 4): the
        first FPDU waits for the target's first one (see :meth:`fence`)."""
        self.fence()
        if self.markers_send:
            if pad is not None or length is not None:
                raise CaseSkipped("the target asked for markers; this case crafts unmarked FPDUs")
            return self._marked(ulpdu, corrupt_crc)
        data = craft.fpdu(ulpdu, crc=self.crc, corrupt_crc=corrupt_crc, pad=pad, length=length)
        self._tx_offset += len(data)
        return data

    def fence(self) -> None:
        """Target Initiator: wait (at most ``cooperation_wait``) for its first FPDU before the
        tool sends one; skip the case when none comes, since the tool may not send first."""
        if self.target is not TargetRole.INITIATOR or self.received:
            return
        got = self.next_fpdu(self.within(self.cooperation_wait))
        if got is None:
            raise CaseSkipped(NO_FIRST_FPDU)
        if not got.is_terminate:
            self.learn(got)

    def _marked(self, ulpdu: bytes, corrupt_crc: bool) -> bytes:
        from iwarp.mpa.framing import FpduEncoder

        encoder = FpduEncoder(markers=True, crc=self.crc, origin=0, position=self._tx_offset)
        data = bytearray(encoder.encode_bytes(ulpdu))
        if corrupt_crc:
            data[-3] ^= 0x01
        self._tx_offset = encoder.position
        return bytes(data)

    def send_ulpdu(self, ulpdu: bytes, what: str = "FPDU", **kw: object) -> bool:
        data = self.frame_ulpdu(ulpdu, **kw)  # type: ignore[arg-type]
        return self.send_raw(data, what)

    def _stream(
        self, n: int, deadline: float, markers: list[tuple[int, int]], wire: bytearray
    ) -> bytes | None:
        """``n`` octets of FPDU content, markers removed (and recorded) when they are on;
        ``wire`` receives the octets as they arrived, markers included."""
        if not self.markers_receive:
            if not self.link.fill(n, deadline):
                return None
            self._rx_offset += n
            data = self.link.take(n)
            wire += data
            return data
        out = bytearray()
        while len(out) < n:
            if self._rx_offset % MARKER_INTERVAL == 0:
                if not self.link.fill(MARKER_SIZE, deadline):
                    return None
                marker = self.link.take(MARKER_SIZE)
                wire += marker
                _, ptr = MARKER.unpack(marker)
                markers.append((self._rx_offset, ptr))
                self._rx_offset += MARKER_SIZE
                continue
            step = min(n - len(out), MARKER_INTERVAL - self._rx_offset % MARKER_INTERVAL)
            if not self.link.fill(step, deadline):
                return None
            data = self.link.take(step)
            wire += data
            out += data
            self._rx_offset += step
        return bytes(out)

    def next_fpdu(self, deadline: float | None = None) -> Received | None:
        """The next FPDU from the target; None when it ended or the deadline passed."""
        limit = self.deadline if deadline is None else deadline
        markers: list[tuple[int, int]] = []
        wire = bytearray()
        start = self._rx_offset
        head = self._stream(2, limit, markers, wire)
        if head is None:
            return None
        length = int.from_bytes(head, "big")
        rest = self._stream(length + pad_length(length) + CRC_SIZE, limit, markers, wire)
        if rest is None:
            self.note(
                f"incomplete FPDU: ULPDU_Length {length}, then "
                f"{'the end' if self.link.ended else 'silence'}"
            )
            return None
        ulpdu = rest[:length]
        pad = rest[length : length + pad_length(length)]
        (crc,) = CRC_FIELD.unpack_from(rest, len(rest) - CRC_SIZE)
        ok = True
        if self.crc:
            # RFC 5044 §6: the CRC covers the FPDU as sent, with its markers: one just before
            # the ULPDU_Length field, those inside, and one right after the PAD. The CRC field
            # is the last thing read, never split by a marker (every offset is 4-aligned).
            ok = crc32c(bytes(wire[:-CRC_SIZE])) == crc
        got = Received(ulpdu, pad, crc, ok, start, markers)
        self.received.append(got)
        self.note(f"got {got.describe()}")
        return got

    def next_ulpdu(self, deadline: float | None = None) -> Received | None:
        return self.next_fpdu(deadline)

    def expect_answers(
        self,
        count: int,
        opcode: int,
        name: str,
        judge: Callable[[TerminateHeader], None] | None = None,
    ) -> list[Received]:
        """The next ``count`` FPDUs of RDMAP ``opcode`` (``name``: what they are, plural),
        passing over the target's other FPDUs.

        A Terminate before them fails the case, after ``judge`` had it: ``judge`` raises
        :class:`CaseSkipped` when the Terminate shows the case cannot judge this target
        (the advertised buffer is closed to the access, the target lacks the extension).
        """
        out: list[Received] = []
        deadline = self.deadline
        while len(out) < count:
            got = self.next_fpdu(deadline)
            if got is None:
                raise CaseFailed(
                    f"{len(out)} of {count} {name}, then {self.link.ended or 'silence'}"
                    + self.fence_note()
                )
            if self.is_fence(got):  # the fence's answer, not one of those awaited
                deadline = self.fenced(got, deadline)
                continue
            if got.is_terminate:
                term = got.terminate()
                if judge is not None:
                    judge(term)
                raise CaseFailed(
                    f"a Terminate after {len(out)} of {count} {name}: {describe_terminate(term)}"
                )
            if got.info.get("opcode") == opcode:
                out.append(got)
        return out

    # --- expectations -----------------------------------------------------------

    def expect_closed(
        self,
        what: str,
        *,
        within: float | None = None,
        allow_reply: bool = False,
        on_timer: bool = False,
    ) -> None:
        """The target must close the connection (FIN or RST) without entering MPA.

        The close answers what was just sent: it is waited for as long as the target
        showed it takes to answer (:meth:`answer_wait`), at most ``within`` seconds (else
        the case's timeout). ``on_timer``: the close comes from the target's own startup
        timer, not as an answer: it is waited for the run's startup wait from the start of
        the connection; when it did not come, the case is skipped unless the user chose
        that wait (``--startup-wait``: then it fails).
        ``allow_reply``: a startup frame before the close is tolerated (RFC 5044
        Appendix C: a Responder may answer with its own Rev, then close).
        """
        cap = self.remaining() if within is None else within
        deadline = self._timer_deadline() if on_timer else self.within(self.answer_wait(cap))
        # Unless a frame is allowed, the first octet the target sends decides the case (it
        # fails, close or not): the wait ends there, and only the frame's key is read on,
        # briefly, to name what came. A target that answers every broken Request costs no
        # whole timeout per case.
        ended = self.link.wait_end(deadline, until_data=not allow_reply)
        quiet = ended is None and not (self.link.inbox and not allow_reply)
        if quiet and not on_timer and (again := self._answered_meanwhile(cap)) is not None:
            ended = self.link.wait_end(self.within(again), until_data=not allow_reply)
        if ended is None and self.link.inbox and not allow_reply:
            self.link.fill(len(REPLY_KEY), min(deadline, time.monotonic() + 0.2))
        data = bytes(self.link.inbox)  # what arrived after the frames already read
        if ended is None and (allow_reply or not data):
            if on_timer and not self.startup_wait.chosen:
                raise CaseSkipped(self.startup_wait.unjudged(what))
            raise CaseFailed(
                f"{what}: the connection is still open after {self.link.elapsed():.1f}s"
                + (f" (--startup-wait {self.startup_wait.seconds:g})" if on_timer else "")
            )
        if ended is not None:
            self.note(f"target closed the connection ({ended})")
        if data and not allow_reply:
            key = data[:16]
            kind = (
                "an MPA Reply"
                if key == REPLY_KEY[: len(key)]
                else "an MPA Request"
                if key == REQUEST_KEY[: len(key)]
                else _as_fpdu(data)
            )
            when = "before closing" if ended is not None else "instead of closing"
            raise CaseFailed(f"{what}: the target sent {kind} ({len(data)} octets) {when}")
        if data and allow_reply and len(data) >= FRAME_HEADER_SIZE and data[:16] == REPLY_KEY:
            flags = data[16]
            if not flags & FrameFlags.REJECT and self.target is TargetRole.RESPONDER:
                self.note("the target answered with a Reply (R=0) before closing")

    def _timer_deadline(self) -> float:
        """When a close from the target's startup timer is late: the startup wait after the
        connection began (when the target's timer starts), plus the time the target showed
        it takes to act, so that a timer of exactly the startup wait is still judged."""
        wait = self.startup_wait
        slack = self.pace.wait(cap=1.0)
        how = "--startup-wait" if wait.chosen else "the default startup wait"
        self.note(
            f"waiting for the target's startup timer to close the connection: up to "
            f"{wait.seconds:g}s from its start ({how}) and {slack:.2f}s for the target to act"
        )
        return min(self.deadline, self.link.started + wait.seconds + slack)

    def _answered_meanwhile(self, cap: float) -> float | None:
        """Before a missing close fails a case: is the target answering at all just now?

        Its answer times bound the wait for a close, but a target that stalls for a moment
        (a busy host, a pause of its runtime) would fail the case for the stall. So a
        Responder target is asked once more, on a twin connection, with a valid Request;
        once it answered, the close, whose cause reached it before, is waited for as long
        again (four times this answer). Returns that wait, or None when no twin can be
        made (an Initiator target) or the target did not answer (then the case fails)."""
        if self.opener is None or self.target is not TargetRole.RESPONDER:
            return None
        twin: Session | None = None
        try:
            twin = Session(self.opener(), self.target, deadline=self.within(cap), style=self.style)
            twin.pace = self.pace
            asked = time.monotonic()
            twin.initiate()
            took = time.monotonic() - asked
        except Exception as exc:  # unreachable, closed, no Reply: the case fails as it was
            self.note(f"a twin connection's valid Request was not answered: {exc}")
            return None
        finally:
            if twin is not None:
                twin.link.close()
        wait = self.pace.wait(own=took, cap=max(0.0, self.remaining()))
        self.note(
            f"no close yet; on a twin connection the target answered a valid Request in "
            f"{took:.3f}s: waiting {wait:.2f}s more"
        )
        return wait

    def expect_no_fpdu(self, seconds: float, what: str, *, close_ok: bool = True) -> None:
        """Nothing FPDU-shaped may arrive for ``seconds`` (a close is fine when ``close_ok``).

        Octets that arrived with what was read last (an FPDU in the Reply's TCP segment)
        count as arriving now."""
        before = len(self.link.received) - len(self.link.inbox)
        self.link.settle(min(seconds, max(0.0, self.remaining())))
        extra = bytes(self.link.received[before:])
        if extra:
            raise CaseFailed(f"{what}: the target sent {len(extra)} octets: {_hex(extra)}")
        if self.link.ended and not close_ok:
            raise CaseFailed(f"{what}: the target closed the connection ({self.link.ended})")

    def send_fence(self) -> None:
        """A zero-length RDMA Read Request right behind a broken message: RDMAP answers it
        in order (RFC 5040 §5.2.1, §5.5), so its Read Response arriving without a Terminate
        before it shows the broken message was taken or dropped silently. It bounds the
        wait for that Terminate by the time the target took to answer the fence, instead
        of the case's whole timeout (a target that drops faults silently would cost a
        timeout per case). A conforming target that terminates ignores it."""
        self._fence_stag = self.values.sink_stag ^ 0x00FE_0000
        # A zero-length Read's source is not validated (RFC 5040 §5.2.1), but a target that
        # does validate it should meet no second fault here: the advertised buffer if any.
        region = self.cooperation.region
        src_stag, src_to = (region.stag, region.to) if region is not None else (RTR_STAG, 0)
        request = ReadRequest(self._fence_stag, 0, 0, src_stag, src_to)
        seg, _ = craft.read_request(request, msn=self.next_msn(1))
        self._fence_sent = time.monotonic()
        self.send_ulpdu(seg.octets, "fence: a zero-length Read Request")

    def fence_note(self) -> str:
        """What the fence showed, for a failure's reason ("" when it was not answered)."""
        if self.fence_answered is None:
            return ""
        return (
            f" (the zero-length Read Request sent after the broken message was answered in "
            f"{self.fence_answered:.3f}s, with no Terminate before it)"
        )

    def is_fence(self, got: Received) -> bool:
        """Whether ``got`` answers the fence still outstanding."""
        info = got.info
        return (
            self._fence_sent is not None
            and info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE
            and info.get("stag") == self._fence_stag
        )

    def fenced(self, got: Received, deadline: float) -> float:
        """The deadline after ``got``: shortened once the fence was answered."""
        sent = self._fence_sent
        if sent is None or not self.is_fence(got):
            return deadline
        took = time.monotonic() - sent
        self._fence_sent = None
        self.pace.saw(took)
        more = self.pace.wait(own=took)
        self.note(
            f"the fence was answered after {took:.3f}s with no Terminate before it; "
            f"waiting {more:.2f}s more ({self.pace.describe(own=took)})"
        )
        self.fence_answered = took
        return min(deadline, time.monotonic() + more)

    def expect_terminate(
        self,
        layer: int,
        etype: int,
        code: int | tuple[int, ...] | None,
        *,
        also: Sequence[Answer] = (),
        skip: Mapping[tuple[int, int, int], str] | None = None,
        close_ok: bool = False,
        within: float | None = None,
    ) -> Received | None:
        """Read FPDUs until a Terminate; it must carry (layer, etype, code).

        ``also``: other (layer, etype, codes) answers the rule allows (RFC 5040
        Figure 9 lists some codes under two error types). ``skip``: Terminates
        that show the case cannot judge this target (the advertised buffer is
        not open to the access the case needs), with the reason: the case is
        skipped. ``close_ok``: the rule allows a close instead of a Terminate
        (a bad CRC may be met by dropping the connection). ``code`` None: any
        code (a Local Catastrophic Error has none). Returns the Terminate
        FPDU, or None when the target closed and that was allowed.
        """
        deadline = self.deadline if within is None else self.within(within)
        answers: list[tuple[int, int, tuple[int, ...] | None]] = [
            (layer, etype, (code,) if isinstance(code, int) else code)
        ]
        for alt_layer, alt_type, alt_code in also:
            answers.append(
                (alt_layer, alt_type, (alt_code,) if isinstance(alt_code, int) else alt_code)
            )
        want = " or ".join(_answer_text(*a) for a in answers)
        while True:
            got = self.next_fpdu(deadline)
            if got is None:
                if self.link.ended and close_ok:
                    self.note(f"target closed the connection ({self.link.ended})")
                    return None
                if self.link.ended:
                    raise CaseFailed(
                        f"expected a Terminate ({want}); the target closed the "
                        f"connection ({self.link.ended}) without one"
                    )
                raise CaseFailed(
                    f"expected a Terminate ({want}); none within "
                    f"{self.link.elapsed():.1f}s{self.fence_note()}"
                )
            if not got.is_terminate:
                deadline = self.fenced(got, deadline)
                continue
            term = got.terminate()
            if skip and (reason := skip.get((term.layer, term.etype, term.code))):
                self.note(f"skipped on {describe_terminate(term)}")
                raise CaseSkipped(reason)
            if any(_answers(term.layer, term.etype, term.code, a) for a in answers):
                return got
            hint = ""
            if any(_answers(term.etype, term.layer, term.code, a) for a in answers):
                hint = " (Layer and EType nibbles swapped: little-endian bitfields)"
            raise CaseFailed(
                f"expected a Terminate with {want}; got {describe_terminate(term)}{hint}"
            )

    def check_copies(
        self,
        got: Received | None,
        *,
        ddp_header: bytes | None,
        segment_length: int | None = None,
        rdma_header: bytes | None = None,
    ) -> None:
        """RFC 5040 §4.8 Figure 10: the Terminate copies back the offending headers."""
        if got is None:
            raise CaseFailed("the target closed the connection; no Terminate to check")
        term = got.terminate()
        if ddp_header is not None:
            if term.ddp_header is None:
                raise CaseFailed(
                    f"the Terminate has no DDP header copy (D bit clear): "
                    f"{describe_terminate(term)}"
                )
            if term.ddp_header != ddp_header:
                raise CaseFailed(
                    f"the Terminate's DDP header {term.ddp_header.hex()} is not the "
                    f"one sent, {ddp_header.hex()}"
                )
            if (
                term.segment_length is not None
                and segment_length is not None
                and (term.segment_length != segment_length)
            ):
                raise CaseFailed(
                    f"the Terminate's DDP Segment Length {term.segment_length} is "
                    f"not the segment's, {segment_length}"
                )
        if rdma_header is not None:
            if term.rdma_header is None:
                raise CaseFailed(
                    f"the Terminate has no RDMA header copy (R bit clear): "
                    f"{describe_terminate(term)}"
                )
            if term.rdma_header != rdma_header:
                raise CaseFailed(
                    f"the Terminate's RDMA header {term.rdma_header.hex()} is not "
                    f"the Read Request's, {rdma_header.hex()}"
                )

    def expect_alive(
        self, seconds: float, what: str, *, skip: Mapping[tuple[int, int, int], str] | None = None
    ) -> None:
        """No Terminate and no close for ``seconds`` (other FPDUs are fine).

        ``skip``: Terminates that show the case cannot judge this target (see
        :meth:`expect_terminate`). The wait is as long as the target showed it takes to
        answer, at most ``seconds`` (:meth:`answer_wait`)."""
        deadline = self.within(self.answer_wait(seconds))
        while True:
            got = self.next_fpdu(deadline)
            if got is None:
                if self.link.ended:
                    raise CaseFailed(
                        f"{what}: the target closed the connection ({self.link.ended})"
                    )
                return
            if got.is_terminate:
                term = got.terminate()
                if skip and (reason := skip.get((term.layer, term.etype, term.code))):
                    self.note(f"skipped on {describe_terminate(term)}")
                    raise CaseSkipped(reason)
                raise CaseFailed(f"{what}: the target sent {got.describe()}")


#: One answer a rule allows: (layer, error type, the codes; None: any code).
Answer = tuple[int, int, int | tuple[int, ...] | None]


def _answers(
    layer: int, etype: int, code: int, answer: tuple[int, int, tuple[int, ...] | None]
) -> bool:
    want_layer, want_type, codes = answer
    return (layer, etype) == (want_layer, want_type) and (codes is None or code in codes)


def _answer_text(layer: int, etype: int, codes: tuple[int, ...] | None) -> str:
    text = f"layer {layer} type {etype}"
    if codes is not None:
        text += " code " + "/".join(f"{c:#04x}" for c in codes)
    return text


def _as_fpdu(data: bytes) -> str:
    """Name octets that look like an FPDU (a Terminate, say) sent where none may be."""
    length = int.from_bytes(data[:2], "big")
    if len(data) >= 2 + length + CRC_SIZE and length >= UNTAGGED_HEADER_SIZE:
        got = Received(data[2 : 2 + length], b"", 0, True, 0)
        return f"an {got.describe()}"
    return "octets"


def describe_raw_frame(raw: bytes) -> str:
    """A startup frame's header field by field, whatever it holds (a wrong key, a Rev 7...)."""
    key, flags, rev, pd_length = FRAME_HEADER.unpack_from(raw, 0)
    if key == REQUEST_KEY:
        key_text = "the Request key"
    elif key == REPLY_KEY:
        key_text = "the Reply key"
    else:
        key_text = f"key {key!r} (neither the Request nor the Reply key)"
    names = "".join(
        ch if flags & bit else "-"
        for ch, bit in (("M", 0x80), ("C", 0x40), ("R", 0x20), ("S", 0x10))
    )
    text = f"{key_text}, flags {names} (octet {flags:#04x}), Rev {rev}, PD_Length {pd_length}"
    data = raw[FRAME_HEADER_SIZE:]
    if data:
        text += f", private data {_hex(data, 16)}"
    return text


def describe_frame(frame: MpaFrame, raw: bytes) -> str:
    flags = raw[16]
    names = "".join(
        ch if flags & bit else "-"
        for ch, bit in (("M", 0x80), ("C", 0x40), ("R", 0x20), ("S", 0x10))
    )
    text = f"flags {names} (octet {flags:#04x}) Rev {raw[17]} PD_Length {len(frame.private_data)}"
    enh = frame.enhanced
    if enh is not None:
        text += f" IRD {enh.ird:#x} ORD {enh.ord:#x} A/B/C/D " + "".join(
            ch if f in enh.flags else "-"
            for ch, f in (
                ("A", RtrFlags.PEER_TO_PEER),
                ("B", RtrFlags.SEND),
                ("C", RtrFlags.WRITE),
                ("D", RtrFlags.READ),
            )
        )
    return text
