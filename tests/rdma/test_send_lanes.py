"""Send lanes in the RDMA core: the same wire octets and completions as MPA's queue.

Two identical initiators get the same work (RDMA Writes, Sends, Read
Responses to the peer's Reads, of random sizes, over random MTUs, with
markers and CRC on or off). One sends everything through ``data_to_send``;
the other takes lanes where the core offers them (``take_send`` of its
port, :class:`iwarp.rdma.port.LanePort`), writes
them to a socket in random pieces (``SendLane.pump`` with limits) and
reports them sent, taking the rest from ``data_to_send`` at random limits
in between. The octets on the wire, the completions and what the peer
places must be equal; and a lane's work completes only once all of its
octets are out.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.mpa.config import MpaConfig
from iwarp.rdma import lanes
from iwarp.rdma.port import LanePort
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import Completion, ReadWR, RecvWR, SendWR, Sge, WriteWR
from rdma.rdma_harness import End, make_ends, pump

pytestmark = pytest.mark.skipif(not lanes.ACTIVE, reason="the C accelerator is not active")

REGION = 40_000
RECV_SIZE = 30_000

Op = tuple[str, int, int]


class Owner:
    """The queue pair a port serves, for a bare RdmaConnection: output never
    held, the lanes' events kept for the test."""

    output_held = False

    def lane_begin(self) -> None:
        """(A bare connection has no fast path to take state back from.)"""

    def __init__(self, end: End) -> None:
        self.events: list[Any] = []
        #: (The port holds its owner weakly: the test keeps the owner.)
        self.port = LanePort(end.conn, self)

    def lane_events(self, events: list[Any], now: float | None) -> None:
        self.events += events

    def take_events(self) -> list[Any]:
        events, self.events = self.events, []
        return events


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk
        out += chunk
    return bytes(out)


def setup(ops: list[Op], markers: bool, crc: bool, emss: int) -> tuple[End, End, bytearray]:
    config = MpaConfig(crc=crc, markers=markers)
    a, b = make_ends(config, config, emss=emss)
    pump(a, b)
    region = bytearray(REGION)
    mr = b.pd.register(region, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    source = a.pd.register(bytearray(bytes(range(256)) * 160), Access.REMOTE_READ)
    stream = b.conn.stream
    assert stream is not None
    for i in range(8):
        sink = b.pd.register(bytearray(RECV_SIZE), Access.LOCAL_WRITE)
        stream.post_recv(RecvWR(Sge(sink), wr_id=1000 + i))
    for i, (kind, at, length) in enumerate(ops):
        data = bytes((i * 7 + k) & 0xFF for k in range(length))
        if kind == "write":
            a.conn.post_send(WriteWR(data, mr.stag, at, wr_id=i))
        elif kind == "send":
            a.conn.post_send(SendWR(data, wr_id=i))
        else:  # the peer reads from us: our Read Response
            sink = b.pd.register(bytearray(length), Access.LOCAL_WRITE)
            b.conn.post_send(ReadWR(Sge(sink), source.stag, at, wr_id=2000 + i))
    # The peer's Read Requests reach us before we send anything.
    requests = b"".join(bytes(x) for x in b.conn.data_to_send())
    b.events.extend(b.conn.take_events())
    if requests:  # (b"" would be the peer's FIN)
        a.events.extend(a.conn.receive_data(requests, 0.0))
    return a, b, region


def by_queue(a: End) -> tuple[bytes, list[str]]:
    wire = bytearray()
    while True:
        chunk = b"".join(bytes(x) for x in a.conn.data_to_send(limit=1 << 16))
        if not chunk:
            break
        wire += chunk
    a.events.extend(a.conn.take_events())
    return bytes(wire), [repr(e) for e in a.events if isinstance(e, Completion)]


def by_lanes(a: End, draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[bytes, list[str]]:
    wire = bytearray()
    owner = Owner(a)
    left, right = socket.socketpair()
    with left, right:
        while True:
            if draw(st.booleans()):
                lane = owner.port.take_send(
                    draw(st.sampled_from([0, 1, 5000, 20_000])),
                    draw(st.sampled_from([0, 1 << 16])),  # iovecs, or contiguous framing
                )
                if lane is not None:
                    before = len([e for e in a.conn.take_events() if isinstance(e, Completion)])
                    assert before == 0  # nothing completes when a lane is taken
                    while not lane.done:
                        limit = draw(st.sampled_from([-1, 1, 7, 1000, 40_000]))
                        sent = lane.sent
                        lane.pump(left.fileno(), limit=limit)
                        wire += read_exactly(right, lane.sent - sent)
                        assert not [e for e in a.conn.take_events() if isinstance(e, Completion)]
                    a.events.extend(owner.port.send_done())
                    continue
            chunk = b"".join(
                bytes(x) for x in a.conn.data_to_send(limit=draw(st.sampled_from([1, 5000, None])))
            )
            a.events.extend(a.conn.take_events())
            if not chunk and not a.conn.has_data_to_send:
                break
            wire += chunk
    return bytes(wire), [repr(e) for e in a.events if isinstance(e, Completion)]


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, REGION), st.integers(0, 30_000)),
        st.tuples(st.just("send"), st.just(0), st.integers(0, RECV_SIZE + 100)),
        st.tuples(st.just("read"), st.integers(0, 20_000), st.integers(1, 20_000)),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=120, deadline=None)
@given(
    ops=ops_strategy,
    markers=st.booleans(),
    crc=st.booleans(),
    emss=st.sampled_from([300, 1460, 9000, 65483]),
    data=st.data(),
)
def test_lanes_give_the_queues_octets_and_completions(
    ops: list[Op], markers: bool, crc: bool, emss: int, data: st.DataObject
) -> None:
    a1, b1, region1 = setup(ops, markers, crc, emss)
    reference, completions = by_queue(a1)
    a2, b2, region2 = setup(ops, markers, crc, emss)
    wire, lane_completions = by_lanes(a2, data.draw)
    assert wire == reference
    assert lane_completions == completions
    # What the peer makes of it (placement, completions, Terminates) is the same.
    events1 = [repr(e) for e in b1.conn.receive_data(reference, 0.0)]
    events2 = [repr(e) for e in b2.conn.receive_data(wire, 0.0)]
    assert events1 == events2
    assert region1 == region2


def test_a_one_mib_write_takes_one_lane_and_arrives() -> None:
    data = os.urandom(1 << 20)
    config = MpaConfig(crc=True, markers=True)
    a, b = make_ends(config, config, emss=1448)
    pump(a, b)
    region = bytearray(len(data))
    mr = b.pd.register(region, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    a.conn.post_send(WriteWR(data, mr.stag, 0, wr_id=5))
    owner = Owner(a)
    lane = owner.port.take_send(min_segment=0)
    assert lane is not None
    assert owner.port.take_send(min_segment=0) is None  # one message, all of it in the lane
    assert a.conn.data_to_send() == []  # and nothing queued behind it
    left, right = socket.socketpair()
    wire = bytearray()
    with left, right:
        while not lane.done:
            sent = lane.sent
            lane.pump(left.fileno())
            wire += read_exactly(right, lane.sent - sent)
    completions = [e for e in owner.port.send_done() if isinstance(e, Completion)]
    assert [(c.wr_id, c.byte_len) for c in completions] == [(5, len(data))]
    b.conn.receive_data(bytes(wire), 0.0)
    assert bytes(region) == data


def test_small_messages_and_reads_keep_the_queue() -> None:
    config = MpaConfig(crc=True)
    a, b = make_ends(config, config, emss=1460)
    pump(a, b)
    mr = b.pd.register(bytearray(1 << 20), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    a.conn.post_send(WriteWR(bytes(1000), mr.stag, 0, wr_id=1))
    owner = Owner(a)
    assert owner.port.take_send() is None  # below LANE_MIN
    sink = a.pd.register(bytearray(1 << 20), Access.LOCAL_WRITE)
    a.conn.data_to_send()
    a.conn.post_send(ReadWR(Sge(sink), mr.stag, 0, wr_id=2))
    assert owner.port.take_send(0) is None  # a Read Request is never a lane


@pytest.mark.parametrize(
    ("markers", "emss", "contiguous"),
    [(False, 65483, False), (False, 1460, True), (True, 65483, True), (True, 1460, True)],
)
def test_a_bulk_message_takes_a_lane_at_every_framing(
    markers: bool, emss: int, contiguous: bool
) -> None:
    """A large message always leaves by one C call: with iovecs into it
    where they are few (no markers, segments of LANE_MIN_SEGMENT or more),
    else framed contiguously (an Ethernet-sized MTU, markers), where the
    Python framing path took a call per 64 KiB run before."""
    config = MpaConfig(crc=True, markers=markers)
    a, b = make_ends(config, config, emss=emss)
    pump(a, b)
    mr = b.pd.register(bytearray(1 << 20), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    a.conn.post_send(WriteWR(bytes(1 << 20), mr.stag, 0, wr_id=1))
    owner = Owner(a)
    lane = owner.port.take_send()
    assert lane is not None
    assert lane.contiguous is contiguous
