"""MPA over asyncio TCP: :func:`connect`, :func:`serve` and :class:`MpaSocket`.

A thin shell around :class:`~iwarp.mpa.connection.MpaConnection`: every
received chunk goes to the core with ``loop.time()`` as ``now``, the core's
output is written with one ``write``/``writelines`` per batch, and its one
startup timer is a single ``loop.call_at`` handle. It is an
``asyncio.Protocol`` (no StreamReader/Writer pair; :func:`serve` adds one
task per connection for the application's handler), so one loop holds
thousands of connections; per-connection memory is bounded by the core's
limits plus a receive high-water mark (reading pauses while the
application lags).

::

    async def echo(sock: MpaSocket) -> None:
        async for ulpdu in sock:
            sock.send(ulpdu)
            await sock.drain()

    server = await serve(echo, "127.0.0.1", 0)
    sock = await connect("127.0.0.1", port, private_data=b"hi")
    sock.send(b"hello")
    print(await sock.receive())
    await sock.close()

Delayed startup (seed 000 §6.1.2, §6.1.4) and draft-culley-iwarp-mpa-02:
:func:`open_stream` and :func:`serve_stream` give an :class:`MpaStream`, a
TCP connection in streaming mode. The application exchanges octets with
``write``/``read``/``readuntil``/``readexactly``, then switches the live
connection into MPA with :meth:`MpaStream.start_mpa` (as Initiator or
Responder, the Responder optionally sending a last streaming message) or
:meth:`MpaStream.start_framed` (culley-02: no frames, markers and CRC on,
each direction at its own point). Octets received but not read yet when
the switch happens belong to MPA and are handed to it: nothing read ahead
is lost::

    async def upgrade(stream: MpaStream) -> None:
        await stream.readuntil(b"\n")                  # the peer's streaming hello
        sock = await stream.start_mpa(Role.RESPONDER, last_streaming=b"MPA now\n")
        async for ulpdu in sock:
            ...

    server = await serve_stream(upgrade, "127.0.0.1", 0)
    stream = await open_stream("127.0.0.1", port)
    stream.write(b"hello\n")
    await stream.readuntil(b"MPA now\n")
    sock = await stream.start_mpa(Role.INITIATOR, private_data=b"hi")

Socket options: TCP_NODELAY is on (an FPDU is sent when it is complete);
the EMSS is read from TCP_MAXSEG and gives ``params.mulpdu``. Each
:meth:`MpaSocket.send` is one write, so with FPDUs no larger than MULPDU a
TCP segment starts with an FPDU whenever the kernel allows (RFC 5044 §5.1);
:meth:`MpaSocket.send_many` writes several FPDUs at once for throughput.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any

from iwarp._typing import Buffer
from iwarp.asyncio.driver import (
    CoreDriver,
    FailureHook,
    report,
    run_handler,
    start_server,
)
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionFailed,
    ConnectionRejected,
    Event,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
    StreamDataReceived,
    UlpduBatchReceived,
    UlpduReceived,
)
from iwarp.mpa.handshake import MpaState, build_request
from iwarp.mpa.policy import (
    Accept,
    ConnectionRejectedError,
    Decider,
    Reject,
    answer_request,
    rev1_fallback,
)

__all__ = [
    "Accept",
    "MpaRejectedError",
    "MpaSocket",
    "MpaStream",
    "Reject",
    "connect",
    "open_stream",
    "serve",
    "serve_stream",
]

#: Received-but-unread octets above which reading pauses (per connection).
RECEIVE_HIGH_WATER = 1 << 20
_RECEIVE_LOW_WATER = RECEIVE_HIGH_WATER // 4


#: The error of a rejected MPA connection (the same class in every adapter).
MpaRejectedError = ConnectionRejectedError


class _MpaProtocol(CoreDriver):
    """Drives one MpaConnection (made at once, in streaming mode until started)."""

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
        self._decide = decide
        self.core = MpaConnection(None, config)
        self.established: asyncio.Future[MpaParams] = self._loop.create_future()
        self.error: IwarpError | None = None
        self._received: deque[bytes] = deque()
        self._received_octets = 0
        self._eof = False
        self._reader: asyncio.Future[None] | None = None
        #: Streaming octets not read yet (before MPA starts, delayed startup
        #: and culley-02); handed to MPA when it starts receiving.
        self.unread = bytearray()
        self._socket: MpaSocket | None = None
        #: Resolved by connection_made (serve_stream's handler waits for it).
        self.made: asyncio.Future[None] = self._loop.create_future()

    @property
    def conn(self) -> MpaConnection:
        return self.core

    # -- the driver's hooks -------------------------------------------------------

    def start_core(self, now: float, emss: int) -> None:
        self.core.set_emss(emss)
        self.made.set_result(None)
        if self._role is None:
            return  # streaming mode until start_mpa()/start_framed()
        try:
            self.core.start(self._role, now=now, private_data=self._private_data)
        except LocalProtocolError as exc:
            self._set_error(exc)
            self.abort()
            return
        self.handle_events(self.core.take_events())

    def handle_events(self, events: list[Event]) -> None:
        batch = events
        while batch:  # deciding on a Request queues more events
            for event in batch:
                handler = _EVENTS.get(type(event))
                if handler is not None:
                    handler(self, event)
            batch = self.core.take_events()
        params = self.core.params
        if (
            params is not None
            and self.error is None
            and not self.established.done()
            and self.core.state is not MpaState.AWAIT_DECISION
        ):
            self.established.set_result(params)
            self.own_socket()
        if self._received or self.unread or self._eof or self.error is not None:
            _wake(self._reader)

    def backlog(self) -> int:
        return self._received_octets + len(self.unread)

    def eof_received(self) -> bool:
        keep = super().eof_received()
        self._eof = True
        _wake(self._reader)
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and self.core.params is not None and not self._eof:
            self.feed(b"")  # closed cleanly under us: as a FIN
        super().connection_lost(exc)

    def lost(self, exc: BaseException | None) -> None:
        self._eof = True
        if not self.established.done():
            self.established.set_exception(
                self.error or MpaError(MpaErrorCode.TCP_CLOSED, "connection closed")
            )
            self.established.exception()  # retrieved: the error is also in .error
        _wake(self._reader)

    # -- the core's events (dispatched by _EVENTS) ------------------------------------

    def _on_ulpdus(self, event: UlpduReceived) -> None:
        data = bytes(event.data)
        self._received.append(data)
        self._received_octets += len(data)

    def _on_batch(self, event: UlpduBatchReceived) -> None:
        for ulpdu in event.batch:
            data = bytes(ulpdu)
            self._received.append(data)
            self._received_octets += len(data)

    def _on_request(self, event: RequestReceived) -> None:
        try:
            answer_request(self.core, event, self._decide)
        except LocalProtocolError as exc:
            self._set_error(exc)
            self.flush()
            self.close_transport()

    def _on_rejected(self, event: ConnectionRejected) -> None:
        self._set_error(MpaRejectedError(event))
        self.flush()
        self.close_transport()

    def _on_failed(self, event: ConnectionFailed | NegotiationFailed) -> None:
        self._set_error(event.error)
        if isinstance(event, NegotiationFailed) or event.close:
            self.flush()
            self.close_transport()  # error 4: "MUST be immediately closed" (RFC 5044 §8)

    def _on_closed(self, event: ConnectionClosed) -> None:
        self._eof = True

    def _on_stream_data(self, event: StreamDataReceived) -> None:
        # Streaming mode (delayed startup, a culley-02 direction not framed
        # yet), or after a reject (the transport is closing).
        self.unread += event.data

    def _set_error(self, error: IwarpError) -> None:
        if self.error is None:
            self.error = error
        if not self.established.done():
            self.established.set_exception(error)
            self.established.exception()

    # -- for MpaSocket and MpaStream ------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        transport = self.transport
        return default if transport is None else transport.get_extra_info(name, default)

    async def close(self) -> None:
        """Graceful close of the MPA connection and then of TCP (FIN)."""
        if self.core.state not in (MpaState.CLOSED, MpaState.FAILED):
            self.core.close()
        self.flush()
        self.close_transport()
        await self.closed

    async def receive(self) -> bytes | None:
        while not self._received:
            if self.error is not None and not isinstance(self.error, MpaRejectedError):
                raise self.error
            if self._eof:
                return None
            await self._wait()
        data = self._received.popleft()
        self._received_octets -= len(data)
        self.consumed()
        return data

    async def _wait(self) -> None:
        self._reader = self._loop.create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    async def more_stream(self) -> bool:
        """Wait for more streaming octets; False at end of stream."""
        have = len(self.unread)
        while len(self.unread) == have:
            if self._eof or self.closed.done():
                return False
            await self._wait()
        return True

    def take_stream(self, n: int) -> bytes:
        data = bytes(self.unread[:n])
        del self.unread[:n]
        self.consumed()
        return data

    def start(
        self,
        role: Role,
        *,
        private_data: bytes,
        last_streaming: bytes,
        decide: Decider | None,
    ) -> None:
        """Delayed startup: the unread streaming octets go to MPA."""
        if decide is not None:
            self._decide = decide
        read_ahead = self.take_stream(len(self.unread))
        self.core.start(
            role,
            now=self._loop.time(),
            private_data=private_data,
            last_streaming=last_streaming,
            read_ahead=read_ahead,
        )
        self.handle_events(self.core.take_events())
        self.flush()

    def start_framed(self, *, send: bool, receive: bool) -> None:
        """culley-02: start framing; unread octets go to MPA with ``receive``."""
        read_ahead = self.take_stream(len(self.unread)) if receive else b""
        self.core.start_framed(
            send=send, receive=receive, now=self._loop.time(), read_ahead=read_ahead
        )
        self.handle_events(self.core.take_events())
        self.flush()

    async def socket(self) -> MpaSocket:
        """The MpaSocket once MPA is in full operation (one per connection)."""
        params = await self.established
        if self._socket is None:
            self._socket = MpaSocket(self, params)
        return self._socket


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


_EVENTS: dict[type, Callable[[_MpaProtocol, Any], None]] = {
    UlpduReceived: _MpaProtocol._on_ulpdus,
    UlpduBatchReceived: _MpaProtocol._on_batch,
    RequestReceived: _MpaProtocol._on_request,
    ConnectionRejected: _MpaProtocol._on_rejected,
    ConnectionFailed: _MpaProtocol._on_failed,
    NegotiationFailed: _MpaProtocol._on_failed,
    ConnectionClosed: _MpaProtocol._on_closed,
    StreamDataReceived: _MpaProtocol._on_stream_data,
}


class MpaSocket:
    """An MPA connection in full operation on a TCP socket."""

    def __init__(self, protocol: _MpaProtocol, params: MpaParams) -> None:
        self._protocol = protocol
        self._params = params

    @property
    def params(self) -> MpaParams:
        """What the Request/Reply exchange negotiated (MULPDU from TCP_MAXSEG)."""
        return self._protocol.conn.params or self._params

    @property
    def connection(self) -> MpaConnection:
        """The sans-IO core (for inspection; drive it only through this socket)."""
        return self._protocol.conn

    @property
    def error(self) -> IwarpError | None:
        """The error that ended the connection, if any (``.code`` for MPA)."""
        return self._protocol.error

    @property
    def emss(self) -> int:
        return self._protocol.emss

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._protocol.get_extra_info(name, default)

    def refuse_reply(self) -> MpaStream:
        """Initiator: refuse the Responder's Reply (read its private data in
        :attr:`params`) before sending anything: MPA exits and the TCP
        connection stays open (RFC 5044 §7.1.2 rule 3); the returned stream
        carries whatever the application does with it next.

        :raises LocalProtocolError: not an Initiator, or ULPDUs were
            exchanged already.
        """
        protocol = self._protocol
        protocol.conn.refuse_reply()
        protocol.handle_events(protocol.conn.take_events())
        protocol.flush()
        return MpaStream(protocol)

    def send(self, ulpdu: Buffer) -> None:
        """Frame and write one ULPDU (one write). Call :meth:`drain` to
        respect backpressure.

        :raises LocalProtocolError: the connection cannot send (closed,
            failed) or the ULPDU is too large.
        """
        self._protocol.conn.send_ulpdu(ulpdu)
        self._protocol.flush()

    def send_many(self, ulpdus: Iterable[Buffer]) -> None:
        """Frame several ULPDUs and write them with a single write."""
        conn = self._protocol.conn
        for ulpdu in ulpdus:
            conn.send_ulpdu(ulpdu)
        self._protocol.flush()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        await self._protocol.drain()

    async def receive(self) -> bytes | None:
        """The next ULPDU, or None after the peer closed cleanly.

        :raises MpaError: the connection failed (``.code`` is the RFC 5044 §8
            code); ULPDUs that arrived before the error are returned first.
        """
        return await self._protocol.receive()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while (data := await self.receive()) is not None:
            yield data

    async def close(self) -> None:
        """Graceful close: flush what is queued, send FIN, wait for the close."""
        await self._protocol.close()

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        self._protocol.abort()


class MpaStream:
    """A TCP connection in streaming mode, before MPA starts.

    For delayed startup (seed 000 §6.1.2: "the ULP exchanges streaming data,
    then both ends switch to MPA at an agreed point"; the dual-stack
    sequence of §6.1.4) and for draft-culley-iwarp-mpa-02 (§8.1: framing
    starts per direction at a point of the stream the application chose).
    Made by :func:`open_stream` and :func:`serve_stream`.

    Reads return octets the peer sent as streaming data; octets that arrive
    after the peer switched to MPA but before we did stay unread, and the
    switch hands them to MPA, so a Request (or an FPDU) that came in the
    same segment as the last streaming message is not lost. Read exactly up
    to the switch point (``readuntil``/``readexactly``), or give back what
    was read past it with :meth:`unread`.
    """

    def __init__(self, protocol: _MpaProtocol) -> None:
        self._protocol = protocol

    @property
    def connection(self) -> MpaConnection:
        """The sans-IO core (for inspection)."""
        return self._protocol.conn

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self._protocol.get_extra_info(name, default)

    def write(self, data: Buffer) -> None:
        """Send streaming octets (before MPA, or on a culley-02 direction not framed yet).

        :raises LocalProtocolError: MPA owns the send direction.
        """
        self._protocol.conn.send_stream(data)
        self._protocol.flush()

    async def drain(self) -> None:
        await self._protocol.drain()

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` (default: all available) streaming octets; ``b""`` at end of stream."""
        protocol = self._protocol
        if not protocol.unread and not await protocol.more_stream():
            return b""
        available = len(protocol.unread)
        return protocol.take_stream(available if n < 0 else min(n, available))

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` octets.

        :raises asyncio.IncompleteReadError: the stream ended first.
        """
        protocol = self._protocol
        while len(protocol.unread) < n:
            if not await protocol.more_stream():
                raise asyncio.IncompleteReadError(protocol.take_stream(len(protocol.unread)), n)
        return protocol.take_stream(n)

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """The octets up to and including ``separator``.

        :raises asyncio.IncompleteReadError: the stream ended first.
        """
        protocol = self._protocol
        start = 0
        while (end := protocol.unread.find(separator, start)) < 0:
            start = max(0, len(protocol.unread) - len(separator) + 1)
            if not await protocol.more_stream():
                raise asyncio.IncompleteReadError(protocol.take_stream(len(protocol.unread)), None)
        return protocol.take_stream(end + len(separator))

    def unread(self, data: bytes) -> None:
        """Put octets back in front of the unread ones (they go to MPA at the switch)."""
        self._protocol.unread[:0] = data

    async def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> MpaSocket:
        """Switch this live connection into MPA startup (RFC 5044 §7.1.2) as
        ``role`` and return the socket once in full operation.

        :param private_data: Initiator: the Request's private data.
        :param last_streaming: streaming octets sent right before MPA starts
            (the Responder's last streaming message, seed 000 §6.1.4 rule 2).
        :param decide: Responder: accept or reject the Request (default: accept).
        :raises MpaRejectedError: rejected (the TCP connection is closed).
        :raises MpaError: startup failed (codes 1, 4, 6, 7).
        :raises LocalProtocolError: MPA was started already, or bad private data.
        """
        self._protocol.start(
            role, private_data=private_data, last_streaming=last_streaming, decide=decide
        )
        return await self._protocol.socket()

    async def start_framed(self, *, send: bool = True, receive: bool = True) -> MpaSocket:
        """draft-culley-iwarp-mpa-02 §8.1: start FPDU framing with no
        Request/Reply, markers and CRC always on, in one direction or both.

        Call again for the other direction at its own switch point (the
        same socket is returned). Until then that direction carries
        streaming data: :meth:`write` for sending, :meth:`read` and friends
        for receiving; ``send``/``receive`` on the socket refuse it.
        """
        self._protocol.start_framed(send=send, receive=receive)
        return await self._protocol.socket()

    async def close(self) -> None:
        """Flush and close the TCP connection (FIN); wait until closed."""
        await self._protocol.close()

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        self._protocol.abort()


async def open_stream(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    local_addr: tuple[str, int] | None = None,
) -> MpaStream:
    """Open a TCP connection in streaming mode, to switch into MPA later
    (:meth:`MpaStream.start_mpa`, :meth:`MpaStream.start_framed`).

    :raises OSError: the TCP connection could not be opened.
    """
    loop = asyncio.get_running_loop()
    cfg = config if config is not None else MpaConfig()
    _, protocol = await loop.create_connection(
        lambda: _MpaProtocol(None, cfg), host, port, local_addr=local_addr
    )
    return MpaStream(protocol)


async def serve_stream(
    handler: Callable[[MpaStream], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    backlog: int = 1024,
) -> asyncio.Server:
    """Accept TCP connections in streaming mode; run ``handler`` for each in a
    task of its own. The handler switches into MPA when its protocol says so;
    the connection is closed when it returns."""
    cfg = config if config is not None else MpaConfig()

    async def run(protocol: _MpaProtocol) -> None:
        await protocol.made
        stream = MpaStream(protocol)
        try:
            await run_handler(handler, stream, protocol.peer(), None)
        finally:
            await stream.close()

    def accept() -> tuple[_MpaProtocol, Coroutine[Any, Any, None]]:
        protocol = _MpaProtocol(None, cfg)
        return protocol, run(protocol)

    return await start_server(accept, host, port, backlog=backlog)


async def connect(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    local_addr: tuple[str, int] | None = None,
    fallback_to_rev1: bool = False,
) -> MpaSocket:
    """Open a TCP connection and run MPA startup as Initiator.

    Returns once MPA is in full operation. The core's ``reply_timeout``
    bounds the wait for the Reply. With ``fallback_to_rev1`` (or the
    config's ``rev1_fallback``), a Rev 2 Request that the peer answers by
    closing the connection (an unenhanced Responder, RFC 6581 §10) is
    retried once, on a new connection, as a plain Rev 1 Request (what cxgb4
    does); ``params.revision`` tells which one succeeded.

    :raises MpaRejectedError: the Responder rejected (R=1) or a local policy
        refused its Reply.
    :raises MpaError: startup failed (code 1: closed/reset/timeout; 4:
        invalid Reply) or RFC 6581 negotiation failed (6, 7).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises OSError: the TCP connection could not be opened.
    """
    cfg = config if config is not None else MpaConfig()
    build_request(cfg, private_data)  # LocalProtocolError before any connection
    try:
        return await _connect_once(host, port, cfg, private_data, local_addr)
    except MpaError as exc:
        retry = rev1_fallback(cfg, exc, requested=fallback_to_rev1)
        if retry is None:
            raise
    return await _connect_once(host, port, retry, private_data, local_addr)


async def _connect_once(
    host: str,
    port: int,
    cfg: MpaConfig,
    private_data: bytes,
    local_addr: tuple[str, int] | None,
) -> MpaSocket:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(
        lambda: _MpaProtocol(Role.INITIATOR, cfg, private_data=private_data),
        host,
        port,
        local_addr=local_addr,
    )
    try:
        params = await protocol.established
    except BaseException:
        protocol.close_transport()
        del protocol  # the error's traceback must not hold it (no reference cycle)
        raise
    return MpaSocket(protocol, params)


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
    """Listen for TCP connections and run MPA startup on each as Responder.

    ``decide`` sees each valid Request (private data, enhanced data) and
    returns :class:`Accept` or :class:`Reject`; by default every Request is
    accepted. Each connection in full operation is passed to ``handler`` in
    a task of its own; the socket is closed when the handler returns.
    Connections that end before full operation (bad frames, timeouts,
    rejects) are reported to ``on_failure`` and closed; the server goes on.
    """
    cfg = config if config is not None else MpaConfig()

    async def run(protocol: _MpaProtocol) -> None:
        try:
            params = await protocol.established
        except IwarpError as exc:
            exc.__traceback__ = None  # kept in the protocol: no cycle through this frame
            # Ended before full operation: also when the Request came with a
            # bad FPDU in one segment (the error is that FPDU's, e.g. code 2).
            protocol.close_transport()
            report(on_failure, exc, protocol.peer())
            return
        sock = MpaSocket(protocol, params)
        try:
            await run_handler(handler, sock, protocol.peer(), on_failure)
        finally:
            await sock.close()

    def accept() -> tuple[_MpaProtocol, Coroutine[Any, Any, None]]:
        protocol = _MpaProtocol(Role.RESPONDER, cfg, decide=decide)
        return protocol, run(protocol)

    return await start_server(accept, host, port, backlog=backlog)
