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
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar, Unpack, overload

from iwarp._typing import Buffer
from iwarp.asyncio._cq import CompletionQueue
from iwarp.asyncio._within import within
from iwarp.asyncio.driver import CoreDriver, wait_until
from iwarp.asyncio.server import FailureHook, open_or_report, run_handler, start_server
from iwarp.errors import IwarpError, MpaError, WaitTimeoutError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.policy import Accept, Attempts, ConnectionRejectedError, Reject
from iwarp.rdma.data_args import ReadInto, WriteData
from iwarp.rdma.endpoint import QueuePairEndpoint, QueuePairOptions
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
from iwarp.serving import report
from iwarp.sockets import LISTEN_BACKLOG, address_text, named_connect_error

T = TypeVar("T")

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


Setup = Callable[["QueuePair"], None]


class QueuePair(QueuePairFront):
    """One iWARP connection: queue pair, completion queues and simple API.

    Made by :func:`connect` and :func:`serve`; ``async with`` closes it.
    """

    _driver: CoreDriver
    _cq_type = CompletionQueue

    def __init__(
        self,
        role: Role,
        pd: ProtectionDomain,
        options: QueuePairOptions,
        setup: Setup | None,
        send_cq: CompletionQueue | None,
        recv_cq: CompletionQueue | None,
    ) -> None:
        super().__init__(role, pd, options, setup, send_cq, recv_cq)
        self._driver = CoreDriver(self)

    # -- state ------------------------------------------------------------------

    send_cq: CompletionQueue
    recv_cq: CompletionQueue

    @property
    def closed(self) -> asyncio.Future[None]:
        """Resolved once the TCP connection is gone. Shielded: a caller's timeout
        (``asyncio.wait_for(qp.closed, t)``) cancels its own wait, never the queue
        pair's record of the connection."""
        return asyncio.shield(self._driver.closed)

    @property
    def peer(self) -> object:
        """The peer's address."""
        return self._driver.peer()

    def open(self, now: float, emss: int) -> QueuePairEndpoint:
        self.peer_address = address_text(self._driver.peer())
        return super().open(now, emss)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's ``get_extra_info`` (``"socket"``, ``"peername"``...)."""
        transport = self._driver.transport
        return default if transport is None else transport.get_extra_info(name, default)

    async def _open(self) -> QueuePair:
        """Wait for MPA startup; the queue pair in full operation.

        :raises IwarpError: startup failed (TCP is closed).
        """
        await wait_until(self._driver, self._startup_over)
        self._opened()
        return self

    # -- simple API -----------------------------------------------------------------

    async def _run(self, wr: SendQueueWR, call: str, timeout: float | None = None) -> Completion:
        # A Send or Write that TCP took at once completed while it was
        # posted: no trip through the event loop. ``call``: the verb errors name.
        completion = self._post_tracked(wr, call)
        if completion is None:
            wr_id = wr.wr_id
            try:
                if timeout is None:  # (the hot path: no coroutine of its own)
                    while (completion := self._finished(wr_id, call)) is None:
                        await self._driver.woken(wr_id)
                else:
                    done = self._until(lambda: self._finished(wr_id, call), wr_id)
                    completion = await within(done, timeout, "the work request")
            except BaseException:
                self._abandon(wr_id)  # timed out or cancelled: it goes to send_cq
                raise
        return self._checked(completion, call)

    async def _until(self, take: Callable[[], T | None], key: object = None) -> T:
        """What ``take()`` gives once it is not None, asked whenever woken (for ``key``)."""
        while (got := take()) is None:
            await self._driver.woken(key)
        return got

    async def send(
        self,
        data: Buffer | Sge,
        *,
        solicited: bool = False,
        invalidate_stag: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send a message into the peer's next receive buffer; wait for completion (and,
        like a stream writer's drain, while the transport holds more than its high-water
        mark: a peer that stops reading stops the sender, it does not grow its memory)."""
        if not self._sent_at_once(data, solicited, invalidate_stag):
            await self._run(self._send_wr(data, solicited, invalidate_stag), "send", timeout)
        elif self._driver.output_waiting():
            await within(self._driver.drain(), timeout, "the send")

    async def rdma_write(
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
        """RDMA Write ``data`` (the forms of :mod:`iwarp.rdma.data_args`) to the peer's
        (``remote_stag``, ``remote_to``); returns the octets written once TCP took
        them, with ``flush`` once the peer placed them (:meth:`flush`)."""
        wr = self._write_wr(data, remote_stag, remote_to, offset, length)
        if not flush:
            return (await self._run(wr, "rdma_write", timeout)).byte_len
        return await within(self._write_placed(wr), timeout, "the Write's placement")

    async def _write_placed(self, wr: SendQueueWR) -> int:
        written = (await self._run(wr, "rdma_write")).byte_len
        await self._run(self._flush_wr(), "rdma_write")  # flush()'s proof
        return written

    @overload
    async def rdma_read(
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
    async def rdma_read(
        self,
        local: MemoryRegion | Sge | bytearray | memoryview,
        remote_stag: int,
        remote_to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        timeout: float | None = None,
    ) -> int: ...

    async def rdma_read(
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
        read, or given an ``int`` length, the octets as bytes.
        """
        target, wr = self._read_wr(local, remote_stag, remote_to, offset, length)
        try:
            completion = await self._run(wr, "rdma_read", timeout)
        except (RdmaError, ConnectionTerminatedError):
            target.finish(0)  # the Read is over: its temporary region can go
            raise
        return target.finish(completion.byte_len)

    async def fetch_add(
        self, stag: int, to: int, add: int, *, mask: int = 0, timeout: float | None = None
    ) -> int:
        """RFC 7306 FetchAdd: add ``add`` to the peer's 64-bit word at
        (``stag``, ``to``), a 64-bit aligned TO in a region registered with
        ``Access.REMOTE_ATOMIC``; returns the word's original value. Each
        bit set in ``mask`` ends a field whose carry is dropped (0: one
        64-bit addition). Like verbs' ``ibv_wr_atomic_fetch_add``.

        :raises AtomicsNotSupportedError: the peer has no RFC 7306 atomics.
        :raises RdmaError: the peer refused it (STag, rights, bounds, alignment).
        """
        wr = self._fetch_add_wr(stag, to, add, mask)
        return self._original(await self._run(wr, "fetch_add", timeout))

    async def compare_swap(
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
        """RFC 7306 CmpSwap: where the ``compare_mask`` bits of the peer's
        word at (``stag``, ``to``) equal those of ``compare``, its
        ``swap_mask`` bits take those of ``swap``; returns the original word
        (the swap happened when it matches ``compare`` under the mask). Like
        verbs' ``ibv_wr_atomic_cmp_swp``. Raises as :meth:`fetch_add`.
        """
        wr = self._compare_swap_wr(stag, to, compare, swap, compare_mask, swap_mask)
        return self._original(await self._run(wr, "compare_swap", timeout))

    async def send_immediate(
        self, data: bytes, *, solicited: bool = False, timeout: float | None = None
    ) -> None:
        """Send RFC 7306 Immediate Data: exactly 8 octets into the peer's
        next receive buffer (``solicited``: with Solicited Event); wait for
        completion. The peer's ``receive()`` gives them as
        :class:`~iwarp.rdmap.work.ImmediateData`, a receive completion has
        them in ``immediate``."""
        await self._run(self._immediate_wr(data, solicited), "send_immediate", timeout)

    async def supports_atomics(self, stag: int, to: int, *, timeout: float | None = None) -> bool:
        """Probe the peer for RFC 7306 Atomic Operations with a FetchAdd of 0
        on its word at (``stag``, ``to``), which changes nothing (§1.1).
        True: it answered. False: it refused the opcode as a peer without
        them does, which terminated the connection.

        :raises RdmaError: it refused the target (STag, rights, bounds, alignment).
        """
        try:
            await self.fetch_add(stag, to, 0, timeout=timeout)
        except AtomicsNotSupportedError:
            return False
        return True

    async def receive(self, *, timeout: float | None = None) -> bytes:
        """The next message received into the queue pair's receive pool.

        :raises LocalProtocolError: the queue pair has no receive pool.
        :raises ConnectionTerminatedError: the connection ended first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        if timeout is not None:
            return await within(self._until(self._take_message), timeout, "a message")
        while (data := self._take_message()) is None:  # (the hot path, as it was)
            await self._driver.woken()
        return data

    async def flush(self, *, timeout: float | None = None) -> None:
        """Wait until the peer placed every Send and RDMA Write posted
        before, proven by a zero-length RDMA Read, as
        :meth:`iwarp.sync.rdma.QueuePair.flush` (one round trip).

        :raises ConnectionTerminatedError: the connection ended first, e.g.
            by the peer's Terminate refusing one of them (it is named).
        :raises WaitTimeoutError: the proof did not come in time.
        """
        await self._run(self._flush_wr(), "flush", timeout)

    async def drain(self, *, timeout: float | None = None) -> None:
        """Wait until every posted message was handed to TCP (RDMA Reads
        beyond ORD go out as earlier ones complete); says nothing of the
        peer (:meth:`flush` does)."""
        endpoint = self._endpoint
        unsent = None if endpoint is None else lambda: endpoint.unsent
        await within(self._driver.drain(unsent), timeout, "the drain")

    async def close(self, *, timeout: float | None = None) -> None:
        """Graceful close: send what is posted, then FIN; outstanding work is flushed
        (status FLUSHED). Past ``timeout`` it resets and raises WaitTimeoutError; it
        raises the ConnectionTerminatedError of an untold Terminate, as iwarp.sync's."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            await self.drain(timeout=timeout)
            for _ in range(2):  # take what arrived (a Terminate is reported): two rounds
                await asyncio.sleep(0)
        finally:
            self._close_endpoint()
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            try:
                await within(self._shut(), left, "the close")
            except WaitTimeoutError:
                self.abort()
                raise
        if (untold := self._untold_end()) is not None:
            raise untold

    async def _shut(self) -> None:
        """Write what is queued, then FIN; wait until TCP is gone."""
        self._driver.flush()
        self._driver.close()
        await asyncio.shield(self._driver.closed)  # (a close's timeout cancels only its wait)

    def abort(self) -> None:
        """Close at once (RST)."""
        self._driver.abort()

    async def __aenter__(self) -> QueuePair:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        except ConnectionTerminatedError:
            if exc is None:
                raise  # else the block's own error says what happened


async def connect(
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
    attempts, with ``fallback_to_rev1``), as in :func:`iwarp.sync.connect`.

    :raises ConnectionRejectedError: the peer rejected the connection (R=1).
    :raises MpaError: MPA startup failed (``.code``: RFC 5044 §8) or RFC 6581
        negotiation failed (codes 6, 7; our Terminate was sent).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises WaitTimeoutError: ``timeout`` passed first.
    :raises OSError: the TCP connection could not be opened (the message
        names the address and the reason).
    """
    options = initiator_options(config, **settings)
    return await within(
        _connect(host, port, options, pd, setup, send_cq, recv_cq, fallback_to_rev1, local_address),
        timeout,
        f"the connection to {address_text((host, port))}",
    )


async def _connect(
    host: str,
    port: int,
    options: QueuePairOptions,
    pd: ProtectionDomain | None,
    setup: Setup | None,
    send_cq: CompletionQueue | None,
    recv_cq: CompletionQueue | None,
    fallback_to_rev1: bool,
    local_address: tuple[str, int] | None,
) -> QueuePair:
    attempts = Attempts(options.config, options.private_data, fallback=fallback_to_rev1)
    qp_domain = domain(pd)
    loop = asyncio.get_running_loop()
    while True:
        qp = QueuePair(
            Role.INITIATOR,
            qp_domain,
            replace(options, config=attempts.config),
            setup,
            send_cq,
            recv_cq,
        )
        driver = qp._driver
        try:
            await loop.create_connection(lambda d=driver: d, host, port, local_addr=local_address)
        except OSError as exc:
            raise named_connect_error(exc, host, port) from exc
        try:
            return await qp._open()
        except BaseException as exc:
            driver.close()  # sends what is queued (a Terminate), then FIN
            # The error is also the endpoint's: without these locals and the
            # frames that raised it no reference cycle holds the queue pair.
            del qp, driver
            if isinstance(exc, IwarpError):
                exc.__traceback__ = None
            if not isinstance(exc, MpaError):
                raise
            attempts.failed(exc)


async def serve(
    handler: Callable[[QueuePair], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    pd: ProtectionDomain | None = None,
    config: MpaConfig | None = None,
    setup: Setup | None = None,
    send_cq: CompletionQueue | None = None,
    recv_cq: CompletionQueue | None = None,
    on_failure: FailureHook | None = None,
    backlog: int = LISTEN_BACKLOG,
    **settings: Unpack[ResponderSettings],
) -> asyncio.Server:
    """Accept iWARP connections as MPA Responder; run ``handler`` for each
    queue pair in full operation, in a task of its own.

    The settings (and ``settings``: ``receive_buffers``, ``receive_size``,
    ``shared_cq``, ``decide``, ``atomic_ord``, ``atomic_ird``) are
    documented in :mod:`iwarp.rdma.options`. When the handler returns, the
    queue pair is closed gracefully; when it raises, the exception is
    reported once with the peer's address (to ``on_failure``, else logged)
    and the connection ends with a Terminate (docs/rdmap.md, "When a
    handler returns"). Connections that end before
    full operation (bad frames, timeouts, rejects) are closed and reported
    to ``on_failure``.
    """

    async def run(qp: QueuePair) -> None:
        if await open_or_report(qp._driver, qp._open(), on_failure) is None:
            return
        if await run_handler(handler, qp, qp.peer, on_failure):
            try:
                await qp.close()
            except ConnectionTerminatedError as exc:  # a Terminate the handler never saw
                report(on_failure, exc, qp.peer)
            return
        qp._handler_failed()
        await qp._shut()

    options = responder_options(config, **settings)

    def accept() -> tuple[CoreDriver, Coroutine[Any, Any, None]]:
        qp = QueuePair(Role.RESPONDER, domain(pd), options, setup, send_cq, recv_cq)
        return qp._driver, run(qp)

    return await start_server(accept, host, port, backlog=backlog)
