"""A blocking receive takes what already came: the message in the
socket is read at the call's first look (iwarp.sync._driver.Driver.look),
so a ping-pong's answer needs no wait, and ``timeout=0`` is a poll that
finds it (it used to time out before looking)."""

from __future__ import annotations

import select
import threading

import iwarp.sync as rdma
from iwarp.mpa.config import MpaConfig


def _pair() -> tuple[rdma.QueuePair, rdma.QueuePair]:
    config = MpaConfig(crc=True)
    with rdma.listen("127.0.0.1", 0, config=config, receive_buffers=2, receive_size=64) as ln:
        accepted: list[rdma.QueuePair] = []
        thread = threading.Thread(target=lambda: accepted.append(ln.accept(timeout=30)))
        thread.start()
        a = rdma.connect(
            "127.0.0.1", ln.port, config=config, receive_buffers=2, receive_size=64, timeout=30
        )
        thread.join(30)
    return a, accepted[0]


def _arrived(qp: rdma.QueuePair) -> None:
    """The peer's FPDU (one small segment) is in the socket."""
    assert select.select([qp.fileno()], [], [], 30)[0]


def test_a_message_in_the_socket_is_taken_by_a_receive_that_may_not_wait() -> None:
    a, b = _pair()
    try:
        for n in range(20):  # the fast path on from the first messages on
            a.send(bytes([n]) * 16)
            _arrived(b)
            assert b.receive(timeout=0) == bytes([n]) * 16
            b.send(b"back")
            _arrived(a)
            assert a.receive(timeout=0) == b"back"
    finally:
        a.close()
        b.close()
