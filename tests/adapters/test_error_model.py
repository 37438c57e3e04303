"""One error model on both adapters (docs/errors.md): each sequence runs on
every pair of adapters and must end the same way.

After a Terminate, sent or received, every later call on the queue pair
raises the same :class:`ConnectionTerminatedError`, naming the call, the
Terminate (layer, type, code, the RFC's name) and the peer's address;
``close()`` raises it when no call did; after the peer's close the error
says so. A work request the peer refused raises :class:`RdmaError` in the
same words, after the call's name and status; no message shows an internal
work request id.
``flush()`` returns once the peer placed every earlier Write and Send, or
raises the Terminate that refused one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from adapters.sides import CALL_TIMEOUT, KINDS, Adapter, Side, make_adapter
from iwarp.errors import TerminateLayer
from iwarp.rdma.errors import ConnectionTerminatedError, RdmaError
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import CompletionStatus, ReadWR, SendWR, Sge
from iwarp.sync.mpa import MpaListener
from iwarp.sync.mpa import listen as mpa_listen

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


def _outcome(name: str, call: Callable[[], object]) -> str:
    """What a call did: ``ok`` or its error, with the peer's port masked;
    the error must name the call first (``send failed: ...``), and the
    outcome is what follows, the same for every call."""
    try:
        call()
    except ConnectionTerminatedError as exc:
        assert exc.call == name
        prefix = f"{name} failed: "
        assert str(exc).startswith(prefix), str(exc)
        return "ConnectionTerminatedError: " + re.sub(r":\d+\b", ":PORT", str(exc)[len(prefix) :])
    return "ok"


def _every_call(qp: Side) -> dict[str, str]:
    return {
        "send": _outcome("send", lambda: qp.send(b"late")),
        "rdma_write": _outcome("rdma_write", lambda: qp.rdma_write(b"x" * 8, BAD_STAG, 0)),
        "rdma_read": _outcome("rdma_read", lambda: qp.rdma_read(8, BAD_STAG, 0)),
        "flush": _outcome("flush", qp.flush),
        "post_send": _outcome("post_send", lambda: qp.post_send(SendWR(b"verbs", wr_id=1))),
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
    assert error.peer == f"127.0.0.1:{port}" and error.call == "flush"
    cause = (
        f"the peer 127.0.0.1:{port} terminated the connection: Terminate received "
        "(layer DDP, type 1, code 0x00: DDP tagged buffer error: invalid STag (RFC 5041 §7.2))"
    )
    assert str(error) == f"flush failed: {cause}"
    expected = "ConnectionTerminatedError: " + cause.replace(str(port), "PORT")
    assert set(_every_call(qp).values()) == {expected}
    with pytest.raises(ConnectionTerminatedError) as again:
        qp.receive()
    assert str(again.value) == f"receive failed: {cause}"
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
    prefix = f"receive failed: the connection to 127.0.0.1:{port} ended: Terminate sent "
    assert str(error).startswith(prefix)
    cause = str(error).removeprefix("receive failed: ")
    expected = "ConnectionTerminatedError: " + cause.replace(str(port), "PORT")
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
    assert str(info.value) == f"rdma_read failed: the peer 127.0.0.1:{port} closed the connection"
    _no_internal_id(str(info.value))
    qp.close()  # a close is no error


# --- a failed work request names the call, the peer and the cause ---------------------------


@pytest.fixture(params=KINDS)
def client(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    """A client adapter of each kind (its peer is written by the test)."""
    adapter = make_adapter(request.param)
    try:
        yield adapter
    finally:
        adapter.finish()


def _no_internal_id(message: str) -> None:
    assert "work request" not in message and not re.search(r"-\d", message), message


def test_a_read_the_peer_refused_names_the_call_the_peer_and_the_terminate(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    port = _region_server(server).port
    qp = client.connect(port)
    with pytest.raises(RdmaError) as info:
        qp.rdma_read(8, BAD_STAG, 0)
    error = info.value
    assert not isinstance(error, ConnectionTerminatedError)
    assert error.call == "rdma_read" and error.peer == f"127.0.0.1:{port}"
    assert error.completion.status is CompletionStatus.REMOTE_ACCESS_ERROR
    assert str(error) == (
        f"rdma_read failed (remote access error): the peer 127.0.0.1:{port} terminated the "
        "connection: Terminate received (layer RDMAP, type 1, code 0x00: RDMAP remote "
        "protection error: invalid STag (RFC 5040 §4.8))"
    )
    _no_internal_id(str(error))
    qp.close()  # the RdmaError named the Terminate: the close does not repeat it


def _close_after_first_message(listener: MpaListener) -> None:
    """A peer that completes MPA startup, takes the first FPDU (a request
    it never answers) and closes (FIN)."""
    sock = listener.accept(timeout=CALL_TIMEOUT)
    assert sock.receive(timeout=CALL_TIMEOUT) is not None
    sock.close()


def test_a_read_under_way_when_the_peer_closed_names_the_call_and_the_close(
    client: Adapter,
) -> None:
    with mpa_listen("127.0.0.1", 0) as listener:
        port = listener.port
        peer = threading.Thread(target=_close_after_first_message, args=(listener,))
        peer.start()
        qp = client.connect(listener.port)
        with pytest.raises(ConnectionTerminatedError) as info:
            qp.rdma_read(8, 0x1234, 0)  # the request goes out; the peer closes instead
        peer.join(CALL_TIMEOUT)
    error = info.value
    assert error.call == "rdma_read" and error.closed_by_peer and error.terminate is None
    assert str(error) == (f"rdma_read failed: the peer 127.0.0.1:{port} closed the connection")
    _no_internal_id(str(error))
    qp.close()


def test_a_read_behind_a_refused_one_names_the_call_and_the_terminate(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    peer = _region_server(server)
    qp = client.connect(peer.port)
    sink = qp.register(bytearray(8), Access.LOCAL_WRITE)
    qp.post_send(ReadWR(Sge(sink), BAD_STAG, 0, wr_id=7))  # refused: the peer terminates
    with pytest.raises(ConnectionTerminatedError) as info:
        qp.rdma_read(8, peer.stag, 0)  # never answered
    error = info.value
    assert error.call == "rdma_read" and error.terminate_received
    assert str(error).startswith(
        f"rdma_read failed: the peer 127.0.0.1:{peer.port} terminated the "
        "connection: Terminate received (layer RDMAP, type 1, code 0x00: "
    )
    _no_internal_id(str(error))
    assert qp.wait_send().wr_id == 7  # the application's own id, in send_cq
    qp.close()
