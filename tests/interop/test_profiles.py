"""Peer profiles: the values each peer is known to use, and their CLI spelling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from helpers import MpaConn, out
from iwarp.cli import build_parser
from iwarp.cli._mpa_options import config_from
from iwarp.errors import LocalProtocolError, MpaErrorCode
from iwarp.interop.profiles import NOT_EXPRESSIBLE, PROFILES, cli_options, cxgb4, irdma, rfc, siw
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import (
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    Event,
    NegotiationFailed,
    RequestReceived,
)
from iwarp.mpa.handshake import build_request
from iwarp.mpa.wire import Revision, RtrFlags


def test_siw_profile() -> None:
    cfg = siw()
    assert cfg.revision == Revision.REV2
    assert not cfg.crc and not cfg.crc_required and not cfg.markers
    assert cfg.private_data_limit == 256
    assert not cfg.peer_to_peer
    assert cfg.rtr_types == RtrFlags.WRITE | RtrFlags.READ
    assert cfg.rtr_preference[0] == RtrFlags.WRITE
    assert (cfg.request_timeout, cfg.reply_timeout) == (5.0, 10.0)


def test_cxgb4_profile() -> None:
    cfg = cxgb4()
    assert cfg.sends_crc
    assert cfg.peer_to_peer
    assert cfg.rtr_types == RtrFlags.READ  # one RTR type (p2p_type Read)
    assert cfg.private_data_limit == 256
    assert (cfg.ird, cfg.ord) == (32, 32)


def test_irdma_profile() -> None:
    cfg = irdma()
    assert cfg.sends_crc
    assert cfg.peer_to_peer
    assert cfg.rtr_preference[0] == RtrFlags.READ
    assert cfg.private_data_limit == 512


def test_rfc_profile() -> None:
    cfg = rfc()
    assert cfg.private_data_limit == 512
    assert cfg.rtr_types == RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_is_a_config_with_notes(name: str) -> None:
    assert isinstance(PROFILES[name](), MpaConfig)
    assert name in NOT_EXPRESSIBLE


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("command", ["connect", "listen"])
def test_cli_options_parse_back_to_the_profile(name: str, command: str) -> None:
    cfg = PROFILES[name]()
    argv = [command, *cli_options(cfg)]
    if command == "connect":
        argv += ["127.0.0.1", "1"]
    args = build_parser().parse_args(argv)
    assert args.mpa_rev == cfg.revision
    assert args.no_crc == (not cfg.crc)
    assert (args.ird, args.ord) == (cfg.ird, cfg.ord)
    assert args.pd_limit == cfg.private_data_limit
    assert args.p2p == cfg.peer_to_peer
    assert args.rtr == cfg.rtr_types  # the CLI parses --rtr into RtrFlags


def test_cli_options_carry_the_peer_knobs() -> None:
    for name, make in PROFILES.items():
        cfg = make()
        args = build_parser().parse_args(["listen", *cli_options(cfg)])
        built = config_from(args)
        assert built.refuse_markers == cfg.refuse_markers, name
        assert built.require_peer_to_peer == cfg.require_peer_to_peer, name
        assert built.rev0_profile is cfg.rev0_profile, name
        assert built.rtr_preference == cfg.rtr_preference, name


def startup(init: MpaConfig, resp: MpaConfig) -> tuple[list[Event], list[Event], bytes]:
    """One in-memory startup: (Initiator events, Responder events, Reply octets)."""
    i = MpaConn(Role.INITIATOR, init, now=0.0)
    r = MpaConn(Role.RESPONDER, resp, now=0.0)
    r.receive_data(out(i), now=0.1)
    r_events = r.take_events()
    if any(isinstance(e, RequestReceived) for e in r_events):
        r.accept()
        r_events += r.take_events()
    reply = out(r)
    i.receive_data(reply, now=0.2)
    return i.take_events(), r_events, reply


def test_siw_refuses_a_peer_asking_for_markers() -> None:
    marker_peer = replace(rfc(), markers=True)
    i_events, r_events, reply = startup(marker_peer, siw())
    assert isinstance(r_events[0], ConnectionRejected)
    assert reply[16] & 0x20 and not reply[16] & 0x80  # R=1, M=0
    assert isinstance(i_events[0], ConnectionRejected) and i_events[0].by_peer
    # As Initiator siw ends the attempt on a Reply with M=1.
    i_events, _, _ = startup(siw(), marker_peer)
    assert isinstance(i_events[0], ConnectionRejected) and not i_events[0].by_peer


def test_irdma_refuses_siws_request_without_a_reply() -> None:
    _, r_events, reply = startup(siw(), irdma())
    assert isinstance(r_events[0], ConnectionFailed) and reply == b""
    assert r_events[0].error.mpa_code is MpaErrorCode.INVALID_FRAME


def test_irdma_refuses_rev0() -> None:
    _, r_events, reply = startup(MpaConfig(revision=0, markers=True), irdma())
    assert isinstance(r_events[0], ConnectionFailed) and reply == b""


@pytest.mark.parametrize(
    "init, resp, rtr",
    [
        (irdma, siw, RtrFlags.WRITE),  # siw prefers Write
        (irdma, irdma, RtrFlags.READ),  # irdma prefers Read
        (cxgb4, siw, RtrFlags.READ),  # only Read offered
        (cxgb4, irdma, RtrFlags.READ),
        (irdma, cxgb4, RtrFlags.READ),
    ],
)
def test_profiles_pick_rtr_like_their_peers(
    init: Callable[[], MpaConfig], resp: Callable[[], MpaConfig], rtr: RtrFlags
) -> None:
    i_events, _, _ = startup(init(), resp())
    assert isinstance(i_events[0], ConnectionEstablished) and len(i_events) == 1
    assert i_events[0].params.rtr is rtr


def test_cxgb4_initiator_reports_code_7_for_another_rtr() -> None:
    write_only = replace(rfc(), rtr_types=RtrFlags.WRITE)
    i_events, _, _ = startup(cxgb4(), write_only)
    assert isinstance(i_events[1], NegotiationFailed)
    assert i_events[1].error.mpa_code is MpaErrorCode.NO_MATCHING_RTR


def test_linux_private_data_limit() -> None:
    for make in (siw, cxgb4):
        with pytest.raises(LocalProtocolError):
            build_request(make(), bytes(253))  # 4 RFC 6581 octets + 253 > 256
        build_request(make(), bytes(252))
    build_request(irdma(), bytes(508))


def test_cxgb4_retries_with_rev1() -> None:
    assert cxgb4().rev1_fallback and not siw().rev1_fallback and not irdma().rev1_fallback
