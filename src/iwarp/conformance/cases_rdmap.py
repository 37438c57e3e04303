"""RDMAP (RFC 5040): version and opcode checks, Read Requests, Send with Invalidate, Terminate.

Read Request errors are Remote Protection Errors (layer 0, type 1) and
their Terminate copies back the Read Request's RDMA header (§4.8 Figure 10);
version and opcode errors are Remote Operation Errors (layer 0, type 2).
Cases that read need a buffer the target advertised that allows remote Read;
when the target answers a Read of its buffer with an access-rights Terminate,
they are skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from iwarp.apps.rping import ADVERT
from iwarp.conformance import craft
from iwarp.conformance.errorcase import (
    Broken,
    apart,
    error_cases,
    foreign_region,
    judge_foreign,
    unknown_stag,
)
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import (
    NO_BUFFER,
    NOT_WRITABLE,
    Received,
    Region,
    Session,
    describe_terminate,
)
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.ddp.errors import DdpErrorType, DdpUntaggedCode
from iwarp.errors import TerminateLayer
from iwarp.rdmap.errors import RdmapErrorType, RemoteOperationCode, RemoteProtectionCode
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest, TerminateHeader

RDMAP = TerminateLayer.RDMAP
PROT = RdmapErrorType.REMOTE_PROTECTION
OPER = RdmapErrorType.REMOTE_OPERATION
READ_QUOTE = 'RFC 5040 §7.2: "4. For non-zero length RDMA Read Request Messages: '
#: The items of RFC 5040 §7.2 rule 4 the Read Request cases break, one each.
READ_ITEM = {
    "a": 'a. The Data Source STag MUST be valid"',
    "c": "c. The Data Source Tagged Offset MUST fall in the range of legal offsets associated "
    'with the Data Source STag"',
    "d": "d. The sum of the Data Source Tagged Offset and the RDMA Read Message Size MUST fall "
    'in the range of legal offsets associated with the Data Source STag"',
    "e": "e. The sum of the Data Source Tagged Offset and the RDMA Read Message Size MUST NOT "
    'cause the Data Source Tagged Offset to wrap"',
}
#: A buffer closed to remote Read answers a Read with "access rights": such an answer says
#: nothing of the rule the case checks, so the case is skipped, never passed.
NOT_READABLE: dict[tuple[int, int, int], str] = {}


def _region(s: Session) -> Region:
    return s.region()


def _read(s: Session, src_stag: int, src_to: int, size: int, what: str) -> Broken:
    # Where the Read Response is to go: the tool has no memory, the target only echoes these
    # (drawn per run: see ToolValues).
    request = ReadRequest(s.values.sink_stag, s.values.sink_to, size, src_stag, src_to)
    seg, rdma = craft.read_request(request, msn=s.next_msn(1))
    return Broken(seg, what, rdma_header=rdma)


def _payload() -> bytes:
    return ADVERT.pack(1, 0, 16)


# Each broken message below carries the MSN the target expects next on queue 0 (every DDP
# field valid): its RDMAP field is its only fault, whatever order the target checks in.


def _bad_version(rv: int) -> Callable[[Session], Broken]:
    return lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0), rdmap_version=rv), f"Send with RV={rv}"
    )


def _bad_opcode(op: int) -> Callable[[Session], Broken]:
    return lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0), qn=0, opcode=op),
        f"untagged opcode {op:#x} on QN 0",
    )


# --- version and opcode (Remote Operation Errors) -------------------------------------

for _n, _rv in ((1, 2), (2, 3)):
    error_cases(
        f"rfc5040/7.2/{_n}",
        f"rfc5040/4.8/{_n}",
        f"a Send with RDMAP version {_rv} brings TERM RDMAP/remote operation/invalid version",
        'RFC 5040 §7.2: "3. The RDMA Version MUST be valid"; §4.8 Figure 9 code 05X "Invalid '
        'RDMAP version"',
        covers=("rdmap-version",),
        skip=NO_BUFFER,
        layer=RDMAP,
        etype=OPER,
        codes=RemoteOperationCode.INVALID_VERSION,
        build=_bad_version(_rv),
    )
for _n, _op in ((3, 0xC), (4, 0xF)):
    error_cases(
        f"rfc5040/7.2/{_n}",
        f"rfc5040/4.8/{_n}",
        f"an untagged message with reserved opcode {_op:#x} brings TERM unexpected opcode",
        'RFC 5040 §7.2: "2. The RDMA OpCode MUST be valid"; §4.8 Figure 9 code 06X "Unexpected '
        'OpCode"',
        covers=("opcode",),
        skip=NO_BUFFER,
        layer=RDMAP,
        etype=OPER,
        codes=RemoteOperationCode.UNEXPECTED_OPCODE,
        build=_bad_opcode(_op),
    )
error_cases(
    "rfc5040/7.2/5",
    "rfc5040/4.8/5",
    "an RDMA Write opcode in an untagged segment brings TERM unexpected opcode",
    'RFC 5040 §4.1 Figure 4: RDMA Write is Tagged; §7.2: "2. The RDMA OpCode MUST be valid"',
    covers=("opcode",),
    skip=NO_BUFFER,
    layer=RDMAP,
    etype=OPER,
    codes=RemoteOperationCode.UNEXPECTED_OPCODE,
    build=lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0), qn=0, opcode=RdmapOpcode.RDMA_WRITE),
        "untagged RDMA Write on QN 0",
    ),
)


def _tagged_send(s: Session) -> Broken:
    """A Send opcode in a tagged segment, into the advertised buffer when there is one.

    With a buffer, the opcode is the only fault. Without one, the STag is unknown
    too: the DDP check (§7.2 rule 1) may answer first, so its invalid-STag
    Terminate is accepted as well (see ``also`` below).
    """
    region = s.cooperation.region
    if region is not None and region.writable:
        seg = craft.write(region.stag, region.to, bytes(8), opcode=RdmapOpcode.SEND)
        return Broken(seg, "tagged Send into the advertised buffer")
    seg = craft.write(unknown_stag(s), 0, b"conformance!", opcode=RdmapOpcode.SEND)
    return Broken(seg, "tagged Send to an unknown STag (no buffer advertised)")


error_cases(
    "rfc5040/7.2/6",
    "rfc5040/4.8/6",
    "a Send opcode in a tagged segment brings TERM unexpected opcode (or a tagged buffer error)",
    'RFC 5040 §4.1 Figure 4: Send is Untagged; §7.2: "2. The RDMA OpCode MUST be valid"',
    covers=("tagged-opcode",),
    layer=RDMAP,
    etype=OPER,
    codes=RemoteOperationCode.UNEXPECTED_OPCODE,
    build=_tagged_send,
    also=((TerminateLayer.DDP, DdpErrorType.TAGGED_BUFFER, 0),),
    wait=(Need.REGION,),
)
error_cases(
    "rfc5040/7.2/7",
    "rfc5040/4.8/7",
    "a Read Response nobody asked for brings TERM unexpected opcode",
    "RFC 5040 §5.2.2 an RDMA Read Response answers an RDMA Read Request; §4.8 Figure 9 "
    'code 06X "Unexpected OpCode"',
    covers=("read-response",),
    layer=RDMAP,
    etype=OPER,
    codes=RemoteOperationCode.UNEXPECTED_OPCODE,
    build=lambda s: Broken(
        craft.read_response(_region(s).stag, _region(s).to, bytes(8)),
        "unsolicited RDMA Read Response into the advertised buffer",
    ),
    needs=(Need.REGION,),
)

# --- RDMA Read Request (Remote Protection Errors) ------------------------------------------

NOT_READABLE[(RDMAP, PROT, RemoteProtectionCode.ACCESS_RIGHTS)] = (
    "the advertised buffer is not open to remote Read (an access-rights Terminate); a "
    "readable buffer (iwarp listen --op read, rping -c) enables the case"
)
#: RFC 5040 Figure 9 lists "STag cannot be Invalidated" (09X) under both error types.
INVALIDATE_ALSO = ((RDMAP, OPER, RemoteOperationCode.CANNOT_INVALIDATE),)

error_cases(
    "rfc5040/7.2/10",
    "rfc5040/4.8/10",
    "a Read Request of an unknown STag brings TERM RDMAP/remote protection/invalid STag",
    READ_QUOTE + READ_ITEM["a"],
    covers=("read-stag",),
    layer=RDMAP,
    etype=PROT,
    codes=RemoteProtectionCode.INVALID_STAG,
    build=lambda s: _read(s, unknown_stag(s), 0, 8, "Read Request of 8 octets, unknown STag"),
)


def _read_bounds(number: int, title: str, where: str, item: str) -> None:
    def build(s: Session) -> Broken:
        region = _region(s)
        if where == "after":
            to, size = region.to + region.length, 8
        elif where == "straddle":
            to, size = region.to + region.length - 4, 8
        else:  # longer than the buffer
            to, size = region.to, region.length + 1
        return _read(s, region.stag, to, size, f"Read Request of {size} octets at TO {to:#x}")

    error_cases(
        f"rfc5040/7.2/{number}",
        f"rfc5040/4.8/{number}",
        title,
        READ_QUOTE + READ_ITEM[item],
        covers=("read-bounds",),
        layer=RDMAP,
        etype=PROT,
        codes=RemoteProtectionCode.BASE_OR_BOUNDS,
        build=build,
        needs=(Need.REGION,),
        skip=NOT_READABLE,
    )


_read_bounds(
    11, "a Read Request past the advertised buffer brings TERM base or bounds", "after", "c"
)
_read_bounds(
    12, "a Read Request across the buffer's end brings TERM base or bounds", "straddle", "d"
)
_read_bounds(13, "a Read Request longer than the buffer brings TERM base or bounds", "long", "d")
error_cases(
    "rfc5040/7.2/14",
    "rfc5040/4.8/14",
    "a Read Request whose TO wraps brings TERM TO wrap (or bounds)",
    READ_QUOTE + READ_ITEM["e"],
    covers=("read-bounds",),
    layer=RDMAP,
    etype=PROT,
    codes=(RemoteProtectionCode.TO_WRAP, RemoteProtectionCode.BASE_OR_BOUNDS),
    skip=NOT_READABLE,
    build=lambda s: _read(
        s, _region(s).stag, 0xFFFF_FFFF_FFFF_FFFC, 8, "Read Request of 8 octets at TO 2^64-4"
    ),
    needs=(Need.REGION,),
)
error_cases(
    "rfc5040/7.2/15",
    "rfc5040/4.8/15",
    "a Send with Invalidate of an unknown STag brings TERM RDMAP/remote protection or operation",
    'RFC 5040 §7.2: "on incoming Send with Invalidate ... 4. The Invalidate STag MUST be valid"; '
    '§4.8 Figure 9: 09X "STag cannot be Invalidated" under Remote Protection and Remote Operation',
    covers=("invalidate",),
    skip=NO_BUFFER,
    layer=RDMAP,
    etype=PROT,
    codes=(RemoteProtectionCode.INVALID_STAG, RemoteProtectionCode.CANNOT_INVALIDATE),
    also=INVALIDATE_ALSO,
    build=lambda s: Broken(
        craft.send(
            _payload(),
            msn=s.next_msn(0),
            opcode=RdmapOpcode.SEND_WITH_INVALIDATE,
            invalidate=unknown_stag(s),
        ),
        "Send with Invalidate of an unknown STag",
    ),
    needs=(Need.RECEIVE,),
)
error_cases(
    "rfc5040/7.2/16",
    "rfc5040/4.8/16",
    "a Send with SE and Invalidate of an unknown STag brings TERM RDMAP/remote protection "
    "or operation",
    'RFC 5040 §7.2: "on incoming ... Send with Solicited Event and Invalidate Messages ... 4. The '
    'Invalidate STag MUST be valid"; §4.8 Figure 9: 09X "STag cannot be Invalidated" under '
    "Remote Protection and Remote Operation",
    covers=("invalidate",),
    skip=NO_BUFFER,
    layer=RDMAP,
    etype=PROT,
    codes=(RemoteProtectionCode.INVALID_STAG, RemoteProtectionCode.CANNOT_INVALIDATE),
    also=INVALIDATE_ALSO,
    build=lambda s: Broken(
        craft.send(
            _payload(),
            msn=s.next_msn(0),
            opcode=RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE,
            invalidate=unknown_stag(s),
        ),
        "Send with SE and Invalidate of an unknown STag",
    ),
    needs=(Need.RECEIVE,),
)


@case(
    "rfc5040/7.2/17",
    "a Read Request of a buffer advertised on another connection brings TERM invalid STag or "
    "STag not associated",
    READ_QUOTE + 'b. The Data Source STag MUST be associated to this RDMAP Stream"; §4.8 '
    'Figure 9 code 03X "STag not associated with RDMAP Stream"',
    roles=(TargetRole.RESPONDER,),
    needs=(Need.REGION,),
    covers=("stag-scope",),
)
def read_foreign_stag(s: Session) -> None:
    other, region = foreign_region(s)
    size = min(region.length, 8)
    broken = _read(
        other, region.stag, region.to, size, "Read Request of the first connection's STag"
    )
    other.send_ulpdu(broken.segment.octets, broken.what)
    codes = (RemoteProtectionCode.INVALID_STAG, RemoteProtectionCode.STAG_NOT_ASSOCIATED)
    judge_foreign(other, [(RDMAP, PROT, codes)], NOT_READABLE)


@case(
    "rfc5040/7.2/18",
    "a Send with Invalidate of a buffer advertised on another connection brings a Terminate "
    "and leaves that buffer usable",
    'RFC 5040 §7.2: "4. The Invalidate STag MUST be valid"; §8.1.1: "2. ... if an STag is '
    'limited in scope to a single Stream, no other Stream can use the STag", "7. ... a Remote '
    "Peer is not able to invalidate an STag enabled for remote access, if the STag is shared "
    'on multiple streams"',
    roles=(TargetRole.RESPONDER,),
    needs=(Need.REGION, Need.RECEIVE),
    # Its Writes at the buffer's first octet must be placed, before and after.
    covers=("invalidate-scope", "write-placed"),
)
def invalidate_foreign(s: Session) -> None:
    s.data_phase((Need.REGION,))
    region = s.region()
    # The first connection's buffer takes a Write before: what follows judges the Invalidate.
    _write_proves(s, region, "before the other connection's Send with Invalidate")
    other = apart(s, region)
    other.need(Need.RECEIVE)
    seg = craft.send(
        _payload(),
        msn=other.next_msn(0),
        opcode=RdmapOpcode.SEND_WITH_INVALIDATE,
        invalidate=region.stag,
    )
    other.send_ulpdu(seg.octets, "Send with Invalidate of the first connection's STag")
    codes = (
        RemoteProtectionCode.INVALID_STAG,
        RemoteProtectionCode.STAG_NOT_ASSOCIATED,
        RemoteProtectionCode.CANNOT_INVALIDATE,
    )
    try:
        other.expect_terminate(RDMAP, PROT, codes, also=INVALIDATE_ALSO, skip=NO_BUFFER, within=1.0)
    finally:
        # Whatever the second connection answered, the first one's buffer must still work.
        # (It took one before, so an invalid-STag answer now is the Invalidate's doing.)
        _write_proves(
            s, region, "after the other connection's Send with Invalidate of its STag", skip=False
        )


def _write_proves(s: Session, region: Region, when: str, *, skip: bool = True) -> None:
    """An RDMA Write of 8 octets to ``region`` must be taken (no Terminate, no close);
    ``skip``: an invalid-STag answer means the buffer is not writable, and skips the case."""
    s.send_ulpdu(
        craft.write(region.stag, region.to, bytes(8)).octets,
        f"RDMA Write of 8 octets to STag {region.stag:#x} ({when})",
    )
    s.expect_alive(
        0.3, f"an RDMA Write to the advertised buffer {when}", skip=NOT_WRITABLE if skip else None
    )


@case(
    "rfc5040/1.2/1",
    "a Send with Invalidate of the advertised STag is taken, and the STag then gives no "
    "remote access",
    'RFC 5040 §1.2 Send with Invalidate: "After the message has been Placed and Delivered at '
    "the Data Sink, the Remote Peer's buffer identified by the STag can no longer be accessed "
    'remotely"; RFC 5041 §7.1: "1. The STag is valid for this stream"',
    needs=(Need.REGION, Need.RECEIVE),
    covers=("terminate", "invalidate-valid", "stag"),
)
def invalidate_valid(s: Session) -> None:
    s.data_phase()
    s.need(Need.RECEIVE)
    region = s.region()
    seg = craft.send(
        _payload(),
        msn=s.next_msn(0),
        opcode=RdmapOpcode.SEND_WITH_INVALIDATE,
        invalidate=region.stag,
    )
    write = craft.write(region.stag, region.to, bytes(8))
    # One write of both FPDUs: the target's stack takes them together, before its
    # application can react to the invalidation (and, say, close the connection).
    s.send_raw(
        s.frame_ulpdu(seg.octets) + s.frame_ulpdu(write.octets),
        f"Send with Invalidate of the advertised STag {region.stag:#x}, then an RDMA Write "
        "of 8 octets to it",
    )
    s.send_fence()
    cannot = (
        "the advertised STag cannot be invalidated remotely (RFC 5040 Figure 9 09X); a target "
        "whose advertised STag can be (iwarp listen) enables the case"
    )
    skip = {
        **NO_BUFFER,
        (RDMAP, PROT, RemoteProtectionCode.CANNOT_INVALIDATE): cannot,
        (RDMAP, OPER, RemoteOperationCode.CANNOT_INVALIDATE): cannot,
    }
    s.expect_terminate(TerminateLayer.DDP, DdpErrorType.TAGGED_BUFFER, 0, skip=skip)


# --- Reads that must work ---------------------------------------------------------------------


def _readable(s: Session) -> Region:
    s.data_phase()
    return _region(s)


def _responses(s: Session, count: int, *, wrote: bool = False) -> list[Received]:
    """The next ``count`` Read Responses (other FPDUs skipped); skip on an access-rights TERM."""

    def judge(term: TerminateHeader) -> None:
        if (term.layer, term.etype, term.code) == (RDMAP, PROT, RemoteProtectionCode.ACCESS_RIGHTS):
            raise CaseSkipped(NOT_READABLE[(RDMAP, PROT, RemoteProtectionCode.ACCESS_RIGHTS)])
        if wrote and (term.layer, term.etype, term.code) == (TerminateLayer.DDP, 1, 0):
            # RFC 5041 has no access-rights code: a Write without the right is "invalid STag".
            raise CaseSkipped(
                "the advertised buffer is not open to remote Write (an invalid-STag "
                "Terminate); a buffer open to Write and Read (rping -c) enables the case"
            )

    return s.expect_answers(count, RdmapOpcode.RDMA_READ_RESPONSE, "Read Responses", judge)


@case(
    "rfc5040/5.2.1/1",
    "a zero-length Read Request is answered by a zero-length Read Response, whatever its STag",
    'RFC 5040 §5.2.1: for a zero-length Read the Data Source "MUST NOT '
    'validate the Data Source STag and Data Source Tagged Offset" and "MUST respond with a '
    'zero-length RDMA Read Response Message"',
    covers=("zero-read", "zero-read-stag"),
)
def zero_read(s: Session) -> None:
    s.data_phase()
    broken = _read(s, unknown_stag(s), 0, 0, "zero-length Read Request, unknown STag")
    s.send_ulpdu(broken.segment.octets, broken.what)
    (got,) = _responses(s, 1)
    if got.info.get("payload_length") != 0 or got.info.get("stag") != s.values.sink_stag:
        raise CaseFailed(
            f"expected a zero-length Read Response to STag {s.values.sink_stag:#x}: "
            f"{got.describe()}"
        )


@case(
    "rfc5040/5.2.2/1",
    "a Read Response goes to the Read Request's sink STag and TO, with the size asked",
    'RFC 5040 §5.2.2: the Read Response carries "the Data Sink STag and Data Sink '
    'Tagged Offset" of the Read Request',
    needs=(Need.REGION,),
    covers=("rights-by-terminate", "read-sink", "read-source-to"),
)
def read_response(s: Session) -> None:
    region = _readable(s)
    size = min(region.length, 32)
    sink_stag, sink_to = _sink_apart(s, region)
    request = ReadRequest(sink_stag, sink_to, size, region.stag, region.to)
    seg, _ = craft.read_request(request, msn=s.next_msn(1))
    s.send_ulpdu(
        seg.octets,
        f"Read Request of {size} octets from TO {region.to:#x} to sink STag {sink_stag:#x} "
        f"TO {sink_to:#x}",
    )
    got = _whole_response(s, size)
    first = got[0].info
    if first.get("stag") != sink_stag or first.get("to") != sink_to:
        source = " (the Data Source TO)" if first.get("to") == region.to else ""
        raise CaseFailed(
            f"the Read Response went to STag {_hex(first.get('stag'))} TO "
            f"{_hex(first.get('to'))}{source}; the Read Request's Data Sink is STag "
            f"{sink_stag:#x} TO {sink_to:#x}"
        )


def _hex(value: object) -> str:
    return f"{value:#x}" if isinstance(value, int) else str(value)


def _sink_apart(s: Session, region: Region) -> tuple[int, int]:
    """The run's sink STag and TO, never equal to the buffer's own (a Read Response that
    carries the Data Source's STag or TO must not pass by coincidence)."""
    stag, to = s.values.sink_stag, s.values.sink_to
    if stag == region.stag:
        stag ^= 0x8000_0000
    if region.to <= to < region.to + region.length:
        to = region.to + region.length + 0x1000
    return stag, to


def _whole_response(s: Session, size: int) -> list[Received]:
    """The segments of the Read Response to a Read of ``size`` octets, up to the one that
    completes it; CaseFailed, saying what was short, if the answer ends early or runs over."""
    got: list[Received] = []
    octets = 0
    while octets < size:
        try:
            (segment,) = _responses(s, 1)
        except CaseFailed as exc:
            raise CaseFailed(
                f"a Read of {size} octets was answered with {octets} in {len(got)} Read "
                f"Response segments, then: {exc}"
            ) from None
        got.append(segment)
        octets += int(str(segment.info.get("payload_length", 0)))
    if octets != size:
        raise CaseFailed(
            f"a Read of {size} octets was answered with {octets} ({octets - size} too many) "
            f"in {len(got)} Read Response segments"
        )
    return got


@case(
    "rfc5040/5.2.2/2",
    "the last segment of a Read Response, and only it, sets the Last flag",
    "RFC 5040 §5.2.2: a Read Response is one tagged DDP Message; "
    'RFC 5041 §4.1 L: "It MUST be set to one on the last DDP Segment of every DDP Message. '
    'It MUST NOT be set to one on any other DDP Segment"',
    needs=(Need.REGION,),
    covers=("rights-by-terminate", "read-last"),
)
def read_response_last(s: Session) -> None:
    region = _readable(s)
    size = min(region.length, 4096)
    s.send_ulpdu(
        _read(s, region.stag, region.to, size, "").segment.octets,
        f"Read Request of {size} octets",
    )
    got = _whole_response(s, size)
    flags = ["L=1" if g.info.get("last") else "L=0" for g in got]
    if flags[-1] != "L=1" or "L=1" in flags[:-1]:
        raise CaseFailed(
            f"the Read Response of {size} octets came in {len(got)} segments with "
            f"{', '.join(flags)}: the Last flag must be set on the last one only"
        )


@case(
    "rfc5040/5.5/1",
    "Read Requests are answered in order",
    'RFC 5040 §5.2.1: "The Remote Peer MUST process the RDMA Read Request Messages in the order '
    'they were sent"',
    needs=(Need.REGION,),
    covers=("rights-by-terminate", "read-sink", "read-source-to", "read-order"),
)
def read_order(s: Session) -> None:
    region = _readable(s)
    size = min(region.length, 8)
    sinks = []
    fpdus = []
    for i in range(3):
        sink_to = s.values.sink_to + 0x1000 * i
        request = ReadRequest(s.values.sink_stag, sink_to, size, region.stag, region.to)
        seg, _ = craft.read_request(request, msn=s.next_msn(1))
        fpdus.append(s.frame_ulpdu(seg.octets))
        sinks.append(sink_to)
    # In one send: the three are outstanding at once, so the order of the answers is the
    # target's choice, not the pace of the tool's writes.
    s.send_raw(b"".join(fpdus), "Read Requests 1-3 (sink TOs " + ", ".join(map(hex, sinks)) + ")")
    got = [int(str(g.info.get("to"))) for g in _responses(s, 3)]
    if got != sinks:
        raise CaseFailed(
            f"Read Responses to sink TOs {[hex(t) for t in got]}, asked in order "
            f"{[hex(t) for t in sinks]}"
        )


@case(
    "rfc5040/5.1/1",
    "data placed by an RDMA Write is read back unchanged",
    'RFC 5040 §5.1: "the RDMA Write ... places the data into the Tagged Buffer"; §5.2: the Read '
    "returns it",
    needs=(Need.REGION,),
    covers=("rights-by-terminate", "read-data", "write-placed"),
)
def write_read_back(s: Session) -> None:
    region = _readable(s)
    size = min(region.length, 16)
    data = bytes(range(0x41, 0x41 + size))
    s.send_ulpdu(craft.write(region.stag, region.to, data).octets, f"RDMA Write of {size} octets")
    broken = _read(s, region.stag, region.to, size, "Read Request of the same octets")
    s.send_ulpdu(broken.segment.octets, broken.what)
    (got,) = _responses(s, 1, wrote=True)
    back = got.ulpdu[14:]
    if back != data:
        raise CaseFailed(f"wrote {data.hex()}, read back {back.hex()}")


@case(
    "rfc5040/6.1/1",
    "Read Requests beyond the Responder's IRD bring a Terminate, never a silent stall",
    'RFC 5040 §6.1: "For inbound RDMA Read Requests, the RDMAP layer MUST NOT '
    'exceed the maximum number of outstanding, inbound RDMA Read Requests"; RFC 5041 §7.2 '
    '"Invalid MSN - no buffer available"',
    needs=(Need.REGION,),
    timeout=10.0,
    covers=("terminate", "ird"),
)
def ird_exceeded(s: Session) -> None:
    region = _readable(s)
    frame = s.peer_frame
    enh = frame.enhanced if frame is not None else None
    if enh is None or enh.ird in (0, 0x3FFF) or enh.ird > 256:
        raise CaseSkipped("the target stated no usable IRD")
    ird = enh.ird if s.target.value == "responder" else enh.ord
    burst = b"".join(
        s.frame_ulpdu(
            craft.read_request(
                ReadRequest(
                    s.values.sink_stag, s.values.sink_to, region.length, region.stag, region.to
                ),
                msn=s.next_msn(1),
            )[0].octets
        )
        for _ in range(ird + 1)
    )
    s.send_raw(burst, f"{ird + 1} Read Requests of {region.length} octets in one write")
    answered = 0
    while True:
        got = s.next_fpdu()
        if got is None:
            raise CaseFailed(f"{answered} Read Responses, then {s.link.ended or 'silence'}")
        if got.is_terminate:
            term = got.terminate()
            if (term.layer, term.etype, term.code) == (
                RDMAP,
                PROT,
                RemoteProtectionCode.ACCESS_RIGHTS,
            ):
                raise CaseSkipped(NOT_READABLE[(RDMAP, PROT, RemoteProtectionCode.ACCESS_RIGHTS)])
            ok = (term.layer, term.etype) == (
                TerminateLayer.DDP,
                DdpErrorType.UNTAGGED_BUFFER,
            ) and term.code in (DdpUntaggedCode.NO_BUFFER, DdpUntaggedCode.MSN_RANGE)
            ok = ok or (term.layer, term.etype) == (RDMAP, OPER)
            if not ok:
                raise CaseFailed(f"IRD exceeded answered by {describe_terminate(term)}")
            s.note(f"IRD {ird} exceeded: Terminate after {answered} responses")
            return
        if got.info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE and got.info.get("last"):
            answered += 1
            if answered == ird + 1:
                s.note(f"all {ird + 1} Reads answered: the target kept up (none outstanding)")
                return


# --- Terminate messages (§4.8, §5.4) -----------------------------------------------------------


def _provoke(s: Session) -> Received:
    s.data_phase()
    s.send_ulpdu(
        craft.write(unknown_stag(s), 0, b"conformance!").octets, "RDMA Write to an unknown STag"
    )
    s.send_fence()
    got = s.expect_terminate(TerminateLayer.DDP, DdpErrorType.TAGGED_BUFFER, 0)
    assert got is not None
    return got


@case(
    "rfc5040/5.4/1",
    "the target's Terminate is untagged, on queue 2, MSN 1, one segment",
    'RFC 5040 §5.4: "A Terminate Message MUST reference an Untagged Buffer ... MUST request that '
    'the DDP layer set the Queue Number field to two"',
    covers=("terminate", "stag", "terminate-queue"),
)
def terminate_queue(s: Session) -> None:
    info = _provoke(s).info
    if info.get("qn") != 2 or info.get("msn") != 1 or info.get("mo") != 0 or not info.get("last"):
        raise CaseFailed(
            f"Terminate on QN {info.get('qn')} MSN {info.get('msn')} MO "
            f"{info.get('mo')} L={int(bool(info.get('last')))}"
        )


@case(
    "rfc5040/5.4/2",
    "after its Terminate the target sends nothing more",
    'RFC 5040 §5.4: "After sending a Terminate Message on an RDMAP Stream, the Local Peer MUST '
    'NOT send any more Messages on that specific RDMAP Stream"',
    covers=("terminate", "stag"),
)
def nothing_after(s: Session) -> None:
    _provoke(s)
    s.send_ulpdu(craft.send(_payload(), msn=s.next_msn(0)).octets, "a Send after the error")
    deadline = s.within(1.0)
    if (got := s.next_fpdu(deadline)) is not None:
        raise CaseFailed(f"after its Terminate the target sent {got.describe()}")


@case(
    "rfc5040/4.8/20",
    "the Terminate's reserved bits are zero",
    'RFC 5040 §4.8: "Reserved: 13 bits. This field MUST be set to zero on transmit"',
    covers=("terminate", "stag"),
)
def terminate_reserved(s: Session) -> None:
    term = _provoke(s).terminate()
    if term.reserved:
        raise CaseFailed(f"reserved bits {term.reserved:#06x} ({describe_terminate(term)})")


@case(
    "rfc5040/4.8/21",
    "a DDP-layer Terminate sets HdrCt D and M and copies the DDP header",
    'RFC 5040 §4.8 Figure 10: DDP errors: "Terminate Includes DDP Header and DDP Segment Length" '
    "Yes",
    level=Level.SHOULD,
    covers=("terminate", "stag"),
)
def terminate_hdrct(s: Session) -> None:
    term = _provoke(s).terminate()
    if not term.hdrct & 0x4000 or not term.hdrct & 0x8000:
        raise CaseFailed(f"HdrCt {describe_terminate(term)}")


def _term_sent(number: int, header: TerminateHeader, name: str) -> None:
    @case(
        f"rfc5040/5.4/{number}",
        f"a Terminate ({name}) from the tool is not answered by a Terminate",
        'RFC 5040 §5.4: "After receiving a Terminate Message on an RDMAP Stream, '
        'the Remote Peer MAY stop sending Messages"; a valid Terminate is not an error',
        level=Level.SHOULD,
        needs=(Need.TALKS,),
    )
    def run(s: Session) -> None:
        s.data_phase()
        s.send_ulpdu(craft.terminate(header, msn=1).octets, f"Terminate {name}")
        deadline = s.within(s.answer_wait(2.0))
        while (got := s.next_fpdu(deadline)) is not None:
            if got.is_terminate:
                raise CaseFailed(f"the target answered with {got.describe()}")


_term_sent(3, TerminateHeader(RDMAP, 0, 0), "RDMAP local catastrophic")
_term_sent(
    4,
    TerminateHeader(TerminateLayer.DDP, 1, 0, 18, bytes(18)),
    "DDP tagged invalid STag, with a header copy",
)
