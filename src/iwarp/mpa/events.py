"""Events an :class:`~iwarp.mpa.connection.MpaConnection` reports, and the
negotiated parameters (:class:`MpaParams`).

Events are named for what happened; each is a frozen, slotted dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass

from iwarp.errors import MpaError
from iwarp.mpa.runs import UlpduBatch
from iwarp.mpa.wire import EnhancedData, MpaFrame, RtrFlags

__all__ = [
    "ConnectionClosed",
    "ConnectionEstablished",
    "ConnectionFailed",
    "ConnectionRejected",
    "Event",
    "MpaParams",
    "NegotiationFailed",
    "RequestReceived",
    "StreamDataReceived",
    "UlpduBatchReceived",
    "UlpduReceived",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MpaParams:
    """What the Request/Reply exchange settled for one connection."""

    #: MPA revision the connection runs: the lower of both frames' Revs.
    revision: int
    #: DDP/RDMAP version the upper layers must use: 0 only in RFC 5044
    #: Appendix C RDMAC mode (a Rev 0 peer), 1 otherwise.
    ddp_version: int
    #: We insert markers into what we send (the peer's M bit).
    markers_send: bool
    #: We expect markers in what we receive (our M bit).
    markers_receive: bool
    #: CRC generated and checked in both directions.
    crc: bool
    #: Both frames carried RFC 6581 enhanced data (Rev 2, S bit).
    enhanced: bool
    #: Our IRD and ORD after RFC 6581 §9.1 negotiation (the configured
    #: values when not negotiated or when 0x3FFF asked to leave them alone).
    ird: int
    ord: int
    #: The peer's IRD and ORD exactly as received (RFC 6581 §9.1 "MUST pass
    #: the peer's provided IRD and ORD values to the ULP"), None if unenhanced.
    peer_ird: int | None
    peer_ord: int | None
    #: RFC 6581 §9.2 Control Flag A: the peer-to-peer model was negotiated.
    peer_to_peer: bool
    #: The RTR message type the Initiator sends as its first FPDU
    #: (exactly one of SEND, WRITE, READ), or None without peer-to-peer.
    rtr: RtrFlags | None
    #: Largest ULPDU that fits one TCP segment (RFC 5044 §4.5 / seed §5.3.2),
    #: for DDP to size its segments; updated by ``MpaConnection.set_emss``.
    mulpdu: int
    #: The peer's private data for the application (enhanced data removed).
    peer_private_data: bytes
    #: The private data we sent (enhanced data removed).
    local_private_data: bytes


@dataclass(frozen=True, slots=True)
class Event:
    """Base class of every MPA event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamDataReceived(Event):
    """Octets received outside MPA: before startup (delayed startup, seed 000
    §6.1.2) or after MPA exited on a reject (RFC 5044 §7.1.2 rules 2, 3)."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestReceived(Event):
    """Responder: a valid MPA Request arrived; call ``accept()`` or ``reject()``."""

    frame: MpaFrame
    #: The Initiator's private data for the application (enhanced data removed).
    private_data: bytes
    #: RFC 6581 enhanced data of the Request, if any.
    enhanced: EnhancedData | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionEstablished(Event):
    """MPA is in full operation (RFC 5044 §7.1.2 rules 2, 3).

    A Responder may already call ``send_ulpdu``; the FPDUs are held back until
    the first valid FPDU arrives (rule 4).
    """

    params: MpaParams


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionRejected(Event):
    """MPA exited without full operation; the TCP connection stays open.

    ``by_peer``: the Responder sent a Reply with R=1 (we are the Initiator).
    Otherwise the rejection is ours: the application called ``reject()``, or
    a local policy (``crc_required``, ``crc_strict``) refused the peer.
    """

    by_peer: bool
    #: The private data of the Reply (Initiator) or the one we sent (Responder).
    private_data: bytes
    reason: str
    #: The peer's frame (the Reply for an Initiator, the Request for a Responder).
    frame: MpaFrame | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UlpduReceived(Event):
    """One ULPDU, delivered in order (markers removed, CRC checked).

    ``data`` may be a view into the received chunk; copy it to keep it
    beyond the next ``receive_data`` call if the chunk is reused.
    """

    data: memoryview


@dataclass(frozen=True, slots=True, kw_only=True)
class UlpduBatchReceived(Event):
    """The ULPDUs of one ``receive_data`` call, in order, as one batch.

    Reported instead of one :class:`UlpduReceived` per ULPDU when the
    connection was created with ``batch_ulpdus=True``: with the C
    accelerator the batch holds the receive buffer and the ULPDUs' offsets,
    not a Python object per ULPDU. Same lifetime rules as ``UlpduReceived``.
    """

    batch: UlpduBatch


@dataclass(frozen=True, slots=True, kw_only=True)
class NegotiationFailed(Event):
    """RFC 6581 negotiation failed after a valid Reply (error 6 or 7).

    MPA is in full operation so that the upper layer can send the Terminate
    message the RFC asks for (RFC 6581 §9.1, §9.2), then close.
    """

    error: MpaError


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionFailed(Event):
    """An MPA error (RFC 5044 §8). Nothing more is delivered after it.

    ``close`` is True when MPA requires the TCP connection to be closed now
    (error 4, startup timeouts, and error 1 where it already is); for CRC
    (2) and marker (3) errors closing is up to the upper layer, which may
    first send a Terminate.
    """

    error: MpaError
    close: bool


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """The peer closed its half of the connection (FIN) at a clean point:
    between FPDUs, or outside MPA (RFC 5044 §7.2)."""
