"""DDP (RFC 5041 §7): every tagged and untagged error, and what must not be an error.

Expected Terminates: layer 1 (DDP), type 1 (tagged buffer) or 2 (untagged
buffer), the codes of RFC 5041 §7.2. Tagged cases other than "invalid STag"
need a buffer the target advertised; untagged ones need only the connection.
"""

from __future__ import annotations

from collections.abc import Callable

from iwarp.apps.rping import ADVERT
from iwarp.conformance import craft
from iwarp.conformance.errorcase import (
    Broken,
    error_cases,
    foreign_region,
    judge_foreign,
    unknown_stag,
)
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import NO_BUFFER, NOT_WRITABLE, Region, Session
from iwarp.conformance.terms import CaseSkipped, Need, TargetRole
from iwarp.ddp.errors import DdpErrorType, DdpTaggedCode, DdpUntaggedCode
from iwarp.errors import TerminateLayer

DDP = TerminateLayer.DDP
T = DdpErrorType.TAGGED_BUFFER
U = DdpErrorType.UNTAGGED_BUFFER
UNTAGGED_QUOTE = (
    'RFC 5041 §7.1: "For non-zero-length Untagged DDP Segments, the DDP Segment MUST be '
    "validated before Placement by verifying: "
)
TAGGED_QUOTE = (
    'RFC 5041 §7.1: "For non-zero-length Tagged DDP Segments, the segment MUST be validated '
    "before Placement by verifying: "
)


def _region(s: Session) -> Region:
    return s.region()


def _payload() -> bytes:
    return ADVERT.pack(1, 0, 16)


def _untagged_version(dv: int) -> Callable[[Session], Broken]:
    # The MSN the target expects next on queue 0: the version is the only fault.
    return lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0), ddp_version=dv), f"Send with DV={dv}"
    )


def _tagged_version(dv: int) -> Callable[[Session], Broken]:
    def build(s: Session) -> Broken:
        region = _region(s)
        seg = craft.write(region.stag, region.to, bytes(8), ddp_version=dv)
        return Broken(seg, f"RDMA Write with DV={dv}")

    return build


# --- untagged (type 2) --------------------------------------------------------------

error_cases(
    "rfc5041/7.2/1",
    "rfc5041/7.1/1",
    "a Send on queue 4 brings TERM DDP/untagged/invalid QN",
    UNTAGGED_QUOTE + '1. The QN is valid for this stream"',
    covers=("qn",),
    layer=DDP,
    etype=U,
    codes=DdpUntaggedCode.INVALID_QN,
    # Queue 4, not 3: RFC 7306 §10.2 gives queue 3 to Atomic Responses, valid on a stream
    # that negotiated atomics.
    build=lambda s: Broken(craft.send(_payload(), msn=s.values.free_msn, qn=4), "Send on QN 4"),
)
error_cases(
    "rfc5041/7.2/2",
    "rfc5041/7.1/2",
    "a Send on queue 0xFFFFFFFF brings TERM invalid QN",
    UNTAGGED_QUOTE + '1. The QN is valid for this stream"',
    covers=("qn",),
    layer=DDP,
    etype=U,
    codes=DdpUntaggedCode.INVALID_QN,
    build=lambda s: Broken(
        craft.send(_payload(), msn=s.values.free_msn, qn=0xFFFFFFFF),
        "Send on QN 0xffffffff",
    ),
)
error_cases(
    "rfc5041/7.2/3",
    "rfc5041/7.1/3",
    "a Send far beyond the posted receives brings TERM MSN error",
    UNTAGGED_QUOTE + "5. The Message Sequence Number falls in the range of legal Message Sequence "
    'Numbers"',
    covers=("msn",),
    layer=DDP,
    etype=U,
    codes=(DdpUntaggedCode.NO_BUFFER, DdpUntaggedCode.MSN_RANGE),
    build=lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0) + s.values.msn_ahead),
        f"Send with MSN {s.values.msn_ahead} ahead",
    ),
)
error_cases(
    "rfc5041/7.2/4",
    "rfc5041/7.1/4",
    "a Send with MSN 0 (before the first) brings TERM MSN error",
    UNTAGGED_QUOTE + "5. The Message Sequence Number falls in the range of legal Message Sequence "
    'Numbers"',
    covers=("msn",),
    layer=DDP,
    etype=U,
    codes=(DdpUntaggedCode.NO_BUFFER, DdpUntaggedCode.MSN_RANGE),
    build=lambda s: Broken(craft.send(_payload(), msn=0), "Send with MSN 0"),
)
error_cases(
    "rfc5041/7.2/5",
    "rfc5041/7.1/5",
    "a Send with MO 1 MiB brings TERM invalid MO",
    UNTAGGED_QUOTE + "3. The MO falls in the range of legal offsets associated with the Untagged "
    'Buffer"',
    skip=NO_BUFFER,
    covers=("mo",),
    layer=DDP,
    etype=U,
    codes=(DdpUntaggedCode.INVALID_MO, DdpUntaggedCode.MESSAGE_TOO_LONG),
    build=lambda s: Broken(
        craft.send(_payload(), msn=s.next_msn(0), mo=1 << 20), "Send segment at MO 1048576"
    ),
    needs=(Need.RECEIVE,),
)
error_cases(
    "rfc5041/7.2/6",
    "rfc5041/7.1/6",
    "a Send longer than the receive buffer brings TERM too long",
    UNTAGGED_QUOTE + "4. The sum of the DDP Segment payload length and the MO falls in the range "
    'of legal offsets associated with the Untagged Buffer"',
    skip=NO_BUFFER,
    covers=("message-length",),
    layer=DDP,
    etype=U,
    codes=(DdpUntaggedCode.MESSAGE_TOO_LONG, DdpUntaggedCode.INVALID_MO),
    build=lambda s: Broken(craft.send(bytes(8000), msn=s.next_msn(0)), "Send of 8000 octets"),
    needs=(Need.RECEIVE,),
)
for _n, _dv in ((7, 0), (8, 2), (9, 3)):
    error_cases(
        f"rfc5041/7.2/{_n}",
        f"rfc5041/7.1/{_n}",
        f"an untagged segment with DV={_dv} brings TERM DDP/untagged/invalid version",
        'RFC 5041 §4.1 DV: "This field MUST be set to one ... The value of DV MUST be the same for '
        'all the DDP Segments transmitted or received on a DDP Stream"',
        covers=("ddp-version",),
        skip=NO_BUFFER,
        layer=DDP,
        etype=U,
        codes=DdpUntaggedCode.INVALID_VERSION,
        build=_untagged_version(_dv),
    )

# --- tagged (type 1) ---------------------------------------------------------------------

error_cases(
    "rfc5041/7.2/10",
    "rfc5041/7.1/10",
    "an RDMA Write to an unknown STag brings TERM invalid STag",
    TAGGED_QUOTE + '1. The STag is valid for this stream"',
    covers=("stag",),
    layer=DDP,
    etype=T,
    codes=DdpTaggedCode.INVALID_STAG,
    build=lambda s: Broken(
        craft.write(unknown_stag(s), 0, b"conformance!"),
        "RDMA Write of 12 octets to an unknown STag",
    ),
)
error_cases(
    "rfc5041/7.2/11",
    "rfc5041/7.1/11",
    "an RDMA Write to STag 0 brings TERM invalid STag",
    TAGGED_QUOTE + '1. The STag is valid for this stream"',
    covers=("stag",),
    layer=DDP,
    etype=T,
    codes=DdpTaggedCode.INVALID_STAG,
    build=lambda s: Broken(craft.write(0, 0, b"conformance!"), "RDMA Write to STag 0"),
)


def _bounds(number: int, title: str, where: str, *, covers: tuple[str, ...] = ()) -> None:
    def build(s: Session) -> Broken:
        region = _region(s)
        if where == "after":
            to = region.to + region.length
        elif where == "before":
            if region.to < 8:
                raise CaseSkipped("the advertised buffer starts at TO 0")
            to = region.to - 8
        elif where == "one past":  # the last octet is the first one out of bounds
            if region.length < 8:
                raise CaseSkipped("the advertised buffer is shorter than 8 octets")
            to = region.to + region.length - 7
        else:  # straddles the end
            to = region.to + region.length - 4
        return Broken(
            craft.write(region.stag, to, bytes(8)),
            f"RDMA Write of 8 octets at TO {to:#x} (buffer {region.to:#x}+{region.length})",
        )

    error_cases(
        f"rfc5041/7.2/{number}",
        f"rfc5041/7.1/{number}",
        title,
        TAGGED_QUOTE
        + (
            "4. The sum of the DDP Segment payload length and the TO falls in the range of legal "
            'offsets registered for the STag"'
            if where in ("straddle", "one past")
            else '3. The TO falls in the range of legal offsets registered for the STag"'
        ),
        covers=("write-bounds", *covers),
        layer=DDP,
        etype=T,
        codes=DdpTaggedCode.BASE_OR_BOUNDS,
        build=build,
        needs=(Need.REGION,),
        skip=NOT_WRITABLE,
    )


_bounds(12, "an RDMA Write just past the advertised buffer brings TERM base or bounds", "after")
_bounds(13, "an RDMA Write just before the advertised buffer brings TERM base or bounds", "before")
_bounds(14, "an RDMA Write across the buffer's end brings TERM base or bounds", "straddle")
_bounds(
    19,
    "an RDMA Write that ends one octet past the buffer's end brings TERM base or bounds",
    "one past",
    covers=("write-end",),
)

error_cases(
    "rfc5041/7.2/15",
    "rfc5041/7.1/15",
    "an RDMA Write whose TO wraps brings TERM TO wrap (or bounds)",
    TAGGED_QUOTE + "5. A 64-bit unsigned sum of the DDP Segment payload length and the TO does "
    'not wrap"',
    covers=("write-bounds",),
    layer=DDP,
    etype=T,
    codes=(DdpTaggedCode.TO_WRAP, DdpTaggedCode.BASE_OR_BOUNDS),
    build=lambda s: Broken(
        craft.write(_region(s).stag, 0xFFFF_FFFF_FFFF_FFFC, bytes(8)),
        "RDMA Write of 8 octets at TO 2^64-4",
    ),
    needs=(Need.REGION,),
    skip=NOT_WRITABLE,
)
for _n, _dv in ((16, 0), (17, 2)):
    error_cases(
        f"rfc5041/7.2/{_n}",
        f"rfc5041/7.1/{_n}",
        f"a tagged segment with DV={_dv} brings TERM DDP/tagged/invalid version",
        'RFC 5041 §4.1 DV: "This field MUST be set to one"; §7.2 tagged code 4 "Invalid DDP '
        'version"',
        covers=("ddp-version",),
        layer=DDP,
        etype=T,
        codes=DdpTaggedCode.INVALID_VERSION,
        build=_tagged_version(_dv),
        needs=(Need.REGION,),
        skip=NOT_WRITABLE,
    )


@case(
    "rfc5041/4.1/1",
    "reserved DDP control bits set are not checked",
    'RFC 5041 §4.1 Rsvd: "This field MUST be set to zero on transmit, and not checked on receive"',
    needs=(Need.REGION,),
    covers=("ddp-reserved", "write-placed"),
)
def ddp_reserved(s: Session) -> None:
    s.data_phase()
    region = _region(s)
    seg = craft.write(region.stag, region.to, bytes(8))
    data = bytes([seg.octets[0] | 0x3C]) + seg.octets[1:]
    s.send_ulpdu(data, "RDMA Write with DDP Rsvd bits 1111")
    s.expect_alive(0.3, "after a segment with reserved DDP bits set", skip=NOT_WRITABLE)


@case(
    "rfc5041/7.1/20",
    "a zero-length tagged segment to an unknown STag is not validated",
    'RFC 5041 §7.1: "For non-zero-length Tagged DDP Segments, the segment MUST be validated"',
    level=Level.SHOULD,
)
def zero_length_tagged(s: Session) -> None:
    s.data_phase()
    s.send_ulpdu(craft.write(unknown_stag(s), 0).octets, "zero-length RDMA Write, unknown STag")
    s.expect_alive(0.3, "after a zero-length tagged segment")


@case(
    "rfc5041/4.2/1",
    "an RDMA Write inside the advertised buffer is placed without error",
    'RFC 5041 §5.1.1: "the Data Sink ... places the payload at the TO of the Tagged Buffer"',
    needs=(Need.REGION,),
    covers=("write-placed",),
)
def write_ok(s: Session) -> None:
    s.data_phase()
    region = _region(s)
    size = min(region.length, 64)
    s.send_ulpdu(
        craft.write(region.stag, region.to, bytes(size)).octets,
        f"RDMA Write of {size} octets at the buffer's start",
    )
    s.expect_alive(0.3, "after a valid RDMA Write", skip=NOT_WRITABLE)


@case(
    "rfc5041/5.2/1",
    "an RDMA Write in two segments (L=0, then L=1) is placed without error",
    'RFC 5041 §5.2: "the DDP Message is segmented ... the Last flag set on the last segment"',
    needs=(Need.REGION,),
    covers=("write-segments", "write-placed"),
)
def write_two_segments(s: Session) -> None:
    s.data_phase()
    region = _region(s)
    if region.length < 16:
        raise CaseSkipped("the advertised buffer is shorter than 16 octets")
    first = craft.write(region.stag, region.to, bytes(8), last=False)
    second = craft.write(region.stag, region.to + 8, bytes(8))
    s.send_ulpdu(first.octets, "RDMA Write segment 1 (L=0)")
    s.send_ulpdu(second.octets, "RDMA Write segment 2 (L=1)")
    s.expect_alive(0.3, "after a two-segment RDMA Write", skip=NOT_WRITABLE)


@case(
    "rfc5041/7.2/18",
    "an RDMA Write to a buffer advertised on another connection brings TERM invalid STag or "
    "STag not associated",
    TAGGED_QUOTE + '1. The STag is valid for this stream"; §7.2 tagged code 0x02 "STag not '
    'associated with DDP Stream"',
    roles=(TargetRole.RESPONDER,),
    needs=(Need.REGION,),
    covers=("stag-scope",),
)
def write_foreign_stag(s: Session) -> None:
    other, region = foreign_region(s)
    seg = craft.write(region.stag, region.to, bytes(8))
    other.send_ulpdu(seg.octets, "RDMA Write of 8 octets to the first connection's STag")
    judge_foreign(
        other,
        [(DDP, T, (DdpTaggedCode.INVALID_STAG, DdpTaggedCode.STAG_NOT_ASSOCIATED))],
        {},
    )
