"""MpaConnection: the state tables walked through the public API, the
hand-off to framing, fencing, delayed and culley-02 startup, timeouts, EOF."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from helpers import MpaConn, all_splits, chunked, out
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import (
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    Event,
    NegotiationFailed,
    RequestReceived,
    StreamDataReceived,
    UlpduReceived,
)
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.handshake import (
    INITIATOR_TRANSITIONS,
    LOCAL_INPUTS,
    RESPONDER_TRANSITIONS,
    MpaInput,
    MpaState,
    transition,
    transitions_for,
)
from iwarp.mpa.wire import REPLY_KEY, REQUEST_KEY, RtrFlags

# --- building connections in every state ------------------------------------------


def pair(
    icfg: MpaConfig | None = None, rcfg: MpaConfig | None = None, pd: bytes = b""
) -> tuple[MpaConnection, MpaConnection]:
    """An Initiator and a Responder, the Request delivered to the Responder."""
    init = MpaConn(Role.INITIATOR, icfg or MpaConfig(), private_data=pd)
    resp = MpaConn(Role.RESPONDER, rcfg or MpaConfig())
    resp.receive_data(out(init), 0.0)
    return init, resp


def established(
    icfg: MpaConfig | None = None, rcfg: MpaConfig | None = None
) -> tuple[MpaConnection, MpaConnection]:
    init, resp = pair(icfg, rcfg)
    resp.accept()
    init.receive_data(out(resp), 0.0)
    assert init.state is MpaState.FULL_OPERATION
    return init, resp


def fpdu(ulpdu: bytes = b"x", *, crc: bool = True, bad: bool = False) -> bytes:
    data = bytearray(FpduEncoder(crc=crc).encode_bytes(ulpdu))
    if bad:
        data[-1] ^= 0xFF
    return bytes(data)


def in_state(role: Role, state: MpaState) -> MpaConnection:
    """A connection of ``role`` in ``state``, reached through the API only."""
    if state is MpaState.IDLE:
        return MpaConn(None)
    if role is Role.INITIATOR:
        init = MpaConn(Role.INITIATOR)
        if state is MpaState.AWAIT_REPLY:
            return init
        resp = MpaConn(Role.RESPONDER)
        resp.receive_data(out(init), 0.0)
        if state is MpaState.EXITED:
            resp.reject()
            init.receive_data(out(resp), 0.0)
        elif state is MpaState.FAILED:
            init.receive_data(b"garbage!", 0.0)
        elif state is MpaState.CLOSED:
            init.close()
        else:
            resp.accept()
            init.receive_data(out(resp), 0.0)
            if state is MpaState.SEND_ONLY:
                init.receive_data(b"", 0.0)
    else:
        resp = MpaConn(Role.RESPONDER)
        if state is MpaState.AWAIT_REQUEST:
            return resp
        if state is MpaState.FAILED:
            resp.receive_data(b"garbage!", 0.0)
            return resp
        if state is MpaState.CLOSED:
            resp.close()
            return resp
        init = MpaConn(Role.INITIATOR)
        resp.receive_data(out(init), 0.0)
        if state is MpaState.EXITED:
            resp.reject()
        elif state is not MpaState.AWAIT_DECISION:
            resp.accept()
            init.receive_data(out(resp), 0.0)
            if state is not MpaState.AWAIT_FIRST_FPDU:
                init.send_ulpdu(b"first")
                resp.receive_data(out(init), 0.0)
                if state is MpaState.SEND_ONLY:
                    resp.receive_data(b"", 0.0)
    conn = init if role is Role.INITIATOR else resp
    assert conn.state is state, (role, state, conn.state)
    return conn


ROLE_STATES = {
    Role.INITIATOR: [
        MpaState.IDLE,
        MpaState.AWAIT_REPLY,
        MpaState.FULL_OPERATION,
        MpaState.SEND_ONLY,
        MpaState.EXITED,
        MpaState.CLOSED,
        MpaState.FAILED,
    ],
    Role.RESPONDER: [
        MpaState.IDLE,
        MpaState.AWAIT_REQUEST,
        MpaState.AWAIT_DECISION,
        MpaState.AWAIT_FIRST_FPDU,
        MpaState.FULL_OPERATION,
        MpaState.SEND_ONLY,
        MpaState.EXITED,
        MpaState.CLOSED,
        MpaState.FAILED,
    ],
}

LOCAL_CALLS: dict[MpaInput, Callable[[MpaConnection], object]] = {
    MpaInput.START_INITIATOR: lambda c: c.start(Role.INITIATOR),
    MpaInput.START_RESPONDER: lambda c: c.start(Role.RESPONDER),
    MpaInput.START_FRAMED: lambda c: c.start_framed(),
    MpaInput.ACCEPT: lambda c: c.accept(),
    MpaInput.REJECT: lambda c: c.reject(),
    MpaInput.SEND_ULPDU: lambda c: c.send_ulpdu(b"u"),
    MpaInput.SEND_STREAM: lambda c: c.send_stream(b"s"),
    MpaInput.CLOSE: lambda c: c.close(),
    MpaInput.REFUSE_REPLY: lambda c: c.refuse_reply(),
}


def test_every_state_reachable() -> None:
    for role, states in ROLE_STATES.items():
        table = transitions_for(role)
        assert {s for s, _ in table} | set(table.values()) == set(states)


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize("event", sorted(LOCAL_INPUTS, key=str))
def test_local_inputs_follow_the_table(role: Role, event: MpaInput) -> None:
    """Every (state, local input): the API does what the table says, or
    raises LocalProtocolError and changes nothing."""
    for state in ROLE_STATES[role]:
        conn = in_state(role, state)
        table_role = {MpaInput.START_INITIATOR: Role.INITIATOR}.get(event, role)
        if event is MpaInput.START_RESPONDER:
            table_role = Role.RESPONDER
        expected = transitions_for(table_role).get((state, event))
        if expected is None:
            with pytest.raises(LocalProtocolError):
                LOCAL_CALLS[event](conn)
            assert conn.state is state, (state, event)
        else:
            LOCAL_CALLS[event](conn)
            assert conn.state is expected, (state, event)


@pytest.mark.parametrize("role", list(Role))
def test_remote_inputs_outside_the_table_are_protocol_errors(role: Role) -> None:
    table = transitions_for(role)
    for state in MpaState:
        for event in MpaInput:
            if event in LOCAL_INPUTS or (state, event) in table:
                continue
            with pytest.raises(MpaError) as info:
                transition(role, state, event)
            assert info.value.mpa_code is MpaErrorCode.INVALID_FRAME


def _request() -> bytes:
    return out(MpaConn(Role.INITIATOR))


def _reply(*, reject: bool = False, crc: bool = True) -> bytes:
    resp = MpaConn(Role.RESPONDER, MpaConfig(crc=crc))
    resp.receive_data(_request(), 0.0)
    if reject:
        resp.reject()
    else:
        resp.accept()
    return out(resp)


# (state, remote input) -> how to produce it, for every remote transition.
REMOTE_STIMULI: dict[MpaInput, Callable[[MpaConnection], object]] = {
    MpaInput.STREAM_DATA: lambda c: c.receive_data(b"stream", 0.0),
    MpaInput.REQUEST: lambda c: c.receive_data(_request(), 0.0),
    MpaInput.REPLY_ACCEPT: lambda c: c.receive_data(_reply(), 0.0),
    MpaInput.REPLY_REJECT: lambda c: c.receive_data(_reply(reject=True), 0.0),
    MpaInput.BAD_FRAME: lambda c: c.receive_data(b"NOT an MPA frame", 0.0),
    MpaInput.FPDU: lambda c: c.receive_data(fpdu(), 0.0),
    MpaInput.BAD_FPDU: lambda c: c.receive_data(fpdu(bad=True), 0.0),
    MpaInput.PEER_CLOSED: lambda c: c.receive_data(b"", 0.0),
    MpaInput.CONNECTION_LOST: lambda c: c.connection_lost(0.0),
    MpaInput.TIMEOUT: lambda c: c.handle_timer(1e9),
}


@pytest.mark.parametrize("role", list(Role))
def test_remote_transitions_through_the_api(role: Role) -> None:
    table = INITIATOR_TRANSITIONS if role is Role.INITIATOR else RESPONDER_TRANSITIONS
    covered = 0
    for (state, event), expected in table.items():
        if event in LOCAL_INPUTS:
            continue
        conn: MpaConnection
        if (state, event) == (MpaState.AWAIT_DECISION, MpaInput.BAD_FRAME):
            conn = MpaConn(Role.RESPONDER, MpaConfig(receive_buffer_limit=100))
            conn.receive_data(_request(), 0.0)
            conn.receive_data(bytes(101), 0.0)
        elif event is MpaInput.REPLY_REFUSED:
            conn = MpaConn(Role.INITIATOR, MpaConfig(crc_required=True))
            conn.receive_data(_reply(crc=False), 0.0)
        else:
            conn = in_state(role, state)
            REMOTE_STIMULI[event](conn)
        assert conn.state is expected, (state, event, conn.take_events())
        covered += 1
    assert covered >= 15


# --- startup behaviour -------------------------------------------------------------


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_immediate_startup_with_private_data() -> None:
    init, resp = pair(pd=b"hello")
    (req,) = resp.take_events()
    assert isinstance(req, RequestReceived) and req.private_data == b"hello"
    params = resp.accept(b"welcome")
    init.receive_data(out(resp), 0.0)
    (est,) = init.take_events()
    assert isinstance(est, ConnectionEstablished)
    assert est.params.peer_private_data == b"welcome"
    assert params.peer_private_data == b"hello"
    assert out(init) == b""


def test_fpdu_in_the_same_chunk_as_the_reply() -> None:
    _, resp = pair()
    resp.accept()
    reply = out(resp)
    # A Responder that breaks rule 4 (or a coalescing middlebox): nothing lost.
    encoder = FpduEncoder()
    early = encoder.encode_bytes(b"early")
    for pieces in all_splits(reply + early):
        conn = MpaConn(Role.INITIATOR)
        got: list[Event] = []
        for piece in filter(None, pieces):  # b"" would mean FIN
            conn.receive_data(piece, 0.0)
            got += conn.take_events()
        assert kinds(got) == ["ConnectionEstablished", "UlpduReceived"]
        assert isinstance(got[1], UlpduReceived) and bytes(got[1].data) == b"early"
        # The next FPDU continues the same stream (markers/CRC state kept).
        conn.receive_data(FpduEncoder(position=encoder.position).encode_bytes(b"late"), 0.0)
        (late,) = conn.take_events()
        assert isinstance(late, UlpduReceived) and bytes(late.data) == b"late"


def test_request_and_fpdu_in_one_chunk_held_until_accept() -> None:
    init = MpaConn(Role.INITIATOR)
    request = out(init)
    data = request + fpdu(b"soon")
    resp = MpaConn(Role.RESPONDER)
    resp.receive_data(data, 0.0)
    assert kinds(resp.take_events()) == ["RequestReceived"]
    resp.accept()
    ev = resp.take_events()
    assert kinds(ev) == ["ConnectionEstablished", "UlpduReceived"]
    assert not resp.fenced


def test_responder_fencing() -> None:
    init, resp = pair()
    resp.accept()
    reply = out(resp)
    resp.send_ulpdu(b"held 1")
    resp.send_ulpdu(b"held 2")
    assert resp.fenced
    assert out(resp) == b""  # rule 4
    init.receive_data(reply, 0.0)
    init.send_ulpdu(b"")  # e.g. an RTR: any valid FPDU lifts the fence
    wire = out(init)
    resp.receive_data(wire[:3], 0.0)
    assert resp.fenced
    assert out(resp) == b""
    resp.receive_data(wire[3:], 0.0)
    assert not resp.fenced
    ev = resp.take_events()
    assert kinds(ev)[-1] == "UlpduReceived"
    init.receive_data(out(resp), 0.0)
    got = [bytes(e.data) for e in init.take_events() if isinstance(e, UlpduReceived)]
    assert got == [b"held 1", b"held 2"]


def test_bad_first_fpdu_keeps_fence() -> None:
    _, resp = pair()
    resp.accept()
    out(resp)
    resp.send_ulpdu(b"never")
    resp.receive_data(fpdu(bad=True), 0.0)
    (failed,) = [e for e in resp.take_events() if isinstance(e, ConnectionFailed)]
    assert failed.error.mpa_code is MpaErrorCode.CRC_MISMATCH and not failed.close
    assert resp.state is MpaState.FAILED and out(resp) == b""


@pytest.mark.parametrize("markers", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("crc", [(False, False), (True, False), (False, True)])
def test_data_flows_as_negotiated(markers: tuple[bool, bool], crc: tuple[bool, bool]) -> None:
    icfg = MpaConfig(markers=markers[0], crc=crc[0])
    rcfg = MpaConfig(markers=markers[1], crc=crc[1])
    init, resp = established(icfg, rcfg)
    resp.take_events()
    messages = [bytes([i]) * (i * 37 % 1500) for i in range(1, 30)]
    for m in messages:
        init.send_ulpdu(m)
    wire = out(init)
    # Markers are present exactly when the Responder asked (M per direction):
    # an FPDU is length, ULPDU, pad and CRC (RFC 5044 §4.1), plus a 4-octet
    # marker at the first FPDU and every 512th octet after it (§7.1.2).
    unmarked = sum(2 + len(m) + -(2 + len(m)) % 4 + 4 for m in messages)
    marker_count = -(-len(wire) // 512) if markers[1] else 0
    assert len(wire) == unmarked + 4 * marker_count
    for piece in chunked(wire, [1, 7, 300, 1500]):
        resp.receive_data(piece, 0.0)
    got = [bytes(e.data) for e in resp.take_events() if isinstance(e, UlpduReceived)]
    assert got == messages
    for m in messages:
        resp.send_ulpdu(m)
    init.receive_data(out(resp), 0.0)
    back = [bytes(e.data) for e in init.take_events() if isinstance(e, UlpduReceived)]
    assert back == messages
    params = init.params
    assert params is not None and params.crc == (crc[0] or crc[1])
    if not params.crc:
        assert wire.endswith(bytes(4))  # CRC field present, zero


def test_reject_leaves_stream_open() -> None:
    init, resp = pair()
    resp.reject(b"go away")
    _, rej = resp.take_events()
    assert isinstance(rej, ConnectionRejected) and not rej.by_peer
    resp.send_stream(b"bye\n")
    init.receive_data(out(resp), 0.0)
    ev = init.take_events()
    assert kinds(ev) == ["ConnectionRejected", "StreamDataReceived"]
    assert isinstance(ev[0], ConnectionRejected) and ev[0].by_peer
    assert ev[0].private_data == b"go away"
    assert isinstance(ev[1], StreamDataReceived) and ev[1].data == b"bye\n"
    assert init.state is MpaState.EXITED


def test_policy_refusal_sends_reject() -> None:
    init, resp = pair(MpaConfig(crc=False), MpaConfig(crc_required=True))
    (ev,) = resp.take_events()
    assert isinstance(ev, ConnectionRejected) and "crc_required" in ev.reason
    init.receive_data(out(resp), 0.0)
    (rej,) = init.take_events()
    assert isinstance(rej, ConnectionRejected) and rej.by_peer


def test_non_permissive_rev0_request_gets_reply_then_close() -> None:
    init, resp = pair(MpaConfig(revision=0), MpaConfig(revision=1))
    (failed,) = resp.take_events()
    assert isinstance(failed, ConnectionFailed) and failed.close
    assert "Appendix C.2.1" in failed.error.message and resp.must_close
    reply = out(resp)
    assert reply[:16] == REPLY_KEY and reply[17] == 1
    init.receive_data(reply, 0.0)
    (ifail,) = init.take_events()
    assert isinstance(ifail, ConnectionFailed) and ifail.error.mpa_code == 4


def test_negotiation_failure_follows_establishment() -> None:
    icfg = MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND)
    init, resp = pair(icfg, MpaConfig(rtr_types=RtrFlags.READ))
    resp.accept()
    init.receive_data(out(resp), 0.0)
    ev = init.take_events()
    assert kinds(ev) == ["ConnectionEstablished", "NegotiationFailed"]
    assert isinstance(ev[1], NegotiationFailed) and ev[1].error.code == 7
    init.send_ulpdu(b"terminate")  # the upper layer can still send its TERM


# --- delayed startup, culley-02 ------------------------------------------------------


def test_delayed_startup_with_last_streaming_message_and_read_ahead() -> None:
    a = MpaConn(None)  # will be the Initiator
    b = MpaConn(None)  # will be the Responder
    a.send_stream(b"HELLO let's go MPA\n")
    b.receive_data(out(a), 0.0)
    assert kinds(b.take_events()) == ["StreamDataReceived"]
    b.start(Role.RESPONDER, last_streaming=b"HELLO-ACK\n")
    wire = out(b)
    assert wire == b"HELLO-ACK\n"
    a.receive_data(wire, 0.0)
    (ack,) = a.take_events()
    assert isinstance(ack, StreamDataReceived)
    a.start(Role.INITIATOR, private_data=b"pd")
    request = out(a)
    # The Responder's application read the Request together with the last
    # streaming data it was waiting for: it hands the surplus back.
    c = MpaConn(None)
    c.receive_data(b"HELLO let's go MPA\n" + request[:10], 0.0)
    (sd,) = c.take_events()
    assert isinstance(sd, StreamDataReceived)
    surplus = sd.data[len(b"HELLO let's go MPA\n") :]
    c.start(Role.RESPONDER, read_ahead=surplus)
    c.receive_data(request[10:], 0.0)
    (req,) = c.take_events()
    assert isinstance(req, RequestReceived) and req.private_data == b"pd"


def test_culley_both_directions() -> None:
    a, b = MpaConn(None), MpaConn(None)
    a.start_framed()
    b.start_framed()
    assert kinds(a.take_events()) == ["ConnectionEstablished"]
    a.send_ulpdu(b"one")
    wire = out(a)
    assert wire[:4] == bytes(4)  # seed 002 §8.1: the first four octets are a zero marker
    b.receive_data(wire, 0.0)
    got = [bytes(e.data) for e in b.take_events() if isinstance(e, UlpduReceived)]
    assert got == [b"one"]
    assert a.params is not None and a.params.markers_send and a.params.crc


def test_culley_one_direction_at_a_time() -> None:
    a, b = MpaConn(None), MpaConn(None)
    a.start_framed(send=True, receive=False)
    b.start_framed(send=False, receive=True)
    a.send_ulpdu(b"framed")
    b.send_stream(b"still streaming")
    b.receive_data(out(a), 0.0)
    a.receive_data(out(b), 0.0)
    assert [type(e) for e in a.take_events()] == [ConnectionEstablished, StreamDataReceived]
    b.start_framed(send=True)
    a.start_framed(receive=True)
    b.send_ulpdu(b"back")
    a.receive_data(out(b), 0.0)
    got = [bytes(e.data) for e in a.take_events() if isinstance(e, UlpduReceived)]
    assert got == [b"back"]
    with pytest.raises(LocalProtocolError):
        a.send_stream(b"no longer")


# --- timeouts and EOF ------------------------------------------------------------------


def test_responder_request_timeout() -> None:
    resp = MpaConn(Role.RESPONDER, MpaConfig(request_timeout=2.0), now=100.0)
    assert resp.get_timer() == 102.0
    resp.handle_timer(101.9)
    assert resp.state is MpaState.AWAIT_REQUEST
    resp.handle_timer(102.0)
    (ev,) = resp.take_events()
    assert isinstance(ev, ConnectionFailed) and ev.error.mpa_code is MpaErrorCode.TCP_CLOSED
    assert "Responder too" in ev.error.message and resp.get_timer() is None


def test_slow_frame_times_out_with_error_4() -> None:
    cfg = MpaConfig(frame_timeout=1.0, reply_timeout=60.0)
    init = MpaConn(Role.INITIATOR, cfg, now=0.0)
    reply = _reply()
    for t, octet in enumerate(reply[:5]):
        init.receive_data(bytes([octet]), now=0.3 * t)
    assert init.get_timer() == pytest.approx(1.0)
    init.handle_timer(1.0)
    (ev,) = init.take_events()
    assert isinstance(ev, ConnectionFailed) and ev.error.mpa_code is MpaErrorCode.INVALID_FRAME
    assert "incomplete MPA Reply" in ev.error.message and ev.close


@pytest.mark.parametrize("cut", [0, 5, 19, 21])
def test_fin_during_startup_is_error_1(cut: int) -> None:
    resp = MpaConn(Role.RESPONDER)
    resp.receive_data(_request()[:cut], 0.0)
    resp.receive_data(b"", 0.0)
    (ev,) = resp.take_events()
    assert isinstance(ev, ConnectionFailed) and ev.error.mpa_code is MpaErrorCode.TCP_CLOSED


def test_fin_in_full_operation() -> None:
    init, resp = established()
    resp.take_events()
    init.send_ulpdu(b"abc")
    wire = out(init)
    resp.receive_data(wire + b"", 0.0)
    resp.receive_data(b"", 0.0)
    assert kinds(resp.take_events())[-1] == "ConnectionClosed"
    assert resp.state is MpaState.SEND_ONLY
    resp.send_ulpdu(b"last words")  # half-close: the other half still sends
    # FIN in the middle of an FPDU is error 1.
    init2, resp2 = established()
    init2.send_ulpdu(b"abcdef")
    resp2.receive_data(out(init2)[:5], 0.0)
    resp2.receive_data(b"", 0.0)
    ev = resp2.take_events()[-1]
    assert isinstance(ev, ConnectionFailed) and ev.error.mpa_code is MpaErrorCode.TCP_CLOSED


def test_closed_once() -> None:
    conn = MpaConn(None)
    conn.receive_data(b"", 0.0)
    conn.receive_data(b"", 0.0)
    assert kinds(conn.take_events()) == ["ConnectionClosed"]


# --- properties ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=8),
    st.booleans(),
    st.booleans(),
    st.binary(max_size=40),
)
def test_any_chunking_gives_the_same_events(
    sizes: list[int], markers: bool, crc: bool, pd: bytes
) -> None:
    icfg = MpaConfig(markers=markers, crc=crc)
    _, reference_resp = pair(icfg, MpaConfig(markers=not markers), pd)
    reference_resp.accept(b"r")
    reply = out(reference_resp)
    init = MpaConn(Role.INITIATOR, icfg, private_data=pd)
    request = out(init)
    resp = MpaConn(Role.RESPONDER, MpaConfig(markers=not markers))
    for piece in chunked(request, sizes):
        resp.receive_data(piece, 0.0)
    assert kinds(resp.take_events()) == ["RequestReceived"]
    resp.accept(b"r")
    assert out(resp) == reply
    payloads = [bytes([n]) * n for n in range(0, 200, 23)]
    for p in payloads:
        resp.send_ulpdu(p)
    stream = reply
    got: list[Event] = []
    for piece in chunked(stream, sizes):
        init.receive_data(piece, 0.0)
        got += init.take_events()
    assert kinds(got) == ["ConnectionEstablished"]
    init.send_ulpdu(b"rtr")
    resp.receive_data(out(init), 0.0)
    for piece in chunked(out(resp), sizes):
        init.receive_data(piece, 0.0)
    assert [bytes(e.data) for e in init.take_events() if isinstance(e, UlpduReceived)] == payloads


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from(list(Role)), st.integers(1, 50))
def test_arbitrary_input_gives_only_events(data: bytes, role: Role, step: int) -> None:
    conn = MpaConn(role)
    for piece in chunked(data, [step]):
        conn.receive_data(piece, 0.0)
    conn.handle_timer(1e9)
    conn.receive_data(b"", 0.0)
    for ev in conn.take_events():
        if isinstance(ev, ConnectionFailed):
            assert ev.error.mpa_code in (1, 4)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_garbage_after_establishment(data: bytes, responder_side: bool) -> None:
    init, resp = established(MpaConfig(markers=True), MpaConfig(markers=True))
    conn = resp if responder_side else init
    conn.take_events()
    conn.receive_data(data, 0.0)
    conn.receive_data(b"", 0.0)
    for ev in conn.take_events():
        if isinstance(ev, ConnectionFailed):
            assert ev.error.mpa_code in (1, 2, 3)


def test_request_key_constants() -> None:
    assert out(MpaConn(Role.INITIATOR))[:16] == REQUEST_KEY


# --- a pair driven in random order --------------------------------------------------


class PairMachine(RuleBasedStateMachine):
    """An Initiator and a Responder whose API calls and byte deliveries
    interleave at random: every ULPDU arrives once, in order; the Responder
    sends nothing but its Reply before the Initiator's first FPDU arrives;
    nothing fails."""

    @initialize(markers=st.tuples(st.booleans(), st.booleans()), crc=st.booleans())
    def setup(self, markers: tuple[bool, bool], crc: bool) -> None:
        self.init = MpaConn(Role.INITIATOR, MpaConfig(markers=markers[0], crc=crc))
        self.resp = MpaConn(Role.RESPONDER, MpaConfig(markers=markers[1]))
        self.i2r = bytearray()
        self.r2i = bytearray()
        self.sent: dict[str, list[bytes]] = {"i": [], "r": []}
        self.got: dict[str, list[bytes]] = {"i": [], "r": []}

    def _collect(self) -> None:
        self.i2r += out(self.init)
        self.r2i += out(self.resp)
        for side, conn in (("i", self.init), ("r", self.resp)):
            for ev in conn.take_events():
                assert not isinstance(ev, ConnectionFailed), ev
                if isinstance(ev, UlpduReceived):
                    self.got[side].append(bytes(ev.data))

    @rule(n=st.integers(1, 700))
    def deliver_to_responder(self, n: int) -> None:
        self._collect()
        if self.i2r:
            chunk = bytes(self.i2r[:n])
            del self.i2r[:n]
            self.resp.receive_data(chunk, 0.0)
        self._collect()

    @rule(n=st.integers(1, 700))
    def deliver_to_initiator(self, n: int) -> None:
        self._collect()
        if self.r2i:
            chunk = bytes(self.r2i[:n])
            del self.r2i[:n]
            self.init.receive_data(chunk, 0.0)
        self._collect()

    @precondition(lambda self: self.resp.state is MpaState.AWAIT_DECISION)
    @rule(pd=st.binary(max_size=20))
    def accept(self, pd: bytes) -> None:
        self.resp.accept(pd)
        self._collect()

    @precondition(lambda self: self.init.state is MpaState.FULL_OPERATION)
    @rule(payload=st.binary(max_size=1200))
    def initiator_sends(self, payload: bytes) -> None:
        self.init.send_ulpdu(payload)
        self.sent["i"].append(payload)
        self._collect()

    @precondition(
        lambda self: self.resp.state in (MpaState.AWAIT_FIRST_FPDU, MpaState.FULL_OPERATION)
    )
    @rule(payload=st.binary(max_size=1200))
    def responder_sends(self, payload: bytes) -> None:
        fenced = self.resp.fenced
        self.resp.send_ulpdu(payload)
        self.sent["r"].append(payload)
        if fenced:
            assert out(self.resp) == b""  # rule 4
        self._collect()

    @invariant()
    def in_order_and_never_ahead(self) -> None:
        assert self.got["r"] == self.sent["i"][: len(self.got["r"])]
        assert self.got["i"] == self.sent["r"][: len(self.got["i"])]
        if self.resp.fenced:
            assert not self.got["r"]


TestPairMachine = PairMachine.TestCase
TestPairMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
