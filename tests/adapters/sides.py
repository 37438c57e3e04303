"""One blocking face for both adapters' queue pairs, so one scenario runs on each.

A scenario is plain blocking code: a server handler ``(Side) -> None`` and
a client body. :class:`SyncAdapter` runs them on :mod:`iwarp.sync` (the
server handler in a thread of the test's own); :class:`AsyncioAdapter` runs
:mod:`iwarp.asyncio.rdma` on an event loop in a thread, and each call of
its :class:`Side` is a coroutine submitted to that loop. Clients and
servers of either kind can be combined: that is how the two adapters talk
to each other over loopback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar, cast

import iwarp.asyncio.rdma as aio
from adapters.loop_thread import LoopThread
from iwarp import sync
from iwarp._typing import Buffer
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import MpaParams
from iwarp.mpa.policy import Decider
from iwarp.rdma.data_args import ReadInto, WriteData
from iwarp.rdmap.atomics import ATOMIC_DEPTH
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.wire import NO_MASK, TerminateHeader
from iwarp.rdmap.work import Completion, RecvWR, SendQueueWR, Sge

T = TypeVar("T")

#: No call in a scenario may take longer (a hang fails, it does not stall the suite).
CALL_TIMEOUT = 30.0


class Side(Protocol):
    """What a scenario does with a queue pair, whichever adapter runs it."""

    kind: str

    @property
    def params(self) -> MpaParams: ...

    @property
    def terminate(self) -> TerminateHeader | None: ...

    @property
    def terminate_received(self) -> bool: ...

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion: ...

    def send(self, data: Buffer | Sge, *, solicited: bool = False) -> None: ...

    def receive(self) -> bytes: ...

    def rdma_write(
        self,
        data: WriteData,
        stag: int,
        to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        flush: bool = False,
    ) -> int: ...

    def rdma_read(
        self, local: ReadInto, stag: int, to: int, *, offset: int = 0, length: int | None = None
    ) -> int | bytes: ...

    def post_send(self, wr: SendQueueWR) -> None: ...

    def fetch_add(self, stag: int, to: int, add: int, *, mask: int = 0) -> int: ...

    def compare_swap(
        self,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = NO_MASK,
        swap_mask: int = NO_MASK,
    ) -> int: ...

    def send_immediate(self, data: bytes, *, solicited: bool = False) -> None: ...

    def supports_atomics(self, stag: int, to: int) -> bool: ...

    def post_recv(self, wr: RecvWR) -> None: ...

    def wait_send(self) -> Completion: ...

    def wait_recv(self) -> Completion: ...

    def drain(self) -> None: ...

    def flush(self) -> None: ...

    def wait_closed(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


Handler = Callable[[Side], None]
Setup = Callable[[Side], None]


class SyncSide:
    kind = "sync"

    def __init__(self, qp: sync.QueuePair) -> None:
        self.qp = qp

    @property
    def params(self) -> MpaParams:
        return self.qp.params

    @property
    def terminate(self) -> TerminateHeader | None:
        return self.qp.terminate

    @property
    def terminate_received(self) -> bool:
        return self.qp.terminate_received

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        return self.qp.register(buffer, access, address=address)

    def send(self, data: Buffer | Sge, *, solicited: bool = False) -> None:
        self.qp.send(data, solicited=solicited, timeout=CALL_TIMEOUT)

    def receive(self) -> bytes:
        return self.qp.receive(timeout=CALL_TIMEOUT)

    def rdma_write(
        self,
        data: WriteData,
        stag: int,
        to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        flush: bool = False,
    ) -> int:
        return self.qp.rdma_write(
            data, stag, to, offset=offset, length=length, flush=flush, timeout=CALL_TIMEOUT
        )

    def rdma_read(
        self, local: ReadInto, stag: int, to: int, *, offset: int = 0, length: int | None = None
    ) -> int | bytes:
        return self.qp.rdma_read(
            local, stag, to, offset=offset, length=length, timeout=CALL_TIMEOUT
        )

    def post_send(self, wr: SendQueueWR) -> None:
        self.qp.post_send(wr)

    def fetch_add(self, stag: int, to: int, add: int, *, mask: int = 0) -> int:
        return self.qp.fetch_add(stag, to, add, mask=mask, timeout=CALL_TIMEOUT)

    def compare_swap(
        self,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = NO_MASK,
        swap_mask: int = NO_MASK,
    ) -> int:
        return self.qp.compare_swap(
            stag,
            to,
            compare,
            swap,
            compare_mask=compare_mask,
            swap_mask=swap_mask,
            timeout=CALL_TIMEOUT,
        )

    def send_immediate(self, data: bytes, *, solicited: bool = False) -> None:
        self.qp.send_immediate(data, solicited=solicited, timeout=CALL_TIMEOUT)

    def supports_atomics(self, stag: int, to: int) -> bool:
        return self.qp.supports_atomics(stag, to, timeout=CALL_TIMEOUT)

    def post_recv(self, wr: RecvWR) -> None:
        self.qp.post_recv(wr)

    def wait_send(self) -> Completion:
        return self.qp.send_cq.wait(timeout=CALL_TIMEOUT)

    def wait_recv(self) -> Completion:
        return self.qp.recv_cq.wait(timeout=CALL_TIMEOUT)

    def drain(self) -> None:
        self.qp.drain(timeout=CALL_TIMEOUT)

    def flush(self) -> None:
        self.qp.flush(timeout=CALL_TIMEOUT)

    def wait_closed(self) -> None:
        self.qp.wait_closed(timeout=CALL_TIMEOUT)

    def close(self) -> None:
        self.qp.close()

    def abort(self) -> None:
        self.qp.abort()


class AsyncioSide:
    kind = "asyncio"

    def __init__(self, qp: aio.QueuePair, loop: asyncio.AbstractEventLoop) -> None:
        self.qp = qp
        self.loop = loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, CALL_TIMEOUT), self.loop
        )
        return future.result()

    def _sync(self, fn: Callable[[], T]) -> T:
        """Run a plain method on the loop's thread (the queue pair is not thread-safe)."""
        if _in_loop(self.loop):
            return fn()

        async def call() -> T:
            return fn()

        return self._call(call())

    @property
    def params(self) -> MpaParams:
        return self._sync(lambda: self.qp.params)

    @property
    def terminate(self) -> TerminateHeader | None:
        return self._sync(lambda: self.qp.terminate)

    @property
    def terminate_received(self) -> bool:
        return self._sync(lambda: self.qp.terminate_received)

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        return self._sync(lambda: self.qp.register(buffer, access, address=address))

    def send(self, data: Buffer | Sge, *, solicited: bool = False) -> None:
        self._call(self.qp.send(data, solicited=solicited))

    def receive(self) -> bytes:
        return self._call(self.qp.receive())

    def rdma_write(
        self,
        data: WriteData,
        stag: int,
        to: int,
        *,
        offset: int = 0,
        length: int | None = None,
        flush: bool = False,
    ) -> int:
        write = self.qp.rdma_write(data, stag, to, offset=offset, length=length, flush=flush)
        return self._call(write)

    def rdma_read(
        self, local: ReadInto, stag: int, to: int, *, offset: int = 0, length: int | None = None
    ) -> int | bytes:
        read = self.qp.rdma_read(local, stag, to, offset=offset, length=length)
        return cast("int | bytes", self._call(read))

    def post_send(self, wr: SendQueueWR) -> None:
        self._sync(lambda: self.qp.post_send(wr))

    def fetch_add(self, stag: int, to: int, add: int, *, mask: int = 0) -> int:
        return self._call(self.qp.fetch_add(stag, to, add, mask=mask))

    def compare_swap(
        self,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = NO_MASK,
        swap_mask: int = NO_MASK,
    ) -> int:
        return self._call(
            self.qp.compare_swap(
                stag, to, compare, swap, compare_mask=compare_mask, swap_mask=swap_mask
            )
        )

    def send_immediate(self, data: bytes, *, solicited: bool = False) -> None:
        self._call(self.qp.send_immediate(data, solicited=solicited))

    def supports_atomics(self, stag: int, to: int) -> bool:
        return self._call(self.qp.supports_atomics(stag, to))

    def post_recv(self, wr: RecvWR) -> None:
        self._sync(lambda: self.qp.post_recv(wr))

    def wait_send(self) -> Completion:
        return self._call(self.qp.send_cq.wait())

    def wait_recv(self) -> Completion:
        return self._call(self.qp.recv_cq.wait())

    def drain(self) -> None:
        self._call(self.qp.drain())

    def flush(self) -> None:
        self._call(self.qp.flush())

    def wait_closed(self) -> None:
        async def closed() -> None:
            await self.qp.closed

        self._call(closed())

    def close(self) -> None:
        self._call(self.qp.close())

    def abort(self) -> None:
        self._sync(self.qp.abort)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class Adapter(Protocol):
    """Starts servers and clients of one adapter kind."""

    kind: str

    def serve(
        self,
        handler: Handler,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        decide: Decider | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
    ) -> int: ...

    def connect(
        self,
        port: int,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
        cq: Any = None,
        shared_cq: bool = False,
    ) -> Side: ...

    def completion_queue(self) -> Any:
        """A completion queue of this adapter, for ``connect(cq=...)``."""

    def take_failures(self) -> list[BaseException]: ...

    def finish(self) -> None:
        """Wait for the server handlers, stop everything, re-raise a handler's failure."""


class SyncAdapter:
    """Servers on a listener whose handler runs in a thread the test owns."""

    kind = "sync"

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._listeners: list[sync.Listener] = []
        self._errors: list[BaseException] = []

    def serve(
        self,
        handler: Handler,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        decide: Decider | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
    ) -> int:
        listener = sync.listen(
            "127.0.0.1",
            0,
            pd=pd,
            config=config,
            receive_buffers=receive_buffers,
            receive_size=receive_size,
            setup=None if setup is None else lambda qp: setup(SyncSide(qp)),
            decide=decide,
            atomic_ord=atomic_ord,
            atomic_ird=atomic_ird,
        )
        self._listeners.append(listener)

        def run() -> None:
            try:
                qp = listener.accept(timeout=CALL_TIMEOUT)
            except BaseException as exc:  # a failed startup is the scenario's business
                self._errors.append(exc)
                return
            try:
                handler(SyncSide(qp))
            except BaseException as exc:
                self._errors.append(exc)
                qp.abort()
            else:
                try:
                    qp.close()
                except sync.ConnectionTerminatedError as exc:  # as serve's on_failure
                    self._errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)
        return listener.port

    def connect(
        self,
        port: int,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
        cq: Any = None,
        shared_cq: bool = False,
    ) -> Side:
        qp = sync.connect(
            "127.0.0.1",
            port,
            pd=pd,
            config=config,
            receive_buffers=receive_buffers,
            receive_size=receive_size,
            setup=None if setup is None else lambda qp: setup(SyncSide(qp)),
            timeout=CALL_TIMEOUT,
            atomic_ord=atomic_ord,
            atomic_ird=atomic_ird,
            send_cq=cq,
            recv_cq=cq,
            shared_cq=shared_cq,
        )
        return SyncSide(qp)

    def completion_queue(self) -> sync.CompletionQueue:
        return sync.CompletionQueue()

    def take_failures(self) -> list[BaseException]:
        """Wait for the server handlers; their failures (now forgotten)."""
        for thread in self._threads:
            thread.join(CALL_TIMEOUT)
        errors, self._errors = self._errors, []
        return errors

    def finish(self) -> None:
        for thread in self._threads:
            thread.join(CALL_TIMEOUT)
            assert not thread.is_alive(), "a sync server handler hung"
        for listener in self._listeners:
            listener.close()
        if self._errors:
            raise self._errors[0]


class AsyncioAdapter(LoopThread):
    """asyncio servers and clients on one event loop in a thread of the test's own."""

    kind = "asyncio"

    def __init__(
        self, loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    ) -> None:
        super().__init__(CALL_TIMEOUT, loop_factory)

    def serve(
        self,
        handler: Handler,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        decide: Decider | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
    ) -> int:
        loop = self.loop
        done: Future[None] = Future()
        self._handlers.append(done)

        async def run(qp: aio.QueuePair) -> None:
            try:
                await asyncio.to_thread(handler, AsyncioSide(qp, loop))
            except BaseException as exc:
                self.errors.append(exc)
                qp.abort()
            finally:
                done.set_result(None)

        def failed(exc: BaseException, peer: object) -> None:
            self.errors.append(exc)
            if not done.done():  # (also after the handler: a Terminate it never saw)
                done.set_result(None)

        async def start() -> asyncio.Server:
            return await aio.serve(
                run,
                "127.0.0.1",
                0,
                pd=pd,
                config=config,
                receive_buffers=receive_buffers,
                receive_size=receive_size,
                setup=None if setup is None else lambda qp: setup(AsyncioSide(qp, loop)),
                decide=decide,
                on_failure=failed,
                atomic_ord=atomic_ord,
                atomic_ird=atomic_ird,
            )

        server = self._call(start())
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def connect(
        self,
        port: int,
        *,
        pd: ProtectionDomain | None = None,
        config: MpaConfig | None = None,
        receive_buffers: int = 0,
        receive_size: int = 1 << 16,
        setup: Setup | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
        cq: Any = None,
        shared_cq: bool = False,
    ) -> Side:
        loop = self.loop
        qp = self._call(
            aio.connect(
                "127.0.0.1",
                port,
                pd=pd,
                config=config,
                receive_buffers=receive_buffers,
                receive_size=receive_size,
                setup=None if setup is None else lambda qp: setup(AsyncioSide(qp, loop)),
                atomic_ord=atomic_ord,
                atomic_ird=atomic_ird,
                send_cq=cq,
                recv_cq=cq,
                shared_cq=shared_cq,
            )
        )
        return AsyncioSide(qp, loop)

    def completion_queue(self) -> aio.CompletionQueue:
        return aio.CompletionQueue()

    def take_failures(self) -> list[BaseException]:
        """Wait for the server handlers; their failures (now forgotten)."""
        self.join()
        errors, self.errors = self.errors, []
        return errors


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


#: uvloop's event loop, when it is installed (the ``test`` extra has it).
UVLOOP = _uvloop_factory()
#: Every adapter kind: the blocking one, asyncio's loop, and uvloop's when installed.
KINDS: tuple[str, ...] = ("sync", "asyncio", *(("uvloop",) if UVLOOP is not None else ()))
#: (client, server) kinds of the scenarios: every pair of sync and asyncio,
#: and uvloop against itself and against the blocking adapter.
PAIRS: list[tuple[str, str]] = [
    (c, s) for c in KINDS for s in KINDS if not ("uvloop" in (c, s) and "asyncio" in (c, s))
]


def make_adapter(kind: str) -> SyncAdapter | AsyncioAdapter:
    if kind == "sync":
        return SyncAdapter()
    if kind == "uvloop":
        assert UVLOOP is not None
        return AsyncioAdapter(UVLOOP)
    return AsyncioAdapter()
