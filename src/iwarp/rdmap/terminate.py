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

from collections.abc import Mapping
from typing import Final

from iwarp.ddp.errors import DDP_ERROR_NAMES, DdpError, DdpTaggedCode
from iwarp.ddp.wire import (
    TAGGED_FLAG,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    QueueNumber,
)
from iwarp.errors import (
    MPA_ERROR_NAMES,
    ErrorTypeNames,
    RemoteProtocolError,
    TerminateLayer,
    error_name,
)
from iwarp.rdmap.errors import (
    RDMAP_ERROR_NAMES,
    RdmapError,
    RdmapErrorType,
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

#: Each layer's names by error type (the layers name their own codes).
_NAMES: Final[dict[int, Mapping[int, ErrorTypeNames]]] = {
    TerminateLayer.RDMAP: RDMAP_ERROR_NAMES,
    TerminateLayer.DDP: DDP_ERROR_NAMES,
    TerminateLayer.LLP: MPA_ERROR_NAMES,
}


def terminate_name(layer: int, etype: int, code: int) -> str:
    """What a Terminate's layer, error type and code mean, with the spec
    section that defines them, e.g. ``DDP tagged buffer error: invalid STag
    (RFC 5041 §7.2)``. Values no spec defines are named as such, with their
    numbers. Each layer names its own codes (:data:`~iwarp.errors.MPA_ERROR_NAMES`,
    :data:`~iwarp.ddp.errors.DDP_ERROR_NAMES`,
    :data:`~iwarp.rdmap.errors.RDMAP_ERROR_NAMES`); this puts them together for
    the CLI's records and the analyzer.
    """
    return error_name(_NAMES.get(layer, {}), layer, etype, code)


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
