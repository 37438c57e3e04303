"""RDMA over TCP with asyncio: a verbs-shaped API on the sans-IO stack.

A :class:`QueuePair` is one iWARP connection (MPA + DDP + RDMAP, driven by
:class:`~iwarp.rdma.connection.RdmaConnection`) with two faces:

* **verbs**: register memory in a :class:`ProtectionDomain`, ``post_send``
  (Send, RDMA Write, RDMA Read work requests) and ``post_recv``, then poll
  or await :class:`CompletionQueue` entries with their status::

      pd = ProtectionDomain()
      mr = pd.register(bytearray(1 << 20), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
      qp = await connect("127.0.0.1", port, pd=pd)
      qp.post_send(WriteWR(b"data", remote_stag, remote_to, wr_id=1))
      completion = await qp.send_cq.wait()

* **simple**: ``await qp.send(b"hello")``, ``await qp.receive()`` (with a
  pool of receive buffers the queue pair reposts itself: ``connect(...,
  receive_buffers=8)``), ``await qp.rdma_write(data, stag, to)``,
  ``await qp.rdma_read(mr, stag, to)``. Errors raise :class:`RdmaError`.

Receive buffers must be posted before the peer's Sends arrive: pass
``receive_buffers`` or a ``setup`` callback, which runs as soon as MPA is
in full operation and before any message is processed (as verbs users post
receives before ``rdma_accept``).

Negative ``wr_id`` values are reserved for the simple API.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

from iwarp._typing import Buffer
from iwarp.asyncio.mpa import Accept, Decider, FailureHook, MpaRejectedError, Reject, tcp_emss
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
)
from iwarp.rdma.connection import Event, RdmaConnection
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    TerminateReceived,
    TerminateSent,
    WorkOpcode,
    WriteWR,
)

__all__ = [
    "Access",
    "CompletionQueue",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
    "MemoryRegion",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "connect",
    "serve",
]

#: ULPDU octets pulled from the stream per write (one ``sendmsg``): small
#: enough that the kernel mostly takes a batch at once (256 KiB and 1 MiB
#: measured no better on loopback; bench/rdma_bench.py).
SEND_BATCH: Final = 64 << 10
#: Octets read per ``recv_into`` into the queue pair's own receive buffer.
#: A fixed buffer, not asyncio's ``recv(256 KiB)``: that allocates (and
#: for a short read shrinks) 256 KiB per call, ~14 us per small message.
RECEIVE_CHUNK: Final = 256 << 10
#: Most buffers per ``sendmsg`` (Linux IOV_MAX is 1024); longer lists of
#: small FPDUs' pieces go out in several calls.
_MAX_IOV: Final = 512
#: Received-but-unread octets of the simple receive path above which reading pauses.
RECEIVE_HIGH_WATER: Final = 4 << 20


class RdmaError(IwarpError):
    """A work request completed with an error status."""

    def __init__(self, completion: Completion, terminate: TerminateHeader | None = None) -> None:
        where = ""
        if terminate is not None:
            where = (
                f" (Terminate layer {terminate.layer}, type {terminate.etype}, "
                f"code {terminate.code:#04x})"
            )
        super().__init__(
            f"{completion.opcode.value} work request {completion.wr_id}: "
            f"{completion.status.value}{where}"
        )
        self.completion = completion
        self.terminate = terminate


class ConnectionTerminatedError(LocalProtocolError):
    """The connection ended (Terminate, close or failure): nothing can be
    posted or received any more. The message says why."""


class ConnectionRejectedError(MpaRejectedError):
    """MPA startup ended in a reject (R=1 from the peer, or a local policy
    or ``decide`` refused); ``event`` has the frame and its private data.

    The same error as the MPA adapter's: a reject is neither API misuse nor
    a protocol violation.
    """


class CompletionQueue:
    """Completions of one queue pair's send or receive work, in order."""

    def __init__(self) -> None:
        self._items: deque[Completion] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` completions without waiting."""
        n = len(self._items) if max_entries is None else min(max_entries, len(self._items))
        return [self._items.popleft() for _ in range(n)]

    async def wait(self) -> Completion:
        """The next completion.

        :raises ConnectionTerminatedError: the connection is over and no
            completion is left.
        """
        while not self._items:
            if self._closed:
                raise ConnectionTerminatedError("the queue pair is closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    def _push(self, completion: Completion) -> None:
        self._items.append(completion)
        self._wake()

    def _close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def _unsent_part(chunks: list[Buffer], sent: int) -> list[Buffer]:
    """What is left of ``chunks`` after ``sent`` octets went out."""
    for i, chunk in enumerate(chunks):
        size = chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
        if sent < size:
            rest = chunks[i:]
            if sent:
                rest[0] = memoryview(chunk).cast("B")[sent:]
            return rest
        sent -= size
    return []


Setup = Callable[["QueuePair"], None]


class QueuePair(asyncio.BufferedProtocol):
    """One iWARP connection: queue pair, completion queues and simple API.

    Made by :func:`connect` and :func:`serve`; not instantiated directly.
    """

    def __init__(
        self,
        role: Role,
        pd: ProtectionDomain,
        config: MpaConfig,
        *,
        private_data: bytes = b"",
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        first_send_delay: float = 0.0,
        shared_cq: bool = False,
        decide: Decider | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.pd = pd
        self.role = role
        self.config = config
        #: Completions of posted Sends, RDMA Writes and Reads.
        self.send_cq = CompletionQueue()
        #: Completions of posted receives (the same queue with ``shared_cq``).
        self.recv_cq = self.send_cq if shared_cq else CompletionQueue()
        self._private_data = private_data
        self._receive_buffers = receive_buffers
        self._receive_size = receive_size
        self._setup = setup
        self._decide = decide
        self._first_send_delay = first_send_delay
        self._hold = False
        self.conn: RdmaConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.established: asyncio.Future[MpaParams] = self._loop.create_future()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        #: The error that ended the connection, if any.
        self.error: IwarpError | None = None
        #: The Terminate that ended the stream (sent or received), if any.
        self.terminate: TerminateHeader | None = None
        self.terminate_received = False
        self._ids = itertools.count(-1, -1)
        #: Simple-API work in flight: a future once someone waits for it.
        self._pending: dict[int, asyncio.Future[Completion] | None] = {}
        #: Completions of simple-API work that finished while it was posted.
        self._finished: dict[int, Completion] = {}
        self._pool: dict[int, tuple[MemoryRegion, RecvWR]] = {}
        self._messages: deque[bytes] = deque()
        self._message_octets = 0
        self._reader: asyncio.Future[None] | None = None
        self._write_paused = False
        self._reading_paused = False
        self._idle: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._rbuf = memoryview(bytearray(RECEIVE_CHUNK))
        #: A duplicate of the TCP socket we write with (closed with the connection).
        self._sock: socket.socket | None = None
        #: FPDU pieces the kernel did not take yet (written when it can).
        self._out: deque[Buffer] = deque()
        self._close_when_sent = False
        #: Our writer is registered: ``_out`` waits for the kernel.
        self._writer = False
        self._write_error: OSError | None = None

    # -- properties ---------------------------------------------------------------

    @property
    def params(self) -> MpaParams:
        """The negotiated MPA parameters (CRC, markers, IRD/ORD, MULPDU, RTR...)."""
        assert self.conn is not None and self.conn.params is not None
        return self.conn.params

    @property
    def stream(self) -> RdmapStream:
        """The RDMAP core (for inspection)."""
        assert self.conn is not None and self.conn.stream is not None
        return self.conn.stream

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        """Register memory in this queue pair's protection domain."""
        return self.pd.register(buffer, access, address=address)

    # -- verbs --------------------------------------------------------------------

    def post_send(self, wr: SendWR | WriteWR | ReadWR) -> None:
        """Post a Send, RDMA Write or RDMA Read; its completion goes to ``send_cq``."""
        self._connection().post_send(wr)
        self._flush()

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer; its completion goes to ``recv_cq``."""
        self._connection().post_recv(wr)

    def _connection(self) -> RdmaConnection:
        if self.conn is None or self.conn.stream is None:
            raise LocalProtocolError("the queue pair is not connected")
        if self.conn.must_close:
            raise ConnectionTerminatedError(self.end_reason)
        return self.conn

    # -- simple API -----------------------------------------------------------------

    async def _run(self, wr: SendWR | WriteWR | ReadWR) -> Completion:
        wr_id = wr.wr_id
        self._pending[wr_id] = None
        try:
            self.post_send(wr)
        except BaseException:
            self._pending.pop(wr_id, None)
            raise
        # A Send or Write that TCP took at once completed while it was
        # posted: no future, no trip through the event loop.
        completion = self._finished.pop(wr_id, None)
        if completion is None:
            future: asyncio.Future[Completion] = self._loop.create_future()
            self._pending[wr_id] = future
            completion = await future
        if not completion.ok:
            raise RdmaError(completion, self.terminate)
        return completion

    async def send(
        self, data: Buffer | Sge, *, solicited: bool = False, invalidate_stag: int | None = None
    ) -> None:
        """Send a message into the peer's next receive buffer; wait for completion."""
        await self._run(
            SendWR(data, next(self._ids), solicited=solicited, invalidate_stag=invalidate_stag)
        )

    async def rdma_write(self, data: Buffer | Sge, remote_stag: int, remote_to: int) -> None:
        """RDMA Write ``data`` to the peer's (``remote_stag``, ``remote_to``)."""
        await self._run(WriteWR(data, remote_stag, remote_to, next(self._ids)))

    async def rdma_read(self, local: MemoryRegion | Sge, remote_stag: int, remote_to: int) -> int:
        """RDMA Read into ``local`` (a region with local write access); returns octets."""
        sge = local if isinstance(local, Sge) else Sge(local)
        completion = await self._run(ReadWR(sge, remote_stag, remote_to, next(self._ids)))
        return completion.byte_len

    async def receive(self) -> bytes:
        """The next message received into the queue pair's receive pool.

        :raises ConnectionTerminatedError: the connection ended first.
        """
        if not self._receive_buffers:
            raise LocalProtocolError("no receive pool: pass receive_buffers to connect/serve")
        while not self._messages:
            if self.closed.done() or self.terminate is not None or self.error is not None:
                raise ConnectionTerminatedError(self.end_reason)
            self._reader = self._loop.create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        data = self._messages.popleft()
        self._message_octets -= len(data)
        if self._reading_paused and self._message_octets < RECEIVE_HIGH_WATER // 4:
            self._reading_paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        return data

    async def flush(self) -> None:
        """Wait until every posted message was handed to TCP (RDMA Reads
        beyond ORD go out as earlier ones complete)."""
        while self._unsent() and not self.closed.done():
            self._idle = self._loop.create_future()
            try:
                await self._idle
            finally:
                self._idle = None

    async def close(self) -> None:
        """Graceful close: send what is posted, then FIN; outstanding work is flushed."""
        await self.flush()
        transport = self.transport
        if self.conn is not None:
            self._dispatch(self.conn.close())
        if transport is not None and not transport.is_closing():
            self._write(self.conn.data_to_send(0) if self.conn is not None else [])
            self._close_transport()
        await self.closed

    def abort(self) -> None:
        """Close at once (RST)."""
        self._drop_output()
        if self.transport is not None:
            self.transport.abort()

    @property
    def end_reason(self) -> str:
        """Why the connection ended (Terminate fields, error), for messages."""
        if self.terminate is not None:
            side = "received" if self.terminate_received else "sent"
            t = self.terminate
            return f"Terminate {side}: layer {t.layer}, type {t.etype}, code {t.code:#04x}"
        if self.error is not None:
            return str(self.error)
        return "connection closed"

    # -- transport callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # When the transport writes (no socket of our own, below): pull more
        # ULPDUs only when its buffer is empty, so what the kernel does not
        # take at once is copied there once, never piled up (asyncio moves
        # its whole buffer on every partial send).
        transport.set_write_buffer_limits(high=0)
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(socket, "CMSG_LEN"):  # sendmsg exists (not Windows)
            # We write FPDUs ourselves, with sendmsg on a duplicate of the
            # socket (its own descriptor, so its own writer registration):
            # asyncio 3.11's writelines joins the pieces (a copy of every
            # octet), and what the kernel does not take at once is copied
            # into the transport's buffer and moved again as it drains.
            with contextlib.suppress(OSError):
                self._sock = sock.dup()
        self.conn = RdmaConnection(
            self.role,
            self.pd,
            self.config,
            private_data=self._private_data,
            now=self._loop.time(),
            emss=tcp_emss(transport),
            on_stream=self._on_stream,
        )
        self._flush()
        self._arm_timer()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._rbuf

    def buffer_updated(self, nbytes: int) -> None:
        # A copy the size of what arrived (cheap next to asyncio's per-read
        # allocation): the core may keep views into it, the buffer is reused.
        self.data_received(bytes(self._rbuf[:nbytes]))

    def data_received(self, data: bytes) -> None:
        """Octets from TCP (``buffer_updated`` calls this)."""
        assert self.conn is not None
        self._dispatch(self.conn.receive_data(data, self._loop.time()))
        self._flush()

    def eof_received(self) -> bool:
        assert self.conn is not None
        self._dispatch(self.conn.receive_data(b"", self._loop.time()))
        self._flush()
        return True  # we close once our side is done

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_output()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        exc = exc or self._write_error
        if self.conn is not None:
            reason = f"TCP connection lost: {exc}" if exc else "TCP connection closed"
            self._dispatch(self.conn.connection_lost(reason))
        if self._timer is not None:
            self._timer.cancel()
        if not self.established.done():
            self.established.set_exception(
                self.error or MpaError(MpaErrorCode.TCP_CLOSED, "connection closed")
            )
            self.established.exception()
        for future in self._pending.values():
            if future is not None and not future.done():
                future.set_exception(ConnectionTerminatedError(self.end_reason))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        self.send_cq._close()
        self.recv_cq._close()
        self._wake(self._reader)
        self._wake(self._idle)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._flush()

    # -- the stack's events -----------------------------------------------------------

    def _on_stream(self, stream: RdmapStream) -> None:
        for _ in range(self._receive_buffers):
            region = self.pd.register(bytearray(self._receive_size))
            wr = RecvWR(Sge(region), wr_id=next(self._ids))
            self._pool[wr.wr_id] = (region, wr)
            stream.post_recv(wr)
        if self._setup is not None:
            self._setup(self)

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Completion):
                self._complete(event)
            elif isinstance(event, ConnectionEstablished):
                if self.role is Role.INITIATOR and self._first_send_delay > 0:
                    # siw-vm README: a siw responder may miss an FPDU that
                    # follows its Reply within a few milliseconds.
                    self._hold = True
                    self._loop.call_later(self._first_send_delay, self._release)
                if not self.established.done():
                    self.established.set_result(event.params)
            elif isinstance(event, RequestReceived):
                assert self.conn is not None
                decision = Accept() if self._decide is None else self._decide(event)
                if isinstance(decision, Reject):
                    self._dispatch(self.conn.reject(decision.private_data))
                else:
                    self._dispatch(
                        self.conn.accept(decision.private_data, ird=decision.ird, ord=decision.ord)
                    )
            elif isinstance(event, (TerminateReceived, TerminateSent)):
                self.terminate = event.header
                self.terminate_received = isinstance(event, TerminateReceived)
                self._wake(self._reader)
            elif isinstance(event, ConnectionRejected):
                self._fail(ConnectionRejectedError(event))
            elif isinstance(event, (ConnectionFailed, NegotiationFailed)):
                self._fail(event.error)
            elif isinstance(event, ConnectionClosed):
                self._wake(self._reader)

    def _fail(self, error: IwarpError) -> None:
        if self.error is None:
            self.error = error
        if not self.established.done():
            self.established.set_exception(error)
            self.established.exception()
        self._wake(self._reader)

    def _complete(self, completion: Completion) -> None:
        wr_id = completion.wr_id
        if wr_id in self._pending:
            future = self._pending.pop(wr_id)
            if future is None:
                self._finished[wr_id] = completion  # _run is still posting it
            elif not future.done():
                future.set_result(completion)
            return
        entry = self._pool.get(wr_id)
        if entry is None:
            cq = self.recv_cq if completion.opcode is WorkOpcode.RECV else self.send_cq
            cq._push(completion)
            return
        if completion.status is not CompletionStatus.SUCCESS:
            return
        region, wr = entry
        data = bytes(region.view[: completion.byte_len])
        self._messages.append(data)
        self._message_octets += len(data)
        if self.conn is not None and self.conn.stream is not None:
            # Not contextlib.suppress: that is a context manager per message.
            try:  # noqa: SIM105
                self.conn.stream.post_recv(wr)
            except LocalProtocolError:
                pass  # a Terminate or close in the same chunk ended the stream
        if self._message_octets > RECEIVE_HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            if self.transport is not None:
                self.transport.pause_reading()
        self._wake(self._reader)

    # -- output -------------------------------------------------------------------------

    def _unsent(self) -> bool:
        conn = self.conn
        if conn is None or conn.stream is None or conn.must_close:
            return False
        # A responder waiting for the initiator's first message cannot send.
        return conn.stream.unsent and conn.stream.state is not StreamState.WAIT_PEER

    def _release(self) -> None:
        self._hold = False
        self._flush()

    def _flush(self) -> None:
        conn = self.conn
        transport = self.transport
        if conn is None or transport is None:
            return
        limit = 0 if self._hold else SEND_BATCH
        while True:
            chunks = conn.data_to_send(limit)
            if chunks and not transport.is_closing():
                self._write(chunks)
            events = conn.take_events()
            if events:
                self._dispatch(events)
            if self._write_paused or limit == 0 or not conn.has_data_to_send:
                break
        if self._idle is not None and not self._unsent():
            self._wake(self._idle)
        if conn.must_close and not transport.is_closing():
            self._close_transport()  # after the Terminate (or the peer's FIN): RFC 5040 §6.2.1
        if self._timer is not None or conn.get_timer() is not None:
            self._arm_timer()  # only MPA startup has timers

    def _write(self, chunks: list[Buffer]) -> None:
        transport = self.transport
        if transport is None or not chunks:
            return
        sock = self._sock
        if sock is None:  # no socket of our own: the transport copies
            if len(chunks) == 1:
                transport.write(chunks[0])
            else:
                transport.writelines(chunks)
            return
        if self._writer:  # the kernel is full: queue behind what waits (no copy)
            self._out.extend(chunks)
        elif not self._send(chunks):
            self._writer = self._write_paused = True  # _flush pulls no more ULPDUs
            self._loop.add_writer(sock.fileno(), self._on_writable)

    def _send(self, chunks: list[Buffer]) -> bool:
        """``sendmsg`` the pieces; False when some wait in ``_out``."""
        sock = self._sock
        assert sock is not None
        for first in range(0, len(chunks), _MAX_IOV):
            batch = chunks[first : first + _MAX_IOV]
            try:
                sent = sock.sendmsg(batch)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                # The transport's reader sees the failure too; report ours.
                self._write_error = exc
                self._drop_output()
                if self.transport is not None:
                    self.transport.abort()
                return True
            left = _unsent_part(batch, sent)
            if left:
                out = self._out
                out.extend(left)
                out.extend(chunks[first + _MAX_IOV :])
                return False
        return True

    def _on_writable(self) -> None:
        chunks: list[Buffer] = list(self._out)
        self._out.clear()
        if self._sock is None or not self._send(chunks):
            return  # still full: the writer stays registered
        self._drop_output()
        self._write_paused = False
        if self._close_when_sent:
            self._close_transport()
        else:
            self._flush()

    def _close_transport(self) -> None:
        """Close TCP (FIN) once our queued FPDUs are out."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._writer:
            self._close_when_sent = True
        else:
            transport.close()

    def _drop_output(self) -> None:
        if self._writer and self._sock is not None:
            self._loop.remove_writer(self._sock.fileno())
        self._writer = False
        self._out.clear()

    def _arm_timer(self) -> None:
        deadline = self.conn.get_timer() if self.conn is not None else None
        if deadline == self._timer_at and (deadline is None or self._timer is not None):
            return  # armed as it should be (the common case: no timer at all)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.conn is not None:
            self._dispatch(self.conn.handle_timer(self._loop.time()))
            self._flush()

    @staticmethod
    def _wake(waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def connect(
    host: str,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    receive_buffers: int = 0,
    receive_size: int = 1 << 16,
    setup: Setup | None = None,
    first_send_delay: float = 0.0,
    shared_cq: bool = False,
) -> QueuePair:
    """Connect as MPA Initiator and return the queue pair in full operation.

    :param first_send_delay: seconds to hold our first FPDU after the Reply
        (0.5 against Linux siw, whose responder may miss an early FPDU).
    :param shared_cq: one completion queue for send and receive work.
    :raises MpaError: MPA startup failed (``.code``: RFC 5044 §8) or RFC 6581
        negotiation failed (codes 6, 7; our Terminate was sent).
    :raises LocalProtocolError: the peer rejected the connection.
    """
    loop = asyncio.get_running_loop()
    domain = pd if pd is not None else ProtectionDomain()
    _, qp = await loop.create_connection(
        lambda: QueuePair(
            Role.INITIATOR,
            domain,
            config or MpaConfig(),
            private_data=private_data,
            receive_buffers=receive_buffers,
            receive_size=receive_size,
            setup=setup,
            first_send_delay=first_send_delay,
            shared_cq=shared_cq,
        ),
        host,
        port,
    )
    try:
        await qp.established
        if qp.error is not None:
            # RFC 6581 negotiation failed (codes 6, 7): the Terminate went out.
            raise qp.error
    except BaseException:
        qp._close_transport()  # sends what is queued (a Terminate), then FIN
        raise
    return qp


async def serve(
    handler: Callable[[QueuePair], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    receive_buffers: int = 0,
    receive_size: int = 1 << 16,
    setup: Setup | None = None,
    shared_cq: bool = False,
    decide: Decider | None = None,
    on_failure: FailureHook | None = None,
) -> asyncio.Server:
    """Accept iWARP connections as MPA Responder; run ``handler`` for each.

    Every Request is accepted. Each connection gets its own protection
    domain unless ``pd`` is given. The queue pair is closed when the handler
    returns.

    ``decide`` (optional) sees each valid Request and returns
    :class:`~iwarp.asyncio.mpa.Accept` or :class:`~iwarp.asyncio.mpa.Reject`.
    Connections that end before full operation (bad frames, timeouts,
    rejects) are closed and, with ``on_failure``, reported with the peer
    address.
    """
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def run(qp: QueuePair) -> None:
        try:
            await qp.established
        except IwarpError as exc:
            qp._close_transport()  # after a reject, MPA leaves TCP open
            if on_failure is not None:
                peer = None if qp.transport is None else qp.transport.get_extra_info("peername")
                on_failure(exc, peer)
            return
        try:
            await handler(qp)
        finally:
            await qp.close()

    def factory() -> QueuePair:
        qp = QueuePair(
            Role.RESPONDER,
            pd if pd is not None else ProtectionDomain(),
            config or MpaConfig(),
            receive_buffers=receive_buffers,
            receive_size=receive_size,
            setup=setup,
            shared_cq=shared_cq,
            decide=decide,
        )
        task = loop.create_task(run(qp))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return qp

    return await loop.create_server(factory, host, port)
