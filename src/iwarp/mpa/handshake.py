"""MPA startup: the state machines and the Request/Reply rules, sans-IO.

Sources: RFC 5044 §7.1 (frame format, startup rules 1-10), §7.2, §8 and
Appendix C (Rev 0 peers); RFC 6581 §5-§10 (Rev 2 enhanced data, IRD/ORD and
RTR negotiation, interoperability); draft-ietf-rddp-mpa-01/02 §6 (seed 000:
Rev 0, delayed startup, "dual stack"); draft-culley-iwarp-mpa-02 §8 (seed
002: no frames at all).

This module holds *data and pure functions*:

* :data:`INITIATOR_TRANSITIONS` and :data:`RESPONDER_TRANSITIONS`: the two
  startup state machines, ``(state, input) -> state``
  (:class:`~iwarp.statemachine.TransitionTable`). A pair that is not in
  its table is a protocol error: :class:`~iwarp.errors.LocalProtocolError`
  for a local input (an API call), an :class:`~iwarp.errors.MpaError` (code
  4) for a remote one. ``docs/mpa-connection.md`` draws them; a test checks
  the drawing against the tables.
* :func:`parse_frame`: incremental validation of a received Request/Reply.
* :func:`check_request`, :func:`build_reply`, :func:`complete_initiator`:
  the negotiation of revision, markers, CRC, private data and RFC 6581
  IRD/ORD/RTR for each role.

:class:`~iwarp.mpa.connection.MpaConnection` drives them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from iwarp._typing import Buffer
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Rev0Profile, Role
from iwarp.mpa.events import MpaParams
from iwarp.mpa.wire import (
    ENHANCED_SIZE,
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    IRD_ORD_NONE,
    KEY_SIZE,
    MAX_PRIVATE_DATA,
    REPLY_KEY,
    REQUEST_KEY,
    RESERVED_FLAGS,
    RTR_TYPES,
    EnhancedData,
    FrameFlags,
    MpaFrame,
    Revision,
    RtrFlags,
    mulpdu,
)
from iwarp.statemachine import TransitionTable

__all__ = [
    "INITIATOR_TRANSITIONS",
    "LOCAL_INPUTS",
    "RESPONDER_TRANSITIONS",
    "MpaInput",
    "MpaState",
    "RequestVerdict",
    "build_reply",
    "build_request",
    "check_peer_to_peer",
    "check_request",
    "complete_initiator",
    "incompatible_reply",
    "parse_frame",
    "private_data_limit",
    "retry_as_rev1",
    "transition",
    "transitions_for",
]


class MpaState(Enum):
    """States of one MPA endpoint, both roles."""

    #: Not started: the socket carries streaming data (seed 000 §6.1.2).
    IDLE = "idle"
    #: Initiator: Request sent, waiting for the Reply (rule 3).
    AWAIT_REPLY = "await-reply"
    #: Responder: waiting for the Request (rule 2).
    AWAIT_REQUEST = "await-request"
    #: Responder: Request delivered, waiting for the application's decision.
    AWAIT_DECISION = "await-decision"
    #: Responder: Reply sent; no FPDU may be sent before one is received (rule 4).
    AWAIT_FIRST_FPDU = "await-first-fpdu"
    #: Full operation: FPDUs both ways.
    FULL_OPERATION = "full-operation"
    #: The receive half is over (peer FIN, or MPA error 2/3 after which
    #: nothing more is delivered, RFC 5044 §8); sending still works, e.g.
    #: for a Terminate message.
    SEND_ONLY = "send-only"
    #: MPA exited on a reject; the TCP connection carries streaming data.
    EXITED = "exited"
    #: Closed by the application or, outside full operation, by the peer.
    CLOSED = "closed"
    #: An MPA error ended the connection (RFC 5044 §8).
    FAILED = "failed"


class MpaInput(Enum):
    """Everything that can happen to an endpoint."""

    # -- local: API calls ----------------------------------------------------
    START_INITIATOR = "start-initiator"
    START_RESPONDER = "start-responder"
    #: draft-culley-iwarp-mpa-02 §8.1: framing starts with no frames.
    START_FRAMED = "start-framed"
    ACCEPT = "accept"
    REJECT = "reject"
    SEND_ULPDU = "send-ulpdu"
    SEND_STREAM = "send-stream"
    CLOSE = "close"
    #: Initiator: the ULP refuses the Reply's private data (rule 3).
    REFUSE_REPLY = "refuse-reply"
    # -- remote: what arrived ------------------------------------------------
    STREAM_DATA = "stream-data"
    REQUEST = "request"
    REPLY_ACCEPT = "reply-accept"
    REPLY_REJECT = "reply-reject"
    #: A valid Reply that a local policy refuses (crc_required/crc_strict,
    #: refuse_markers).
    REPLY_REFUSED = "reply-refused"
    #: An improperly formatted or incompatible Request/Reply (error 4).
    BAD_FRAME = "bad-frame"
    FPDU = "fpdu"
    #: CRC or marker error (2, 3) in full operation.
    BAD_FPDU = "bad-fpdu"
    #: FIN at a clean point.
    PEER_CLOSED = "peer-closed"
    #: RST, or FIN in the middle of a frame/FPDU or during startup (error 1).
    CONNECTION_LOST = "connection-lost"
    #: A startup timer expired (rules 8, 10).
    TIMEOUT = "timeout"


#: Inputs that come from the local application (a missing transition for
#: these raises LocalProtocolError).
LOCAL_INPUTS: Final[frozenset[MpaInput]] = frozenset(
    {
        MpaInput.START_INITIATOR,
        MpaInput.START_RESPONDER,
        MpaInput.START_FRAMED,
        MpaInput.ACCEPT,
        MpaInput.REJECT,
        MpaInput.SEND_ULPDU,
        MpaInput.SEND_STREAM,
        MpaInput.CLOSE,
        MpaInput.REFUSE_REPLY,
    }
)

_S, _I = MpaState, MpaInput

#: Transitions shared by both roles: before startup, full operation, exit.
_COMMON: Final[dict[tuple[MpaState, MpaInput], MpaState]] = {
    (_S.IDLE, _I.STREAM_DATA): _S.IDLE,
    (_S.IDLE, _I.SEND_STREAM): _S.IDLE,
    (_S.IDLE, _I.START_FRAMED): _S.FULL_OPERATION,
    (_S.IDLE, _I.PEER_CLOSED): _S.CLOSED,
    (_S.IDLE, _I.CONNECTION_LOST): _S.FAILED,
    (_S.IDLE, _I.CLOSE): _S.CLOSED,
    (_S.FULL_OPERATION, _I.FPDU): _S.FULL_OPERATION,
    (_S.FULL_OPERATION, _I.SEND_ULPDU): _S.FULL_OPERATION,
    (_S.FULL_OPERATION, _I.BAD_FPDU): _S.SEND_ONLY,
    (_S.FULL_OPERATION, _I.PEER_CLOSED): _S.SEND_ONLY,
    (_S.FULL_OPERATION, _I.CONNECTION_LOST): _S.FAILED,
    (_S.FULL_OPERATION, _I.CLOSE): _S.CLOSED,
    (_S.SEND_ONLY, _I.SEND_ULPDU): _S.SEND_ONLY,
    (_S.SEND_ONLY, _I.PEER_CLOSED): _S.SEND_ONLY,
    (_S.SEND_ONLY, _I.CONNECTION_LOST): _S.FAILED,
    (_S.SEND_ONLY, _I.CLOSE): _S.CLOSED,
    (_S.EXITED, _I.STREAM_DATA): _S.EXITED,
    (_S.EXITED, _I.SEND_STREAM): _S.EXITED,
    (_S.EXITED, _I.PEER_CLOSED): _S.CLOSED,
    (_S.EXITED, _I.CONNECTION_LOST): _S.FAILED,
    (_S.EXITED, _I.CLOSE): _S.CLOSED,
    (_S.CLOSED, _I.CLOSE): _S.CLOSED,
    (_S.FAILED, _I.CLOSE): _S.FAILED,
}


def _invalid_frame(message: str) -> MpaError:
    return MpaError(MpaErrorCode.INVALID_FRAME, message)


def _table(
    transitions: dict[tuple[MpaState, MpaInput], MpaState],
) -> TransitionTable[MpaState, MpaInput]:
    """Both roles: a remote input out of place is error 4 (RFC 5044 §7.1.2
    rules 5, 8); both start idle."""
    return TransitionTable(
        transitions,
        local_inputs=LOCAL_INPUTS,
        remote_error=_invalid_frame,
        starts=((MpaState.IDLE, ""),),
    )


#: RFC 5044 §7.1.2 rules 1, 3, 5, 8, 10 for the Initiator.
INITIATOR_TRANSITIONS: Final = _table(
    {
        **_COMMON,
        (_S.IDLE, _I.START_INITIATOR): _S.AWAIT_REPLY,
        (_S.AWAIT_REPLY, _I.REPLY_ACCEPT): _S.FULL_OPERATION,
        (_S.AWAIT_REPLY, _I.REPLY_REJECT): _S.EXITED,
        (_S.AWAIT_REPLY, _I.REPLY_REFUSED): _S.EXITED,
        (_S.AWAIT_REPLY, _I.BAD_FRAME): _S.FAILED,
        (_S.AWAIT_REPLY, _I.PEER_CLOSED): _S.FAILED,
        (_S.AWAIT_REPLY, _I.CONNECTION_LOST): _S.FAILED,
        (_S.AWAIT_REPLY, _I.TIMEOUT): _S.FAILED,
        (_S.AWAIT_REPLY, _I.CLOSE): _S.CLOSED,
        # Rule 3: the Reply was valid but its private data is not acceptable.
        (_S.FULL_OPERATION, _I.REFUSE_REPLY): _S.EXITED,
    }
)

#: RFC 5044 §7.1.2 rules 2, 4, 5, 8, 9, 10 for the Responder.
RESPONDER_TRANSITIONS: Final = _table(
    {
        **_COMMON,
        (_S.IDLE, _I.START_RESPONDER): _S.AWAIT_REQUEST,
        (_S.AWAIT_REQUEST, _I.REQUEST): _S.AWAIT_DECISION,
        (_S.AWAIT_REQUEST, _I.BAD_FRAME): _S.FAILED,
        (_S.AWAIT_REQUEST, _I.PEER_CLOSED): _S.FAILED,
        (_S.AWAIT_REQUEST, _I.CONNECTION_LOST): _S.FAILED,
        (_S.AWAIT_REQUEST, _I.TIMEOUT): _S.FAILED,
        (_S.AWAIT_REQUEST, _I.CLOSE): _S.CLOSED,
        (_S.AWAIT_DECISION, _I.ACCEPT): _S.AWAIT_FIRST_FPDU,
        (_S.AWAIT_DECISION, _I.REJECT): _S.EXITED,
        # Octets beyond the receive buffer limit while the application decides.
        (_S.AWAIT_DECISION, _I.BAD_FRAME): _S.FAILED,
        (_S.AWAIT_DECISION, _I.PEER_CLOSED): _S.FAILED,
        (_S.AWAIT_DECISION, _I.CONNECTION_LOST): _S.FAILED,
        (_S.AWAIT_DECISION, _I.CLOSE): _S.CLOSED,
        (_S.AWAIT_FIRST_FPDU, _I.FPDU): _S.FULL_OPERATION,
        # Rule 4: FPDUs sent now are held back until an FPDU has arrived.
        (_S.AWAIT_FIRST_FPDU, _I.SEND_ULPDU): _S.AWAIT_FIRST_FPDU,
        # An invalid first FPDU: rule 4 forbids sending, even a Terminate.
        (_S.AWAIT_FIRST_FPDU, _I.BAD_FPDU): _S.FAILED,
        (_S.AWAIT_FIRST_FPDU, _I.PEER_CLOSED): _S.CLOSED,
        (_S.AWAIT_FIRST_FPDU, _I.CONNECTION_LOST): _S.FAILED,
        (_S.AWAIT_FIRST_FPDU, _I.CLOSE): _S.CLOSED,
    }
)


def transitions_for(role: Role | None) -> TransitionTable[MpaState, MpaInput]:
    """The table of ``role`` (before a role is chosen both tables agree on
    everything but the start of the other role)."""
    return RESPONDER_TRANSITIONS if role is Role.RESPONDER else INITIATOR_TRANSITIONS


def transition(role: Role | None, state: MpaState, event: MpaInput) -> MpaState:
    """The next state, or the error a missing table entry stands for.

    :raises LocalProtocolError: ``event`` is a local input not allowed now.
    :raises MpaError: ``event`` is a remote input not allowed now (error 4).
    """
    return transitions_for(role).next(state, event)


# --- Request / Reply frames (RFC 5044 §7.1.1, RFC 6581 §6) -------------------


def private_data_limit(config: MpaConfig, revision: int) -> int:
    """Largest private data field accepted in a frame of ``revision``.

    RFC 5044 §7.1.1: 512 for Rev >= 1 (configurable lower); Rev 0 allowed
    65535 (seed 000 §6.1.1). Rule 9: never more than the receive buffer.
    """
    limit = config.rev0_private_data_limit if revision == 0 else config.private_data_limit
    return min(limit, config.receive_buffer_limit - FRAME_HEADER_SIZE)


def parse_frame(
    data: Buffer, config: MpaConfig, *, expect_request: bool
) -> tuple[MpaFrame, int] | None:
    """Validate the startup frame at the start of ``data``.

    Returns ``(frame, octets used)``, or None while the frame is incomplete.
    Every check that the octets at hand allow is made at once, so garbage,
    a wrong key or a PD_Length over the limit fail without waiting for
    more data.

    :raises MpaError: error 4, the frame is improperly formatted.
    """
    expected, other = (REQUEST_KEY, REPLY_KEY) if expect_request else (REPLY_KEY, REQUEST_KEY)
    have = min(len(data), KEY_SIZE)
    head = bytes(data[:have])
    if head != expected[:have]:
        # RFC 5044 §7.1.2 rules 5 and 8: the key tells the two roles apart.
        if head == other[:have]:
            if expect_request:
                why = "received an MPA Reply while waiting for a Request: both ends are Responders"
            else:
                why = "received an MPA Request while waiting for a Reply: both ends are Initiators"
        else:
            name = "Request" if expect_request else "Reply"
            why = f"octets {head.hex(' ')} are not the MPA {name} key {expected.decode()!r}"
        raise MpaError(MpaErrorCode.INVALID_FRAME, why)
    if len(data) < FRAME_HEADER_SIZE:
        return None
    _, flags, revision, pd_length = FRAME_HEADER.unpack_from(data, 0)
    if revision > Revision.REV2:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"MPA revision {revision} is unknown (this endpoint speaks 0, 1 and 2)",
        )
    limit = private_data_limit(config, revision)
    if pd_length > limit:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"PD_Length {pd_length} exceeds the limit of {limit} octets for Rev {revision}",
        )
    enhanced = revision >= Revision.REV2 and flags & FrameFlags.ENHANCED
    if enhanced and pd_length < ENHANCED_SIZE:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"S bit set but PD_Length {pd_length} cannot hold the RFC 6581 enhanced data",
        )
    end = FRAME_HEADER_SIZE + pd_length
    if len(data) < end:
        return None
    # Reserved bits are ignored on receipt (RFC 5044 §7.1.1); the S bit is
    # reserved below Rev 2 (RFC 6581 §6). R is not checked in a Request.
    known = FrameFlags.MARKERS | FrameFlags.CRC
    if not expect_request:
        known |= FrameFlags.REJECT
    if enhanced:
        known |= FrameFlags.ENHANCED
    frame = MpaFrame(
        is_request=expect_request,
        flags=FrameFlags(flags & known),
        revision=revision,
        private_data=bytes(data[FRAME_HEADER_SIZE:end]),
        reserved=flags & (RESERVED_FLAGS | (0 if enhanced else FrameFlags.ENHANCED)),
    )
    return frame, end


def _enhanced_prefix(enhanced: EnhancedData | None) -> bytes:
    return b"" if enhanced is None else enhanced.pack()


def _check_outgoing_pd(config: MpaConfig, revision: int, total: int) -> None:
    limit = MAX_PRIVATE_DATA if revision else 0xFFFF
    if revision:
        limit = min(limit, config.private_data_limit)
    if total > limit:
        raise LocalProtocolError(
            f"private data of {total} octets (enhanced data included) exceeds the "
            f"limit of {limit} for Rev {revision}"
        )


def build_request(config: MpaConfig, private_data: bytes) -> MpaFrame:
    """The Initiator's Request (rule 1): our M, C, Rev, and for Rev 2 the
    S bit with IRD/ORD and, in peer-to-peer mode, A and the RTR types we can
    send (RFC 6581 §9.2).

    :raises LocalProtocolError: the private data is too long.
    """
    flags = FrameFlags(0)
    if config.markers:
        flags |= FrameFlags.MARKERS
    if config.sends_crc:
        flags |= FrameFlags.CRC
    enhanced = None
    if config.revision >= Revision.REV2:
        flags |= FrameFlags.ENHANCED
        rtr = RtrFlags(0)
        if config.peer_to_peer:
            rtr = RtrFlags.PEER_TO_PEER | (config.rtr_types & RTR_TYPES)
        enhanced = EnhancedData(ird=config.ird, ord=config.ord, flags=rtr)
    pd = _enhanced_prefix(enhanced) + bytes(private_data)
    _check_outgoing_pd(config, config.revision, len(pd))
    return MpaFrame(is_request=True, flags=flags, revision=int(config.revision), private_data=pd)


def retry_as_rev1(config: MpaConfig, error: MpaError) -> bool:
    """RFC 6581 §10: a Responder that does not know Rev 2 closes the
    connection on our Request; "the initiator MAY attempt to establish an
    RDMA connection using the unenhanced MPA protocol". Whether ``error``
    (startup's failure) is that case."""
    return config.revision == Revision.REV2 and error.mpa_code is MpaErrorCode.TCP_CLOSED


def incompatible_reply(config: MpaConfig) -> MpaFrame:
    """Appendix C.2.1: the Reply a non-permissive endpoint sends a Rev 0
    Initiator before closing: our M and C, Rev 1, no private data."""
    flags = FrameFlags(0)
    if config.markers:
        flags |= FrameFlags.MARKERS
    if config.sends_crc:
        flags |= FrameFlags.CRC
    return MpaFrame(is_request=False, flags=flags, revision=Revision.REV1)


class RequestVerdict(Enum):
    """What a Responder must do with a valid Request before asking the application."""

    #: Deliver it; the application accepts or rejects.
    DELIVER = "deliver"
    #: A local policy refuses it: send a Reply with R=1 and exit MPA.
    REFUSE = "refuse"
    #: Appendix C.2.1: a non-permissive endpoint got a Rev 0 Request: send a
    #: Reply with our own Rev, then close (error 4).
    INCOMPATIBLE = "incompatible"


def check_request(config: MpaConfig, request: MpaFrame) -> tuple[RequestVerdict, str]:
    """Responder checks of a Request that :func:`parse_frame` accepted.

    :raises MpaError: error 4: an enhanced Request to an endpoint configured
        without RFC 6581 (RFC 6581 §10: "an unenhanced responder treats the
        enhanced request as incorrectly formatted and closes").
    """
    if request.is_enhanced and config.revision < Revision.REV2:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"enhanced (RFC 6581) Request but this endpoint runs Rev {config.revision}",
        )
    if request.revision == 0 and config.revision >= 1:
        if config.rev0_profile is Rev0Profile.NON_PERMISSIVE:
            return RequestVerdict.INCOMPATIBLE, (
                "Rev 0 (RDMAC) Request refused by a non-permissive endpoint "
                "(RFC 5044 Appendix C.2.1)"
            )
        if config.rev0_profile is Rev0Profile.REFUSE:
            raise MpaError(
                MpaErrorCode.INVALID_FRAME,
                "Rev 0 (RDMAC) Request refused: this endpoint parses Rev 1 and 2 only",
            )
        return _marker_policy(config, request.markers)
    check_peer_to_peer(config, request)
    verdict, why = _marker_policy(config, request.markers)
    if verdict is not RequestVerdict.DELIVER:
        return verdict, why
    return _crc_policy(config, request)


def _marker_policy(config: MpaConfig, markers_send: bool) -> tuple[RequestVerdict, str]:
    if config.refuse_markers and markers_send:
        return RequestVerdict.REFUSE, "peer asks for markers (M=1) and refuse_markers is set"
    return RequestVerdict.DELIVER, ""


def check_peer_to_peer(config: MpaConfig, frame: MpaFrame) -> None:
    """``require_peer_to_peer``: a Rev 2 frame must carry RFC 6581 Control
    Flag A and an RTR type we support (irdma refuses anything else with
    -EOPNOTSUPP and resets the connection).

    :raises MpaError: error 4, the frame does not qualify.
    """
    if not config.require_peer_to_peer or min(frame.revision, config.revision) < Revision.REV2:
        return
    name = "Request" if frame.is_request else "Reply"
    enhanced = frame.enhanced
    if enhanced is None:
        why = "has no RFC 6581 enhanced data (S bit clear)"
    elif RtrFlags.PEER_TO_PEER not in enhanced.flags:
        why = "lacks the peer-to-peer bit A (RFC 6581 §9.2)"
    elif not enhanced.flags & config.rtr_types & RTR_TYPES:
        why = f"names no RTR type this endpoint supports ({config.rtr_types!r})"
    else:
        return
    raise MpaError(
        MpaErrorCode.INVALID_FRAME,
        f"Rev 2 {name} {why}, and require_peer_to_peer refuses it",
    )


def _crc_policy(config: MpaConfig, peer: MpaFrame) -> tuple[RequestVerdict, str]:
    if config.crc_required and not peer.crc:
        return RequestVerdict.REFUSE, "peer does not want CRC and crc_required is set"
    if config.crc_strict and not config.crc and peer.crc:
        return RequestVerdict.REFUSE, "peer wants CRC and crc_strict refuses it"
    return RequestVerdict.DELIVER, ""


def _rdmac_mode(local_revision: int, peer_revision: int) -> bool:
    """Appendix C: exactly one side is Rev 0: markers and CRC on, DDP v0."""
    return (local_revision == 0) != (peer_revision == 0)


def _choose(config: MpaConfig, pool: RtrFlags) -> RtrFlags | None:
    for kind in config.rtr_preference:
        if kind in pool:
            return kind
    for kind in (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND):
        if kind in pool:
            return kind
    return None


@dataclass(frozen=True, slots=True)
class _Negotiated:
    ird: int
    ord: int
    reply: EnhancedData | None
    rtr: RtrFlags | None


def _responder_enhanced(config: MpaConfig, req: EnhancedData, ird: int, ord_: int) -> _Negotiated:
    """RFC 6581 §9.1/§9.2 from the Responder's side."""
    # §9.1: "MUST respond to an initiator ORD value of 0x3FFF by leaving its
    # local endpoint IRD value unchanged and setting the IRD to 0x3FFF".
    if IRD_ORD_NONE in (req.ord, ird):
        local_ird, reply_ird = ird, IRD_ORD_NONE
    else:
        local_ird = reply_ird = min(req.ord, ird)  # relaxed: never above our capacity
    # "The responder MUST set its ORD at most to the initiator IRD."
    if IRD_ORD_NONE in (req.ird, ord_):
        local_ord, reply_ord = ord_, IRD_ORD_NONE
    else:
        local_ord = reply_ord = min(ord_, req.ird)
    flags = RtrFlags(0)
    rtr = None
    if RtrFlags.PEER_TO_PEER in req.flags:
        # §9.2: echo A; pick one offered type we support, or propose one of ours.
        offered = req.flags & RTR_TYPES
        rtr = _choose(config, offered & config.rtr_types) or _choose(config, config.rtr_types)
        if rtr is None:
            rtr = RtrFlags.WRITE
        flags = RtrFlags.PEER_TO_PEER | rtr
        if rtr is RtrFlags.READ and local_ird == 0 and reply_ird != IRD_ORD_NONE:
            # §9.1: "the responder IRD can be set to 1" for a Read RTR.
            local_ird = reply_ird = 1
    reply = EnhancedData(ird=reply_ird, ord=reply_ord, flags=flags)
    return _Negotiated(ird=local_ird, ord=local_ord, reply=reply, rtr=rtr)


def build_reply(
    config: MpaConfig,
    request: MpaFrame,
    *,
    accept: bool,
    private_data: bytes = b"",
    ird: int | None = None,
    ord: int | None = None,
    emss: int,
) -> tuple[MpaFrame, MpaParams]:
    """The Responder's Reply to ``request`` and the resulting parameters.

    ``ird``/``ord`` override the configured values for this connection.
    The parameters matter only when ``accept`` is true.

    :raises LocalProtocolError: the private data is too long.
    """
    ird = config.ird if ird is None else ird
    ord_ = config.ord if ord is None else ord
    rdmac = _rdmac_mode(config.revision, request.revision)
    if config.revision == 0 or request.revision == 0:
        revision = 0
    else:
        revision = int(min(config.revision, request.revision))
    flags = FrameFlags(0)
    if rdmac or config.markers:
        flags |= FrameFlags.MARKERS
    if rdmac or config.sends_crc:
        flags |= FrameFlags.CRC
    if not accept:
        flags |= FrameFlags.REJECT
    negotiated = _Negotiated(ird=ird, ord=ord_, reply=None, rtr=None)
    peer = request.enhanced
    if peer is not None:
        # RFC 6581 §10: an enhanced Request gets an enhanced Reply.
        flags |= FrameFlags.ENHANCED
        negotiated = _responder_enhanced(config, peer, ird, ord_)
        if not accept and negotiated.reply is not None:
            # §9.1: a Reject may carry the ORD the ULP requires (and our
            # IRD) as they are, so the Initiator can retry with more.
            reply_flags = negotiated.reply.flags & RtrFlags.PEER_TO_PEER
            negotiated = replace(
                negotiated, reply=EnhancedData(ird=ird, ord=ord_, flags=reply_flags)
            )
    pd = _enhanced_prefix(negotiated.reply) + bytes(private_data)
    _check_outgoing_pd(config, revision, len(pd))
    reply = MpaFrame(is_request=False, flags=flags, revision=revision, private_data=pd)
    # Appendix C: an RDMAC peer always sends markers, and our Reply says
    # M=1; a Rev 0 Requester's own M bit still tells whether it wants them
    # (an RDMAC RNIC always sets it). Our own Rev 0 side sends them always.
    markers_send = request.markers or (rdmac and config.revision == 0)
    params = MpaParams(
        revision=revision,
        ddp_version=0 if revision == 0 else 1,
        markers_send=markers_send,
        markers_receive=rdmac or config.markers,
        crc=rdmac or request.crc or config.sends_crc,
        enhanced=peer is not None,
        ird=negotiated.ird,
        ord=negotiated.ord,
        peer_ird=None if peer is None else peer.ird,
        peer_ord=None if peer is None else peer.ord,
        peer_to_peer=negotiated.rtr is not None,
        rtr=negotiated.rtr,
        mulpdu=mulpdu(emss, markers=markers_send),
        peer_private_data=request.ulp_private_data,
        local_private_data=bytes(private_data),
    )
    return reply, params


@dataclass(frozen=True, slots=True)
class InitiatorOutcome:
    """What a valid Reply means for the Initiator."""

    input: MpaInput
    params: MpaParams | None = None
    #: Error 6 or 7 found after a valid Reply (RFC 6581 §9.1, §9.2).
    negotiation_error: MpaError | None = None
    reason: str = ""


def complete_initiator(
    config: MpaConfig, request: MpaFrame, reply: MpaFrame, *, emss: int
) -> InitiatorOutcome:
    """Check the Reply against the Request we sent; negotiate.

    :raises MpaError: error 4, the Reply is improperly formatted for this
        Request or its revision cannot interoperate (rule 3; Appendix C).
    """
    if request.revision == 0 and reply.revision != 0:
        # Appendix C.2.1: an RDMAC Initiator cannot run IETF DDP/RDMAP.
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"Rev {reply.revision} Reply to a Rev 0 Request: cannot interoperate",
        )
    if request.revision >= 1 and reply.revision == 0:
        if config.rev0_profile is not Rev0Profile.PERMISSIVE:
            raise MpaError(
                MpaErrorCode.INVALID_FRAME,
                "Rev 0 (RDMAC) Reply refused by a non-permissive endpoint "
                "(RFC 5044 Appendix C.2.2)",
            )
    elif reply.revision > request.revision:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            f"Reply revision {reply.revision} is above the Request's {request.revision}",
        )
    if reply.is_enhanced and not request.is_enhanced:
        raise MpaError(
            MpaErrorCode.INVALID_FRAME,
            "enhanced Reply to an unenhanced Request (RFC 6581 §10)",
        )
    if reply.reject:
        return InitiatorOutcome(MpaInput.REPLY_REJECT, reason="the Responder rejected")
    check_peer_to_peer(config, reply)
    rdmac = _rdmac_mode(request.revision, reply.revision)
    # Appendix C: RDMAC mode means markers in both directions.
    verdict, why = _marker_policy(config, rdmac or reply.markers)
    if verdict is RequestVerdict.REFUSE:
        return InitiatorOutcome(MpaInput.REPLY_REFUSED, reason=why)
    if not rdmac:
        verdict, why = _crc_policy(config, reply)
        if verdict is RequestVerdict.REFUSE:
            return InitiatorOutcome(MpaInput.REPLY_REFUSED, reason=why)
    ird, ord_ = config.ird, config.ord
    peer = reply.enhanced
    rtr = None
    error = None
    if peer is not None:
        # §9.1: ORD at most the responder IRD; IRD at least the responder ORD.
        if IRD_ORD_NONE not in (peer.ird, ord_):
            ord_ = min(ord_, peer.ird)
        if IRD_ORD_NONE not in (peer.ord, ird) and peer.ord > ird:
            error = MpaError(
                MpaErrorCode.INSUFFICIENT_IRD,
                f"Responder ORD {peer.ord} exceeds our IRD {ird}",
            )
        sent = request.enhanced
        if sent is not None and RtrFlags.PEER_TO_PEER in sent.flags and error is None:
            if RtrFlags.PEER_TO_PEER not in peer.flags:
                error = MpaError(
                    MpaErrorCode.NO_MATCHING_RTR,
                    "peer-to-peer requested but the Reply does not echo Control Flag A",
                )
            else:
                rtr = _choose(config, peer.flags & config.rtr_types)
                if rtr is None:
                    error = MpaError(
                        MpaErrorCode.NO_MATCHING_RTR,
                        f"no RTR type we can send among those the Responder offers "
                        f"({(peer.flags & RTR_TYPES)!r})",
                    )
                elif rtr is RtrFlags.READ and ord_ == 0:
                    ord_ = 1  # a Read RTR occupies one outbound Read
    markers_send = rdmac or reply.markers
    revision = int(min(request.revision, reply.revision))
    params = MpaParams(
        revision=revision,
        ddp_version=0 if revision == 0 else 1,
        markers_send=markers_send,
        markers_receive=rdmac or config.markers,
        crc=rdmac or reply.crc or config.sends_crc,
        enhanced=peer is not None,
        ird=ird,
        ord=ord_,
        peer_ird=None if peer is None else peer.ird,
        peer_ord=None if peer is None else peer.ord,
        peer_to_peer=rtr is not None,
        rtr=rtr,
        mulpdu=mulpdu(emss, markers=markers_send),
        peer_private_data=reply.ulp_private_data,
        local_private_data=request.ulp_private_data,
    )
    return InitiatorOutcome(MpaInput.REPLY_ACCEPT, params=params, negotiation_error=error)
