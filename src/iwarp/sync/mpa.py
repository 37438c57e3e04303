"""MPA on a blocking socket: :func:`connect`, :func:`listen` and :class:`MpaSocket`.

A thin shell around :class:`~iwarp.mpa.connection.MpaConnection`, driven
by the caller's thread (:mod:`iwarp.sync._driver`): each call that waits
takes a ``timeout`` in seconds (None: no limit) and raises
:class:`~iwarp.sync.WaitTimeoutError` when it runs out::

    with listen("127.0.0.1", 0) as listener:
        ...                                   # elsewhere: connect(host, listener.port)
        with listener.accept(timeout=5) as sock:
            for ulpdu in sock:                # until the peer closes
                sock.send(ulpdu)

    with connect("127.0.0.1", port, private_data=b"hi", timeout=5) as sock:
        sock.send(b"hello")
        print(sock.receive(timeout=5))

TCP_NODELAY is on and the EMSS from TCP_MAXSEG gives ``params.mulpdu``,
as in the asyncio adapter (:mod:`iwarp.asyncio.mpa`). :meth:`MpaSocket.send`
returns once the kernel took the FPDU (like ``socket.sendall``); received
FPDUs wait in the kernel until a call reads them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

from iwarp._typing import Buffer
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
    StreamDataReceived,
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
from iwarp.sync._driver import (
    Driver,
    TcpListener,
    clock,
    deadline_after,
    open_tcp,
    tcp_emss,
)

__all__ = [
    "Accept",
    "ConnectionRejectedError",
    "MpaListener",
    "MpaSocket",
    "Reject",
    "connect",
    "listen",
]

#: Received-but-unread octets above which the socket stops reading.
RECEIVE_HIGH_WATER = 1 << 20


class MpaSocket:
    """One MPA connection on a blocking TCP socket (made by :func:`connect`
    and :meth:`MpaListener.accept`)."""

    def __init__(
        self,
        sock: Any,
        role: Role,
        config: MpaConfig,
        *,
        private_data: bytes = b"",
        decide: Decider | None = None,
    ) -> None:
        emss = tcp_emss(sock)
        self._conn = MpaConnection(None, config, emss=emss)
        self._decide = decide
        self._received: deque[bytes] = deque()
        self._received_octets = 0
        self._eof = False
        self._params: MpaParams | None = None
        self._established = False
        #: The error that ended the connection, if any.
        self.error: IwarpError | None = None
        self.emss = emss
        self._driver = Driver(sock, self._conn, self._on_events)
        self._handlers: dict[type, Callable[[Any], None]] = {
            UlpduReceived: self._on_ulpdu,
            RequestReceived: self._on_request,
            ConnectionEstablished: self._on_established,
            ConnectionRejected: self._on_rejected,
            ConnectionFailed: self._on_failed,
            NegotiationFailed: self._on_failed,
            ConnectionClosed: self._on_closed,
            StreamDataReceived: _ignore,  # only after a reject: TCP is closing
        }
        self._conn.start(role, now=clock(), private_data=private_data)
        self._driver.flush()

    # -- properties -----------------------------------------------------------------

    @property
    def params(self) -> MpaParams:
        """What the Request/Reply exchange negotiated (MULPDU from TCP_MAXSEG)."""
        params = self._conn.params or self._params
        if params is None:
            raise LocalProtocolError("MPA is not in full operation")
        return params

    @property
    def connection(self) -> MpaConnection:
        """The sans-IO core (for inspection; drive it only through this socket)."""
        return self._conn

    def fileno(self) -> int:
        """The TCP socket's descriptor (for the application's own ``select``)."""
        return self._driver.fileno()

    # -- events -------------------------------------------------------------------------

    def _on_events(self, events: list[Any]) -> None:
        handlers = self._handlers
        for event in events:
            handlers[type(event)](event)
        if self._received_octets > RECEIVE_HIGH_WATER:
            self._driver.reading = False

    def _on_ulpdu(self, event: UlpduReceived) -> None:
        data = bytes(event.data)
        self._received.append(data)
        self._received_octets += len(data)

    def _on_request(self, event: RequestReceived) -> None:
        try:
            answer_request(self._conn, event, self._decide)
        except LocalProtocolError as exc:  # bad private data or IRD/ORD from decide
            self._fail(exc, close=True)
            return
        self._on_events(self._conn.take_events())

    def _on_established(self, event: ConnectionEstablished) -> None:
        self._params = event.params
        self._established = True

    def _on_rejected(self, event: ConnectionRejected) -> None:
        self._fail(ConnectionRejectedError(event), close=True)

    def _on_failed(self, event: ConnectionFailed | NegotiationFailed) -> None:
        close = isinstance(event, NegotiationFailed) or event.close
        self._fail(event.error, close=close)

    def _on_closed(self, event: ConnectionClosed) -> None:
        self._eof = True

    def _fail(self, error: IwarpError, *, close: bool) -> None:
        if self.error is None:
            self.error = error
        if close:
            self._driver.flush()  # e.g. the Reply of a reject, then FIN (RFC 5044 §8)
            self._driver.close()

    # -- startup -----------------------------------------------------------------------

    def _handshake(self, deadline: float | None) -> None:
        """Run MPA startup until full operation; close and raise on failure."""
        driver = self._driver
        try:
            driver.run_until(
                lambda: self.error is not None or (self._established and not driver.unsent),
                deadline,
                "MPA startup",
            )
        except BaseException:
            driver.close()
            raise
        if self.error is None and not self._established:
            self.error = MpaError(MpaErrorCode.TCP_CLOSED, "connection closed during MPA startup")
        if self.error is not None:
            driver.close()
            raise self.error

    # -- data -----------------------------------------------------------------------------

    def send(self, ulpdu: Buffer, *, timeout: float | None = None) -> None:
        """Frame one ULPDU and write it; returns when the kernel took it.

        :raises LocalProtocolError: the connection cannot send (closed,
            failed) or the ULPDU is too large.
        :raises WaitTimeoutError: the kernel did not take it in time (it is
            still queued and goes out during later calls).
        """
        self._conn.send_ulpdu(ulpdu)
        self._write(timeout)

    def send_many(self, ulpdus: Iterable[Buffer], *, timeout: float | None = None) -> None:
        """Frame several ULPDUs and write them with one ``sendmsg``."""
        for ulpdu in ulpdus:
            self._conn.send_ulpdu(ulpdu)
        self._write(timeout)

    def _write(self, timeout: float | None) -> None:
        driver = self._driver
        driver.flush()
        if driver.unsent:
            driver.run_until(lambda: not driver.unsent, deadline_after(timeout), "the send")

    def receive(self, *, timeout: float | None = None) -> bytes | None:
        """The next ULPDU, or None after the peer closed cleanly.

        :raises MpaError: the connection failed (``.code`` is the RFC 5044 §8
            code); ULPDUs that arrived before the error are returned first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        driver = self._driver
        if not self._received:
            driver.run_until(
                lambda: bool(self._received) or self._eof or driver.closed,
                deadline_after(timeout),
                "an FPDU",
            )
        if self._received:
            data = self._received.popleft()
            self._received_octets -= len(data)
            if not driver.reading and self._received_octets < RECEIVE_HIGH_WATER // 4:
                driver.reading = True
            return data
        if self.error is not None:
            raise self.error
        return None

    def __iter__(self) -> Iterator[bytes]:
        """ULPDUs until the peer closes (each wait without a time limit)."""
        while (data := self.receive()) is not None:
            yield data

    # -- closing --------------------------------------------------------------------------

    def close(self, *, timeout: float | None = 5.0) -> None:
        """Graceful close: write what is queued (for at most ``timeout``
        seconds), then FIN."""
        driver = self._driver
        if driver.closed:
            return
        if self._conn.state not in (MpaState.CLOSED, MpaState.FAILED):
            self._conn.close()
        try:
            self._write(timeout)
        finally:
            driver.close()

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        self._driver.abort()

    def __enter__(self) -> MpaSocket:
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


def _ignore(event: object) -> None:
    pass


def connect(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    private_data: bytes = b"",
    timeout: float | None = None,
    local_address: tuple[str, int] | None = None,
    fallback_to_rev1: bool = False,
) -> MpaSocket:
    """Open a TCP connection and run MPA startup as Initiator.

    ``timeout`` bounds the whole call (TCP and MPA); the core's
    ``reply_timeout`` applies too. With ``fallback_to_rev1`` (or the
    config's ``rev1_fallback``) a Rev 2 Request the peer answers by closing
    is retried once as Rev 1 (RFC 6581 §10).

    :raises ConnectionRejectedError: the Responder rejected (R=1) or a local policy
        refused its Reply.
    :raises MpaError: startup failed (code 1: closed/reset/timeout; 4:
        invalid Reply) or RFC 6581 negotiation failed (6, 7).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises WaitTimeoutError: ``timeout`` passed first.
    :raises OSError: the TCP connection could not be opened.
    """
    cfg = config if config is not None else MpaConfig()
    build_request(cfg, private_data)  # LocalProtocolError before any connection
    deadline = deadline_after(timeout)
    try:
        return _connect_once(host, port, cfg, private_data, deadline, local_address)
    except MpaError as exc:
        retry = rev1_fallback(cfg, exc, requested=fallback_to_rev1)
        if retry is None:
            raise
    return _connect_once(host, port, retry, private_data, deadline, local_address)


def _connect_once(
    host: str,
    port: int,
    config: MpaConfig,
    private_data: bytes,
    deadline: float | None,
    local_address: tuple[str, int] | None,
) -> MpaSocket:
    sock = open_tcp(host, port, deadline, local_address)
    mpa = MpaSocket(sock, Role.INITIATOR, config, private_data=private_data)
    mpa._handshake(deadline)
    return mpa


class MpaListener:
    """Accepts MPA connections on one TCP port, one at a time (:func:`listen`)."""

    def __init__(
        self,
        host: str | None,
        port: int,
        *,
        config: MpaConfig | None = None,
        decide: Decider | None = None,
        backlog: int = 128,
    ) -> None:
        self.config = config if config is not None else MpaConfig()
        self._decide = decide
        self._tcp = TcpListener(host, port, backlog)

    @property
    def port(self) -> int:
        return self._tcp.address[1]

    @property
    def address(self) -> tuple[str, int]:
        return self._tcp.address

    def accept(self, *, timeout: float | None = None, decide: Decider | None = None) -> MpaSocket:
        """The next connection in full operation, as Responder.

        ``decide`` (default: the listener's, else accept all) sees the
        Request and returns :class:`Accept` or :class:`Reject`. ``timeout``
        bounds the wait for a TCP connection and its MPA startup together;
        while one connection runs its startup, others wait in the backlog.

        :raises ConnectionRejectedError: this connection's Request was rejected.
        :raises MpaError: this connection's startup failed; the listener
            goes on (call ``accept`` again).
        :raises WaitTimeoutError: ``timeout`` passed first.
        """
        deadline = deadline_after(timeout)
        sock = self._tcp.accept(deadline)
        mpa = MpaSocket(sock, Role.RESPONDER, self.config, decide=decide or self._decide)
        mpa._handshake(deadline)
        return mpa

    def close(self) -> None:
        """Stop listening (accepted connections stay open)."""
        self._tcp.close()

    def __enter__(self) -> MpaListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def listen(
    host: str | None,
    port: int,
    *,
    config: MpaConfig | None = None,
    decide: Decider | None = None,
    backlog: int = 128,
) -> MpaListener:
    """Listen for MPA connections on ``host``:``port`` (0 picks a port)."""
    return MpaListener(host, port, config=config, decide=decide, backlog=backlog)
