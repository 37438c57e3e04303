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

from iwarp.errors import RemoteProtocolError
from iwarp.statemachine import TransitionTable

__all__ = ["LOCAL_INPUTS", "TRANSITIONS", "StreamInput", "StreamState", "transition"]


class StreamState(Enum):
    WAIT_PEER = "wait_peer"
    OPERATIONAL = "operational"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    CLOSED = "closed"


class StreamInput(Enum):
    """What happens to a stream (:data:`LOCAL_INPUTS` come from the application)."""

    #: A valid segment arrived (dropped unread after a Terminate).
    RECEIVE = "receive"
    #: A received segment broke the protocol: we answer with a Terminate.
    PROTOCOL_ERROR = "protocol_error"
    #: A Terminate arrived.
    TERMINATE = "terminate"
    #: The LLP connection closed or failed.
    LLP_CLOSED = "llp_closed"
    #: The application posts a work request.
    POST = "post"
    #: Our Terminate went to MPA.
    TERMINATE_SENT = "terminate_sent"
    #: The application closes the stream.
    CLOSE = "close"


#: Inputs from the application: one the table does not allow is API misuse
#: (LocalProtocolError); any other is the peer's (RemoteProtocolError).
LOCAL_INPUTS: Final = frozenset({StreamInput.POST, StreamInput.TERMINATE_SENT, StreamInput.CLOSE})

S = StreamState
I = StreamInput  # noqa: E741

#: Every legal (state, input) pair and the state it leads to.
TRANSITIONS: Final[TransitionTable[StreamState, StreamInput]] = TransitionTable(
    {
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
    },
    local_inputs=LOCAL_INPUTS,
    remote_error=RemoteProtocolError,
    starts=((S.WAIT_PEER, "responder"), (S.OPERATIONAL, "initiator")),
)

#: ``transition(state, input)``: the next state; LocalProtocolError for a
#: local input the table does not allow, RemoteProtocolError for a remote one.
transition: Final = TRANSITIONS.next
