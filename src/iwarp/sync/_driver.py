"""The blocking driver: one TCP socket, one sans-IO core, the caller's thread.

A :class:`Driver` does for the blocking adapters what an event loop does
for the asyncio ones, but only while the application is inside one of
their calls: it writes what the core queued (``sendmsg`` of the core's
buffer list, as far as the kernel takes it without blocking), waits for
the socket no longer than the caller's deadline and the core's timer
(busy polling first, then sleeping in ``poll``), reads into one reusable
buffer and feeds the core. Nothing runs in the background: no thread, no
signal. Between calls the kernel's socket buffers hold whatever arrives;
the next call picks it up.

It knows no protocol: a front gives it a core (:class:`iwarp.contract.Connection`)
and the function that handles its events, and holds it as its
:class:`~iwarp.contract.FrontDriver`. Clock, deadlines, opening TCP:
:mod:`iwarp.sync._calls`.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeAlias, TypeVar

from iwarp._typing import Buffer
from iwarp.contract import Connection, LaneMessage, LaneRing, Lanes, LaneState
from iwarp.errors import LocalProtocolError
from iwarp.sockets import RECEIVE_BULK, RECEIVE_CHUNK, finish_writing, send_chunks
from iwarp.sync._calls import (
    WaitTimeoutError,
    clock,
    poll_timeout,
    sleep_until,
    spin,
    spin_read,
    tap_factory,
    tap_sent,
)

__all__ = ["BUSY_POLL", "Core", "Driver"]

T = TypeVar("T")

_POLLIN: Final = select.POLLIN | select.POLLPRI
_POLLOUT: Final = select.POLLOUT
_POLLEND: Final = select.POLLHUP | select.POLLERR | select.POLLNVAL

#: Seconds a blocking wait keeps polling the socket before it sleeps in
#: ``poll`` (busy polling, as verbs applications spin on ``ibv_poll_cq``).
#: Waking a process that slept costs more than a small message's whole
#: round trip on the machines measured (docs/sync.md): with the peer's answer
#: due within this time, the wait never sleeps. Each connection's
#: ``busy_poll`` overrides it; 0 sleeps at once.
BUSY_POLL: Final = 200e-6


#: The connection contract every core keeps (any core's events).
Core: TypeAlias = Connection[Any]


class Driver:
    """Moves octets between one socket and one core, on demand.

    :param dispatch: called with each non-empty list of the core's events.
    """

    def __init__(
        self, sock: socket.socket, core: Core, dispatch: Callable[[list[Any]], None]
    ) -> None:
        sock.setblocking(False)
        self.sock: socket.socket | None = sock
        #: The front's driver's ``gone`` (the socket is closed), an attribute
        #: set where the socket closes: a receive asks it per message.
        self.gone = False
        self.core = core
        self._dispatch = dispatch
        self._fd = sock.fileno()
        self._poll = select.poll()
        self._mask = _POLLIN
        self._poll.register(self._fd, self._mask)
        #: Pieces of buffers the kernel did not take yet, in order.
        self._out: deque[Buffer] = deque()
        self._rbuf = bytearray(RECEIVE_CHUNK)
        self._rview = memoryview(self._rbuf)
        #: The core consumes its input before ``receive_data`` returns (the
        #: RDMA stack): it gets a view of the receive buffer, not a copy.
        self._borrows = core.borrows_input
        #: The peer sent FIN (or the connection failed): nothing more to read.
        self.eof = False
        #: The peer's FIN waits until the core's output is out (the contract's
        #: order rule): the core hears of it from :meth:`flush`.
        self._fin_due = False
        #: False while the adapter holds back reading (receive high-water mark).
        self.reading = True
        #: The socket error that ended the connection, if any.
        self.error: OSError | None = None
        self._tap = tap_factory(sock)
        #: Seconds :meth:`wait` polls before it sleeps (:data:`BUSY_POLL`).
        self.busy_poll = BUSY_POLL
        #: The core's lanes (:class:`iwarp.contract.Lanes`: large messages
        #: written, bulk input checked and placed, by one C call each), read
        #: once; None: everything goes through ``data_to_send`` and
        #: ``receive_data`` (no accelerator, a core without lanes, or a tap,
        #: which must see every octet).
        self._lanes: Lanes | None = core.lanes if self._tap is None else None
        #: The message being written by its lane, ahead of ``_out``.
        self._lane: LaneMessage | None = None
        self._lane_state = LaneState.DONE
        #: The receive lane's ring, made once a read fills the bulk buffer
        #: (an idle connection keeps no ring); None: reads go to ``receive_data``.
        self._recv_lane: LaneRing | None = None
        #: A bulk read may start the receive lane (the core lends its input).
        self._recv_lane_ok = self._lanes is not None and self._borrows
        #: Held while a lane's C call uses the descriptor number without the
        #: GIL: the socket is closed only under it (:meth:`_close_socket`),
        #: so the number is never reused (by another thread's new
        #: connection) while a lane reads or writes it.
        self._fd_lock = threading.RLock()
        #: Another thread shut the socket down to end a lane's call and
        #: closes it next: the call's error is that close, not a loss.
        self._shut = False

    # -- state ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The socket is closed: nothing will be read or written any more."""
        return self.sock is None

    @property
    def unsent(self) -> bool:
        """Octets wait for room in the kernel's send buffer."""
        return bool(self._out) or self._lane is not None

    def fileno(self) -> int:
        return self._fd

    # -- the front's driver (iwarp.contract.FrontDriver) ------------------------------

    def now(self) -> float:
        """The blocking adapters' clock (:data:`clock`)."""
        return clock()

    def wake(self, key: object = None) -> None:
        """Nothing: a blocking call checks what it waits for after each input."""

    def started(self) -> None:
        """Nothing to do: the blocking driver has one write path."""

    def pause_reading(self) -> None:
        """Stop reading (a wait then looks for output and timers only)."""
        self.reading = False

    def resume_reading(self) -> None:
        """Read again."""
        self.reading = True

    # -- output -------------------------------------------------------------------

    def flush(self) -> None:
        """Hand the core's output to the kernel, as far as it takes it now.

        Pulls more from the core while it has some (large messages are
        segmented lazily) and the kernel keeps up; closes the socket once the
        core says the protocol requires it and everything went out.
        """
        core = self.core
        while True:
            if self._lane is not None and not self._pump_lane(0):
                return  # the kernel is full: wait for room (wait() does, in C)
            if self._out and not self._send_pending():
                return  # the kernel is full: poll for POLLOUT
            if self._lanes is not None and self.sock is not None:
                lane = self._lanes.take_send()
                if lane is not None:
                    self._lane = lane
                    continue
            chunks = core.data_to_send()
            if chunks and self.sock is not None:  # else nowhere to go: the connection is gone
                # Octets first, then the events they caused (completions): the
                # peer's wait ends sooner. If the send fails, the loss events
                # come after those completions all the same (the core queues
                # them in order).
                self._send(chunks)
            events = core.take_events()
            if events:
                self._dispatch(events)
            if self._out:
                return
            if not core.has_data_to_send:
                if self._fin_due and self._lane is None:
                    # Everything the core produced is with the kernel: now
                    # it hears of the FIN (which may close it).
                    self._fin_due = False
                    events = core.receive_data(b"", clock())
                    if events:
                        self._dispatch(events)
                    continue
                break
        if core.must_close:
            self.close()

    def write(self, data: Buffer) -> None:
        """Octets the core handed out directly, ahead of its next
        ``data_to_send``: sent now, as far as the kernel takes them, behind
        whatever waits (dropped when the socket is closed)."""
        sock = self.sock
        if self._out or self._lane is not None:
            self._out.append(data)
        elif sock is not None and self._tap is None:
            # One send, no gathering (a small message's FPDU, per message).
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lost(exc)
                return
            size = len(data) if type(data) is bytes else memoryview(data).nbytes
            if sent < size:
                self._out.append(memoryview(data).cast("B")[sent:])
        elif sock is not None:
            self._send([data])

    def _send(self, chunks: list[Buffer]) -> None:
        assert self.sock is not None
        tap = self._tap
        try:
            left = send_chunks(self.sock, chunks, None if tap is None else partial(tap_sent, tap))
        except OSError as exc:
            self._lost(exc)
            return
        self._out.extend(left)

    def _pump_lane(self, wait_ms: int, watch_input: bool = False) -> bool:
        """Write on the message of the lane; True once it is all out (and
        its completion dispatched) or the connection failed. Waits for room
        as :meth:`LaneMessage.pump <iwarp.contract.LaneMessage.pump>` says."""
        lane = self._lane
        assert lane is not None
        with self._fd_lock:
            if self.sock is None:  # (closed by another thread while we waited)
                self._lane = None
                return True
            try:
                state = lane.pump(self._fd, wait_ms=wait_ms, watch_input=watch_input)
            except OSError as exc:
                self._lane = None
                if not self._shut:  # else closed under the call: not a loss
                    self._lost(exc)
                return True
            if self._shut:
                self._lane = None
                return True
        self._lane_state = state
        if state is not LaneState.DONE:
            return False
        self._lane = None
        assert self._lanes is not None  # (it gave the lane)
        events = self._lanes.send_done()
        if events:
            self._dispatch(events)
        return True

    def _send_pending(self) -> bool:
        """Retry what waits; True when all of it went out."""
        chunks = list(self._out)
        self._out.clear()
        if self.sock is None:
            return True
        self._send(chunks)
        return not self._out

    # -- input ----------------------------------------------------------------------

    def _read(self) -> bool:
        """Read what the kernel has (without blocking) and feed the core.
        False when there was nothing to read."""
        if self._recv_lane is not None:
            return self._read_lane(self._recv_lane)
        sock = self.sock
        core = self.core
        view = self._rview
        got = False
        while sock is not None and not self.eof:
            try:
                n = sock.recv_into(self._rbuf)
            except (BlockingIOError, InterruptedError):
                return got
            except OSError as exc:
                self._lost(exc)
                return True
            got = True
            now = clock()
            if self._tap is not None and n:
                self._tap.received(view[:n])
            if n == 0:
                self._end_of_input()
                return True
            if self._borrows:
                events = core.receive_data(view[:n], now)
            else:
                # One copy, the size of what arrived: the core may keep
                # views into it while this buffer is reused.
                events = core.receive_data(bytes(view[:n]), now)
            if events:
                self._dispatch(events)
            if n < len(self._rbuf) or not self.reading:
                return True
            # More to read: what this input caused goes out first (the
            # contract's order rule), then the next read.
            self._answer()
            if self._recv_lane_ok:
                # A bulk transfer: on by the receive lane from here, if the
                # core's lanes give one.
                assert self._lanes is not None
                ring = self._recv_lane = self._lanes.receive_ring()
                self._recv_lane_ok = False
                if ring is not None:
                    self._read_lane(ring)
                    return True
            if n < RECEIVE_BULK:
                # A read filled the buffer: a bulk transfer, read more at once.
                self._rbuf = bytearray(RECEIVE_BULK)
                view = self._rview = memoryview(self._rbuf)
            sock = self.sock
        return got

    def _read_lane(self, lane: LaneRing) -> bool:
        """:meth:`_read` by the receive lane: one C call per ring's worth
        reads without the GIL, checks and places what it is sure of, and
        hands the rest to the core's usual path; the lane's ring holds a
        partial FPDU between reads. False when there was nothing to read."""
        got = False
        while self.sock is not None and not self.eof:
            with self._fd_lock:
                if self.sock is None:  # (closed by another thread while we waited)
                    return True
                try:
                    events = lane.pump(self._fd, clock())
                except OSError as exc:
                    if not self._shut:  # else closed under the call: not a loss
                        self._lost(exc)
                    return True
                if self._shut:
                    return True  # (the end it read is our own shutdown)
            if events:
                self._dispatch(events)
            if lane.got:
                got = True
            if lane.eof:
                # The data that came with the FIN is processed; the FIN waits
                # for what it caused to go out.
                self._end_of_input()
                return True
            if not lane.filled or not self.reading:
                return got
            self._answer()  # what this ring's worth caused, before the next
        return got

    def _end_of_input(self) -> None:
        """The peer sent FIN: nothing more to read. The core hears of it
        once everything it produced before is with the kernel (a FIN
        closes MPA, and output the core had not handed out yet would never
        leave): now, or when :meth:`flush` has written the rest."""
        self.eof = True
        self._fin_due = True
        if self.sock is not None:
            self.flush()

    def _lost(self, exc: OSError) -> None:
        self.error = exc
        self.eof = True
        self._fin_due = False
        self._out.clear()
        self._lane = None
        events = self.core.connection_lost(clock(), f"TCP connection lost: {exc}")
        self._close_socket()
        if events:
            self._dispatch(events)

    # -- waiting -------------------------------------------------------------------

    def interest(self) -> int:
        """The poll events this driver waits for now (0: none)."""
        if self.sock is None:
            return 0
        mask = 0
        if self.reading and not self.eof:
            mask |= _POLLIN
        if self._out or self._lane is not None:
            mask |= _POLLOUT
        return mask

    def service(self, revents: int) -> None:
        """Act on what ``poll`` reported for this socket."""
        if revents & (_POLLIN | _POLLEND) and (self.reading or revents & _POLLEND):
            self._read()
        self._answer()

    def _answer(self) -> bool:
        """Send what the input caused (a Reply, a Read Response, a close):
        most received messages cause nothing to send, and the core says so
        in one call (``settled``). True: the core said so (then it has no
        timer either)."""
        core = self.core
        if self.sock is not None and (self._out or self._lane is not None):
            self.flush()
            return False
        if core.settled() and not self._fin_due:
            return True
        if self.sock is not None and (core.has_data_to_send or core.must_close or self._fin_due):
            self.flush()
        return False

    def run_timer(self) -> None:
        """Call the core's timer if it is due."""
        deadline = self.core.get_timer()
        if deadline is not None:
            now = clock()
            if now >= deadline:
                events = self.core.handle_timer(now)
                if events:
                    self._dispatch(events)
                self.flush()

    def wait(self, deadline: float | None) -> bool:
        """Wait once for the socket (or the core's timer) until ``deadline``
        and process what happened. False when there was nothing to wait for
        (socket closed, no timer): the caller's condition cannot change."""
        if self.sock is None:
            mask = 0
        else:
            mask = _POLLIN if self.reading and not self.eof else 0
            if self._out or self._lane is not None:
                mask |= _POLLOUT
        busy = mask == _POLLIN and self.busy_poll > 0
        if busy and self._read():
            # Input was there at the first look (a ping-pong's usual case):
            # handled without asking the timer first. A core that settled
            # has none; otherwise a due one runs, as after any input.
            if not self._answer():
                self.run_timer()
            return True
        timer = self.core.get_timer()
        if not mask and timer is None:
            return False
        wake = timer if deadline is None or (timer is not None and timer < deadline) else deadline
        if self._lane is not None and self.sock is not None:
            # A message on its lane: the wait for room is the C call's own
            # (without the GIL), which also ends when input arrives.
            wait_ms = -1 if wake is None else max(math.ceil((wake - clock()) * 1000.0), 0)
            done = self._pump_lane(wait_ms, bool(mask & _POLLIN))
            if not done and self._lane_state is LaneState.INPUT:
                self._read()
            self._answer()
            if timer is not None:
                self.run_timer()
            return True
        if mask != self._mask:
            self._mask = mask
            self._poll.modify(self._fd, mask)
        if busy and spin_read(self._read, wake, self.busy_poll, looked=True):
            self._answer()
        else:
            if mask:
                ready = spin(self._poll, wake, self.busy_poll) or self._poll.poll(
                    poll_timeout(wake)
                )
            else:
                ready = sleep_until(wake)
            for _, revents in ready:
                self.service(revents)
        if timer is not None:
            # A timer started by what was just read is armed by the next wait.
            self.run_timer()
        return True

    def check_stalled(self, what: str) -> None:
        """Raise if nothing can happen only because reading is paused.

        :raises LocalProtocolError: received messages must be taken first.
        """
        if self.sock is not None and not self.reading:
            raise LocalProtocolError(
                f"cannot wait for {what}: reading is paused until received "
                "messages are taken (receive() them first)"
            )

    def run_until(self, done: Callable[[], bool], deadline: float | None, what: str) -> None:
        """Drive the connection until ``done()``, or nothing more can happen
        (the caller checks why); raises as :meth:`run_for`."""
        self.run_for(lambda: done() or None, deadline, what)

    def send_all(self, deadline: float | None, what: str) -> None:
        """:meth:`flush`, then drive the connection until the kernel took
        everything (or the socket is closed); raises as :meth:`run_until`."""
        self.flush()
        if self._out or self._lane is not None:
            self.run_until(lambda: not self.unsent or self.sock is None, deadline, what)

    def run_for(self, take: Callable[[], T | None], deadline: float | None, what: str) -> T | None:
        """Drive the connection until ``take()`` gives something (not None)
        and return it; None when nothing more can happen first (the socket
        is closed and no timer runs).

        :raises WaitTimeoutError: the deadline passed first.
        """
        got = take()
        return got if got is not None else self.wait_for(take, deadline, what)

    def wait_for(self, take: Callable[[], T | None], deadline: float | None, what: str) -> T | None:
        """:meth:`run_for` when ``take()`` just gave None: waits before it
        asks again (a blocking call's hot wait, which has looked already,
        asks once per wait, not twice)."""
        while True:
            if deadline is not None and clock() >= deadline:
                raise WaitTimeoutError(f"timed out waiting for {what}")
            if not self.wait(deadline):
                self.check_stalled(what)
                return take()
            if (got := take()) is not None:
                return got

    # -- closing -------------------------------------------------------------------

    def close(self) -> None:
        """Close the socket (FIN); pieces the kernel did not take are dropped.
        While the peer may still send, the write side is shut first and its
        input discarded (:func:`~iwarp.sockets.finish_writing`), so that no
        reset overtakes what was written last."""
        self._out.clear()
        self._close_socket(graceful=True)

    def _close_socket(self, graceful: bool = False) -> None:
        sock = self.sock
        if sock is None:
            return
        if not self._fd_lock.acquire(blocking=False):
            # Another thread's lane is in a C call on this descriptor: shut
            # the socket down, which ends that call at once (a write fails, a
            # read sees the end, a wait for room wakes), and close once it
            # returned, so that the number is not reused under it.
            self._shut = True
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            self._fd_lock.acquire()
        try:
            self._close_locked(sock, graceful)
        finally:
            self._fd_lock.release()

    def _close_locked(self, sock: socket.socket, graceful: bool) -> None:
        if self.sock is not sock:
            return  # another thread closed it first
        if graceful and not self.eof and not self._shut:
            finish_writing(sock, self._fd)
        self.sock = None
        self.gone = True
        self.eof = True
        self._fin_due = False
        with contextlib.suppress(KeyError, ValueError):
            self._poll.unregister(self._fd)
        sock.close()
        if self._tap is not None:
            self._tap.close()

    def abort(self) -> None:
        """Close at once with RST (SO_LINGER 0), dropping unsent octets."""
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        self._out.clear()
        self._close_socket()
