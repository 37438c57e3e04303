"""Connection establishment (§4): the tables, and the endpoint walking them."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import out
from iwarp.statemachine import Machine, TransitionTable
from iwarp.vitcp.config import ViRole, VitcpConfig, peer_role
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.crc import CrcOrder
from iwarp.vitcp.errors import (
    AttributeMismatchError,
    CrcMismatchError,
    MalformedSegmentError,
    UnexpectedSegmentError,
    VitcpUsageError,
)
from iwarp.vitcp.events import (
    Connected,
    ConnectionRequested,
    Event,
    ReconnectNeeded,
    ViConnectionClosed,
    ViConnectionRejected,
)
from iwarp.vitcp.handshake import (
    ACTIVE_TRANSITIONS,
    LOCAL_INPUTS,
    PASSIVE_TRANSITIONS,
    PEER_ACTIVE_TRANSITIONS,
    Input,
    State,
)
from iwarp.vitcp.wire import (
    HEADER_SIZE,
    Attributes,
    CeHeader,
    Reliability,
    SegmentHeader,
    SegmentType,
    decode_segment,
    encode_segment,
)

TABLES: dict[str, TransitionTable[State, Input]] = {
    "active": ACTIVE_TRANSITIONS,
    "peer-active": PEER_ACTIVE_TRANSITIONS,
    "passive": PASSIVE_TRANSITIONS,
}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "vitcp.md"


def state_of(connection: VitcpConnection) -> State:
    """The state, read through a call so that mypy does not narrow it."""
    return connection.state


@pytest.mark.parametrize("name", list(TABLES))
def test_every_state_input_pair(name: str) -> None:
    table = TABLES[name]
    for state in State:
        for event in Input:
            machine = Machine(table, state)
            if (state, event) in table:
                assert machine.can(event)
                assert machine.process(event) is table[state, event]
            else:
                assert not machine.can(event)
                expected = VitcpUsageError if event in LOCAL_INPUTS else UnexpectedSegmentError
                with pytest.raises(expected, match="not allowed in state"):
                    machine.process(event)
                assert machine.state is state


def test_draft_transitions_are_present() -> None:
    # §4.2 figure, edge by edge.
    a = ACTIVE_TRANSITIONS
    assert a[State.DISCONNECTED, Input.CONNECT_REQUEST] is State.CONNECTING
    assert a[State.CONNECTING, Input.TCP_FAILED] is State.DISCONNECTED
    assert a[State.CONNECTING, Input.TCP_ESTABLISHED] is State.PENDING_ACCEPT
    assert a[State.PENDING_ACCEPT, Input.TCP_CLOSED] is State.CONNECTING
    for event in (Input.RECV_CONNECT_REJECT, Input.RECV_CONNECT_NO_MATCH, Input.TIMEOUT):
        assert a[State.PENDING_ACCEPT, event] is State.DISCONNECTED
    assert a[State.PENDING_ACCEPT, Input.RECV_CONNECT_ACCEPT] is State.CONNECTED
    assert a[State.CONNECTED, Input.DISCONNECT] is State.DISCONNECTED
    assert a[State.CONNECTED, Input.TCP_CLOSED] is State.DISCONNECTED
    # §4: the peer-to-peer active end retries on NoMatch.
    assert PEER_ACTIVE_TRANSITIONS[State.PENDING_ACCEPT, Input.RECV_CONNECT_NO_MATCH] is (
        State.CONNECTING
    )
    # §4.3 figure.
    p = PASSIVE_TRANSITIONS
    assert p[State.LISTENING, Input.TCP_ACCEPTED] is State.INCOMING
    assert p[State.INCOMING, Input.TIMEOUT] is State.DISCONNECTED
    assert p[State.INCOMING, Input.TCP_CLOSED] is State.DISCONNECTED
    assert p[State.INCOMING, Input.RECV_CONNECT_REQUEST] is State.MATCHING
    assert p[State.MATCHING, Input.NO_MATCH] is State.DISCONNECTED
    assert p[State.MATCHING, Input.MATCH] is State.PENDING_ACCEPT
    assert p[State.PENDING_ACCEPT, Input.REJECT] is State.DISCONNECTED
    assert p[State.PENDING_ACCEPT, Input.ACCEPT] is State.CONNECTED
    assert p[State.CONNECTED, Input.DISCONNECT] is State.DISCONNECTED


@pytest.mark.parametrize("name", list(TABLES))
def test_docs_draw_the_tables(name: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```mermaid\n(.*?)\n```", text, re.S)
    assert TABLES[name].mermaid() in blocks


# --- the endpoint --------------------------------------------------------------


def start(
    active: VitcpConfig, passive: VitcpConfig, called: bytes = b"svc"
) -> tuple[VitcpConnection, VitcpConnection, list[Event]]:
    a = VitcpConnection(active, ViRole.ACTIVE)
    b = VitcpConnection(passive, ViRole.PASSIVE)
    a.connect(0.0, called)
    b.tcp_accepted(0.0)
    a.tcp_established(0.0)
    events = b.receive_data(out(a), 0.0)
    return a, b, events


def test_request_carries_our_proposal() -> None:
    config = VitcpConfig(
        reliability=Reliability.RECEPTION,
        mtu=4000,
        read_window=3,
        crc=True,
        urgent_marker=True,
        flow_control=True,
        discriminator=b"me",
        initial_message_number=0xFFFFFFFF,
    )
    a = VitcpConnection(config, ViRole.ACTIVE)
    a.connect(1.0, b"you")
    assert state_of(a) is State.CONNECTING
    assert a.get_timer() == 1.0 + config.connect_timeout
    a.tcp_established(1.5)
    wire = out(a)
    seg = decode_segment(wire, length_includes_trailer=None)
    assert seg is not None and seg.ce is not None and seg.crc_ok
    assert seg.header.type is SegmentType.CONNECT_REQUEST
    assert seg.header.message_number == 0xFFFFFFFF
    assert seg.ce.attributes == (
        Attributes.RELIABLE_RECEPTION
        | Attributes.RDMA_WRITE
        | Attributes.RDMA_READ
        | Attributes.FLOW_CONTROL
    )
    assert (seg.ce.mtu, seg.ce.read_window) == (4000, 3)
    assert (seg.ce.calling_discriminator, seg.ce.called_discriminator) == (b"me", b"you")
    assert seg.ce.crc and seg.ce.urgent_marker and seg.ce.end_option


@pytest.mark.parametrize(
    ("crc_a", "crc_b"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_accept_negotiates_down(crc_a: bool, crc_b: bool) -> None:
    a, b, events = start(
        VitcpConfig(mtu=9000, read_window=8, crc=crc_a, urgent_marker=True),
        VitcpConfig(mtu=1500, read_window=2, crc=crc_b, discriminator=b"svc"),
    )
    (request,) = events
    assert isinstance(request, ConnectionRequested)
    assert request.called_discriminator == b"svc" and request.crc == crc_a
    assert b.match()
    b.accept()
    accept = decode_segment(out(b), length_includes_trailer=None)
    assert accept is not None and accept.ce is not None
    # §3.6: the Accept names the CRC option only if the Request did; it has a
    # trailer iff it names it.
    assert accept.ce.crc == (crc_a and crc_b)
    assert (accept.trailer is not None) == (crc_a and crc_b)
    assert accept.ce.mtu == 1500 and accept.ce.read_window == 2
    (connected_b,) = [e for e in b.take_events() if isinstance(e, Connected)]
    b_out = accept_wire = encode_again(accept.ce, crc_a and crc_b)
    events_a = a.receive_data(b_out, 0.0)
    (connected_a,) = events_a
    assert isinstance(connected_a, Connected)
    for params in (connected_a.params, connected_b.params):
        assert params.mtu == 1500 and params.read_window == 2
        assert params.crc == (crc_a and crc_b)
    assert connected_b.params.urgent_allowed and not connected_a.params.urgent_allowed
    assert state_of(a) is State.CONNECTED and b.state is State.CONNECTED
    assert accept_wire


def encode_again(ce: CeHeader, trailer: bool) -> bytes:
    parts = encode_segment(SegmentHeader(SegmentType.CONNECT_ACCEPT), ce=ce, trailer=trailer)
    return b"".join(bytes(p) for p in parts)


def test_accept_with_larger_mtu_is_cut_down() -> None:
    a, _, _ = start(VitcpConfig(mtu=1000), VitcpConfig())
    out(a)
    ce = CeHeader(Attributes.RELIABLE_DELIVERY, mtu=50000, read_window=99)
    (connected,) = a.receive_data(encode_again(ce, False), 0.0)
    assert isinstance(connected, Connected)
    assert connected.params.mtu == 1000 and connected.params.read_window == 4


@pytest.mark.parametrize(
    "passive",
    [
        VitcpConfig(reliability=Reliability.RECEPTION),
        VitcpConfig(reliability=Reliability.UNRELIABLE),
        VitcpConfig(peer_to_peer=True),
    ],
)
def test_passive_rejects_attribute_mismatch(passive: VitcpConfig) -> None:
    a, b, _ = start(VitcpConfig(), passive)
    assert not b.match()
    assert state_of(b) is State.DISCONNECTED
    (closed,) = b.take_events()
    assert isinstance(closed, ViConnectionClosed)
    assert isinstance(closed.error, AttributeMismatchError)
    reject = out(b)
    assert reject[1] & 0x1F == SegmentType.CONNECT_REJECT and len(reject) == HEADER_SIZE
    events = a.receive_data(reject, 0.0)
    assert isinstance(events[0], ViConnectionRejected) and not events[0].no_match
    assert isinstance(events[1], ViConnectionClosed)
    assert state_of(a) is State.DISCONNECTED


def test_flow_control_and_rdma_bits_need_not_match() -> None:
    _, b, _ = start(VitcpConfig(flow_control=True, rdma_read=False), VitcpConfig(rdma_write=False))
    assert b.match()


def test_active_checks_the_accept() -> None:
    a, _, _ = start(VitcpConfig(), VitcpConfig())
    ce = CeHeader(Attributes.RELIABLE_RECEPTION, mtu=1000)
    events = a.receive_data(encode_again(ce, False), 0.0)
    assert isinstance(events[-1], ViConnectionClosed)
    assert isinstance(events[-1].error, AttributeMismatchError)
    assert state_of(a) is State.DISCONNECTED


def test_no_match_and_reject() -> None:
    a, b, _ = start(VitcpConfig(), VitcpConfig())
    b.no_match()
    assert state_of(b) is State.DISCONNECTED
    wire = out(b)
    assert wire[1] & 0x1F == SegmentType.CONNECT_NO_MATCH
    events = a.receive_data(wire, 0.0)
    assert isinstance(events[0], ViConnectionRejected) and events[0].no_match
    a, b, _ = start(VitcpConfig(), VitcpConfig())
    assert b.match()
    b.reject()
    events = a.receive_data(out(b), 0.0)
    assert isinstance(events[0], ViConnectionRejected) and not events[0].no_match


def test_reject_with_trailer_either_reading() -> None:
    from iwarp.vitcp.crc import crc

    for length in (HEADER_SIZE, HEADER_SIZE + 4):
        a, _, _ = start(VitcpConfig(crc=True), VitcpConfig())
        body = SegmentHeader(SegmentType.CONNECT_REJECT, length=length).pack()
        events = a.receive_data(body + crc(body), 0.0)
        assert isinstance(events[0], ViConnectionRejected)


def test_peer_to_peer_retries_on_no_match_until_timeout() -> None:
    config = VitcpConfig(peer_to_peer=True, connect_timeout=5.0)
    a = VitcpConnection(config, ViRole.ACTIVE)
    a.connect(0.0, b"peer")
    for attempt in range(3):
        a.tcp_established(attempt)
        out(a)
        events = a.receive_data(SegmentHeader(SegmentType.CONNECT_NO_MATCH).pack(), 0.0)
        assert isinstance(events[0], ReconnectNeeded)
        assert state_of(a) is State.CONNECTING
    a.handle_timer(4.9)
    assert state_of(a) is State.CONNECTING
    events = a.handle_timer(5.0)
    assert state_of(a) is State.DISCONNECTED
    assert isinstance(events[-1], ViConnectionClosed)


def test_peer_role_by_address() -> None:
    assert peer_role("10.0.0.2", "10.0.0.1") is ViRole.ACTIVE
    assert peer_role("10.0.0.1", "10.0.0.2") is ViRole.PASSIVE
    assert peer_role("::2", "::1") is ViRole.ACTIVE
    assert peer_role("127.0.0.1", "127.0.0.1", b"b", b"a") is ViRole.ACTIVE
    with pytest.raises(ValueError, match="same IP version"):
        peer_role("::1", "127.0.0.1")
    with pytest.raises(ValueError, match="different discriminators"):
        peer_role("127.0.0.1", "127.0.0.1", b"x", b"x")


def test_tcp_close_while_pending_accept_reestablishes() -> None:
    a, _, _ = start(VitcpConfig(), VitcpConfig())
    events = a.connection_lost(0.1)
    assert state_of(a) is State.CONNECTING
    assert isinstance(events[0], ReconnectNeeded)
    a.tcp_established(0.2)
    assert state_of(a) is State.PENDING_ACCEPT
    assert out(a)[1] & 0x1F == SegmentType.CONNECT_REQUEST


def test_timeouts() -> None:
    a, b, _ = start(VitcpConfig(connect_timeout=2.0), VitcpConfig())
    a.handle_timer(1.0)
    assert state_of(a) is State.PENDING_ACCEPT
    a.handle_timer(2.0)
    assert state_of(a) is State.DISCONNECTED
    c = VitcpConnection(VitcpConfig(incoming_timeout=3.0), ViRole.PASSIVE)
    c.tcp_accepted(10.0)
    assert c.get_timer() == 13.0
    c.handle_timer(13.0)
    assert state_of(c) is State.DISCONNECTED
    assert b.get_timer() is None  # Matching: waiting for the consumer


def test_tcp_failure() -> None:
    a = VitcpConnection(VitcpConfig(), ViRole.ACTIVE)
    a.connect(0.0)
    a.tcp_failed(0.1)
    assert state_of(a) is State.DISCONNECTED
    assert isinstance(a.take_events()[0], ViConnectionClosed)


@pytest.mark.parametrize(
    ("segment", "error"),
    [
        (SegmentHeader(SegmentType.SEND).pack(), UnexpectedSegmentError),
        (SegmentHeader(SegmentType.NOP).pack(), UnexpectedSegmentError),
        (
            SegmentHeader(SegmentType.CONNECT_ACCEPT, length=HEADER_SIZE + 140).pack() + bytes(140),
            UnexpectedSegmentError,
        ),
        (b"\x02" + bytes(23), MalformedSegmentError),  # §3.2: version 1 only
        (b"\x01\x1f" + bytes(22), MalformedSegmentError),  # no segment type 31
    ],
)
def test_passive_closes_on_anything_but_a_request(segment: bytes, error: type) -> None:
    b = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    b.tcp_accepted(0.0)
    events = b.receive_data(segment, 0.0)
    assert state_of(b) is State.DISCONNECTED
    assert isinstance(events[-1], ViConnectionClosed) and type(events[-1].error) is error


def test_bad_crc_on_request_closes() -> None:
    a = VitcpConnection(VitcpConfig(crc=True), ViRole.ACTIVE)
    a.connect(0.0)
    a.tcp_established(0.0)
    wire = bytearray(out(a))
    wire[-1] ^= 0xFF
    b = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    b.tcp_accepted(0.0)
    events = b.receive_data(wire, 0.0)
    assert isinstance(events[-1], ViConnectionClosed)
    assert isinstance(events[-1].error, CrcMismatchError)


@pytest.mark.parametrize("order", list(CrcOrder))
@pytest.mark.parametrize("includes", [False, True])
def test_peer_readings_are_detected(order: CrcOrder, includes: bool) -> None:
    other = VitcpConfig(crc=True, crc_order=order, length_includes_trailer=includes)
    a, b, events = start(other, VitcpConfig(crc=True))
    assert isinstance(events[0], ConnectionRequested)
    assert b.match()
    b.accept()
    a.receive_data(out(b), 0.0)
    (connected,) = [e for e in b.take_events() if isinstance(e, Connected)]
    assert connected.params.peer_length_includes_trailer is includes
    assert connected.params.crc
    b.post_receive(1)
    assert out(b) == b""  # nothing to acknowledge yet
    a.send(b"x" * 100)
    (message,) = b.receive_data(out(a), 0.0)
    assert getattr(message, "data", None) == b"x" * 100


def test_usage_errors() -> None:
    a = VitcpConnection(VitcpConfig(), ViRole.ACTIVE)
    with pytest.raises(VitcpUsageError):
        a.accept()
    with pytest.raises(VitcpUsageError):
        a.send(b"early")
    with pytest.raises(VitcpUsageError):
        a.connect(0.0, bytes(65))
    b = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    with pytest.raises(VitcpUsageError):
        b.connect(0.0)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="MTU"):
        VitcpConfig(mtu=0)
    with pytest.raises(ValueError, match="discriminator"):
        VitcpConfig(discriminator=bytes(65))
    with pytest.raises(ValueError, match="window"):
        VitcpConfig(read_window=-1)
    with pytest.raises(ValueError, match="32 bits"):
        VitcpConfig(initial_message_number=1 << 32)


def _reach(role: ViRole, target: State) -> VitcpConnection:
    """An endpoint of ``role`` driven into ``target`` through the public API."""
    config = VitcpConfig(discriminator=b"svc")
    if role is ViRole.ACTIVE:
        a = VitcpConnection(config, ViRole.ACTIVE)
        if target is State.DISCONNECTED:
            return a
        a.connect(0.0, b"svc")
        if target is State.CONNECTING:
            return a
        a.tcp_established(0.0)
        if target is State.PENDING_ACCEPT:
            return a
        b = VitcpConnection(config, ViRole.PASSIVE)
        b.tcp_accepted(0.0)
        b.receive_data(out(a), 0.0)
        b.match()
        b.accept()
        a.receive_data(out(b), 0.0)
        return a
    b = VitcpConnection(config, ViRole.PASSIVE)
    if target is State.LISTENING:
        return b
    b.tcp_accepted(0.0)
    if target is State.INCOMING:
        return b
    a = VitcpConnection(config, ViRole.ACTIVE)
    a.connect(0.0, b"svc")
    a.tcp_established(0.0)
    b.receive_data(out(a), 0.0)
    if target is State.MATCHING:
        return b
    b.match()
    if target is State.PENDING_ACCEPT:
        return b
    b.accept()
    return b


LOCAL_CALLS: dict[Input, Callable[[VitcpConnection], object]] = {
    Input.CONNECT_REQUEST: lambda c: c.connect(0.0),
    Input.ACCEPT: lambda c: c.accept(),
    Input.REJECT: lambda c: c.reject(),
    Input.DISCONNECT: lambda c: c.close(),
    Input.MATCH: lambda c: c.match(),
    Input.NO_MATCH: lambda c: c.no_match(),
}
REACHABLE = {
    ViRole.ACTIVE: [State.DISCONNECTED, State.CONNECTING, State.PENDING_ACCEPT, State.CONNECTED],
    ViRole.PASSIVE: [
        State.LISTENING,
        State.INCOMING,
        State.MATCHING,
        State.PENDING_ACCEPT,
        State.CONNECTED,
    ],
}


@pytest.mark.parametrize("role", list(ViRole))
def test_endpoint_follows_its_table_for_every_local_input(role: ViRole) -> None:
    table = ACTIVE_TRANSITIONS if role is ViRole.ACTIVE else PASSIVE_TRANSITIONS
    for state in REACHABLE[role]:
        for event, call in LOCAL_CALLS.items():
            endpoint = _reach(role, state)
            assert state_of(endpoint) is state
            if (state, event) in table:
                call(endpoint)
                assert state_of(endpoint) is table[state, event]
            else:
                with pytest.raises(VitcpUsageError):
                    call(endpoint)
                assert state_of(endpoint) is state


def _ce_segment(seg_type: SegmentType) -> bytes:
    ce = CeHeader(
        VitcpConfig().attributes,
        mtu=1000,
        calling_discriminator=b"svc",
        called_discriminator=b"svc",
    )
    parts = encode_segment(SegmentHeader(seg_type), ce=ce)
    return b"".join(bytes(p) for p in parts)


REMOTE_SEGMENTS: dict[Input, bytes] = {
    Input.RECV_CONNECT_REQUEST: _ce_segment(SegmentType.CONNECT_REQUEST),
    Input.RECV_CONNECT_ACCEPT: _ce_segment(SegmentType.CONNECT_ACCEPT),
    Input.RECV_CONNECT_REJECT: SegmentHeader(SegmentType.CONNECT_REJECT).pack(),
    Input.RECV_CONNECT_NO_MATCH: SegmentHeader(SegmentType.CONNECT_NO_MATCH).pack(),
}


@pytest.mark.parametrize("role", list(ViRole))
def test_endpoint_follows_its_table_for_every_peer_segment(role: ViRole) -> None:
    table = ACTIVE_TRANSITIONS if role is ViRole.ACTIVE else PASSIVE_TRANSITIONS
    for state in REACHABLE[role]:
        for event, segment in REMOTE_SEGMENTS.items():
            endpoint = _reach(role, state)
            endpoint.receive_data(segment, 0.0)
            if (state, event) in table:
                expected = table[state, event]
            elif (state, Input.PROTOCOL_ERROR) in table:
                expected = State.DISCONNECTED  # anything else the peer sends
            else:
                expected = state  # no TCP connection to receive on: ignored
            assert state_of(endpoint) is expected, (state, event)


@pytest.mark.parametrize("role", list(ViRole))
def test_endpoint_tcp_inputs_in_every_state(role: ViRole) -> None:
    table = ACTIVE_TRANSITIONS if role is ViRole.ACTIVE else PASSIVE_TRANSITIONS
    calls: dict[Input, Callable[[VitcpConnection], object]] = {
        Input.TCP_ESTABLISHED: lambda c: c.tcp_established(0.0),
        Input.TCP_ACCEPTED: lambda c: c.tcp_accepted(0.0),
        Input.TCP_FAILED: lambda c: c.tcp_failed(0.0),
        Input.TCP_CLOSED: lambda c: c.connection_lost(0.0),
        Input.TIMEOUT: lambda c: c.handle_timer(1e9),
    }
    for state in REACHABLE[role]:
        for event, call in calls.items():
            endpoint = _reach(role, state)
            if (state, event) in table:
                call(endpoint)
                assert state_of(endpoint) is table[state, event], (state, event)
            elif event in LOCAL_INPUTS:
                with pytest.raises(VitcpUsageError):
                    call(endpoint)
            else:
                call(endpoint)  # TCP closing or a timer with nothing to do
                assert state_of(endpoint) is state, (state, event)


@settings(max_examples=150, deadline=None)
@given(
    role=st.sampled_from(list(ViRole)),
    pick=st.integers(0, 4),
    data=st.binary(max_size=200),
    split=st.integers(0, 200),
)
def test_fuzz_endpoint_during_establishment(
    role: ViRole, pick: int, data: bytes, split: int
) -> None:
    """Arbitrary octets in any state before CONNECTED: only events, never an
    exception; a connection closes at most once and is then disconnected."""
    states = [s for s in REACHABLE[role] if s is not State.CONNECTED]
    for blob in (data, b"\x01" + data[1:]):  # the second one passes the version check
        endpoint = _reach(role, states[pick % len(states)])
        events = endpoint.receive_data(blob[:split], 0.0) + endpoint.receive_data(blob[split:], 0.0)
        out(endpoint)
        closed = [e for e in events if isinstance(e, ViConnectionClosed)]
        assert len(closed) <= 1
        assert not closed or state_of(endpoint) is State.DISCONNECTED


def test_docs_sans_io_example_runs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    first = re.findall(r"```python\n(.*?)\n```", text, re.S)[0]
    exec(compile(first, "docs/vitcp.md", "exec"), {"now": 0.0})


def test_every_connect_segment_has_a_handler() -> None:
    """§3.3: the handshake dispatch table knows each connect segment type."""
    from iwarp.vitcp.connection import _HANDSHAKE_HANDLERS
    from iwarp.vitcp.wire import CONNECT_TYPES

    assert set(_HANDSHAKE_HANDLERS) == set(CONNECT_TYPES)
