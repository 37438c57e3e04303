"""One MPA connection, sans-IO: startup handshake, then FPDU framing.

:class:`MpaConnection` is the object the DDP/RDMAP layer and the asyncio
adapter drive. It never touches sockets or clocks::

    conn = MpaConnection(Role.INITIATOR, MpaConfig(), private_data=b"hi", now=t)
    sock.sendmsg(conn.data_to_send())              # the MPA Request
    for event in conn.receive_data(sock.recv(65536), t):   # b"" means FIN
        ...                                         # ConnectionEstablished, UlpduReceived...
    conn.send_ulpdu(ddp_segment)
    sock.sendmsg(conn.data_to_send())

It keeps the connection contract of :class:`iwarp.contract.Connection`.

Contract with the layers above (DDP/RDMAP, ``iwarp/ddp``, ``iwarp/rdmap``)
-------------------------------------------------------------------------

* **Events.** ``receive_data``, ``handle_timer`` and ``connection_lost``
  return the events they caused; those of the application's calls
  (``accept``, ``reject``, ``start``...) come from
  :meth:`~MpaConnection.take_events`. :class:`~iwarp.mpa.events.ConnectionEstablished` carries the
  negotiated :class:`~iwarp.mpa.events.MpaParams` (revision, DDP version,
  markers each way, CRC, IRD/ORD, peer-to-peer and the RTR type, MULPDU,
  private data). Each ULPDU arrives as one
  :class:`~iwarp.mpa.events.UlpduReceived`, in order.
* **Fencing (RFC 5044 §7.1.2 rule 4).** A Responder sends no FPDU before it
  has received a valid one. After ``accept()`` the Responder may call
  ``send_ulpdu`` at once: the FPDUs are framed (so markers land right) but
  held back, and released in order, by the same ``receive_data`` call that
  delivers the first valid ULPDU. That first ULPDU is delivered as an
  ordinary ``UlpduReceived``; :attr:`MpaConnection.fenced` says whether
  sends are still held.
* **RFC 6581 RTR.** With ``params.peer_to_peer`` the Initiator's first ULPDU
  must be the zero-length RTR message of type ``params.rtr`` (a Send, RDMA
  Write or RDMA Read). MPA does not build, recognise or swallow it: the
  DDP/RDMAP layer sends it first on the Initiator and, on the Responder,
  recognises it in the first ``UlpduReceived`` and does not pass it to the
  application. Because it is a valid FPDU it also lifts the fence.
* **Negotiation errors 6, 7.** When the Reply is valid but RFC 6581
  negotiation fails (insufficient IRD, no common RTR), the connection is
  in full operation and a :class:`~iwarp.mpa.events.NegotiationFailed`
  follows ``ConnectionEstablished``: the upper layer sends the Terminate
  (layer LLP, type MPA, the error's code) and closes.
* **Errors.** A :class:`~iwarp.mpa.events.ConnectionFailed` carries an
  :class:`~iwarp.errors.MpaError` with the RFC 5044 §8 code; nothing is
  delivered after it. ``close`` says whether MPA requires closing the TCP
  connection now (codes 1, 4); after CRC (2) or marker (3) errors the
  connection can still send (state ``SEND_ONLY``), e.g. a Terminate.
* **Zero copy.** ``send_ulpdu`` keeps references to the caller's buffer
  until it is handed out by ``data_to_send``; don't modify it before.
  ``UlpduReceived.data`` may be a view into the chunk passed to
  ``receive_data``.

Startup variants: immediate (give ``role`` to the constructor), delayed
(``role=None``, exchange streaming data with ``send_stream`` and
``StreamDataReceived``, then :meth:`~MpaConnection.start`, seed 000 §6.1.2,
§6.1.4), and draft-culley-iwarp-mpa-02 (:meth:`~MpaConnection.start_framed`:
no frames, markers and CRC always on, each direction on its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from iwarp._typing import Buffer
from iwarp.contract import Lanes
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
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
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.handshake import (
    MpaInput,
    MpaState,
    RequestVerdict,
    build_reply,
    build_request,
    check_request,
    complete_initiator,
    incompatible_reply,
    parse_frame,
    transition,
    transitions_for,
)
from iwarp.mpa.runs import SegmentRun
from iwarp.mpa.wire import MAX_ULPDU, MpaFrame, mulpdu

__all__ = ["DEFAULT_EMSS", "MpaConnection"]

#: EMSS assumed until the adapter reports the real one (Ethernet, IPv4).
DEFAULT_EMSS = 1460

_STARTUP = (MpaState.AWAIT_REQUEST, MpaState.AWAIT_REPLY)
_FRAMING = (MpaState.AWAIT_FIRST_FPDU, MpaState.FULL_OPERATION)
_STREAMING = (MpaState.IDLE, MpaState.EXITED)
_OVER = (MpaState.CLOSED, MpaState.FAILED)
#: Looked up once: an enum member's attribute lookup costs more than the
#: rest of a per-message check (the small-message lane's).
_FULL_OPERATION: Final = MpaState.FULL_OPERATION
_FAILED: Final = MpaState.FAILED


class MpaConnection:
    """One end of one MPA connection (RFC 5044, RFC 6581, drafts).

    :param role: start at once as Initiator (the Request is queued) or
        Responder; None starts in streaming mode until :meth:`start`.
    :param config: what to offer and accept.
    :param private_data: the Initiator's private data for the Request.
    :param now: the current time, for the startup timeouts.
    :param emss: effective MSS of the TCP connection, for MULPDU.
    :param batch_ulpdus: report the ULPDUs of each ``receive_data`` call as
        one :class:`~iwarp.mpa.events.UlpduBatchReceived` instead of one
        :class:`~iwarp.mpa.events.UlpduReceived` each. The batch may view
        the buffer given to ``receive_data`` (markers cut out in place when
        it is writable): the caller takes the events and consumes the batch
        before it reuses that buffer.
    """

    def __init__(
        self,
        role: Role | None = None,
        config: MpaConfig | None = None,
        *,
        private_data: bytes = b"",
        now: float = 0.0,
        emss: int = DEFAULT_EMSS,
        batch_ulpdus: bool = False,
    ) -> None:
        self.batch_ulpdus = batch_ulpdus
        self.config = config if config is not None else MpaConfig()
        self._role: Role | None = None
        #: Where the connection is in RFC 5044's startup and after (an
        #: attribute, not a property: read per message; read-only).
        self.state: MpaState = MpaState.IDLE
        self._events: list[Event] = []
        self._out: list[Buffer] = []
        self._held: list[Buffer] = []
        self._rx = bytearray()
        self._encoder: FpduEncoder | None = None
        self._decoder: FpduDecoder | None = None
        self._params: MpaParams | None = None
        self._request: MpaFrame | None = None
        self._now = now
        self._deadline: float | None = None
        self._frame_deadline: float | None = None
        self._emss = emss
        self._peer_closed = False
        self._framed = False  # draft-culley-iwarp-mpa-02 mode
        self.error: MpaError | None = None
        if role is not None:
            self.start(role, now=now, private_data=private_data)

    # -- properties -----------------------------------------------------------

    @property
    def role(self) -> Role | None:
        return self._role

    @property
    def params(self) -> MpaParams | None:
        """Negotiated parameters once MPA is in full operation, else None."""
        return self._params

    @property
    def fenced(self) -> bool:
        """True while a Responder holds its FPDUs back (rule 4)."""
        return self.state is MpaState.AWAIT_FIRST_FPDU

    @property
    def request(self) -> MpaFrame | None:
        """The Request: sent (Initiator) or received (Responder)."""
        return self._request

    @property
    def must_close(self) -> bool:
        """MPA requires the TCP connection to be closed (after error 1, 4 or
        a startup timeout); flush :meth:`data_to_send` first."""
        return (
            self.state is MpaState.FAILED
            and self.error is not None
            and (self.error.mpa_code in (MpaErrorCode.TCP_CLOSED, MpaErrorCode.INVALID_FRAME))
        )

    # -- starting ---------------------------------------------------------------

    def start(
        self,
        role: Role,
        *,
        now: float | None = None,
        private_data: bytes = b"",
        last_streaming: bytes = b"",
        read_ahead: bytes = b"",
    ) -> None:
        """Switch into MPA startup as ``role`` (RFC 5044 §7.1.2).

        :param private_data: Initiator only: the Request's private data.
        :param last_streaming: octets sent as streaming data right before
            MPA starts: the Responder's "last streaming message" (seed 000
            §6.1.4 rule 2), so that nothing can slip between them.
        :param read_ahead: octets the application received as streaming data
            that belong after the switch point (e.g. a fast Request that came
            in the same read as the last streaming message); they are
            processed as MPA input, so nothing read ahead is lost.
        :raises LocalProtocolError: MPA was already started, or the private
            data is too long.
        """
        if now is not None:
            self._now = now
        event = MpaInput.START_INITIATOR if role is Role.INITIATOR else MpaInput.START_RESPONDER
        if self.state is not MpaState.IDLE:
            raise transitions_for(role).error(self.state, event)
        frame = build_request(self.config, private_data) if role is Role.INITIATOR else None
        self._role = role
        self.state = transition(role, self.state, event)
        if last_streaming:
            self._out.append(bytes(last_streaming))
        if frame is not None:
            self._request = frame
            self._out.append(frame.pack())
            self._deadline = self._now + self.config.reply_timeout
        else:
            self._deadline = self._now + self.config.request_timeout
        if read_ahead:
            self._receive(read_ahead)

    def start_framed(
        self,
        *,
        send: bool = True,
        receive: bool = True,
        now: float | None = None,
        read_ahead: bytes = b"",
    ) -> None:
        """draft-culley-iwarp-mpa-02 §8.1: start framing with no Request/Reply.

        Markers and CRC are always on; the first four octets of a direction
        are a zero marker. Each direction may start on its own (call again
        for the other) at the point both ends agreed on. Which directions
        frame is a sub-state of ``FULL_OPERATION`` kept outside the
        transition table: a direction not started yet carries streaming
        data (``send_stream``, :class:`StreamDataReceived`).
        """
        if now is not None:
            self._now = now
        if not self._framed:
            self.state = transition(self._role, self.state, MpaInput.START_FRAMED)
            self._framed = True
        elif self.state is not MpaState.FULL_OPERATION:
            raise LocalProtocolError(f"cannot start framing in state {self.state.value}")
        if send and self._encoder is None:
            self._encoder = FpduEncoder(markers=True, crc=True, max_ulpdu=MAX_ULPDU)
        if receive and self._decoder is None:
            # culley-02 is seed 002: either FPDUPTR reading is accepted.
            self._decoder = FpduDecoder(
                markers=True, crc=True, max_ulpdu=0xFFFF, either_fpduptr=True
            )
        if self._params is None:
            self._params = MpaParams(
                revision=0,
                ddp_version=0,
                markers_send=True,
                markers_receive=True,
                crc=True,
                enhanced=False,
                ird=self.config.ird,
                ord=self.config.ord,
                peer_ird=None,
                peer_ord=None,
                peer_to_peer=False,
                rtr=None,
                mulpdu=mulpdu(self._emss, markers=True),
                peer_private_data=b"",
                local_private_data=b"",
            )
            self._events.append(ConnectionEstablished(params=self._params))
        if read_ahead:
            self._receive(read_ahead)

    # -- the Responder's decision ---------------------------------------------

    def accept(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> MpaParams:
        """Responder: accept the Request; queue the Reply (R=0).

        ``ird``/``ord`` override the configured RFC 6581 values for this
        connection. Returns the parameters also reported by the
        :class:`ConnectionEstablished` event queued now.

        :raises LocalProtocolError: no Request is waiting for a decision, or
            the private data is too long.
        """
        request = self._awaiting_decision(MpaInput.ACCEPT)
        params = self._send_reply(request, MpaInput.ACCEPT, private_data, ird=ird, ord=ord)
        self._enter_full_operation(params)
        if self._rx:
            rest = bytes(self._rx)
            self._rx.clear()
            self._feed(rest)
        return params

    def reject(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> None:
        """Responder: reject the Request; queue a Reply with R=1 and exit MPA.

        The TCP connection stays open (RFC 5044 §7.1.2 rule 2): later octets
        arrive as :class:`StreamDataReceived`; close it with :meth:`close`.
        For an enhanced Request, ``ird``/``ord`` (default: the configured
        values) go into the Reject unchanged, e.g. the ORD the application
        requires when the Initiator's IRD was too small (RFC 6581 §9.1).
        """
        request = self._awaiting_decision(MpaInput.REJECT)
        self._send_reply(request, MpaInput.REJECT, private_data, ird=ird, ord=ord)
        self._events.append(
            ConnectionRejected(
                by_peer=False,
                private_data=bytes(private_data),
                reason="rejected by the application",
                frame=request,
            )
        )
        self._release_as_stream()

    def _awaiting_decision(self, event: MpaInput) -> MpaFrame:
        if self.state is not MpaState.AWAIT_DECISION or self._request is None:
            raise transitions_for(self._role).error(self.state, event)
        return self._request

    def _send_reply(
        self,
        request: MpaFrame,
        decision: MpaInput,
        private_data: bytes,
        *,
        ird: int | None = None,
        ord: int | None = None,
    ) -> MpaParams:
        """Queue the Reply for ``decision`` (ACCEPT or REJECT) and move on."""
        reply, params = build_reply(
            self.config,
            request,
            accept=decision is MpaInput.ACCEPT,
            private_data=private_data,
            ird=ird,
            ord=ord,
            emss=self._emss,
        )
        self.state = transition(self._role, self.state, decision)
        self._out.append(reply.pack())
        return params

    # -- sending ------------------------------------------------------------------

    def send_ulpdu(self, ulpdu: Buffer) -> None:
        """Frame one ULPDU as an FPDU (RFC 5044 §4) and queue it.

        :raises LocalProtocolError: not in full operation, or the ULPDU is
            larger than 64768 octets (DDP should keep to ``params.mulpdu``).
        """
        encoder = self._encoder
        if self.state is MpaState.FULL_OPERATION and encoder is not None:
            self._out.extend(encoder.encode(ulpdu))
            return
        self._send_framed(lambda framer: framer.encode(ulpdu))

    def send_run(self, run: SegmentRun) -> None:
        """Frame a run of ULPDUs (the segments of one DDP message) and queue
        them: :meth:`send_ulpdu` for each, in one call (see
        :meth:`FpduEncoder.encode_run <iwarp.mpa.framing.FpduEncoder.encode_run>`).
        """
        encoder = self._encoder
        if self.state is MpaState.FULL_OPERATION and encoder is not None:
            self._out.extend(encoder.encode_run(run))
            return
        self._send_framed(lambda framer: framer.encode_run(run))

    def lane_encoder(self) -> FpduEncoder | None:
        """The encoder, when FPDUs may be written outside the queue now (a
        send lane, :mod:`iwarp.rdma.lanes`): full operation, nothing queued.
        Whoever writes them tells it (:meth:`FpduEncoder.advance
        <iwarp.mpa.framing.FpduEncoder.advance>`) before anything else is
        framed."""
        if self.state is not _FULL_OPERATION or self._out:
            return None
        return self._encoder

    def send_lane_fpdus(self, fpdus: Buffer) -> None:
        """Queue FPDUs framed outside the queue with the encoder
        :meth:`lane_encoder` gave (already advanced past them), for
        :meth:`data_to_send`: a posted small Send framed by the
        small-message lane (:mod:`iwarp.rdma.small`)."""
        self._out.append(fpdus)

    def _send_framed(self, encode: Callable[[FpduEncoder], list[Buffer]]) -> None:
        """Outside plain full operation: check the table, then queue the
        pieces, held back while rule 4 forbids sending (a Responder before
        the first FPDU arrived)."""
        nxt = transition(self._role, self.state, MpaInput.SEND_ULPDU)
        if self._encoder is None:
            raise LocalProtocolError("the send direction has not started framing")
        pieces = encode(self._encoder)
        if nxt is MpaState.AWAIT_FIRST_FPDU:
            self._held.extend(pieces)
        else:
            self._out.extend(pieces)

    def send_stream(self, data: Buffer) -> None:
        """Queue streaming (non-MPA) octets: before startup or after MPA exited.

        :raises LocalProtocolError: MPA owns the send direction now.
        """
        half = self._framed and self._encoder is None and self.state is MpaState.FULL_OPERATION
        if not half:  # culley-02: the send direction has not started framing yet
            transition(self._role, self.state, MpaInput.SEND_STREAM)
        self._out.append(bytes(data))

    def close(self) -> None:
        """The application closes; held FPDUs are dropped. The adapter then
        closes the TCP connection after flushing :meth:`data_to_send`."""
        self.state = transition(self._role, self.state, MpaInput.CLOSE)
        self._held.clear()
        self._deadline = self._frame_deadline = None

    def data_to_send(self) -> list[Buffer]:
        """All queued octets as a list of buffers for ``writelines``/
        ``sendmsg`` (no joining copies); the queue is emptied."""
        out = self._out
        self._out = []
        return out

    @property
    def has_data_to_send(self) -> bool:
        """Octets are queued for :meth:`data_to_send`."""
        return bool(self._out)

    def settled(self) -> bool:
        """Nothing queued, no timer and no close required
        (:meth:`iwarp.contract.Connection.settled`)."""
        if self._out or self._deadline is not None or self._frame_deadline is not None:
            return False
        # must_close is only ever True in FAILED
        return self.state is not _FAILED or not self.must_close

    # -- receiving ----------------------------------------------------------------

    #: ``receive_data`` may keep views of its input (ULPDUs are handed out
    #: as views of a copy; startup frames wait in a buffer): not borrowed.
    borrows_input = False
    #: No lanes: everything goes through receive_data and data_to_send.
    lanes: Lanes | None = None

    def receive_data(self, data: Buffer, now: float) -> list[Event]:
        """Process received octets (``b""`` means the peer sent FIN); return
        the events, oldest first (with any not taken before)."""
        self._now = now
        self._receive(data)
        return self.take_events()

    def lane_decoder(self) -> FpduDecoder | None:
        """The decoder, when received FPDUs may be decoded outside it now
        (the small-message lane, :mod:`iwarp.rdma.small`): full operation,
        no event waiting (they come first), nothing held back and no error.
        Whoever decodes them tells it (:meth:`FpduDecoder.advance
        <iwarp.mpa.framing.FpduDecoder.advance>`) before anything else is
        received."""
        decoder = self._decoder
        if (
            self.state is not _FULL_OPERATION
            or decoder is None
            or self._events
            or decoder.buffered
            or decoder.error is not None
        ):
            return None
        return decoder

    def lane_resync(self) -> int:
        """Octets that would complete the FPDU the decoder holds back, in
        full operation without an error (0: none held, or not framing): a
        receive lane hands exactly these to :meth:`receive_data`, after
        which the decoder holds nothing and the lane can take the next
        FPDU (:meth:`lane_decoder`)."""
        decoder = self._decoder
        if self.state is not MpaState.FULL_OPERATION or decoder is None or decoder.error:
            return 0
        return decoder.to_complete()

    def _receive(self, data: Buffer) -> None:
        if not data:
            self._end_of_stream()
            return
        state = self.state
        if state is MpaState.FULL_OPERATION and self._decoder is not None:
            self._feed(data)
        elif state in _STARTUP:
            if not self._rx:
                self._frame_deadline = self._now + self.config.frame_timeout
            self._rx += data
            self._startup()
        elif state is MpaState.AWAIT_DECISION:
            self._rx += data
            if len(self._rx) > self.config.receive_buffer_limit:
                self._fail(
                    MpaInput.BAD_FRAME,
                    MpaError(
                        MpaErrorCode.INVALID_FRAME,
                        f"more than {self.config.receive_buffer_limit} octets arrived "
                        "before the Request was answered",
                    ),
                )
        elif state is MpaState.AWAIT_FIRST_FPDU:
            self._feed(data)
        elif state in _STREAMING:
            self.state = transition(self._role, state, MpaInput.STREAM_DATA)
            self._events.append(StreamDataReceived(data=bytes(data)))
        elif state is MpaState.FULL_OPERATION and self._framed:
            # culley-02: this direction has not started framing yet.
            self._events.append(StreamDataReceived(data=bytes(data)))
        # SEND_ONLY, CLOSED, FAILED: RFC 5044 §8, nothing more is delivered.

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[Event]:
        """The TCP connection was reset or lost (error 1); return the events."""
        self._now = now
        if self.state not in _OVER:
            self._fail(MpaInput.CONNECTION_LOST, MpaError(MpaErrorCode.TCP_CLOSED, reason))
        return self.take_events()

    def take_events(self) -> list[Event]:
        """All queued events, oldest first; the queue is emptied."""
        out, self._events = self._events, []
        return out

    # -- time ---------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` must be called next, or None."""
        if self._deadline is None:
            return self._frame_deadline
        if self._frame_deadline is None:
            return self._deadline
        return min(self._deadline, self._frame_deadline)

    def handle_timer(self, now: float) -> list[Event]:
        """Fail the startup if a timeout (rules 8, 10) has expired at ``now``;
        return the events."""
        self._now = now
        self._expire(now)
        return self.take_events()

    def _expire(self, now: float) -> None:
        deadline = self.get_timer()
        if deadline is None or now < deadline or self.state not in _STARTUP:
            return
        name = "Request" if self._role is Role.RESPONDER else "Reply"
        if self._rx:
            error = MpaError(
                MpaErrorCode.INVALID_FRAME,
                f"incomplete MPA {name}: {len(self._rx)} octets, then nothing for too long "
                f"(frame timeout {self.config.frame_timeout:g} s)",
            )
        else:
            limit = (
                self.config.request_timeout
                if self._role is Role.RESPONDER
                else self.config.reply_timeout
            )
            hint = " (is the peer a Responder too?)" if self._role is Role.RESPONDER else ""
            error = MpaError(MpaErrorCode.TCP_CLOSED, f"no MPA {name} within {limit:g} s{hint}")
        self._fail(MpaInput.TIMEOUT, error)

    def refuse_reply(self) -> None:
        """Initiator: refuse the Reply (its private data) after reading it in
        :class:`ConnectionEstablished`: MPA exits, leaving the TCP connection
        open (RFC 5044 §7.1.2 rule 3). The connection carries streaming data
        from here (``send_stream``, :class:`StreamDataReceived`); octets
        that arrived after the Reply come back as streaming data.

        :raises LocalProtocolError: not an Initiator right after a valid
            Reply: a ULPDU was sent or received already, or it failed.
        """
        encoder, decoder = self._encoder, self._decoder
        if (
            self._role is not Role.INITIATOR
            or self._framed
            or encoder is None
            or decoder is None
            or encoder.position != 0
            or decoder.position != decoder.buffered
            or decoder.error is not None
        ):
            raise LocalProtocolError(
                "refuse_reply() is for an Initiator that has just received a valid Reply "
                "and has exchanged no ULPDU yet"
            )
        self.state = transition(self._role, self.state, MpaInput.REFUSE_REPLY)
        rest = decoder.release()
        self._encoder = self._decoder = None
        self._params = None
        if rest:
            self._events.append(StreamDataReceived(data=rest))

    def set_emss(self, emss: int) -> None:
        """Report the current EMSS (e.g. from TCP_MAXSEG); updates MULPDU."""
        self._emss = emss
        if self._params is not None:
            self._params = replace(
                self._params, mulpdu=mulpdu(emss, markers=self._params.markers_send)
            )

    # -- internals ----------------------------------------------------------------

    def _startup(self) -> None:
        responder = self._role is Role.RESPONDER
        try:
            parsed = parse_frame(self._rx, self.config, expect_request=responder)
        except MpaError as exc:
            self._fail(MpaInput.BAD_FRAME, exc)
            return
        if parsed is None:
            return
        frame, used = parsed
        rest = bytes(self._rx[used:])
        self._rx.clear()
        self._deadline = self._frame_deadline = None
        if responder:
            self._on_request(frame, rest)
        else:
            self._on_reply(frame, rest)

    def _on_request(self, frame: MpaFrame, rest: bytes) -> None:
        try:
            verdict, why = check_request(self.config, frame)
        except MpaError as exc:
            self._fail(MpaInput.BAD_FRAME, exc)
            return
        self._request = frame
        if verdict is RequestVerdict.INCOMPATIBLE:
            self._out.append(incompatible_reply(self.config).pack())
            self._fail(MpaInput.BAD_FRAME, MpaError(MpaErrorCode.INVALID_FRAME, why))
            return
        self.state = transition(self._role, self.state, MpaInput.REQUEST)
        self._rx += rest
        if len(self._rx) > self.config.receive_buffer_limit:
            self._fail(
                MpaInput.BAD_FRAME,
                MpaError(
                    MpaErrorCode.INVALID_FRAME,
                    f"more than {self.config.receive_buffer_limit} octets followed the Request",
                ),
            )
            return
        if verdict is RequestVerdict.REFUSE:
            self._send_reply(frame, MpaInput.REJECT, b"")
            self._events.append(
                ConnectionRejected(by_peer=False, private_data=b"", reason=why, frame=frame)
            )
            self._release_as_stream()
            return
        self._events.append(
            RequestReceived(
                frame=frame, private_data=frame.ulp_private_data, enhanced=frame.enhanced
            )
        )

    def _on_reply(self, frame: MpaFrame, rest: bytes) -> None:
        assert self._request is not None
        try:
            outcome = complete_initiator(self.config, self._request, frame, emss=self._emss)
        except MpaError as exc:
            self._fail(MpaInput.BAD_FRAME, exc)
            return
        self.state = transition(self._role, self.state, outcome.input)
        if outcome.params is None:
            self._events.append(
                ConnectionRejected(
                    by_peer=outcome.input is MpaInput.REPLY_REJECT,
                    private_data=frame.ulp_private_data,
                    reason=outcome.reason,
                    frame=frame,
                )
            )
            self._rx += rest
            self._release_as_stream()
            return
        self._enter_full_operation(outcome.params)
        if outcome.negotiation_error is not None:
            self._events.append(NegotiationFailed(error=outcome.negotiation_error))
        if rest:
            self._feed(rest)

    def _enter_full_operation(self, params: MpaParams) -> None:
        self._params = params
        # RFC 5044 §4.3: markers count from the first octet of full operation
        # in each direction, which is where both coders start (origin 0).
        self._encoder = FpduEncoder(
            markers=params.markers_send, crc=params.crc, max_ulpdu=MAX_ULPDU
        )
        self._decoder = FpduDecoder(
            markers=params.markers_receive,
            crc=params.crc,
            max_ulpdu=0xFFFF,
            # Rev 0 is seed 000: either FPDUPTR reading is accepted.
            either_fpduptr=params.revision == 0,
        )
        self._events.append(ConnectionEstablished(params=params))

    def _release_as_stream(self) -> None:
        if self._rx:
            data = bytes(self._rx)
            self._rx.clear()
            self._events.append(StreamDataReceived(data=data))

    def _feed(self, data: Buffer) -> None:
        decoder = self._decoder
        assert decoder is not None
        # A batch is consumed before receive_data returns (see batch_ulpdus):
        # the caller's buffer is decoded where it lies.
        ulpdus = decoder.feed_batch(data, borrow=self.batch_ulpdus)
        if len(ulpdus):
            if self.state is MpaState.AWAIT_FIRST_FPDU:
                # Rule 4 satisfied: release what the Responder framed so far.
                self.state = transition(self._role, self.state, MpaInput.FPDU)
                self._out.extend(self._held)
                self._held.clear()
            events = self._events
            if self.batch_ulpdus:
                events.append(UlpduBatchReceived(batch=ulpdus))
            else:
                for ulpdu in ulpdus:
                    events.append(UlpduReceived(data=ulpdu))
        error = decoder.error
        if error is not None and self.error is None:
            self.state = transition(self._role, self.state, MpaInput.BAD_FPDU)
            self.error = error
            self._held.clear()
            self._events.append(ConnectionFailed(error=error, close=False))

    def _end_of_stream(self) -> None:
        state = self.state
        if state in _OVER or self._peer_closed:
            return
        self._peer_closed = True
        if state in _STARTUP or state is MpaState.AWAIT_DECISION:
            where = " in the middle of a startup frame" if self._rx else ""
            self._fail(
                MpaInput.PEER_CLOSED,
                MpaError(
                    MpaErrorCode.TCP_CLOSED,
                    f"peer closed the connection (FIN) during MPA startup{where}",
                ),
            )
            return
        decoder = self._decoder
        if state in _FRAMING and decoder is not None and decoder.buffered:
            self._fail(
                MpaInput.CONNECTION_LOST,
                MpaError(
                    MpaErrorCode.TCP_CLOSED,
                    f"peer closed the connection (FIN) in the middle of an FPDU "
                    f"({decoder.buffered} octets pending)",
                ),
            )
            return
        self.state = transition(self._role, state, MpaInput.PEER_CLOSED)
        self._events.append(ConnectionClosed())

    def _fail(self, event: MpaInput, error: MpaError) -> None:
        self.state = transition(self._role, self.state, event)
        self.error = error
        self._rx.clear()
        self._held.clear()
        self._deadline = self._frame_deadline = None
        code = error.mpa_code
        close = code in (MpaErrorCode.TCP_CLOSED, MpaErrorCode.INVALID_FRAME)
        self._events.append(ConnectionFailed(error=error, close=close))
