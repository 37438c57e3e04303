"""What a VI keeps per connection, whichever driver runs it.

:class:`ViEndpointState` wraps one :class:`~iwarp.vitcp.connection.VitcpConnection`
with the state an application-facing VI needs and no I/O: the received
messages (and the octets they hold, for the receive high-water mark), the
other events an application reads as notices, completed descriptors by
message number, how establishment ended, a passive end's ConnectRequest,
why the VI ended, and the rule that keeps receive descriptors posted. The
core's events reach that state through one table.

The asyncio adapter (:mod:`iwarp.asyncio.vitcp`) and the blocking one
(:mod:`iwarp.sync.vitcp`) feed it the core's events and only wait and wake:
a call that would wait checks a predicate (:meth:`ViEndpointState.receive_ready`,
:meth:`~ViEndpointState.settled`...) and waits for the next input while it
is false. See docs/vitcp.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from iwarp._typing import Buffer
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

__all__ = ["RECEIVE_HIGH_WATER", "CompletionHook", "Outcome", "ViEndpointState"]

#: Received-but-unread octets above which a driver stops reading from TCP;
#: it reads again below a quarter of it.
RECEIVE_HIGH_WATER: Final = 64 << 20

#: How establishment ended on one TCP connection.
Outcome = Connected | ViConnectionRejected | ReconnectNeeded
#: Takes each completed descriptor (its message number, its event) instead
#: of :attr:`ViEndpointState.completed`.
CompletionHook = Callable[[int, SendCompleted | RdmaReadCompleted], None]


class ViEndpointState:
    """The adapter-independent state of one VI on one TCP connection.

    :param core: the sans-IO VI; the state posts receive descriptors on it
        (``keep_posted``) and checks it is open before posting work.
    :param keep_posted: keep this many receive descriptors posted: each
        Send received, and each RDMA Write with immediate data (it consumed a
        descriptor too), posts one more while the VI is connected.
    :param on_completion: where completions go when the adapter resolves
        them as they come (the asyncio futures); without it they wait in
        :attr:`completed` for :meth:`take_completion`.
    """

    def __init__(
        self,
        core: VitcpConnection,
        *,
        keep_posted: int = 0,
        on_completion: CompletionHook | None = None,
    ) -> None:
        self.core = core
        self.keep_posted = keep_posted
        self.on_completion = on_completion
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

    # -- the core's events ---------------------------------------------------------

    def handle(self, events: Iterable[Event]) -> bool:
        """Apply the core's events. True when a reader may stop waiting: a
        message or a notice arrived, or the VI ended."""
        arrived = False
        for event in events:
            arrived |= _HANDLERS.get(type(event), ViEndpointState._on_notice)(self, event)
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
        if self.on_completion is None:
            self.completed[event.message_number] = event
        else:
            self.on_completion(event.message_number, event)
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
        """The next Send message.

        :raises VitcpClosedError: none is queued (the VI ended).
        """
        if not self.messages:
            raise self.closed_error()
        message = self.messages.popleft()
        self.buffered -= len(message.data)
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


#: Which handler takes each event type; any other type is a notice
#: (RdmaReadServed, RemoteErrorReported...).
_HANDLERS: dict[type[Event], Callable[[ViEndpointState, Any], bool]] = {
    MessageReceived: ViEndpointState._on_message,
    RdmaWriteReceived: ViEndpointState._on_write,
    SendCompleted: ViEndpointState._on_completion,
    RdmaReadCompleted: ViEndpointState._on_completion,
    ConnectionRequested: ViEndpointState._on_request,
    Connected: ViEndpointState._on_outcome,
    ViConnectionRejected: ViEndpointState._on_outcome,
    ReconnectNeeded: ViEndpointState._on_outcome,
    ViConnectionClosed: ViEndpointState._on_closed,
}
