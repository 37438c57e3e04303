"""DDP error numbers (RFC 5041 §7.2) and the exceptions that carry them.

Each exception knows the Terminate fields that report it (RFC 5040 §4.8:
layer DDP, the error type and code below) and, when available, the DDP
header and segment length of the offending segment, which the Terminate
copies back to the peer (RFC 5040 §7.1 rule 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Final

from iwarp.errors import ErrorTypeNames, RemoteProtocolError, TerminateLayer, error_name

__all__ = [
    "DDP_ERROR_NAMES",
    "DdpCatastrophicError",
    "DdpError",
    "DdpErrorType",
    "DdpTaggedCode",
    "DdpTaggedError",
    "DdpUntaggedCode",
    "DdpUntaggedError",
]


class DdpErrorType(IntEnum):
    """RFC 5041 §7.2: the 4-bit error type."""

    LOCAL_CATASTROPHIC = 0x0
    TAGGED_BUFFER = 0x1
    UNTAGGED_BUFFER = 0x2
    #: Reserved for the use by the LLP.
    LLP_RESERVED = 0x3


class DdpTaggedCode(IntEnum):
    """RFC 5041 §7.2: error codes of the Tagged Buffer Error type."""

    INVALID_STAG = 0x00
    BASE_OR_BOUNDS = 0x01
    STAG_NOT_ASSOCIATED = 0x02
    TO_WRAP = 0x03
    INVALID_VERSION = 0x04


class DdpUntaggedCode(IntEnum):
    """RFC 5041 §7.2: error codes of the Untagged Buffer Error type."""

    INVALID_QN = 0x01
    #: Invalid MSN - no buffer available.
    NO_BUFFER = 0x02
    #: Invalid MSN - MSN range is not valid.
    MSN_RANGE = 0x03
    INVALID_MO = 0x04
    #: DDP Message too long for available buffer.
    MESSAGE_TOO_LONG = 0x05
    INVALID_VERSION = 0x06


_SPEC: Final = "RFC 5041 §7.2"
#: What the DDP layer's error types and codes mean (RFC 5041 §7.2).
DDP_ERROR_NAMES: Final[Mapping[int, ErrorTypeNames]] = {
    DdpErrorType.LOCAL_CATASTROPHIC: ErrorTypeNames("DDP local catastrophic error", _SPEC),
    DdpErrorType.TAGGED_BUFFER: ErrorTypeNames(
        "DDP tagged buffer error",
        _SPEC,
        {
            DdpTaggedCode.INVALID_STAG: "invalid STag",
            DdpTaggedCode.BASE_OR_BOUNDS: "base or bounds violation",
            DdpTaggedCode.STAG_NOT_ASSOCIATED: "STag not associated with DDP Stream",
            DdpTaggedCode.TO_WRAP: "TO wrap",
            DdpTaggedCode.INVALID_VERSION: "invalid DDP version",
        },
    ),
    DdpErrorType.UNTAGGED_BUFFER: ErrorTypeNames(
        "DDP untagged buffer error",
        _SPEC,
        {
            DdpUntaggedCode.INVALID_QN: "invalid QN",
            DdpUntaggedCode.NO_BUFFER: "invalid MSN, no buffer available",
            DdpUntaggedCode.MSN_RANGE: "invalid MSN, MSN range is not valid",
            DdpUntaggedCode.INVALID_MO: "invalid MO",
            DdpUntaggedCode.MESSAGE_TOO_LONG: "DDP Message too long for available buffer",
            DdpUntaggedCode.INVALID_VERSION: "invalid DDP version",
        },
    ),
    DdpErrorType.LLP_RESERVED: ErrorTypeNames("DDP error reserved for the LLP", _SPEC),
}


class DdpError(RemoteProtocolError):
    """A DDP segment failed validation at the data sink (RFC 5041 §7.1).

    :param header: the offending DDP header (14 or 18 octets) for the
        Terminate's "Terminated DDP Header", or None.
    :param segment_length: the DDP segment length (header + payload).
    """

    layer = TerminateLayer.DDP
    etype = int(DdpErrorType.LOCAL_CATASTROPHIC)

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        header: bytes | None = None,
        segment_length: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.header = header
        self.segment_length = segment_length

    def __str__(self) -> str:
        name = error_name(DDP_ERROR_NAMES, self.layer, self.etype, self.code)
        return f"{name}: {self.message}"


class DdpCatastrophicError(DdpError):
    """RFC 5041 §7.2 error type 0: local catastrophic (no code)."""

    etype = int(DdpErrorType.LOCAL_CATASTROPHIC)


class DdpTaggedError(DdpError):
    """RFC 5041 §7.2 error type 1: tagged buffer error."""

    etype = int(DdpErrorType.TAGGED_BUFFER)

    def __init__(
        self,
        code: DdpTaggedCode,
        message: str,
        *,
        header: bytes | None = None,
        segment_length: int | None = None,
    ) -> None:
        super().__init__(message, code=int(code), header=header, segment_length=segment_length)


class DdpUntaggedError(DdpError):
    """RFC 5041 §7.2 error type 2: untagged buffer error."""

    etype = int(DdpErrorType.UNTAGGED_BUFFER)

    def __init__(
        self,
        code: DdpUntaggedCode,
        message: str,
        *,
        header: bytes | None = None,
        segment_length: int | None = None,
    ) -> None:
        super().__init__(message, code=int(code), header=header, segment_length=segment_length)
