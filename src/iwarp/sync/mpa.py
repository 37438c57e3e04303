"""MPA on a blocking socket: :func:`connect`, :func:`listen`, :class:`MpaSocket`,
and delayed startup or culley-02 on a live connection (:func:`open_stream`,
:meth:`MpaListener.accept_stream`, :class:`MpaStream`).

The per-connection state and policy are :class:`~iwarp.mpa.front.MpaFront`'s,
the I/O is :class:`~iwarp.sync._driver.Driver`'s (the front's driver), run
by the caller's thread inside each call; this module only waits. Every call that waits takes a
``timeout`` in seconds (None: no limit) and raises
:class:`~iwarp.sync.WaitTimeoutError` when it runs out. Usage: docs/sync.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from iwarp._typing import Buffer
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.front import IncompleteReadError, MpaFace, MpaFront
from iwarp.mpa.policy import Accept, Attempts, ConnectionRejectedError, Decider, Reject
from iwarp.sockets import LISTEN_BACKLOG, tcp_setup
from iwarp.sync._calls import BusyPolled, CloseOnExit, TcpListener, clock, deadline_after, open_tcp
from iwarp.sync._driver import Driver

__all__ = [
    "Accept",
    "ConnectionRejectedError",
    "IncompleteReadError",
    "MpaListener",
    "MpaSocket",
    "MpaStream",
    "Reject",
    "connect",
    "listen",
    "open_stream",
]

T = TypeVar("T")


def _front(sock: Any, config: MpaConfig, role: Role | None, **kwargs: Any) -> MpaFront:
    """An MPA front on a connected socket, driven in the caller's thread;
    with a ``role``, MPA startup has begun."""
    emss = tcp_setup(sock)
    front = MpaFront(config, role=role, emss=emss, **kwargs)
    front._driver = Driver(sock, front.core, front.dispatch)
    front.open(clock(), emss)
    front.applied()
    return front


def _driver(front: MpaFront) -> Driver:
    driver = front._driver
    assert isinstance(driver, Driver)
    return driver


def _wait_for(front: MpaFront, take: Callable[[], T | None], timeout: float | None, what: str) -> T:
    """``take()`` once it gives something (at the latest when TCP is gone)."""
    got = _driver(front).run_for(take, deadline_after(timeout), what)
    if got is None:
        front.lost()  # TCP is gone: nothing more arrives
        got = take()
        assert got is not None
    front.consumed()
    return got


def _write(front: MpaFront, timeout: float | None) -> None:
    _driver(front).send_all(deadline_after(timeout), "the send")


def _establish(front: MpaFront, deadline: float | None) -> MpaSocket:
    """Run MPA startup to full operation (its Reply written); close TCP
    and raise on failure."""
    driver = _driver(front)
    try:
        driver.run_until(
            lambda: front.startup_over() and (front.error is not None or not driver.unsent),
            deadline,
            "MPA startup",
        )
    except BaseException:
        driver.close()
        raise
    front.opened()
    if front.socket is None:
        front.socket = MpaSocket(front)
    socket: MpaSocket = front.socket
    return socket


class _Face(MpaFace, BusyPolled, CloseOnExit):
    """What MpaSocket and MpaStream share: closing, the descriptor."""

    def fileno(self) -> int:
        """The TCP socket's descriptor (for the application's own ``select``)."""
        return _driver(self._front).fileno()

    def _polled(self) -> Driver:
        return _driver(self._front)

    def close(self, *, timeout: float | None = 5.0) -> None:
        """Graceful close: write what is queued (for at most ``timeout``
        seconds), then FIN."""
        driver = _driver(self._front)
        if driver.closed:
            return
        self._front.close()
        try:
            _write(self._front, timeout)
        finally:
            driver.close()

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        _driver(self._front).abort()


class MpaSocket(_Face):
    """One MPA connection in full operation on a blocking TCP socket."""

    def send(self, ulpdu: Buffer, *, timeout: float | None = None) -> None:
        """Frame one ULPDU and write it; returns when the kernel took it.

        :raises LocalProtocolError: cannot send (closed, failed) or too large.
        :raises WaitTimeoutError: the kernel did not take it in time (it stays
            queued and goes out during later calls).
        """
        self._front.core.send_ulpdu(ulpdu)
        _write(self._front, timeout)

    def send_many(self, ulpdus: Iterable[Buffer], *, timeout: float | None = None) -> None:
        """Frame several ULPDUs and write them with one ``sendmsg``."""
        self._queue(ulpdus)
        _write(self._front, timeout)

    def receive(self, *, timeout: float | None = None) -> bytes | None:
        """The next ULPDU, or None after the peer closed cleanly.

        :raises MpaError: the connection failed (``.code``, RFC 5044 §8);
            ULPDUs that arrived before the error come first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        front = self._front
        _wait_for(front, lambda: front.readable or None, timeout, "an FPDU")
        return front.take_ulpdu()

    def __iter__(self) -> Iterator[bytes]:
        """ULPDUs until the peer closes (each wait without a time limit)."""
        while (data := self.receive()) is not None:
            yield data

    def refuse_reply(self) -> MpaStream:
        """Initiator: refuse the Reply before any ULPDU; MPA exits, TCP stays
        open as the returned stream (RFC 5044 §7.1.2 rule 3).

        :raises LocalProtocolError: not an Initiator, or ULPDUs were exchanged.
        """
        self._refuse_reply()
        return MpaStream(self._front)


class MpaStream(_Face):
    """A TCP connection in streaming mode before MPA (seed 000 §6.1.2,
    culley-02 §8.1): octets not read when MPA starts are MPA's input."""

    def write(self, data: Buffer, *, timeout: float | None = None) -> None:
        """Send streaming octets (before MPA, or on a culley-02 direction not
        framed yet); returns when the kernel took them.

        :raises LocalProtocolError: MPA owns the send direction.
        """
        self._front.send_stream(data)
        _write(self._front, timeout)

    def read(self, n: int = -1, *, timeout: float | None = None) -> bytes:
        """Up to ``n`` (default: all available) octets; ``b""`` at end of stream."""
        front = self._front
        return _wait_for(front, lambda: front.stream_read(n), timeout, "streaming data")

    def readexactly(self, n: int, *, timeout: float | None = None) -> bytes:
        """Exactly ``n`` octets. :raises IncompleteReadError: the stream ended first."""
        front = self._front
        return _wait_for(front, lambda: front.stream_exactly(n), timeout, f"{n} octets")

    def readuntil(self, separator: bytes = b"\n", *, timeout: float | None = None) -> bytes:
        """Up to and including ``separator``. :raises IncompleteReadError: ended first."""
        front = self._front
        return _wait_for(front, lambda: front.stream_until(separator), timeout, f"{separator!r}")

    def start_mpa(
        self,
        role: Role,
        *,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
        timeout: float | None = None,
    ) -> MpaSocket:
        """Switch into MPA startup as ``role``; the socket once in full operation.

        :raises ConnectionRejectedError: rejected (TCP is closed).
        :raises MpaError: startup failed (codes 1, 4, 6, 7).
        :raises LocalProtocolError: MPA was started already, or bad private data.
        :raises WaitTimeoutError: ``timeout`` passed first (TCP is closed).
        """
        deadline = deadline_after(timeout)
        self._start_mpa(role, private_data, last_streaming, decide)
        return _establish(self._front, deadline)

    def start_framed(
        self, *, send: bool = True, receive: bool = True, timeout: float | None = None
    ) -> MpaSocket:
        """draft-culley-iwarp-mpa-02 §8.1: FPDUs with no Request/Reply in one
        direction or both; call again for the other (the same socket).
        ``timeout`` bounds writing what is still queued."""
        deadline = deadline_after(timeout)
        self._start_framed(send, receive)
        return _establish(self._front, deadline)


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
    """Open TCP and run MPA startup as Initiator; ``timeout`` bounds the whole
    call. ``fallback_to_rev1`` (or ``config.rev1_fallback``): a Rev 2
    Request answered by a close is retried once as Rev 1 (RFC 6581 §10).

    :raises ConnectionRejectedError: the Responder (or a local policy) rejected.
    :raises MpaError: startup failed (codes 1, 4) or RFC 6581 negotiation did (6, 7).
    :raises LocalProtocolError: the private data is too long for ``config``.
    :raises WaitTimeoutError: ``timeout`` passed first.
    :raises OSError: the TCP connection could not be opened.
    """
    cfg = config if config is not None else MpaConfig()
    attempts = Attempts(cfg, private_data, fallback=fallback_to_rev1)
    deadline = deadline_after(timeout)
    while True:
        sock = open_tcp(host, port, deadline, local_address)
        front = _front(sock, attempts.config, Role.INITIATOR, private_data=private_data)
        try:
            return _establish(front, deadline)
        except MpaError as exc:
            attempts.failed(exc)


def open_stream(
    host: str,
    port: int,
    *,
    config: MpaConfig | None = None,
    timeout: float | None = None,
    local_address: tuple[str, int] | None = None,
) -> MpaStream:
    """A TCP connection in streaming mode, to switch into MPA later.

    :raises WaitTimeoutError: TCP was not connected in time.
    :raises OSError: the TCP connection could not be opened.
    """
    sock = open_tcp(host, port, deadline_after(timeout), local_address)
    return MpaStream(_front(sock, config if config is not None else MpaConfig(), None))


class MpaListener:
    """Accepts MPA connections on one TCP port, one at a time (:func:`listen`)."""

    def __init__(
        self,
        host: str | None,
        port: int,
        *,
        config: MpaConfig | None = None,
        decide: Decider | None = None,
        backlog: int = LISTEN_BACKLOG,
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

        ``decide`` (default: the listener's, else accept all) answers the
        Request with :class:`Accept` or :class:`Reject`. ``timeout`` bounds
        the wait for TCP and MPA startup together; others wait in the backlog.

        :raises ConnectionRejectedError: this connection's Request was rejected.
        :raises MpaError: this connection's startup failed; the listener goes on.
        :raises WaitTimeoutError: ``timeout`` passed first.
        """
        deadline = deadline_after(timeout)
        sock = self._tcp.accept(deadline)
        front = _front(sock, self.config, Role.RESPONDER, decide=decide or self._decide)
        return _establish(front, deadline)

    def accept_stream(self, *, timeout: float | None = None) -> MpaStream:
        """The next TCP connection in streaming mode, to switch into MPA later
        (:meth:`MpaStream.start_mpa`, :meth:`MpaStream.start_framed`).

        :raises WaitTimeoutError: none arrived in time.
        """
        sock = self._tcp.accept(deadline_after(timeout))
        return MpaStream(_front(sock, self.config, None, decide=self._decide))

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
    backlog: int = LISTEN_BACKLOG,
) -> MpaListener:
    """Listen for MPA connections on ``host``:``port`` (0 picks a port)."""
    return MpaListener(host, port, config=config, decide=decide, backlog=backlog)
