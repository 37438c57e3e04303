"""QueuePairFront, the half of a queue pair both adapters share: its event
table, the simple calls' bookkeeping and its errors, on in-memory endpoints."""

from __future__ import annotations

from typing import Any

import pytest

from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import Role
from iwarp.rdma.endpoint import (
    QueuePairEndpoint,
)
from iwarp.rdma.errors import ConnectionTerminatedError, RdmaError
from iwarp.rdma.events import (
    CompletionQueued,
    Established,
    MessageQueued,
    WorkFinished,
)
from iwarp.rdma.front import QueuePairFront
from iwarp.rdmap.memory import MemoryRegistry
from iwarp.rdmap.work import SendWR, WriteWR


class Front(QueuePairFront):
    """A front that records its events and writes through a wire."""

    _opened_by = "the test"

    def __init__(self, role: Role, **options: Any) -> None:
        self.pd = MemoryRegistry().alloc_pd()
        self._endpoint = QueuePairEndpoint(role, self.pd, **options)
        self.seen: list[type] = []
        self.outputs = 0

    def _output(self) -> None:
        self.outputs += 1

    def _on_established(self, event: Established) -> None:
        self.seen.append(Established)

    def _on_message(self, event: MessageQueued) -> None:
        self.seen.append(MessageQueued)


def pump(a: Front, b: Front) -> None:
    """Move octets between the two endpoints until both are quiet,
    dispatching every event to its front."""
    for _ in range(1000):
        moved = False
        for src, dst in ((a, b), (b, a)):
            src._dispatch(src.endpoint.take_events())
            data = b"".join(bytes(c) for c in src.endpoint.data_to_send())
            src._dispatch(src.endpoint.take_events())
            if data:
                moved = True
                dst._dispatch(dst.endpoint.receive_data(data, 0.0))
        if not moved:
            return
    raise AssertionError("did not settle")


def fronts(**b_options: Any) -> tuple[Front, Front]:
    a, b = Front(Role.INITIATOR), Front(Role.RESPONDER, **b_options)
    pump(a, b)
    return a, b


def test_events_go_to_the_subclass_handlers_and_the_rest_to_no_ops() -> None:
    a, b = fronts(receive_buffers=1)
    assert a.seen == [Established] and b.seen == [Established]
    a._dispatch([CompletionQueued(a.endpoint.send_cq), WorkFinished(1)])  # defaults: nothing
    wr = SendWR(b"hi", a.endpoint.next_wr_id())
    assert a._post_tracked(wr) is None  # its completion comes with the endpoint's events
    assert a.outputs == 1
    pump(a, b)
    completion = a.endpoint.result(wr.wr_id)
    assert completion is not None and a._checked(completion) is completion
    assert a.endpoint.send_cq.poll() == []  # tracked: not on the queue
    assert b.seen == [Established, MessageQueued]
    assert b._take_message(closed=False) == b"hi"
    assert b._take_message(closed=False) is None  # a wait may bring one


def test_take_message_names_the_adapters_call_without_a_pool() -> None:
    a, _ = fronts()
    with pytest.raises(LocalProtocolError, match="pass receive_buffers to the test"):
        a._take_message(closed=False)


def test_take_message_after_the_end_raises_terminated() -> None:
    _, b = fronts(receive_buffers=1)
    with pytest.raises(ConnectionTerminatedError):
        b._take_message(closed=True)
    b._dispatch(b.endpoint.connection_lost(0.0, "gone"))
    with pytest.raises(ConnectionTerminatedError):
        b._take_message(closed=False)


def test_a_failed_post_is_untracked_and_a_failed_completion_raises() -> None:
    a, _ = fronts(receive_buffers=1)
    a._dispatch(a.endpoint.connection_lost(0.0, "gone"))
    wr = SendWR(b"late", a.endpoint.next_wr_id())
    with pytest.raises(ConnectionTerminatedError):
        a._post_tracked(wr)
    assert wr.wr_id not in a.endpoint.tracked()
    flushed = a.endpoint.send_cq.poll()
    assert all(c.wr_id != wr.wr_id for c in flushed)


def test_startup_error_without_an_endpoint_error_is_tcp_closed() -> None:
    front = Front(Role.INITIATOR)
    error = front._startup_error()
    assert isinstance(error, MpaError) and error.code == MpaErrorCode.TCP_CLOSED
    assert "connection closed during MPA startup" in str(error)
    assert "reset" in str(front._startup_error("reset"))


def test_a_failed_completion_raises_rdma_error() -> None:
    a, _ = fronts()
    # A Write waits in the send queue until its octets are taken for TCP
    # (a small Send on an idle queue pair would complete while posted).
    wr = WriteWR(b"x", 0x1234, 0, a.endpoint.next_wr_id())
    assert a._post_tracked(wr) is None
    a._dispatch(a.endpoint.connection_lost(0.0, "gone"))  # flushes the tracked Write
    completion = a.endpoint.result(wr.wr_id)
    assert completion is not None and not completion.ok
    with pytest.raises(RdmaError):
        a._checked(completion)


def test_a_failed_handler_ends_the_stream_with_a_terminate_once() -> None:
    a, b = fronts(receive_buffers=1)
    a._post_tracked(SendWR(b"first", a.endpoint.next_wr_id()))  # the Initiator speaks first
    pump(a, b)
    b._handler_failed()
    assert b.endpoint.ended is not None and b.terminate is not None
    assert not b.terminate_received
    pump(a, b)
    assert a.terminate_received  # the peer learns why
    sent = b.terminate
    b._handler_failed()  # ended already: nothing more
    assert b.terminate is sent and b.endpoint.data_to_send() == []
