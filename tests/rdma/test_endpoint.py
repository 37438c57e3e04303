"""QueuePairEndpoint, the sans-IO queue pair: two endpoints wired in memory,
with a synthetic clock, through the connection contract only."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from iwarp.errors import IwarpError, LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Reject
from iwarp.mpa.wire import RtrFlags
from iwarp.rdma.endpoint import (
    FENCE_WARNING,
    QueuePairEndpoint,
)
from iwarp.rdma.errors import ConnectionTerminatedError
from iwarp.rdma.events import (
    CompletionQueued,
    Ended,
    Established,
    MessageQueued,
    WorkFinished,
)
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.work import CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WorkOpcode, WriteWR


class Wire:
    """Two cores and a clock; moves octets until both are quiet."""

    def __init__(self, a: QueuePairEndpoint, b: QueuePairEndpoint) -> None:
        self.a, self.b = a, b
        self.now = 0.0
        self.events: dict[int, list[Any]] = {id(a): [], id(b): []}

    def pump(self) -> None:
        for _ in range(10_000):
            moved = False
            for src, dst in ((self.a, self.b), (self.b, self.a)):
                self.events[id(src)] += src.take_events()
                data = b"".join(bytes(c) for c in src.data_to_send())
                self.events[id(src)] += src.take_events()
                if data:
                    moved = True
                    self.events[id(dst)] += dst.receive_data(data, self.now)
            if not moved:
                return
        raise AssertionError("did not settle")

    def of(self, end: QueuePairEndpoint, kind: type) -> list[Any]:
        return [e for e in self.events[id(end)] if isinstance(e, kind)]


def pair(
    *,
    initiator: MpaConfig | None = None,
    responder: MpaConfig | None = None,
    **kwargs: Any,
) -> Wire:
    registry = MemoryRegistry()
    a = QueuePairEndpoint(Role.INITIATOR, registry.alloc_pd(), initiator, **kwargs.get("a", {}))
    b = QueuePairEndpoint(Role.RESPONDER, registry.alloc_pd(), responder, **kwargs.get("b", {}))
    return Wire(a, b)


def test_receive_pool_delivers_in_order_and_reposts() -> None:
    w = pair(a={"receive_buffers": 2}, b={"receive_buffers": 2})
    w.pump()
    assert w.of(w.a, Established) and w.of(w.b, Established)
    for i in range(5):  # more messages than buffers: each taken one is reposted
        w.a.post_send(SendWR(f"m{i}".encode(), wr_id=i))
        w.pump()
        assert w.b.take_message() == f"m{i}".encode()
    assert w.b.take_message() is None
    assert len(w.of(w.b, MessageQueued)) == 5
    # Sends completed to the user's queue, with the user's wr_ids.
    assert [c.wr_id for c in w.a.send_cq.poll()] == list(range(5))
    assert len(w.of(w.a, CompletionQueued)) == 5


def test_tracked_work_goes_to_result_not_the_queue() -> None:
    w = pair(b={"receive_buffers": 1})
    w.pump()
    wr_id = w.a.next_wr_id()
    assert wr_id < 0
    w.a.track(wr_id)
    w.a.post_send(SendWR(b"tracked", wr_id=wr_id))
    w.pump()
    (done,) = w.of(w.a, WorkFinished)
    assert done.wr_id == wr_id
    completion = w.a.result(wr_id)
    assert completion is not None and completion.ok
    assert w.a.result(wr_id) is None  # handed out once
    assert len(w.a.send_cq) == 0


@pytest.mark.parametrize("crc", [True, False])
@pytest.mark.parametrize("markers", [False, True])
def test_send_now_puts_on_the_wire_what_a_posted_send_does(crc: bool, markers: bool) -> None:
    """The simple API's Send on an idle queue pair: the same octets as a
    posted SendWR (MPA CRC and markers included), handed out rather than
    queued, the message arrives, and no completion is made."""
    wires: list[bytes] = []
    for now in (True, False):
        config = MpaConfig(crc=crc, markers=markers)
        w = pair(initiator=config, responder=config, b={"receive_buffers": 2})
        w.pump()
        sent = []
        for payload in (b"first", b"", b"third" * 50):
            if now:
                frame = w.a.send_now(payload, solicited=payload == b"")
                assert frame is not None and not w.a.has_data_to_send
                sent.append(frame)
            else:
                w.a.post_send(SendWR(payload, wr_id=1, solicited=payload == b""))
                sent.append(b"".join(bytes(c) for c in w.a.data_to_send()))
            w.events[id(w.b)] += w.b.receive_data(sent[-1], 0.0)
            assert w.b.take_message() == payload
        wires.append(b"".join(sent))
        assert w.a.take_events() == ([] if now else [CompletionQueued(w.a.send_cq)] * 3)
    assert wires[0] == wires[1]


def test_send_now_declines_what_must_wait_or_be_segmented() -> None:
    w = pair(a={"first_send_delay": 0.5, "now": 0.0}, b={"receive_buffers": 4})
    w.pump()
    assert w.a.send_now(b"held") is None  # the first send is held back: post it
    w.a.handle_timer(0.5)
    source = w.b.pd.register(bytearray(8), Access.REMOTE_READ)
    sink = w.a.pd.register(bytearray(8), Access.LOCAL_WRITE)
    w.a.post_send(ReadWR(Sge(sink), source.stag, 0, wr_id=5))
    assert w.a.send_now(b"after a read") is None  # completes after the Read: post it
    w.pump()
    assert w.a.send_now(b"idle again") is not None
    mulpdu = w.a.params.mulpdu if w.a.params else 0
    assert w.a.send_now(bytes(mulpdu)) is None  # two segments: post it
    w.a.close()
    with pytest.raises(ConnectionTerminatedError):
        w.a.send_now(b"late")


def test_a_peer_invalidating_the_pool_buffers_stags_only_replaces_them() -> None:
    """A Send with Invalidate may name any STag of the queue pair's PD,
    the receive pool's too: the message is delivered, the invalidated
    buffer is replaced by a fresh one (never reposted, never an exception
    out of receive_data), and the PD does not grow however often it
    happens."""
    w = pair(b={"receive_buffers": 2})
    w.pump()
    regions = w.b.pd.registry._regions
    before = len(regions)
    for i in range(20):
        stag = next(iter(w.b._pool.values()))[0].stag  # a buffer's STag, as a peer may guess
        w.a.post_send(SendWR(b"kill %d" % i, wr_id=i, invalidate_stag=stag))
        w.pump()
        assert w.b.take_message() == b"kill %d" % i
        assert len(w.b._pool) == 2 and len(regions) == before
        assert all(region.valid for region, _, _ in w.b._pool.values())
    w.a.post_send(SendWR(b"after", wr_id=99))
    w.pump()
    assert w.b.take_message() == b"after"
    assert w.b.ended is None
    completions = [c for c in w.a.send_cq.poll() if not c.ok]
    assert completions == []


def test_user_receives_go_to_the_receive_queue() -> None:
    registry = MemoryRegistry()
    posted: list[RecvWR] = []

    def setup() -> None:
        region = b.pd.register(bytearray(64))
        wr = RecvWR(Sge(region), wr_id=77)
        posted.append(wr)
        b.post_recv(wr)

    a = QueuePairEndpoint(Role.INITIATOR, registry.alloc_pd())
    b = QueuePairEndpoint(Role.RESPONDER, registry.alloc_pd(), setup=setup)
    w = Wire(a, b)
    w.pump()
    a.post_send(SendWR(b"to yours"))
    w.pump()
    (completion,) = b.recv_cq.poll()
    assert completion.wr_id == 77 and completion.byte_len == 8
    assert bytes(posted[0].local.region.view[:8]) == b"to yours"


def test_write_and_read_symmetric_through_the_endpoint() -> None:
    w = pair()
    w.pump()
    target = w.b.pd.register(bytearray(16), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    source = w.b.pd.register(b"0123456789abcdef", Access.REMOTE_READ)
    w.a.post_send(WriteWR(b"written!", target.stag, 4, wr_id=1))
    sink = w.a.pd.register(bytearray(6), Access.LOCAL_WRITE)
    w.a.post_send(ReadWR(Sge(sink), source.stag, 10, wr_id=2))
    w.pump()
    assert bytes(target.view[4:12]) == b"written!"
    assert bytes(sink.view) == b"abcdef"
    assert [(c.wr_id, c.opcode) for c in w.a.send_cq.poll()] == [
        (1, WorkOpcode.RDMA_WRITE),
        (2, WorkOpcode.RDMA_READ),
    ]


def test_first_send_hold_is_a_timer() -> None:
    w = pair(a={"first_send_delay": 0.5, "now": 0.0})
    w.pump()
    assert w.a.get_timer() == 0.5
    w.a.post_send(SendWR(b"held"))
    assert w.a.data_to_send() == [] and not w.a.has_data_to_send
    assert w.a.handle_timer(0.4) == []
    assert w.a.data_to_send() == []
    w.a.handle_timer(0.5)
    assert w.a.get_timer() is None
    assert w.a.has_data_to_send and w.a.data_to_send()


@pytest.mark.parametrize("decision", [Accept(b"yes", ird=3, ord=2), Reject(b"no", ird=5, ord=7)])
def test_decision_with_ird_ord_is_applied(decision: Accept | Reject) -> None:
    w = pair(b={"decide": lambda request: decision})
    w.pump()
    if isinstance(decision, Accept):
        assert w.a.params is not None and w.b.params is not None
        assert (w.b.params.ird, w.b.params.ord) == (3, 2)
        assert w.a.params.peer_private_data == b"yes"
        return
    (ended,) = w.of(w.a, Ended)
    assert isinstance(ended.error, ConnectionRejectedError)
    assert ended.error.private_data == b"no"
    frame = ended.error.event.frame
    enhanced = None if frame is None else frame.enhanced
    assert enhanced is not None and (enhanced.ird, enhanced.ord) == (5, 7)  # RFC 6581 §9.1
    assert w.a.must_close and w.b.must_close


@pytest.mark.parametrize("peer_to_peer", [False, True])
def test_setup_error_ends_with_a_terminate(peer_to_peer: bool) -> None:
    def setup() -> None:
        raise ValueError("the application's bug")

    w = pair(initiator=MpaConfig(peer_to_peer=peer_to_peer), b={"setup": setup})
    w.pump()
    (ended,) = w.of(w.b, Ended)
    assert isinstance(ended.error, IwarpError) and "application's bug" in str(ended.error)
    assert not w.of(w.b, Established)
    assert w.b.must_close
    assert w.b.terminate is not None and w.b.terminate.layer == 0  # RDMAP, local catastrophic
    # The Responder's Terminate leaves once the Initiator's first FPDU (the
    # RFC 6581 RTR) lifted the fence (RFC 5044 §7.1.2 rule 4); before, the
    # driver closes TCP.
    assert w.a.terminate_received is peer_to_peer


def test_negotiation_failure_is_not_established() -> None:
    w = pair(
        initiator=MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND),
        responder=MpaConfig(rtr_types=RtrFlags.WRITE),
    )
    w.pump()
    assert not w.of(w.a, Established)
    (ended,) = w.of(w.a, Ended)
    assert isinstance(ended.error, MpaError) and ended.error.code == 7


def test_posting_after_the_end_raises() -> None:
    w = pair()
    w.pump()
    w.a.close()
    with pytest.raises(ConnectionTerminatedError):
        w.a.post_send(SendWR(b"late"))
    fresh = QueuePairEndpoint(Role.INITIATOR, MemoryRegistry().alloc_pd())
    with pytest.raises(LocalProtocolError):
        fresh.post_send(SendWR(b"early"))


def test_connection_lost_flushes_and_ends_once() -> None:
    w = pair(b={"receive_buffers": 1})
    w.pump()
    sink = w.a.pd.register(bytearray(4), Access.LOCAL_WRITE)
    w.a.post_send(ReadWR(Sge(sink), 0x1234, 0, wr_id=9))
    w.a.data_to_send()
    events = w.a.connection_lost(1.0, "reset")
    assert [e for e in events if isinstance(e, Ended)]
    assert [c.status for c in w.a.send_cq.poll()] == [CompletionStatus.FLUSHED]
    assert not [e for e in w.a.connection_lost(2.0) if isinstance(e, Ended)]


def fence_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "iwarp" and "RFC 5044" in r.getMessage()]


def test_a_send_held_by_the_mpa_fence_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="iwarp")
    w = pair(a={"receive_buffers": 2}, b={"receive_buffers": 1})
    w.pump()
    w.now = 5.0  # the Responder posts a while after startup
    w.b.handle_timer(w.now)  # no timer due: only the clock moves
    w.b.post_send(SendWR(b"responder first", wr_id=1))
    w.pump()
    assert w.a.take_message() is None  # fenced: nothing went out
    assert w.b.get_timer() == 5.0 + FENCE_WARNING
    w.b.handle_timer(5.0 + FENCE_WARNING / 2)
    assert fence_warnings(caplog) == []
    w.b.handle_timer(5.0 + FENCE_WARNING)
    (record,) = fence_warnings(caplog)
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert "peer-to-peer" in message and "send first" in message
    w.b.post_send(SendWR(b"again", wr_id=2))
    w.b.handle_timer(10.0)
    assert len(fence_warnings(caplog)) == 1  # once per connection
    assert w.b.get_timer() is None
    w.a.post_send(SendWR(b"initiator", wr_id=3))  # lifts the fence
    w.pump()
    assert w.a.take_message() == b"responder first"
    assert w.a.take_message() == b"again"


def test_no_fence_warning_when_the_initiator_spoke_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="iwarp")
    w = pair(a={"receive_buffers": 1}, b={"receive_buffers": 1})
    w.pump()
    w.b.post_send(SendWR(b"responder first", wr_id=1))
    w.a.post_send(SendWR(b"initiator", wr_id=2))
    w.pump()
    w.b.handle_timer(FENCE_WARNING)
    assert fence_warnings(caplog) == []
    assert w.a.take_message() == b"responder first"


def test_no_fence_warning_with_peer_to_peer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="iwarp")
    # The Initiator's RTR lifts the fence at once: the Responder's Send goes out.
    w = pair(initiator=MpaConfig(peer_to_peer=True), b={"receive_buffers": 1})
    w.a = QueuePairEndpoint(Role.INITIATOR, w.a.pd, MpaConfig(peer_to_peer=True), receive_buffers=1)
    w.events[id(w.a)] = []
    w.pump()
    assert w.b.params is not None and w.b.params.rtr is not None
    w.b.post_send(SendWR(b"responder first", wr_id=1))
    w.pump()
    w.b.handle_timer(FENCE_WARNING)
    assert fence_warnings(caplog) == []
    assert w.a.take_message() == b"responder first"


def test_one_receive_may_hold_more_messages_than_the_pool_has_buffers() -> None:
    """The pool copies each message out and reposts its buffer as the stream
    completes it, inside the batch: six Sends read at once by a pool of two
    all arrive (before, the third ended the connection with a Terminate,
    "no buffer available")."""
    w = pair(a={"receive_buffers": 2}, b={"receive_buffers": 2})
    w.pump()
    for i in range(6):
        w.a.post_send(SendWR(f"message {i}".encode(), wr_id=i))
    data = b"".join(bytes(c) for c in w.a.data_to_send())
    events = w.b.receive_data(memoryview(bytearray(data)), 0.0)
    assert [type(e).__name__ for e in events] == ["MessageQueued"] * 6
    assert [w.b.take_message() for _ in range(6)] == [f"message {i}".encode() for i in range(6)]
    assert w.b.error is None


def test_a_buffer_the_small_lane_filled_is_not_held_after_its_completion() -> None:
    """The small-message lane places a Send into the application's posted
    buffer; once the receive completed and the region is deregistered, the
    stack holds no view of that memory (the entry the stream keeps to refill
    holds none): the application may resize its buffer. Then the pool's
    buffers, refilled the same way, still take message after message."""
    w = pair(a={"receive_buffers": 2})
    w.pump()
    first = w.b.pd.register(bytearray(64))
    w.b.post_recv(RecvWR(Sge(first), wr_id=6))
    w.a.post_send(SendWR(b"first", wr_id=1))  # the Initiator's first message
    w.pump()
    assert [c.wr_id for c in w.b.recv_cq.poll()] == [6]
    memory = bytearray(64)
    region = w.b.pd.register(memory)
    w.b.post_recv(RecvWR(Sge(region), wr_id=7))
    frame = w.a.send_now(b"into the application's buffer")
    assert frame is not None
    w.b.receive_data(frame, w.now)  # one whole FPDU: the lane's
    (completion,) = w.b.recv_cq.poll()
    assert completion.wr_id == 7 and completion.ok
    assert bytes(memory[: completion.byte_len]) == b"into the application's buffer"
    region.deregister()
    memory.extend(b"more")  # BufferError if a view of it were still exported
    for i in range(6):
        frame = w.b.send_now(b"m%d" % i)
        assert frame is not None
        w.a.receive_data(frame, w.now)
        assert w.a.take_message() == b"m%d" % i
