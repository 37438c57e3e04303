"""The sans-IO VI/TCP establishment policy: discriminator demultiplexing and
the peer-to-peer retry schedule."""

from __future__ import annotations

import pytest

from helpers import out
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError, VitcpRejectedError
from iwarp.vitcp.events import (
    TCP_CLOSED_UNANSWERED,
    Connected,
    ConnectionRequested,
    ReconnectNeeded,
    ViConnectionClosed,
    ViConnectionRejected,
)
from iwarp.vitcp.handshake import State
from iwarp.vitcp.listener import Demultiplexer, PeerRetry, peer_setup
from iwarp.vitcp.wire import Reliability, SegmentType


def incoming(
    called: bytes, config: VitcpConfig | None = None
) -> tuple[VitcpConnection, VitcpConnection, ConnectionRequested]:
    a = VitcpConnection(config or VitcpConfig(), ViRole.ACTIVE)
    b = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    a.connect(0.0, called)
    b.tcp_accepted(0.0)
    a.tcp_established(0.0)
    (request,) = b.receive_data(out(a), 0.0)
    assert isinstance(request, ConnectionRequested)
    return a, b, request


def test_waiting_vi_first_then_the_server_then_no_match() -> None:
    demux: Demultiplexer[str] = Demultiplexer()
    demux.offer(b"svc", "server", every=True, keep_posted=2)
    demux.offer(b"svc", "once")
    routes = []
    for _ in range(2):
        a, b, request = incoming(b"svc")
        routed = demux.route(b, request)
        assert routed.accepted and routed.offer is not None
        routes.append(routed.offer.owner)
        (connected,) = [e for e in a.receive_data(out(b), 0.0) if isinstance(e, Connected)]
        assert connected.params is not None
    assert routes == ["once", "server"]
    assert b.descriptors_posted == 2  # the server's keep_posted
    _, b, request = incoming(b"other")
    routed = demux.route(b, request)
    assert routed.offer is None and not routed.accepted
    assert out(b)[1] & 0x1F == SegmentType.CONNECT_NO_MATCH
    assert b.state is State.DISCONNECTED and b.must_close


def test_attribute_mismatch_rejects_and_reports_the_offer() -> None:
    demux: Demultiplexer[str] = Demultiplexer()
    demux.offer(b"svc", "waiter", config=VitcpConfig(reliability=Reliability.DELIVERY))
    _, b, request = incoming(b"svc", VitcpConfig(reliability=Reliability.RECEPTION))
    routed = demux.route(b, request)
    assert routed.offer is not None and routed.offer.owner == "waiter" and not routed.accepted
    assert out(b)[1] & 0x1F == SegmentType.CONNECT_REJECT
    assert [e for e in b.take_events() if isinstance(e, ViConnectionClosed)] or b.must_close


def test_withdrawn_offer_is_not_used() -> None:
    demux: Demultiplexer[str] = Demultiplexer()
    offer = demux.offer(b"svc", "gone")
    demux.withdraw(offer)
    _, b, request = incoming(b"svc")
    assert demux.route(b, request).offer is None


def test_peer_retry_backs_off_until_the_deadline() -> None:
    retry = PeerRetry(VitcpConfig(connect_timeout=5.0), now=100.0)
    now = 100.0
    waits = []
    while (at := retry.next_attempt(now)) is not None:
        waits.append(round(at - now, 3))
        now = at
    assert waits[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert all(w == 1.0 for w in waits[5:])
    assert now < retry.deadline == 105.0
    assert retry.attempts == len(waits) + 1
    assert len(waits) < 10  # not hundreds of reconnects in 5 s


@pytest.mark.parametrize("timeout", [0.01, 0.04])
def test_peer_retry_gives_up_when_the_next_wait_passes_the_deadline(timeout: float) -> None:
    retry = PeerRetry(VitcpConfig(connect_timeout=timeout), now=0.0)
    assert retry.next_attempt(0.0) is None


def test_peer_retry_says_why_it_gave_up() -> None:
    retry = PeerRetry(VitcpConfig(connect_timeout=0.2), now=0.0)
    now = 0.0
    while (at := retry.next_attempt(now, TCP_CLOSED_UNANSWERED)) is not None:
        now = at
    assert retry.gave_up("h", 9) == (
        f"h:9 closed the TCP connection without a VI/TCP answer, {retry.attempts} times "
        "(is it a VI/TCP listener?)"
    )
    retry.next_attempt(now, "peer not waiting yet (ConnectNoMatch)")
    assert retry.gave_up("h", 9) == (
        f"peer-to-peer connection timed out after {retry.attempts} attempts "
        f"({TCP_CLOSED_UNANSWERED}; peer not waiting yet (ConnectNoMatch))"  # sorted
    )


def test_reconnect_at_gives_the_next_attempt_while_time_is_left() -> None:
    core = VitcpConnection(VitcpConfig(peer_to_peer=True, connect_timeout=1.0), ViRole.ACTIVE)
    core.connect(0.0, b"x")
    retry = PeerRetry(core.config, 0.0)
    assert retry.reconnect_at(core, 0.0, "ConnectNoMatch", "h", 1) == pytest.approx(0.05)
    assert core.state is not State.DISCONNECTED


def test_reconnect_at_ends_the_core_and_raises_why_when_time_is_up() -> None:
    core = VitcpConnection(VitcpConfig(peer_to_peer=True, connect_timeout=0.01), ViRole.ACTIVE)
    core.connect(0.0, b"x")
    retry = PeerRetry(core.config, 0.0)
    with pytest.raises(VitcpClosedError, match="timed out after 1 attempts"):
        retry.reconnect_at(core, 0.0, "ConnectNoMatch", "h", 1)
    assert core.state is State.DISCONNECTED


def test_after_an_attempt_a_reject_raises_and_a_reconnect_waits() -> None:
    core = VitcpConnection(VitcpConfig(peer_to_peer=True, connect_timeout=1.0), ViRole.ACTIVE)
    core.connect(0.0, b"x")
    retry = PeerRetry(core.config, 0.0)
    for no_match in (False, True):
        with pytest.raises(VitcpRejectedError) as caught:
            retry.after(core, 0.0, ViConnectionRejected(no_match), "h", 1)
        assert caught.value.no_match is no_match
    reason = "peer not waiting yet (ConnectNoMatch)"
    assert retry.after(core, 0.0, ReconnectNeeded(reason), "h", 1) == pytest.approx(0.05)
    assert retry.reasons == {reason} and retry.attempts == 2
    with pytest.raises(VitcpClosedError, match="timed out after"):
        retry.after(core, 2.0, ReconnectNeeded(reason), "h", 1)


def test_timed_out_and_tcp_failed_end_the_core_with_the_shared_wording() -> None:
    for fail in ("timeout", "tcp"):
        core = VitcpConnection(VitcpConfig(connect_timeout=1.0), ViRole.ACTIVE)
        core.connect(0.0, b"x")
        retry = PeerRetry(core.config, 0.0)
        if fail == "timeout":
            error = retry.timed_out(core, 0.5)  # the consumer's timeout runs out anyway
            assert str(error) == "connection establishment timed out"
        else:
            error = retry.tcp_failed(core, 0.5, ConnectionRefusedError("refused"))
            assert str(error) == "TCP connection setup failed: refused"
        assert core.state is State.DISCONNECTED


def test_peer_setup_makes_the_higher_address_active_with_our_discriminator() -> None:
    base = VitcpConfig(connect_timeout=3.0)
    config, role = peer_setup(base, "10.0.0.2", "10.0.0.1", b"me", b"you")
    assert role is ViRole.ACTIVE
    assert config.peer_to_peer and config.discriminator == b"me"
    assert config.connect_timeout == 3.0
    assert peer_setup(None, "10.0.0.1", "10.0.0.2", b"me", b"you")[1] is ViRole.PASSIVE
