"""RFC 7306 (RDMAP extensions): Atomic Operations and Immediate Data.

RFC 7306 is optional: a target without it answers the new opcodes with a
Terminate "Remote Operation Error / Unexpected OpCode" (§1.1). Every case
here skips, saying so, when it gets that answer where support was needed.
The Atomic cases act on the buffer the target advertised, at its first
64-bit aligned TO; a target whose buffer refuses Atomic Operations (an
access-rights Terminate) skips them too. The FetchAdds they send add 0,
or add and then take away the same amount, so the buffer ends as it was.
"""

from __future__ import annotations

from iwarp.conformance import craft
from iwarp.conformance.errorcase import apart, judge_foreign, unknown_stag
from iwarp.conformance.model import case
from iwarp.conformance.session import (
    NOT_WRITABLE,
    Received,
    Region,
    Session,
    describe_terminate,
)
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.ddp.errors import DdpErrorType, DdpTaggedCode
from iwarp.errors import TerminateLayer
from iwarp.rdmap.errors import RdmapErrorType, RemoteOperationCode, RemoteProtectionCode
from iwarp.rdmap.wire import (
    ATOMIC_RESPONSE_SIZE,
    NO_MASK,
    AtomicRequest,
    AtomicResponse,
    RdmapOpcode,
    TerminateHeader,
)

RDMAP = TerminateLayer.RDMAP
PROT = RdmapErrorType.REMOTE_PROTECTION
OPER = RdmapErrorType.REMOTE_OPERATION
NO_SUPPORT = "the target answered Unexpected OpCode: it has no RFC 7306 "


def _target(s: Session) -> tuple[Region, int]:
    """The advertised buffer and its first 64-bit aligned TO (skip if none)."""
    s.data_phase()
    region = s.region()
    to = (region.to + 7) & ~7
    if to + 8 > region.to + region.length:
        raise CaseSkipped("the advertised buffer holds no aligned 64-bit word")
    return region, to


def _send_atomic(s: Session, request: AtomicRequest, what: str) -> None:
    seg = craft.send(request.pack(), msn=s.next_msn(1), opcode=RdmapOpcode.ATOMIC_REQUEST)
    s.send_ulpdu(seg.octets, what)
    # Its answer (a response or a Terminate) comes before the fence's (RFC 7306 §7 orders
    # Atomic Responses with Read Responses): a target that drops it costs no whole timeout.
    s.send_fence()


def _unsupported(term: TerminateHeader, what: str) -> None:
    """Skip on the answer of a target without RFC 7306 (or without the right),
    saying what it answered (siw's swapped Layer and EType nibbles too)."""
    said = describe_terminate(term)
    for layer, etype in ((term.layer, term.etype), (term.etype, term.layer)):
        fields = (layer, etype, term.code)
        if fields == (RDMAP, OPER, RemoteOperationCode.UNEXPECTED_OPCODE):
            raise CaseSkipped(f"{NO_SUPPORT}{what} ({said})")
        if fields == (RDMAP, PROT, RemoteProtectionCode.ACCESS_RIGHTS):
            raise CaseSkipped(f"the advertised buffer does not allow Atomic Operations ({said})")


def _responses(s: Session, count: int) -> list[Received]:
    """The next ``count`` Atomic Responses (other FPDUs skipped)."""

    def judge(term: TerminateHeader) -> None:
        _unsupported(term, "Atomic Operations")

    return s.expect_answers(count, RdmapOpcode.ATOMIC_RESPONSE, "Atomic Responses", judge)


def _next_terminate(s: Session) -> TerminateHeader:
    """The target's Terminate (its other FPDUs, e.g. advertisements, skipped)."""
    deadline = s.deadline
    while True:
        got = s.next_fpdu(deadline)
        if got is None:
            raise CaseFailed(f"expected a Terminate; {s.link.ended or 'silence'}{s.fence_note()}")
        if got.is_terminate:
            return got.terminate()
        deadline = s.fenced(got, deadline)


def _answer(got: Received) -> AtomicResponse:
    info = got.info
    body = got.ulpdu[18:]
    if len(body) != ATOMIC_RESPONSE_SIZE:
        raise CaseFailed(f"Atomic Response of {len(body)} octets, not {ATOMIC_RESPONSE_SIZE}")
    if info.get("qn") != 3 or not info.get("last") or info.get("mo") != 0:
        raise CaseFailed(f"Atomic Response as {got.describe()}, not one segment on queue 3")
    return AtomicResponse.unpack_from(body)


@case(
    "rfc7306/5.2.2/1",
    "an Atomic Request is answered by an Atomic Response on queue 3 echoing its identifier",
    'RFC 7306 §5.2.1: "If the Responder receives a valid Atomic Operation Request Message, it '
    'MUST respond with a valid Atomic Operation Response Message"; §5.2.2: it "MUST reference '
    'the Queue Number 3" and "The Original Request Identifier is set to the value specified in '
    'the Request Identifier field"',
    needs=(Need.REGION,),
    covers=("atomic-response",),
)
def atomic_response(s: Session) -> None:
    region, to = _target(s)
    _send_atomic(
        s,
        AtomicRequest.fetch_add(s.values.request_id, region.stag, to, 0),
        f"FetchAdd of 0 at STag {region.stag:#x} TO {to:#x}",
    )
    (got,) = _responses(s, 1)
    answer = _answer(got)
    if got.info.get("msn") != 1:
        raise CaseFailed(f"the first Atomic Response has MSN {got.info.get('msn')}, not 1")
    if answer.request_id != s.values.request_id:
        raise CaseFailed(
            f"Original Request Identifier {answer.request_id:#x}, "
            f"the Request had {s.values.request_id:#x}"
        )
    s.note(f"the word at TO {to:#x} holds {answer.original:#x}")


@case(
    "rfc7306/5.2.2/2",
    "Atomic Requests are executed and answered in order, each seeing the one before",
    'RFC 7306 §5.2.1: "The Responder MUST process the Atomic Operation Request Messages in the '
    'order they were sent"; §5.2.2: "MUST pass Atomic Operation Response Messages to the DDP '
    'layer, in the order that the Atomic Operation Request Messages were received"',
    needs=(Need.REGION,),
    covers=("atomic-response", "atomic-fetch-add"),
)
def atomic_order(s: Session) -> None:
    region, to = _target(s)
    adds = [1, 2, 4, NO_MASK - 6]  # the last one takes the 7 away again
    for i, add in enumerate(adds):
        request = AtomicRequest.fetch_add(s.values.request_id + i, region.stag, to, add)
        _send_atomic(s, request, f"FetchAdd {i + 1} of {add:#x}")
    answers = [_answer(got) for got in _responses(s, len(adds))]
    ids = [a.request_id for a in answers]
    if ids != [s.values.request_id + i for i in range(len(adds))]:
        raise CaseFailed(f"Atomic Responses to requests {[hex(i) for i in ids]}, out of order")
    first = answers[0].original
    expected = [first, (first + 1) & NO_MASK, (first + 3) & NO_MASK, (first + 7) & NO_MASK]
    got = [a.original for a in answers]
    if got != expected:
        raise CaseFailed(
            f"original values {[hex(v) for v in got]}, in order they must be "
            f"{[hex(v) for v in expected]}"
        )


@case(
    "rfc7306/8.2/1",
    "an Atomic Request at a TO that is not 64-bit aligned brings TERM catastrophic error",
    'RFC 7306 §8.2: "the RDMAP layer MUST generate a Terminate Message indicating RDMA Layer '
    "Remote Operation Error with Error Code Name 'Catastrophic error, localized to RDMAP "
    'Stream\'"; §5.1.1: "the Responder\'s memory MUST NOT be modified"',
    needs=(Need.REGION,),
    covers=("terminate", "atomic-alignment"),
)
def misaligned(s: Session) -> None:
    region, to = _target(s)
    if to + 12 > region.to + region.length:
        raise CaseSkipped("the advertised buffer is too short for a misaligned word")
    _send_atomic(
        s,
        AtomicRequest.fetch_add(s.values.request_id, region.stag, to + 4, 1),
        f"FetchAdd at TO {to + 4:#x} (4 past an aligned TO)",
    )
    term = _next_terminate(s)
    _unsupported(term, "Atomic Operations")
    if (term.layer, term.etype, term.code) != (
        RDMAP,
        OPER,
        RemoteOperationCode.CATASTROPHIC_STREAM,
    ):
        raise CaseFailed(
            f"expected RDMAP remote operation, catastrophic error localized to the stream; got "
            f"{describe_terminate(term)}"
        )


@case(
    "rfc7306/5.2.1/1",
    "an Atomic Request with a reserved operation code brings a Terminate",
    "RFC 7306 §5.2.1: \"an error MUST be surfaced in response to delivery to the Remote Peer's "
    "RDMAP layer of an Atomic Operation Request Message with an Atomic Operation Code that the "
    'RNIC does not support"',
    needs=(Need.REGION,),
    covers=("terminate", "atomic-opcode"),
)
def reserved_aopcode(s: Session) -> None:
    region, to = _target(s)
    # First learn that the target has Atomic Operations at all.
    _send_atomic(
        s, AtomicRequest.fetch_add(s.values.request_id, region.stag, to, 0), "FetchAdd of 0"
    )
    _responses(s, 1)
    bad = AtomicRequest(0x1, s.values.request_id + 1, region.stag, to, 0, NO_MASK)
    _send_atomic(s, bad, "Atomic Request with AOpCode 0001b (reserved)")
    got = s.expect_terminate(RDMAP, OPER, None)
    assert got is not None
    s.note(f"answered {describe_terminate(got.terminate())}")


@case(
    "rfc7306/5.2.1/2",
    "an Atomic Request for an STag the target never advertised brings a Terminate",
    'RFC 7306 §5: "Atomic Operation Request Messages use the same remote addressing mechanism '
    'as RDMA Reads and Writes"; RFC 5040 §7.2: "The Data Source STag MUST be valid"',
    covers=("terminate", "atomic-stag"),
)
def unknown_target(s: Session) -> None:
    if s.target is TargetRole.INITIATOR:
        # The tool is the MPA Responder: it may send only after the target's
        # first FPDU (RFC 5044 §7.1.2 rule 4), its RTR or, without one, its
        # first message; a target that sends neither leaves no moment this
        # rule can be checked at.
        s.data_phase((Need.TALKS,))
        if s.rtr is None:
            s.need(Need.TALKS)
    else:
        s.data_phase()
    stag = unknown_stag(s)
    _send_atomic(
        s, AtomicRequest.fetch_add(s.values.request_id, stag, 0, 0), f"FetchAdd at STag {stag:#x}"
    )
    term = _next_terminate(s)
    _unsupported(term, "Atomic Operations")
    if (term.layer, term.etype) != (RDMAP, PROT):
        raise CaseFailed(
            f"expected an RDMAP remote protection error; got {describe_terminate(term)}"
        )


@case(
    "rfc7306/5/1",
    "an Atomic Request for a buffer advertised on another connection brings TERM invalid STag "
    "or STag not associated",
    'RFC 7306 §5: "Atomic Operation Request Messages use the same remote addressing mechanism '
    'as RDMA Reads and Writes"; RFC 5040 §8.1.1: "2. ... if an STag is limited in scope to a '
    'single Stream, no other Stream can use the STag"',
    roles=(TargetRole.RESPONDER,),
    needs=(Need.REGION,),
    # It also Writes at the buffer's first octet, first (a Write that must be placed).
    covers=("atomic-scope", "stag-scope", "write-placed"),
)
def foreign_target(s: Session) -> None:
    region, to = _target(s)
    # On its own connection the word takes a Write and a FetchAdd of 0: what the other
    # connections meet is about the STag's scope, not the buffer's rights.
    s.send_ulpdu(craft.write(region.stag, region.to, bytes(8)).octets, "RDMA Write (own STag)")
    s.expect_alive(0.3, "an RDMA Write to the advertised buffer", skip=NOT_WRITABLE)
    _send_atomic(
        s,
        AtomicRequest.fetch_add(s.values.request_id, region.stag, to, 0),
        "FetchAdd of 0 (own STag)",
    )
    _responses(s, 1)
    other = apart(s, region)
    # A third connection shows whether the STag is limited to its stream: a Write from there
    # must be refused; one that goes through means the target shares STags across streams
    # (RFC 5040 §8.1.1 item 2 lets it), and then an Atomic from elsewhere is allowed too.
    twin = s.another()
    twin.data_phase(())
    twin.send_ulpdu(
        craft.write(region.stag, region.to, bytes(8)).octets,
        "RDMA Write of 8 octets to the first connection's STag",
    )
    stag_codes = (DdpTaggedCode.INVALID_STAG, DdpTaggedCode.STAG_NOT_ASSOCIATED)
    judge_foreign(twin, [(TerminateLayer.DDP, DdpErrorType.TAGGED_BUFFER, stag_codes)], {})
    _send_atomic(
        other,
        AtomicRequest.fetch_add(s.values.request_id + 1, region.stag, to, 0),
        f"FetchAdd of 0 at the first connection's STag {region.stag:#x} TO {to:#x}",
    )
    codes = (RemoteProtectionCode.INVALID_STAG, RemoteProtectionCode.STAG_NOT_ASSOCIATED)
    try:
        other.expect_terminate(RDMAP, PROT, codes, within=1.0)
    except CaseFailed as exc:
        if any(g.info.get("opcode") == RdmapOpcode.ATOMIC_RESPONSE for g in other.received):
            raise CaseFailed(
                f"STag {region.stag:#x} is limited to its stream (another connection's RDMA "
                "Write to it was refused), yet another connection's Atomic Request on it was "
                "executed (an Atomic Response came back)"
            ) from None
        raise exc


@case(
    "rfc7306/6.3/1",
    "Immediate Data that is not exactly 8 octets brings a Terminate",
    'RFC 7306 §6.3: "The Remote Peer MUST check that Immediate Data and Immediate Data with SE '
    'Messages include exactly 8 bytes of data from the DDP layer"',
    needs=(Need.RECEIVE,),
    covers=("terminate", "immediate-size"),
)
def immediate_size(s: Session) -> None:
    s.data_phase()
    s.need(Need.RECEIVE)
    seg = craft.send(b"7octets", msn=s.next_msn(0), opcode=RdmapOpcode.IMMEDIATE_DATA)
    s.send_ulpdu(seg.octets, "Immediate Data of 7 octets")
    s.send_fence()
    term = _next_terminate(s)
    _unsupported(term, "Immediate Data (or calls 7 octets an unexpected opcode)")
    s.note(f"answered {describe_terminate(term)}")


#: The bits the CmpSwap case flips: the high half only (its low half is compared).
HIGH = 0xFFFFFFFF_00000000
LOW = 0x00000000_FFFFFFFF
FLIP = 0x5A5A5A5A_00000000


def _one(s: Session, request: AtomicRequest, what: str) -> int:
    """Send one Atomic Request, wait for its Response; the original value."""
    _send_atomic(s, request, what)
    (got,) = _responses(s, 1)
    answer = _answer(got)
    if answer.request_id != request.request_id:
        raise CaseFailed(
            f"Original Request Identifier {answer.request_id:#x} for {what}, "
            f"the Request had {request.request_id:#x}"
        )
    return answer.original


@case(
    "rfc7306/5.1.2/1",
    "CmpSwap returns the original word and swaps the masked bits only when the compared bits match",
    'RFC 7306 §5.1.2: "If the two masked compare values are not equal, the contents of the '
    "Responder's memory are not changed. In either case, the original value read from the ULP "
    'Buffer address is ... returned to the Requester"; §5.2.1: the Responder "MUST respond with '
    'a valid Atomic Operation Response Message"',
    needs=(Need.REGION,),
    covers=("atomic-response", "atomic-cmp-swap"),
)
def cmp_swap(s: Session) -> None:
    region, to = _target(s)
    stag = region.stag

    def read(n: int) -> int:
        return _one(
            s, AtomicRequest.fetch_add(s.values.request_id + n, stag, to, 0), "FetchAdd of 0"
        )

    word = read(0)
    s.note(f"the word at TO {to:#x} holds {word:#x}")
    steps = [
        # (request, what, original it must return, word after it)
        (
            AtomicRequest.cmp_swap(s.values.request_id + 1, stag, to, word ^ 1, word ^ FLIP),
            "CmpSwap whose Compare Data differs in bit 0 (no swap)",
            word,
            word,
        ),
        (
            AtomicRequest.cmp_swap(s.values.request_id + 3, stag, to, word, word ^ FLIP),
            "CmpSwap whose Compare Data matches (swap)",
            word,
            word ^ FLIP,
        ),
        (
            AtomicRequest.cmp_swap(
                s.values.request_id + 5,
                stag,
                to,
                ~(word ^ FLIP) & HIGH | word & LOW,
                word,
                compare_mask=LOW,
                swap_mask=HIGH,
            ),
            "masked CmpSwap: the low half compared (the high half differs), the high half "
            "swapped back",
            word ^ FLIP,
            word,
        ),
    ]
    for n, (request, what, original, after) in enumerate(steps):
        got = _one(s, request, what)
        if got != original:
            raise CaseFailed(f"{what} returned {got:#x}, the word was {original:#x}")
        now = read(2 * n + 2)
        if now != after:
            raise CaseFailed(f"after {what} the word is {now:#x}, not {after:#x}")


@case(
    "rfc7306/8.2/2",
    "a CmpSwap at a TO that is not 64-bit aligned brings TERM catastrophic error",
    'RFC 7306 §8.2: "the RDMAP layer MUST generate a Terminate Message indicating RDMA Layer '
    "Remote Operation Error with Error Code Name 'Catastrophic error, localized to RDMAP "
    "Stream'\"",
    needs=(Need.REGION,),
    covers=("terminate", "atomic-alignment"),
)
def misaligned_cmp_swap(s: Session) -> None:
    region, to = _target(s)
    if to + 12 > region.to + region.length:
        raise CaseSkipped("the advertised buffer is too short for a misaligned word")
    # Swap Mask 0: a target that executes it anyway changes nothing.
    request = AtomicRequest.cmp_swap(
        s.values.request_id, region.stag, to + 4, 0, 0, compare_mask=0, swap_mask=0
    )
    _send_atomic(s, request, f"CmpSwap at TO {to + 4:#x} (4 past an aligned TO), Swap Mask 0")
    term = _next_terminate(s)
    _unsupported(term, "Atomic Operations")
    if (term.layer, term.etype, term.code) != (
        RDMAP,
        OPER,
        RemoteOperationCode.CATASTROPHIC_STREAM,
    ):
        raise CaseFailed(
            f"expected RDMAP remote operation, catastrophic error localized to the stream; got "
            f"{describe_terminate(term)}"
        )
