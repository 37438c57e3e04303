"""draft-culley-iwarp-mpa-02 framing (the seed ``002``): no MPA Request or Reply.

Each direction frames from its start: markers every 512 octets (the first
at the first octet, FPDUPTR 0) and a CRC in every FPDU. The draft leaves to
DDP's ULP where the start is: at once after the TCP connection (§8.1), or
after a streaming exchange of the ULP (``iwarp listen --mpa-mode culley``
sends a streaming line first each way: ``--culley-line``).

These cases run only when the run selects ``--mpa-mode culley`` (every
other case then skips: it would send an MPA Request), in both roles. A
Responder target frames only to answer: it must speak iwarp's receipts
(:data:`iwarp.apps.receipt.RECEIPT_REQUEST`, as ``iwarp listen --op mpa``),
else the cases that need its FPDUs skip, saying so. An Initiator target
frames by itself (``iwarp connect --mpa-mode culley --op mpa`` sends its
messages): the cases that judge its FPDUs read them; the cases that judge
how it receives need its answer to a receipt request, which ``iwarp
connect`` never gives (it asks for receipts), so they skip against it.

A marker's FPDUPTR is read both ways seed 002 allows: counted to the FPDU's
ULPDU_Length field (RFC 5044's reading) or, in an FPDU that starts with a
marker, to that marker (§6.1: "from the beginning of the FPDU"; §7.1: the
marker "viewed as being part of that FPDU").
"""

from __future__ import annotations

from collections import deque
from typing import Final, NamedTuple

from iwarp._crc32c import crc32c
from iwarp.apps.receipt import RECEIPT_KEY, RECEIPT_REQUEST, RECEIPT_SIZE
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import Session
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.mpa.framing import FpduDecoder, FpduEncoder, fpdu_wire_size
from iwarp.mpa.wire import CRC_FIELD, FPDUPTR_MASK, MARKER, MARKER_INTERVAL

__all__ = ["NO_RECEIPT", "NOTHING_FRAMED", "SHORT_STREAM", "WrongMarker", "wrong_marker"]

#: Skip reason: the target sent no receipt to read.
NO_RECEIPT: Final = (
    "the target answered no receipt request with a receipt; a target that answers iwarp's "
    "receipt requests (iwarp listen --mpa-mode culley --op mpa; iwarp connect asks for "
    "receipts and answers none) enables the case"
)
#: Skip reason: an Initiator target framed nothing to read.
NOTHING_FRAMED: Final = (
    "the target framed nothing; an Initiator that sends FPDUs once connected (iwarp connect "
    "--mpa-mode culley --op mpa) enables the case"
)
#: Skip reason: the target's framed stream never reached the marker at 512.
SHORT_STREAM: Final = (
    "the target's framed stream stayed under 512 octets, so no marker past the first was seen; "
    "a Responder that answers iwarp's receipt requests (each answer is 72 octets), or an "
    "Initiator that sends more (iwarp connect --size 600 --count 2), enables the case"
)
#: The test message the tool frames before its receipt request.
MESSAGE: Final = b"conformance: culley-02 framing\n" * 4
#: Octets of the target's framed stream the marker case reads: markers at 0, 512 and 1024.
SPAN: Final = 1100
#: Seconds an Initiator target may pause between FPDUs before its stream is taken as ended.
IDLE: Final = 0.5
#: How far the tool's wrong FPDUPTR is off (a multiple of 4: the two low bits are ignored).
WRONG_BY: Final = 64
SECTION_81: Final = (
    "draft-culley-iwarp-mpa-02 §8.1: \"DDP's ULP MAY require DDP on MPA startup immediately "
    'after TCP connection setup ... In this case the marker MUST be the first four octets sent"'
)
SECTION_71: Final = (
    'draft-culley-iwarp-mpa-02 §7.1: "MPA senders MUST insert a marker into the data stream '
    "at a 512 octet periodic interval ... FPDUPTR MUST contain the number of octets in the "
    'TCP stream from the beginning of the current FPDU to the first octet of the marker"'
)
SECTION_72: Final = (
    'draft-culley-iwarp-mpa-02 §7.2: "When sending an FPDU, the sender MUST include a valid '
    'CRC field"'
)
SECTION_72_RX: Final = (
    'draft-culley-iwarp-mpa-02 §7.2: "If not, the receiver MUST treat the FPDU as an invalid '
    'FPDU"; §9: "Once MPA delivers an error of any type, it MUST NOT pass or deliver any '
    'additional FPDUs on that half connection"'
)
SECTION_9_MARKER: Final = (
    'draft-culley-iwarp-mpa-02 §9 code 3: "If the FPDU start determined from previous ULPDU '
    "Length fields does not match with the MPA marker position, MPA SHOULD deliver an error to "
    "DDP ... It is OPTIONAL for a receiver to check each marker ... if the segment is received "
    'in order"; "Once MPA delivers an error of any type, it MUST NOT pass or deliver any '
    'additional FPDUs"'
)


class _Reader:
    """The target's framed direction, ULPDU by ULPDU: markers always checked (either
    FPDUPTR reading), the CRC when the case judges it."""

    def __init__(self, s: Session, *, crc: bool) -> None:
        self.s = s
        self.decoder = FpduDecoder(markers=True, crc=crc, either_fpduptr=True)
        self._ready: deque[bytes] = deque()
        self._started = False

    @property
    def octets(self) -> int:
        """Octets of the target's framed stream in whole FPDUs decoded so far."""
        return self.decoder.position

    def next(self, deadline: float) -> bytes | None:
        """The target's next ULPDU; None at the end of its stream or the deadline.

        :raises CaseFailed: a marker or CRC of the target's is wrong (once the ULPDUs
            before that FPDU have been returned: a case that reads fewer is not judged by it).
        """
        link = self.s.link
        while not self._ready:
            if self.decoder.error is not None:
                raise CaseFailed(f"the target's FPDU is invalid: {self.decoder.error}")
            if not link.fill(1 if self._started else 4, deadline):
                return None
            if not self._started:
                # The decoder would find a wrong first marker once the FPDU it seems to
                # start is complete: with a length read from the wrong octets, maybe never.
                self._started = True
                if MARKER.unpack_from(link.inbox)[1] & FPDUPTR_MASK:
                    raise CaseFailed(
                        f"the target's first four framed octets ({link.inbox[:4].hex()}) are "
                        "not a marker with FPDUPTR 0: where its FPDUs start cannot be known"
                    )
            self._ready.extend(bytes(u) for u in self.decoder.feed(link.take(len(link.inbox))))
        return self._ready.popleft()


def _start(s: Session) -> FpduEncoder:
    """Both directions start framing: after the streaming line when the run names one."""
    line = s.culley_line
    if line:
        s.link.send(line)
        s.note(f"sent the streaming line {line!r}")
        if not s.link.fill(len(line), s.deadline):
            raise CaseFailed(f"no streaming line from the target ({s.link.ended or 'silence'})")
        theirs = s.link.take(len(line))
        if theirs != line:
            raise CaseFailed(f"the target's streaming line is {theirs!r}, not {line!r}")
    return FpduEncoder(markers=True, crc=True)


def _frame(encoder: FpduEncoder, ulpdu: bytes) -> bytes:
    return b"".join(bytes(piece) for piece in encoder.encode(ulpdu))


def _ask(s: Session, encoder: FpduEncoder, *, bad_crc: bool = False) -> None:
    """Frame the test message (its CRC broken when ``bad_crc``), then a receipt request."""
    first = bytearray(_frame(encoder, MESSAGE))
    if bad_crc:
        first[-1] ^= 0x01
    s.link.send(bytes(first) + _frame(encoder, RECEIPT_REQUEST))
    what = "with a wrong CRC" if bad_crc else "markers and CRC right"
    s.note(f"sent a {len(MESSAGE)}-octet message ({what}), then a receipt request")


class WrongMarker(NamedTuple):
    """An FPDU whose one inner marker carries a wrong FPDUPTR (see :func:`wrong_marker`)."""

    #: The FPDU as it goes on the wire: the CRC computed over it, wrong marker included.
    fpdu: bytes
    #: Its ULPDU's length.
    size: int
    #: Where the wrong marker lies in the FPDU (octets from its first).
    at: int
    #: The FPDUPTR it should carry, RFC 5044's reading (seed 002 also allows ``at``).
    right: int
    #: The FPDUPTR it carries.
    wrong: int


def wrong_marker(encoder: FpduEncoder) -> WrongMarker:
    """Frame, with ``encoder``, a message whose FPDU holds exactly one marker besides a
    leading one, that marker's FPDUPTR :data:`WRONG_BY` off both readings of seed 002, and
    the FPDU's CRC computed over it as sent: only the marker is wrong."""
    phase = encoder.phase
    lead = 0 if phase else 4  # an FPDU at a marker position starts with the zero marker
    at = MARKER_INTERVAL - phase if phase else MARKER_INTERVAL  # the marker inside it
    # A ULPDU 60 octets past that marker: it holds exactly one marker (the next is 508 on).
    size = at - lead - 2 + 60
    ulpdu = (MESSAGE * (size // len(MESSAGE) + 1))[:size]
    fpdu = bytearray(_frame(encoder, ulpdu))
    right = at - lead
    reserved, ptr = MARKER.unpack_from(fpdu, at)
    if ptr != right or len(fpdu) != fpdu_wire_size(size, phase, markers=True):
        raise AssertionError(f"the encoder put no marker {at} octets into the FPDU")
    MARKER.pack_into(fpdu, at, reserved, right + WRONG_BY)
    CRC_FIELD.pack_into(fpdu, len(fpdu) - 4, crc32c(bytes(fpdu[:-4])))
    return WrongMarker(bytes(fpdu), size, at, right, right + WRONG_BY)


def _ask_wrong_marker(s: Session, encoder: FpduEncoder) -> None:
    """Frame a message with one wrong marker (:func:`wrong_marker`), then a receipt
    request."""
    lead = encoder.phase == 0
    bad = wrong_marker(encoder)
    s.link.send(bad.fpdu + _frame(encoder, RECEIPT_REQUEST))
    other = f", or {bad.at} counted from its leading marker" if lead else ""
    s.note(
        f"sent a {bad.size}-octet message whose marker {bad.at} octets into its FPDU says "
        f"FPDUPTR {bad.wrong} (right: {bad.right}{other}), the FPDU's CRC computed over it as "
        "sent; then a receipt request"
    )


def _first(s: Session, reader: _Reader) -> tuple[bytes, bytes, FpduEncoder]:
    """Start framing and read the target's first ULPDU (a Responder's: its answer to a
    receipt request; an Initiator's: whatever it frames first). Returns the target's first
    four framed octets, that ULPDU and the tool's encoder (to frame more on the stream).

    :raises CaseSkipped: a Responder sent no receipt back (it speaks no receipts), an
        Initiator framed nothing.
    :raises CaseFailed: the target sent octets that do not decode as FPDUs with markers.
    """
    encoder = _start(s)
    responder = s.target is TargetRole.RESPONDER
    if responder:
        _ask(s, encoder)
    if not s.link.fill(4, s.deadline):
        raise CaseSkipped(NO_RECEIPT if responder else NOTHING_FRAMED)
    head = bytes(s.link.inbox[:4])
    ulpdu = reader.next(s.deadline)
    if ulpdu is None:
        sent = len(s.link.received) - len(s.culley_line)
        raise CaseFailed(
            f"the target framed {sent} octets, in which no FPDU decodes with a marker at its "
            "first octet and every 512th after it"
        )
    if responder and not ulpdu.startswith(RECEIPT_KEY):
        raise CaseSkipped(NO_RECEIPT)
    return head, ulpdu, encoder


def _receipt(s: Session, reader: _Reader) -> FpduEncoder:
    """One valid exchange, in either role: the tool's message and receipt request, and the
    target's receipt (an Initiator's own ULPDUs before it are passed over, for at most a
    second). Returns the tool's encoder, to frame more on the same stream.

    :raises CaseSkipped: no receipt came (the target speaks no receipts).
    :raises CaseFailed: the target's octets do not decode as FPDUs with markers.
    """
    if s.target is TargetRole.RESPONDER:
        return _first(s, reader)[2]
    encoder = _start(s)
    _ask(s, encoder)
    wait = s.within(1.0)
    while (got := reader.next(wait)) is not None:
        if got.startswith(RECEIPT_KEY):
            return encoder
        s.note(f"the target sent a {len(got)}-octet ULPDU of its own (not a receipt)")
    raise CaseSkipped(NO_RECEIPT)


def _read_on(s: Session, reader: _Reader, encoder: FpduEncoder, span: int) -> None:
    """Make the target frame until its stream passes ``span`` octets, where it will: a
    Responder answers that many more receipt requests, an Initiator's own FPDUs are read
    until it pauses (:data:`IDLE`) or ends."""
    if s.target is TargetRole.RESPONDER:
        answer = fpdu_wire_size(RECEIPT_SIZE, 4, markers=False)
        asks = max(0, span - reader.octets) // answer + 1
        s.link.send(b"".join(_frame(encoder, RECEIPT_REQUEST) for _ in range(asks)))
        s.note(f"sent {asks} more receipt requests (their answers span the next markers)")
        for _ in range(asks):
            if reader.next(s.deadline) is None:
                return
        return
    while reader.octets < span and reader.next(s.within(IDLE)) is not None:
        pass


@case(
    "draft-culley/8.1/1",
    "the target's framed direction starts with a marker, FPDUPTR 0",
    SECTION_81,
    needs=(Need.CULLEY,),
    covers=("markers",),
)
def first_marker(s: Session) -> None:
    head, _, _ = _first(s, _Reader(s, crc=False))
    if head != bytes(4):
        raise CaseFailed(f"the first four octets are {head.hex()}, not a marker 00000000")
    s.note("the first four octets are the marker 00000000")


@case(
    "draft-culley/7.1/1",
    "the target's FPDUs carry a marker every 512 octets, each with the right FPDUPTR",
    SECTION_71,
    needs=(Need.CULLEY,),
    covers=("markers", "marker-ptr"),
)
def markers(s: Session) -> None:
    reader = _Reader(s, crc=False)
    _, _, encoder = _first(s, reader)
    _read_on(s, reader, encoder, SPAN)
    seen = reader.octets
    if seen <= MARKER_INTERVAL:
        raise CaseSkipped(f"{SHORT_STREAM} (read: {seen} octets)")
    count = (seen - 1) // MARKER_INTERVAL + 1
    s.note(
        f"the target's first {seen} framed octets decoded with their {count} markers checked "
        f"(at 0, 512, ... {MARKER_INTERVAL * (count - 1)}): each points to its FPDU"
    )


@case(
    "draft-culley/7.2/1",
    "the target's FPDUs carry a valid CRC",
    SECTION_72,
    needs=(Need.CULLEY,),
    covers=("markers", "crc-sent-marked"),
)
def crc_sent(s: Session) -> None:
    _, ulpdu, _ = _first(s, _Reader(s, crc=True))
    s.note(f"the target's {len(ulpdu)}-octet ULPDU came with a valid CRC")


def _refused(s: Session, reader: _Reader, error: str) -> None:
    """After an FPDU with ``error``: no receipt may come (a close, a Terminate, silence and
    other ULPDUs are all allowed)."""
    wait = s.within(2.0)
    while True:
        got = reader.next(wait)
        if got is None:
            s.note(f"no receipt after the FPDU with {error} ({s.link.ended or 'silence'})")
            return
        if got.startswith(RECEIPT_KEY):
            raise CaseFailed(
                f"the target answered the receipt request that followed an FPDU with {error}: "
                "it delivered FPDUs after the error"
            )
        s.note(f"the target sent a {len(got)}-octet ULPDU (no receipt)")


def _answers(s: Session, reader: _Reader) -> FpduEncoder:
    """:func:`_receipt`, as the receiving cases need it: a target whose answers cannot be
    read cannot be judged (draft-culley/7.1/1 fails it)."""
    try:
        return _receipt(s, reader)
    except CaseFailed as exc:
        raise CaseSkipped(f"{exc}: its answers cannot be read (draft-culley/7.1/1)") from None


@case(
    "draft-culley/7.2/2",
    "an FPDU with a wrong CRC is not delivered, nor any FPDU after it",
    SECTION_72_RX,
    needs=(Need.CULLEY,),
    covers=("crc",),
)
def crc_checked(s: Session) -> None:
    reader = _Reader(s, crc=False)
    encoder = _answers(s, reader)  # proves the target answers receipt requests at all
    _ask(s, encoder, bad_crc=True)
    _refused(s, reader, "a wrong CRC")


@case(
    "draft-culley/9/1",
    "an FPDU whose marker disagrees with its framing is not delivered, nor any FPDU after it",
    SECTION_9_MARKER,
    level=Level.SHOULD,
    needs=(Need.CULLEY,),
    covers=("marker-checked",),
)
def marker_checked(s: Session) -> None:
    reader = _Reader(s, crc=False)
    encoder = _answers(s, reader)
    _ask_wrong_marker(s, encoder)
    _refused(s, reader, "a wrong FPDUPTR")
