"""RFC 6581 RTR handling and the stream state machine table."""

from __future__ import annotations

import itertools

import pytest

from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.errors import LocalProtocolError, RemoteProtocolError
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.events import StreamReady
from iwarp.rdmap.memory import MemoryRegistry
from iwarp.rdmap.state import LOCAL_INPUTS, TRANSITIONS, StreamInput, StreamState, transition
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import ReadRequest
from iwarp.rdmap.work import RecvWR, SendWR, Sge, WorkOpcode
from rdmap.rdmap_harness import make_pair, pump


def test_write_rtr_bytes_match_siw() -> None:
    a, _ = make_pair(rtr=RtrFlags.WRITE)
    (rtr,) = a.stream.ulpdus_to_send()
    # siw-vm evidence p2p-write: "000e c140 00000001 00000000 00000000" (+ CRC).
    assert bytes(rtr).hex() == "c14000000001" + "00" * 8


def test_read_rtr_uses_nonzero_stags() -> None:
    a, _ = make_pair(rtr=RtrFlags.READ)
    (rtr,) = a.stream.ulpdus_to_send()
    header = UntaggedHeader.unpack_from(rtr)
    assert (header.qn, header.msn, header.mo, header.last, rtr[1]) == (1, 1, 0, True, 0x41)
    assert ReadRequest.unpack_from(rtr, 18) == ReadRequest(1, 0, 0, 1, 0)


@pytest.mark.parametrize("rtr", [RtrFlags.SEND, RtrFlags.WRITE, RtrFlags.READ])
def test_rtr_is_swallowed_and_comes_first(rtr: RtrFlags) -> None:
    a, b = make_pair(rtr=rtr, accept=RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ)
    buf = bytearray(5)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(buf)), wr_id=1))
    a.stream.post_send(SendWR(b"hello", wr_id=2))
    # The responder says nothing until the initiator's first message.
    b.stream.post_send(SendWR(b"early"))
    a.stream.post_recv(RecvWR(Sge(a.pd.register(bytearray(5)))))
    assert b.stream.ulpdus_to_send() == []
    assert b.events == []
    first, *rest = a.stream.ulpdus_to_send()
    assert b.stream.handle_ulpdu(bytes(first)) == [StreamReady()]
    for ulpdu in rest:
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    pump(a, b)
    recvs = [c for c in b.completions() if c.opcode is WorkOpcode.RECV]
    assert [(c.wr_id, c.byte_len) for c in recvs] == [(1, 5)]  # the RTR used no buffer
    assert buf == b"hello"
    sends = [c for c in a.completions() if c.opcode is not WorkOpcode.RECV]
    assert [c.wr_id for c in sends] == [2]  # the RTR has no completion
    if rtr == RtrFlags.SEND:
        assert UntaggedHeader.unpack_from(rest[0]).msn == 2


def test_siw_rtr_write_with_stag_1_and_read_with_sink_stag_0() -> None:
    # siw-vm evidence: p2p-write and p2p-read RTR frames from siw.
    write = bytes.fromhex("c14000000001" + "00" * 8)
    read = bytes.fromhex(
        "4141000000000000000100000001000000000000000000000000000000000000000000000001"
        "0000000000000000"
    )
    for raw, accept in ((write, RtrFlags.WRITE), (read, RtrFlags.READ)):
        registry = MemoryRegistry()
        b = RdmapStream(registry.alloc_pd(), initiator=False, mulpdu=1024, rtr=accept)
        assert b.handle_ulpdu(raw) == [StreamReady()]
        answer = b.ulpdus_to_send()
        if accept == RtrFlags.READ:
            # A zero-length Read Response to sink STag 0, TO 0.
            assert [bytes(u).hex() for u in answer] == ["c142" + "00" * 12]
        else:
            assert answer == []


def test_first_message_that_is_not_the_rtr() -> None:
    _, b = make_pair(accept=RtrFlags.WRITE)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(4)))))
    send = UntaggedHeader(0, 1, 0, rsvdulp=0x43).pack()
    b.events.extend(b.stream.handle_ulpdu(send))
    (term,) = b.terminates_sent()
    # LLP layer, MPA error type, RFC 6581 code 7: no matching RTR option.
    assert (term.header.layer, term.header.etype, term.header.code) == (2, 0, 7)
    assert term.header.ddp_header is None
    # A Read RTR refused when only Write was offered.
    _, c = make_pair(accept=RtrFlags.WRITE)
    c.stream.handle_ulpdu(TaggedHeader(1, 0, rsvdulp=0x40, last=False).pack())
    assert c.stream.state is StreamState.TERMINATING


def test_client_server_responder_waits_for_first_message() -> None:
    a, b = make_pair()
    b.stream.post_send(SendWR(b"x"))
    assert b.stream.ulpdus_to_send() == [] and not b.stream.has_data_to_send
    a.stream.post_recv(RecvWR(Sge(a.pd.register(bytearray(1)))))
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(1)))))
    a.stream.post_send(SendWR(b"y"))
    pump(a, b)
    assert [c.ok for c in a.completions()] == [True, True]


def test_stream_refuses_bad_rtr_configuration() -> None:
    pd = MemoryRegistry().alloc_pd()
    with pytest.raises(LocalProtocolError):
        RdmapStream(pd, initiator=True, mulpdu=1024, rtr=RtrFlags.WRITE | RtrFlags.READ)
    with pytest.raises(LocalProtocolError):
        RdmapStream(pd, initiator=True, mulpdu=1024, ord=0, rtr=RtrFlags.READ)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(StreamState, StreamInput)))
def test_every_state_input_pair(state: StreamState, event: StreamInput) -> None:
    if (state, event) in TRANSITIONS:
        assert transition(state, event) is TRANSITIONS[state, event]
    elif event in LOCAL_INPUTS:
        with pytest.raises(LocalProtocolError):
            transition(state, event)
    else:
        with pytest.raises(RemoteProtocolError):
            transition(state, event)


def _stream_in(state: StreamState) -> RdmapStream:
    """A responder driven into ``state`` through its API."""
    pd = MemoryRegistry().alloc_pd()
    stream = RdmapStream(pd, initiator=False, mulpdu=1024)
    if state is StreamState.WAIT_PEER:
        return stream
    if state is StreamState.CLOSED:
        stream.close()
        return stream
    stream.handle_ulpdu(TaggedHeader(1, 0, rsvdulp=0x40).pack())  # a zero-length Write
    if state is StreamState.OPERATIONAL:
        return stream
    stream.handle_ulpdu(UntaggedHeader(9, 1).pack())  # invalid QN: Terminate queued
    if state is StreamState.TERMINATED:
        stream.ulpdus_to_send()
    return stream


def _apply(stream: RdmapStream, event: StreamInput) -> None:
    pd = stream.pd
    if event is StreamInput.RECEIVE:
        stream.handle_ulpdu(TaggedHeader(1, 0, rsvdulp=0x40).pack())
    elif event is StreamInput.PROTOCOL_ERROR:
        stream.handle_ulpdu(UntaggedHeader(9, 1).pack())
    elif event is StreamInput.TERMINATE:
        term = UntaggedHeader(2, 1, rsvdulp=0x47).pack() + bytes(4)
        stream.handle_ulpdu(term)
    elif event is StreamInput.LLP_CLOSED:
        stream.connection_lost()
    elif event is StreamInput.POST:
        stream.post_recv(RecvWR(Sge(pd.register(bytearray(4)))))
    elif event is StreamInput.TERMINATE_SENT:
        stream.ulpdus_to_send()
    else:
        stream.close()


@pytest.mark.parametrize(("state", "event"), list(itertools.product(StreamState, StreamInput)))
def test_every_state_input_pair_through_the_api(state: StreamState, event: StreamInput) -> None:
    stream = _stream_in(state)
    assert stream.state is state
    expected = TRANSITIONS.get((state, event))
    remote_dropped = event in (StreamInput.PROTOCOL_ERROR, StreamInput.TERMINATE) and state in (
        StreamState.TERMINATING,
        StreamState.TERMINATED,
        StreamState.CLOSED,
    )
    if remote_dropped:
        # After a Terminate every received segment is dropped unread (RFC 5041
        # §7.1): it is a RECEIVE, whatever it holds.
        expected = TRANSITIONS[state, StreamInput.RECEIVE]
    if event is StreamInput.TERMINATE_SENT and state is not StreamState.TERMINATING:
        expected = state  # nothing to send: no input happens
    if expected is None:
        with pytest.raises(LocalProtocolError):
            _apply(stream, event)
        assert stream.state is state
    else:
        _apply(stream, event)
        assert stream.state is expected
