"""RDMA over TCP with blocking calls: verbs as pyverbs and libibverbs users know them.

A :class:`QueuePair` is one iWARP connection (MPA + DDP + RDMAP, the
sans-IO :class:`~iwarp.rdma.connection.RdmaConnection`) on a plain TCP
socket. There is no thread behind it: the caller's thread moves the octets
whenever it posts work, polls a :class:`CompletionQueue`, waits, or uses
the simple calls. Every call that can block takes ``timeout`` (seconds,
None waits without limit) and raises :class:`~iwarp.sync.WaitTimeoutError`.

* **verbs**: register memory in a :class:`ProtectionDomain`, ``post_send``
  (Send, RDMA Write, RDMA Read work requests) and ``post_recv``, then
  ``poll``/``wait`` on the completion queues::

      pd = ProtectionDomain()
      mr = pd.register(bytearray(4096), Access.LOCAL_WRITE)
      with connect("127.0.0.1", port, pd=pd, timeout=5) as qp:
          qp.post_send(ReadWR(Sge(mr), remote_stag, remote_to, wr_id=7))
          completion = qp.send_cq.wait(timeout=5)

* **simple**: ``qp.send(b"hello")``, ``qp.receive()`` (from a pool of
  receive buffers the queue pair reposts itself: ``receive_buffers=8``),
  ``qp.rdma_write(data, stag, to)``, ``qp.rdma_read(mr, stag, to)``.
  A failed work request raises :class:`RdmaError`.

Receive buffers must be posted before the peer's Sends arrive: pass
``receive_buffers`` or a ``setup`` callback, which runs as soon as MPA is
in full operation and before any message is processed.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

from iwarp._typing import Buffer
from iwarp.asyncio.mpa import Accept, Reject
from iwarp.asyncio.rdma import ConnectionRejectedError, ConnectionTerminatedError, RdmaError
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
from iwarp.mpa.policy import Decider
from iwarp.rdma.connection import RdmaConnection
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
    StreamReady,
    TerminateReceived,
    TerminateSent,
    WorkOpcode,
    WriteWR,
)
from iwarp.sync._compat import RdmaCore
from iwarp.sync._driver import (
    Driver,
    TcpListener,
    WaitTimeoutError,
    clock,
    deadline_after,
    open_tcp,
    tcp_emss,
    wait_any,
)

__all__ = [
    "Access",
    "CompletionQueue",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
    "Listener",
    "MemoryRegion",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "connect",
    "listen",
]

#: Received-but-unread octets of the simple receive path above which the
#: queue pair stops reading from TCP until the application catches up.
RECEIVE_HIGH_WATER: Final = 4 << 20

Setup = Callable[["QueuePair"], None]


class CompletionQueue:
    """Completions of work requests, in order (verbs' CQ).

    One queue may serve several queue pairs (pass it to :func:`connect` or
    :func:`listen` as ``send_cq``/``recv_cq``); :meth:`poll` and
    :meth:`wait` drive all of them.
    """

    def __init__(self) -> None:
        self._items: deque[Completion] = deque()
        self._qps: list[QueuePair] = []

    def __len__(self) -> int:
        return len(self._items)

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` completions; never blocks.

        Moves pending octets of the attached queue pairs first (what the
        kernel already holds), as ``ibv_poll_cq`` finds what the NIC did.
        """
        drivers = [qp._driver for qp in self._qps if not qp._driver.closed]
        if drivers:
            wait_any(drivers, clock())
        items = self._items
        n = len(items) if max_entries is None else min(max_entries, len(items))
        return [items.popleft() for _ in range(n)]

    def wait(self, *, timeout: float | None = None) -> Completion:
        """The next completion, waiting for it.

        :raises ConnectionTerminatedError: every attached queue pair is over
            and no completion is left.
        :raises WaitTimeoutError: none came in time.
        """
        deadline = deadline_after(timeout)
        while not self._items:
            drivers = [qp._driver for qp in self._qps if not qp._driver.closed]
            if not drivers:
                raise ConnectionTerminatedError("the queue pair is closed")
            if deadline is not None and clock() >= deadline:
                raise WaitTimeoutError("timed out waiting for a completion")
            if not wait_any(drivers, deadline):
                raise ConnectionTerminatedError("the queue pair is closed")
        return self._items.popleft()

    def _attach(self, qp: QueuePair) -> None:
        if qp not in self._qps:
            self._qps.append(qp)

    def _detach(self, qp: QueuePair) -> None:
        if qp in self._qps:
            self._qps.remove(qp)

    def _push(self, completion: Completion) -> None:
        self._items.append(completion)


class QueuePair:
    """One iWARP connection: queue pair, completion queues and simple API.

    Made by :func:`connect` and :meth:`Listener.accept`.
    """

    def __init__(
        self,
        sock: Any,
        role: Role,
        pd: ProtectionDomain,
        config: MpaConfig,
        *,
        private_data: bytes = b"",
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        send_cq: CompletionQueue | None = None,
        recv_cq: CompletionQueue | None = None,
        decide: Decider | None = None,
    ) -> None:
        self.pd = pd
        self.role = role
        self.config = config
        #: Completions of posted Sends, RDMA Writes and Reads.
        self.send_cq = send_cq if send_cq is not None else CompletionQueue()
        #: Completions of posted receives.
        self.recv_cq = recv_cq if recv_cq is not None else CompletionQueue()
        #: The error that ended the connection, if any.
        self.error: IwarpError | None = None
        #: The Terminate that ended the stream (sent or received), if any.
        self.terminate: TerminateHeader | None = None
        self.terminate_received = False
        self._receive_buffers = receive_buffers
        self._receive_size = receive_size
        self._setup = setup
        self._decide = decide
        self._established = False
        self._peer_closed = False
        self._ids = itertools.count(-1, -1)
        #: Simple-API work in flight, and the completions of finished ones.
        self._pending: set[int] = set()
        self._finished: dict[int, Completion] = {}
        self._pool: dict[int, tuple[MemoryRegion, RecvWR]] = {}
        self._messages: deque[bytes] = deque()
        self._message_octets = 0
        self.conn = RdmaConnection(
            role,
            pd,
            config,
            private_data=private_data,
            now=clock(),
            emss=tcp_emss(sock),
            on_stream=self._on_stream,
        )
        self._handlers: dict[type, Callable[[Any], None]] = {
            Completion: self._complete,
            ConnectionEstablished: self._on_established,
            RequestReceived: self._on_request,
            TerminateReceived: self._on_terminate,
            TerminateSent: self._on_terminate,
            ConnectionRejected: self._on_rejected,
            ConnectionFailed: self._on_failed,
            NegotiationFailed: self._on_failed,
            ConnectionClosed: self._on_closed,
            StreamReady: _ignore,
        }
        self._driver = Driver(sock, RdmaCore(self.conn), self._dispatch)
        self.send_cq._attach(self)
        self.recv_cq._attach(self)
        self._driver.flush()

    # -- properties ---------------------------------------------------------------

    @property
    def params(self) -> MpaParams:
        """The negotiated MPA parameters (CRC, markers, IRD/ORD, MULPDU, RTR...)."""
        params = self.conn.params
        if params is None:
            raise LocalProtocolError("the queue pair is not connected")
        return params

    @property
    def stream(self) -> RdmapStream:
        """The RDMAP core (for inspection)."""
        if self.conn.stream is None:
            raise LocalProtocolError("the queue pair is not connected")
        return self.conn.stream

    @property
    def closed(self) -> bool:
        """The TCP connection is closed."""
        return self._driver.closed

    def fileno(self) -> int:
        """The TCP socket's descriptor (for the application's own ``select``)."""
        return self._driver.fileno()

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        """Register memory in this queue pair's protection domain."""
        return self.pd.register(buffer, access, address=address)

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

    # -- verbs --------------------------------------------------------------------

    def post_send(self, wr: SendWR | WriteWR | ReadWR) -> None:
        """Post a Send, RDMA Write or RDMA Read; its completion goes to
        ``send_cq``. What TCP takes now is written before this returns."""
        self._connection().post_send(wr)
        self._driver.flush()

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer; its completion goes to ``recv_cq``."""
        self._connection().post_recv(wr)

    def _connection(self) -> RdmaConnection:
        if self.conn.stream is None:
            raise LocalProtocolError("the queue pair is not connected")
        if self.conn.must_close or self._driver.closed:
            raise ConnectionTerminatedError(self.end_reason)
        return self.conn

    # -- simple API -----------------------------------------------------------------

    def _run(self, wr: SendWR | WriteWR | ReadWR, timeout: float | None) -> Completion:
        wr_id = wr.wr_id
        self._pending.add(wr_id)
        try:
            self.post_send(wr)
            finished = self._finished
            if wr_id not in finished:
                self._driver.run_until(
                    lambda: wr_id in finished or self._driver.closed,
                    deadline_after(timeout),
                    f"{type(wr).__name__} {wr_id}",
                )
        except BaseException:
            # Timed out or failed: the completion, if it comes, goes nowhere.
            self._pending.discard(wr_id)
            self._finished.pop(wr_id, None)
            raise
        self._pending.discard(wr_id)
        completion = self._finished.pop(wr_id, None)
        if completion is None:
            raise ConnectionTerminatedError(self.end_reason)
        if not completion.ok:
            raise RdmaError(completion, self.terminate)
        return completion

    def send(
        self,
        data: Buffer | Sge,
        *,
        solicited: bool = False,
        invalidate_stag: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send a message into the peer's next receive buffer; wait until it completed."""
        wr = SendWR(data, next(self._ids), solicited=solicited, invalidate_stag=invalidate_stag)
        self._run(wr, timeout)

    def rdma_write(
        self,
        data: Buffer | Sge,
        remote_stag: int,
        remote_to: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """RDMA Write ``data`` to the peer's (``remote_stag``, ``remote_to``)."""
        self._run(WriteWR(data, remote_stag, remote_to, next(self._ids)), timeout)

    def rdma_read(
        self,
        local: MemoryRegion | Sge,
        remote_stag: int,
        remote_to: int,
        *,
        timeout: float | None = None,
    ) -> int:
        """RDMA Read into ``local`` (a region with local write access);
        returns the octets read."""
        sge = local if isinstance(local, Sge) else Sge(local)
        completion = self._run(ReadWR(sge, remote_stag, remote_to, next(self._ids)), timeout)
        return completion.byte_len

    def receive(self, *, timeout: float | None = None) -> bytes:
        """The next message received into the queue pair's receive pool.

        :raises ConnectionTerminatedError: the connection ended first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        if not self._receive_buffers:
            raise LocalProtocolError("no receive pool: pass receive_buffers to connect/listen")
        driver = self._driver
        messages = self._messages
        if not messages:
            driver.run_until(
                lambda: bool(messages) or driver.closed or self._ended(),
                deadline_after(timeout),
                "a message",
            )
            if not messages:
                raise ConnectionTerminatedError(self.end_reason)
        data = messages.popleft()
        self._message_octets -= len(data)
        if not driver.reading and self._message_octets < RECEIVE_HIGH_WATER // 4:
            driver.reading = True
        return data

    def _ended(self) -> bool:
        return self.terminate is not None or self.error is not None or self._peer_closed

    def _unsent(self) -> bool:
        conn = self.conn
        if conn.stream is None or conn.must_close or self._driver.closed:
            return False
        # A responder waiting for the initiator's first message cannot send.
        stream = conn.stream
        return self._driver.unsent or (stream.unsent and stream.state is not StreamState.WAIT_PEER)

    def flush(self, *, timeout: float | None = None) -> None:
        """Wait until every posted message was handed to TCP (RDMA Reads
        beyond ORD go out as earlier ones complete)."""
        self._driver.flush()
        self._driver.run_until(lambda: not self._unsent(), deadline_after(timeout), "the flush")

    def progress(self, *, timeout: float | None = 0.0) -> None:
        """Move octets once: read what arrived, write what is queued, run
        timers. With a ``timeout`` > 0 waits that long for something to
        happen; it never raises for running out of time."""
        self._driver.wait(deadline_after(timeout))

    def wait_closed(self, *, timeout: float | None = None) -> None:
        """Wait until the connection is over: the peer closed or reset it,
        or a Terminate ended the stream (see :attr:`end_reason`)."""
        driver = self._driver
        driver.run_until(
            lambda: driver.closed or self.conn.must_close,
            deadline_after(timeout),
            "the end of the connection",
        )

    # -- closing --------------------------------------------------------------------

    def close(self, *, timeout: float | None = 5.0) -> None:
        """Graceful close: send what is posted (for at most ``timeout``
        seconds), then FIN; outstanding work is flushed (status FLUSHED)."""
        driver = self._driver
        deadline = deadline_after(timeout)
        try:
            if not driver.closed:
                self.flush(timeout=None if deadline is None else max(deadline - clock(), 0.0))
        finally:
            self._dispatch(self.conn.close())
            if not driver.closed:
                driver.flush()
                if driver.unsent:
                    with contextlib.suppress(WaitTimeoutError):
                        driver.run_until(lambda: not driver.unsent, deadline, "the close")
            driver.close()
            self.send_cq._detach(self)
            self.recv_cq._detach(self)

    def abort(self) -> None:
        """Close at once (RST)."""
        self._driver.abort()
        self._dispatch(self.conn.connection_lost(None, "aborted by the application"))

    def __enter__(self) -> QueuePair:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.abort()

    # -- the stack's events -----------------------------------------------------------

    def _dispatch(self, events: list[Any]) -> None:
        handlers = self._handlers
        for event in events:
            handlers[type(event)](event)

    def _on_stream(self, stream: RdmapStream) -> None:
        for _ in range(self._receive_buffers):
            region = self.pd.register(bytearray(self._receive_size))
            wr = RecvWR(Sge(region), wr_id=next(self._ids))
            self._pool[wr.wr_id] = (region, wr)
            stream.post_recv(wr)
        if self._setup is not None:
            self._setup(self)

    def _on_established(self, event: ConnectionEstablished) -> None:
        self._established = True

    def _on_request(self, event: RequestReceived) -> None:
        decision: Accept | Reject = Accept() if self._decide is None else self._decide(event)
        if isinstance(decision, Reject):
            self.conn.reject(decision.private_data, ird=decision.ird, ord=decision.ord)
        else:
            self.conn.accept(decision.private_data, ird=decision.ird, ord=decision.ord)
        self._dispatch(self.conn.take_events())

    def _on_terminate(self, event: TerminateReceived | TerminateSent) -> None:
        self.terminate = event.header
        self.terminate_received = isinstance(event, TerminateReceived)

    def _on_rejected(self, event: ConnectionRejected) -> None:
        self._fail(ConnectionRejectedError(event))

    def _on_failed(self, event: ConnectionFailed | NegotiationFailed) -> None:
        self._fail(event.error)

    def _on_closed(self, event: ConnectionClosed) -> None:
        self._peer_closed = True

    def _fail(self, error: IwarpError) -> None:
        if self.error is None:
            self.error = error

    def _complete(self, completion: Completion) -> None:
        wr_id = completion.wr_id
        if wr_id in self._pending:
            self._finished[wr_id] = completion
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
        stream = self.conn.stream
        if stream is not None:
            try:  # noqa: SIM105 (a context manager per message costs)
                stream.post_recv(wr)
            except LocalProtocolError:
                pass  # a Terminate or close in the same chunk ended the stream
        if self._message_octets > RECEIVE_HIGH_WATER:
            self._driver.reading = False

    # -- startup -----------------------------------------------------------------------

    def _handshake(self, deadline: float | None) -> None:
        driver = self._driver
        try:
            driver.run_until(
                lambda: self.error is not None or self._established,
                deadline,
                "MPA startup",
            )
        except BaseException:
            driver.close()
            raise
        if self.error is None and not self._established:
            self.error = MpaError(MpaErrorCode.TCP_CLOSED, "connection closed during MPA startup")
        if self.error is not None:
            driver.flush()  # e.g. the Terminate of RFC 6581 negotiation, or a reject's Reply
            driver.close()
            raise self.error


def _ignore(event: object) -> None:
    pass


def connect(
    host: str,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    receive_buffers: int = 0,
    receive_size: int = 1 << 16,
    setup: Setup | None = None,
    send_cq: CompletionQueue | None = None,
    recv_cq: CompletionQueue | None = None,
    first_send_delay: float = 0.0,
    timeout: float | None = None,
    local_address: tuple[str, int] | None = None,
) -> QueuePair:
    """Connect as MPA Initiator and return the queue pair in full operation.

    :param receive_buffers: buffers of ``receive_size`` octets the queue
        pair keeps posted for :meth:`QueuePair.receive`.
    :param setup: called with the queue pair as soon as MPA is in full
        operation, before any message: post receive buffers there.
    :param send_cq: completion queue for Sends, Writes and Reads (one per
        queue pair by default); ``recv_cq`` likewise for receives. Pass the
        same queue for both to share it.
    :param first_send_delay: seconds to hold our first FPDU after the Reply
        (0.5 against Linux siw, whose responder may miss an early FPDU).
    :param timeout: bounds TCP connection setup and MPA startup together.
    :raises ConnectionRejectedError: the peer rejected the connection.
    :raises MpaError: MPA startup failed (``.code``: RFC 5044 §8) or RFC 6581
        negotiation failed (codes 6, 7; our Terminate was sent).
    :raises WaitTimeoutError: ``timeout`` passed first.
    :raises OSError: the TCP connection could not be opened.
    """
    deadline = deadline_after(timeout)
    sock = open_tcp(host, port, deadline, local_address)
    qp = QueuePair(
        sock,
        Role.INITIATOR,
        pd if pd is not None else ProtectionDomain(),
        config if config is not None else MpaConfig(),
        private_data=private_data,
        receive_buffers=receive_buffers,
        receive_size=receive_size,
        setup=setup,
        send_cq=send_cq,
        recv_cq=recv_cq,
    )
    qp._handshake(deadline)
    if first_send_delay > 0:
        time.sleep(first_send_delay)
    return qp


class Listener:
    """Accepts iWARP connections as MPA Responder (:func:`listen`)."""

    def __init__(
        self,
        host: str | None,
        port: int,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        decide: Decider | None = None,
        backlog: int = 128,
    ) -> None:
        self.pd = pd
        self.config = config if config is not None else MpaConfig()
        self._receive_buffers = receive_buffers
        self._receive_size = receive_size
        self._setup = setup
        self._decide = decide
        self._tcp = TcpListener(host, port, backlog)

    @property
    def port(self) -> int:
        return self._tcp.address[1]

    @property
    def address(self) -> tuple[str, int]:
        return self._tcp.address

    def accept(
        self,
        *,
        timeout: float | None = None,
        send_cq: CompletionQueue | None = None,
        recv_cq: CompletionQueue | None = None,
    ) -> QueuePair:
        """The next queue pair in full operation.

        Each gets its own protection domain unless the listener has one.
        ``timeout`` bounds the wait for a TCP connection and its MPA startup
        together; other connections wait in the backlog meanwhile.

        :raises ConnectionRejectedError: ``decide`` rejected this Request.
        :raises MpaError: this connection's startup failed; call ``accept``
            again for the next one.
        :raises WaitTimeoutError: ``timeout`` passed first.
        """
        deadline = deadline_after(timeout)
        sock = self._tcp.accept(deadline)
        qp = QueuePair(
            sock,
            Role.RESPONDER,
            self.pd if self.pd is not None else ProtectionDomain(),
            self.config,
            receive_buffers=self._receive_buffers,
            receive_size=self._receive_size,
            setup=self._setup,
            send_cq=send_cq,
            recv_cq=recv_cq,
            decide=self._decide,
        )
        qp._handshake(deadline)
        return qp

    def close(self) -> None:
        """Stop listening (accepted queue pairs stay open)."""
        self._tcp.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def listen(
    host: str | None,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    receive_buffers: int = 0,
    receive_size: int = 1 << 16,
    setup: Setup | None = None,
    decide: Decider | None = None,
    backlog: int = 128,
) -> Listener:
    """Listen for iWARP connections on ``host``:``port`` (0 picks a port)."""
    return Listener(
        host,
        port,
        pd=pd,
        config=config,
        receive_buffers=receive_buffers,
        receive_size=receive_size,
        setup=setup,
        decide=decide,
        backlog=backlog,
    )
