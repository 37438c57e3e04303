"""RDMA over TCP with blocking calls: verbs as pyverbs and libibverbs users know them.

A :class:`QueuePair` is one iWARP connection on a plain TCP socket, with no
thread behind it: the caller's thread moves the octets inside each call.
What does not wait is :class:`~iwarp.rdma.front.QueuePairFront`'s. Every
call that can block takes ``timeout`` (seconds, None waits without limit)
and raises :class:`~iwarp.sync.WaitTimeoutError`. The settings of
:func:`connect` and :func:`listen`: :mod:`iwarp.rdma.options`; usage:
docs/sync.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Unpack, overload

from iwarp._typing import Buffer
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.policy import Accept, Attempts, ConnectionRejectedError, Reject
from iwarp.rdma.data_args import ReadInto, WriteData
from iwarp.rdma.endpoint import QueuePairOptions
from iwarp.rdma.errors import AtomicsNotSupportedError, ConnectionTerminatedError, RdmaError
from iwarp.rdma.front import ALL_BITS, QueuePairFront
from iwarp.rdma.options import (
    InitiatorSettings,
    ResponderSettings,
    domain,
    initiator_options,
    responder_options,
)
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.work import Completion, SendQueueWR, Sge
from iwarp.sockets import LISTEN_BACKLOG, address_text, tcp_setup
from iwarp.sync._calls import (
    BusyPolled,
    CloseOnExit,
    TcpListener,
    WaitTimeoutError,
    clock,
    deadline_after,
    open_tcp,
)
from iwarp.sync._cq import CompletionQueue
from iwarp.sync._driver import Driver

__all__ = [
    "Accept",
    "AtomicsNotSupportedError",
    "Access",
    "CompletionQueue",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
    "Listener",
    "MemoryRegion",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "Reject",
    "connect",
    "listen",
]

Setup = Callable[["QueuePair"], None]


class QueuePair(QueuePairFront, BusyPolled, CloseOnExit):
    """One iWARP connection: queue pair, completion queues and simple API.

    A blocking driver around :class:`~iwarp.rdma.endpoint.QueuePairEndpoint`
    (which holds the receive pool, wr_id routing and the first-send hold).
    Made by :func:`connect` and :meth:`Listener.accept`.
    """

    _opened_by = "connect/listen"
    _driver: Driver
    _cq_type = CompletionQueue
    send_cq: CompletionQueue
    recv_cq: CompletionQueue

    def __init__(
        self,
        sock: Any,
        role: Role,
        pd: ProtectionDomain,
        options: QueuePairOptions,
        *,
        setup: Setup | None = None,
        send_cq: CompletionQueue | None = None,
        recv_cq: CompletionQueue | None = None,
    ) -> None:
        super().__init__(role, pd, options, setup, send_cq, recv_cq)
        try:
            endpoint = self.open(clock(), tcp_setup(sock))
        except BaseException:
            sock.close()  # bad options (LocalProtocolError): the socket is nobody's yet
            self.lost()
            raise
        self._driver = Driver(sock, endpoint, self.dispatch)
        with contextlib.suppress(OSError):  # (already reset: the error says "the peer")
            self.peer_address = address_text(sock.getpeername())
        self.dispatch(endpoint.take_events())
        self._driver.flush()

    # -- properties ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The TCP connection is closed."""
        return self._driver.closed

    def fileno(self) -> int:
        """The TCP socket's descriptor (for the application's own ``select``)."""
        return self._driver.fileno()

    def _polled(self) -> Driver:
        return self._driver

    # -- simple API -----------------------------------------------------------------

    def _run(self, wr: SendQueueWR, timeout: float | None, call: str) -> Completion:
        """Post ``wr`` and wait for its completion; ``call`` (the verb's
        name) and the peer name it in a timeout's message."""
        # A Send or Write that TCP took at once completed while posted.
        completion = self._post_tracked(wr, call)
        if completion is None:
            wr_id = wr.wr_id
            what = f"{call} to {self.peer_address or 'the peer'} to complete"
            try:
                completion = self._driver.run_for(
                    lambda: self._finished(wr_id, call), deadline_after(timeout), what
                )
                if completion is None:
                    raise self.ended_error(call)
            except BaseException:
                self._abandon(wr.wr_id)  # timed out or failed: it goes to send_cq
                raise
        return self._checked(completion, call)

    def send(
        self,
        data: Buffer | Sge,
        *,
        solicited: bool = False,
        invalidate_stag: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send a message into the peer's next receive buffer; wait until it completed."""
        if not self._sent_at_once(data, solicited, invalidate_stag):
            self._run(self._send_wr(data, solicited, invalidate_stag), timeout, "send")

    def rdma_write(
        self,
        data: WriteData,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        flush: bool = False,
        timeout: float | None = None,
    ) -> int:
        """RDMA Write ``data`` (the forms of :mod:`iwarp.rdma.data_args`) to the
        peer's (``remote_stag``, ``remote_to``); returns the octets written.
        It completes when TCP took it; with ``flush``, when the peer placed
        it (:meth:`flush`: one round trip more), or it raises the
        :class:`ConnectionTerminatedError` of the Terminate that refused it."""
        deadline = deadline_after(timeout) if flush else None
        wr = self._write_wr(data, remote_stag, remote_to, offset, length)
        written = self._run(wr, timeout, "rdma_write").byte_len
        if flush:  # flush()'s proof, named as this call in its errors
            remaining = None if deadline is None else max(deadline - clock(), 0.0)
            self._run(self._flush_wr(), remaining, "rdma_write")
        return written

    @overload
    def rdma_read(
        self,
        local: int,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        timeout: float | None = None,
    ) -> bytes: ...

    @overload
    def rdma_read(
        self,
        local: MemoryRegion | Sge | bytearray | memoryview,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        timeout: float | None = None,
    ) -> int: ...

    def rdma_read(
        self,
        local: ReadInto,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        timeout: float | None = None,
    ) -> int | bytes:
        """RDMA Read from the peer's (``remote_stag``, ``remote_to``) into
        ``local`` (the forms of :mod:`iwarp.rdma.data_args`): returns the octets
        read, or given an ``int`` length, the octets as bytes. After a timeout the
        Read stays outstanding (its completion goes to ``send_cq``) and a
        buffer given to it stays registered until the connection ends.
        """
        target, wr = self._read_wr(local, remote_stag, remote_to, offset, length)
        try:
            completion = self._run(wr, timeout, "rdma_read")
        except (RdmaError, ConnectionTerminatedError):
            target.finish(0)  # the Read is over: its temporary region can go
            raise
        return target.finish(completion.byte_len)

    def fetch_add(
        self, stag: int, to: int, add: int, *, mask: int = 0, timeout: float | None = None
    ) -> int:
        """RFC 7306 FetchAdd, as :meth:`iwarp.asyncio.rdma.QueuePair.fetch_add`;
        returns the word's original value."""
        wr = self._fetch_add_wr(stag, to, add, mask)
        return self._original(self._run(wr, timeout, "fetch_add"))

    def compare_swap(
        self,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = ALL_BITS,
        swap_mask: int = ALL_BITS,
        timeout: float | None = None,
    ) -> int:
        """RFC 7306 CmpSwap, as :meth:`iwarp.asyncio.rdma.QueuePair.compare_swap`;
        returns the original word."""
        wr = self._compare_swap_wr(stag, to, compare, swap, compare_mask, swap_mask)
        return self._original(self._run(wr, timeout, "compare_swap"))

    def send_immediate(
        self, data: bytes, *, solicited: bool = False, timeout: float | None = None
    ) -> None:
        """Send RFC 7306 Immediate Data (exactly 8 octets), as
        :meth:`iwarp.asyncio.rdma.QueuePair.send_immediate`."""
        self._run(self._immediate_wr(data, solicited), timeout, "send_immediate")

    def supports_atomics(self, stag: int, to: int, *, timeout: float | None = None) -> bool:
        """Probe the peer for RFC 7306 Atomic Operations, as
        :meth:`iwarp.asyncio.rdma.QueuePair.supports_atomics`."""
        try:
            self.fetch_add(stag, to, 0, timeout=timeout)
        except AtomicsNotSupportedError:
            return False
        return True

    def receive(self, *, timeout: float | None = None) -> bytes:
        """The next message received into the queue pair's receive pool.

        :raises LocalProtocolError: the queue pair has no receive pool.
        :raises ConnectionTerminatedError: the connection ended first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        data = self._driver.look(self._taker())  # (a ping-pong's: no wait)
        if data is None and (data := self._take_message()) is None:
            deadline = None if timeout is None else deadline_after(timeout)
            data = self._driver.wait_for(self._take_message, deadline, "a message")
            if data is None:
                raise self.ended_error("receive")
        return data

    def flush(self, *, timeout: float | None = None) -> None:
        """Wait until the peer placed every Send and RDMA Write posted before:
        a zero-length RDMA Read goes out behind them and its response proves
        it (RFC 5040 §5.5; one round trip, docs/errors.md).

        :raises ConnectionTerminatedError: the connection ended first, e.g.
            by the peer's Terminate refusing one of them (it is named).
        :raises WaitTimeoutError: the proof did not come in time.
        """
        self._run(self._flush_wr(), timeout, "flush")

    def drain(self, *, timeout: float | None = None) -> None:
        """Wait until every posted message was handed to TCP (RDMA Reads
        beyond ORD go out as earlier ones complete); says nothing of the
        peer (:meth:`flush` does)."""
        driver = self._driver
        driver.flush()
        sent = lambda: driver.closed or not (self.endpoint.unsent or driver.unsent)  # noqa: E731
        driver.run_until(sent, deadline_after(timeout), "the flush")

    def progress(self, *, timeout: float | None = 0.0) -> None:
        """Move octets once: read what arrived, write what is queued, run
        timers. With a ``timeout`` > 0 waits up to that long for something
        to happen; it never raises for running out of time."""
        self._driver.wait(deadline_after(timeout))

    def wait_closed(self, *, timeout: float | None = None) -> None:
        """Wait until the connection is over: the peer closed or reset it,
        or a Terminate ended the stream (see :attr:`end_reason`)."""
        driver = self._driver
        driver.run_until(
            lambda: driver.closed or self.endpoint.must_close,
            deadline_after(timeout),
            "the end of the connection",
        )

    # -- closing --------------------------------------------------------------------

    def close(self, *, timeout: float | None = 5.0) -> None:
        """Graceful close: send what is posted (for at most ``timeout``
        seconds), then FIN; outstanding work is flushed (status FLUSHED).

        :raises ConnectionTerminatedError: a Terminate, sent or received
            (also one that has just arrived), ended the connection and no
            call raised it yet; the queue pair is closed all the same.
        """
        driver = self._driver
        deadline = deadline_after(timeout)
        try:
            if not driver.closed:
                self.drain(timeout=None if deadline is None else max(deadline - clock(), 0.0))
                driver.wait(clock())  # take what arrived: a Terminate is reported
        finally:
            self._close_endpoint()
            with contextlib.suppress(WaitTimeoutError):
                driver.send_all(deadline, "the close")
            driver.close()
            self.lost()
        untold = self._untold_end()
        if untold is not None:
            raise untold

    def abort(self) -> None:
        """Close at once (RST); outstanding work is flushed."""
        self._driver.abort()
        if self._endpoint is not None:
            self.dispatch(self._endpoint.connection_lost(clock(), "aborted by the application"))
        self.lost()

    # -- startup -----------------------------------------------------------------------

    def _handshake(self, deadline: float | None) -> QueuePair:
        try:
            self._driver.run_until(self._startup_over, deadline, "MPA startup")
        except BaseException:
            self._driver.close()
            self.lost()
            raise
        self._opened()
        return self


def connect(
    host: str,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    setup: Setup | None = None,
    send_cq: CompletionQueue | None = None,
    recv_cq: CompletionQueue | None = None,
    fallback_to_rev1: bool = False,
    timeout: float | None = None,
    local_address: tuple[str, int] | None = None,
    **settings: Unpack[InitiatorSettings],
) -> QueuePair:
    """Connect as MPA Initiator and return the queue pair in full operation.

    The settings (and ``settings``: ``private_data``, ``receive_buffers``,
    ``receive_size``, ``first_send_delay``, ``shared_cq``, ``atomic_ord``,
    ``atomic_ird``) are documented in :mod:`iwarp.rdma.options`;
    ``timeout`` bounds TCP connection setup and MPA startup together (both
    attempts, with ``fallback_to_rev1``).

    :raises ConnectionRejectedError: the peer rejected the connection.
    :raises MpaError: MPA startup failed (``.code``: RFC 5044 §8) or RFC 6581
        negotiation failed (codes 6, 7; our Terminate was sent).
    :raises LocalProtocolError: the private data is too long for ``config``
        (before any connection is opened).
    :raises WaitTimeoutError: ``timeout`` passed first.
    :raises OSError: the TCP connection could not be opened.
    """
    deadline = deadline_after(timeout)
    options = initiator_options(config, **settings)
    attempts = Attempts(options.config, options.private_data, fallback=fallback_to_rev1)
    qp_domain = domain(pd)
    while True:
        sock = open_tcp(host, port, deadline, local_address)
        qp = QueuePair(
            sock,
            Role.INITIATOR,
            qp_domain,
            replace(options, config=attempts.config),
            setup=setup,
            send_cq=send_cq,
            recv_cq=recv_cq,
        )
        try:
            return qp._handshake(deadline)
        except MpaError as exc:
            attempts.failed(exc)


class Listener:
    """Accepts iWARP connections as MPA Responder (:func:`listen`; the
    settings, and ``settings``: ``receive_buffers``, ``receive_size``,
    ``shared_cq``, ``decide``, ``atomic_ord``, ``atomic_ird``, are
    documented in :mod:`iwarp.rdma.options`)."""

    def __init__(
        self,
        host: str | None,
        port: int,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        setup: Setup | None = None,
        backlog: int = LISTEN_BACKLOG,
        **settings: Unpack[ResponderSettings],
    ) -> None:
        self.pd = pd
        self._options = responder_options(config, **settings)
        self.config = self._options.config
        self._setup = setup
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
            domain(self.pd),
            self._options,
            setup=self._setup,
            send_cq=send_cq,
            recv_cq=recv_cq,
        )
        return qp._handshake(deadline)

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
    setup: Setup | None = None,
    backlog: int = LISTEN_BACKLOG,
    **settings: Unpack[ResponderSettings],
) -> Listener:
    """Listen for iWARP connections on ``host``:``port`` (0 picks a port)."""
    return Listener(host, port, pd=pd, config=config, setup=setup, backlog=backlog, **settings)
