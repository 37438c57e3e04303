"""QueuePairFront, the half of a queue pair both adapters share: its event
table, the policy it applies through its driver (reading paused and
resumed, startup outcome, completion queues), the simple calls'
bookkeeping and its errors, on in-memory endpoints and a recording driver."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import RecordingDriver
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import DEFAULT_EMSS
from iwarp.rdma import front as front_module
from iwarp.rdma.endpoint import QueuePairOptions
from iwarp.rdma.errors import ConnectionTerminatedError, RdmaError
from iwarp.rdma.front import CompletionQueueFront, QueuePairFront
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.work import Completion, CompletionStatus, RecvWR, SendWR, Sge, WorkOpcode, WriteWR


class Front(QueuePairFront):
    """A front on a recording driver; the test moves the octets."""

    _opened_by = "the test"

    def __init__(
        self, role: Role, send_cq: CompletionQueueFront | None = None, **options: Any
    ) -> None:
        options.setdefault("receive_buffers", 0)
        settings = QueuePairOptions(MpaConfig(), **options)
        pd = MemoryRegistry().alloc_pd()
        super().__init__(role, pd, settings, send_cq=send_cq)
        self.recorder = RecordingDriver()
        self._driver = self.recorder
        self.open(0.0, DEFAULT_EMSS)


def pump(a: Front, b: Front) -> None:
    """Move octets between the two endpoints until both are quiet,
    dispatching every event to its front."""
    for _ in range(1000):
        moved = False
        for src, dst in ((a, b), (b, a)):
            src.dispatch(src.endpoint.take_events())
            data = b"".join(bytes(c) for c in src.recorder.written)
            src.recorder.written.clear()
            data += b"".join(bytes(c) for c in src.endpoint.data_to_send())
            src.dispatch(src.endpoint.take_events())
            if data:
                moved = True
                dst.dispatch(dst.endpoint.receive_data(data, 0.0))
        if not moved:
            return
    raise AssertionError("did not settle")


def fronts(**b_options: Any) -> tuple[Front, Front]:
    a, b = Front(Role.INITIATOR), Front(Role.RESPONDER, **b_options)
    pump(a, b)
    return a, b


def test_the_event_table_drives_the_driver() -> None:
    a, b = fronts(receive_buffers=1)
    for front in (a, b):
        assert front.recorder.calls == ["started"] and front.recorder.woken == [None]
        assert front._startup_over()
        front._opened()  # in full operation: nothing happens
    region = b.register(bytearray(8), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    wr = WriteWR(b"hi", region.stag, 0, a.endpoint.next_wr_id())
    assert (
        a._post_tracked(wr, "rdma_write") is None
    )  # its completion comes with the endpoint's events
    assert a.recorder.calls == ["started", "flush"]  # post_send flushed
    pump(a, b)
    assert wr.wr_id in a.recorder.woken  # the simple call waiting for it
    completion = a.endpoint.result(wr.wr_id)
    assert completion is not None and a._checked(completion, "rdma_write") is completion
    assert len(a.send_cq) == 0 and bytes(region.view[:2]) == b"hi"  # tracked: not queued
    assert a._sent_at_once(b"hello", False, None)  # the small-message lane: written at once
    pump(a, b)
    assert b.recorder.woken[-1] is None  # the message wakes the receive
    assert b._take_message() == b"hello"
    assert b._take_message() is None  # a wait may bring one


def test_completions_move_to_the_queues_of_every_attached_queue_pair() -> None:
    shared = CompletionQueueFront()
    a = Front(Role.INITIATOR, send_cq=shared)
    c = Front(Role.INITIATOR, send_cq=shared)
    b, d = Front(Role.RESPONDER), Front(Role.RESPONDER)
    pump(a, b)
    pump(c, d)
    assert shared._fronts == [a, c] and a.recv_cq is not shared
    region = d.register(bytearray(8), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    a.post_recv(RecvWR(Sge(a.register(bytearray(8)), 0, 8), wr_id=7))
    a.post_send(WriteWR(b"one", 0x99, 0, wr_id=1))
    c.post_send(WriteWR(b"two", region.stag, 0, wr_id=2))
    for x, y in ((c, d), (a, b)):
        pump(x, y)
    assert [entry.wr_id for entry in shared._take(None)] == [2, 1]
    assert len(a.recv_cq) == 1  # flushed when the peer's Terminate ended the stream
    woken: list[str] = []
    shared._waiting.append(lambda: woken.append("a"))
    a.recorder.gone = True
    a.lost()  # TCP gone: the queue's waiting call checks again
    assert woken == ["a"] and shared._fronts == [c] and shared._drivers() == [c._driver]
    c.lost()
    assert shared._drivers() == [] and shared._why() == "no queue pair uses this queue"


def test_a_shared_cq_option_gives_one_queue_for_both() -> None:
    front = Front(Role.INITIATOR, shared_cq=True)
    assert front.recv_cq is front.send_cq


def test_reading_pauses_above_the_high_water_mark_and_resumes_below_a_quarter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front_module, "RECEIVE_HIGH_WATER", 8)
    a, b = fronts(receive_buffers=4)
    for message in (b"12345", b"67890", b"abcde"):
        assert a._sent_at_once(message, False, None)
        pump(a, b)
    assert not b.recorder.reading  # 15 octets unread > 8
    assert b._take_message() == b"12345" and not b.recorder.reading  # 10 left, not < 2
    assert b._take_message() == b"67890" and not b.recorder.reading  # 5 left
    assert b._take_message() == b"abcde" and b.recorder.reading


def test_a_failed_startup_closes_tcp_and_raises_why() -> None:
    a = Front(Role.INITIATOR)
    assert not a._startup_over()
    a.recorder.gone = True
    assert a._startup_over()
    with pytest.raises(MpaError, match="connection closed during MPA startup"):
        a._opened()
    assert a.recorder.calls[-2:] == ["flush", "close"] and a.send_cq._fronts == []


def test_take_message_names_the_adapters_call_without_a_pool() -> None:
    a, _ = fronts()
    with pytest.raises(LocalProtocolError, match="pass receive_buffers to the test"):
        a._take_message()


def test_take_message_after_the_end_raises_terminated() -> None:
    _, b = fronts(receive_buffers=1)
    b.recorder.gone = True
    with pytest.raises(ConnectionTerminatedError):
        b._take_message()
    b.recorder.gone = False
    b.dispatch(b.endpoint.connection_lost(0.0, "gone"))
    with pytest.raises(ConnectionTerminatedError):
        b._take_message()


def test_a_tracked_result_after_tcp_is_gone_raises_terminated() -> None:
    a, _ = fronts()
    wr = WriteWR(b"x", 0x1234, 0, a.endpoint.next_wr_id())
    assert a._post_tracked(wr, "rdma_write") is None and a._finished(wr.wr_id, "rdma_write") is None
    a.recorder.gone = True
    with pytest.raises(ConnectionTerminatedError, match=r"^rdma_write failed: "):
        a._finished(wr.wr_id, "rdma_write")
    a._abandon(wr.wr_id)
    assert wr.wr_id not in a.endpoint.tracked()


def test_a_failed_post_is_untracked_and_a_failed_completion_raises() -> None:
    a, _ = fronts(receive_buffers=1)
    a.dispatch(a.endpoint.connection_lost(0.0, "gone"))
    wr = SendWR(b"late", a.endpoint.next_wr_id())
    with pytest.raises(ConnectionTerminatedError, match=r"^send failed: "):
        a._post_tracked(wr, "send")
    assert wr.wr_id not in a.endpoint.tracked()
    assert all(c.wr_id != wr.wr_id for c in a.send_cq._take(None))


def test_startup_error_without_an_endpoint_error_is_tcp_closed() -> None:
    front = QueuePairFront(
        Role.INITIATOR, MemoryRegistry().alloc_pd(), QueuePairOptions(MpaConfig())
    )
    error = front._startup_error()
    assert isinstance(error, MpaError) and error.code == MpaErrorCode.TCP_CLOSED
    assert "connection closed during MPA startup" in str(error)
    assert "reset" in str(front._startup_error("reset"))


def test_a_flushed_completion_raises_what_ended_the_connection() -> None:
    a, _ = fronts()
    # A Write waits in the send queue until its octets are taken for TCP
    # (a small Send on an idle queue pair would complete while posted).
    wr = WriteWR(b"x", 0x1234, 0, a.endpoint.next_wr_id())
    assert a._post_tracked(wr, "rdma_write") is None
    a.dispatch(a.endpoint.connection_lost(0.0, "gone"))  # flushes the tracked Write
    completion = a.endpoint.result(wr.wr_id)
    assert completion is not None and completion.status is CompletionStatus.FLUSHED
    with pytest.raises(ConnectionTerminatedError, match=r"^rdma_write failed: .*gone") as info:
        a._checked(completion, "rdma_write")
    assert "work request" not in str(info.value) and "-" not in str(info.value)  # no wr_id


def test_a_failed_completion_raises_rdma_error() -> None:
    a, _ = fronts()
    failed = Completion(-1, WorkOpcode.RDMA_READ, CompletionStatus.REMOTE_ACCESS_ERROR)
    with pytest.raises(RdmaError, match=r"^rdma_read failed \(remote access error\)$"):
        a._checked(failed, "rdma_read")


def test_a_failed_handler_ends_the_stream_with_a_terminate_once() -> None:
    a, b = fronts(receive_buffers=1)
    a._post_tracked(SendWR(b"first", a.endpoint.next_wr_id()), "send")  # the Initiator speaks first
    pump(a, b)
    b._handler_failed()
    assert b.endpoint.ended is not None and b.terminate is not None
    assert not b.terminate_received
    pump(a, b)
    assert a.terminate_received  # the peer learns why
    sent = b.terminate
    b._handler_failed()  # ended already: nothing more
    assert b.terminate is sent and b.endpoint.data_to_send() == []
