"""RDMA over TCP with asyncio: a verbs-shaped API on the sans-IO queue pair.

A :class:`QueuePair` runs one :class:`~iwarp.rdma.endpoint.QueuePairEndpoint`
on a TCP connection: verbs (``post_send``, ``post_recv``, awaiting a
:class:`CompletionQueue`) and simple calls (``send``, ``receive`` from a
receive pool, ``rdma_write``, ``rdma_read``); what does not wait is
:class:`~iwarp.rdma.front.QueuePairFront`'s. The settings of
:func:`connect` and :func:`serve` are documented in
:mod:`iwarp.rdma.options`; usage and a complete program: docs/rdmap.md.
Negative ``wr_id`` values are reserved for the simple calls.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from types import TracebackType
from typing import Any, overload

from iwarp._typing import Buffer
from iwarp.asyncio.driver import (
    CoreDriver,
    FailureHook,
    fail,
    open_or_report,
    run_handler,
    start_server,
    wake,
)
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import MpaParams
from iwarp.mpa.handshake import build_request
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Decider, Reject, rev1_fallback
from iwarp.rdma.data_args import ReadInto, WriteData
from iwarp.rdma.endpoint import (
    DEFAULT_RECEIVE_SIZE,
    QueuePairEndpoint,
    QueuePairOptions,
)
from iwarp.rdma.endpoint import CompletionQueue as _Queue
from iwarp.rdma.errors import AtomicsNotSupportedError, ConnectionTerminatedError, RdmaError
from iwarp.rdma.events import (
    CompletionQueued,
    Ended,
    Established,
    MessageQueued,
    WorkFinished,
)
from iwarp.rdma.front import ALL_BITS, QueuePairFront
from iwarp.rdma.options import domain, initiator_options, responder_options
from iwarp.rdmap.atomics import ATOMIC_DEPTH
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.work import Completion, SendQueueWR, Sge

__all__ = [
    "Accept",
    "AtomicsNotSupportedError",
    "Access",
    "CompletionQueue",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
    "MemoryRegion",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "Reject",
    "connect",
    "serve",
]


class CompletionQueue:
    """A queue pair's send or receive completions, to poll or to await."""

    def __init__(self, queue: _Queue, loop: asyncio.AbstractEventLoop) -> None:
        self._queue = queue
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` (default: all) completions without waiting."""
        return self._queue.poll(max_entries)

    async def wait(self) -> Completion:
        """The next completion.

        :raises ConnectionTerminatedError: the connection is over and no
            completion is left.
        """
        while not len(self._queue):
            if self._closed:
                raise ConnectionTerminatedError("the queue pair is closed")
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._queue.poll(1)[0]

    def wake(self, *, closed: bool = False) -> None:
        self._closed = self._closed or closed
        wake(self._waiter)


Setup = Callable[["QueuePair"], None]


class _Driver(CoreDriver):
    """Runs the endpoint of one :class:`QueuePair` on its transport."""

    core: QueuePairEndpoint

    def __init__(self, qp: QueuePair, make: Callable[[float, int], QueuePairEndpoint]) -> None:
        super().__init__()
        # Weak: the queue pair holds its driver, not the other way round, so
        # an ended connection is freed by reference counting alone.
        self._qp = weakref.ref(qp)
        self._make: Callable[[float, int], QueuePairEndpoint] | None = make

    def start_core(self, now: float, emss: int) -> None:
        qp = self._qp()
        assert qp is not None and self._make is not None
        self.core = qp._endpoint = self._make(now, emss)
        self._make = None

    def handle_events(self, events: list[Any]) -> None:
        qp = self._qp()
        if qp is not None:  # else nobody holds the queue pair: nobody waits for its events
            qp._dispatch(events)

    def lost(self, exc: BaseException | None) -> None:
        qp = self._qp()
        if qp is not None:
            qp._lost()

    def backlog(self) -> int:
        return self.core.message_octets

    def output_waiting(self) -> bool:
        return self._write_paused or self.core.unsent


class QueuePair(QueuePairFront):
    """One iWARP connection: queue pair, completion queues and simple API.

    Made by :func:`connect` and :func:`serve`; ``async with`` closes it.
    """

    def __init__(self, pd: ProtectionDomain) -> None:
        self._loop = asyncio.get_running_loop()
        self.pd = pd
        self._endpoint = None
        self._driver: _Driver | None = None
        self._send_cq: CompletionQueue | None = None
        self._recv_cq: CompletionQueue | None = None
        self.established: asyncio.Future[MpaParams] = self._loop.create_future()
        self._futures: dict[int, asyncio.Future[Completion]] = {}

    # -- state ------------------------------------------------------------------

    @property
    def send_cq(self) -> CompletionQueue:
        """Completions of posted Sends, RDMA Writes and Reads."""
        assert self._send_cq is not None
        return self._send_cq

    @property
    def recv_cq(self) -> CompletionQueue:
        """Completions of posted receives (the same queue with ``shared_cq``)."""
        assert self._recv_cq is not None
        return self._recv_cq

    @property
    def closed(self) -> asyncio.Future[None]:
        """Resolved once the TCP connection is gone."""
        assert self._driver is not None
        return self._driver.closed

    @property
    def peer(self) -> object:
        """The peer's address."""
        return None if self._driver is None else self._driver.peer()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's ``get_extra_info`` (``"socket"``, ``"peername"``...)."""
        transport = None if self._driver is None else self._driver.transport
        return default if transport is None else transport.get_extra_info(name, default)

    def _output(self) -> None:
        assert self._driver is not None
        self._driver.flush()

    def _write(self, frame: bytes) -> None:
        driver = self._driver
        assert driver is not None
        transport = driver.transport
        if transport is not None and not transport.is_closing():  # as flush: else TCP is going
            driver.write([frame])

    # -- simple API -----------------------------------------------------------------

    async def _run(self, wr: SendQueueWR) -> Completion:
        # A Send or Write that TCP took at once completed while it was
        # posted: no future, no trip through the event loop.
        completion = self._post_tracked(wr)
        if completion is None:
            future: asyncio.Future[Completion] = self._loop.create_future()
            self._futures[wr.wr_id] = future
            completion = await future
        return self._checked(completion)

    async def send(
        self, data: Buffer | Sge, *, solicited: bool = False, invalidate_stag: int | None = None
    ) -> None:
        """Send a message into the peer's next receive buffer; wait for completion."""
        if not self._sent_at_once(data, solicited, invalidate_stag):
            await self._run(self._send_wr(data, solicited, invalidate_stag))

    async def rdma_write(
        self,
        data: WriteData,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
    ) -> int:
        """RDMA Write ``data`` (the forms of :mod:`iwarp.rdma.data_args`) to the
        peer's (``remote_stag``, ``remote_to``); returns the octets written."""
        wr = self._write_wr(data, remote_stag, remote_to, offset, length)
        return (await self._run(wr)).byte_len

    @overload
    async def rdma_read(
        self,
        local: int,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
    ) -> bytes: ...

    @overload
    async def rdma_read(
        self,
        local: MemoryRegion | Sge | bytearray | memoryview,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
    ) -> int: ...

    async def rdma_read(
        self,
        local: ReadInto,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
    ) -> int | bytes:
        """RDMA Read from the peer's (``remote_stag``, ``remote_to``) into
        ``local`` (the forms of :mod:`iwarp.rdma.data_args`): returns the octets
        read, or given an ``int`` length, the octets as bytes.
        """
        target, wr = self._read_wr(local, remote_stag, remote_to, offset, length)
        try:
            completion = await self._run(wr)
        except (RdmaError, ConnectionTerminatedError):
            target.finish(0)  # the Read is over: its temporary region can go
            raise
        return target.finish(completion.byte_len)

    async def fetch_add(self, stag: int, to: int, add: int, *, mask: int = 0) -> int:
        """RFC 7306 FetchAdd: add ``add`` to the peer's 64-bit word at
        (``stag``, ``to``), a 64-bit aligned TO in a region registered with
        ``Access.REMOTE_ATOMIC``; returns the word's original value. Each
        bit set in ``mask`` ends a field whose carry is dropped (0: one
        64-bit addition). Like verbs' ``ibv_wr_atomic_fetch_add``.

        :raises AtomicsNotSupportedError: the peer has no RFC 7306 atomics.
        :raises RdmaError: the peer refused it (STag, rights, bounds, alignment).
        """
        return self._original(await self._run(self._fetch_add_wr(stag, to, add, mask)))

    async def compare_swap(
        self,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = ALL_BITS,
        swap_mask: int = ALL_BITS,
    ) -> int:
        """RFC 7306 CmpSwap: where the ``compare_mask`` bits of the peer's
        word at (``stag``, ``to``) equal those of ``compare``, its
        ``swap_mask`` bits take those of ``swap``; returns the original word
        (the swap happened when it matches ``compare`` under the mask). Like
        verbs' ``ibv_wr_atomic_cmp_swp``. Raises as :meth:`fetch_add`.
        """
        wr = self._compare_swap_wr(stag, to, compare, swap, compare_mask, swap_mask)
        return self._original(await self._run(wr))

    async def send_immediate(self, data: bytes, *, solicited: bool = False) -> None:
        """Send RFC 7306 Immediate Data: exactly 8 octets into the peer's
        next receive buffer (``solicited``: with Solicited Event); wait for
        completion. The peer's ``receive()`` gives them as
        :class:`~iwarp.rdmap.work.ImmediateData`, a receive completion has
        them in ``immediate``."""
        await self._run(self._immediate_wr(data, solicited))

    async def supports_atomics(self, stag: int, to: int) -> bool:
        """Probe the peer for RFC 7306 Atomic Operations with a FetchAdd of 0
        on its word at (``stag``, ``to``), which changes nothing (§1.1).
        True: it answered. False: it refused the opcode as a peer without
        them does, which terminated the connection.

        :raises RdmaError: it refused the target (STag, rights, bounds, alignment).
        """
        try:
            await self.fetch_add(stag, to, 0)
        except AtomicsNotSupportedError:
            return False
        return True

    async def receive(self) -> bytes:
        """The next message received into the queue pair's receive pool.

        :raises LocalProtocolError: the queue pair has no receive pool.
        :raises ConnectionTerminatedError: the connection ended first.
        """
        driver = self._driver
        assert driver is not None
        while (data := self._take_message(driver.closed.done())) is None:
            await driver.woken()
        driver.consumed()
        return data

    async def flush(self) -> None:
        """Wait until every posted message was handed to TCP (RDMA Reads
        beyond ORD go out as earlier ones complete)."""
        assert self._driver is not None
        await self._driver.drain()

    async def close(self) -> None:
        """Graceful close: send what is posted, then FIN; outstanding work is flushed."""
        await self.flush()
        if self._endpoint is not None:
            self._dispatch(self._endpoint.close())
        await self._shut()

    async def _shut(self) -> None:
        """Write what is queued, then FIN; wait until TCP is gone."""
        driver = self._driver
        assert driver is not None
        driver.flush()
        driver.close_transport()
        await driver.closed

    def abort(self) -> None:
        """Close at once (RST)."""
        if self._driver is not None:
            self._driver.abort()

    async def __aenter__(self) -> QueuePair:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the endpoint's events (QueuePairFront._dispatch) ------------------------------

    def _on_established(self, event: Established) -> None:
        assert self._driver is not None
        self._driver.own_socket()
        if not self.established.done():
            self.established.set_result(event.params)

    def _on_completion(self, event: CompletionQueued) -> None:
        cq = self._send_cq if event.queue is self.endpoint.send_cq else self._recv_cq
        if cq is not None:
            cq.wake()

    def _on_work(self, event: WorkFinished) -> None:
        future = self._futures.pop(event.wr_id, None)
        if future is not None and not future.done():
            completion = self.endpoint.result(event.wr_id)
            assert completion is not None
            future.set_result(completion)

    def _on_message(self, event: MessageQueued) -> None:
        self._wake_reader()

    def _on_ended(self, event: Ended) -> None:
        if not self.established.done():
            fail(self.established, self._startup_error(event.reason))  # also in .error
        self._wake_reader()

    def _wake_reader(self) -> None:
        if self._driver is not None:
            self._driver.wake()

    def _lost(self) -> None:
        for future in self._futures.values():
            fail(future, ConnectionTerminatedError(self.end_reason))
        self._futures.clear()
        for cq in (self._send_cq, self._recv_cq):
            if cq is not None:
                cq.wake(closed=True)
        self._wake_reader()


def _queue_pair(
    role: Role, pd: ProtectionDomain, options: QueuePairOptions, setup: Setup | None
) -> tuple[QueuePair, _Driver]:
    qp = QueuePair(pd)

    def make(now: float, emss: int) -> QueuePairEndpoint:
        # setup is cleared by the endpoint once called: no cycle through qp
        endpoint = options.endpoint(
            role, pd, now, emss, None if setup is None else lambda: setup(qp)
        )
        qp._send_cq = CompletionQueue(endpoint.send_cq, qp._loop)
        shared = options.shared_cq
        qp._recv_cq = qp._send_cq if shared else CompletionQueue(endpoint.recv_cq, qp._loop)
        return endpoint

    driver = qp._driver = _Driver(qp, make)
    return qp, driver


async def connect(
    host: str,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    receive_buffers: int | None = None,
    receive_size: int = DEFAULT_RECEIVE_SIZE,
    setup: Setup | None = None,
    first_send_delay: float = 0.0,
    shared_cq: bool = False,
    fallback_to_rev1: bool = False,
    local_address: tuple[str, int] | None = None,
    atomic_ord: int = ATOMIC_DEPTH,
    atomic_ird: int = ATOMIC_DEPTH,
) -> QueuePair:
    """Connect as MPA Initiator and return the queue pair in full operation.

    The settings are documented in :mod:`iwarp.rdma.options`.

    :raises ConnectionRejectedError: the peer rejected the connection (R=1).
    :raises MpaError: MPA startup failed (``.code``: RFC 5044 §8) or RFC 6581
        negotiation failed (codes 6, 7; our Terminate was sent).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises OSError: the TCP connection could not be opened.
    """
    options = initiator_options(
        config,
        private_data=private_data,
        receive_buffers=receive_buffers,
        receive_size=receive_size,
        first_send_delay=first_send_delay,
        shared_cq=shared_cq,
        atomic_ord=atomic_ord,
        atomic_ird=atomic_ird,
    )
    build_request(options.config, private_data)  # LocalProtocolError before any connection
    qp_domain = domain(pd)
    try:
        return await _connect_once(host, port, qp_domain, options, setup, local_address)
    except MpaError as exc:
        retry = rev1_fallback(options.config, exc, requested=fallback_to_rev1)
        if retry is None:
            raise
    retried = replace(options, config=retry)
    return await _connect_once(host, port, qp_domain, retried, setup, local_address)


async def _connect_once(
    host: str,
    port: int,
    pd: ProtectionDomain,
    options: QueuePairOptions,
    setup: Setup | None,
    local_address: tuple[str, int] | None = None,
) -> QueuePair:
    loop = asyncio.get_running_loop()
    qp, driver = _queue_pair(Role.INITIATOR, pd, options, setup)
    await loop.create_connection(lambda: driver, host, port, local_addr=local_address)
    try:
        await qp.established
    except BaseException:
        driver.close_transport()  # sends what is queued (a Terminate), then FIN
        # The error (also kept in the endpoint) carries this frame in its
        # traceback: without these locals no reference cycle holds the queue pair.
        del qp, driver
        raise
    return qp


async def serve(
    handler: Callable[[QueuePair], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    receive_buffers: int | None = None,
    receive_size: int = DEFAULT_RECEIVE_SIZE,
    setup: Setup | None = None,
    shared_cq: bool = False,
    decide: Decider | None = None,
    on_failure: FailureHook | None = None,
    backlog: int = 1024,
    atomic_ord: int = ATOMIC_DEPTH,
    atomic_ird: int = ATOMIC_DEPTH,
) -> asyncio.Server:
    """Accept iWARP connections as MPA Responder; run ``handler`` for each
    queue pair in full operation, in a task of its own.

    The settings are documented in :mod:`iwarp.rdma.options`. When the
    handler returns, the queue pair is closed gracefully; when it raises,
    the exception is reported once with the peer's address (to
    ``on_failure``, else logged) and the connection ends with a Terminate
    (docs/rdmap.md, "When a handler returns"). Connections that end before
    full operation (bad frames, timeouts, rejects) are closed and reported
    to ``on_failure``.
    """

    async def run(qp: QueuePair, driver: _Driver) -> None:
        if await open_or_report(driver, qp.established, on_failure) is None:
            return
        if await run_handler(handler, qp, driver.peer(), on_failure):
            await qp.close()
            return
        qp._handler_failed()
        await qp._shut()

    options = responder_options(
        config,
        receive_buffers=receive_buffers,
        receive_size=receive_size,
        shared_cq=shared_cq,
        decide=decide,
        atomic_ord=atomic_ord,
        atomic_ird=atomic_ird,
    )

    def accept() -> tuple[_Driver, Coroutine[Any, Any, None]]:
        qp, driver = _queue_pair(Role.RESPONDER, domain(pd), options, setup)
        return driver, run(qp, driver)

    return await start_server(accept, host, port, backlog=backlog)
