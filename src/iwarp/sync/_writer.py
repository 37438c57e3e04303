"""The blocking driver's socket, output and closing (:class:`Writer`),
which :class:`iwarp.sync._driver.Driver` adds input and waiting to.

A writer holds one TCP socket and one sans-IO core and moves the core's
output to the kernel as far as it takes it without blocking: ``sendmsg``
of the core's buffer list, the small-message lane's FPDUs (``write``) and a
large message by its send lane (the core's :class:`~iwarp.contract.Lanes`,
read once). It closes the socket as the contract says (the rest of the
output, then FIN; the peer's unread input discarded right before the
close), and only under a lock a lane's C call holds while it uses the
descriptor without the GIL.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Final, TypeAlias

from iwarp._typing import Buffer
from iwarp.contract import Connection, LaneMessage, LaneRing, Lanes, LaneState
from iwarp.sockets import RECEIVE_CHUNK, finish_writing, send_chunks
from iwarp.sync._calls import clock, tap_factory, tap_sent

__all__ = ["POLL_END", "POLL_IN", "POLL_OUT", "Core", "Writer"]

#: The poll events a driver waits for: input (urgent data too), room, the end.
POLL_IN: Final = select.POLLIN | select.POLLPRI
POLL_OUT: Final = select.POLLOUT
POLL_END: Final = select.POLLHUP | select.POLLERR | select.POLLNVAL

#: The connection contract every core keeps (any core's events).
Core: TypeAlias = Connection[Any]


class Writer:
    """One socket and one core: their state, the core's output to the
    kernel, and closing.

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
        self._mask = POLL_IN
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
