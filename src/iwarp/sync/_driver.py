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
:class:`~iwarp.contract.FrontDriver`. The socket, the output and closing
are :class:`iwarp.sync._writer.Writer`'s, which it extends with input and
the waits; clock, deadlines, opening TCP: :mod:`iwarp.sync._calls`.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from typing import Any, Final, TypeVar

from iwarp.contract import LaneRing, LaneState
from iwarp.errors import LocalProtocolError
from iwarp.sockets import RECEIVE_BULK
from iwarp.sync._calls import (
    WaitTimeoutError,
    clock,
    poll_timeout,
    sleep_until,
    spin,
    spin_read,
)
from iwarp.sync._writer import POLL_END, POLL_IN, POLL_OUT, Core, Writer

__all__ = ["BUSY_POLL", "Core", "Driver"]

T = TypeVar("T")

#: Seconds a blocking wait keeps polling the socket before it sleeps in
#: ``poll`` (busy polling, as verbs applications spin on ``ibv_poll_cq``).
#: Waking a process that slept costs more than a small message's whole
#: round trip on the machines measured (docs/sync.md): with the peer's answer
#: due within this time, the wait never sleeps. Each connection's
#: ``busy_poll`` overrides it; 0 sleeps at once.
BUSY_POLL: Final = 200e-6


class Driver(Writer):
    """Moves octets between one socket and one core, on demand: a
    :class:`~iwarp.sync._writer.Writer` that also reads and waits.

    :param dispatch: called with each non-empty list of the core's events.
    """

    def __init__(
        self, sock: socket.socket, core: Core, dispatch: Callable[[list[Any]], None]
    ) -> None:
        super().__init__(sock, core, dispatch)
        #: Seconds :meth:`wait` polls before it sleeps (:data:`BUSY_POLL`).
        self.busy_poll = BUSY_POLL

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

    # -- waiting -------------------------------------------------------------------

    def interest(self) -> int:
        """The poll events this driver waits for now (0: none)."""
        if self.sock is None:
            return 0
        mask = 0
        if self.reading and not self.eof:
            mask |= POLL_IN
        if self._out or self._lane is not None:
            mask |= POLL_OUT
        return mask

    def service(self, revents: int) -> None:
        """Act on what ``poll`` reported for this socket."""
        if revents & (POLL_IN | POLL_END) and (self.reading or revents & POLL_END):
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
            mask = POLL_IN if self.reading and not self.eof else 0
            if self._out or self._lane is not None:
                mask |= POLL_OUT
        busy = mask == POLL_IN and self.busy_poll > 0
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
            done = self._pump_lane(wait_ms, bool(mask & POLL_IN))
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

    def look(self, take: Callable[[], T | None]) -> T | None:
        """``take()``, and when it gave None and only input is awaited, once
        more after one look at the socket (what it held read and handled,
        as a :meth:`wait`'s first look): a ping-pong's answer is mostly
        there, and a blocking call then needs no wait. None: still nothing."""
        got = take()
        if (
            got is None
            and self.sock is not None
            and self.reading
            and not self.eof
            and not self._out
            and self._lane is None
            and self.busy_poll > 0
            and self._read()
        ):
            if not self._answer():
                self.run_timer()
            got = take()
        return got

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
