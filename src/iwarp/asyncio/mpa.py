"""MPA over asyncio TCP: :func:`connect`, :func:`serve`, :class:`MpaSocket`, and
delayed startup or culley-02 on a live connection (:func:`open_stream`,
:func:`serve_stream`, :class:`MpaStream`).

The per-connection state and policy are :class:`~iwarp.mpa.front.MpaFront`'s,
the I/O is :class:`~iwarp.asyncio.driver.CoreDriver`'s (the front's
driver); this module only waits. Usage and examples: docs/mpa-connection.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from iwarp._typing import Buffer
from iwarp.asyncio.driver import CoreDriver, wait_until
from iwarp.asyncio.server import FailureHook, open_or_report, run_handler, start_server
from iwarp.errors import IwarpError, MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.front import IncompleteReadError, MpaFace, MpaFront
from iwarp.mpa.policy import Accept, Attempts, ConnectionRejectedError, Decider, Reject
from iwarp.sockets import LISTEN_BACKLOG

__all__ = [
    "Accept",
    "ConnectionRejectedError",
    "MpaSocket",
    "MpaStream",
    "Reject",
    "connect",
    "open_stream",
    "serve",
    "serve_stream",
]

T = TypeVar("T")
F = TypeVar("F", "MpaSocket", "MpaStream")


def _front(config: MpaConfig, role: Role | None, **kwargs: Any) -> tuple[MpaFront, CoreDriver]:
    """An MPA front and the driver it holds, before TCP is up."""
    front = MpaFront(config, role=role, **kwargs)
    driver = front._driver = CoreDriver(front)
    return front, driver


async def _socket(front: MpaFront) -> MpaSocket:
    """The socket once MPA is in full operation.

    :raises IwarpError: startup failed (TCP is closed).
    """
    await wait_until(_driver(front), front.startup_over)
    front.opened()
    if front.socket is None:
        front.socket = MpaSocket(front)
    socket: MpaSocket = front.socket
    return socket


async def _stream(front: MpaFront) -> MpaStream:
    """The stream once TCP is up."""
    driver = _driver(front)
    await wait_until(driver, lambda: driver.transport is not None)
    return MpaStream(front)


def _driver(front: MpaFront) -> CoreDriver:
    driver = front._driver
    assert isinstance(driver, CoreDriver)
    return driver


async def _wait_for(front: MpaFront, take: Callable[[], T | None]) -> T:
    """``take()`` once it gives something, consuming received data."""
    driver = _driver(front)
    while (got := take()) is None:
        await driver.woken()
    front.consumed()
    return got


class _Face(MpaFace):
    """What MpaSocket and MpaStream share."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        transport = _driver(self._front).transport
        return default if transport is None else transport.get_extra_info(name, default)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        await _driver(self._front).drain()

    async def close(self) -> None:
        """Graceful close: flush what is queued, send FIN, wait for the close."""
        driver = _driver(self._front)
        self._front.close()
        driver.flush()
        driver.close()
        await driver.closed

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        _driver(self._front).abort()


class MpaSocket(_Face):
    """An MPA connection in full operation on a TCP socket."""

    def refuse_reply(self) -> MpaStream:
        """Initiator: refuse the Reply before any ULPDU; MPA exits, TCP stays
        open as the returned stream (RFC 5044 §7.1.2 rule 3).

        :raises LocalProtocolError: not an Initiator, or ULPDUs were exchanged.
        """
        self._refuse_reply()
        return MpaStream(self._front)

    def send(self, ulpdu: Buffer) -> None:
        """Frame and write one ULPDU (one write); :meth:`drain` for backpressure.

        :raises LocalProtocolError: cannot send (closed, failed) or too large.
        """
        self._front.core.send_ulpdu(ulpdu)
        self._front._driver.flush()

    def send_many(self, ulpdus: Iterable[Buffer]) -> None:
        """Frame several ULPDUs and write them with a single write."""
        self._queue(ulpdus)
        self._front._driver.flush()

    async def receive(self) -> bytes | None:
        """The next ULPDU, or None after the peer closed cleanly.

        :raises MpaError: the connection failed (``.code``, RFC 5044 §8);
            ULPDUs that arrived before the error come first.
        """
        front = self._front
        if not front.readable:
            await _wait_for(front, lambda: front.readable or None)
        data = front.take_ulpdu()
        front.consumed()
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.receive()) is not None:
            yield data


class MpaStream(_Face):
    """A TCP connection in streaming mode before MPA (seed 000 §6.1.2,
    culley-02 §8.1): octets not read when MPA starts are MPA's input."""

    def write(self, data: Buffer) -> None:
        """Send streaming octets (before MPA, or on a culley-02 direction not framed yet).

        :raises LocalProtocolError: MPA owns the send direction.
        """
        self._front.send_stream(data)
        self._front._driver.flush()

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` (default: all available) octets; ``b""`` at end of stream."""
        return await _wait_for(self._front, lambda: self._front.stream_read(n))

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` octets. :raises asyncio.IncompleteReadError: the stream ended first."""
        return await self._read(lambda: self._front.stream_exactly(n))

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """Up to and including ``separator``. :raises asyncio.IncompleteReadError: ended first."""
        return await self._read(lambda: self._front.stream_until(separator))

    async def _read(self, take: Callable[[], bytes | None]) -> bytes:
        try:
            return await _wait_for(self._front, take)
        except IncompleteReadError as exc:
            raise asyncio.IncompleteReadError(exc.partial, exc.expected) from None

    async def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> MpaSocket:
        """Switch into MPA startup as ``role``; the socket once in full operation.

        :raises ConnectionRejectedError: rejected (TCP is closed).
        :raises MpaError: startup failed (codes 1, 4, 6, 7).
        :raises LocalProtocolError: MPA was started already, or bad private data.
        """
        self._start_mpa(role, private_data, last_streaming, decide)
        return await _socket(self._front)

    async def start_framed(self, *, send: bool = True, receive: bool = True) -> MpaSocket:
        """draft-culley-iwarp-mpa-02 §8.1: FPDUs with no Request/Reply in one
        direction or both; call again for the other (the same socket)."""
        self._start_framed(send, receive)
        return await _socket(self._front)


async def open_stream(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    local_addr: tuple[str, int] | None = None,
) -> MpaStream:
    """A TCP connection in streaming mode, to switch into MPA later.

    :raises OSError: the TCP connection could not be opened.
    """
    front, driver = _front(config or MpaConfig(), None)
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: driver, host, port, local_addr=local_addr)
    return MpaStream(front)


async def connect(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    local_addr: tuple[str, int] | None = None,
    fallback_to_rev1: bool = False,
) -> MpaSocket:
    """Open TCP and run MPA startup as Initiator; the socket in full operation.
    ``fallback_to_rev1`` (or ``config.rev1_fallback``): a Rev 2 Request
    answered by a close is retried once as Rev 1 (RFC 6581 §10).

    :raises ConnectionRejectedError: the Responder (or a local policy) rejected.
    :raises MpaError: startup failed (codes 1, 4) or RFC 6581 negotiation did (6, 7).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises OSError: the TCP connection could not be opened.
    """
    attempts = Attempts(config or MpaConfig(), private_data, fallback=fallback_to_rev1)
    loop = asyncio.get_running_loop()
    while True:
        front, driver = _front(attempts.config, Role.INITIATOR, private_data=private_data)
        await loop.create_connection(lambda d=driver: d, host, port, local_addr=local_addr)
        try:
            return await _socket(front)
        except BaseException as exc:
            driver.close()
            # The error is also the front's: without these locals and the
            # frames that raised it no reference cycle holds the front.
            del front, driver
            if isinstance(exc, IwarpError):
                exc.__traceback__ = None
            if not isinstance(exc, MpaError):
                raise
            attempts.failed(exc)


async def serve(
    handler: Callable[[MpaSocket], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    decide: Decider | None = None,
    on_failure: FailureHook | None = None,
    backlog: int = LISTEN_BACKLOG,
) -> asyncio.Server:
    """Listen and run MPA startup as Responder on each connection; ``decide``
    answers each Request (default: accept); ``handler`` gets each socket in
    full operation in a task of its own (closed when it returns); failures
    before that go to ``on_failure`` and the server goes on."""
    cfg = config or MpaConfig()
    return await _serve(
        lambda: _front(cfg, Role.RESPONDER, decide=decide),
        _socket,
        handler,
        host,
        port,
        on_failure,
        backlog,
    )


async def serve_stream(
    handler: Callable[[MpaStream], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    backlog: int = LISTEN_BACKLOG,
) -> asyncio.Server:
    """Accept TCP connections in streaming mode; ``handler`` runs in a task
    per connection, which is closed when it returns."""
    cfg = config or MpaConfig()
    return await _serve(lambda: _front(cfg, None), _stream, handler, host, port, None, backlog)


async def _serve(
    make: Callable[[], tuple[MpaFront, CoreDriver]],
    face: Callable[[MpaFront], Awaitable[F]],
    handler: Callable[[F], Awaitable[None]],
    host: str | None,
    port: int,
    on_failure: FailureHook | None,
    backlog: int,
) -> asyncio.Server:
    async def run(front: MpaFront, driver: CoreDriver) -> None:
        opened = await open_or_report(driver, face(front), on_failure)
        if opened is None:
            return
        try:
            await run_handler(handler, opened, driver.peer(), on_failure)
        finally:
            await opened.close()

    def accept() -> tuple[CoreDriver, Coroutine[Any, Any, None]]:
        front, driver = make()
        return driver, run(front, driver)

    return await start_server(accept, host, port, backlog=backlog)
