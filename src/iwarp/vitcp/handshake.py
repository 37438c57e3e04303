"""VI/TCP connection establishment state machines (draft-dicecco-vitcp-01 §4).

Three tables, one per kind of end: active (§4.2), passive (§4.3) and the
active end of a peer-to-peer establishment (§4: "Receiving a Connect No
Match VI message during peer connection establishment results in repeated
attempts"). The passive end of a peer-to-peer establishment is a passive end.
Everything that changes a state is in these tables
(:class:`~iwarp.statemachine.TransitionTable`, run by
:class:`~iwarp.statemachine.Machine`); a pair that is not in its table is an
:class:`~iwarp.vitcp.errors.UnexpectedSegmentError` when the input came from
the peer and a :class:`~iwarp.vitcp.errors.VitcpUsageError` when it came
from the consumer.

Additions to the draft's figures, marked below: a consumer timeout and a
consumer abort while connecting, a TCP close or protocol error in any live
state, and a passive attribute check (§3.3) that rejects by itself.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from iwarp.statemachine import TransitionTable
from iwarp.vitcp.errors import UnexpectedSegmentError, VitcpUsageError

__all__ = [
    "ACTIVE_TRANSITIONS",
    "LOCAL_INPUTS",
    "PASSIVE_TRANSITIONS",
    "PEER_ACTIVE_TRANSITIONS",
    "Input",
    "State",
]


class State(Enum):
    """States of §4.2 and §4.3."""

    DISCONNECTED = "Disconnected"
    #: §4.2: TCP connection being set up.
    CONNECTING = "Connecting"
    #: §4.3: listening on the VI/TCP well-known port.
    LISTENING = "Listening"
    #: §4.3: TCP accepted, ConnectRequest awaited.
    INCOMING = "Incoming"
    #: §4.3: ConnectRequest received, discriminator being looked up.
    MATCHING = "Matching"
    #: §4.2: ConnectRequest sent; §4.3: waiting for VipConnectAccept.
    PENDING_ACCEPT = "PendingAccept"
    CONNECTED = "Connected"


class Input(Enum):
    """Events that drive the machines: from the consumer (``LOCAL_INPUTS``),
    from TCP, or from the peer's segments."""

    # Consumer (VIPL) calls.
    CONNECT_REQUEST = "VipConnectRequest"
    ACCEPT = "VipConnectAccept"
    REJECT = "VipConnectReject"
    DISCONNECT = "VipDisconnect"
    MATCH = "discriminator match"
    NO_MATCH = "no matching discriminator"
    # TCP and clock.
    TCP_ESTABLISHED = "TCP established"
    TCP_ACCEPTED = "incoming TCP connection"
    TCP_FAILED = "TCP setup fail"
    TCP_CLOSED = "TCP closes"
    TIMEOUT = "timeout"
    # Peer segments and checks of them.
    RECV_CONNECT_REQUEST = "ConnectRequest"
    RECV_CONNECT_ACCEPT = "ConnectAccept"
    RECV_CONNECT_REJECT = "ConnectReject"
    RECV_CONNECT_NO_MATCH = "ConnectNoMatch"
    ATTRIBUTE_MISMATCH = "attribute mismatch"
    PROTOCOL_ERROR = "protocol error"


#: Inputs that come from the consumer or its adapter (reporting TCP set-up):
#: an invalid one is API misuse. TCP closing, timeouts and segments are not.
LOCAL_INPUTS: Final = frozenset(
    {
        Input.CONNECT_REQUEST,
        Input.ACCEPT,
        Input.REJECT,
        Input.DISCONNECT,
        Input.MATCH,
        Input.NO_MATCH,
        Input.TCP_ESTABLISHED,
        Input.TCP_ACCEPTED,
        Input.TCP_FAILED,
    }
)

_S = State
_I = Input


def _table(
    transitions: dict[tuple[State, Input], State], initial: State
) -> TransitionTable[State, Input]:
    return TransitionTable(
        transitions,
        local_inputs=LOCAL_INPUTS,
        local_error=VitcpUsageError,
        remote_error=UnexpectedSegmentError,
        starts=((initial, ""),),
    )


#: §4.2 "Connection Establishment - Active".
ACTIVE_TRANSITIONS: Final = _table(
    {
        (_S.DISCONNECTED, _I.CONNECT_REQUEST): _S.CONNECTING,  # setup TCP connection
        (_S.CONNECTING, _I.TCP_ESTABLISHED): _S.PENDING_ACCEPT,  # send ConnectRequest
        (_S.CONNECTING, _I.TCP_FAILED): _S.DISCONNECTED,
        (_S.CONNECTING, _I.TIMEOUT): _S.DISCONNECTED,  # addition: consumer timeout
        (_S.CONNECTING, _I.DISCONNECT): _S.DISCONNECTED,  # addition: consumer abort
        (_S.PENDING_ACCEPT, _I.TCP_CLOSED): _S.CONNECTING,  # reestablish
        (_S.PENDING_ACCEPT, _I.RECV_CONNECT_REJECT): _S.DISCONNECTED,  # close TCP
        (_S.PENDING_ACCEPT, _I.RECV_CONNECT_NO_MATCH): _S.DISCONNECTED,  # close TCP
        (_S.PENDING_ACCEPT, _I.TIMEOUT): _S.DISCONNECTED,  # close TCP
        (_S.PENDING_ACCEPT, _I.RECV_CONNECT_ACCEPT): _S.CONNECTED,
        (_S.PENDING_ACCEPT, _I.ATTRIBUTE_MISMATCH): _S.DISCONNECTED,  # addition
        (_S.PENDING_ACCEPT, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
        (_S.PENDING_ACCEPT, _I.DISCONNECT): _S.DISCONNECTED,  # addition: consumer abort
        (_S.CONNECTED, _I.DISCONNECT): _S.DISCONNECTED,  # close TCP
        (_S.CONNECTED, _I.TCP_CLOSED): _S.DISCONNECTED,  # close TCP
        (_S.CONNECTED, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
    },
    _S.DISCONNECTED,
)

#: §4: peer-to-peer, active end: ConnectNoMatch means "not waiting yet", so
#: it retries (back to Connecting) until the consumer's timeout.
PEER_ACTIVE_TRANSITIONS: Final = ACTIVE_TRANSITIONS.replace(
    {(_S.PENDING_ACCEPT, _I.RECV_CONNECT_NO_MATCH): _S.CONNECTING}
)

#: §4.3 "Connection Establishment - Passive", for one incoming TCP connection.
PASSIVE_TRANSITIONS: Final = _table(
    {
        (_S.LISTENING, _I.TCP_ACCEPTED): _S.INCOMING,  # accept TCP connection
        (_S.INCOMING, _I.TIMEOUT): _S.DISCONNECTED,  # close TCP connection
        (_S.INCOMING, _I.TCP_CLOSED): _S.DISCONNECTED,
        (_S.INCOMING, _I.RECV_CONNECT_REQUEST): _S.MATCHING,
        (_S.INCOMING, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
        (_S.MATCHING, _I.NO_MATCH): _S.DISCONNECTED,  # send ConnectNoMatch, close TCP
        (_S.MATCHING, _I.MATCH): _S.PENDING_ACCEPT,
        (_S.MATCHING, _I.TCP_CLOSED): _S.DISCONNECTED,  # addition
        (_S.MATCHING, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
        (_S.PENDING_ACCEPT, _I.REJECT): _S.DISCONNECTED,  # send ConnectReject, close TCP
        (_S.PENDING_ACCEPT, _I.ATTRIBUTE_MISMATCH): _S.DISCONNECTED,  # addition: §3.3 check
        (_S.PENDING_ACCEPT, _I.ACCEPT): _S.CONNECTED,  # send ConnectAccept
        (_S.PENDING_ACCEPT, _I.TCP_CLOSED): _S.DISCONNECTED,  # addition
        (_S.PENDING_ACCEPT, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
        (_S.CONNECTED, _I.DISCONNECT): _S.DISCONNECTED,  # close TCP connection
        (_S.CONNECTED, _I.TCP_CLOSED): _S.DISCONNECTED,  # close TCP connection
        (_S.CONNECTED, _I.PROTOCOL_ERROR): _S.DISCONNECTED,  # addition
    },
    _S.LISTENING,
)
