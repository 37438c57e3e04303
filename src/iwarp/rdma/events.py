"""Events of the composed RDMA stack: what the cores of :mod:`iwarp.rdma` report.

* :data:`StackEvent`: what an :class:`~iwarp.rdma.connection.RdmaConnection`
  (MPA + DDP + RDMAP) reports: MPA's events (:mod:`iwarp.mpa.events`) and
  the RDMAP stream's (:mod:`iwarp.rdmap.events`, with
  :class:`~iwarp.rdmap.work.Completion`).
* :data:`Event`: what a :class:`~iwarp.rdma.endpoint.QueuePairEndpoint`, the
  queue pair's core that drivers run, reports: the classes below.

Each is a frozen, slotted dataclass named for what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeAlias

from iwarp.errors import IwarpError
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
)
from iwarp.rdmap.events import StreamReady, TerminateReceived, TerminateSent
from iwarp.rdmap.work import Completion

__all__ = [
    "CompletionQueued",
    "CompletionSource",
    "Ended",
    "Established",
    "Event",
    "MessageQueued",
    "StackEvent",
    "WorkFinished",
]

#: Everything :meth:`RdmaConnection.receive_data
#: <iwarp.rdma.connection.RdmaConnection.receive_data>` reports.
StackEvent: TypeAlias = (
    RequestReceived
    | ConnectionEstablished
    | ConnectionRejected
    | ConnectionFailed
    | NegotiationFailed
    | ConnectionClosed
    | StreamReady
    | Completion
    | TerminateReceived
    | TerminateSent
)


class CompletionSource(Protocol):
    """The queue a :class:`CompletionQueued` names: the endpoint's send or
    receive completion queue (:class:`iwarp.rdma.endpoint.CompletionRecord`)."""

    def __len__(self) -> int: ...

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` (default: all) completions."""
        ...


@dataclass(frozen=True, slots=True)
class Established:
    """MPA is in full operation and RFC 6581 negotiation succeeded."""

    params: MpaParams


@dataclass(frozen=True, slots=True)
class CompletionQueued:
    """A completion was added to ``queue`` (:attr:`QueuePairEndpoint.send_cq`
    or :attr:`~QueuePairEndpoint.recv_cq`)."""

    queue: CompletionSource


@dataclass(frozen=True, slots=True)
class WorkFinished:
    """A tracked work request completed: :meth:`QueuePairEndpoint.result`."""

    wr_id: int


@dataclass(frozen=True, slots=True)
class MessageQueued:
    """A message arrived in the receive pool and waits for
    :meth:`~iwarp.rdma.endpoint.QueuePairEndpoint.take_message` (VI/TCP's
    :class:`~iwarp.vitcp.events.MessageReceived` carries its message; this
    only says one is queued)."""

    size: int


@dataclass(frozen=True, slots=True)
class Ended:
    """The connection is over; ``error`` is the cause (None: closed cleanly)."""

    error: IwarpError | None
    reason: str


#: Everything a :class:`~iwarp.rdma.endpoint.QueuePairEndpoint` reports.
Event: TypeAlias = Established | CompletionQueued | WorkFinished | MessageQueued | Ended
