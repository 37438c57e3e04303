"""MPA over asyncio TCP: :func:`connect`, :func:`serve`, :class:`MpaSocket`, and
delayed startup or culley-02 on a live connection (:func:`open_stream`,
:func:`serve_stream`, :class:`MpaStream`).

The per-connection state is :class:`~iwarp.mpa.session.MpaSession`'s and the
I/O is :class:`~iwarp.asyncio.driver.CoreDriver`'s; this module only waits
and wakes. Usage and examples: docs/mpa-connection.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from functools import partial
from typing import Any, TypeVar

from iwarp._typing import Buffer
from iwarp.asyncio.driver import (
    CoreDriver,
    FailureHook,
    fail,
    open_or_report,
    run_handler,
    start_server,
)
from iwarp.errors import LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import Event
from iwarp.mpa.handshake import build_request
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Decider, Reject, rev1_fallback
from iwarp.mpa.session import RECEIVE_HIGH_WATER, IncompleteReadError, MpaFace, MpaSession

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


class _MpaProtocol(CoreDriver):
    """Drives one MpaSession's core; futures for whoever waits on it."""

    core: MpaConnection
    receive_high_water = RECEIVE_HIGH_WATER

    def __init__(
        self,
        role: Role | None,
        config: MpaConfig,
        *,
        private_data: bytes = b"",
        decide: Decider | None = None,
    ) -> None:
        super().__init__()
        self._role = role
        self._private_data = private_data
        self.session = MpaSession(config, decide=decide)
        self.core = self.session.core
        self.established: asyncio.Future[None] = self._loop.create_future()
        self._socket: MpaSocket | None = None
        #: Resolved by connection_made (serve_stream's handler waits for it).
        self.made: asyncio.Future[None] = self._loop.create_future()

    def start_core(self, now: float, emss: int) -> None:
        self.core.set_emss(emss)
        self.made.set_result(None)
        if self._role is None:
            return  # streaming until start_mpa()/start_framed()
        try:
            self.session.start(self._role, now=now, private_data=self._private_data)
        except LocalProtocolError as exc:  # fails `established` below
            self.session.error = exc
            self.abort()
        self.handle_events(self.core.take_events())

    def handle_events(self, events: list[Event]) -> None:
        session = self.session
        if session.handle(events):
            self.flush()
            self.close_transport()
        if not self.established.done():
            if session.error is not None:
                fail(self.established, session.error)  # the error is also the session's
            elif session.established:
                self.established.set_result(None)
                self.own_socket()
        if session.readable or session.unread:
            self.wake()

    def backlog(self) -> int:
        return self.session.backlog

    def eof_received(self) -> bool:
        keep = super().eof_received()
        self.session.eof = True
        self.wake()
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and self.core.params is not None and not self.session.eof:
            self.feed(b"")  # closed cleanly under us: as a FIN
        super().connection_lost(exc)

    def lost(self, exc: BaseException | None) -> None:
        self.session.eof = True
        fail(self.established, self.session.startup_error())
        self.wake()

    async def wait_for(self, take: Callable[[], T | None]) -> T:
        """``take()`` once it gives something, consuming received data."""
        while (got := take()) is None:
            await self.woken()
        self.consumed()
        return got

    async def close(self) -> None:
        self.session.close()
        self.flush()
        self.close_transport()
        await self.closed

    async def stream(self) -> MpaStream:
        await self.made
        return MpaStream(self)

    async def socket(self) -> MpaSocket:
        """The MpaSocket once MPA is in full operation (one per connection)."""
        await self.established
        if self._socket is None:
            self._socket = MpaSocket(self)
        return self._socket


class _Face(MpaFace[_MpaProtocol]):
    """What MpaSocket and MpaStream share."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        transport = self._link.transport
        return default if transport is None else transport.get_extra_info(name, default)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        await self._link.drain()

    async def close(self) -> None:
        """Graceful close: flush what is queued, send FIN, wait for the close."""
        await self._link.close()

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        self._link.abort()


class MpaSocket(_Face):
    """An MPA connection in full operation on a TCP socket."""

    def refuse_reply(self) -> MpaStream:
        """Initiator: refuse the Reply before any ULPDU; MPA exits, TCP stays
        open as the returned stream (RFC 5044 §7.1.2 rule 3).

        :raises LocalProtocolError: not an Initiator, or ULPDUs were exchanged.
        """
        self._refuse_reply()
        return MpaStream(self._link)

    def send(self, ulpdu: Buffer) -> None:
        """Frame and write one ULPDU (one write); :meth:`drain` for backpressure.

        :raises LocalProtocolError: cannot send (closed, failed) or too large.
        """
        self._link.core.send_ulpdu(ulpdu)
        self._link.flush()

    def send_many(self, ulpdus: Iterable[Buffer]) -> None:
        """Frame several ULPDUs and write them with a single write."""
        self._queue(ulpdus)
        self._link.flush()

    async def receive(self) -> bytes | None:
        """The next ULPDU, or None after the peer closed cleanly.

        :raises MpaError: the connection failed (``.code``, RFC 5044 §8);
            ULPDUs that arrived before the error come first.
        """
        session = self._link.session
        if not session.readable:
            await self._link.wait_for(lambda: session.readable or None)
        data = session.take_ulpdu()
        self._link.consumed()
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
        self._link.session.send_stream(data)
        self._link.flush()

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` (default: all available) octets; ``b""`` at end of stream."""
        return await self._link.wait_for(lambda: self._link.session.stream_read(n))

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` octets. :raises asyncio.IncompleteReadError: the stream ended first."""
        return await self._read(lambda: self._link.session.stream_exactly(n))

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """Up to and including ``separator``. :raises asyncio.IncompleteReadError: ended first."""
        return await self._read(lambda: self._link.session.stream_until(separator))

    async def _read(self, take: Callable[[], bytes | None]) -> bytes:
        try:
            return await self._link.wait_for(take)
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
        return await self._link.socket()

    async def start_framed(self, *, send: bool = True, receive: bool = True) -> MpaSocket:
        """draft-culley-iwarp-mpa-02 §8.1: FPDUs with no Request/Reply in one
        direction or both; call again for the other (the same socket)."""
        self._start_framed(send, receive)
        return await self._link.socket()


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
    make = partial(_MpaProtocol, None, config or MpaConfig())
    loop = asyncio.get_running_loop()
    return MpaStream((await loop.create_connection(make, host, port, local_addr=local_addr))[1])


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
    cfg = config or MpaConfig()
    build_request(cfg, private_data)  # LocalProtocolError before any connection
    loop = asyncio.get_running_loop()
    while True:
        make = partial(_MpaProtocol, Role.INITIATOR, cfg, private_data=private_data)
        _, protocol = await loop.create_connection(make, host, port, local_addr=local_addr)
        try:
            await protocol.established
            return MpaSocket(protocol)
        except BaseException as exc:
            protocol.close_transport()
            del protocol  # the error's traceback must not hold it (no reference cycle)
            if not isinstance(exc, MpaError):
                raise
            retry = rev1_fallback(cfg, exc, requested=fallback_to_rev1)  # None for Rev 1
            if retry is None:
                raise
            cfg = retry


async def serve(
    handler: Callable[[MpaSocket], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    decide: Decider | None = None,
    on_failure: FailureHook | None = None,
    backlog: int = 1024,
) -> asyncio.Server:
    """Listen and run MPA startup as Responder on each connection; ``decide``
    answers each Request (default: accept); ``handler`` gets each socket in
    full operation in a task of its own (closed when it returns); failures
    before that go to ``on_failure`` and the server goes on."""
    make = partial(_MpaProtocol, Role.RESPONDER, config or MpaConfig(), decide=decide)
    return await _serve(make, _MpaProtocol.socket, handler, host, port, on_failure, backlog)


async def serve_stream(
    handler: Callable[[MpaStream], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    backlog: int = 1024,
) -> asyncio.Server:
    """Accept TCP connections in streaming mode; ``handler`` runs in a task
    per connection, which is closed when it returns."""
    make = partial(_MpaProtocol, None, config or MpaConfig())
    return await _serve(make, _MpaProtocol.stream, handler, host, port, None, backlog)


async def _serve(
    make: Callable[[], _MpaProtocol],
    face: Callable[[_MpaProtocol], Awaitable[F]],
    handler: Callable[[F], Awaitable[None]],
    host: str | None,
    port: int,
    on_failure: FailureHook | None,
    backlog: int,
) -> asyncio.Server:
    async def run(protocol: _MpaProtocol) -> None:
        opened = await open_or_report(protocol, face(protocol), on_failure)
        if opened is None:
            return
        try:
            await run_handler(handler, opened, protocol.peer(), on_failure)
        finally:
            await opened.close()

    def accept() -> tuple[_MpaProtocol, Coroutine[Any, Any, None]]:
        protocol = make()
        return protocol, run(protocol)

    return await start_server(accept, host, port, backlog=backlog)
