"""ViFront's state: the VI's queues, completions, establishment outcome,
close reason and keep-posted rule, shared by the asyncio and blocking
adapters (each front on a recording driver)."""

from __future__ import annotations

import pytest

from helpers import RecordingDriver, out
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import MalformedSegmentError, VitcpClosedError
from iwarp.vitcp.events import (
    TCP_CLOSED_UNANSWERED,
    Connected,
    ConnectionRequested,
    Event,
    MessageReceived,
    RdmaReadCompleted,
    RdmaReadServed,
    RdmaWriteReceived,
    ReconnectNeeded,
    RemoteErrorReported,
    SendCompleted,
    ViConnectionClosed,
    ViConnectionRejected,
)
from iwarp.vitcp.front import RECEIVE_HIGH_WATER, ViFront
from iwarp.vitcp.handshake import State
from iwarp.vitcp.wire import SegmentType, ViErrorType


def make(core: VitcpConnection, *, keep_posted: int = 0) -> ViFront:
    """A VI front on a recording driver."""
    front = ViFront(core, keep_posted=keep_posted)
    front._driver = RecordingDriver()
    return front


def connected(keep_posted: int = 0) -> tuple[ViFront, ViFront]:
    """An active and a passive state on two cores joined in memory, connected."""
    a = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    b = make(VitcpConnection(VitcpConfig(discriminator=b"svc"), ViRole.PASSIVE))
    a.core.connect(0.0, b"svc")
    b.core.tcp_accepted(0.0)
    a.core.tcp_established(0.0)
    b.handle(b.core.receive_data(out(a.core), 0.0))
    assert b.requested() and b.request is not None
    assert b.core.match()
    b.core.accept()
    b.keep_posted = keep_posted
    if keep_posted:
        b.core.post_receive(keep_posted)
    b.handle(b.core.take_events())
    a.handle(a.core.receive_data(out(b.core), 0.0))
    assert isinstance(a.outcome, Connected) and a.settled()
    return a, b


def pump(src: ViFront, dst: ViFront) -> bool:
    """Move ``src``'s output to ``dst``; what ``dst.handle`` said."""
    src.handle(src.core.take_events())
    return dst.handle(dst.core.receive_data(out(src.core), 1.0))


def test_buffered_octets_cross_the_high_water_mark() -> None:
    state = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    big = MessageReceived(1, bytes(RECEIVE_HIGH_WATER // 2 + 1), None)
    state.handle([big, MessageReceived(2, bytes(RECEIVE_HIGH_WATER // 2), None)])
    assert state.buffered > RECEIVE_HIGH_WATER  # a driver pauses reading here
    state.take_message()
    assert state.buffered == RECEIVE_HIGH_WATER // 2


def test_messages_are_queued_in_order_and_their_octets_counted() -> None:
    a, b = connected(keep_posted=4)
    for data in (b"one", b"three"):
        a.post_send(data)
    assert pump(a, b)  # a reader waiting for a message may stop waiting
    assert b.receive_ready() and b.buffered == len(b"one") + len(b"three")
    assert b.take_message().data == b"one"
    assert b.buffered == len(b"three")
    assert b.take_message().data == b"three"
    assert b.buffered == 0 and not b.receive_ready()


def test_keep_posted_reposts_one_descriptor_per_message() -> None:
    a, b = connected(keep_posted=2)
    for i in range(5):  # more messages than were ever posted at once
        a.post_send(b"m%d" % i)
        pump(a, b)
        assert b.core.descriptors_posted == 2
    assert [b.take_message().data for _ in range(5)] == [b"m%d" % i for i in range(5)]


def test_without_keep_posted_nothing_is_reposted() -> None:
    a, b = connected()
    b.core.post_receive(1)
    a.post_send(b"x")
    pump(a, b)
    assert b.take_message().data == b"x"
    assert b.core.descriptors_posted == 0


def test_rdma_write_reposts_only_with_immediate_data() -> None:
    a, b = connected(keep_posted=1)
    region = b.core.register(bytearray(16))
    a.post_rdma_write(b"plain", remote_address=region.address, memory_handle=region.handle)
    pump(a, b)
    assert b.core.descriptors_posted == 1  # consumed none, posted none
    a.post_rdma_write(
        b"imm", remote_address=region.address, memory_handle=region.handle, immediate=7
    )
    pump(a, b)
    assert b.core.descriptors_posted == 1  # consumed one, reposted one
    first, second = b.take_notices()
    assert isinstance(first, RdmaWriteReceived) and first.immediate_data is None
    assert isinstance(second, RdmaWriteReceived) and second.immediate_data == 7
    assert not b.messages


def test_no_repost_once_the_vi_is_not_connected() -> None:
    core = VitcpConnection(VitcpConfig(), ViRole.ACTIVE)
    state = make(core, keep_posted=3)
    state.handle([MessageReceived(1, b"late", None)])
    assert core.state is not State.CONNECTED and core.descriptors_posted == 0
    assert state.take_message().data == b"late"


def test_completions_wait_by_number_until_taken() -> None:
    a, b = connected(keep_posted=2)
    region = b.core.register(bytearray(b"0123456789"))
    sink = bytearray(10)
    local = a.core.register(sink)
    send = a.post_send(b"s")
    read = a.post_rdma_read(
        local=local,
        local_address=None,
        remote_address=region.address,
        memory_handle=region.handle,
        length=10,
    )
    pump(a, b)
    assert not pump(b, a)  # completions alone end no reader's wait
    assert a.completion_ready(send) and a.completion_ready(read)
    done_read = a.take_completion(read)
    assert isinstance(done_read, RdmaReadCompleted) and done_read.local_address == local.address
    assert isinstance(a.take_completion(send), SendCompleted)
    assert sink == b"0123456789"
    with pytest.raises(VitcpClosedError, match="TCP connection closed"):
        a.take_completion(send)  # taken once
    (served,) = b.take_notices()
    assert isinstance(served, RdmaReadServed)


def test_completions_wait_by_message_number() -> None:
    state = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    done = SendCompleted(5, SegmentType.SEND)
    assert not state.handle([done])
    assert state.completion_ready(5) and state.take_completion(5) is done


def test_events_without_a_handler_are_notices() -> None:
    state = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    served = RdmaReadServed(1, 0, 2, 3)
    remote = RemoteErrorReported(2, ViErrorType.MPE, 0)
    assert state.handle([served, remote])
    assert state.notice_ready()
    assert state.take_notice() is served
    assert state.take_notices() == [remote]
    assert not state.notice_ready() and state.take_notices() == []


@pytest.mark.parametrize(
    "first",
    [
        Connected(None),  # type: ignore[arg-type]
        ViConnectionRejected(no_match=True),
        ReconnectNeeded(TCP_CLOSED_UNANSWERED),
    ],
)
def test_the_first_establishment_outcome_counts(first: Event) -> None:
    state = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    assert not state.settled()
    assert not state.handle([first, ViConnectionRejected(no_match=False)])
    assert state.outcome is first and state.settled()


def test_a_connect_request_is_kept_until_taken_once() -> None:
    _, b = connected()
    state = make(VitcpConnection(VitcpConfig(), ViRole.PASSIVE))
    request = ConnectionRequested(b"svc", b"me", b.core.config.attributes, 1024, 4, False)
    assert not state.requested()
    state.handle([request])
    assert state.requested()
    assert state.take_request() is request
    assert state.take_request() is None and not state.requested()


def test_close_reason_ends_every_wait_and_refuses_new_work() -> None:
    a, _ = connected()
    error = MalformedSegmentError("bad")
    assert a.close_reason is None
    assert a.handle([ViConnectionClosed("protocol error", error)])
    reason = a.close_reason
    assert isinstance(reason, VitcpClosedError)
    assert str(reason) == "protocol error" and reason.error is error
    assert a.settled() and a.requested() and a.receive_ready() and a.notice_ready()
    assert a.completion_ready(99)
    for take in (a.take_message, a.take_notice, lambda: a.take_completion(99)):
        with pytest.raises(VitcpClosedError) as raised:
            take()
        assert raised.value is reason
    with pytest.raises(VitcpClosedError) as raised:
        a.post_send(b"too late")
    assert raised.value is reason
    assert a.core.state is State.CONNECTED  # nothing reached the core


def test_without_a_close_event_the_end_is_tcp_closing() -> None:
    state = make(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    assert str(state.closed_error()) == "TCP connection closed"
