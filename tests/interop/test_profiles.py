"""Peer profiles: the values each peer is known to use, and their CLI spelling."""

from __future__ import annotations

import pytest

from iwarp.cli import build_parser
from iwarp.interop.profiles import NOT_EXPRESSIBLE, PROFILES, cli_options, cxgb4, irdma, rfc, siw
from iwarp.mpa.config import MpaConfig
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
