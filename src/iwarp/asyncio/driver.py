"""One asyncio driver for every sans-IO core (:class:`iwarp.contract.Connection`).

:class:`CoreDriver` is the ``asyncio.BufferedProtocol`` of every
connection the MPA, RDMA and VI/TCP adapters open or accept; it does what
is asyncio's and nothing else: reads into the thread's one receive
buffer, writes (``writev`` and send lanes on the transport's own socket
after startup, the transport taking what the kernel did not),
backpressure both ways, waking the adapter's waiting calls, the core's
one timer, closing and freeing. The serve bookkeeping is
:mod:`iwarp.asyncio.server`'s. What each part does and why:
docs/design.md, "The asyncio driver".

Its write side, the timer and closing are
:class:`iwarp.asyncio._writer.TransportWriter`'s, which it extends with
reading and waking. A driver serves one front (:class:`~iwarp.contract.DrivenFront`: the MPA,
RDMA or VI/TCP front of the connection), which makes the core once TCP is
up and takes its events; the front holds the driver as its
:class:`~iwarp.contract.FrontDriver`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from iwarp._typing import Buffer
from iwarp.asyncio._transport import release_transport
from iwarp.asyncio._writer import TransportWriter, wake
from iwarp.contract import LaneRing, Lanes
from iwarp.rdma.lanes import RING_START
from iwarp.sockets import tcp_setup

__all__ = ["CoreDriver", "wait_until", "wake"]


async def wait_until(driver: CoreDriver, ready: Callable[[], bool], key: object = None) -> None:
    """Wait until ``ready()``, checked whenever the front wakes ``driver``
    (for ``key``); returns when TCP is gone too (the caller checks why)."""
    while not ready() and not driver.gone:
        await driver.woken(key)


class CoreDriver(TransportWriter):
    """Runs one sans-IO core on one asyncio TCP transport, for one front
    (held weakly: the front holds its driver, so an ended connection is
    freed by reference counting alone): a
    :class:`~iwarp.asyncio._writer.TransportWriter` that also reads and wakes."""

    # -- transport callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Any loop's stream transport (asyncio's, uvloop's): what is used is
        # the asyncio.Transport interface, which uvloop's keeps without
        # deriving from the class.
        self.transport = stream = cast(asyncio.Transport, transport)
        self._peername = transport.get_extra_info("peername")
        # Writes through the transport: pull more only when its buffer is
        # empty, so nothing piles up there (asyncio moves its whole buffer
        # on every partial send).
        stream.set_write_buffer_limits(high=0)
        self.emss = tcp_setup(transport.get_extra_info("socket"))  # Nagle off (RFC 5044 §5.3)
        front = self._front()
        if front is None:
            stream.abort()  # nobody waits for this connection any more
            return
        self.core = front.open(self._loop.time(), self.emss)
        self._lanes = self.core.lanes
        front.dispatch(self.core.take_events())
        self.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        lane = self._recv_lane
        if lane is not None:
            return lane.room()
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        lane = self._recv_lane
        if lane is not None:
            lane.arrived(nbytes)
            self._feed_lane(lane)
            return
        core = self.core
        if core.borrows_input:
            # Consumed before receive_data returns: no copy here. (feed,
            # inlined: this runs per message.)
            events = core.receive_data(self._rbuf[:nbytes], self._loop.time())
            if events:
                self.handle_events(events)
            self._answer()
            if nbytes >= RING_START and self._fd is not None and self._lanes is not None:
                self._start_recv_lane(self._lanes)
        else:
            # A copy the size of what arrived: the core may keep views.
            self.feed(bytes(self._rbuf[:nbytes]))

    def _start_recv_lane(self, lanes: Lanes) -> None:
        """A bulk transfer (a read of :data:`~iwarp.rdma.lanes.RING_START`
        octets or more) on a core with lanes: from now on the transport
        reads into the receive lane's ring (``get_buffer``), if the core
        gives one, and the lane checks and places what it is sure of, one C
        call per read, no thread; the rest goes to the core's usual path.
        Only while we write on the transport's own socket (no capture)."""
        self._recv_lane = lanes.receive_ring()

    def _feed_lane(self, lane: LaneRing) -> None:
        """What the transport read into the lane's ring, to the core (the
        front pauses reading when it holds too much)."""
        self.handle_events(lane.pump(-1, self._loop.time()))
        self.flush()

    def data_received(self, data: bytes) -> None:
        self.feed(data)

    def feed(self, data: Buffer) -> None:
        """Octets from TCP to the core (``b""``: FIN)."""
        self.handle_events(self.core.receive_data(data, self._loop.time()))
        self._answer()

    def eof_received(self) -> bool:
        self._eof = True
        lane = self._recv_lane
        if lane is not None and lane.held:
            # The start of an FPDU the FIN cut: the core sees it first.
            self.handle_events(lane.release(self._loop.time()))
        # What the input before the FIN caused goes out first: the FIN
        # closes MPA, and output the core had not handed out would never
        # leave (a Terminate, a Read Response).
        self.flush()
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if self._lane is not None or self.core.has_data_to_send:
            # Written as the kernel takes it; the FIN follows (flush).
            self._fin_due = True
            return True
        self.feed(b"")
        return self._keep_open and not transport.is_closing()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and self._graceful:
            self._finish_writing()
        front = self._front()
        if exc is None and not self._eof and front is not None and front.fin_on_clean_close:
            self._eof = True
            self.feed(b"")  # closed cleanly under us: as a FIN
        self._drop_output()
        self._fin_due = False
        self._fd = None
        cause = exc or self._write_error
        reason = f"TCP connection lost: {cause}" if cause else "TCP connection closed"
        if hasattr(self, "core"):
            self.handle_events(self.core.connection_lost(self._loop.time(), reason))
        self._cancel_timer()
        self.gone = True
        if not self.closed.done():
            self.closed.set_result(None)
        if front is not None:
            front.lost()
        self._wake_all()
        if self.transport is not None:
            release_transport(self.transport)
        self.transport = None
        self._wake_drain()

    # -- the front's driver (iwarp.contract.FrontDriver) ------------------------------

    def now(self) -> float:
        """The loop's clock, the cores' ``now``."""
        return self._loop.time()

    def wake(self, key: object = None) -> None:
        """Let the calls waiting in :meth:`woken` (for ``key``) check again."""
        if key is None:
            waiters = self._waiters
            if waiters:
                self._waiters = []
                for waiter in waiters:  # (wake(), inline: per received message)
                    if not waiter.done():
                        waiter.set_result(None)
        else:
            wake(self._keyed.pop(key, None))

    def woken(self, key: object = None) -> asyncio.Future[None]:
        """What to await for the next :meth:`wake` (of ``key``; one waiting
        call per key): a future, not a coroutine (one object less per wait)."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        if key is None:
            self._waiters.append(waiter)
        else:
            self._keyed[key] = waiter
        return waiter

    def _wake_all(self) -> None:
        self.wake()
        keyed, self._keyed = self._keyed, {}
        for waiter in keyed.values():
            wake(waiter)

    def pause_reading(self) -> None:
        """Stop reading until :meth:`resume_reading`."""
        transport = self.transport
        if not self._reading_paused and transport is not None and not transport.is_closing():
            self._reading_paused = True
            transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again (after :meth:`pause_reading`)."""
        if self._reading_paused:
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def peer(self) -> object:
        """The peer's address, for reports (also after TCP is gone)."""
        return self._peername
