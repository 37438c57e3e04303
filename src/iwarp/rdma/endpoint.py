"""A queue pair without I/O: the policy every RDMA adapter shares.

:class:`QueuePairEndpoint` wraps the protocol stack of one connection
(:class:`~iwarp.rdma.connection.RdmaConnection`: MPA + DDP + RDMAP) with
what verbs users expect of a queue pair, so that the asyncio adapter, the
blocking adapter and tests only move octets and wake waiters:

* **the Responder's decision**: each valid MPA Request goes to ``decide``
  (:class:`~iwarp.mpa.policy.Accept` / :class:`~iwarp.mpa.policy.Reject`,
  with RFC 6581 IRD/ORD), accepted by default;
* **a receive pool**: ``receive_buffers`` buffers of ``receive_size``
  octets, registered and posted when MPA reaches full operation (before any
  message is processed, as verbs users post before ``rdma_accept``),
  reposted as each message is taken out; messages come out in order with
  :meth:`QueuePairEndpoint.take_message`;
* **wr_id routing**: completions of work the simple API tracks
  (:meth:`~QueuePairEndpoint.track`, negative ids from
  :meth:`~QueuePairEndpoint.next_wr_id`) are kept for
  :meth:`~QueuePairEndpoint.result`; completions of the pool stay inside;
  all others go to :attr:`~QueuePairEndpoint.send_cq` or
  :attr:`~QueuePairEndpoint.recv_cq`;
* **the first-send hold**: with ``first_send_delay`` an Initiator keeps its
  first FPDU back that long after the Reply (Linux siw responders may miss
  an FPDU that follows the Reply within milliseconds); the release is a
  timer like any other (:meth:`get_timer`);
* **the fence warning**: a Responder may not send before the Initiator's
  first FPDU (RFC 5044 §7.1.2 rule 4); when work it posted is still held
  by that fence after :data:`FENCE_WARNING` seconds and the peer did not
  negotiate RFC 6581 peer-to-peer, a warning is logged (logger ``iwarp``)
  with the reason and the fix, once per connection (a timer);
* **ending**: one :class:`Ended` event with the cause, once, whatever ended
  the connection (a Terminate either way, an MPA failure, a reject, the
  peer's FIN, TCP lost, or an exception in ``setup``, which is answered
  with a Terminate "local catastrophic error").

It keeps the connection contract (:class:`iwarp.contract.Connection`)::

    ep = QueuePairEndpoint(Role.INITIATOR, ProtectionDomain(), now=clock())
    sock.sendmsg(ep.data_to_send())
    for event in ep.receive_data(sock.recv(65536), clock()):
        ...   # Established, CompletionQueued, WorkFinished, MessageQueued, Ended
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import iwarp._accel as _accel
from iwarp._typing import Buffer
from iwarp.contract import Lanes
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import DEFAULT_EMSS
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
)
from iwarp.mpa.policy import ConnectionRejectedError, Decider, answer_request
from iwarp.rdma import fastpath
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.errors import ConnectionTerminatedError, describe_terminate
from iwarp.rdma.events import (
    CompletionQueued,
    Ended,
    Established,
    Event,
    MessageQueued,
    StackEvent,
    WorkFinished,
)
from iwarp.rdma.port import LanePort
from iwarp.rdma.qpbase import QueuePairBase
from iwarp.rdma.small import SmallLane
from iwarp.rdmap.atomics import ATOMIC_DEPTH
from iwarp.rdmap.errors import LocalCatastrophicError
from iwarp.rdmap.events import (
    TerminateReceived,
    TerminateSent,
)
from iwarp.rdmap.memory import MemoryRegion, ProtectionDomain
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    ImmediateData,
    RecvWR,
    SendQueueWR,
    SendWR,
    Sge,
    WorkOpcode,
)

__all__ = [
    "INITIATOR_CONFIG",
    "SEND_BATCH",
    "CompletionRecord",
    "QueuePairEndpoint",
]

#: ULPDU octets pulled from the stream per :meth:`QueuePairEndpoint.data_to_send`
#: (one ``sendmsg``): small enough that the kernel mostly takes a batch at
#: once (256 KiB and 1 MiB measured no better on loopback; bench/rdma_bench.py).
SEND_BATCH: Final = 64 << 10
#: Receive buffers a queue pair posts by default, and their size.
DEFAULT_RECEIVE_BUFFERS: Final = 4
DEFAULT_RECEIVE_SIZE: Final = 1 << 16
#: Seconds a Responder's posted work may wait for the Initiator's first FPDU
#: (the MPA fence) before a warning says why it does not go out.
FENCE_WARNING: Final = 1.0
#: What an RDMA ``connect`` uses when given no config: a Rev 2 Request that
#: offers RFC 6581 peer-to-peer with Write and Read RTR (RFC 6581 §9.2). The
#: Initiator's zero-length RTR message then lifts the Responder's fence at
#: once (RFC 5044 §7.1.2 rule 4), so either side may send first. A Responder
#: answers whatever the Initiator's A bit asks (its config only says which RTR
#: types it takes), so ``serve`` needs no such default. MPA alone (no RDMAP)
#: cannot send an RTR, which is why this is not :class:`MpaConfig`'s default.
INITIATOR_CONFIG: Final = MpaConfig(peer_to_peer=True)

_log = logging.getLogger("iwarp")
#: Looked up once (per message, an enum member's lookup is not free).
_OPERATIONAL: Final = StreamState.OPERATIONAL
_WAIT_PEER: Final = StreamState.WAIT_PEER


class CompletionRecord:
    """Completions of one queue pair's send or receive work, in order, as the
    endpoint keeps them (the adapters' completion queues,
    :class:`~iwarp.rdma.front.CompletionQueueFront`, take them from here)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        # Made on the first completion: an idle connection pays for no deque.
        self._items: deque[Completion] | None = None

    def __len__(self) -> int:
        return 0 if self._items is None else len(self._items)

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` (default: all) completions."""
        items = self._items
        if not items:
            return []
        n = len(items) if max_entries is None else min(max_entries, len(items))
        return [items.popleft() for _ in range(n)]

    def push(self, completion: Completion) -> None:
        """Add a completion (the endpoint does this)."""
        if self._items is None:
            self._items = deque()
        self._items.append(completion)


@dataclass(frozen=True, slots=True)
class QueuePairOptions:
    """How ``connect``, ``serve``, ``listen`` and ``accept`` set up a queue
    pair, in every adapter: the arguments of :class:`QueuePairEndpoint`
    that do not depend on the connection, and their defaults in one place.

    ``receive_buffers`` None means the default pool
    (:data:`DEFAULT_RECEIVE_BUFFERS`), or none when the application has a
    ``setup`` callback that posts its own receives.
    """

    config: MpaConfig
    private_data: bytes = b""
    receive_buffers: int | None = None
    receive_size: int = DEFAULT_RECEIVE_SIZE
    first_send_delay: float = 0.0
    shared_cq: bool = False
    decide: Decider | None = None
    atomic_ord: int = ATOMIC_DEPTH
    atomic_ird: int = ATOMIC_DEPTH

    def endpoint(
        self, role: Role, pd: ProtectionDomain, now: float, emss: int, setup: Setup | None
    ) -> QueuePairEndpoint:
        """The sans-IO queue pair of one new TCP connection."""
        buffers = self.receive_buffers
        if buffers is None:
            buffers = DEFAULT_RECEIVE_BUFFERS if setup is None else 0
        return QueuePairEndpoint(
            role,
            pd,
            self.config,
            private_data=self.private_data,
            now=now,
            emss=emss,
            receive_buffers=buffers,
            receive_size=self.receive_size,
            shared_cq=self.shared_cq,
            first_send_delay=self.first_send_delay,
            decide=self.decide,
            setup=setup,
            atomic_ord=self.atomic_ord,
            atomic_ird=self.atomic_ird,
        )


#: The MessageQueued event of each message size met, made once (events are
#: immutable values; a frozen dataclass costs more to make than the rest of
#: a small message's receive bookkeeping). At most this many sizes are kept.
_MESSAGE_EVENTS: dict[int, MessageQueued] = {}
_MESSAGE_EVENTS_KEPT: Final = 4096


def _message_event(length: int) -> MessageQueued:
    """The MessageQueued event of a message of ``length`` octets, kept in
    :data:`_MESSAGE_EVENTS` while there is room."""
    event = _MESSAGE_EVENTS.get(length)
    if event is None:
        event = MessageQueued(length)
        if len(_MESSAGE_EVENTS) < _MESSAGE_EVENTS_KEPT:
            _MESSAGE_EVENTS[length] = event
    return event


#: Called once MPA is in full operation, before any message is processed.
Setup = Callable[[], None]


class QueuePairEndpoint(QueuePairBase):
    """One queue pair on one TCP connection, without I/O.

    Its per-message calls (``send_now``, ``receive_data``,
    ``take_message``) are :class:`~iwarp.rdma.qpbase.QueuePairBase`'s: C
    calls straight into the fast path while it runs.

    :param role: MPA Initiator (sends the Request) or Responder.
    :param pd: the protection domain of the queue pair.
    :param config: MPA options (revision, CRC, markers, IRD/ORD, RTR).
    :param private_data: the Initiator's Request private data.
    :param now: the current time (startup timeouts).
    :param emss: the TCP EMSS; sizes MULPDU (``set_emss`` when known later).
    :param receive_buffers: buffers of the receive pool (0: none).
    :param receive_size: octets per pool buffer.
    :param shared_cq: one completion queue for send and receive work.
    :param first_send_delay: Initiator: seconds to hold the first FPDU
        after the Reply.
    :param decide: Responder: accept or reject each valid Request.
    :param setup: called once in full operation, before any message is
        processed: the place to post receives (:meth:`post_recv`).
    :param atomic_ord: RFC 7306 Atomic Requests we may have outstanding.
    :param atomic_ird: the peer's Atomic Requests we keep room to answer.
    """

    #: The peer closed TCP (FIN) with no Terminate before it. A class default,
    #: set on the instance only then: one more attribute per instance would
    #: pass CPython's 30 shared keys and slow every attribute read of it.
    closed_by_peer = False

    def __init__(
        self,
        role: Role,
        pd: ProtectionDomain,
        config: MpaConfig | None = None,
        *,
        private_data: bytes = b"",
        now: float = 0.0,
        emss: int = DEFAULT_EMSS,
        receive_buffers: int = 0,
        receive_size: int = DEFAULT_RECEIVE_SIZE,
        shared_cq: bool = False,
        first_send_delay: float = 0.0,
        decide: Decider | None = None,
        setup: Setup | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
    ) -> None:
        if receive_buffers < 0 or receive_size < 1:
            raise LocalProtocolError("receive_buffers must be >= 0 and receive_size >= 1")
        self.role = role
        self.pd = pd
        #: Completions of posted Sends, RDMA Writes and Reads.
        self.send_cq = CompletionRecord()
        #: Completions of posted receives (the same queue with ``shared_cq``).
        self.recv_cq = self.send_cq if shared_cq else CompletionRecord()
        #: The error that ended the connection, if any.
        self.error: IwarpError | None = None
        #: The Terminate that ended the stream (sent or received), if any.
        self.terminate: TerminateHeader | None = None
        self.terminate_received = False
        self.receive_buffers = receive_buffers
        self.receive_size = receive_size
        self._decide = decide
        self._setup = setup
        self._first_send_delay = first_send_delay
        self._hold_until: float | None = None
        self._now = now  # the latest time an input brought (post_send has none)
        self._fence_warn_at: float | None = None
        self._fence_warned = False
        self._ids = itertools.count(-1, -1)
        self._tracked: dict[int, Completion | None] = {}
        #: The receive pool's buffers by wr_id: region, work request, the region's view.
        self._pool: dict[int, tuple[MemoryRegion, RecvWR, memoryview]] = {}
        self._messages = None  # made on the first message
        self.message_octets = 0
        self._params: MpaParams | None = None
        #: How the connection ended, or None while it lives (an attribute,
        #: not a property: the adapters ask it per message; read-only).
        self.ended: Ended | None = None
        self._ending: str | None = None
        self._in_setup = False
        self._setup_error: BaseException | None = None
        self._events: list[Event] = []
        #: The small-message lane, once the RDMAP stream exists.
        self._lane: SmallLane | None = None
        self._fast = None  # while it owns the common case (iwarp.rdma.fastpath)
        self._settled_fast = False
        self.conn = RdmaConnection(
            role,
            pd,
            config,
            private_data=private_data,
            now=now,
            emss=emss,
            on_stream=self._on_stream,
            atomic_ord=atomic_ord,
            atomic_ird=atomic_ird,
        )
        self._route(self.conn.take_events(), now)

    # -- state ------------------------------------------------------------------

    @property
    def params(self) -> MpaParams | None:
        """The negotiated MPA parameters once established, else None."""
        return self._params

    @property
    def stream(self) -> RdmapStream | None:
        """The RDMAP core once in full operation (for inspection)."""
        self._disengage()
        return self.conn.stream

    @property
    def end_reason(self) -> str:
        """Why the connection ended (Terminate fields, error), for messages."""
        if self.terminate is not None:
            side = "received" if self.terminate_received else "sent"
            return f"Terminate {side}: {describe_terminate(self.terminate)}"
        if self.error is not None:
            return str(self.error)
        return "connection closed"

    @property
    def must_close(self) -> bool:
        return self.ended is not None or self.conn.must_close

    @property
    def unsent(self) -> bool:
        """Posted messages not handed to TCP yet that still can be."""
        stream = self.conn.stream
        if stream is None or self.must_close:
            return False
        # A Responder waiting for the Initiator's first message cannot send.
        return stream.unsent and stream.state is not StreamState.WAIT_PEER

    # -- verbs ------------------------------------------------------------------

    def _stream(self) -> RdmapStream:
        self._disengage()
        stream = self.conn.stream
        if stream is None:
            raise LocalProtocolError("the queue pair is not connected")
        if not self._in_setup and self.must_close:
            raise ConnectionTerminatedError(self.end_reason)
        return stream

    def post_send(self, wr: SendQueueWR) -> None:
        """Post a Send, RDMA Write, RDMA Read or RFC 7306 work request
        (FetchAdd, CmpSwap, Immediate Data); it completes in ``send_cq``
        (or :meth:`result` when tracked).

        :raises ConnectionTerminatedError: the connection has ended.
        :raises LocalProtocolError: not connected yet, or a bad request.
        """
        stream = self._stream()
        if type(wr) is SendWR and self._hold_until is None and self._sent_small(wr):
            return
        stream.post_send(wr)
        if (
            stream.state is StreamState.WAIT_PEER
            and not self._fence_warned
            and self._fence_warn_at is None
        ):
            self._fence_warn_at = self._now + FENCE_WARNING

    def _sent_small(self, wr: SendWR) -> bool:
        """A posted Send on an idle queue pair, by the small-message lane
        (:meth:`SmallLane.send <iwarp.rdma.small.SmallLane.send>`): its FPDU
        queued for :meth:`data_to_send`, its completion made at once by the
        stream (nothing after framing can fail it). False: nothing was done."""
        lane = self._lane
        if lane is None:
            return False
        frame = lane.send(wr.data, wr.solicited, wr.invalidate_stag, wr.wr_id)
        if frame is None:
            return False
        self.conn.mpa.send_lane_fpdus(frame)
        return True

    def _send_slow(
        self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None
    ) -> bytes | None:
        """:meth:`send_now` past the fast path: by the small-message lane."""
        self._disengage()
        lane = self._lane
        if lane is not None and self.ended is None and self._hold_until is None:
            # The lane frames only in full operation with the stream
            # operational, where _stream() has nothing to refuse.
            frame = lane.send(data, solicited, invalidate_stag)
            if frame is not None:
                self._engage()
                return frame
        self._stream()  # why not: not connected, or ended
        return None

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer; it completes in ``recv_cq``.

        :raises ConnectionTerminatedError: the connection has ended.
        """
        self._stream().post_recv(wr)

    def next_wr_id(self) -> int:
        """A fresh negative wr_id (negative ids are reserved for the endpoint's users
        that :meth:`track` their work, like the simple send/read API)."""
        return next(self._ids)

    def track(self, wr_id: int) -> None:
        """Keep the completion of ``wr_id`` for :meth:`result` instead of a queue."""
        self._tracked[wr_id] = None

    def untrack(self, wr_id: int) -> None:
        """Forget ``wr_id`` (its post failed)."""
        self._tracked.pop(wr_id, None)

    def result(self, wr_id: int) -> Completion | None:
        """The completion of tracked ``wr_id`` once it finished (then forgotten)."""
        completion = self._tracked.get(wr_id)
        if completion is not None:
            del self._tracked[wr_id]
        return completion

    def tracked(self) -> list[int]:
        """The tracked work requests still without a completion."""
        return [wr_id for wr_id, done in self._tracked.items() if done is None]

    def abort(self, error: IwarpError | None = None) -> None:
        """End the connection with a Terminate "local catastrophic error"
        (e.g. the application failed); ``error`` is recorded as the cause.
        The events go to :meth:`take_events`."""
        self._disengage()
        stream = self.conn.stream
        if error is not None and self.error is None:
            self.error = error
        if stream is not None and stream.state in (StreamState.OPERATIONAL, StreamState.WAIT_PEER):
            cause = LocalCatastrophicError(str(error) if error else "local catastrophic error")
            self.conn.terminate(cause)
        self._end(error, str(error) if error else "aborted")
        self._route(self.conn.take_events(), None)

    # -- the contract ------------------------------------------------------------

    #: Like RdmaConnection: the input buffer is consumed before returning.
    borrows_input = True

    @property
    def lanes(self) -> Lanes | None:
        """Its lanes' port (:class:`iwarp.contract.Lanes`) while the lanes
        run, else None: a new port per read, which a driver does once. (Not
        an instance attribute: one more would take the queue pair's past
        the 30 keys CPython shares between instances, and every attribute
        it reads per message would cost a dict lookup.)"""
        return LanePort(self.conn, self) if _accel.LANES else None

    def _receive_slow(self, data: Buffer, now: float, done: list[Event] | None) -> list[Event]:
        """:meth:`receive_data` past the fast path: the first FPDU it
        declined, and all after it, go to the cores, which take its state
        back first. (What it took leaves _now: only the cores' events and
        timers use it.)"""
        fast = self._fast
        if fast is not None:
            if done is not None:
                self._events = done  # (empty while the fast path runs)
                data = memoryview(data)[-fast.rest :]
            self._disengage()
        self._now = now
        conn = self.conn
        # A receive that is one whole FPDU carrying a one-segment Send for
        # the head buffer (most small messages) takes the small-message
        # lane: checked and placed in one kernel call, completed without an
        # event (_received). Anything else goes the full path.
        lane = self._lane
        taken = None if lane is None or conn.events_waiting else lane.receive(data)
        if taken is None:
            self._route(conn.receive_data(data, now), now)
        else:
            wr, length, solicited = taken
            wr_id = wr.wr_id
            entry = self._pool.get(wr_id)
            if entry is None or wr_id in self._tracked:
                self._received(wr_id, length, solicited)
            else:
                self._pool_message(entry, length)
        events, self._events = self._events, []
        if lane is not None:
            self._engage()
        return events

    # -- the lanes (iwarp.rdma.port.LanePort asks these) ------------------------

    @property
    def output_held(self) -> bool:
        """The stream's output is held back (the first send's delay): no
        send lane starts."""
        return self._hold_until is not None

    def lane_begin(self) -> None:
        """A lane is about to use MPA's or the stream's state: the cores take
        back whatever the fast path holds first."""
        self._disengage()

    def lane_events(self, events: list[StackEvent], now: float | None) -> None:
        """Events the lanes caused, routed as an input's (``now``: its time)."""
        if now is not None:
            self._now = now
        self._route(events, now)

    def data_to_send(self, limit: int | None = SEND_BATCH) -> list[Buffer]:
        if self._hold_until is not None:
            limit = 0
        chunks = self.conn.data_to_send(limit)
        events = self.conn.take_events()
        if events:
            self._route(events, None)
        return chunks

    @property
    def has_data_to_send(self) -> bool:
        conn = self.conn
        if self._hold_until is not None:  # the stream's output waits; MPA's does not
            return conn.mpa.has_data_to_send
        return conn.has_data_to_send

    def _settled_slow(self) -> bool:
        """:meth:`settled` without the fast path: the connection's answer,
        unless output is held back or a warning is due (both timers) or the
        connection ended (must_close)."""
        if (
            self._hold_until is not None
            or self._fence_warn_at is not None
            or self.ended is not None
        ):
            return False
        return self.conn.settled()

    def take_events(self) -> list[Event]:
        events = self.conn.take_events()
        if events:
            self._route(events, None)
        return self._take()

    def get_timer(self) -> float | None:
        timer = self.conn.get_timer()
        if self._hold_until is None and self._fence_warn_at is None:
            return timer  # the common case: every blocking wait asks
        for own in (self._hold_until, self._fence_warn_at):
            if own is not None and (timer is None or own < timer):
                timer = own
        return timer

    def handle_timer(self, now: float) -> list[Event]:
        self._disengage()
        self._now = now
        if self._hold_until is not None and now >= self._hold_until:
            self._hold_until = None
        if self._fence_warn_at is not None and now >= self._fence_warn_at:
            self._fence_warn_at = None
            self._warn_if_fenced()
        self._route(self.conn.handle_timer(now), now)
        return self._take()

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[Event]:
        self._disengage()
        self._end(None, reason)
        self._route(self.conn.connection_lost(now, reason), now)
        if self.error is None and self._params is None:
            self.error = MpaError(MpaErrorCode.TCP_CLOSED, reason)
        self._finish_end()
        self.conn.release()
        return self._take()

    def set_emss(self, emss: int) -> None:
        self._disengage()
        self.conn.set_emss(emss)

    def close(self) -> list[Event]:
        """Close locally: outstanding work is flushed (FLUSHED completions)."""
        self._disengage()
        self._end(None, "closed locally")
        self._route(self.conn.close(), None)
        return self._take()

    def _warn_if_fenced(self) -> None:
        stream = self.conn.stream
        params = self._params
        if (
            stream is None
            or params is None
            or self.must_close
            or stream.state is not StreamState.WAIT_PEER
            or not stream.unsent
        ):
            return  # the fence lifted meanwhile, or nothing waits behind it
        if params.rtr is not None:
            return  # the Initiator's RTR is on its way and lifts the fence
        self._fence_warned = True
        _log.warning(
            "posted work is held: an MPA Responder may not send before the Initiator's "
            "first FPDU (RFC 5044 §7.1.2 rule 4), and the peer did not negotiate RFC 6581 "
            "peer-to-peer, whose RTR would lift this fence; let the client send first, or "
            "have the Initiator negotiate peer-to-peer (MpaConfig(peer_to_peer=True), the "
            "default of connect() without a config)"
        )

    # -- routing ---------------------------------------------------------------

    def _take(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def _on_stream(self, stream: RdmapStream) -> None:
        self._lane = SmallLane(self.conn.mpa, stream)
        if self.receive_buffers:
            # Each pool message is copied out and its buffer reposted as the
            # stream completes it, not after the whole receive: a receive
            # may hold more messages than the pool has buffers. (A weak way
            # back: no reference cycle through the stream.)
            endpoint = weakref.ref(self)

            def taken(completion: Completion) -> bool:
                owner = endpoint()
                return owner is not None and owner._pool_now(completion)

            stream.on_receive = taken
        self._in_setup = True
        try:
            for _ in range(self.receive_buffers):
                self._post_pool_buffer(stream)
            setup, self._setup = self._setup, None  # once; holds the adapter's object
            if setup is not None:
                setup()
        except Exception as exc:  # the application's code: reported, answered with a Terminate
            self._setup_error = exc
        finally:
            self._in_setup = False

    def _engage(self) -> None:
        """After the cores handled a message: the fast path takes over the
        common case when it may (:func:`fastpath.engage
        <iwarp.rdma.fastpath.engage>`; only for the receive pool)."""
        if self.receive_buffers and self.ended is None and self._hold_until is None:
            if self._events:
                return  # (they go out first; the fast path makes none but its own)
            messages = self._messages
            if messages is None:
                messages = self._messages = deque()
            fast = fastpath.engage(
                self.conn,
                self._pool,
                self._tracked,
                self.receive_size,
                messages,
                _MESSAGE_EVENTS,
                _message_event,
            )
            if fast is not None:
                # What settled() says while it runs: nothing moves the
                # cores or this queue pair's timers until it is handed back.
                self._settled_fast = bool(self._settled_slow())  # (C: a bool member)
            self._fast = fast

    def _disengage(self) -> None:
        """The cores take back the fast path's state, if it runs: before
        anything but the fast path's own calls uses them."""
        fast = self._fast
        if fast is not None:
            self._fast = None
            fastpath.hand_back(self.conn, fast)

    def _post_pool_buffer(self, stream: RdmapStream) -> None:
        """Register and post one more buffer of the receive pool."""
        region = self.pd.register(bytearray(self.receive_size))
        wr = RecvWR(Sge(region), wr_id=next(self._ids))
        self._pool[wr.wr_id] = (region, wr, region.view)
        stream.post_recv(wr)

    def _route(self, events: list[StackEvent], now: float | None) -> None:
        for event in events:
            handler = _ROUTES.get(type(event))
            if handler is not None:
                handler(self, event, now)
        if self._setup_error is not None:
            exc, self._setup_error = self._setup_error, None
            error = exc if isinstance(exc, IwarpError) else IwarpError(f"setup failed: {exc!r}")
            self.abort(error)
        self._finish_end()

    def _on_completion(self, completion: Completion, now: float | None) -> None:
        wr_id = completion.wr_id
        if wr_id in self._tracked:
            self._tracked[wr_id] = completion
            self._events.append(WorkFinished(wr_id))
            return
        entry = self._pool.get(wr_id)
        if entry is None:
            cq = self.recv_cq if completion.opcode is WorkOpcode.RECV else self.send_cq
            cq.push(completion)
            self._events.append(CompletionQueued(cq))
            return
        if completion.status is CompletionStatus.SUCCESS:  # else flushed with the connection
            self._pool_message(entry, completion.byte_len, completion.immediate is not None)

    def _pool_now(self, completion: Completion) -> bool:
        """A pool buffer's successful completion, taken as it happens."""
        wr_id = completion.wr_id
        entry = self._pool.get(wr_id)
        if entry is None or wr_id in self._tracked:
            return False
        self._pool_message(entry, completion.byte_len, completion.immediate is not None)
        return True

    def _received(self, wr_id: int, length: int, solicited: bool) -> None:
        """A receive outside the pool that the small-message lane completed
        without an event (:meth:`SmallLane.receive
        <iwarp.rdma.small.SmallLane.receive>`; the pool's own go to
        :meth:`_pool_message` at once): what :meth:`_on_completion` does with
        its successful completion."""
        completion = Completion(
            wr_id, WorkOpcode.RECV, CompletionStatus.SUCCESS, length, solicited=solicited
        )
        self._on_completion(completion, self._now)

    def _pool_message(
        self, entry: tuple[MemoryRegion, RecvWR, memoryview], length: int, immediate: bool = False
    ) -> None:
        """A receive pool buffer holds a message: copy it out (RFC 7306
        Immediate Data as :class:`~iwarp.rdmap.work.ImmediateData`), post the
        buffer again."""
        region, wr, view = entry
        data = ImmediateData(view[:length]) if immediate else bytes(view[:length])
        messages = self._messages
        if messages is None:
            messages = self._messages = deque()
        messages.append(data)
        self.message_octets += length
        stream = self.conn.stream
        if stream is not None:
            state = stream.state
            if state is _OPERATIONAL or state is _WAIT_PEER:
                if region.valid:
                    stream.repost_recv(wr, view)  # the whole region: Sge(region)
                else:
                    # The peer invalidated this buffer's STag (a Send with
                    # Invalidate may name any STag of the PD, as siw allows):
                    # a fresh region takes its place, the old one is forgotten.
                    del self._pool[wr.wr_id]
                    region.deregister()
                    self._post_pool_buffer(stream)
        event = _MESSAGE_EVENTS.get(length)
        self._events.append(event if event is not None else _message_event(length))

    def _on_request(self, event: RequestReceived, now: float | None) -> None:
        try:
            answer_request(self.conn, event, self._decide)
        except LocalProtocolError as exc:  # bad private data or IRD/ORD from decide
            self._end(exc, str(exc))
            return
        self._route(self.conn.take_events(), now)

    def _on_established(self, event: ConnectionEstablished, now: float | None) -> None:
        if self.ended is not None:
            return
        self._params = event.params
        if self.role is Role.INITIATOR and self._first_send_delay > 0 and now is not None:
            self._hold_until = now + self._first_send_delay
        self._events.append(Established(event.params))

    def _on_terminate(self, event: TerminateReceived | TerminateSent, now: float | None) -> None:
        self.terminate = event.header
        self.terminate_received = isinstance(event, TerminateReceived)
        self._end(self.error, self.end_reason)

    def _on_failure(self, event: ConnectionFailed | NegotiationFailed, now: float | None) -> None:
        self._end(event.error, str(event.error))

    def _on_rejected(self, event: ConnectionRejected, now: float | None) -> None:
        self._end(ConnectionRejectedError(event), event.reason)

    def _on_closed(self, event: ConnectionClosed, now: float | None) -> None:
        if self._ending is None:
            self.closed_by_peer = True
        self._end(None, "connection closed by the peer")

    def _end(self, error: IwarpError | None, reason: str) -> None:
        """Record the end; the :class:`Ended` event follows when the current
        batch of the stack's events is handled (a Terminate comes before the
        error that caused it)."""
        if self.error is None:
            self.error = error
        if self._ending is None:
            self._ending = reason

    def _finish_end(self) -> None:
        reason = self._ending
        if reason is not None and self.ended is None:
            self._hold_until = None
            self._fence_warn_at = None
            self.ended = Ended(self.error, reason if self.error is None else str(self.error))
            # Not established after all (e.g. RFC 6581 negotiation failed
            # right after the Reply): drivers see only the end.
            self._events = [e for e in self._events if not isinstance(e, Established)]
            self._events.append(self.ended)


_Route = Callable[[QueuePairEndpoint, "StackEvent", "float | None"], None]
#: How each event of the stack is handled (by type; the rest is not needed here).
_ROUTES: dict[type, _Route] = {
    Completion: QueuePairEndpoint._on_completion,  # type: ignore[dict-item]
    RequestReceived: QueuePairEndpoint._on_request,  # type: ignore[dict-item]
    ConnectionEstablished: QueuePairEndpoint._on_established,  # type: ignore[dict-item]
    TerminateReceived: QueuePairEndpoint._on_terminate,  # type: ignore[dict-item]
    TerminateSent: QueuePairEndpoint._on_terminate,  # type: ignore[dict-item]
    ConnectionFailed: QueuePairEndpoint._on_failure,  # type: ignore[dict-item]
    NegotiationFailed: QueuePairEndpoint._on_failure,  # type: ignore[dict-item]
    ConnectionRejected: QueuePairEndpoint._on_rejected,  # type: ignore[dict-item]
    ConnectionClosed: QueuePairEndpoint._on_closed,  # type: ignore[dict-item]
}
