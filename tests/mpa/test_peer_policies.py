"""Peer-modelling knobs of MpaConfig: refuse_markers (siw), require_peer_to_peer
and Rev0Profile.REFUSE (irdma), RTR preference and single-type offers (siw,
irdma, cxgb4), driven through MpaConnection so the bytes sent are checked too."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import MpaConn, out
from iwarp.asyncio.mpa import MpaSocket, connect, serve
from iwarp.errors import MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Rev0Profile, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import (
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    Event,
    NegotiationFailed,
    RequestReceived,
)
from iwarp.mpa.handshake import MpaState, RequestVerdict, build_request, check_request
from iwarp.mpa.wire import (
    FRAME_HEADER_SIZE,
    REPLY_KEY,
    EnhancedData,
    FrameFlags,
    MpaFrame,
    RtrFlags,
)

W, R, S, A = RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND, RtrFlags.PEER_TO_PEER
P2P_ONLY = MpaConfig(require_peer_to_peer=True)


def responder(config: MpaConfig, request: bytes) -> tuple[MpaConnection, list[Event], bytes]:
    conn = MpaConn(Role.RESPONDER, config, now=0.0)
    conn.receive_data(request, now=0.1)
    return conn, conn.take_events(), out(conn)


def initiator_sees(config: MpaConfig, reply: MpaFrame) -> tuple[MpaConnection, list[Event]]:
    conn = MpaConn(Role.INITIATOR, config, now=0.0)
    out(conn)
    conn.receive_data(reply.pack(), now=0.1)
    return conn, conn.take_events()


def frame(
    *,
    request: bool,
    rev: int = 2,
    m: bool = False,
    reject: bool = False,
    enhanced: EnhancedData | None = None,
) -> MpaFrame:
    flags = FrameFlags.CRC
    if m:
        flags |= FrameFlags.MARKERS
    if reject:
        flags |= FrameFlags.REJECT
    pd = b""
    if enhanced is not None:
        flags |= FrameFlags.ENHANCED
        pd = enhanced.pack()
    return MpaFrame(is_request=request, flags=flags, revision=rev, private_data=pd)


def parse_reply(data: bytes) -> MpaFrame:
    assert data[:16] == REPLY_KEY
    flags, rev, n = data[16], data[17], int.from_bytes(data[18:20], "big")
    assert len(data) == FRAME_HEADER_SIZE + n
    return MpaFrame(is_request=False, flags=FrameFlags(flags), revision=rev, private_data=data[20:])


# --- refuse_markers (siw: "MPA Markers: currently not supported") ----------------------


@pytest.mark.parametrize("rev", [1, 2])
def test_request_with_markers_is_rejected_with_m_clear(rev: int) -> None:
    cfg = MpaConfig(refuse_markers=True)
    req = build_request(MpaConfig(revision=rev, markers=True), b"hi")
    conn, events, out = responder(cfg, req.pack())
    (event,) = events
    assert isinstance(event, ConnectionRejected) and not event.by_peer
    assert "markers" in event.reason
    reply = parse_reply(out)
    assert reply.reject and not reply.markers  # R=1, M cleared (siw_proc_mpareq)
    assert conn.state is MpaState.EXITED


def test_request_without_markers_is_delivered() -> None:
    req = build_request(MpaConfig(markers=False), b"")
    _, events, out = responder(MpaConfig(refuse_markers=True), req.pack())
    assert [type(e) for e in events] == [RequestReceived] and out == b""


def test_markers_asked_for_us_are_not_refused() -> None:
    # refuse_markers concerns markers *we* would send; our own M bit still asks.
    req = build_request(MpaConfig(refuse_markers=True, markers=True), b"")
    assert req.markers


def test_permissive_rdmac_request_with_markers_is_refused() -> None:
    cfg = MpaConfig(revision=1, refuse_markers=True, rev0_profile=Rev0Profile.PERMISSIVE)
    req = build_request(MpaConfig(revision=0, markers=True), b"")
    _, events, out = responder(cfg, req.pack())
    assert isinstance(events[0], ConnectionRejected)
    assert parse_reply(out).reject


def test_initiator_refuses_reply_with_markers() -> None:
    cfg = MpaConfig(revision=1, refuse_markers=True)
    conn, events = initiator_sees(cfg, frame(request=False, rev=1, m=True))
    (event,) = events
    assert isinstance(event, ConnectionRejected) and not event.by_peer
    assert conn.state is MpaState.EXITED and conn.params is None


def test_initiator_accepts_reply_without_markers() -> None:
    cfg = MpaConfig(revision=1, refuse_markers=True)
    _, events = initiator_sees(cfg, frame(request=False, rev=1))
    assert isinstance(events[0], ConnectionEstablished)


def test_initiator_refuses_rdmac_reply() -> None:
    # A permissive Initiator would run RDMAC mode (markers both ways).
    cfg = MpaConfig(revision=1, refuse_markers=True, rev0_profile=Rev0Profile.PERMISSIVE)
    _, events = initiator_sees(cfg, frame(request=False, rev=0, m=True))
    assert isinstance(events[0], ConnectionRejected)


def test_default_sends_markers_when_asked() -> None:
    req = build_request(MpaConfig(revision=1, markers=True), b"")
    conn, _, _ = responder(MpaConfig(revision=1), req.pack())
    assert conn.accept().markers_send


# --- require_peer_to_peer and Rev0Profile.REFUSE (irdma) -------------------------------


@pytest.mark.parametrize(
    "enhanced, words",
    [
        (None, "S bit"),
        (EnhancedData(ird=4, ord=4, flags=RtrFlags(0)), "peer-to-peer bit A"),
        (EnhancedData(ird=4, ord=4, flags=A), "no RTR type"),
        (EnhancedData(ird=4, ord=4, flags=A | S), "no RTR type"),
    ],
)
def test_rev2_request_without_p2p_fails_without_reply(
    enhanced: EnhancedData | None, words: str
) -> None:
    req = frame(request=True, enhanced=enhanced)
    conn, events, out = responder(P2P_ONLY, req.pack())
    (event,) = events
    assert isinstance(event, ConnectionFailed) and event.close
    assert event.error.mpa_code is MpaErrorCode.INVALID_FRAME and words in str(event.error)
    assert out == b"" and conn.state is MpaState.FAILED  # irdma: reset, no Reply


@pytest.mark.parametrize("offer", [W, R, W | R, W | R | S])
def test_rev2_request_with_p2p_is_delivered(offer: RtrFlags) -> None:
    req = frame(request=True, enhanced=EnhancedData(ird=4, ord=4, flags=A | offer))
    conn, events, _ = responder(P2P_ONLY, req.pack())
    assert isinstance(events[0], RequestReceived)
    assert conn.accept().peer_to_peer


def test_rev1_request_is_not_checked() -> None:
    # irdma downgrades to Rev 1, where there is no A bit to require.
    _, events, _ = responder(P2P_ONLY, frame(request=True, rev=1).pack())
    assert isinstance(events[0], RequestReceived)


def test_rev1_endpoint_does_not_require() -> None:
    cfg = MpaConfig(revision=1, require_peer_to_peer=True)
    _, events, _ = responder(cfg, frame(request=True, rev=2).pack())
    assert isinstance(events[0], RequestReceived)


def test_initiator_fails_on_reply_without_a() -> None:
    cfg = MpaConfig(peer_to_peer=True, require_peer_to_peer=True)
    reply = frame(request=False, enhanced=EnhancedData(ird=4, ord=4, flags=W))
    conn, events = initiator_sees(cfg, reply)
    (event,) = events
    assert isinstance(event, ConnectionFailed) and event.close
    assert event.error.mpa_code is MpaErrorCode.INVALID_FRAME
    assert conn.state is MpaState.FAILED


def test_without_the_knob_a_missing_a_is_error_7_after_establishment() -> None:
    cfg = MpaConfig(peer_to_peer=True)
    reply = frame(request=False, enhanced=EnhancedData(ird=4, ord=4, flags=W))
    _, events = initiator_sees(cfg, reply)
    assert isinstance(events[0], ConnectionEstablished)
    assert isinstance(events[1], NegotiationFailed)
    assert events[1].error.mpa_code is MpaErrorCode.NO_MATCHING_RTR


def test_initiator_still_sees_a_reject_as_a_reject() -> None:
    cfg = MpaConfig(peer_to_peer=True, require_peer_to_peer=True)
    reply = frame(request=False, reject=True, enhanced=EnhancedData(ird=4, ord=4, flags=A))
    _, events = initiator_sees(cfg, reply)
    assert isinstance(events[0], ConnectionRejected) and events[0].by_peer


def test_rev0_refuse_profile_closes_without_reply() -> None:
    cfg = MpaConfig(rev0_profile=Rev0Profile.REFUSE)
    req = build_request(MpaConfig(revision=0, markers=True), b"")
    conn, events, out = responder(cfg, req.pack())
    (event,) = events
    assert isinstance(event, ConnectionFailed) and event.close
    assert event.error.mpa_code is MpaErrorCode.INVALID_FRAME
    assert out == b"" and conn.state is MpaState.FAILED


def test_rev0_non_permissive_still_answers_rev1() -> None:
    req = build_request(MpaConfig(revision=0, markers=True), b"")
    _, events, out = responder(MpaConfig(), req.pack())
    assert isinstance(events[0], ConnectionFailed)
    assert parse_reply(out).revision == 1  # Appendix C.2.1


def test_rev0_refuse_initiator_fails_on_rev0_reply() -> None:
    cfg = MpaConfig(revision=1, rev0_profile=Rev0Profile.REFUSE)
    conn, events = initiator_sees(cfg, frame(request=False, rev=0, m=True))
    assert isinstance(events[0], ConnectionFailed) and conn.state is MpaState.FAILED


@settings(max_examples=150, deadline=None)
@given(
    rev=st.integers(0, 2),
    s_bit=st.booleans(),
    m=st.booleans(),
    flags=st.integers(0, 0xF),
)
def test_knobs_only_refuse_what_they_name(rev: int, s_bit: bool, m: bool, flags: int) -> None:
    """Every Request: each knob refuses exactly its own case, never anything else."""
    rtr = RtrFlags(0)
    for bit, flag in zip((8, 4, 2, 1), (A, S, W, R), strict=True):
        if flags & bit:
            rtr |= flag
    enhanced = EnhancedData(ird=4, ord=4, flags=rtr) if rev == 2 and s_bit else None
    req = frame(request=True, rev=rev, m=m, enhanced=enhanced)
    cfg = MpaConfig(refuse_markers=True, require_peer_to_peer=True, rev0_profile=Rev0Profile.REFUSE)
    _, events, out = responder(cfg, req.pack())
    event = events[0]
    p2p_ok = enhanced is not None and A in rtr and bool(rtr & (W | R))
    if rev == 0 or (rev == 2 and not p2p_ok):
        assert isinstance(event, ConnectionFailed) and out == b""
    elif m:
        assert isinstance(event, ConnectionRejected) and parse_reply(out).reject
    else:
        assert isinstance(event, RequestReceived)
    # The default configuration accepts everything but Rev 0 (Appendix C.2.1).
    _, events, _ = responder(MpaConfig(), req.pack())
    assert isinstance(events[0], RequestReceived) == (rev != 0)


# --- RTR preference (siw Write > Read, irdma Read > Write) and single offers (cxgb4) ---


def negotiate(init: MpaConfig, resp: MpaConfig) -> tuple[list[Event], RtrFlags | None]:
    i = MpaConn(Role.INITIATOR, init, now=0.0)
    r = MpaConn(Role.RESPONDER, resp, now=0.0)
    r.receive_data(out(i), now=0.1)
    r.take_events()
    chosen = r.accept().rtr
    i.receive_data(out(r), now=0.2)
    return i.take_events(), chosen


@pytest.mark.parametrize(
    "preference, offer, chosen",
    [
        ((W, R), W | R, W),  # siw
        ((R, W), W | R, R),  # irdma
        ((W, R), R, R),
        ((R, W), W, W),
        ((W, R), S, W),  # siw proposes Write when nothing offered fits
        ((R, W), S, R),
    ],
)
def test_responder_preference(
    preference: tuple[RtrFlags, ...], offer: RtrFlags, chosen: RtrFlags
) -> None:
    init = MpaConfig(peer_to_peer=True, rtr_types=offer)
    resp = MpaConfig(rtr_types=W | R, rtr_preference=preference)
    _, got = negotiate(init, resp)
    assert got is chosen


def test_single_type_initiator_offers_only_it() -> None:
    req = build_request(MpaConfig(peer_to_peer=True, rtr_types=R), b"")
    assert req.enhanced is not None and req.enhanced.flags == A | R


@pytest.mark.parametrize("resp_types, ok", [(W | R, True), (R, True), (W, False)])
def test_single_type_initiator_terminates_on_another(resp_types: RtrFlags, ok: bool) -> None:
    init = MpaConfig(peer_to_peer=True, rtr_types=R, rtr_preference=(R,))
    events, chosen = negotiate(init, MpaConfig(rtr_types=resp_types))
    assert isinstance(events[0], ConnectionEstablished)
    if ok:
        assert chosen is R and events[0].params.rtr is R and len(events) == 1
    else:
        # The Responder proposes Write; the Initiator reports code 7 so its
        # upper layer sends the Terminate (cxgb4: "RTR mismatch, sending TERM").
        assert chosen is W
        assert isinstance(events[1], NegotiationFailed)
        assert events[1].error.mpa_code is MpaErrorCode.NO_MATCHING_RTR


def test_check_request_refuses_markers_before_crc_policy() -> None:
    req = frame(request=True, m=True, enhanced=EnhancedData(ird=1, ord=1, flags=A | W))
    cfg = MpaConfig(refuse_markers=True, crc=False, crc_strict=True)
    verdict, why = check_request(cfg, req)
    assert verdict is RequestVerdict.REFUSE and "markers" in why


# --- rev1_fallback (cxgb4 retries with Rev 1 after its Rev 2 attempt is reset) ---------


def test_rev1_fallback_from_the_config_over_loopback() -> None:
    async def echo(sock: MpaSocket) -> None:
        async for ulpdu in sock:
            sock.send(ulpdu)
        await sock.close()

    async def main() -> None:
        # A Rev 1 Responder closes on an enhanced Request (RFC 6581 §10).
        server = await serve(echo, "127.0.0.1", 0, config=MpaConfig(revision=1))
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(MpaError) as info:
                await connect("127.0.0.1", port, config=MpaConfig())
            assert info.value.code == 1
            sock = await connect("127.0.0.1", port, config=MpaConfig(rev1_fallback=True))
            assert sock.params.revision == 1 and not sock.params.enhanced
            sock.send(b"after fallback")
            assert await sock.receive() == b"after fallback"
            await sock.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))
