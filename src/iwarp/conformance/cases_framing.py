"""FPDU framing (RFC 5044 §4-§6, §8): PAD, CRC, markers, ULPDU_Length, garbage after startup.

A wrong CRC "MUST be detected" (RFC 5044 §8); reporting it is a SHOULD ("the
codes SHOULD be provided to DDP") and an optimized MPA "MAY choose to silently
drop the TCP segment". So a Terminate with layer 2 (LLP), type 0, code 2, a
close and silence all pass; what fails is acceptance (the zero-length Read
Request the FPDU carries is answered, or the octets reach DDP and bring
another Terminate).
"""

from __future__ import annotations

import time
from typing import Final

from iwarp.apps.rping import ADVERT
from iwarp.conformance import craft
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import (
    NO_CRC,
    NO_FPDU,
    NOT_WRITABLE,
    Received,
    Session,
    describe_terminate,
)
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.errors import MpaErrorCode, TerminateLayer
from iwarp.mpa.wire import MARKER_INTERVAL, FrameFlags
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest

CRC_QUOTE = (
    'RFC 5044 §8: "2 Received MPA CRC does not match the calculated value for the FPDU"; '
    '§4.4: "MUST be generated and checked by both endpoints"'
)
LLP = TerminateLayer.LLP


def _hello(s: Session) -> bytes:
    return craft.send(ADVERT.pack(64, 0, 4096), msn=s.next_msn(0)).octets


#: Why a case that met only a close or silence skips when the carrier's answer could not be
#: shown: a target that answers nothing would pass it otherwise.
UNPROVEN: Final = (
    "the target closed or stayed silent, which RFC 5044 §8 allows, but the tool could not show "
    "that it answers the carrier when valid ({why}); a verdict from silence would prove nothing"
)


def _send_broken(s: Session, data: bytes, what: str) -> None:
    """Send the broken carrier, then a fence (:meth:`Session.send_fence`) with the MSN the
    carrier would have used: a target that drops the carrier silently expects that MSN
    next, answers the fence, and so ends the wait for a Terminate as soon as it shows it
    sent none; a target that terminates or closes never answers the fence, and its answer
    is waited for as long as the case allows (Linux siw in the qemu guest sent its Terminate
    for a wrong CRC 0.02-0.35 s after the FPDU, while it answered the valid carrier within
    10 ms: no multiple of that bounds it)."""
    s.send_raw(data, what)
    s.unsent_msn(1)
    s.send_fence()


def _crc_refused(s: Session, what: str, within: float | None = None) -> Received | None:
    """The FPDU with a bad CRC (or the garbage) must not be taken: a Terminate for code 2,
    a close or silence (until ``within`` seconds from now, else the case's deadline, or
    shortly after the fence sent behind it was answered); returns the Terminate, if any."""
    deadline = s.deadline if within is None else s.within(within)
    while True:
        got = s.next_fpdu(deadline)
        if got is None:
            if s.link.ended:
                s.note(f"target closed the connection ({s.link.ended})")
            else:
                s.note("no answer: the FPDU was dropped (RFC 5044 §8: MAY drop silently)")
            return None
        if got.is_terminate:
            term = got.terminate()
            if (term.etype, term.layer, term.code) == (LLP, 0, MpaErrorCode.CRC_MISMATCH):
                raise CaseFailed(
                    f"expected a Terminate with layer 2 type 0 code 0x02; got "
                    f"{describe_terminate(term)} (Layer and EType nibbles swapped: "
                    "little-endian bitfields)"
                )
            if (term.layer, term.etype, term.code) != (LLP, 0, MpaErrorCode.CRC_MISMATCH):
                raise CaseFailed(
                    f"{what} was taken as an FPDU (the CRC was not checked first): "
                    f"{describe_terminate(term)}, not layer 2 type 0 code 0x02"
                )
            return got
        if s.is_fence(got):
            deadline = s.fenced(got, deadline)
            continue
        info = got.info
        if (
            info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE
            and info.get("stag") == s.values.sink_stag
        ):
            raise CaseFailed(
                f"{what} was taken: the Read Request it carries was answered ({got.describe()})"
            )


def _carrier(s: Session) -> bytes:
    """A valid message that needs no application: a zero-length RDMA Read Request.

    The CRC is the only fault of the FPDU that carries it: its STag is not
    validated (RFC 5040 §5.2.1) and it is answered by RDMAP itself.
    """
    request = ReadRequest(s.values.sink_stag, 0, 0, 0x7E57_005A, 0)
    return craft.read_request(request, msn=s.next_msn(1))[0].octets


def _bad_crc_case(number: int, title: str, *, warm: bool, how: str) -> None:
    @case(f"rfc5044/8/{number}", title, CRC_QUOTE, covers=("crc",))
    def run(s: Session) -> None:
        took = _prove_carrier(s, first=not warm)
        ulpdu = _carrier(s)
        if how == "bit":
            data = s.frame_ulpdu(ulpdu, corrupt_crc=True)
        elif how == "zero":
            data = s.frame_ulpdu(ulpdu)
            data = data[:-4] + bytes(4)
        else:  # a payload octet changed after the CRC was computed
            changed = bytearray(s.frame_ulpdu(ulpdu))
            changed[len(changed) - 6] ^= 0x40
            data = bytes(changed)
        _send_broken(s, data, f"FPDU with a wrong CRC ({how})")
        _judged(s, took, _crc_refused(s, "the FPDU with a wrong CRC"))


def _wait(s: Session, took: float | None, sent: int = 0) -> float | None:
    """How long to wait for an answer to a broken carrier: as long as the valid one took
    (:meth:`Session.answer_wait`), so that a target that drops silently costs no whole
    timeout; longer after many octets, whose transfer that time does not show."""
    return None if took is None else s.answer_wait(s.remaining(), own=took, sent=sent)


def _judged(s: Session, took: float | None, got: Received | None) -> None:
    """A close or silence passes only where the valid carrier was seen answered (before, or
    as the fence after the broken one)."""
    if got is None and took is None and s.fence_answered is None:
        raise CaseSkipped(
            UNPROVEN.format(
                why="the target is the MPA Initiator: no twin connection carries the valid "
                "carrier as its first FPDU"
            )
        )


def _prove_carrier(s: Session, *, first: bool) -> float | None:
    """Start the case's connection and show that the target answers the carrier when it is
    valid: on a twin connection as its first FPDU (``first``), else on this connection in
    the data phase. Returns the seconds the answer took, or None where it cannot be shown
    (``first`` with an Initiator target: there is no twin); skips when it is not answered."""
    if first:
        took = _answers_first_carrier(s) if s.target is TargetRole.RESPONDER else None
        s.startup()
        if not s.crc:
            raise CaseSkipped(NO_CRC)
        return took
    s.data_phase()
    if not s.crc:
        raise CaseSkipped(NO_CRC)
    sent = time.monotonic()
    s.send_ulpdu(_carrier(s), "the carrier, valid (does the target answer it?)")
    while (got := s.next_fpdu(s.within(1.0))) is not None and not got.is_terminate:
        info = got.info
        if info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE:
            took = time.monotonic() - sent
            s.pace.saw(took)
            return took
    raise CaseSkipped(
        "the target did not answer the carrier (a valid zero-length Read Request) with a Read "
        "Response within 1 s: its silence after a broken one would prove nothing; a target "
        "that answers it (iwarp listen, iwarp connect) enables the case"
    )


_bad_crc_case(
    2,
    "a wrong CRC on the first FPDU is refused: TERM code 2, a close or a silent drop",
    warm=False,
    how="bit",
)
_bad_crc_case(
    3,
    "a wrong CRC in the data phase is refused: TERM code 2, a close or a silent drop",
    warm=True,
    how="bit",
)
_bad_crc_case(
    4, "a zero CRC field is refused: TERM code 2, a close or a silent drop", warm=True, how="zero"
)
_bad_crc_case(
    5,
    "a payload octet changed in flight is refused: TERM code 2, a close or a silent drop",
    warm=True,
    how="payload",
)


def _answers_first_carrier(s: Session) -> float:
    """Seconds the target took, on a twin connection, to answer the carrier sent valid as the
    first FPDU (a zero-length Read Response); skip when it does not answer it.

    Without this a target that never answers anything would pass every case that accepts
    silence after a broken carrier."""
    twin = s.another()
    twin.startup()
    if not twin.crc:
        raise CaseSkipped(NO_CRC)
    sent = time.monotonic()
    twin.send_ulpdu(_carrier(twin), "the same carrier, valid (the twin's first FPDU)")
    while (got := twin.next_fpdu(twin.within(1.0))) is not None:
        info = got.info
        if info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE:
            took = time.monotonic() - sent
            twin.pace.saw(took)
            return took
        if got.is_terminate:
            break
    raise CaseSkipped(
        "on a twin connection the target did not answer the carrier (a valid zero-length Read "
        "Request as the first FPDU) with a Read Response within 1 s: its silence after the "
        "broken one would prove nothing; a target that answers it (iwarp listen) enables the "
        "case"
    )


@case(
    "rfc5044/7.1.2/16",
    "a Responder whose first FPDU fails its CRC sends no FPDU, not even a Terminate (it closes "
    "or drops it)",
    '§7.1.2 rule 4: "MPA Responder mode implementations MUST receive and validate at least one '
    'FPDU before sending any FPDUs"; §8: CRC errors "MUST be detected", the code "SHOULD be '
    'provided", and an optimized MPA "MAY choose to silently drop the TCP segment"',
    roles=(TargetRole.RESPONDER,),
    # A Responder that sends an FPDU of its own first breaks the same rule.
    covers=("crc-first-term", "crc", "responder-first"),
)
def crc_first_no_terminate(s: Session) -> None:
    # A MUST: a Terminate is an FPDU, and an FPDU whose CRC fails was not validated, so rule 4
    # forbids it. §8 asks only that the error be detected (reporting it is a SHOULD, dropping
    # it a MAY): a Responder obeys both by closing or dropping, so the MUST decides.
    if s.style.peer_to_peer:
        raise CaseSkipped(
            "the target takes only peer-to-peer startups, whose first FPDU is the tool's RTR "
            "(RFC 6581 §9.2): no broken FPDU can come first; a target that takes plain Rev 2 "
            "or Rev 1 Requests enables the case"
        )
    took = _prove_carrier(s, first=True)
    assert took is not None  # a Responder target: the twin answered
    _send_broken(
        s, s.frame_ulpdu(_carrier(s), corrupt_crc=True), "first FPDU: the carrier, CRC wrong"
    )
    # The fence is valid: once the target validated it, it may answer it (and that ends the
    # wait); anything it sends before that answer came before any FPDU was validated.
    deadline = s.deadline
    while (got := s.next_fpdu(deadline)) is not None:
        if not s.is_fence(got):
            raise CaseFailed(
                f"the Responder sent {got.describe()} before it had validated any FPDU (the "
                "first it received had a wrong CRC): rule 4 allows a close or silence, not an FPDU"
            )
        deadline = s.fenced(got, deadline)
    s.note(f"target {'closed the connection' if s.link.ended else 'stayed silent'}")


@case(
    "rfc5044/8/6",
    "a TERM for a wrong CRC copies no DDP header (LLP errors carry none)",
    'RFC 5040 §4.8 Figure 10: LLP errors: "Terminate Includes DDP Header" No',
    level=Level.SHOULD,
    covers=("crc",),
)
def crc_term_no_copy(s: Session) -> None:
    _prove_carrier(s, first=False)
    _send_broken(s, s.frame_ulpdu(_carrier(s), corrupt_crc=True), "FPDU with a wrong CRC")
    got = _crc_refused(s, "the FPDU with a wrong CRC")
    if got is None:
        raise CaseSkipped("the target closed or stayed silent instead of sending a Terminate")
    if got.terminate().hdrct:
        raise CaseFailed(f"HdrCt {int(got.terminate().hdrct) >> 13:#x} on an LLP error")


@case(
    "rfc5044/8/7",
    "after a CRC error the target sends nothing but the Terminate",
    'RFC 5040 §5.4: "After sending a Terminate Message on an RDMAP Stream, the Local Peer MUST '
    'NOT send any more Messages on that specific RDMAP Stream"',
    covers=("crc",),
)
def nothing_after_term(s: Session) -> None:
    _prove_carrier(s, first=False)
    _send_broken(s, s.frame_ulpdu(_carrier(s), corrupt_crc=True), "FPDU with a wrong CRC")
    if _crc_refused(s, "the FPDU with a wrong CRC") is None:
        return
    s.send_ulpdu(_hello(s), "a valid Send after the error")
    deadline = s.within(1.0)
    while (got := s.next_fpdu(deadline)) is not None:
        raise CaseFailed(f"after its Terminate the target sent {got.describe()}")


@case(
    "rfc5044/4.1/1",
    "the target's PAD octets are zero",
    'RFC 5044 §4.1 PAD: "The pad data MUST be set to zero by the sender"',
    needs=(Need.TALKS,),
    covers=("pad-sent",),
)
def pad_zero(s: Session) -> None:
    s.data_phase()
    if not s.received:
        raise CaseSkipped(NO_FPDU)
    region = s.cooperation.region
    if not any(got.pad for got in s.received) and region is not None:
        # The target's own FPDUs need no PAD (iwarp's are 2 octets short of a multiple of
        # 4): a 1-octet Read of its buffer brings a 15-octet Read Response, 3 octets of PAD.
        request = ReadRequest(s.values.sink_stag, 0, 1, region.stag, region.to)
        s.send_ulpdu(
            craft.read_request(request, msn=s.next_msn(1))[0].octets,
            "Read Request of 1 octet (its Read Response needs PAD)",
        )
        deadline = s.within(1.0)
        while (got := s.next_fpdu(deadline)) is not None and not got.is_terminate:
            if got.pad:
                break
    for got in s.received:
        if got.pad.strip(b"\0"):
            raise CaseFailed(f"PAD {got.pad.hex()} in {got.describe()}")
    if not any(got.pad for got in s.received):
        raise CaseSkipped(
            "none of the target's FPDUs had PAD; a target with a buffer open to remote Read "
            "(iwarp listen --op read, rping -c) enables the case"
        )


@case(
    "rfc5044/4.1/2",
    "non-zero PAD octets covered by a good CRC are ignored",
    'RFC 5044 §4.1 PAD: "ignored by the receiver (except for CRC checking)"',
    needs=(Need.REGION,),
    covers=("pad-checked", "write-placed"),
)
def pad_ignored(s: Session) -> None:
    s.data_phase()
    s.need(Need.REGION)
    region = s.cooperation.region
    assert region is not None
    seg = craft.write(region.stag, region.to, b"\x55")  # 2 + 15 octets: 3 octets of PAD
    s.send_ulpdu(seg.octets, "RDMA Write of 1 octet, PAD ff ff ff", pad=b"\xff\xff\xff")
    s.expect_alive(0.3, "after an FPDU with non-zero PAD", skip=NOT_WRITABLE)


@case(
    "rfc5044/4.4/1",
    "the target's FPDUs carry a correct CRC",
    'RFC 5044 §4.1 CRC: "When CRCs are enabled, this field contains a CRC32c check value"',
    needs=(Need.TALKS,),
    covers=("crc-sent",),
)
def crc_correct(s: Session) -> None:
    s.data_phase()
    if not s.received:
        raise CaseSkipped(NO_FPDU)
    for got in s.received:
        if not got.crc_ok:
            raise CaseFailed(f"{got.describe()}")


@case(
    "rfc5044/4.1/3",
    "without CRC, any CRC field value is accepted",
    'RFC 5044 §7.1.1 C: "When CRCs are not in use, the CRC field MUST be considered valid for '
    'FPDU checking regardless of its contents"',
    roles=(TargetRole.RESPONDER,),
    covers=("crc-always",),
)
def crc_off(s: Session) -> None:
    reply = s.initiate(s.default_request(flags=s.base_flags() & ~FrameFlags.CRC))
    if reply.reject:
        raise CaseSkipped("the target rejected a C=0 Request")
    if reply.crc:
        raise CaseSkipped("the target wants CRC (C=1 in its Reply)")
    s.crc = False
    if s.rtr is not None:
        s.send_rtr()
    data = bytearray(s.frame_ulpdu(_hello(s)))
    data[-4:] = b"\xde\xad\xbe\xef"
    s.send_raw(bytes(data), "hello Send with CRC field deadbeef")
    s.expect_alive(0.3, "after an FPDU with an arbitrary CRC field (CRC off)")


@case(
    "rfc5044/4.1/4",
    "the initiator's first FPDU with CRC off may carry any CRC value",
    'RFC 5044 §7.1.1 C: "When CRCs are not in use, the CRC field MUST be considered valid"',
    roles=(TargetRole.INITIATOR,),
    needs=(Need.TALKS,),
    covers=("crc-always",),
)
def crc_off_initiator(s: Session) -> None:
    request = s.read_request()
    if request.crc:
        raise CaseSkipped("the target asked for CRC (C=1 in its Request)")
    s.send_raw(
        s.default_reply(request, flags=FrameFlags.ENHANCED if request.is_enhanced else 0),
        "Reply with C=0",
    )
    s.crc = False
    got = s.next_fpdu()
    if got is None:
        raise CaseSkipped(NO_FPDU)
    data = bytearray(s.frame_ulpdu(craft.write(0x7E57_0000, 0).octets))
    data[-4:] = b"\xde\xad\xbe\xef"
    s.send_raw(bytes(data), "zero-length Write, CRC field deadbeef")
    s.expect_alive(0.3, "after an FPDU with an arbitrary CRC field (CRC off)")


@case(
    "rfc5044/5.3/1",
    "a ULPDU_Length of 65535 (above 64768) is refused, not silently taken",
    'RFC 5044 §5.3: "The sending DDP MUST NOT post a ULPDU larger than 64768 octets to MPA"; '
    '"MPA is not REQUIRED to support a ULPDU Length that is greater than the current MULPDU"',
    level=Level.SHOULD,
)
def ulpdu_too_long(s: Session) -> None:
    s.data_phase()
    ulpdu = craft.write(0x7E57_0000, 0, bytes(65535 - 14)).octets
    s.send_ulpdu(ulpdu, "FPDU with ULPDU_Length 65535")
    deadline = s.within(s.answer_wait(3.0, sent=len(ulpdu)))
    while True:
        fpdu = s.next_fpdu(deadline)
        if fpdu is None:
            if s.link.ended:
                return
            raise CaseFailed("no Terminate and no close for a 65535-octet ULPDU")
        if fpdu.is_terminate:
            return


def _garbage_case(number: int, title: str, data: bytes, *, framed: bool = False) -> None:
    @case(
        f"rfc5044/6/{number}",
        title,
        "RFC 5044 §6: the receiver finds each FPDU from the ULPDU_Length field; §8: a CRC "
        'mismatch "MUST be detected"',
        covers=("crc",),
    )
    def run(s: Session) -> None:
        # Silence passes only once the target was seen to answer a valid FPDU on this very
        # connection (the carrier, after its first FPDU: RFC 5044 §7.1.2 rule 4). Garbage
        # that frames as one FPDU (``framed``) is followed by a fence, which ends the wait;
        # after other garbage no FPDU boundary is left for a fence, and the wait is bounded
        # by how long the carrier took, and the octets' transfer (see Session.answer_wait).
        took = _prove_carrier(s, first=False)
        if framed:
            s.send_raw(data, "garbage")
            s.send_fence()
            _judged(s, took, _crc_refused(s, "the garbage"))
        else:
            s.send_raw(data, "garbage")
            _judged(s, took, _crc_refused(s, "the garbage", _wait(s, took, len(data))))


_garbage_case(
    1,
    "eight zero octets (an empty FPDU, CRC 0) are refused: TERM code 2, a close or a silent drop",
    bytes(8),
    framed=True,
)
_garbage_case(
    2,
    "an HTTP request after startup is refused: TERM code 2, a close or a silent drop",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(20000),
)
_garbage_case(
    3,
    "0xFF octets after startup are refused: TERM code 2, a close or a silent drop",
    b"\xff" * 70000,
)
_garbage_case(
    4,
    "a second MPA Request after startup is refused: TERM code 2, a close or a silent drop",
    craft.request() + bytes(20000),
)


# --- markers (RFC 5044 §4.3, §7.1.2 rule 7) ---------------------------------------------


def _markers_wanted(s: Session) -> None:
    """Start with M=1 from the tool; skip when the target refuses markers."""
    if s.target is TargetRole.RESPONDER:
        reply = s.initiate(s.default_request(flags=s.base_flags() | FrameFlags.MARKERS))
        if reply.reject:
            raise CaseSkipped("the target does not send markers (it rejected M=1)")
        if s.rtr is not None:
            s.send_rtr()
        s.send_ulpdu(_hello(s), "hello Send")
    else:
        request = s.read_request()
        flags = FrameFlags.MARKERS | FrameFlags.CRC
        if request.is_enhanced:
            flags |= FrameFlags.ENHANCED
        s.send_raw(s.default_reply(request, flags=flags), "Reply with M=1")
        s.markers_receive = True
        s.crc = True
    got = s.next_fpdu(s.within(2.0))
    if got is None:
        if s.link.ended:
            raise CaseSkipped(f"the target does not send markers (it closed, {s.link.ended})")
        raise CaseSkipped("the target sent no FPDU to look at")


def _crc_checked(s: Session) -> None:
    """RFC 5044 §4.4/§6: with markers on, each FPDU's CRC covers its markers too."""
    for got in s.received:
        if s.crc and not got.crc_ok:
            raise CaseFailed(f"{got.describe()} (the CRC covers the FPDU's markers)")


@case(
    "rfc5044/7.1.2/15",
    "with markers on, the target's first octets are a zero Marker",
    'RFC 5044 §7.1.2 rule 7: "if Markers are enabled, the first octets sent are the special '
    'Marker 0x00000000"',
    needs=(Need.TALKS,),
    covers=("markers", "crc-sent-marked"),
)
def first_marker(s: Session) -> None:
    _markers_wanted(s)
    first = s.received[0]
    if not first.markers or first.markers[0] != (0, 0):
        raise CaseFailed(f"first marker {first.markers[:1]} (expected 0 at offset 0)")
    _crc_checked(s)


@case(
    "rfc5044/4.3/1",
    "with markers on, every Marker points back to its FPDU's start",
    'RFC 5044 §4.3: "The FPDUPTR ... is the relative pointer, in octets, from the Marker to the '
    'ULPDU Length field of the FPDU"',
    needs=(Need.TALKS,),
    covers=("marker-ptr", "markers", "crc-sent-marked"),
)
def marker_ptrs(s: Session) -> None:
    _markers_wanted(s)
    s.link.settle(0.3)
    while s.next_fpdu(s.within(0.2)) is not None:
        pass
    for seen in s.received:
        if not seen.is_terminate:
            s.learn(seen)  # an advertised buffer, if any
    region = s.cooperation.region
    if not any(offset for got in s.received for offset, _ in got.markers) and region:
        # Short FPDUs never reach the marker at 512: a Read of 1100 octets of the
        # target's buffer brings a Read Response that spans two more.
        size = min(region.length, 1100)
        request = ReadRequest(s.values.sink_stag, 0, size, region.stag, region.to)
        s.send_ulpdu(
            craft.read_request(request, msn=s.next_msn(1))[0].octets,
            f"Read Request of {size} octets (its Read Response spans markers)",
        )
        deadline = s.within(1.0)
        while (got := s.next_fpdu(deadline)) is not None and not got.is_terminate:
            if got.info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE:
                break
    _crc_checked(s)
    if not any(offset for got in s.received for offset, _ in got.markers):
        raise CaseSkipped(
            "the target's FPDUs never reached a marker past the first (the stream stayed "
            "under 512 octets); a target with a buffer open to remote Read (iwarp listen "
            "--op read, rping -c) enables the case"
        )
    for got in s.received:
        for offset, ptr in got.markers:
            if offset == 0:
                continue
            start = got.offset if offset > got.offset else offset
            expect = offset - got.offset if offset > got.offset else 0
            if ptr & 0xFFFC != expect and offset % MARKER_INTERVAL == 0:
                raise CaseFailed(
                    f"marker at {offset}: FPDUPTR {ptr}, expected {expect} (FPDU at {start})"
                )
