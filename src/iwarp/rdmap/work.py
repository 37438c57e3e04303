"""Work requests and completions of the RDMAP core (verbs-shaped; its events
are :mod:`iwarp.rdmap.events`).

Work requests name local memory by :class:`Sge` (a registered region, an
offset and a length), as verbs does by lkey/address/length; a Send or an
RDMA Write may also take plain bytes as its source. RFC 7306 adds
:class:`FetchAddWR` and :class:`CompareSwapWR` (Atomic Operations, their
completion carrying the original remote value) and :class:`ImmediateWR`
(8 octets into the peer's next receive buffer, whose completion says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, TypeAlias

from iwarp._typing import Buffer
from iwarp.rdmap.memory import MemoryRegion

__all__ = [
    "CompareSwapWR",
    "Completion",
    "CompletionStatus",
    "FetchAddWR",
    "ImmediateData",
    "ImmediateWR",
    "ReadWR",
    "RecvWR",
    "SendQueueWR",
    "SendWR",
    "Sge",
    "WorkOpcode",
    "WriteWR",
]


@dataclass(frozen=True, slots=True)
class Sge:
    """A piece of a registered region: ``length`` octets at ``offset``.

    ``length`` None means "to the end of the region".
    """

    region: MemoryRegion
    offset: int = 0
    length: int | None = None

    @property
    def size(self) -> int:
        return self.region.length - self.offset if self.length is None else self.length


#: A source of outgoing data: a registered piece of memory or plain bytes.
Source: TypeAlias = "Sge | Buffer"


@dataclass(frozen=True, slots=True)
class SendWR:
    """Send ``data`` into the peer's next posted receive buffer.

    ``solicited`` asks for a Solicited Event (Send with SE);
    ``invalidate_stag`` makes it a Send with Invalidate of that remote STag.
    """

    data: Source
    wr_id: int = 0
    solicited: bool = False
    invalidate_stag: int | None = None


@dataclass(frozen=True, slots=True)
class WriteWR:
    """RDMA Write ``data`` to TO ``remote_to`` of the peer's region ``remote_stag``."""

    data: Source
    remote_stag: int
    remote_to: int
    wr_id: int = 0


@dataclass(frozen=True, slots=True)
class ReadWR:
    """RDMA Read ``local.size`` octets from (``remote_stag``, ``remote_to``) into ``local``."""

    local: Sge
    remote_stag: int
    remote_to: int
    wr_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchAddWR:
    """RFC 7306 FetchAdd: add ``add`` to the 64-bit big-endian word at
    (``remote_stag``, ``remote_to``), a 64-bit aligned TO; each bit set in
    ``mask`` ends a field whose carry out is dropped (0: one 64-bit sum).
    The completion's ``original`` is the word before the addition."""

    remote_stag: int
    remote_to: int
    add: int
    mask: int = 0
    wr_id: int = 0


@dataclass(frozen=True, slots=True)
class CompareSwapWR:
    """RFC 7306 CmpSwap: where the ``compare_mask`` bits of the remote word
    equal those of ``compare``, its ``swap_mask`` bits take those of
    ``swap``. The completion's ``original`` is the word before."""

    remote_stag: int
    remote_to: int
    compare: int
    swap: int
    compare_mask: int = 0xFFFFFFFFFFFFFFFF
    swap_mask: int = 0xFFFFFFFFFFFFFFFF
    wr_id: int = 0


@dataclass(frozen=True, slots=True)
class ImmediateWR:
    """RFC 7306 Immediate Data: exactly 8 octets into the peer's next
    receive buffer (``solicited``: Immediate Data with Solicited Event)."""

    data: bytes
    wr_id: int = 0
    solicited: bool = False


#: Every work request of the send queue.
SendQueueWR: TypeAlias = "SendWR | WriteWR | ReadWR | FetchAddWR | CompareSwapWR | ImmediateWR"


class ImmediateData(bytes):
    """The 8 octets of an RFC 7306 Immediate Data message, as a receive pool
    hands them out (``receive()``): ``bytes`` that say how they arrived."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RecvWR:
    """A receive buffer for one incoming Send."""

    local: Sge
    wr_id: int = 0


class WorkOpcode(Enum):
    """What a completion completes (verbs' ``ibv_wc_opcode``)."""

    SEND = "send"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"
    RECV = "recv"
    #: RFC 7306 (verbs' IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP).
    ATOMIC_FETCH_ADD = "atomic_fetch_add"
    ATOMIC_CMP_SWAP = "atomic_cmp_swap"
    #: RFC 7306 Immediate Data sent (received ones complete as RECV).
    IMMEDIATE_DATA = "immediate_data"


class CompletionStatus(Enum):
    """Status of a completion (verbs' ``ibv_wc_status``)."""

    SUCCESS = "success"
    #: An incoming Send did not fit the receive buffer.
    LOCAL_LENGTH_ERROR = "local_length_error"
    #: An incoming message broke local memory protection (e.g. bad Invalidate STag).
    LOCAL_PROTECTION_ERROR = "local_protection_error"
    #: An incoming message broke the protocol.
    LOCAL_QP_OPERATION_ERROR = "local_qp_operation_error"
    #: The peer refused the remote access (its Terminate: STag, rights, bounds).
    REMOTE_ACCESS_ERROR = "remote_access_error"
    #: The peer had no buffer, or the message did not fit it.
    REMOTE_INVALID_REQUEST = "remote_invalid_request"
    #: The peer terminated for another reason.
    REMOTE_OPERATION_ERROR = "remote_operation_error"
    #: Never executed: the stream was terminated or closed first.
    FLUSHED = "flushed"


class Completion(NamedTuple):
    """A finished work request (immutable; a named tuple, made for every
    message, because a frozen dataclass costs about three times more to build)."""

    wr_id: int
    opcode: WorkOpcode
    status: CompletionStatus = CompletionStatus.SUCCESS
    #: Octets transferred (received, for RECV).
    byte_len: int = 0
    #: RECV of a Send with Invalidate: the local STag the peer invalidated.
    invalidated_stag: int | None = None
    #: RECV of a Send (or Immediate Data) with Solicited Event.
    solicited: bool = False
    #: RECV of RFC 7306 Immediate Data: its 8 octets (None for a Send).
    immediate: bytes | None = None
    #: An RFC 7306 Atomic Operation: the remote word's original value.
    original: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is CompletionStatus.SUCCESS
