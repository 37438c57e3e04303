"""The composed sans-IO stack: MPA + DDP + RDMAP between two connections."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import chunked
from iwarp.mpa.config import MpaConfig, Rev0Profile
from iwarp.mpa.events import ConnectionEstablished, ConnectionFailed, RequestReceived
from iwarp.mpa.framing import FpduDecoder
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.events import (
    StreamReady,
    TerminateReceived,
    TerminateSent,
)
from iwarp.rdmap.memory import Access
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)
from rdma.rdma_harness import make_ends, pump

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
def test_every_opcode_over_mpa(markers: bool, crc: bool) -> None:
    size = 200_000
    received = bytearray(size)
    posted: list[RdmapStream] = []

    a, b = make_ends(
        MpaConfig(markers=markers, crc=crc),
        MpaConfig(markers=markers, crc=crc),
        on_stream=posted.append,
    )
    pump(a, b)
    assert a.conn.params is not None and a.conn.params.crc == crc
    assert a.conn.params.markers_send == markers
    (stream_b,) = posted
    stream_b.post_recv(RecvWR(Sge(b.pd.register(received)), wr_id=1))
    remote = bytearray(size)
    remote_mr = b.pd.register(remote, ALL, address=0x1000)
    data = os.urandom(size)
    a.conn.post_send(SendWR(data, wr_id=1, solicited=True))
    a.conn.post_send(WriteWR(data[::-1], remote_mr.stag, 0x1000, wr_id=2))
    sink = bytearray(size)
    a.conn.post_send(ReadWR(Sge(a.pd.register(sink)), remote_mr.stag, 0x1000, wr_id=3))
    pump(a, b)
    digest = hashlib.sha256
    assert digest(received).digest() == digest(data).digest()
    assert digest(remote).digest() == digest(data[::-1]).digest()
    assert digest(sink).digest() == digest(data[::-1]).digest()
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS),
        (2, CompletionStatus.SUCCESS),
        (3, CompletionStatus.SUCCESS),
    ]
    (recv,) = b.completions()
    assert recv.opcode is WorkOpcode.RECV and recv.byte_len == size and recv.solicited
    assert any(isinstance(e, StreamReady) for e in b.events)


@pytest.mark.parametrize("rtr", [RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND])
def test_peer_to_peer_rtr_over_mpa(rtr: RtrFlags) -> None:
    a, b = make_ends(
        MpaConfig(peer_to_peer=True, rtr_types=rtr),
        MpaConfig(rtr_types=RtrFlags.WRITE | RtrFlags.READ | RtrFlags.SEND),
    )
    pump(a, b)
    params = a.conn.params
    assert params is not None and params.peer_to_peer and params.rtr == rtr
    assert b.conn.stream is not None and b.conn.stream.state.name == "OPERATIONAL"
    assert [e for e in b.events if isinstance(e, StreamReady)] == [StreamReady()]
    assert a.completions() == [] and b.completions() == []


def test_no_matching_rtr_is_terminated_with_code_7() -> None:
    a, b = make_ends(
        MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND),
        MpaConfig(rtr_types=RtrFlags.WRITE),
    )
    pump(a, b)
    (sent,) = [e for e in a.events if isinstance(e, TerminateSent)]
    assert (sent.header.layer, sent.header.etype, sent.header.code) == (2, 0, 7)
    assert a.conn.must_close


def test_crc_error_is_answered_with_a_terminate() -> None:
    a, b = make_ends(MpaConfig(crc=True), MpaConfig(crc=True))
    pump(a, b)
    assert b.conn.stream is not None
    for _ in range(2):
        b.conn.post_recv(RecvWR(Sge(b.pd.register(bytearray(64)))))
    a.conn.post_send(SendWR(b"fine"))  # the responder may send only after a valid FPDU
    pump(a, b)
    a.conn.post_send(SendWR(b"corrupt me"))
    data = bytearray(b"".join(bytes(x) for x in a.conn.data_to_send()))
    data[-1] ^= 0xFF  # the CRC field
    b.events.extend(b.conn.receive_data(bytes(data), 0.0))
    out = b"".join(bytes(x) for x in b.conn.data_to_send())
    a.events.extend(a.conn.receive_data(out, 0.0))
    (received,) = [e for e in a.events if isinstance(e, TerminateReceived)]
    assert (received.header.layer, received.header.etype, received.header.code) == (2, 0, 2)
    assert b.conn.must_close and a.conn.must_close


def test_rev1_connection_has_no_reads() -> None:
    # siw-vm evidence: a Rev 1 connection ends up with IRD = ORD = 0.
    a, b = make_ends(MpaConfig(revision=1), MpaConfig(revision=1))
    pump(a, b)
    established = [e for e in a.events if isinstance(e, ConnectionEstablished)]
    assert established and established[0].params.revision == 1


def _recorded_initiator_stream(markers: bool) -> tuple[bytes, bytes, list[bytes]]:
    """The octets an initiator sends: Request, then Sends and a Write (after the Reply)."""
    a, b = make_ends(MpaConfig(markers=markers), MpaConfig(markers=markers))
    request = b"".join(bytes(x) for x in a.conn.data_to_send())
    for event in b.conn.receive_data(request, 0.0):
        if isinstance(event, RequestReceived):
            b.conn.accept()
    reply = b"".join(bytes(x) for x in b.conn.data_to_send())
    a.conn.receive_data(reply, 0.0)
    messages = [os.urandom(n) for n in (0, 5, 3000, 700)]
    for message in messages:
        a.conn.post_send(SendWR(message))
    a.conn.post_send(WriteWR(b"tagged" * 500, 0x4321, 0x10))
    return request + b"".join(bytes(x) for x in a.conn.data_to_send()), reply, messages


@settings(max_examples=40, deadline=None)
@given(markers=st.booleans(), sizes=st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_any_cut_of_the_byte_stream_gives_the_same_result(markers: bool, sizes: list[int]) -> None:
    wire, _, messages = _recorded_initiator_stream(markers)
    buffers = [bytearray(4000) for _ in messages]
    target = bytearray(4000)

    def on_stream(stream: RdmapStream) -> None:
        for buf in buffers:
            stream.post_recv(RecvWR(Sge(stream.pd.register(buf))))
        region = stream.pd.register(target, ALL, address=0x10, stag=0x4321)
        assert region.stag == 0x4321

    _, b = make_ends(MpaConfig(markers=markers), MpaConfig(markers=markers), on_stream=on_stream)
    events = []
    for piece in chunked(wire, sizes):
        for event in b.conn.receive_data(piece, 0.0):
            if isinstance(event, RequestReceived):
                b.conn.accept()
                events += b.conn.take_events()
            events.append(event)
    recvs = [e for e in events if isinstance(e, Completion)]
    assert [c.byte_len for c in recvs] == [len(m) for m in messages]
    assert all(c.ok for c in recvs)
    for buf, message in zip(buffers, messages, strict=True):
        assert bytes(buf[: len(message)]) == message
    assert bytes(target[:3000]) == b"tagged" * 500
    assert not [e for e in events if isinstance(e, TerminateSent)]


@settings(max_examples=100, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300), crc=st.booleans())
def test_arbitrary_octets_after_startup_give_only_events(garbage: bytes, crc: bool) -> None:
    a, b = make_ends(MpaConfig(crc=crc), MpaConfig(crc=crc))
    pump(a, b)
    assert b.conn.stream is not None
    b.conn.post_recv(RecvWR(Sge(b.pd.register(bytearray(64)))))
    events = b.conn.receive_data(garbage, 0.0)
    events += b.conn.receive_data(garbage, 0.0)
    b.conn.data_to_send()
    terms = [e for e in events + b.conn.take_events() if isinstance(e, TerminateSent)]
    assert len(terms) <= 1
    assert b.conn.must_close == bool(terms) or any(isinstance(e, ConnectionFailed) for e in events)


def test_rdmac_peer_runs_ddp_and_rdmap_version_0() -> None:
    """RFC 5044 Appendix C: a Rev 0 peer and a permissive responder run DDP/RDMAP 0."""
    posted: list[RdmapStream] = []
    a, b = make_ends(
        MpaConfig(revision=0, markers=True, crc=True),
        MpaConfig(rev0_profile=Rev0Profile.PERMISSIVE),
        on_stream=posted.append,
    )
    pump(a, b)
    assert a.conn.params is not None and a.conn.params.ddp_version == 0
    assert b.conn.params is not None and b.conn.params.ddp_version == 0
    (stream_b,) = posted
    buf = bytearray(3000)
    stream_b.post_recv(RecvWR(Sge(b.pd.register(buf))))
    remote = b.pd.register(bytearray(3000), ALL)
    data = os.urandom(3000)
    a.conn.post_send(SendWR(data))
    a.conn.post_send(WriteWR(data, remote.stag, 0))
    sink = bytearray(3000)
    a.conn.post_send(ReadWR(Sge(a.pd.register(sink)), remote.stag, 0))
    pump(a, b)
    assert bytes(buf) == data and bytes(remote.view) == data and bytes(sink) == data
    ulpdus = FpduDecoder(markers=True, crc=True).feed(b"".join(a.wire[1:]))
    assert ulpdus and all(u[0] & 0x03 == 0 and u[1] >> 6 == 0 for u in ulpdus)
