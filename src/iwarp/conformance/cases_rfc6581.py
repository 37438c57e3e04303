"""RFC 6581: enhanced data (S bit), IRD/ORD and 0x3FFF, the A bit and RTRs, TERM 5/6/7."""

from __future__ import annotations

from iwarp.conformance import craft
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import (
    NO_ENHANCED,
    NO_READ_RTR,
    NO_WRITE_RTR,
    NOT_P2P,
    P2P_ONLY,
    RTR_STAG,
    Session,
    describe_terminate,
)
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.errors import MpaErrorCode, TerminateLayer
from iwarp.mpa.wire import IRD_ORD_NONE, EnhancedData, FrameFlags, MpaFrame, Revision, RtrFlags
from iwarp.rdmap.wire import RdmapOpcode, TerminateHeader

R = (TargetRole.RESPONDER,)
I = (TargetRole.INITIATOR,)  # noqa: E741
A = RtrFlags.PEER_TO_PEER
RTRS = RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ
#: Responder cases of RFC 6581 need a target that takes Rev 2 Requests.
REV2 = (Need.ENHANCED,)


def _enhanced_reply(s: Session, ird: int, ord_: int, flags: RtrFlags = RtrFlags.NONE) -> MpaFrame:
    """Send a Rev 2 Request with this enhanced data; the Reply must carry enhanced data too."""
    if s.style.peer_to_peer and A not in flags:
        flags |= A | s.style.rtr_types
    req = craft.request(enhanced=EnhancedData(ird, ord_, flags))
    reply = s.initiate(req)
    if reply.reject:
        raise CaseSkipped("the target rejected the Request (R=1)")
    if reply.enhanced is None:
        raise CaseFailed(
            f"the Reply to an enhanced Request has no enhanced data "
            f"(Rev {reply.revision}, S={int(reply.is_enhanced)})"
        )
    return reply


@case(
    "rfc6581/10/1",
    "an enhanced Rev 2 Request gets an enhanced Rev 2 Reply",
    '§10: "If the responder receives an enhanced MPA message, it MUST respond with an enhanced '
    'MPA message"',
    roles=R,
    needs=REV2,
    covers=("enhanced-reply",),
)
def enhanced_reply(s: Session) -> None:
    reply = _enhanced_reply(s, 16, 16)
    if reply.revision != Revision.REV2:
        raise CaseFailed(f"Reply Rev {reply.revision}")


@case(
    "rfc6581/10/2",
    "an unenhanced Rev 2 Request (S=0) gets an unenhanced Reply",
    "§10: \"If the responder receives an unenhanced MPA message ('S' is set to 0), it MUST "
    'respond with an unenhanced MPA message"',
    roles=R,
    needs=REV2,
    covers=("unenhanced-reply",),
)
def unenhanced_reply(s: Session) -> None:
    reply = s.initiate(craft.request(flags=FrameFlags.CRC, enhanced=None))
    if reply.is_enhanced:
        raise CaseFailed("the Reply has S=1")


@case(
    "rfc6581/10/3",
    "a Rev 1 Request is accepted with an unenhanced Reply",
    '§10: "The responder MUST continue to accept unenhanced connection requests"',
    roles=R,
    covers=("rev1",),
)
def rev1_accepted(s: Session) -> None:
    reply = s.initiate(craft.request(revision=Revision.REV1))
    if reply.reject:
        raise CaseFailed("a Rev 1 Request was rejected")
    if FrameFlags.ENHANCED in reply.flags or reply.reserved & FrameFlags.ENHANCED:
        raise CaseFailed("the Reply to a Rev 1 Request has the S bit")


@case(
    "rfc6581/10/4",
    "an enhanced Request carries its IRD/ORD in the first 4 private octets",
    '§9: "Enhanced RDMA connection establishment places the following 32 bits at the beginning '
    'of the Private Data field"',
    roles=I,
    covers=("request-enhanced",),
)
def request_enhanced(s: Session) -> None:
    req = s.read_request()
    if req.revision == Revision.REV2 and FrameFlags.ENHANCED in req.flags and req.enhanced is None:
        raise CaseFailed("S=1 but fewer than 4 octets of private data")
    if req.revision < Revision.REV2:
        raise CaseSkipped(f"the target sent Rev {req.revision}")


@case(
    "rfc6581/5/1",
    "a Rev 2 Request with S=1 and PD_Length 2 is closed without a Reply",
    "§5/§9: the enhanced data is 32 bits at the beginning of the private data; RFC 5044 rule 9: "
    '"the startup frame MUST be considered improperly formatted"',
    roles=R,
    needs=REV2,
    covers=("reply-to-invalid", "short-enhanced"),
)
def short_enhanced(s: Session) -> None:
    s.send_raw(
        craft.request(
            enhanced=None, flags=FrameFlags.CRC | FrameFlags.ENHANCED, private_data=b"\x00\x10"
        ),
        "Rev 2 Request, S=1, PD_Length 2",
    )
    s.expect_closed("S=1 without room for IRD/ORD")


@case(
    "rfc6581/9.1/1",
    "the Responder's ORD is at most the Initiator's IRD",
    '§9.1: "The responder MUST set its ORD at most to the initiator IRD"',
    roles=R,
    needs=REV2,
    covers=("ord", "enhanced-reply"),
)
def ord_le_ird(s: Session) -> None:
    reply = _enhanced_reply(s, 2, 2)
    assert reply.enhanced is not None
    if reply.enhanced.ord > 2:
        raise CaseFailed(f"Initiator IRD 2, Responder ORD {reply.enhanced.ord}")


@case(
    "rfc6581/9.1/2",
    "an Initiator IRD of 0 gets a Responder ORD of 0",
    '§9.1: "The responder MUST set its ORD at most to the initiator IRD"',
    roles=R,
    needs=REV2,
    covers=("ord", "enhanced-reply"),
)
def ird_zero(s: Session) -> None:
    reply = _enhanced_reply(s, 0, 1)
    assert reply.enhanced is not None
    if reply.enhanced.ord != 0:
        raise CaseFailed(f"Initiator IRD 0, Responder ORD {reply.enhanced.ord}")


@case(
    "rfc6581/9.1/3",
    "an Initiator ORD of 0x3FFF gets a Responder IRD of 0x3FFF",
    '§9.1: "The responder MUST respond to an initiator ORD value of 0x3FFF by leaving its local '
    'endpoint IRD value unchanged and setting the IRD to 0x3FFF in its reply message"',
    roles=R,
    needs=REV2,
    covers=("ird-ord-none", "enhanced-reply"),
)
def ord_none(s: Session) -> None:
    reply = _enhanced_reply(s, 8, IRD_ORD_NONE)
    assert reply.enhanced is not None
    if reply.enhanced.ird != IRD_ORD_NONE:
        raise CaseFailed(f"Initiator ORD 0x3FFF, Responder IRD {reply.enhanced.ird:#x}")


@case(
    "rfc6581/9.1/4",
    "an Initiator IRD of 0x3FFF gets a Responder ORD of 0x3FFF",
    '§9.1: "The responder MUST respond to an initiator IRD value of 0x3FFF by leaving its local '
    'endpoint ORD value unchanged, and setting ORD to 0x3FFF in its reply message"',
    roles=R,
    needs=REV2,
    covers=("ird-ord-none", "enhanced-reply"),
)
def ird_none(s: Session) -> None:
    reply = _enhanced_reply(s, IRD_ORD_NONE, 8)
    assert reply.enhanced is not None
    if reply.enhanced.ord != IRD_ORD_NONE:
        raise CaseFailed(f"Initiator IRD 0x3FFF, Responder ORD {reply.enhanced.ord:#x}")


@case(
    "rfc6581/9.1/5",
    "IRD and ORD of 0x3FFF both come back as 0x3FFF",
    '§9.1: "An all ones value (0x3FFF) indicates that automatic negotiation of the IRD or ORD is '
    'not desired"',
    roles=R,
    needs=REV2,
    covers=("ird-ord-none", "enhanced-reply"),
)
def both_none(s: Session) -> None:
    reply = _enhanced_reply(s, IRD_ORD_NONE, IRD_ORD_NONE)
    assert reply.enhanced is not None
    if (reply.enhanced.ird, reply.enhanced.ord) != (IRD_ORD_NONE, IRD_ORD_NONE):
        raise CaseFailed(f"Responder IRD {reply.enhanced.ird:#x} ORD {reply.enhanced.ord:#x}")


@case(
    "rfc6581/9.1/6",
    "the Responder's IRD covers the Initiator's ORD (or it rejects)",
    '§9.1: "Responder IRD ... is greater than or equal to the initiator ORD for successful '
    'negotiations"',
    level=Level.SHOULD,
    roles=R,
    needs=REV2,
)
def ird_covers_ord(s: Session) -> None:
    reply = _enhanced_reply(s, 4, 4)
    assert reply.enhanced is not None
    if reply.enhanced.ird < 4:
        raise CaseFailed(f"Initiator ORD 4, Responder IRD {reply.enhanced.ird}")


@case(
    "rfc6581/9.1/7",
    "an Initiator given a Responder ORD above its IRD raises its IRD or sends TERM code 6",
    '§9.1: "If the initiator does not have sufficient resources for the required '
    'IRD, it MUST send a TERM message ... Layer 2, Error Type 0, Error Code 6"',
    roles=I,
    covers=("ird-term", "terminate"),
)
def responder_ord_high(s: Session) -> None:
    request = s.read_request()
    if request.enhanced is None:
        raise CaseSkipped(NO_ENHANCED)
    enh = request.enhanced
    if enh.ird >= 0x3FFE:
        raise CaseSkipped(f"the Initiator's IRD is {enh.ird:#x}")
    flags = _answer_rtr(enh.flags)
    s.send_raw(craft.reply(enhanced=EnhancedData(enh.ord, 0x3FFE, flags)), "Reply with ORD 0x3FFE")
    s.crc = True
    got = s.next_fpdu()
    if got is None:
        if s.link.ended:
            raise CaseFailed(f"the target closed the connection ({s.link.ended}) without TERM 6")
        return  # nothing to say first: it raised its IRD and waits
    if got.is_terminate:
        term = got.terminate()
        if (term.layer, term.etype, term.code) != (2, 0, MpaErrorCode.INSUFFICIENT_IRD):
            raise CaseFailed(f"expected TERM layer 2 type 0 code 6, got {describe_terminate(term)}")


def _answer_rtr(offered: RtrFlags) -> RtrFlags:
    if A not in offered:
        return RtrFlags.NONE
    for flag in (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND):
        if flag in offered:
            return A | flag
    return A | RtrFlags.WRITE


@case(
    "rfc6581/9.1/8",
    "an Initiator given IRD and ORD 0x3FFF proceeds",
    '§9.1: "The initiator MUST leave its local endpoint ORD value unchanged upon receiving a '
    'responder IRD value of 0x3FFF"',
    roles=I,
    covers=("ird-ord-none",),
)
def initiator_none(s: Session) -> None:
    request = s.read_request()
    if request.enhanced is None:
        raise CaseSkipped(NO_ENHANCED)
    flags = _answer_rtr(request.enhanced.flags)
    s.send_raw(
        craft.reply(enhanced=EnhancedData(IRD_ORD_NONE, IRD_ORD_NONE, flags)),
        "Reply with IRD 0x3FFF ORD 0x3FFF",
    )
    s.crc = True
    got = s.next_fpdu(s.within(1.0))
    if got is not None and got.is_terminate:
        raise CaseFailed(f"the Initiator refused 0x3FFF: {got.describe()}")
    if got is None and s.link.ended:
        raise CaseFailed(f"the Initiator closed the connection ({s.link.ended})")


# --- §9.2: the A bit and RTR choices -------------------------------------------------


def _p2p_case(number: int, offer: RtrFlags, title: str) -> None:
    @case(
        f"rfc6581/9.2/{number}",
        title,
        '§9.2: "If Control Flag A is 1 in the MPA Request message, then the responder MUST set '
        "Control Flag A to 1 in the MPA reply message ... If the responder does not support any "
        "of the initiator-specified RTR indication options, then the responder MUST set at "
        'least one RTR indication type option it supports"',
        roles=R,
        needs=REV2,
        covers=("peer-to-peer", "enhanced-reply"),
    )
    def run(s: Session) -> None:
        reply = _enhanced_reply(s, 16, 16, A | offer)
        assert reply.enhanced is not None
        flags = reply.enhanced.flags
        if A not in flags:
            raise CaseFailed("A=1 in the Request, A=0 in the Reply")
        if not flags & RTRS:
            raise CaseFailed("the Reply sets no RTR type")


_p2p_case(
    1, RtrFlags.WRITE | RtrFlags.READ, "A=1 offering Write+Read: the Reply has A=1 and an RTR"
)
_p2p_case(2, RtrFlags.WRITE, "A=1 offering Write: the Reply has A=1 and an RTR")
_p2p_case(3, RtrFlags.READ, "A=1 offering Read: the Reply has A=1 and an RTR")
_p2p_case(4, RtrFlags.SEND, "A=1 offering only Send: the Reply has A=1 and at least one RTR")
_p2p_case(5, RTRS, "A=1 offering all three: the Reply has A=1 and an RTR")


@case(
    "rfc6581/9.2/6",
    "A=0 gets A=0 with B, C, D clear",
    '§9.2: "The responder MUST set Control Flag A to 0 if Control Flag A is 0 in the request. '
    'If Control Flag A is set to 0, then Control Flags B, C, and D MUST also be set to 0"',
    roles=R,
    needs=REV2,
    covers=("rtr-bits", "enhanced-reply"),
)
def a_zero(s: Session) -> None:
    if s.style.peer_to_peer:
        raise CaseSkipped(P2P_ONLY)
    reply = _enhanced_reply(s, 16, 16)
    assert reply.enhanced is not None
    if reply.enhanced.flags:
        raise CaseFailed(f"A=0 Request, Reply control flags {reply.enhanced.flags!r}")


@case(
    "rfc6581/9.2/7",
    "B, C, D with A=0 are ignored: the Reply has A=0 and B, C, D clear",
    '§9.2: "On reception, if Control Flag A is set to 0, then Control Flags B, C, and D MUST be '
    'ignored"',
    roles=R,
    needs=REV2,
    covers=("rtr-bits", "enhanced-reply"),
)
def bcd_without_a(s: Session) -> None:
    if s.style.peer_to_peer:
        raise CaseSkipped(P2P_ONLY)
    reply = s.initiate(craft.request(enhanced=EnhancedData(16, 16, RTRS)))
    if reply.reject:
        raise CaseFailed("the Request (A=0 with B, C, D set) was rejected")
    enh = reply.enhanced
    if enh is None or enh.flags:
        raise CaseFailed(f"Reply control flags {enh.flags if enh else 'missing'!r}")


@case(
    "rfc6581/9.2/8",
    "the Write RTR (zero-length RDMA Write) is taken without a Terminate",
    '§9.2: "Upon receiving the MPA Accept Frame with Control Flag A set to 1, the initiator MUST '
    'generate one of the negotiated RTR indications"',
    roles=R,
    needs=REV2,
    covers=("write-rtr", "enhanced-reply"),
)
def write_rtr(s: Session) -> None:
    reply = _enhanced_reply(s, 16, 16, A | RtrFlags.WRITE)
    assert reply.enhanced is not None
    if RtrFlags.WRITE not in reply.enhanced.flags:
        raise CaseSkipped(NO_WRITE_RTR)
    s.rtr = RtrFlags.WRITE
    s.send_rtr()
    s.expect_alive(0.3, "after the Write RTR")


@case(
    "rfc6581/9.2/9",
    "the Read RTR (zero-length Read) is answered by a zero-length Read Response",
    'RFC 5040 §5.2.1: for a zero-length Read Request the Remote Peer "MUST respond with a '
    'zero-length RDMA Read Response Message"',
    roles=R,
    needs=REV2,
    covers=("zero-read", "zero-read-stag", "enhanced-reply"),
)
def read_rtr(s: Session) -> None:
    reply = _enhanced_reply(s, 16, 16, A | RtrFlags.READ)
    assert reply.enhanced is not None
    if RtrFlags.READ not in reply.enhanced.flags:
        raise CaseSkipped(NO_READ_RTR)
    s.rtr = RtrFlags.READ
    s.send_rtr()
    # RFC 5040 does not order the target's own Sends before or after the Read Response:
    # other messages are passed over; a Terminate ends the wait.
    while True:
        got = s.next_fpdu()  # the whole case timeout: an emulated guest can be slow
        if got is None:
            raise CaseFailed(
                f"no Read Response to the Read RTR ({s.link.ended or 'silence'} "
                f"after {len(s.received)} other FPDUs)"
            )
        if got.is_terminate:
            raise CaseFailed(f"a Terminate instead of the Read Response: {got.describe()}")
        info = got.info
        if info.get("opcode") != RdmapOpcode.RDMA_READ_RESPONSE:
            continue
        if info.get("payload_length") != 0 or info.get("stag") != RTR_STAG:
            raise CaseFailed(f"expected a zero-length Read Response, got {got.describe()}")
        return


@case(
    "rfc6581/9.2/10",
    "the Initiator's Request with A=0 has B, C, D clear",
    '§9.2: "If Control Flag A is set to 0, then Control Flags B, C, and D MUST also be set to 0"',
    roles=I,
    covers=("rtr-bits",),
)
def initiator_a_zero(s: Session) -> None:
    req = s.read_request()
    if req.enhanced is None:
        raise CaseSkipped(NO_ENHANCED)
    if A not in req.enhanced.flags and req.enhanced.flags & RTRS:
        raise CaseFailed(f"A=0 with control flags {req.enhanced.flags!r}")


@case(
    "rfc6581/9.2/11",
    "the Initiator's Request with A=1 offers at least one RTR type",
    '§9.2: "The initiator MUST set each Control Flag B, C, and D to 1 for each of the options it '
    'supports, if Control Flag A is set to 1"',
    roles=I,
    covers=("rtr-offer",),
)
def initiator_offers(s: Session) -> None:
    req = s.read_request()
    if req.enhanced is None or A not in req.enhanced.flags:
        raise CaseSkipped(NOT_P2P)
    if not req.enhanced.flags & RTRS:
        raise CaseFailed("A=1 with no RTR type")


@case(
    "rfc6581/9.2/12",
    "the Initiator sends the RTR the Reply chose, as its first FPDU",
    '§9.2: "the initiator MUST generate one of the negotiated RTR indications"',
    roles=I,
    covers=("rtr-choice",),
)
def initiator_rtr(s: Session) -> None:
    req = s.read_request()
    if req.enhanced is None or A not in req.enhanced.flags:
        raise CaseSkipped(NOT_P2P)
    flags = _answer_rtr(req.enhanced.flags)
    s.send_raw(
        craft.reply(enhanced=EnhancedData(req.enhanced.ord, req.enhanced.ird, flags)),
        f"Reply choosing {craft.RTR_NAMES[flags & RTRS]}",
    )
    s.crc = True
    got = s.next_fpdu()
    if got is None:
        raise CaseFailed("no RTR after the Reply")
    want = {RtrFlags.WRITE: 0, RtrFlags.READ: 1, RtrFlags.SEND: 3}[flags & RTRS]
    info = got.info
    size = 28 if want == 1 else 0
    if info.get("opcode") != want or info.get("payload_length") != size:
        raise CaseFailed(
            f"expected the zero-length {craft.RTR_NAMES[flags & RTRS]} RTR, got {got.describe()}"
        )


@case(
    "rfc6581/9.2/13",
    "a Reply choosing an RTR type the Initiator did not offer brings TERM 7",
    '§9.2: "If the initiator is not able to generate any of the responder-supported RTR '
    'indications, then it MUST send a TERM message ... Layer 2, Error Type 0, Error Code 7"',
    roles=I,
    covers=("rtr-unmatched", "terminate"),
)
def initiator_no_match(s: Session) -> None:
    req = s.read_request()
    if req.enhanced is None or A not in req.enhanced.flags:
        raise CaseSkipped(NOT_P2P)
    missing = [
        f for f in (RtrFlags.SEND, RtrFlags.WRITE, RtrFlags.READ) if f not in req.enhanced.flags
    ]
    if not missing:
        raise CaseSkipped("the target offers every RTR type")
    flags = A | missing[0]
    s.send_raw(
        craft.reply(enhanced=EnhancedData(req.enhanced.ord, req.enhanced.ird, flags)),
        f"Reply choosing only {craft.RTR_NAMES[missing[0]]} (not offered)",
    )
    s.crc = True
    s.expect_terminate(TerminateLayer.LLP, 0, MpaErrorCode.NO_MATCHING_RTR)


# --- §8: TERM codes 5, 6, 7 received ---------------------------------------------------


def _term_received(number: int, code: MpaErrorCode) -> None:
    @case(
        f"rfc6581/8/{number}",
        f"a TERM with layer 2 code {int(code)} ({code.name}) ends the stream: no more FPDUs",
        '§8 / RFC 5040 §5.4: "After receiving a Terminate Message on an RDMAP Stream, the Remote '
        'Peer MAY stop sending"; the TERM is an error report, not answered by another TERM',
        level=Level.SHOULD,
        needs=(Need.TALKS,),
    )
    def run(s: Session) -> None:
        s.data_phase()
        term = craft.terminate(TerminateHeader(TerminateLayer.LLP, 0, int(code)), msn=1)
        s.send_ulpdu(term.octets, f"TERM layer 2 type 0 code {int(code)}")
        deadline = s.within(s.answer_wait(2.0))
        while True:
            got = s.next_fpdu(deadline)
            if got is None:
                return
            if got.is_terminate:
                raise CaseFailed(f"the target answered a TERM with {got.describe()}")


for _n, _code in enumerate(
    (MpaErrorCode.LOCAL_CATASTROPHIC, MpaErrorCode.INSUFFICIENT_IRD, MpaErrorCode.NO_MATCHING_RTR)
):
    _term_received(1 + _n, _code)
