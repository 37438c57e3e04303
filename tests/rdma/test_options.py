"""iwarp.rdma.options: connect's and serve/listen's settings, chosen once for both adapters."""

from __future__ import annotations

from typing import Any

from iwarp.mpa.config import MpaConfig
from iwarp.mpa.policy import Reject
from iwarp.rdma.endpoint import DEFAULT_RECEIVE_SIZE, INITIATOR_CONFIG, QueuePairOptions
from iwarp.rdma.options import domain, initiator_options, responder_options
from iwarp.rdmap.memory import ProtectionDomain


def test_connect_offers_peer_to_peer_by_default_and_keeps_a_config_of_ones_own() -> None:
    assert initiator_options(None) == QueuePairOptions(INITIATOR_CONFIG)
    assert initiator_options(None).config.peer_to_peer
    own = MpaConfig(crc=False)
    settings: dict[str, Any] = {
        "private_data": b"hi",
        "receive_buffers": 2,
        "receive_size": 100,
        "first_send_delay": 0.5,
        "shared_cq": True,
    }
    assert initiator_options(own, **settings) == QueuePairOptions(own, **settings)


def test_serve_and_listen_answer_with_a_plain_config_by_default() -> None:
    assert responder_options(None) == QueuePairOptions(MpaConfig())
    assert not responder_options(None).config.peer_to_peer

    def decide(request: object) -> Reject:
        return Reject()

    options = responder_options(None, receive_buffers=0, shared_cq=True, decide=decide)
    assert options.decide is decide and options.receive_buffers == 0 and options.shared_cq
    assert options.receive_size == DEFAULT_RECEIVE_SIZE


def test_each_queue_pair_gets_its_own_domain_unless_one_is_given() -> None:
    pd = ProtectionDomain()
    assert domain(pd) is pd
    first, second = domain(None), domain(None)
    assert first is not second
