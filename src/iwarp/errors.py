"""The error hierarchy shared by every protocol core and adapter.

Every error raised on purpose is an :class:`IwarpError`, on one of three
branches that never mix (no class derives from two of them):

* :class:`LocalProtocolError` -- the caller misused the API (a ULPDU larger
  than MULPDU, a send in the wrong state...). Nothing reaches the wire.
* :class:`RemoteProtocolError` -- the peer broke the protocol. Each subclass
  knows the wire meaning of the failure, so that a Terminate message (RFC 5040
  §7) can be built from the exception alone: ``layer``, ``etype`` and
  ``code``.
* neither: an outcome that is nobody's fault here, such as
  :class:`~iwarp.rdma.errors.ConnectionTerminatedError` (the connection is
  over: a Terminate either way, a close, a lost LLP) or a rejected
  connection. Whatever protocol error led to it was reported on its own
  branch when it happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final


class TerminateLayer(IntEnum):
    """RFC 5040 §7.1: the layer that detected the error (4 bits)."""

    RDMAP = 0  #: RDMA Protocol
    DDP = 1  #: Direct Data Placement
    LLP = 2  #: Lower Layer Protocol: MPA over TCP


class MpaErrorCode(IntEnum):
    """MPA error codes: RFC 5044 §8 (1-4) and RFC 6581 §6 (5-7).

    They travel in a Terminate with layer LLP and error type 0 (MPA).
    """

    #: TCP connection closed, terminated or lost (RST, FIN, timeout).
    TCP_CLOSED = 1
    #: Received MPA CRC does not match the value calculated for the FPDU.
    CRC_MISMATCH = 2
    #: A Marker and the ULPDU Length fields disagree on the start of an FPDU.
    MARKER_MISMATCH = 3
    #: Invalid MPA Request or Reply frame; the connection is closed at once.
    INVALID_FRAME = 4
    #: Local catastrophic error (RFC 6581).
    LOCAL_CATASTROPHIC = 5
    #: Insufficient IRD resources (RFC 6581 §9.1).
    INSUFFICIENT_IRD = 6
    #: No matching RTR option (RFC 6581 §9.2).
    NO_MATCHING_RTR = 7


#: RFC 5040 §7.1: the error type of every MPA-layer Terminate.
MPA_ETYPE = 0


@dataclass(frozen=True, slots=True)
class ErrorTypeNames:
    """What one error type of one Terminate layer means: its name, the spec
    section that defines it, and the names of its codes (none for a type
    without codes, such as local catastrophic).

    Each layer names its own types next to their numbers (MPA's here, DDP's
    in :mod:`iwarp.ddp.errors`, RDMAP's in :mod:`iwarp.rdmap.errors`);
    :func:`error_name` words them.
    """

    name: str
    spec: str
    codes: Mapping[int, str] = field(default_factory=dict)
    #: Codes defined by another section than :attr:`spec` (RFC 6581's MPA codes).
    code_specs: Mapping[int, str] = field(default_factory=dict)


def error_name(types: Mapping[int, ErrorTypeNames], layer: int, etype: int, code: int) -> str:
    """What a Terminate's layer, error type and code mean, with the spec
    section that defines them, e.g. ``DDP tagged buffer error: invalid STag
    (RFC 5041 §7.2)``, from ``types``, the layer's names by error type.
    Values no spec defines are named as such, with their numbers.
    """
    known = types.get(etype)
    if known is None:
        layer_name = TerminateLayer(layer).name if layer in _LAYERS else "unknown"
        return f"{layer_name} layer, unknown error type {etype:#x}, code {code:#04x}"
    spec = known.code_specs.get(code, known.spec)
    if not known.codes:
        suffix = "" if code == 0 else f" (code {code:#04x})"
        return f"{known.name}{suffix} ({spec})"
    meaning = known.codes.get(code)
    if meaning is None:
        return f"{known.name}: unknown code {code:#04x} ({spec})"
    return f"{known.name}: {meaning} ({spec})"


_LAYERS: Final = frozenset(int(layer) for layer in TerminateLayer)

#: The names of the LLP layer's one error type, MPA (RFC 5040 §4.8 Figure 9).
MPA_ERROR_NAMES: Final[Mapping[int, ErrorTypeNames]] = {
    MPA_ETYPE: ErrorTypeNames(
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
        {code: "RFC 5044 §8" for code in range(1, 5)}
        | {code: "RFC 6581 §8" for code in range(5, 8)},
    )
}


class IwarpError(Exception):
    """Base class of every error this package raises on purpose."""


class WaitTimeoutError(IwarpError, TimeoutError):
    """A call ran out of time (its ``timeout``, in seconds), on either adapter.

    Nothing was lost: what was posted stays posted and what arrives later
    is delivered by the next call. It is also a :class:`TimeoutError`, so
    ``except TimeoutError`` catches it.
    """


class LocalProtocolError(IwarpError):
    """The local application misused the API; nothing was sent."""


class RemoteProtocolError(IwarpError):
    """The peer violated the protocol.

    ``layer``, ``etype`` and ``code`` are the values of the RFC 5040 Terminate
    control field that reports this error to the peer.
    """

    layer: TerminateLayer = TerminateLayer.LLP
    etype: int = MPA_ETYPE
    code: int = 0

    def __init__(self, message: str, *, code: int | None = None, etype: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if etype is not None:
            self.etype = etype

    @property
    def message(self) -> str:
        """The human-readable reason."""
        return str(self.args[0]) if self.args else ""


class MpaError(RemoteProtocolError):
    """An MPA error (RFC 5044 §8), carrying its :class:`MpaErrorCode`."""

    layer = TerminateLayer.LLP
    etype = MPA_ETYPE

    def __init__(self, code: MpaErrorCode, message: str, *, stream_offset: int | None = None):
        super().__init__(message, code=int(code))
        self.mpa_code = MpaErrorCode(code)
        #: Position (relative to the start of MPA full operation, or a TCP
        #: sequence number where the caller uses one) where it was detected.
        self.stream_offset = stream_offset

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled from its own arguments (the default passes only the
        # message): iwarp decode --jobs N sends the receiver replay's.
        return (type(self), (self.mpa_code, self.message), self.__dict__)

    def __str__(self) -> str:
        where = "" if self.stream_offset is None else f" at stream offset {self.stream_offset}"
        return f"MPA error {int(self.mpa_code)} ({self.mpa_code.name}){where}: {self.message}"
