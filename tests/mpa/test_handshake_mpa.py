"""MPA startup rules: frame validation and negotiation (RFC 5044 §7.1,
Appendix C; RFC 6581 §9, §10; seed 000 §6.1)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import all_splits
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Rev0Profile
from iwarp.mpa.handshake import (
    InitiatorOutcome,
    MpaInput,
    RequestVerdict,
    build_reply,
    build_request,
    check_request,
    complete_initiator,
    incompatible_reply,
    parse_frame,
    private_data_limit,
    retry_as_rev1,
)
from iwarp.mpa.wire import (
    IRD_ORD_NONE,
    REPLY_KEY,
    REQUEST_KEY,
    EnhancedData,
    FrameFlags,
    MpaFrame,
    RtrFlags,
)

CFG = MpaConfig()
EMSS = 1460


def raw_frame(
    key: bytes = REQUEST_KEY, flags: int = 0x40, rev: int = 1, pd: bytes = b"", pd_len: int = -1
) -> bytes:
    n = len(pd) if pd_len < 0 else pd_len
    return key + struct.pack(">BBH", flags, rev, n) + pd


def request(
    *,
    rev: int = 1,
    m: bool = False,
    c: bool = True,
    enhanced: EnhancedData | None = None,
    pd: bytes = b"",
) -> MpaFrame:
    flags = FrameFlags(0)
    if m:
        flags |= FrameFlags.MARKERS
    if c:
        flags |= FrameFlags.CRC
    if enhanced is not None:
        flags |= FrameFlags.ENHANCED
        pd = enhanced.pack() + pd
    return MpaFrame(is_request=True, flags=flags, revision=rev, private_data=pd)


def reply_to(
    req: MpaFrame,
    *,
    rev: int | None = None,
    m: bool = False,
    c: bool = True,
    reject: bool = False,
    enhanced: EnhancedData | None = None,
    pd: bytes = b"",
) -> MpaFrame:
    r = request(rev=req.revision if rev is None else rev, m=m, c=c, enhanced=enhanced, pd=pd)
    flags = r.flags | (FrameFlags.REJECT if reject else FrameFlags(0))
    return MpaFrame(is_request=False, flags=flags, revision=r.revision, private_data=r.private_data)


# --- parse_frame ------------------------------------------------------------------


class TestParseFrame:
    def test_siw_request_exactly(self) -> None:
        # The Request Linux siw sends by default: flags 0x10 (S only: no
        # markers, CRC not requested), Rev 2, PD_Length 4, IRD 1, ORD 1.
        data = REQUEST_KEY + bytes.fromhex("10 02 00 04 00 01 00 01")
        frame, used = parse_frame(data, CFG, expect_request=True) or (None, 0)
        assert frame is not None and used == 24
        assert frame.revision == 2 and frame.is_enhanced and not frame.crc
        assert frame.enhanced == EnhancedData(ird=1, ord=1)
        assert frame.ulp_private_data == b""

    def test_round_trip_every_split(self) -> None:
        frame = build_request(MpaConfig(markers=True, peer_to_peer=True), b"private")
        data = frame.pack() + b"FPDU"
        for pieces in all_splits(data):
            buf = b""
            result = None
            for piece in pieces:
                buf += piece
                result = parse_frame(buf, CFG, expect_request=True)
                if result is not None:
                    break
            assert result is not None
            parsed, used = result
            assert used == len(data) - 4
            assert parsed == frame

    @pytest.mark.parametrize("cut", range(0, 16))
    def test_wrong_key_fails_at_first_bad_octet(self, cut: int) -> None:
        bad = bytearray(REQUEST_KEY)
        bad[cut] ^= 0x01
        # Only the octets up to and including the bad one are needed.
        with pytest.raises(MpaError) as info:
            parse_frame(bytes(bad[: cut + 1]), CFG, expect_request=True)
        assert info.value.mpa_code is MpaErrorCode.INVALID_FRAME
        # A correct prefix alone waits.
        assert parse_frame(REQUEST_KEY[:cut], CFG, expect_request=True) is None

    def test_initiator_initiator_and_responder_responder(self) -> None:
        with pytest.raises(MpaError, match="both ends are Initiators"):
            parse_frame(raw_frame(REQUEST_KEY), CFG, expect_request=False)
        with pytest.raises(MpaError, match="both ends are Responders"):
            parse_frame(raw_frame(REPLY_KEY), CFG, expect_request=True)

    @pytest.mark.parametrize("rev", [3, 4, 0x7F, 0x80, 0xFF])
    def test_unknown_revision(self, rev: int) -> None:
        with pytest.raises(MpaError, match=f"revision {rev} is unknown"):
            parse_frame(raw_frame(rev=rev)[:20], CFG, expect_request=True)

    def test_private_data_limits(self) -> None:
        # Rev >= 1: 512 max (RFC 5044 §7.1.1), checked on the header alone.
        assert parse_frame(raw_frame(pd=bytes(512)), CFG, expect_request=True) is not None
        with pytest.raises(MpaError, match="PD_Length 513 exceeds the limit of 512"):
            parse_frame(raw_frame(pd_len=513)[:20], CFG, expect_request=True)
        low = MpaConfig(private_data_limit=256)
        with pytest.raises(MpaError, match="limit of 256"):
            parse_frame(raw_frame(pd_len=257)[:20], low, expect_request=True)
        # Rev 0: up to 65535, bounded by the receive buffer.
        frame = raw_frame(rev=0, pd=bytes(65535))
        assert parse_frame(frame, CFG, expect_request=True) is not None
        small = MpaConfig(receive_buffer_limit=1020)
        assert private_data_limit(small, 0) == 1000
        with pytest.raises(MpaError, match="limit of 1000"):
            parse_frame(raw_frame(rev=0, pd_len=1001)[:20], small, expect_request=True)

    def test_enhanced_needs_four_octets(self) -> None:
        with pytest.raises(MpaError, match="S bit"):
            parse_frame(raw_frame(flags=0x50, rev=2, pd=b"abc"), CFG, expect_request=True)
        # Below Rev 2 the S bit is reserved: ignored, not enhanced.
        frame, _ = parse_frame(
            raw_frame(flags=0x5F, rev=1, pd=b"abc"), CFG, expect_request=True
        ) or (
            None,
            0,
        )
        assert frame is not None and not frame.is_enhanced
        assert frame.flags == FrameFlags.CRC and frame.reserved == 0x1F

    def test_reserved_bits_and_request_r_bit_ignored(self) -> None:
        frame, _ = parse_frame(raw_frame(flags=0xEF), CFG, expect_request=True) or (None, 0)
        assert frame is not None
        assert frame.markers and frame.crc and not frame.reject
        assert frame.pack()[16] == 0xC0  # sent back with reserved bits zero

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=80), st.booleans())
    def test_arbitrary_octets_only_protocol_errors(self, data: bytes, request: bool) -> None:
        try:
            parse_frame(data, CFG, expect_request=request)
        except MpaError as exc:
            assert exc.mpa_code is MpaErrorCode.INVALID_FRAME

    @settings(max_examples=200, deadline=None)
    @given(st.integers(0, 0xFF), st.integers(0, 2), st.binary(max_size=40), st.booleans())
    def test_arbitrary_headers_after_key(
        self, flags: int, rev: int, pd: bytes, request: bool
    ) -> None:
        key = REQUEST_KEY if request else REPLY_KEY
        try:
            result = parse_frame(raw_frame(key, flags, rev, pd), CFG, expect_request=request)
        except MpaError as exc:
            assert "S bit" in str(exc)
            return
        assert result is not None
        frame, used = result
        assert used == 20 + len(pd) and frame.private_data == pd


# --- outgoing frames -------------------------------------------------------------


class TestBuildRequest:
    def test_default_is_rev2_enhanced_crc_no_markers(self) -> None:
        frame = build_request(CFG, b"")
        assert frame.pack() == REQUEST_KEY + bytes.fromhex("50 02 00 04 00 10 00 10")

    def test_siw_compatible_request(self) -> None:
        # Rev 2, PD <= 256 (siw's RDMA_MAX_PRIVATE_DATA), IRD/ORD 1.
        cfg = MpaConfig(private_data_limit=256, ird=1, ord=1)
        frame = build_request(cfg, bytes(252))
        assert len(frame.private_data) == 256
        with pytest.raises(LocalProtocolError):
            build_request(cfg, bytes(253))

    def test_peer_to_peer_offers(self) -> None:
        cfg = MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.READ | RtrFlags.SEND)
        enh = build_request(cfg, b"").enhanced
        assert enh == EnhancedData(
            ird=16, ord=16, flags=RtrFlags.PEER_TO_PEER | RtrFlags.READ | RtrFlags.SEND
        )
        # Without A, B/C/D are zero (RFC 6581 §9.2).
        assert build_request(MpaConfig(), b"").pack()[20:24] == bytes.fromhex("00100010")

    @pytest.mark.parametrize("rev", [0, 1])
    def test_old_revisions_have_no_enhanced_data(self, rev: int) -> None:
        frame = build_request(MpaConfig(revision=rev, markers=True, crc=False), b"pd")
        assert frame.pack() == REQUEST_KEY + bytes([0x80, rev, 0, 2]) + b"pd"

    def test_rev0_private_data_up_to_65535(self) -> None:
        assert len(build_request(MpaConfig(revision=0), bytes(65535)).private_data) == 65535
        with pytest.raises(LocalProtocolError):
            build_request(MpaConfig(revision=1), bytes(513))

    def test_crc_required_sets_c(self) -> None:
        assert build_request(MpaConfig(crc=False, crc_required=True), b"").crc

    def test_config_validation(self) -> None:
        for bad in (
            {"revision": 3},
            {"private_data_limit": 513},
            {"ird": 0x4000},
            {"request_timeout": 0},
            {"crc_strict": True, "crc_required": True},
            {"rtr_types": RtrFlags.PEER_TO_PEER},
        ):
            with pytest.raises(ValueError):
                MpaConfig(**bad)


# --- negotiation: markers, CRC, revisions ----------------------------------------


@pytest.mark.parametrize("m_req", [False, True])
@pytest.mark.parametrize("m_rep", [False, True])
@pytest.mark.parametrize("c_req", [False, True])
@pytest.mark.parametrize("c_rep", [False, True])
def test_markers_per_direction_crc_either(
    m_req: bool, m_rep: bool, c_req: bool, c_rep: bool
) -> None:
    """RFC 5044 §7.1.1: M asks the other side for markers; C on if either sets it."""
    init_cfg = MpaConfig(revision=1, markers=m_req, crc=c_req)
    resp_cfg = MpaConfig(revision=1, markers=m_rep, crc=c_rep)
    req = build_request(init_cfg, b"")
    assert check_request(resp_cfg, req)[0] is RequestVerdict.DELIVER
    rep, rparams = build_reply(resp_cfg, req, accept=True, emss=EMSS)
    outcome = complete_initiator(init_cfg, req, rep, emss=EMSS)
    iparams = outcome.params
    assert iparams is not None
    assert (iparams.markers_send, iparams.markers_receive) == (m_rep, m_req)
    assert (rparams.markers_send, rparams.markers_receive) == (m_req, m_rep)
    assert iparams.crc == rparams.crc == (c_req or c_rep)
    assert rparams.revision == iparams.revision == 1


class TestCrcPolicy:
    def test_crc_required_refuses_peer_without_crc(self) -> None:
        req = request(c=False)
        verdict, why = check_request(MpaConfig(crc_required=True), req)
        assert verdict is RequestVerdict.REFUSE and "crc_required" in why
        init = MpaConfig(revision=1, crc_required=True)
        out = complete_initiator(init, build_request(init, b""), reply_to(req, c=False), emss=EMSS)
        assert out.input is MpaInput.REPLY_REFUSED

    def test_crc_strict_refuses_peer_with_crc(self) -> None:
        cfg = MpaConfig(crc=False, crc_strict=True)
        assert check_request(cfg, request(c=True))[0] is RequestVerdict.REFUSE
        assert check_request(cfg, request(c=False))[0] is RequestVerdict.DELIVER
        # Without strict the peer's C simply turns CRC on.
        rep, params = build_reply(MpaConfig(crc=False), request(c=True), accept=True, emss=EMSS)
        assert params.crc and not rep.crc


class TestRevisions:
    def test_rev2_responder_answers_rev1_plain(self) -> None:
        # RFC 6581 §10: an unenhanced Request gets an unenhanced Reply.
        rep, params = build_reply(CFG, request(rev=1), accept=True, emss=EMSS)
        assert rep.revision == 1 and not rep.is_enhanced and not params.enhanced
        assert params.peer_ird is None and params.ird == CFG.ird

    def test_rev1_responder_closes_on_enhanced_request(self) -> None:
        req = request(rev=2, enhanced=EnhancedData(ird=1, ord=1))
        with pytest.raises(MpaError, match="enhanced"):
            check_request(MpaConfig(revision=1), req)

    def test_rev1_responder_accepts_rev2_without_s(self) -> None:
        rep, params = build_reply(MpaConfig(revision=1), request(rev=2), accept=True, emss=EMSS)
        assert rep.revision == 1 and params.revision == 1

    def test_initiator_tolerates_plain_reply_to_enhanced_request(self) -> None:
        req = build_request(CFG, b"")
        out = complete_initiator(CFG, req, reply_to(req, rev=1), emss=EMSS)
        assert out.params is not None and not out.params.enhanced and out.params.revision == 1

    def test_initiator_refuses_enhanced_reply_to_plain_request(self) -> None:
        req = request(rev=2)
        bad = reply_to(req, enhanced=EnhancedData(ird=1, ord=1))
        with pytest.raises(MpaError, match="enhanced Reply"):
            complete_initiator(CFG, req, bad, emss=EMSS)

    def test_reply_revision_above_request(self) -> None:
        req = build_request(MpaConfig(revision=1), b"")
        with pytest.raises(MpaError, match="above"):
            complete_initiator(CFG, req, reply_to(req, rev=2), emss=EMSS)

    def test_both_rev0_negotiate_per_bits(self) -> None:
        cfg = MpaConfig(revision=0, markers=False, crc=False)
        req = build_request(cfg, b"")
        rep, params = build_reply(cfg, req, accept=True, emss=EMSS)
        assert rep.revision == 0 and not rep.markers and not rep.crc
        assert not params.markers_send and not params.crc and params.ddp_version == 0
        out = complete_initiator(cfg, req, rep, emss=EMSS)
        assert out.params is not None and out.params.ddp_version == 0


class TestAppendixC:
    """RFC 5044 Appendix C, Figures 15-17: outcome per (Initiator, Responder)."""

    RDMAC = MpaConfig(revision=0, markers=True, crc=True)
    PERMISSIVE = MpaConfig(revision=1, rev0_profile=Rev0Profile.PERMISSIVE)
    NON_PERMISSIVE = MpaConfig(revision=1)

    @staticmethod
    def run(init: MpaConfig, resp: MpaConfig) -> tuple[str, tuple[bool, bool] | None]:
        """'close' or 'V=x' with the Initiator/Responder receive markers."""
        req = build_request(init, b"")
        try:
            verdict, _ = check_request(resp, req)
        except MpaError:
            return "close", None
        if verdict is RequestVerdict.INCOMPATIBLE:
            rep = incompatible_reply(resp)
            with pytest.raises(MpaError):
                complete_initiator(init, req, rep, emss=EMSS)
            return "close", None
        rep, rparams = build_reply(resp, req, accept=True, emss=EMSS)
        try:
            out: InitiatorOutcome = complete_initiator(init, req, rep, emss=EMSS)
        except MpaError:
            return "close", None
        ip = out.params
        assert ip is not None
        assert ip.ddp_version == rparams.ddp_version
        assert ip.markers_send == rparams.markers_receive
        assert ip.markers_receive == rparams.markers_send
        assert ip.crc == rparams.crc
        return f"V={ip.ddp_version}", (ip.markers_receive, rparams.markers_receive)

    def test_figure15_non_permissive(self) -> None:
        assert self.run(self.RDMAC, self.NON_PERMISSIVE)[0] == "close"
        for m in (False, True):
            init = MpaConfig(revision=1, markers=m)
            assert self.run(init, self.RDMAC)[0] == "close"
            for m_resp in (False, True):
                resp = MpaConfig(revision=1, markers=m_resp)
                assert self.run(init, resp) == ("V=1", (m, m_resp))

    def test_figure16_permissive(self) -> None:
        # RDMAC Initiator, permissive Responder: V=0, markers 1/1, CRC on.
        for m_resp in (False, True):
            resp = MpaConfig(revision=1, markers=m_resp, rev0_profile=Rev0Profile.PERMISSIVE)
            assert self.run(self.RDMAC, resp) == ("V=0", (True, True))
        for m in (False, True):
            init = MpaConfig(revision=1, markers=m, crc=False, rev0_profile=Rev0Profile.PERMISSIVE)
            assert self.run(init, self.RDMAC) == ("V=0", (True, True))

    def test_figure16_permissive_reply_bits(self) -> None:
        resp = MpaConfig(revision=2, crc=False, rev0_profile=Rev0Profile.PERMISSIVE)
        rep, params = build_reply(resp, request(rev=0, m=True), accept=True, emss=EMSS)
        assert rep.revision == 0 and rep.markers and rep.crc  # C.2.4
        assert params.crc and params.markers_send and params.markers_receive

    def test_figure17_ietf_both_ways(self) -> None:
        for p_init in Rev0Profile:
            for p_resp in Rev0Profile:
                for m in (False, True):
                    for m_resp in (False, True):
                        init = MpaConfig(revision=1, markers=m, rev0_profile=p_init)
                        resp = MpaConfig(revision=1, markers=m_resp, rev0_profile=p_resp)
                        assert self.run(init, resp) == ("V=1", (m, m_resp))

    def test_incompatible_reply_is_rev1(self) -> None:
        assert incompatible_reply(self.NON_PERMISSIVE).revision == 1


# --- RFC 6581 §9: IRD/ORD and RTR --------------------------------------------------


def negotiate(
    init: MpaConfig, resp: MpaConfig, **accept: int
) -> tuple[InitiatorOutcome, EnhancedData]:
    req = build_request(init, b"")
    rep, rparams = build_reply(resp, req, accept=True, emss=EMSS, **accept)  # type: ignore[arg-type]
    enh = rep.enhanced
    assert enh is not None
    out = complete_initiator(init, req, rep, emss=EMSS)
    if out.params is not None and out.negotiation_error is None:
        assert out.params.rtr == rparams.rtr
        assert out.params.peer_ird == rparams.ird or enh.ird == IRD_ORD_NONE
    return out, enh


class TestIrdOrd:
    def test_relations_hold(self) -> None:
        for i_ird, i_ord, r_ird, r_ord in [
            (4, 8, 16, 2),
            (16, 16, 2, 32),
            (0, 0, 5, 5),
            (1, 7, 7, 1),
        ]:
            out, enh = negotiate(MpaConfig(ird=i_ird, ord=i_ord), MpaConfig(ird=r_ird, ord=r_ord))
            p = out.params
            assert p is not None and out.negotiation_error is None
            # RFC 6581 §9.1: initiator ORD <= responder IRD; responder ORD <= initiator IRD.
            assert p.ord <= enh.ird and enh.ord <= i_ird
            assert enh.ird <= r_ird and enh.ord <= r_ord
            assert (p.peer_ird, p.peer_ord) == (enh.ird, enh.ord)

    def test_all_ones_means_no_negotiation(self) -> None:
        out, enh = negotiate(MpaConfig(ird=IRD_ORD_NONE, ord=IRD_ORD_NONE), MpaConfig(ird=3, ord=5))
        assert (enh.ird, enh.ord) == (IRD_ORD_NONE, IRD_ORD_NONE)
        assert out.params is not None
        assert (out.params.ird, out.params.ord) == (IRD_ORD_NONE, IRD_ORD_NONE)
        req = build_request(MpaConfig(ird=IRD_ORD_NONE, ord=2), b"")
        _, rparams = build_reply(MpaConfig(ird=3, ord=5), req, accept=True, emss=EMSS)
        assert (rparams.ird, rparams.ord) == (2, 5)  # ORD left unchanged

    def test_insufficient_ird_is_error_6(self) -> None:
        req = build_request(MpaConfig(ird=2), b"")
        rep = reply_to(req, rev=2, enhanced=EnhancedData(ird=4, ord=3))
        out = complete_initiator(MpaConfig(ird=2), req, rep, emss=EMSS)
        assert out.input is MpaInput.REPLY_ACCEPT
        assert out.negotiation_error is not None
        assert out.negotiation_error.mpa_code is MpaErrorCode.INSUFFICIENT_IRD

    def test_accept_overrides(self) -> None:
        out, enh = negotiate(MpaConfig(ird=8, ord=8), MpaConfig(), ird=2, ord=1)
        assert (enh.ird, enh.ord) == (2, 1)
        assert out.params is not None and out.params.ord == 2


class TestRtr:
    P2P = MpaConfig(peer_to_peer=True)

    @pytest.mark.parametrize(
        ("offered", "supported", "preference", "chosen"),
        [
            (RtrFlags.WRITE | RtrFlags.READ, RtrFlags.WRITE | RtrFlags.READ, None, RtrFlags.WRITE),
            (
                RtrFlags.WRITE | RtrFlags.READ,
                RtrFlags.WRITE | RtrFlags.READ,
                (RtrFlags.READ, RtrFlags.WRITE),
                RtrFlags.READ,
            ),
            (RtrFlags.READ, RtrFlags.WRITE | RtrFlags.READ, None, RtrFlags.READ),
            (RtrFlags.SEND, RtrFlags.SEND | RtrFlags.WRITE, None, RtrFlags.SEND),
        ],
    )
    def test_one_type_chosen(
        self,
        offered: RtrFlags,
        supported: RtrFlags,
        preference: tuple[RtrFlags, ...] | None,
        chosen: RtrFlags,
    ) -> None:
        init = MpaConfig(peer_to_peer=True, rtr_types=offered)
        extra = {} if preference is None else {"rtr_preference": preference}
        resp = MpaConfig(rtr_types=supported, **extra)  # type: ignore[arg-type]
        out, enh = negotiate(init, resp)
        assert enh.flags == RtrFlags.PEER_TO_PEER | chosen  # A echoed, exactly one type
        assert out.params is not None and out.params.rtr is chosen and out.params.peer_to_peer

    def test_no_common_type_is_error_7(self) -> None:
        init = MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND)
        out, enh = negotiate(init, MpaConfig(rtr_types=RtrFlags.READ))
        assert enh.flags == RtrFlags.PEER_TO_PEER | RtrFlags.READ  # responder proposes its own
        assert out.negotiation_error is not None
        assert out.negotiation_error.mpa_code is MpaErrorCode.NO_MATCHING_RTR

    def test_missing_a_echo_is_error_7(self) -> None:
        req = build_request(self.P2P, b"")
        rep = reply_to(req, enhanced=EnhancedData(ird=1, ord=1, flags=RtrFlags.WRITE))
        out = complete_initiator(self.P2P, req, rep, emss=EMSS)
        assert out.negotiation_error is not None
        assert out.negotiation_error.mpa_code is MpaErrorCode.NO_MATCHING_RTR

    def test_client_server_ignores_bcd(self) -> None:
        # §9.2: with A = 0, B/C/D are ignored on receipt.
        req = request(rev=2, enhanced=EnhancedData(ird=1, ord=1, flags=RtrFlags.WRITE))
        rep, params = build_reply(CFG, req, accept=True, emss=EMSS)
        assert rep.enhanced is not None and rep.enhanced.flags == RtrFlags(0)
        assert not params.peer_to_peer and params.rtr is None

    def test_read_rtr_needs_one_read_each_side(self) -> None:
        init = MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.READ, ird=0, ord=0)
        out, enh = negotiate(init, MpaConfig(rtr_types=RtrFlags.READ))
        assert enh.ird == 1  # §9.1: the responder IRD "can be set to 1"
        assert out.params is not None and out.params.ord == 1

    def test_reject_still_reports_private_data(self) -> None:
        req = build_request(CFG, b"")
        rep, _ = build_reply(CFG, req, accept=False, private_data=b"no", emss=EMSS)
        assert rep.reject and rep.ulp_private_data == b"no" and rep.enhanced is not None
        out = complete_initiator(CFG, req, rep, emss=EMSS)
        assert out.input is MpaInput.REPLY_REJECT and out.params is None


def test_docs_draw_the_tables() -> None:
    """docs/mpa-connection.md shows exactly the transition tables."""
    from pathlib import Path

    from iwarp.mpa.config import Role
    from iwarp.mpa.handshake import transitions_for

    doc = (Path(__file__).parents[2] / "docs" / "mpa-connection.md").read_text()
    for role in Role:
        assert "```mermaid\n" + transitions_for(role).mermaid() + "\n```" in doc, role


def test_reject_carries_required_ord() -> None:
    """RFC 6581 §9.1: the Responder "MAY reject ... and specify the required
    ORD in the MPA Reject Frame responder ORD"."""
    req = build_request(MpaConfig(ird=2, peer_to_peer=True), b"")
    rep, _ = build_reply(CFG, req, accept=False, ird=4, ord=8, emss=EMSS)
    assert rep.reject and rep.enhanced == EnhancedData(ird=4, ord=8, flags=RtrFlags.PEER_TO_PEER)
    out = complete_initiator(MpaConfig(ird=2, peer_to_peer=True), req, rep, emss=EMSS)
    assert out.input is MpaInput.REPLY_REJECT


def test_retry_as_rev1_only_after_a_rev2_request_met_a_close() -> None:
    """RFC 6581 §10: only a Rev 2 Initiator whose Request was answered by a
    close may try again unenhanced; a bad Reply (error 4) is no such case."""
    closed = MpaError(MpaErrorCode.TCP_CLOSED, "closed before the Reply")
    assert retry_as_rev1(MpaConfig(revision=2), closed)
    assert not retry_as_rev1(MpaConfig(revision=1), closed)
    assert not retry_as_rev1(MpaConfig(revision=2), MpaError(MpaErrorCode.INVALID_FRAME, "bad"))
