"""The whole iWARP stack for one TCP connection, sans-IO: MPA + DDP + RDMAP.

:class:`RdmaConnection` composes :class:`~iwarp.mpa.connection.MpaConnection`
(startup, framing, CRC, markers) with an
:class:`~iwarp.rdmap.stream.RdmapStream` (Send, RDMA Write/Read, Terminate,
RTR), created when MPA reaches full operation with the negotiated MULPDU,
IRD/ORD and RTR type::

    conn = RdmaConnection(Role.INITIATOR, pd, now=t)
    sock.sendall(b"".join(conn.data_to_send()))
    for event in conn.receive_data(sock.recv(65536), now=t):
        ...   # ConnectionEstablished, StreamReady, Completion, TerminateReceived...
    conn.post_send(SendWR(b"hello"))
    sock.sendall(b"".join(conn.data_to_send()))

Error handling follows the RFCs end to end: an MPA CRC or marker error is
answered with a Terminate (layer LLP, RFC 5044 §8) when the connection can
still send; RFC 6581 negotiation failures (codes 6, 7) with the Terminate
RFC 6581 §9 prescribes; DDP/RDMAP errors by the stream. After a Terminate
went out or came in, :attr:`RdmaConnection.must_close` turns True: flush
:meth:`~RdmaConnection.data_to_send` and close the TCP connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from iwarp._typing import Buffer
from iwarp.contract import Lanes
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode, RemoteProtocolError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import DEFAULT_EMSS, MpaConnection
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
    UlpduBatchReceived,
    UlpduReceived,
)
from iwarp.mpa.events import Event as MpaEvent
from iwarp.mpa.handshake import MpaState
from iwarp.mpa.wire import RtrFlags
from iwarp.rdma.events import StackEvent
from iwarp.rdmap.atomics import ATOMIC_DEPTH
from iwarp.rdmap.memory import ProtectionDomain
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import (
    RecvWR,
    SendQueueWR,
)

__all__ = ["RdmaConnection"]


#: MPA states in which the stream's ULPDUs may be framed.
_SENDING = (MpaState.FULL_OPERATION, MpaState.AWAIT_FIRST_FPDU, MpaState.SEND_ONLY)
#: Looked up once: the checks that use them run per message.
_FULL_OPERATION: Final = MpaState.FULL_OPERATION
_OPERATIONAL: Final = StreamState.OPERATIONAL

#: Octets of ULPDUs pulled from the stream per :meth:`data_to_send` call by default.
DEFAULT_SEND_BATCH = 1 << 20


class RdmaConnection:
    """MPA + DDP + RDMAP on one TCP connection, without I/O.

    :param role: Initiator (sends the MPA Request) or Responder.
    :param pd: the protection domain of the queue pair this connection is.
    :param config: MPA options (revision, CRC, markers, IRD/ORD, RTR).
    :param on_stream: called with the new :class:`RdmapStream` as soon as MPA
        reaches full operation, before any ULPDU is processed: the place to
        post receive buffers, as verbs users do before ``rdma_accept``.
    :param atomic_ord: RFC 7306 Atomic Requests we may have outstanding.
    :param atomic_ird: Atomic Requests of the peer we keep room to answer
        (0: we answer them as a stack without RFC 7306 does).
    """

    #: ``receive_data`` consumes its buffer before it returns (every ULPDU is
    #: placed or copied into posted memory), so an adapter may pass a view
    #: of a buffer it reuses, and the octets are copied once: into place.
    borrows_input = True
    #: The lanes are its queue pair's (QueuePairEndpoint.lanes), not its own.
    lanes: Lanes | None = None

    def __init__(
        self,
        role: Role,
        pd: ProtectionDomain,
        config: MpaConfig | None = None,
        *,
        private_data: bytes = b"",
        now: float = 0.0,
        emss: int = DEFAULT_EMSS,
        on_stream: Callable[[RdmapStream], None] | None = None,
        atomic_ord: int = ATOMIC_DEPTH,
        atomic_ird: int = ATOMIC_DEPTH,
    ) -> None:
        self.pd = pd
        self.role = role
        self.atomic_ord = atomic_ord
        self.atomic_ird = atomic_ird
        self.mpa = MpaConnection(
            role, config, private_data=private_data, now=now, emss=emss, batch_ulpdus=True
        )
        self.stream: RdmapStream | None = None
        self.on_stream = on_stream
        self._events: list[StackEvent] = []

    # -- properties ---------------------------------------------------------------

    @property
    def params(self) -> MpaParams | None:
        """The negotiated MPA parameters once in full operation."""
        return self.mpa.params

    @property
    def must_close(self) -> bool:
        """The TCP connection should be closed once the queued octets are sent.

        True after a Terminate was sent or received, after the peer closed,
        or when MPA requires it.
        """
        stream = self.stream
        if (
            stream is not None
            and stream.state is _OPERATIONAL
            and self.mpa.state is _FULL_OPERATION
        ):
            return False  # the common case, checked first: it runs per message
        if self.mpa.must_close or self.mpa.state in (MpaState.FAILED, MpaState.CLOSED):
            return True
        return stream is not None and stream.state in (
            StreamState.TERMINATED,
            StreamState.CLOSED,
        )

    # -- the responder's decision -------------------------------------------------

    def accept(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> None:
        """Responder: accept the Request (after a :class:`RequestReceived`);
        the events follow in :meth:`take_events`."""
        self.mpa.accept(private_data, ird=ird, ord=ord)
        self._process()

    def reject(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> None:
        """Responder: reject the Request (MPA Reply with R=1, with RFC 6581
        IRD/ORD for an enhanced Request); the events follow in :meth:`take_events`."""
        self.mpa.reject(private_data, ird=ird, ord=ord)
        self._process()

    # -- work ---------------------------------------------------------------------

    def _require_stream(self) -> RdmapStream:
        if self.stream is None:
            raise LocalProtocolError("the connection is not in full operation yet")
        return self.stream

    def post_send(self, wr: SendQueueWR) -> None:
        """Queue a Send, RDMA Write, RDMA Read or RFC 7306 work (see :class:`RdmapStream`)."""
        self._require_stream().post_send(wr)

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer for one incoming Send."""
        self._require_stream().post_recv(wr)

    @property
    def events_waiting(self) -> bool:
        """Events wait for :meth:`take_events` (they come before anything a
        lane beside the cores does, :mod:`iwarp.rdma.small`)."""
        return bool(self._events)

    def take_events(self) -> list[StackEvent]:
        """Events produced outside :meth:`receive_data` (send completions)."""
        if self.stream is not None:
            self._events.extend(self.stream.take_events())
        return self._take()

    # -- bytes in -----------------------------------------------------------------

    def receive_data(self, data: Buffer, now: float) -> list[StackEvent]:
        """Process octets from TCP (``b""`` means FIN); return the events."""
        self._process(self.mpa.receive_data(data, now))
        return self._take()

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[StackEvent]:
        """The TCP connection was lost."""
        self._process(self.mpa.connection_lost(now, reason))
        return self._take()

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` must be called next (MPA startup), or None."""
        return self.mpa.get_timer()

    def handle_timer(self, now: float) -> list[StackEvent]:
        """Act on an expired MPA startup timeout; return the events."""
        self._process(self.mpa.handle_timer(now))
        return self._take()

    def terminate(self, error: RemoteProtocolError) -> None:
        """End the stream with a Terminate reporting ``error`` (e.g. a local
        catastrophic error); the events follow in :meth:`take_events`."""
        stream = self.stream
        if stream is not None and stream.state in (StreamState.OPERATIONAL, StreamState.WAIT_PEER):
            self._events.extend(stream.terminate(error))

    def release(self) -> None:
        """TCP is gone: free the stream's receive machinery (no reference
        cycle outlives the connection; see :meth:`RdmapStream.release`)."""
        self.on_stream = None
        if self.stream is not None:
            self.stream.release()

    def set_emss(self, emss: int) -> None:
        """Report the TCP EMSS: it sizes the MULPDU, before full operation
        and during it (RFC 5044 §3: "the MULPDU value will change" with the
        EMSS); DDP/RDMAP segment every later ULPDU to the new value."""
        self.mpa.set_emss(emss)
        params = self.mpa.params
        if self.stream is not None and params is not None:
            self.stream.set_mulpdu(params.mulpdu)

    def close(self) -> list[StackEvent]:
        """Close locally: outstanding work is flushed."""
        if self.stream is not None and self.stream.state is not StreamState.CLOSED:
            self._events.extend(self.stream.close())
        if self.mpa.state not in (MpaState.CLOSED, MpaState.FAILED):
            self.mpa.close()
        return self._take()

    def _process(self, mpa_events: list[MpaEvent] | None = None) -> None:
        """Hand MPA's events (returned, then queued by application calls) to
        the stream and pass the rest up."""
        for batch in (mpa_events, self.mpa.take_events()):
            if not batch:
                continue
            for event in batch:
                kind = type(event)
                if kind is UlpduBatchReceived:  # the hot path: a receive's ULPDUs
                    if self.stream is not None:
                        self._events.extend(self.stream.handle_batch(event.batch))  # type: ignore[attr-defined]
                    continue
                if kind is UlpduReceived:
                    if self.stream is not None:
                        self._events.extend(self.stream.handle_ulpdu(event.data))  # type: ignore[attr-defined]
                    continue
                handler = _MPA_EVENTS.get(type(event))
                if handler is not None:
                    handler(self, event)
                if type(event) is ConnectionEstablished:
                    self._events.append(event)  # then the stream's first events (StreamReady)
                    if self.stream is not None:
                        self._events.extend(self.stream.take_events())
                elif type(event) in _PASSED_UP:
                    self._events.append(event)  # type: ignore[arg-type]

    def _on_established(self, event: ConnectionEstablished) -> None:
        self._start_stream(event.params)

    def _on_negotiation_failed(self, event: NegotiationFailed) -> None:
        self._terminate(event.error)

    def _on_closed(self, event: ConnectionClosed) -> None:
        if self.stream is not None and self.stream.state is not StreamState.CLOSED:
            self._events.extend(self.stream.connection_lost())

    def _start_stream(self, params: MpaParams) -> None:
        initiator = self.role is Role.INITIATOR
        rtr = params.rtr if params.peer_to_peer and params.rtr is not None else RtrFlags(0)
        self.stream = RdmapStream(
            self.pd,
            initiator=initiator,
            mulpdu=params.mulpdu,
            ird=params.ird,
            ord=params.ord,
            rtr=rtr,
            version=params.ddp_version,  # 0 with an RDMAC peer (RFC 5044 Appendix C)
            atomic_ord=self.atomic_ord,
            atomic_ird=self.atomic_ird,
        )
        on_stream, self.on_stream = self.on_stream, None  # called once (no cycle kept)
        if on_stream is not None:
            on_stream(self.stream)

    def _terminate(self, error: MpaError) -> None:
        """Send a Terminate for an LLP-layer error (RFC 6581 §9, RFC 5044 §8)."""
        if self.stream is None:
            params = self.mpa.params
            if params is None:
                return
            self.stream = RdmapStream(self.pd, initiator=True, mulpdu=params.mulpdu, ird=0, ord=0)
            self.stream.take_events()
        if self.stream.state in (StreamState.OPERATIONAL, StreamState.WAIT_PEER):
            self._events.extend(self.stream.terminate(error))

    def _on_failed(self, event: ConnectionFailed) -> None:
        stream = self.stream
        if stream is None:
            return
        code = event.error.mpa_code
        if not event.close and code in (MpaErrorCode.CRC_MISMATCH, MpaErrorCode.MARKER_MISMATCH):
            # RFC 5044 §8 / RFC 5040 §6.2.1: report the LLP error in a Terminate.
            self._terminate(event.error)
        elif stream.state is not StreamState.CLOSED:
            self._events.extend(stream.connection_lost())

    # -- bytes out ----------------------------------------------------------------

    def data_to_send(self, limit: int | None = DEFAULT_SEND_BATCH) -> list[Buffer]:
        """Octets to write to TCP, as buffers for ``writelines``.

        Pulls up to about ``limit`` octets of ULPDUs from the stream (large
        messages are segmented lazily: call again after the transport
        drained), frames them, and adds MPA's own output (frames, held FPDUs).
        """
        stream = self.stream
        mpa = self.mpa
        if (
            stream is not None
            and stream.has_data_to_send  # cheap when idle (asked after every receive)
            and mpa.state in _SENDING
        ):
            for run in stream.runs_to_send(limit):
                mpa.send_run(run)
            self._events.extend(stream.take_events())
        return mpa.data_to_send()

    def settled(self) -> bool:
        """No output, no timer, no close required
        (:meth:`iwarp.contract.Connection.settled`): in full operation with
        the stream operational (must_close's own fast case: False), MPA's
        answer and the stream's output; otherwise the three asked."""
        stream = self.stream
        mpa = self.mpa
        if stream is None or stream.state is not _OPERATIONAL or mpa.state is not _FULL_OPERATION:
            return not self.has_data_to_send and not self.must_close and self.get_timer() is None
        return mpa.settled() and not stream.has_data_to_send

    @property
    def has_data_to_send(self) -> bool:
        """Whether :meth:`data_to_send` would give octets now: MPA's own
        output (frames, released FPDUs) or ULPDUs the stream has ready."""
        # The stream's only while MPA can frame them (not once it FAILED
        # after a bad first FPDU): its queued Terminate would never leave,
        # and callers would loop.
        stream = self.stream
        return self.mpa.has_data_to_send or (
            stream is not None and stream.has_data_to_send and self.mpa.state in _SENDING
        )

    def _take(self) -> list[StackEvent]:
        events, self._events = self._events, []
        return events


#: MPA events reported to the layer above (streaming data after a reject is not).
_PASSED_UP = frozenset(
    {
        RequestReceived,
        ConnectionRejected,
        ConnectionFailed,
        NegotiationFailed,
        ConnectionClosed,
    }
)

_MpaHandler = Callable[[RdmaConnection, "MpaEvent"], None]
#: What the composed stack does with each MPA event besides passing it up.
_MPA_EVENTS: dict[type, _MpaHandler] = {
    ConnectionEstablished: RdmaConnection._on_established,  # type: ignore[dict-item]
    NegotiationFailed: RdmaConnection._on_negotiation_failed,  # type: ignore[dict-item]
    ConnectionFailed: RdmaConnection._on_failed,  # type: ignore[dict-item]
    ConnectionClosed: RdmaConnection._on_closed,  # type: ignore[dict-item]
}
