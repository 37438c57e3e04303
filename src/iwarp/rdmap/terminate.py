"""Which Terminate reports which error, and what a received one means.

RFC 5040 §4.8 Figure 10 says which headers a Terminate copies back for each
layer and error type; :func:`terminate_header` builds it from the exception
that describes the error. :data:`TAGGED_FAULTS` and :data:`READ_FAULTS` map
a refused memory access to the DDP (RDMA Write, RFC 5041 §7.2) or RDMAP
(RDMA Read Request, RFC 5040 §7.2) error code. For received Terminates,
:func:`about_read` and :func:`remote_status` decide which work fails with
which completion status.
"""

from __future__ import annotations

from typing import Final

from iwarp.ddp.errors import DdpError, DdpErrorType, DdpTaggedCode, DdpUntaggedCode
from iwarp.ddp.wire import (
    TAGGED_FLAG,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    QueueNumber,
)
from iwarp.errors import MPA_ETYPE, MpaErrorCode, RemoteProtocolError, TerminateLayer
from iwarp.rdmap.errors import (
    RdmapError,
    RdmapErrorType,
    RemoteOperationCode,
    RemoteProtectionCode,
)
from iwarp.rdmap.memory import AccessFault
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import CompletionStatus

__all__ = [
    "READ_FAULTS",
    "TAGGED_FAULTS",
    "about_read",
    "remote_status",
    "terminate_header",
    "terminate_name",
]

TAGGED_FAULTS: Final = {
    AccessFault.INVALID_STAG: DdpTaggedCode.INVALID_STAG,
    AccessFault.STAG_NOT_ASSOCIATED: DdpTaggedCode.STAG_NOT_ASSOCIATED,
    # RFC 5041 has no "access rights" code; like siw, report the STag as
    # not valid for this access (docs/rdmap.md).
    AccessFault.ACCESS_RIGHTS: DdpTaggedCode.INVALID_STAG,
    AccessFault.BASE_OR_BOUNDS: DdpTaggedCode.BASE_OR_BOUNDS,
    AccessFault.TO_WRAP: DdpTaggedCode.TO_WRAP,
}
READ_FAULTS: Final = {
    AccessFault.INVALID_STAG: RemoteProtectionCode.INVALID_STAG,
    AccessFault.STAG_NOT_ASSOCIATED: RemoteProtectionCode.STAG_NOT_ASSOCIATED,
    AccessFault.ACCESS_RIGHTS: RemoteProtectionCode.ACCESS_RIGHTS,
    AccessFault.BASE_OR_BOUNDS: RemoteProtectionCode.BASE_OR_BOUNDS,
    AccessFault.TO_WRAP: RemoteProtectionCode.TO_WRAP,
}


# -- names: what a Terminate's layer, type and code mean -----------------------------

_RDMAP_SPEC: Final = "RFC 5040 §4.8"
_LAYER_NAMES: Final = {int(layer): layer.name for layer in TerminateLayer}
_DDP_SPEC: Final = "RFC 5041 §7.2"

#: (layer, error type) -> (name of the type, spec section, code names). A
#: type without code names (local catastrophic) carries no code.
_TYPES: Final[dict[tuple[int, int], tuple[str, str, dict[int, str]]]] = {
    (TerminateLayer.RDMAP, RdmapErrorType.LOCAL_CATASTROPHIC): (
        "RDMAP local catastrophic error",
        _RDMAP_SPEC,
        {},
    ),
    (TerminateLayer.RDMAP, RdmapErrorType.REMOTE_PROTECTION): (
        "RDMAP remote protection error",
        _RDMAP_SPEC,
        {
            RemoteProtectionCode.INVALID_STAG: "invalid STag",
            RemoteProtectionCode.BASE_OR_BOUNDS: "base or bounds violation",
            RemoteProtectionCode.ACCESS_RIGHTS: "access rights violation",
            RemoteProtectionCode.STAG_NOT_ASSOCIATED: "STag not associated with RDMAP Stream",
            RemoteProtectionCode.TO_WRAP: "TO wrap",
            RemoteProtectionCode.CANNOT_INVALIDATE: "STag cannot be invalidated",
            RemoteProtectionCode.UNSPECIFIED: "unspecified error",
        },
    ),
    (TerminateLayer.RDMAP, RdmapErrorType.REMOTE_OPERATION): (
        "RDMAP remote operation error",
        _RDMAP_SPEC,
        {
            RemoteOperationCode.INVALID_VERSION: "invalid RDMAP version",
            RemoteOperationCode.UNEXPECTED_OPCODE: "unexpected opcode",
            RemoteOperationCode.CATASTROPHIC_STREAM: "catastrophic error, localized to RDMAP "
            "Stream",
            RemoteOperationCode.CATASTROPHIC_GLOBAL: "catastrophic error, global",
            RemoteOperationCode.CANNOT_INVALIDATE: "STag cannot be invalidated",
            RemoteOperationCode.UNSPECIFIED: "unspecified error",
        },
    ),
    (TerminateLayer.DDP, DdpErrorType.LOCAL_CATASTROPHIC): (
        "DDP local catastrophic error",
        _DDP_SPEC,
        {},
    ),
    (TerminateLayer.DDP, DdpErrorType.TAGGED_BUFFER): (
        "DDP tagged buffer error",
        _DDP_SPEC,
        {
            DdpTaggedCode.INVALID_STAG: "invalid STag",
            DdpTaggedCode.BASE_OR_BOUNDS: "base or bounds violation",
            DdpTaggedCode.STAG_NOT_ASSOCIATED: "STag not associated with DDP Stream",
            DdpTaggedCode.TO_WRAP: "TO wrap",
            DdpTaggedCode.INVALID_VERSION: "invalid DDP version",
        },
    ),
    (TerminateLayer.DDP, DdpErrorType.UNTAGGED_BUFFER): (
        "DDP untagged buffer error",
        _DDP_SPEC,
        {
            DdpUntaggedCode.INVALID_QN: "invalid QN",
            DdpUntaggedCode.NO_BUFFER: "invalid MSN, no buffer available",
            DdpUntaggedCode.MSN_RANGE: "invalid MSN, MSN range is not valid",
            DdpUntaggedCode.INVALID_MO: "invalid MO",
            DdpUntaggedCode.MESSAGE_TOO_LONG: "DDP Message too long for available buffer",
            DdpUntaggedCode.INVALID_VERSION: "invalid DDP version",
        },
    ),
    (TerminateLayer.DDP, DdpErrorType.LLP_RESERVED): (
        "DDP error reserved for the LLP",
        _DDP_SPEC,
        {},
    ),
    (TerminateLayer.LLP, MPA_ETYPE): (
        "MPA error",
        "RFC 5044 §8, RFC 6581 §8",
        {
            MpaErrorCode.TCP_CLOSED: "TCP connection closed, terminated or lost",
            MpaErrorCode.CRC_MISMATCH: "received MPA CRC does not match the FPDU",
            MpaErrorCode.MARKER_MISMATCH: "MPA Marker and ULPDU Length disagree on the FPDU start",
            MpaErrorCode.INVALID_FRAME: "invalid MPA Request or Reply frame",
            MpaErrorCode.LOCAL_CATASTROPHIC: "local catastrophic error",
            MpaErrorCode.INSUFFICIENT_IRD: "insufficient IRD resources",
            MpaErrorCode.NO_MATCHING_RTR: "no matching RTR option",
        },
    ),
}
_MPA_SPECS: Final = {code: "RFC 5044 §8" for code in range(1, 5)} | {
    code: "RFC 6581 §8" for code in range(5, 8)
}


def terminate_name(layer: int, etype: int, code: int) -> str:
    """What a Terminate's layer, error type and code mean, with the spec
    section that defines them, e.g. ``DDP tagged buffer error: invalid STag
    (RFC 5041 §7.2)``. Values no spec defines are named as such, with their
    numbers. The one table of these names: errors, CLI records and the
    analyzer all use it.
    """
    known = _TYPES.get((layer, etype))
    if known is None:
        layer_name = _LAYER_NAMES.get(layer, "unknown")
        return f"{layer_name} layer, unknown error type {etype:#x}, code {code:#04x}"
    name, spec, codes = known
    if layer == TerminateLayer.LLP:
        spec = _MPA_SPECS.get(code, spec)
    if not codes:
        suffix = "" if code == 0 else f" (code {code:#04x})"
        return f"{name}{suffix} ({spec})"
    meaning = codes.get(code)
    if meaning is None:
        return f"{name}: unknown code {code:#04x} ({spec})"
    return f"{name}: {meaning} ({spec})"


def terminate_header(exc: RemoteProtocolError, view: memoryview) -> TerminateHeader:
    """The Terminate for ``exc`` with the copies RFC 5040 §4.8 Figure 10 asks for."""
    layer = int(exc.layer)
    if layer == TerminateLayer.LLP:
        return TerminateHeader(layer, exc.etype, exc.code)
    ddp_header: bytes | None = None
    length: int | None = None
    rdma_header: bytes | None = None
    if isinstance(exc, DdpError):
        ddp_header, length = exc.header, exc.segment_length
    elif isinstance(exc, RdmapError):
        if exc.etype == RdmapErrorType.LOCAL_CATASTROPHIC:
            return TerminateHeader(layer, exc.etype, exc.code)
        ddp_header, length = exc.ddp_header, exc.segment_length
        if exc.etype == RdmapErrorType.REMOTE_PROTECTION:
            rdma_header = exc.rdmap_header
    if ddp_header is None and len(view) >= 1:
        size = TAGGED_HEADER_SIZE if view[0] & TAGGED_FLAG else UNTAGGED_HEADER_SIZE
        if len(view) >= size:
            ddp_header = bytes(view[:size])
    if ddp_header is not None and length is None:
        length = len(view)
    return TerminateHeader(layer, exc.etype, exc.code, length, ddp_header, rdma_header)


def about_read(header: TerminateHeader) -> bool:
    """Whether a received Terminate reports one of our RDMA Read Requests
    (or RFC 7306 Atomic Requests, which share queue 1 with them)."""
    if header.rdma_header is not None:
        return True
    ddp = header.ddp_header
    if ddp is not None and len(ddp) == UNTAGGED_HEADER_SIZE:
        return bool(UNTAGGED_HEADER.unpack_from(ddp, 0)[3] == QueueNumber.READ_REQUEST)
    return header.layer == TerminateLayer.RDMAP and header.etype == RdmapErrorType.REMOTE_PROTECTION


def remote_status(header: TerminateHeader) -> CompletionStatus:
    """Status of the oldest outstanding work when the *peer* terminates."""
    if header.layer == TerminateLayer.RDMAP and header.etype == RdmapErrorType.REMOTE_PROTECTION:
        return CompletionStatus.REMOTE_ACCESS_ERROR
    if header.layer == TerminateLayer.DDP and header.etype == 1:
        return CompletionStatus.REMOTE_ACCESS_ERROR
    if header.layer == TerminateLayer.DDP and header.etype == 2:
        return CompletionStatus.REMOTE_INVALID_REQUEST
    return CompletionStatus.REMOTE_OPERATION_ERROR
