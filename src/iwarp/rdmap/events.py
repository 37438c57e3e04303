"""Events an :class:`~iwarp.rdmap.stream.RdmapStream` reports.

Besides :class:`~iwarp.rdmap.work.Completion` (a finished work request,
declared with the work requests), the stream says when full operation began
and when a Terminate went either way (RFC 5040 §5.4). Each is a frozen,
slotted dataclass named for what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from iwarp.errors import RemoteProtocolError
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import Completion

__all__ = ["Event", "StreamReady", "TerminateReceived", "TerminateSent"]


@dataclass(frozen=True, slots=True)
class StreamReady:
    """Full operation began: messages may flow both ways.

    The responder reports it when the initiator's first message (the RFC
    6581 RTR when negotiated) arrived; the initiator at once.
    """


@dataclass(frozen=True, slots=True)
class TerminateReceived:
    """The peer sent a Terminate; the stream is over (RFC 5040 §5.4)."""

    header: TerminateHeader


@dataclass(frozen=True, slots=True)
class TerminateSent:
    """We detected ``error`` and queued a Terminate describing it."""

    error: RemoteProtocolError
    header: TerminateHeader


#: Everything the stream reports.
Event: TypeAlias = Completion | StreamReady | TerminateReceived | TerminateSent
