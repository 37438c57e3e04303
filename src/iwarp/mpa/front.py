"""An MPA connection's front: what it keeps and decides whatever drives it.

:class:`MpaFront` runs one :class:`~iwarp.mpa.connection.MpaConnection`
through a driver it holds (:class:`~iwarp.contract.FrontDriver`), with the
state an application-facing socket needs and no I/O: the queue of
received ULPDUs, the streaming octets not read yet (delayed startup, seed
000 §6.1.2/§6.1.4, and draft-culley-iwarp-mpa-02 §8.1), the error that
ended the connection, the negotiated parameters once in full operation,
the Responder's decision (:func:`~iwarp.mpa.policy.answer_request`), when
TCP must close and when reading pauses. The core's events reach that
state through one table.

:class:`MpaFace` is what an MPA socket and a streaming-mode stream (two
faces of one connection) do without waiting. The asyncio adapter
(:mod:`iwarp.asyncio.mpa`) and the blocking one (:mod:`iwarp.sync.mpa`)
add only the calls that wait: such a call checks :attr:`MpaFront.readable`
(or one of the ``stream_*`` readers, which give None while more octets
are needed) and waits for the next input when it is false. See
docs/mpa-connection.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from iwarp._typing import Buffer
from iwarp.contract import FrontDriver
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import DEFAULT_EMSS, MpaConnection
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
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
from iwarp.mpa.handshake import MpaState
from iwarp.mpa.policy import ConnectionRejectedError, Decider, answer_request

__all__ = ["RECEIVE_HIGH_WATER", "IncompleteReadError", "MpaFace", "MpaFront"]

#: Received-but-unread octets (ULPDUs and streaming octets) above which a
#: driver stops reading from TCP; it reads again below a quarter of it.
RECEIVE_HIGH_WATER: Final = 1 << 20


class IncompleteReadError(IwarpError, EOFError):
    """The stream ended before a streaming read was complete (the blocking
    twin of :class:`asyncio.IncompleteReadError`)."""

    def __init__(self, partial: bytes, expected: int | None) -> None:
        want = "a separator" if expected is None else f"{expected} octets"
        super().__init__(f"end of stream after {len(partial)} octets, wanted {want}")
        #: What was read before the end.
        self.partial = partial
        #: The octets asked for (None: up to a separator).
        self.expected = expected


class MpaFront:
    """The adapter-independent half of one MPA connection, on the driver it holds.

    :param config: what MPA offers and accepts.
    :param role: the role MPA startup runs in once TCP is up (None:
        streaming mode until :meth:`start` or :meth:`start_framed`).
    :param private_data: the Initiator's Request private data.
    :param decide: the Responder's decision on a Request (default: accept).
    :param emss: the TCP effective MSS, for MULPDU (:meth:`open` sets it).

    The adapter sets ``_driver`` before TCP is up; the driver calls
    :meth:`open`, :meth:`dispatch` and :meth:`lost`.
    """

    __slots__ = (
        "__weakref__",
        "_close",
        "_driver",
        "_private_data",
        "_received",
        "_received_octets",
        "_role",
        "_scanned",
        "_started",
        "core",
        "decide",
        "emss",
        "eof",
        "error",
        "params",
        "socket",
        "unread",
    )

    #: Keep our half open after the peer's FIN (MPA may still send; RFC 5044 §7.2).
    keep_open_after_eof = True

    _driver: FrontDriver

    def __init__(
        self,
        config: MpaConfig,
        *,
        role: Role | None = None,
        private_data: bytes = b"",
        decide: Decider | None = None,
        emss: int = DEFAULT_EMSS,
    ) -> None:
        #: The sans-IO core; in streaming mode until started.
        self.core = MpaConnection(None, config, emss=emss)
        #: The TCP effective MSS (TCP_MAXSEG) MULPDU was sized from.
        self.emss = emss
        self.decide = decide
        self._role = role
        self._private_data = private_data
        self._started = False
        #: The adapter's socket once MPA is in full operation (one per connection).
        self.socket: Any = None
        #: The error that ended the connection (the first one), if any.
        self.error: IwarpError | None = None
        #: What startup negotiated, once MPA is in full operation.
        self.params: MpaParams | None = None
        #: The peer closed (FIN) or TCP is gone: nothing more arrives.
        self.eof = False
        #: Streaming octets received and not read yet; they go to MPA at the switch.
        self.unread = bytearray()
        self._received: deque[bytes] = deque()
        self._received_octets = 0
        self._close = False
        self._scanned = 0  # octets of ``unread`` searched for a separator already

    # -- for the driver --------------------------------------------------------------

    @property
    def fin_on_clean_close(self) -> bool:
        """In full operation a clean close under us reads as the peer's FIN
        (the application sees the end, not an error)."""
        return self.core.params is not None and not self.eof

    def open(self, now: float, emss: int) -> MpaConnection:
        """TCP is up: MULPDU from ``emss``; MPA startup begins in the role
        given (a bad private data fails it: TCP closes)."""
        self.emss = emss
        self.core.set_emss(emss)
        if self._role is not None:
            try:
                self.start(self._role, now=now, private_data=self._private_data)
            except LocalProtocolError as exc:
                self._fail(exc, close=True)
        return self.core

    def dispatch(self, events: list[Event]) -> None:
        """Apply the core's events; close TCP when MPA requires it, tell the
        driver when startup is over, wake the waiting call, pause reading
        above :data:`RECEIVE_HIGH_WATER` unread octets."""
        driver = self._driver
        if self.handle(events):
            driver.flush()  # e.g. the Reply of a reject, then FIN (RFC 5044 §8)
            driver.close()
        if not self._started and self.established:
            self._started = True
            driver.started()
        driver.wake()
        if self.backlog > RECEIVE_HIGH_WATER:
            driver.pause_reading()

    def lost(self) -> None:
        """TCP is gone: nothing more arrives."""
        self.eof = True

    def applied(self) -> None:
        """After an application call on the core: its events, then its output."""
        self.dispatch(self.core.take_events())
        self._driver.flush()

    def consumed(self) -> None:
        """The application took received octets: reading resumes below a
        quarter of :data:`RECEIVE_HIGH_WATER`."""
        if self.backlog < RECEIVE_HIGH_WATER // 4:
            self._driver.resume_reading()

    # -- the core's events ---------------------------------------------------------

    def handle(self, events: list[Event]) -> bool:
        """Apply the core's events (and those deciding on a Request causes).

        Returns True when TCP must be closed now, after what the core queued
        is written: a reject (RFC 5044 §7.1.2 rule 2 lets us close), error 4
        ("MUST be immediately closed", §8), a negotiation failure, or a
        ``decide`` that gave invalid private data.
        """
        batch = events
        while batch:
            for event in batch:
                _HANDLERS[type(event)](self, event)
            batch = self.core.take_events()
        close, self._close = self._close, False
        return close

    def _on_ulpdu(self, event: UlpduReceived) -> None:
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
            answer_request(self.core, event, self.decide)
        except LocalProtocolError as exc:  # bad private data or IRD/ORD from decide
            self._fail(exc, close=True)

    def _on_established(self, event: ConnectionEstablished) -> None:
        self.params = event.params

    def _on_rejected(self, event: ConnectionRejected) -> None:
        self._fail(ConnectionRejectedError(event), close=True)

    def _on_failed(self, event: ConnectionFailed | NegotiationFailed) -> None:
        self._fail(event.error, close=isinstance(event, NegotiationFailed) or event.close)

    def _on_closed(self, event: ConnectionClosed) -> None:
        self.eof = True

    def _on_stream_data(self, event: StreamDataReceived) -> None:
        # Streaming mode (before MPA, a culley-02 direction not framed yet),
        # or after a reject while TCP closes.
        self.unread += event.data

    def _fail(self, error: IwarpError, *, close: bool) -> None:
        if self.error is None:
            self.error = error
        self._close = self._close or close

    # -- startup ---------------------------------------------------------------------

    @property
    def established(self) -> bool:
        """MPA reached full operation without error: a socket can be handed out."""
        return self.params is not None and self.error is None

    def startup_error(self) -> IwarpError:
        """Why startup did not complete (TCP closed if nothing else said why)."""
        return self.error or MpaError(
            MpaErrorCode.TCP_CLOSED, "connection closed during MPA startup"
        )

    def startup_over(self) -> bool:
        """Startup ended: in full operation, failed, or TCP is gone."""
        return self.error is not None or self.params is not None or self._driver.gone

    def opened(self) -> None:
        """After startup: nothing in full operation; else TCP closes and
        the startup error is raised (it is :attr:`error` from then on).

        :raises IwarpError: why startup did not complete.
        """
        if not self.established:
            self.error = self.startup_error()
            self._driver.close()
            raise self.error

    def start(
        self,
        role: Role,
        *,
        now: float,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        decide: Decider | None = None,
    ) -> None:
        """Switch the streaming connection into MPA startup as ``role``; the
        unread streaming octets are MPA's input. The caller then handles
        ``core.take_events()`` and writes ``core.data_to_send()``.

        :raises LocalProtocolError: MPA started already, or bad private data.
        """
        if decide is not None:
            self.decide = decide
        self.core.start(
            role,
            now=now,
            private_data=private_data,
            last_streaming=last_streaming,
            read_ahead=self._take_all() if self.core.state is MpaState.IDLE else b"",
        )

    def start_framed(self, *, send: bool, receive: bool, now: float) -> None:
        """draft-culley-iwarp-mpa-02: frame ``send`` and/or ``receive``; with
        ``receive`` the unread streaming octets are MPA's input."""
        read_ahead = self._take_all() if receive else b""
        self.core.start_framed(send=send, receive=receive, now=now, read_ahead=read_ahead)

    def close(self) -> None:
        """The application closes: MPA stops (unless it ended already)."""
        if self.core.state not in (MpaState.CLOSED, MpaState.FAILED):
            self.core.close()

    # -- received ULPDUs -----------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Octets received and not taken by the application."""
        return self._received_octets + len(self.unread)

    @property
    def readable(self) -> bool:
        """:meth:`take_ulpdu` would not wait: a ULPDU, the end or an error is there."""
        return bool(self._received) or self.eof or self._failed()

    def _failed(self) -> bool:
        return self.error is not None and not isinstance(self.error, ConnectionRejectedError)

    def take_ulpdu(self) -> bytes | None:
        """The next ULPDU; None at the end (or while none is there).

        :raises IwarpError: the error that ended the connection, once the
            ULPDUs that arrived before it were taken.
        """
        if self._received:
            data = self._received.popleft()
            self._received_octets -= len(data)
            return data
        if self.error is not None and self._failed():
            raise self.error
        return None

    # -- streaming octets ---------------------------------------------------------------

    def send_stream(self, data: Buffer) -> None:
        """Queue streaming octets (:meth:`MpaConnection.send_stream`)."""
        self.core.send_stream(data)

    def give_back(self, data: Buffer) -> None:
        """Put octets back in front of the unread ones (they go to MPA at the switch)."""
        self.unread[:0] = data
        self._scanned = 0

    def stream_read(self, n: int) -> bytes | None:
        """Up to ``n`` unread octets (all with ``n < 0``); None while there are none."""
        if not self.unread:
            return b"" if self.eof else None
        return self._take(len(self.unread) if n < 0 else min(n, len(self.unread)))

    def stream_exactly(self, n: int) -> bytes | None:
        """Exactly ``n`` octets, or None while fewer are unread.

        :raises IncompleteReadError: the stream ended first.
        """
        if len(self.unread) >= n:
            return self._take(n)
        if self.eof:
            raise IncompleteReadError(self._take_all(), n)
        return None

    def stream_until(self, separator: bytes) -> bytes | None:
        """The octets up to and including ``separator``, or None while it has
        not arrived.

        :raises IncompleteReadError: the stream ended first.
        """
        end = self.unread.find(separator, self._scanned)
        if end >= 0:
            return self._take(end + len(separator))
        if self.eof:
            raise IncompleteReadError(self._take_all(), None)
        self._scanned = max(0, len(self.unread) - len(separator) + 1)
        return None

    def _take(self, n: int) -> bytes:
        data = bytes(self.unread[:n])
        del self.unread[:n]
        self._scanned = 0
        return data

    def _take_all(self) -> bytes:
        return self._take(len(self.unread))


_HANDLERS: dict[type, Callable[[MpaFront, Any], None]] = {
    UlpduReceived: MpaFront._on_ulpdu,
    UlpduBatchReceived: MpaFront._on_batch,
    RequestReceived: MpaFront._on_request,
    ConnectionEstablished: MpaFront._on_established,
    ConnectionRejected: MpaFront._on_rejected,
    ConnectionFailed: MpaFront._on_failed,
    NegotiationFailed: MpaFront._on_failed,
    ConnectionClosed: MpaFront._on_closed,
    StreamDataReceived: MpaFront._on_stream_data,
}


class MpaFace:
    """What an MPA socket or stream does without waiting, in every adapter
    (both faces of one connection hold its :class:`MpaFront`)."""

    def __init__(self, front: MpaFront) -> None:
        self._front = front

    @property
    def connection(self) -> MpaConnection:
        """The sans-IO core (for inspection; drive it only through this object)."""
        return self._front.core

    @property
    def params(self) -> MpaParams:
        """What startup negotiated (MULPDU from TCP_MAXSEG).

        :raises LocalProtocolError: MPA is not in full operation.
        """
        params = self._front.core.params or self._front.params
        if params is None:
            raise LocalProtocolError("MPA is not in full operation")
        return params

    @property
    def error(self) -> IwarpError | None:
        """The error that ended the connection, if any (``.code`` for MPA)."""
        return self._front.error

    @property
    def emss(self) -> int:
        """The TCP effective MSS (TCP_MAXSEG) MULPDU was sized from."""
        return self._front.emss

    def unread(self, data: bytes) -> None:
        """Put streaming octets back in front of the unread ones (they go to
        MPA at the switch)."""
        self._front.give_back(data)

    def _queue(self, ulpdus: Iterable[Buffer]) -> None:
        core = self._front.core
        for ulpdu in ulpdus:
            core.send_ulpdu(ulpdu)

    def _refuse_reply(self) -> None:
        self._front.core.refuse_reply()
        self._front.applied()

    def _start_mpa(
        self, role: Role, private_data: bytes, last_streaming: bytes, decide: Decider | None
    ) -> None:
        front = self._front
        front.start(
            role,
            now=front._driver.now(),
            private_data=private_data,
            last_streaming=last_streaming,
            decide=decide,
        )
        front.applied()

    def _start_framed(self, send: bool, receive: bool) -> None:
        front = self._front
        front.start_framed(send=send, receive=receive, now=front._driver.now())
        front.applied()
