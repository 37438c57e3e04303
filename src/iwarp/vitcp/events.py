"""Events a :class:`~iwarp.vitcp.connection.VitcpConnection` reports."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from iwarp.vitcp.config import Negotiated
from iwarp.vitcp.errors import VitcpError
from iwarp.vitcp.wire import Attributes, SegmentType, ViErrorType

__all__ = [
    "TCP_CLOSED_UNANSWERED",
    "ConnectionRequested",
    "Connected",
    "Event",
    "MessageReceived",
    "RdmaReadCompleted",
    "RdmaReadServed",
    "RdmaWriteReceived",
    "ReconnectNeeded",
    "RemoteErrorReported",
    "SendCompleted",
    "ViCompletionStatus",
    "ViConnectionClosed",
    "ViConnectionRejected",
]


class ViCompletionStatus(Enum):
    """How a descriptor completed (the VI Architecture's status, abridged).

    Not :class:`iwarp.rdmap.work.CompletionStatus` (verbs' ``ibv_wc_status``):
    VI/TCP reports errors as VI Error Type bits (§3.2), which map onto these
    and not onto the verbs statuses an RDMAP Terminate gives."""

    SUCCESS = "success"
    #: The sender flagged the message with Transmit Error (§3.2, §2.2.2.2.5).
    TRANSMIT_ERROR = "transmit-error"
    #: Bad CRC (§3.6) or an unrecoverable transport error reported by the peer.
    TRANSPORT_ERROR = "transport-error"
    #: RDMA memory protection error (local or reported by the peer).
    PROTECTION_ERROR = "protection-error"
    #: No or too small receive descriptor (local or reported by the peer).
    DESCRIPTOR_ERROR = "descriptor-error"
    #: The connection closed before the descriptor completed.
    FLUSHED = "flushed"


def status_of(error: ViErrorType) -> ViCompletionStatus:
    """The completion status for a VI Error Type reported by the peer."""
    if error & ViErrorType.MPE:
        return ViCompletionStatus.PROTECTION_ERROR
    if error & ViErrorType.VDE:
        return ViCompletionStatus.DESCRIPTOR_ERROR
    if error & ViErrorType.UTE:
        return ViCompletionStatus.TRANSPORT_ERROR
    return ViCompletionStatus.SUCCESS


class Event:
    """Base class of VI/TCP events."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ConnectionRequested(Event):
    """Passive end: a ConnectRequest arrived (§4.3 Matching). Answer with
    ``match()`` then ``accept()``/``reject()``, or ``no_match()``."""

    called_discriminator: bytes
    calling_discriminator: bytes
    attributes: Attributes
    mtu: int
    read_window: int
    crc: bool


@dataclass(frozen=True, slots=True)
class Connected(Event):
    """The VI connection is established (§4.2/§4.3 Connected)."""

    params: Negotiated


@dataclass(frozen=True, slots=True)
class ViConnectionRejected(Event):
    """Active end: ConnectReject, or ConnectNoMatch outside peer-to-peer.

    Unlike MPA's :class:`iwarp.mpa.events.ConnectionRejected` (TCP stays open,
    private data travels) a VI/TCP reject ends the TCP connection (§4.2)."""

    no_match: bool


@dataclass(frozen=True, slots=True)
class ReconnectNeeded(Event):
    """Active end is back in Connecting (§4.2 "TCP Closes - Reestablish",
    or a peer-to-peer ConnectNoMatch): close TCP if open, set up a new TCP
    connection and call ``tcp_established`` again."""

    reason: str


#: :class:`ReconnectNeeded`'s reason when TCP closed before the peer answered
#: in VI/TCP at all (§4.2 "TCP Closes - Reestablish").
TCP_CLOSED_UNANSWERED = "TCP closed while the accept was pending"


@dataclass(frozen=True, slots=True)
class ViConnectionClosed(Event):
    """The VI connection is over; close the TCP connection after sending
    whatever ``data_to_send`` still returns. (MPA's
    :class:`iwarp.mpa.events.ConnectionClosed` is only the peer's clean FIN;
    this is every end of a VI, with the protocol error when there is one.)"""

    reason: str
    error: VitcpError | None = None


@dataclass(frozen=True, slots=True)
class MessageReceived(Event):
    """A Send message filled a receive descriptor."""

    message_number: int
    data: bytes
    immediate_data: int | None
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class RdmaWriteReceived(Event):
    """An RDMA Write was placed into our memory; ``immediate_data`` is set
    when it consumed a receive descriptor."""

    message_number: int
    address: int
    memory_handle: int
    length: int
    immediate_data: int | None
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class RdmaReadServed(Event):
    """We answered an RDMA Read Request from our memory."""

    message_number: int
    address: int
    memory_handle: int
    length: int


@dataclass(frozen=True, slots=True)
class SendCompleted(Event):
    """A Send or RDMA Write descriptor of ours completed."""

    message_number: int
    operation: SegmentType
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class RdmaReadCompleted(Event):
    """An RDMA Read of ours completed; the data is in our local region."""

    message_number: int
    local_address: int
    local_handle: int
    length: int
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


@dataclass(frozen=True, slots=True)
class RemoteErrorReported(Event):
    """Reliable Reception: the peer reported an error for one of our
    messages in its Remote Error Code (§3.2)."""

    message_number: int
    vi_error: ViErrorType
    is_error_code: int
