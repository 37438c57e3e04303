"""One error model on both adapters (docs/errors.md): each sequence runs on
every pair of adapters and must end the same way.

After a Terminate, sent or received, every later call on the queue pair
raises the same :class:`ConnectionTerminatedError`, naming the Terminate
(layer, type, code, the RFC's name) and the peer's address; ``close()``
raises it when no call did; after the peer's close the error says so.
``flush()`` returns once the peer placed every earlier Write and Send, or
raises the Terminate that refused one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from adapters.sides import Adapter, Side
from iwarp.errors import TerminateLayer
from iwarp.rdma.errors import ConnectionTerminatedError
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import SendWR

#: An STag the server never registered.
BAD_STAG = 0xDEAD00
#: What the peer of an RDMA Write to :data:`BAD_STAG` answers (RFC 5041 §7.2).
INVALID_STAG = (TerminateLayer.DDP, 1, 0x00)


@dataclass
class RegionServer:
    """A server whose handler registers ``memory`` for remote access, says
    its STag (``stag``, once ``ready``) and waits for the end."""

    port: int
    memory: bytearray
    ready: threading.Event
    stags: list[int]

    @property
    def stag(self) -> int:
        assert self.ready.wait(30)
        return self.stags[0]


def _region_server(server: Adapter, size: int = 64) -> RegionServer:
    memory = bytearray(size)
    ready = threading.Event()
    stags: list[int] = []

    def handler(qp: Side) -> None:
        region = qp.register(memory, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        stags.append(region.stag)
        ready.set()
        qp.wait_closed()
        _ = qp.terminate  # read: the handler was told (its close does not report it)

    return RegionServer(server.serve(handler), memory, ready, stags)


def _outcome(call: Callable[[], object]) -> str:
    """What a call did: ``ok`` or its error, with the peer's port masked."""
    try:
        call()
    except ConnectionTerminatedError as exc:
        return "ConnectionTerminatedError: " + re.sub(r":\d+\b", ":PORT", str(exc))
    return "ok"


def _every_call(qp: Side) -> dict[str, str]:
    return {
        "send": _outcome(lambda: qp.send(b"late")),
        "rdma_write": _outcome(lambda: qp.rdma_write(b"x" * 8, BAD_STAG, 0)),
        "rdma_read": _outcome(lambda: qp.rdma_read(8, BAD_STAG, 0)),
        "flush": _outcome(qp.flush),
        "post_send": _outcome(lambda: qp.post_send(SendWR(b"verbs", wr_id=1))),
    }


def test_after_a_terminate_received_every_call_raises_the_same_error(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    port = _region_server(server).port
    qp = client.connect(port, receive_buffers=2)
    assert qp.rdma_write(b"x" * 8, BAD_STAG, 0) == 8  # complete: TCP took it
    with pytest.raises(ConnectionTerminatedError) as info:
        qp.flush()  # the peer's Terminate refused the Write
    error = info.value
    assert error.terminate_received and not error.closed_by_peer
    assert (error.layer, error.etype, error.code) == INVALID_STAG
    assert error.peer == f"127.0.0.1:{port}"
    assert str(error) == (
        f"the peer 127.0.0.1:{port} terminated the connection: Terminate received "
        "(layer DDP, type 1, code 0x00: DDP tagged buffer error: invalid STag (RFC 5041 §7.2))"
    )
    expected = "ConnectionTerminatedError: " + str(error).replace(str(port), "PORT")
    assert set(_every_call(qp).values()) == {expected}
    with pytest.raises(ConnectionTerminatedError) as again:
        qp.receive()
    assert str(again.value) == str(error)
    qp.close()  # told already: the close does not repeat it


def test_close_reports_a_terminate_no_call_raised(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    qp = client.connect(_region_server(server).port)
    qp.rdma_write(b"x" * 8, BAD_STAG, 0)
    qp.wait_closed()  # the peer's Terminate, then its close
    with pytest.raises(ConnectionTerminatedError, match=r"Terminate received .*invalid STag"):
        qp.close()


def test_rdma_write_with_flush_raises_the_terminate_that_refused_it(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    qp = client.connect(_region_server(server).port)
    with pytest.raises(ConnectionTerminatedError) as info:
        qp.rdma_write(b"x" * 8, BAD_STAG, 0, flush=True)
    assert (info.value.layer, info.value.etype, info.value.code) == INVALID_STAG
    qp.close()


def test_flush_returns_once_the_peer_placed_the_writes(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    peer = _region_server(server, 4096)
    qp = client.connect(peer.port)
    stag, memory = peer.stag, peer.memory
    for i in range(16):
        qp.rdma_write(bytes([i + 1]) * 256, stag, i * 256)
    qp.flush()
    # The zero-length Read's response left the peer after it placed them all.
    assert memory == b"".join(bytes([i + 1]) * 256 for i in range(16))
    assert qp.rdma_write(b"\xff" * 8, stag, 0, flush=True) == 8
    assert memory[:8] == b"\xff" * 8
    qp.close()


def test_after_a_terminate_sent_every_call_raises_the_same_error(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair

    def handler(qp: Side) -> None:
        qp.send(b"m" * 64)  # too long for the client's 16-octet buffers
        qp.wait_closed()
        assert qp.terminate is not None

    port = server.serve(handler)
    qp = client.connect(port, receive_buffers=1, receive_size=16)
    with pytest.raises(ConnectionTerminatedError) as info:
        qp.receive()
    error = info.value
    assert not error.terminate_received
    assert (error.layer, error.etype, error.code) == (TerminateLayer.DDP, 2, 0x05)
    assert str(error).startswith(f"the connection to 127.0.0.1:{port} ended: Terminate sent ")
    expected = "ConnectionTerminatedError: " + str(error).replace(str(port), "PORT")
    assert set(_every_call(qp).values()) == {expected}
    qp.close()
    assert server.take_failures() == []


def test_after_the_peer_closed_the_error_says_so(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    port = server.serve(lambda qp: None)  # the handler returns: the server closes
    qp = client.connect(port)
    qp.wait_closed()
    outcomes = _every_call(qp)
    assert set(outcomes.values()) == {
        "ConnectionTerminatedError: the peer 127.0.0.1:PORT closed the connection"
    }
    with pytest.raises(ConnectionTerminatedError) as info:
        qp.rdma_read(8, 1, 0)
    assert info.value.closed_by_peer and info.value.terminate is None
    assert "work request" not in str(info.value)  # no internal negative wr_id
    qp.close()  # a close is no error
