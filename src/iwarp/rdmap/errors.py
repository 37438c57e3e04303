"""RDMAP error types and codes (RFC 5040 §4.8 Figure 9) and their exceptions.

Layer RDMAP (0) has three error types: local catastrophic (no code), remote
protection (STag checks of RDMA Read Requests and Send with Invalidate) and
remote operation (version, opcode, catastrophic). Which headers a Terminate
copies back depends on the type (RFC 5040 §4.8 Figure 10): remote
protection errors copy the DDP header and, for Read Requests, the RDMA
header; remote operation errors copy the DDP header.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Final

from iwarp.errors import ErrorTypeNames, RemoteProtocolError, TerminateLayer, error_name

__all__ = [
    "RDMAP_ERROR_NAMES",
    "LocalCatastrophicError",
    "RdmapError",
    "RdmapErrorType",
    "RemoteOperationCode",
    "RemoteOperationError",
    "RemoteProtectionCode",
    "RemoteProtectionError",
]


class RdmapErrorType(IntEnum):
    """RFC 5040 §4.8 Figure 9: error types of layer RDMAP."""

    LOCAL_CATASTROPHIC = 0x0
    REMOTE_PROTECTION = 0x1
    REMOTE_OPERATION = 0x2


class RemoteProtectionCode(IntEnum):
    """RFC 5040 §4.8 Figure 9: codes of the Remote Protection Error type."""

    INVALID_STAG = 0x00
    BASE_OR_BOUNDS = 0x01
    ACCESS_RIGHTS = 0x02
    STAG_NOT_ASSOCIATED = 0x03
    TO_WRAP = 0x04
    CANNOT_INVALIDATE = 0x09
    UNSPECIFIED = 0xFF


class RemoteOperationCode(IntEnum):
    """RFC 5040 §4.8 Figure 9: codes of the Remote Operation Error type."""

    INVALID_VERSION = 0x05
    UNEXPECTED_OPCODE = 0x06
    #: Catastrophic error, localized to RDMAP Stream.
    CATASTROPHIC_STREAM = 0x07
    #: Catastrophic error, global.
    CATASTROPHIC_GLOBAL = 0x08
    CANNOT_INVALIDATE = 0x09
    UNSPECIFIED = 0xFF


_SPEC: Final = "RFC 5040 §4.8"
#: What the RDMAP layer's error types and codes mean (RFC 5040 §4.8 Figure 9).
RDMAP_ERROR_NAMES: Final[Mapping[int, ErrorTypeNames]] = {
    RdmapErrorType.LOCAL_CATASTROPHIC: ErrorTypeNames("RDMAP local catastrophic error", _SPEC),
    RdmapErrorType.REMOTE_PROTECTION: ErrorTypeNames(
        "RDMAP remote protection error",
        _SPEC,
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
    RdmapErrorType.REMOTE_OPERATION: ErrorTypeNames(
        "RDMAP remote operation error",
        _SPEC,
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
}


class RdmapError(RemoteProtocolError):
    """An incoming RDMA message failed an RDMAP check (RFC 5040 §7.2).

    :param ddp_header: the DDP header of the offending segment, copied into
        the Terminate (D bit) when known.
    :param segment_length: that segment's length (M bit).
    :param rdmap_header: the 28-octet RDMA Read Request header (R bit).
    """

    layer = TerminateLayer.RDMAP
    etype = int(RdmapErrorType.LOCAL_CATASTROPHIC)

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        ddp_header: bytes | None = None,
        segment_length: int | None = None,
        rdmap_header: bytes | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.ddp_header = ddp_header
        self.segment_length = segment_length
        self.rdmap_header = rdmap_header

    def __str__(self) -> str:
        name = error_name(RDMAP_ERROR_NAMES, self.layer, self.etype, self.code)
        return f"{name}: {self.message}"


class LocalCatastrophicError(RdmapError):
    """Error type 0: the local RDMAP stream cannot go on (no code)."""

    etype = int(RdmapErrorType.LOCAL_CATASTROPHIC)


class RemoteProtectionError(RdmapError):
    """Error type 1: a remote access failed an STag check."""

    etype = int(RdmapErrorType.REMOTE_PROTECTION)

    def __init__(
        self,
        code: RemoteProtectionCode,
        message: str,
        *,
        ddp_header: bytes | None = None,
        segment_length: int | None = None,
        rdmap_header: bytes | None = None,
    ) -> None:
        super().__init__(
            message,
            code=int(code),
            ddp_header=ddp_header,
            segment_length=segment_length,
            rdmap_header=rdmap_header,
        )


class RemoteOperationError(RdmapError):
    """Error type 2: a malformed or unexpected RDMA message."""

    etype = int(RdmapErrorType.REMOTE_OPERATION)

    def __init__(
        self,
        code: RemoteOperationCode,
        message: str,
        *,
        ddp_header: bytes | None = None,
        segment_length: int | None = None,
    ) -> None:
        super().__init__(
            message, code=int(code), ddp_header=ddp_header, segment_length=segment_length
        )
