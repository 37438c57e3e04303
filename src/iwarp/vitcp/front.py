"""A VI's front: what it keeps, decides and offers whatever drives it.

:class:`ViFront` runs one :class:`~iwarp.vitcp.connection.VitcpConnection`
through a driver it holds (:class:`~iwarp.contract.FrontDriver`), with the
state an application-facing VI needs and no I/O: the received messages
(and the octets they hold, for the receive high-water mark), the other
events an application reads as notices, completed descriptors by message
number, how establishment ended, a passive end's ConnectRequest, why the
VI ended, and the rule that keeps receive descriptors posted; and the
calls that never wait (``params``, ``register``, ``post_receive``,
``keep_posted``, ``close_reason``, ``pending_notices``). The core's events
reach that state through one table.

The asyncio and the blocking ``VitcpEndpoint`` derive from it and add
only the calls that wait: such a call checks a predicate
(:meth:`ViFront.receive_ready`, :meth:`~ViFront.settled`...) and waits for
the next input while it is false. See docs/vitcp.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from iwarp._typing import Buffer
from iwarp.contract import FrontDriver
from iwarp.vitcp.config import Negotiated, ViRole
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError
from iwarp.vitcp.events import (
    Connected,
    ConnectionRequested,
    Event,
    MessageReceived,
    RdmaReadCompleted,
    RdmaWriteReceived,
    ReconnectNeeded,
    SendCompleted,
    ViConnectionClosed,
    ViConnectionRejected,
)
from iwarp.vitcp.handshake import State
from iwarp.vitcp.memory import LocalBuffer, ViMemoryRegion

__all__ = ["RECEIVE_HIGH_WATER", "Outcome", "RequestHook", "ViFront"]

#: Received-but-unread octets above which a driver stops reading from TCP;
#: it reads again below a quarter of it.
RECEIVE_HIGH_WATER: Final = 64 << 20

#: How establishment ended on one TCP connection.
Outcome = Connected | ViConnectionRejected | ReconnectNeeded
#: Called with a passive VI and its ConnectRequest as it arrives (a
#: listener that routes it at once, :class:`~iwarp.vitcp.listener.Demultiplexer`).
RequestHook = Callable[[Any, ConnectionRequested], None]


class ViFront:
    """The adapter-independent half of one VI on one TCP connection.

    :param core: the sans-IO VI; the front posts receive descriptors on it
        (``keep_posted``) and checks it is open before posting work.
    :param keep_posted: keep this many receive descriptors posted: each
        Send received, and each RDMA Write with immediate data (it consumed a
        descriptor too), posts one more while the VI is connected.

    The adapter sets ``_driver`` before TCP is up; the driver calls
    :meth:`open`, :meth:`dispatch` and :meth:`lost`.
    """

    #: VI/TCP has no half close: closing TCP closes the VI.
    keep_open_after_eof = False
    fin_on_clean_close = False
    _driver: FrontDriver

    def __init__(self, core: VitcpConnection, *, keep_posted: int = 0) -> None:
        self.core = core
        #: Receive descriptors kept posted: each Send received (and each
        #: RDMA Write with immediate data) posts one more.
        self.keep_posted = keep_posted
        #: Set by a listener that routes ConnectRequests as they arrive.
        self.on_request: RequestHook | None = None
        #: Send messages received and not taken yet.
        self.messages: deque[MessageReceived] = deque()
        #: Octets of ``messages``: the driver pauses reading above
        #: :data:`RECEIVE_HIGH_WATER`.
        self.buffered = 0
        #: Every other event for the application: RDMA Writes received,
        #: reads served, remote errors, and whatever has no handler here.
        self.notices: deque[Event] = deque()
        #: Completed Sends, RDMA Writes and Reads by message number.
        self.completed: dict[int, SendCompleted | RdmaReadCompleted] = {}
        #: How establishment ended (the first answer); None while it runs.
        self.outcome: Outcome | None = None
        #: A passive end's ConnectRequest, until :meth:`take_request`.
        self.request: ConnectionRequested | None = None
        #: Why the VI ended (with the protocol error, if any); None while open.
        self.close_reason: VitcpClosedError | None = None

    # -- for the driver --------------------------------------------------------------

    def open(self, now: float, emss: int) -> VitcpConnection:
        """TCP is up: establishment begins (the active end sends its ConnectRequest)."""
        if self.core.role is ViRole.ACTIVE:
            self.core.tcp_established(now)
        else:
            self.core.tcp_accepted(now)
        return self.core

    def dispatch(self, events: list[Event]) -> None:
        """Apply the core's events; wake the waiting calls; hand a
        ConnectRequest to :attr:`on_request`; pause reading above
        :data:`RECEIVE_HIGH_WATER` unread octets."""
        self.handle(events)
        driver = self._driver
        driver.wake()
        if self.on_request is not None:
            request = self.take_request()
            if request is not None:
                self.on_request(self, request)
        if self.buffered > RECEIVE_HIGH_WATER:
            driver.pause_reading()

    def lost(self) -> None:
        """TCP is gone (the waiting calls see it in the driver)."""

    def applied(self) -> None:
        """After an application call on the core: its events, then its output."""
        self.dispatch(self.core.take_events())
        self._driver.flush()

    # -- the core's events ---------------------------------------------------------

    def handle(self, events: Iterable[Event]) -> bool:
        """Apply the core's events. True when a reader may stop waiting: a
        message or a notice arrived, or the VI ended."""
        arrived = False
        for event in events:
            arrived |= _HANDLERS.get(type(event), ViFront._on_notice)(self, event)
        return arrived

    # Each handler says whether what it did may end a reader's wait.

    def _on_message(self, event: MessageReceived) -> bool:
        self.messages.append(event)
        self.buffered += len(event.data)
        self._repost()
        return True

    def _on_write(self, event: RdmaWriteReceived) -> bool:
        self.notices.append(event)
        if event.immediate_data is not None:
            self._repost()
        return True

    def _on_notice(self, event: Event) -> bool:
        self.notices.append(event)
        return True

    def _on_completion(self, event: SendCompleted | RdmaReadCompleted) -> bool:
        self.completed[event.message_number] = event
        return False

    def _on_request(self, event: ConnectionRequested) -> bool:
        self.request = event
        return False

    def _on_outcome(self, event: Outcome) -> bool:
        if self.outcome is None:
            self.outcome = event
        return False

    def _on_closed(self, event: ViConnectionClosed) -> bool:
        self.close_reason = VitcpClosedError(event.reason, event.error)
        return True

    def _repost(self) -> None:
        # A descriptor was consumed; replace it, unless the VI is going away
        # (posting on a closed VI would only pile up descriptors).
        if self.keep_posted and self.core.state is State.CONNECTED:
            self.core.post_receive(1)

    # -- what a waiting call checks ------------------------------------------------

    def settled(self) -> bool:
        """Establishment on this TCP connection is over: an outcome or the end."""
        return self.outcome is not None or self.close_reason is not None

    def requested(self) -> bool:
        """A ConnectRequest arrived (passive end), or the VI ended first."""
        return self.request is not None or self.close_reason is not None

    def receive_ready(self) -> bool:
        """:meth:`take_message` would not wait: a message is queued or the VI ended."""
        return bool(self.messages) or self.close_reason is not None

    def notice_ready(self) -> bool:
        """:meth:`take_notice` would not wait: a notice is queued or the VI ended."""
        return bool(self.notices) or self.close_reason is not None

    def completion_ready(self, number: int) -> bool:
        """Message ``number``'s descriptor completed, or the VI ended."""
        return number in self.completed or self.close_reason is not None

    # -- taking ----------------------------------------------------------------------

    def closed_error(self) -> VitcpClosedError:
        """Why the VI ended ("TCP connection closed" when the core said nothing)."""
        return self.close_reason or VitcpClosedError("TCP connection closed")

    def take_message(self) -> MessageReceived:
        """The next Send message; reading resumes below a quarter of
        :data:`RECEIVE_HIGH_WATER` unread octets.

        :raises VitcpClosedError: none is queued (the VI ended).
        """
        if not self.messages:
            raise self.closed_error()
        message = self.messages.popleft()
        self.buffered -= len(message.data)
        if self.buffered < RECEIVE_HIGH_WATER // 4:
            self._driver.resume_reading()
        return message

    def take_notice(self) -> Event:
        """The next notice.

        :raises VitcpClosedError: none is queued (the VI ended).
        """
        if not self.notices:
            raise self.closed_error()
        return self.notices.popleft()

    def take_notices(self) -> list[Event]:
        """Every notice queued so far."""
        notices = list(self.notices)
        self.notices.clear()
        return notices

    def take_completion(self, number: int) -> SendCompleted | RdmaReadCompleted:
        """Message ``number``'s completion.

        :raises VitcpClosedError: it did not complete (the VI ended).
        """
        event = self.completed.pop(number, None)
        if event is None:
            raise self.closed_error()
        return event

    def take_request(self) -> ConnectionRequested | None:
        """The ConnectRequest to decide on, once (None if none arrived)."""
        request, self.request = self.request, None
        return request

    # -- posting work, which never waits ----------------------------------------------

    def check_open(self) -> None:
        """:raises VitcpClosedError: the VI ended."""
        if self.close_reason is not None:
            raise self.close_reason

    def post_send(
        self, data: Buffer | LocalBuffer, *, immediate: int | None = None, urgent: bool = False
    ) -> int:
        """Post a Send on the open VI; returns its message number."""
        self.check_open()
        return self.core.send(data, immediate=immediate, urgent=urgent)

    def post_rdma_write(
        self,
        data: Buffer | LocalBuffer,
        *,
        remote_address: int,
        memory_handle: int,
        immediate: int | None = None,
    ) -> int:
        """Post an RDMA Write on the open VI; returns its message number."""
        self.check_open()
        return self.core.rdma_write(
            data, remote_address=remote_address, memory_handle=memory_handle, immediate=immediate
        )

    def post_rdma_read(
        self,
        *,
        local: ViMemoryRegion,
        local_address: int | None,
        remote_address: int,
        memory_handle: int,
        length: int,
    ) -> int:
        """Post an RDMA Read into ``local`` (at its start when ``local_address``
        is None) on the open VI; returns its message number."""
        self.check_open()
        return self.core.rdma_read(
            local_handle=local.handle,
            local_address=local.address if local_address is None else local_address,
            remote_address=remote_address,
            memory_handle=memory_handle,
            length=length,
        )

    # -- state and calls that never wait -------------------------------------------------

    @property
    def params(self) -> Negotiated:
        """What the CE exchange settled.

        :raises VitcpClosedError: the VI was never connected.
        """
        params = self.core.params
        if params is None:
            raise VitcpClosedError("not connected")
        return params

    @property
    def connection(self) -> VitcpConnection:
        """The sans-IO core (for inspection)."""
        return self.core

    def register(
        self,
        buffer: Buffer,
        *,
        address: int | None = None,
        remote_write: bool = True,
        remote_read: bool = True,
    ) -> ViMemoryRegion:
        """Register memory for RDMA (see :meth:`VitcpConnection.register`)."""
        return self.core.register(
            buffer, address=address, remote_write=remote_write, remote_read=remote_read
        )

    def post_receive(self, count: int = 1, capacity: int | None = None) -> None:
        """Post receive descriptors."""
        self.core.post_receive(count, capacity)
        self.applied()

    def pending_notices(self) -> list[Event]:
        """Other events received so far (RDMA Write received, read served,
        remote error), without waiting."""
        return self.take_notices()


#: Which handler takes each event type; any other type is a notice
#: (RdmaReadServed, RemoteErrorReported...).
_HANDLERS: dict[type[Event], Callable[[ViFront, Any], bool]] = {
    MessageReceived: ViFront._on_message,
    RdmaWriteReceived: ViFront._on_write,
    SendCompleted: ViFront._on_completion,
    RdmaReadCompleted: ViFront._on_completion,
    ConnectionRequested: ViFront._on_request,
    Connected: ViFront._on_outcome,
    ViConnectionRejected: ViFront._on_outcome,
    ReconnectNeeded: ViFront._on_outcome,
    ViConnectionClosed: ViFront._on_closed,
}
