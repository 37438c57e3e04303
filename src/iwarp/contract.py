"""The contract every sans-IO connection core keeps, and drivers rely on.

Three cores implement it: :class:`~iwarp.mpa.connection.MpaConnection`
(MPA alone), :class:`~iwarp.rdma.endpoint.QueuePairEndpoint` (MPA + DDP +
RDMAP with a queue pair's receive pool and completion queues, built on
:class:`~iwarp.rdma.connection.RdmaConnection`, which keeps it too) and
:class:`~iwarp.vitcp.connection.VitcpConnection`. A driver (the asyncio
one in :mod:`iwarp.asyncio.driver`, the blocking one in :mod:`iwarp.sync`,
the CLI, a test wiring two cores together) does the same few things with
any of them::

    core = make_core(now=clock())
    write(core.data_to_send())                     # e.g. the MPA Request
    while not core.must_close:
        data = read()                              # b"" when the peer sent FIN
        if not data:
            while core.has_data_to_send:           # all out before the FIN
                write(core.data_to_send())
        for event in core.receive_data(data, clock()):
            handle(event)
        write(core.data_to_send())                 # a list: one sendmsg
        deadline = core.get_timer()                # sleep no longer than this
        if deadline is not None and clock() >= deadline:
            for event in core.handle_timer(clock()):
                handle(event)
    write(core.data_to_send())
    close_tcp()

Rules every core follows:

* **Time is passed in.** Each input takes ``now`` (seconds, any monotonic
  clock the driver chooses), always: no input has a default time, and the
  core never reads a clock.
* **Inputs return the events they caused**, oldest first. Calls made by
  the application (accept, post a work request, close) may produce events
  too; :meth:`Connection.take_events` hands those out. An event is returned
  exactly once, by one of the two.
* **Output is a list of buffers**, ready for ``sendmsg``/``writelines``
  (vectored I/O, no joining copy). The core keeps no reference to a buffer
  after handing it out; the driver must send them in order and whole.
* **Direct output, one case.** Besides :meth:`Connection.data_to_send`, an
  application call may return octets ready for TCP: the small-message lane's
  :meth:`QueuePairEndpoint.send_now
  <iwarp.rdma.endpoint.QueuePairEndpoint.send_now>` frames a Send at once
  and returns its FPDU. It does so only while nothing waits in
  ``data_to_send``; whoever called writes the octets at once, before
  anything ``data_to_send`` gives later (a driver's ``write``). No other
  call hands out octets.
* **Input borrowing.** :attr:`Connection.borrows_input` says whether the
  core is done with the buffer ``receive_data`` got when the call returns
  (it keeps no view of it): then a driver may pass a view of a receive
  buffer it reuses; otherwise it passes octets the core may keep (a copy
  sized to what arrived).
* **One timer.** :meth:`Connection.get_timer` is the next deadline (or
  None); the driver calls :meth:`Connection.handle_timer` at or after it.
  Any call may move the deadline: ask again after every call.
* **Order: output before the next input, the FIN included.** Everything
  the core produced is handed out (written, queued in the driver in
  order, or taken by a send lane) before the driver feeds the core its
  next input; and the peer's FIN reaches the core only once the core has
  nothing more to give (``has_data_to_send`` False, no send lane's message
  unwritten). A FIN closes MPA, after which output the core still held
  would never be framed; a peer that half-closes still reads (RFC 5044
  §7.2), and what its last FPDUs caused is its due: the Terminate
  (RFC 5040 §5.4), a Read Response. A driver that reads the data and the
  FIN in one call (the receive lane) feeds the data, writes what it
  caused, then the FIN. tests/test_driver_order.py holds both adapters'
  drivers to it with a scripted core.
* **Lanes.** A core whose bulk paths may bypass its per-FPDU code exposes
  them as one port, :attr:`Connection.lanes` (:class:`Lanes`; None for a
  core without them, or when they do not run): a driver reads it once and
  asks it only what :class:`Lanes`, :class:`LaneMessage` and
  :class:`LaneRing` declare. The rules above hold for what the lanes move.
* **Loss.** :meth:`Connection.connection_lost` reports that TCP is gone
  (reset, error, closed under us); FIN is ``receive_data(b"", now)``.
* **Asking after input.** :meth:`Connection.settled` answers the three
  questions a driver has after each input (output? a close? a timer?) in one
  call, exactly as asking them would: most received messages cause none of
  them, and a core answers that from its own state without the chain of
  properties its layers would each be asked (each a Python call).
* **Closing.** :attr:`Connection.must_close` turns True when the protocol
  requires the TCP connection to close (after a Terminate, a fatal error,
  the peer's FIN): the driver sends what :meth:`Connection.data_to_send`
  still gives, then closes. While the peer may still send, it shuts its
  write side and discards the unread input right before the socket closes
  (:func:`iwarp.sockets.finish_writing`): a close with unread input is a
  reset, and a reset drops what the kernel has not sent yet (the
  Terminate that explains the close).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Protocol, TypeVar, runtime_checkable

from iwarp._typing import Buffer

__all__ = [
    "Connection",
    "DrivenFront",
    "EventT",
    "FrontDriver",
    "LaneMessage",
    "LaneRing",
    "LaneState",
    "Lanes",
]

EventT = TypeVar("EventT")


class LaneState(IntEnum):
    """How a :meth:`LaneMessage.pump` call ended."""

    #: Every octet of the message is with the kernel.
    DONE = 0
    #: The socket is full (or the wait ran out, or the call's limit was reached).
    FULL = 1
    #: Input arrived while waiting for room: read it, then pump again.
    INPUT = 2


class LaneMessage(Protocol):
    """One large message on its way to TCP by its send lane: its FPDUs
    written from the caller's buffer, one kernel call per :meth:`pump`
    (:class:`iwarp.rdma.lanes.SendLane`)."""

    @property
    def total(self) -> int:
        """Octets of the message's FPDUs on the wire."""
        ...

    @property
    def sent(self) -> int:
        """Octets the kernel took so far."""
        ...

    @property
    def done(self) -> bool:
        """Every octet is with the kernel."""
        ...

    def pump(self, fd: int, *, wait_ms: int = 0, watch_input: bool = False) -> LaneState:
        """Write on to the socket ``fd`` until it is full, then wait for
        room without the GIL: ``wait_ms`` -1 until done, 0 not at all, else
        at most that long; with ``watch_input`` the wait also ends when the
        socket is readable (:attr:`LaneState.INPUT`: read, then pump again).
        The caller keeps ``fd`` open until the call returns.

        :raises OSError: the connection failed.
        """
        ...

    def copy(self, out: bytearray | memoryview) -> int:
        """Copy the next octets (as many as ``out`` holds) into ``out`` and
        count them as sent, for a transport that writes them itself when the
        socket is full; returns how many."""
        ...


class LaneRing(Protocol):
    """One connection's receive ring (:class:`iwarp.rdma.lanes.ReceiveLane`):
    the socket is read into it, and every FPDU the lane is sure of is
    checked and placed by one kernel call; the rest goes to the core's
    usual path, exactly as if the core had read those octets."""

    #: The last :meth:`pump` read the end of the stream (the peer's FIN);
    #: every octet before it is processed.
    eof: bool
    #: The last :meth:`pump` filled the ring: more may wait in the socket.
    filled: bool
    #: Octets the last :meth:`pump` read from the socket (or :meth:`arrived`).
    got: int

    @property
    def held(self) -> int:
        """Octets in the ring not processed yet (the start of an FPDU)."""
        ...

    def room(self) -> memoryview:
        """The ring's free octets, for a transport that reads into it (an
        event loop's ``get_buffer``); then :meth:`arrived` and :meth:`pump`
        with no socket."""
        ...

    def arrived(self, octets: int) -> None:
        """``octets`` were read into :meth:`room`."""
        ...

    def pump(self, fd: int, now: float, wait_ms: int = 0) -> list[Any]:
        """Read the socket ``fd`` into the ring (-1: no read, the octets
        :meth:`arrived`) until it is empty or the ring is full (``wait_ms``
        for the first octet, as :meth:`LaneMessage.pump`'s), and process
        what is held; returns the core's events. A partial FPDU waits.

        Order: the data read with the peer's FIN is processed here, the FIN
        is not: the driver writes what the data caused, then feeds the core
        ``receive_data(b"", now)`` (the FIN rule of the contract).

        :raises OSError: reading failed (what arrived before is processed first).
        """
        ...

    def release(self, now: float) -> list[Any]:
        """What the ring holds goes to the core's usual path (the input
        ended: a partial FPDU the core then holds or reports); returns the
        core's events."""
        ...


class Lanes(Protocol):
    """A core's lanes, as one port: bulk paths that move a message's octets
    below the core's per-FPDU code while the core keeps every decision
    (MSNs, completions, the stream position, errors), as on an RNIC
    (:mod:`iwarp.rdma.lanes`). This is all a driver may ask of them.

    Order, both ways: what a lane moves keeps the contract's rules. A send
    lane's message goes out before anything :meth:`Connection.data_to_send`
    gives after it was taken, and the peer's FIN reaches the core only once
    no send lane's message is unwritten; a receive ring's octets reach the
    core in stream order, and the FIN after them (:meth:`LaneRing.pump`).
    """

    def take_send(self) -> LaneMessage | None:
        """The core's next large message as a send lane (None: write what
        :meth:`Connection.data_to_send` gives). The core's stream position
        moves past the whole message at once: the driver writes all of it
        before any output the core makes later, and asks for the next lane
        only after :meth:`send_done`."""
        ...

    def send_done(self) -> list[Any]:
        """Every octet of the lane :meth:`take_send` gave is with TCP: the
        core completes its work request; returns the events that caused."""
        ...

    def receive_ring(self) -> LaneRing | None:
        """A receive ring for this connection (a bulk transfer arrived; an
        idle connection keeps none), or None: the receive lane does not run,
        reads go to :meth:`Connection.receive_data`. Called once."""
        ...


@runtime_checkable
class Connection(Protocol[EventT]):
    """One end of one TCP connection's protocol, without I/O.

    ``EventT`` is the core's event union (``iwarp.mpa.events.Event``,
    ``iwarp.rdma.events.Event``, ``iwarp.vitcp.events.Event``).
    """

    #: ``receive_data`` is done with its buffer when it returns (see
    #: "Input borrowing" above): a class attribute of every core.
    borrows_input: bool

    @property
    def lanes(self) -> Lanes | None:
        """The core's lanes (see "Lanes" above), or None: everything goes
        through ``receive_data`` and ``data_to_send`` (a class-level None in
        a core without them). Read once by a driver."""
        ...

    def receive_data(self, data: Buffer, now: float) -> list[EventT]:
        """Octets read from TCP; ``b""`` means the peer sent FIN.

        Returns the events they caused. Never raises for anything the peer
        sent: protocol violations become events (and usually a Terminate or
        an error code on the wire).
        """
        ...

    def data_to_send(self) -> list[Buffer]:
        """Everything queued for TCP, as a list of buffers; the queue is emptied.

        Cores that segment large messages lazily give a bounded batch per
        call; :attr:`has_data_to_send` says whether to call again once the
        transport has room.
        """
        ...

    @property
    def has_data_to_send(self) -> bool:
        """More output can be produced now (call :meth:`data_to_send` again)."""
        ...

    def take_events(self) -> list[EventT]:
        """Events produced outside the input methods (by application calls
        or by building output, e.g. send completions); the queue is emptied."""
        ...

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` must be called next, or None."""
        ...

    def handle_timer(self, now: float) -> list[EventT]:
        """Act on expired deadlines at ``now``; returns the events caused."""
        ...

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[EventT]:
        """TCP is gone (reset, error or closed locally); returns the events caused."""
        ...

    @property
    def must_close(self) -> bool:
        """The protocol requires closing TCP once :meth:`data_to_send` is flushed."""
        ...

    def settled(self) -> bool:
        """Nothing for the driver to do but wait for input: exactly
        ``not has_data_to_send and not must_close and get_timer() is None``,
        in one call (what a driver asks after each input; see "Asking after
        input" above)."""
        ...

    def set_emss(self, emss: int) -> None:
        """Report the TCP effective MSS (from ``TCP_MAXSEG``), which sizes MULPDU."""
        ...


class FrontDriver(Protocol):
    """What a protocol's front (:class:`~iwarp.mpa.front.MpaFront`,
    :class:`~iwarp.rdma.front.QueuePairFront`, :class:`~iwarp.vitcp.front.ViFront`)
    needs of the driver that moves its core's octets.

    The front holds one (composition): it handles the core's events, keeps
    the state an application reads and decides every policy (when to pause
    reading, when to close, what wakes a waiting call); the driver only
    moves octets and wakes. The asyncio driver
    (:class:`iwarp.asyncio.driver.CoreDriver`) and the blocking one
    (:class:`iwarp.sync._driver.Driver`) implement it; an adapter for
    another event loop writes one of these and the calls that wait.
    """

    @property
    def gone(self) -> bool:
        """TCP is gone: nothing more is read or written."""
        ...

    def now(self) -> float:
        """The driver's clock, the core's ``now``."""
        ...

    def flush(self) -> None:
        """Write what the core queued, as far as TCP takes it now (the
        events that causes go to the front); close TCP once the core must."""
        ...

    def write(self, data: Buffer) -> None:
        """Octets the core handed out directly (the small-message lane),
        ahead of its next ``data_to_send``: written as far as TCP takes them
        now, the rest in order; dropped once TCP is going."""
        ...

    def wake(self, key: object = None) -> None:
        """A waiting call may go on: the one waiting for ``key`` (a work
        request or descriptor), or with None every call waiting for input."""
        ...

    def started(self) -> None:
        """Startup is over (full operation): the driver may write on its
        fastest path from now on."""
        ...

    def pause_reading(self) -> None:
        """Stop reading from TCP (the front holds too much unread)."""
        ...

    def resume_reading(self) -> None:
        """Read from TCP again."""
        ...

    def close(self) -> None:
        """Close TCP (FIN) after what is queued."""
        ...


class DrivenFront(Protocol):
    """What a driver needs of the front it serves (the asyncio
    :class:`~iwarp.asyncio.driver.CoreDriver` all of it; the blocking
    driver takes only :meth:`dispatch`, its adapter opens the core)."""

    #: Keep our half open after the peer's FIN (MPA may still send; RFC 5044 §7.2).
    keep_open_after_eof: bool

    @property
    def fin_on_clean_close(self) -> bool:
        """A clean close under us now (no FIN seen) reads as the peer's FIN."""
        ...

    def open(self, now: float, emss: int) -> Connection[Any]:
        """TCP is up: make or start the core; returns it."""
        ...

    def dispatch(self, events: list[Any]) -> None:
        """Handle the core's events."""
        ...

    def lost(self) -> None:
        """TCP is gone and the core was told."""
        ...
