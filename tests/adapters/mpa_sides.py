"""One blocking face for both adapters' MPA sockets and streams, so one
scenario runs on each (the MPA twin of :mod:`adapters.sides`).

:class:`SyncMpa` runs :mod:`iwarp.sync.mpa` (a server handler in a thread of
the test's own); :class:`AsyncioMpa` runs :mod:`iwarp.asyncio.mpa` on an
event loop in a thread, and each call of its faces is a coroutine submitted
to that loop. A client of one kind against a server of the other is the
two adapters talking to each other over loopback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import iwarp.asyncio.mpa as aio
from adapters.loop_thread import LoopThread
from adapters.sides import UVLOOP
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import MpaParams
from iwarp.mpa.policy import Decider
from iwarp.sync import mpa

T = TypeVar("T")

#: No call in a scenario may take longer (a hang fails, it does not stall the suite).
CALL_TIMEOUT = 20.0


class Socket(Protocol):
    """An MPA socket in full operation, whichever adapter runs it."""

    kind: str

    @property
    def params(self) -> MpaParams: ...

    def send(self, ulpdu: bytes) -> None: ...

    def receive(self) -> bytes | None: ...

    def close(self) -> None: ...

    def refuse_reply(self) -> Stream: ...


class Stream(Protocol):
    """A TCP connection in streaming mode, before MPA."""

    kind: str

    def write(self, data: bytes) -> None: ...

    def read(self, n: int = -1) -> bytes: ...

    def readexactly(self, n: int) -> bytes: ...

    def readuntil(self, separator: bytes = b"\n") -> bytes: ...

    def unread(self, data: bytes) -> None: ...

    def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> Socket: ...

    def start_framed(self, *, send: bool = True, receive: bool = True) -> Socket: ...

    def close(self) -> None: ...


SocketHandler = Callable[[Socket], None]
Runner = Callable[[Any], Coroutine[Any, Any, None]]
StreamHandler = Callable[[Stream], None]


# -- iwarp.sync.mpa ----------------------------------------------------------------


class SyncSocket:
    kind = "sync"

    def __init__(self, sock: mpa.MpaSocket) -> None:
        self.sock = sock

    @property
    def params(self) -> MpaParams:
        return self.sock.params

    def send(self, ulpdu: bytes) -> None:
        self.sock.send(ulpdu, timeout=CALL_TIMEOUT)

    def receive(self) -> bytes | None:
        return self.sock.receive(timeout=CALL_TIMEOUT)

    def close(self) -> None:
        self.sock.close()

    def refuse_reply(self) -> Stream:
        return SyncStream(self.sock.refuse_reply())


class SyncStream:
    kind = "sync"

    def __init__(self, stream: mpa.MpaStream) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data, timeout=CALL_TIMEOUT)

    def read(self, n: int = -1) -> bytes:
        return self.stream.read(n, timeout=CALL_TIMEOUT)

    def readexactly(self, n: int) -> bytes:
        return self.stream.readexactly(n, timeout=CALL_TIMEOUT)

    def readuntil(self, separator: bytes = b"\n") -> bytes:
        return self.stream.readuntil(separator, timeout=CALL_TIMEOUT)

    def unread(self, data: bytes) -> None:
        self.stream.unread(data)

    def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> Socket:
        sock = self.stream.start_mpa(
            role,
            private_data=private_data,
            last_streaming=last_streaming,
            decide=decide,
            timeout=CALL_TIMEOUT,
        )
        return SyncSocket(sock)

    def start_framed(self, *, send: bool = True, receive: bool = True) -> Socket:
        return SyncSocket(
            self.stream.start_framed(send=send, receive=receive, timeout=CALL_TIMEOUT)
        )

    def close(self) -> None:
        self.stream.close()


class SyncMpa:
    """Servers on a listener whose handler runs in a thread the test owns."""

    kind = "sync"

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._listeners: list[mpa.MpaListener] = []
        self.errors: list[BaseException] = []

    def _serve(self, config: MpaConfig | None, decide: Decider | None, run: Any) -> int:
        listener = mpa.listen("127.0.0.1", 0, config=config, decide=decide)
        self._listeners.append(listener)

        def guarded() -> None:
            try:
                run(listener)
            except BaseException as exc:
                self.errors.append(exc)

        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        self._threads.append(thread)
        return listener.port

    def serve(
        self,
        handler: SocketHandler,
        *,
        config: MpaConfig | None = None,
        decide: Decider | None = None,
    ) -> int:
        def run(listener: mpa.MpaListener) -> None:
            with listener.accept(timeout=CALL_TIMEOUT) as sock:
                handler(SyncSocket(sock))

        return self._serve(config, decide, run)

    def serve_stream(self, handler: StreamHandler, *, config: MpaConfig | None = None) -> int:
        def run(listener: mpa.MpaListener) -> None:
            with listener.accept_stream(timeout=CALL_TIMEOUT) as stream:
                handler(SyncStream(stream))

        return self._serve(config, None, run)

    def connect(
        self, port: int, *, config: MpaConfig | None = None, private_data: bytes = b""
    ) -> Socket:
        sock = mpa.connect(
            "127.0.0.1", port, config=config, private_data=private_data, timeout=CALL_TIMEOUT
        )
        return SyncSocket(sock)

    def open_stream(self, port: int, *, config: MpaConfig | None = None) -> Stream:
        return SyncStream(mpa.open_stream("127.0.0.1", port, config=config, timeout=CALL_TIMEOUT))

    def join(self) -> None:
        """Wait for the server handlers."""
        for thread in self._threads:
            thread.join(CALL_TIMEOUT)
            assert not thread.is_alive(), "a sync server handler hung"

    def finish(self) -> None:
        self.join()
        for listener in self._listeners:
            listener.close()
        if self.errors:
            raise self.errors[0]


# -- iwarp.asyncio.mpa ---------------------------------------------------------------


class _OnLoop:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, CALL_TIMEOUT), self.loop
        )
        return future.result()

    def _sync(self, fn: Callable[[], T]) -> T:
        """Run a plain method on the loop's thread (the objects are not thread-safe)."""

        async def call() -> T:
            return fn()

        return self._call(call())


class AsyncioSocket(_OnLoop):
    kind = "asyncio"

    def __init__(self, sock: aio.MpaSocket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.sock = sock

    @property
    def params(self) -> MpaParams:
        return self._sync(lambda: self.sock.params)

    def send(self, ulpdu: bytes) -> None:
        async def send() -> None:
            self.sock.send(ulpdu)
            await self.sock.drain()

        self._call(send())

    def receive(self) -> bytes | None:
        return self._call(self.sock.receive())

    def close(self) -> None:
        self._call(self.sock.close())

    def refuse_reply(self) -> Stream:
        return AsyncioStream(self._sync(self.sock.refuse_reply), self.loop)


class AsyncioStream(_OnLoop):
    kind = "asyncio"

    def __init__(self, stream: aio.MpaStream, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.stream = stream

    def write(self, data: bytes) -> None:
        async def write() -> None:
            self.stream.write(data)
            await self.stream.drain()

        self._call(write())

    def read(self, n: int = -1) -> bytes:
        return self._call(self.stream.read(n))

    def readexactly(self, n: int) -> bytes:
        return self._call(self.stream.readexactly(n))

    def readuntil(self, separator: bytes = b"\n") -> bytes:
        return self._call(self.stream.readuntil(separator))

    def unread(self, data: bytes) -> None:
        self._sync(lambda: self.stream.unread(data))

    def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> Socket:
        start = self.stream.start_mpa(
            role, private_data=private_data, last_streaming=last_streaming, decide=decide
        )
        return AsyncioSocket(self._call(start), self.loop)

    def start_framed(self, *, send: bool = True, receive: bool = True) -> Socket:
        start = self.stream.start_framed(send=send, receive=receive)
        return AsyncioSocket(self._call(start), self.loop)

    def close(self) -> None:
        self._call(self.stream.close())


class AsyncioMpa(LoopThread):
    """asyncio servers and clients on one event loop in a thread of the test's own."""

    kind = "asyncio"

    def __init__(
        self, loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    ) -> None:
        super().__init__(CALL_TIMEOUT, loop_factory)

    def _one(self, handler: Callable[[Any], None]) -> tuple[Runner, Future[None]]:
        """Runs ``handler`` for the one connection a server takes; ``join``
        waits for the future it resolves."""
        done: Future[None] = Future()
        self._handlers.append(done)

        async def run(face: Any) -> None:
            try:
                await asyncio.to_thread(handler, face)
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                done.set_result(None)

        return run, done

    def _port(self, start: Coroutine[Any, Any, asyncio.Server]) -> int:
        server = self._call(start)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def serve(
        self,
        handler: SocketHandler,
        *,
        config: MpaConfig | None = None,
        decide: Decider | None = None,
    ) -> int:
        run, done = self._one(handler)

        async def serve(sock: aio.MpaSocket) -> None:
            await run(AsyncioSocket(sock, self.loop))

        def failed(exc: BaseException, peer: object) -> None:
            self.errors.append(exc)
            done.set_result(None)

        start = aio.serve(serve, "127.0.0.1", 0, config=config, decide=decide, on_failure=failed)
        return self._port(start)

    def serve_stream(self, handler: StreamHandler, *, config: MpaConfig | None = None) -> int:
        run, _ = self._one(handler)

        async def serve(stream: aio.MpaStream) -> None:
            await run(AsyncioStream(stream, self.loop))

        return self._port(aio.serve_stream(serve, "127.0.0.1", 0, config=config))

    def connect(
        self, port: int, *, config: MpaConfig | None = None, private_data: bytes = b""
    ) -> Socket:
        sock = self._call(aio.connect("127.0.0.1", port, config=config, private_data=private_data))
        return AsyncioSocket(sock, self.loop)

    def open_stream(self, port: int, *, config: MpaConfig | None = None) -> Stream:
        stream = self._call(aio.open_stream("127.0.0.1", port, config=config))
        return AsyncioStream(stream, self.loop)


def make_mpa(kind: str) -> SyncMpa | AsyncioMpa:
    if kind == "sync":
        return SyncMpa()
    if kind == "uvloop":
        assert UVLOOP is not None
        return AsyncioMpa(UVLOOP)
    return AsyncioMpa()
