"""The RDMAP stream state machine, as data (RFC 5040 §5.4, §6; RFC 6581 §9.2).

A responder starts in ``WAIT_PEER``: it may not send until the initiator's
first message arrives (RFC 5044 §7.1.3; with RFC 6581 that message is the
RTR). An initiator starts ``OPERATIONAL``. A protocol error found in
received data queues a Terminate (``TERMINATING``); once the Terminate is
handed to MPA, or one is received, the stream is ``TERMINATED``: nothing
more is sent, received segments are dropped. ``CLOSED`` means the LLP
connection is gone.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from iwarp.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["TRANSITIONS", "StreamInput", "StreamState", "mermaid", "transition"]


class StreamState(Enum):
    WAIT_PEER = "wait_peer"
    OPERATIONAL = "operational"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    CLOSED = "closed"


class StreamInput(Enum):
    """What happens to a stream; ``local`` inputs come from the application."""

    #: A valid segment arrived (dropped unread after a Terminate).
    RECEIVE = ("receive", False)
    #: A received segment broke the protocol: we answer with a Terminate.
    PROTOCOL_ERROR = ("protocol_error", False)
    #: A Terminate arrived.
    TERMINATE = ("terminate", False)
    #: The LLP connection closed or failed.
    LLP_CLOSED = ("llp_closed", False)
    #: The application posts a work request.
    POST = ("post", True)
    #: Our Terminate went to MPA.
    TERMINATE_SENT = ("terminate_sent", True)
    #: The application closes the stream.
    CLOSE = ("close", True)

    @property
    def local(self) -> bool:
        return self.value[1]


S = StreamState
I = StreamInput  # noqa: E741

#: Every legal (state, input) pair and the state it leads to.
TRANSITIONS: Final[dict[tuple[StreamState, StreamInput], StreamState]] = {
    (S.WAIT_PEER, I.RECEIVE): S.OPERATIONAL,
    (S.WAIT_PEER, I.PROTOCOL_ERROR): S.TERMINATING,
    (S.WAIT_PEER, I.TERMINATE): S.TERMINATED,
    (S.WAIT_PEER, I.LLP_CLOSED): S.CLOSED,
    (S.WAIT_PEER, I.POST): S.WAIT_PEER,
    (S.WAIT_PEER, I.CLOSE): S.CLOSED,
    (S.OPERATIONAL, I.RECEIVE): S.OPERATIONAL,
    (S.OPERATIONAL, I.PROTOCOL_ERROR): S.TERMINATING,
    (S.OPERATIONAL, I.TERMINATE): S.TERMINATED,
    (S.OPERATIONAL, I.LLP_CLOSED): S.CLOSED,
    (S.OPERATIONAL, I.POST): S.OPERATIONAL,
    (S.OPERATIONAL, I.CLOSE): S.CLOSED,
    (S.TERMINATING, I.RECEIVE): S.TERMINATING,
    (S.TERMINATING, I.LLP_CLOSED): S.CLOSED,
    (S.TERMINATING, I.TERMINATE_SENT): S.TERMINATED,
    (S.TERMINATING, I.CLOSE): S.CLOSED,
    (S.TERMINATED, I.RECEIVE): S.TERMINATED,
    (S.TERMINATED, I.LLP_CLOSED): S.CLOSED,
    (S.TERMINATED, I.CLOSE): S.CLOSED,
    (S.CLOSED, I.RECEIVE): S.CLOSED,
    (S.CLOSED, I.LLP_CLOSED): S.CLOSED,
    (S.CLOSED, I.CLOSE): S.CLOSED,
}


def transition(state: StreamState, event: StreamInput) -> StreamState:
    """The next state.

    :raises LocalProtocolError: a local input not allowed in ``state``.
    :raises RemoteProtocolError: a remote input not allowed in ``state``.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        message = f"{event.name} is not allowed in state {state.name}"
        if event.local:
            raise LocalProtocolError(message) from None
        raise RemoteProtocolError(message) from None


def mermaid() -> str:
    """The transition table as a mermaid ``stateDiagram-v2`` (docs/rdmap.md)."""
    lines = [
        "stateDiagram-v2",
        "    [*] --> wait_peer: responder",
        "    [*] --> operational: initiator",
    ]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.value} --> {target.value}: {event.value[0]}")
    return "\n".join(lines)
