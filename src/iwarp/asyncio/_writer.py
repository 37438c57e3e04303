"""The asyncio driver's write side (:class:`TransportWriter`), which
:class:`iwarp.asyncio.driver.CoreDriver` adds reading and waking to.

After startup the writer writes on the transport's own socket itself while
the transport holds nothing (``writev`` of the core's buffers, the
small-message lane's FPDUs, a large message by its send lane: the core's
:class:`~iwarp.contract.Lanes`, read once), and what the kernel does not
take goes to the transport, whose ``pause_writing``/``resume_writing``
say when to go on; it keeps the contract's order (a FIN waits for the
output before it), closes (the rest of the output, then FIN) and runs the
core's one timer. docs/design.md, "The asyncio driver", says why.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from iwarp._typing import Buffer
from iwarp.asyncio._transport import receive_buffer
from iwarp.contract import Connection, DrivenFront, LaneMessage, LaneRing, Lanes, LaneState
from iwarp.mpa.connection import DEFAULT_EMSS
from iwarp.sockets import finish_writing, write_chunks

__all__ = ["TransportWriter", "wake"]

#: Octets of a send lane's message handed to the transport when the kernel is
#: full (copied once): enough to keep the socket busy until the transport
#: drained it and the lane goes on.
_LANE_PIECE: Final = 64 * 1024


def wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve ``waiter`` (if any and not done yet)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class TransportWriter(asyncio.BufferedProtocol):
    """One connection's state and its output: the core's octets to the
    transport's socket (or the transport), backpressure, closing, the
    core's timer. The front is held weakly (it holds its driver, so an
    ended connection is freed by reference counting alone)."""

    core: Connection[Any]

    def __init__(self, front: DrivenFront) -> None:
        self._loop = asyncio.get_running_loop()
        self._front = weakref.ref(front)
        self._keep_open = front.keep_open_after_eof
        self._eof = False
        #: The peer's FIN waits until the core handed out all its output
        #: (the contract's order rule): :meth:`flush` feeds it then.
        self._fin_due = False
        #: We closed TCP gracefully (not an abort, not a failure).
        self._graceful = False
        self.transport: asyncio.Transport | None = None
        #: Resolved once TCP is gone.
        self.closed: asyncio.Future[None] = self._loop.create_future()
        #: The front's driver's ``gone``: TCP is gone (``closed`` resolved).
        #: An attribute, not a property: a receive asks it per message.
        self.gone = False
        self.emss = DEFAULT_EMSS
        self._peername: object = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._write_paused = False
        self._reading_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        #: Calls waiting for input (any), and for one key each.
        self._waiters: list[asyncio.Future[None]] = []
        self._keyed: dict[object, asyncio.Future[None]] = {}
        #: The transport's socket, which we write on ourselves (``writev``,
        #: send lanes) while the transport holds nothing to write.
        self._fd: int | None = None
        #: Output that waits behind the send lane's message.
        self._out: list[Buffer] = []
        self._close_when_sent = False
        self._write_error: OSError | None = None
        #: The core's lanes (iwarp.contract.Lanes), read once it is made.
        self._lanes: Lanes | None = None
        #: The message being written by its send lane (:mod:`iwarp.rdma.lanes`).
        self._lane: LaneMessage | None = None
        #: The receive lane's ring, once a bulk transfer arrives (_start_recv_lane).
        self._recv_lane: LaneRing | None = None
        #: The thread's one receive buffer (the loop's thread: looked up once).
        self._rbuf = receive_buffer()

    def handle_events(self, events: list[Any]) -> None:
        """The core's events to the front (if anyone still holds it)."""
        front = self._front()
        if front is not None:
            front.dispatch(events)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain()
        self.flush()

    # -- the write side (iwarp.contract.FrontDriver's output calls) ----------------

    def started(self) -> None:
        """Startup is over: write on the transport's own socket (:meth:`own_socket`)."""
        self.own_socket()

    def own_socket(self) -> None:
        """From now on write on the transport's own socket ourselves while
        the transport has nothing buffered: ``writev`` of the buffers (no
        copy; asyncio 3.11's ``writelines`` joins them) and send lanes. When
        the kernel is full the rest goes to the transport, which writes it
        when it can and pauses us (``pause_writing``) meanwhile: one
        descriptor per connection, and no writer callback of our own."""
        transport = self.transport
        if self._fd is not None or transport is None or not hasattr(os, "writev"):
            return
        sock = transport.get_extra_info("socket")
        # A capture's socket (records_sends) sees only what goes through the
        # transport: then everything does.
        if (
            sock is not None
            and not getattr(sock, "records_sends", False)
            and not transport.get_write_buffer_size()
        ):
            self._fd = sock.fileno()

    def flush(self) -> None:
        """Write what the core has for TCP; close TCP when the core must."""
        core = self.core
        transport = self.transport
        if transport is None:
            return
        lanes = self._lanes if self._fd is not None else None
        while True:
            if self._lane is not None:
                if self._write_paused:
                    break  # the transport writes a piece of it; resume_writing goes on
                self._pump_lane()  # (a piece the transport sent at once: on at once)
                continue
            if lanes is not None and not self._write_paused and not transport.is_closing():
                lane = lanes.take_send()
                if lane is not None:
                    self._lane = lane
                    continue
            chunks = core.data_to_send()
            if chunks and not transport.is_closing():
                self._write_chunks(chunks)
            events = core.take_events()
            if events:
                self.handle_events(events)
            if not core.has_data_to_send and self._fin_due and self._lane is None:
                # Everything the core produced is handed out: now the FIN.
                self._fin_due = False
                self.handle_events(core.receive_data(b"", self._loop.time()))
                if not self._keep_open:
                    self._close_when_sent = True
                continue
            if self._write_paused or not core.has_data_to_send:
                break
        if self._close_when_sent and self._lane is None and not transport.is_closing():
            self._close_transport(transport)
        if self._drain_waiter is not None:
            self._wake_drain()  # drain checks again what it waits for
        if core.must_close and not transport.is_closing():
            self.close()
        if self._timer is not None or core.get_timer() is not None:
            self._arm_timer()

    def _answer(self) -> None:
        """:meth:`flush` after input, when it may have something to do: the
        input caused output (a Reply, a Read Response), a close or a timer,
        or output or a drain waits. Most received messages cause none of
        these, and the core says so without a pull, in one call (``settled``)."""
        if (
            self._lane is not None
            or self._drain_waiter is not None
            or self._timer is not None
            or not self.core.settled()
        ):
            self.flush()

    def output_waiting(self) -> bool:
        """Output waits for the kernel (or behind a send lane's message)."""
        return self._write_paused or self._lane is not None

    async def drain(self, waiting: Callable[[], bool] | None = None) -> None:
        """Wait until output no longer waits, nor ``waiting()`` says it does
        (the core's own queue), or TCP is gone."""
        while (self.output_waiting() or (waiting is not None and waiting())) and not self.gone:
            self._drain_waiter = self._loop.create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    def write(self, data: Buffer) -> None:
        """Octets the core handed out directly (a small message's FPDU),
        ahead of its next ``data_to_send`` (dropped once TCP is going): one
        ``os.write`` on the socket while it is ours and the transport holds
        nothing (it runs per message), else as the core's output."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        fd = self._fd
        # The transport holds output exactly while it has paused us (its
        # high-water mark is 0, connection_made): no call into it to ask.
        if fd is None or self._lane is not None or self._write_paused:
            self._write_chunks([data])
            return
        try:
            sent = os.write(fd, data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._failed(exc)
            return
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if sent < size:
            # The transport buffers what the kernel did not take and pauses us.
            transport.write(memoryview(data).cast("B")[sent:])

    def _write_chunks(self, chunks: list[Buffer]) -> None:
        transport = self.transport
        if transport is None or not chunks:
            return
        if self._lane is not None:  # behind the lane's message (no copy)
            self._out.extend(chunks)
            return
        fd = self._fd
        if fd is not None and not transport.get_write_buffer_size():
            try:
                chunks = write_chunks(partial(os.writev, fd), chunks)
            except OSError as exc:
                self._failed(exc)
                return
            if not chunks:
                return
        # The transport buffers what the kernel did not take and pauses us.
        if len(chunks) == 1:
            transport.write(chunks[0])
        else:
            transport.writelines(chunks)

    def _failed(self, exc: OSError) -> None:
        """Our write failed: the reader sees it too; report ours."""
        self._write_error = exc
        self._graceful = False
        self._drop_output()
        if self.transport is not None:
            self.transport.abort()

    def _pump_lane(self) -> bool:
        """Write on the lane's message; True once it is all out (its
        completion handled, what waited behind it written). When the kernel
        is full, a piece of it goes to the transport, which writes it when
        it can and pauses us meanwhile (so each wake-up moves as much as the
        kernel freed, by the lane, and one piece by the transport)."""
        lane = self._lane
        transport = self.transport
        fd = self._fd
        assert lane is not None
        if fd is None or transport is None or transport.is_closing():
            self._lane = None
            return True
        try:
            state = lane.pump(fd)
        except OSError as exc:
            self._failed(exc)
            return True
        if state is not LaneState.DONE:
            piece = bytearray(min(_LANE_PIECE, lane.total - lane.sent))
            transport.write(memoryview(piece)[: lane.copy(piece)])
            if not lane.done:
                return False
        self._lane = None
        assert self._lanes is not None  # (it gave the lane)
        self.handle_events(self._lanes.send_done())
        if self._out and self.transport is not None:
            chunks, self._out = self._out, []
            self._write_chunks(chunks)
        if self._close_when_sent and self.transport is not None:
            self._close_transport(self.transport)
        return True

    def close(self) -> None:
        """Close TCP (FIN) once our queued output is out (the transport's
        own close waits for what it holds)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._lane is not None:
            self._close_when_sent = True
        else:
            self._close_transport(transport)

    def _close_transport(self, transport: asyncio.Transport) -> None:
        """``transport.close()``, which writes what it holds, then closes
        (a graceful close: :meth:`_finish_writing` before the socket closes)."""
        self._graceful = True
        transport.close()

    def _finish_writing(self) -> None:
        """A graceful close, while the peer may still send: asyncio calls
        ``connection_lost`` right before it closes the socket, with all we
        wrote in the kernel; our write side is shut then and the input
        there discarded (:func:`~iwarp.sockets.finish_writing`). A close
        with unread input is a reset, which drops what the kernel has not
        sent yet: the Terminate, the end of a Read Response."""
        fd = self._fd
        transport = self.transport
        if fd is None or transport is None or self._eof:
            return
        if type(transport).__module__ != "asyncio.selector_events":
            return  # another loop's transport (uvloop) closes in its own order
        sock = transport.get_extra_info("socket")
        # Only on the socket still open with our descriptor (a loop that
        # closed it first may have given the number to another).
        if sock is not None and sock.fileno() == fd:
            finish_writing(sock, fd)

    def abort(self) -> None:
        """Close at once (RST), dropping unsent output."""
        self._graceful = False
        self._drop_output()
        if self.transport is not None:
            self.transport.abort()

    def _drop_output(self) -> None:
        self._out.clear()
        self._lane = None

    def _wake_drain(self) -> None:
        wake(self._drain_waiter)

    # -- the timer -----------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.core.get_timer()
        if deadline == self._timer_at and (deadline is None or self._timer is not None):
            return  # armed as it should be (the common case: no timer at all)
        self._cancel_timer()
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if self.transport is None:
            return
        self.handle_events(self.core.handle_timer(self._loop.time()))
        self.flush()
