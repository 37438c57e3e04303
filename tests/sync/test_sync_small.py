"""Small messages on the blocking adapter: the driver's own write of a small
message's FPDU (``Driver.write``, what ``QueuePair.send`` hands it from the
small-message lane): one ``send``, what the kernel does not take waits, in
order, behind nothing and ahead of everything later, and a failed connection
is reported as lost; and a list of work requests posted at once
(``post_send_list``), written by one gathering write."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

import iwarp.sync as rdma
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.work import SendQueueWR, SendWR, WriteWR
from iwarp.sync._driver import Driver


class _Core:
    """A core with nothing of its own to send, that records how it ended."""

    borrows_input = False
    lanes = None
    has_data_to_send = False
    must_close = False

    def __init__(self) -> None:
        self.lost: list[str] = []

    def data_to_send(self) -> list[Any]:
        return []

    def take_events(self) -> list[Any]:
        return []

    def get_timer(self) -> None:
        return None

    def settled(self) -> bool:
        return not self.has_data_to_send

    def receive_data(self, data: Any, now: float) -> list[Any]:
        return []

    def connection_lost(self, now: float, reason: str) -> list[Any]:
        self.lost.append(reason)
        return ["lost"]


def _drain(sock: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        if not chunk:
            break
        got += chunk
    return bytes(got)


def test_what_the_kernel_does_not_take_waits_in_order() -> None:
    """Frames written while the peer does not read: the kernel takes some,
    one partly; the rest waits in the driver (a write behind it queues,
    never overtakes) and goes out, in order, as the peer reads."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    with right:
        dispatched: list[Any] = []
        driver = Driver(left, _Core(), dispatched.extend)  # type: ignore[arg-type]
        frames = [bytes([n % 251]) * (100 + n % 37) for n in range(2000)]
        for frame in frames:
            driver.write(frame)
        assert driver.unsent  # the kernel's buffer filled: part waits
        expected = b"".join(frames)
        right.setblocking(True)
        got = bytearray()
        while driver.unsent:
            got += right.recv(1 << 16)
            driver.flush()
        driver.close()
        got += _drain(right, len(expected) - len(got))
    assert bytes(got) == expected
    assert dispatched == []


def test_a_write_on_a_failed_connection_reports_it_lost() -> None:
    """The peer reset the connection: the write is a loss the core hears
    of (its events dispatched), the socket is closed, nothing is raised."""
    left, right = socket.socketpair()
    right.close()
    core = _Core()
    dispatched: list[Any] = []
    driver = Driver(left, core, dispatched.extend)  # type: ignore[arg-type]
    driver.write(b"x" * 64)
    assert core.lost and "TCP connection lost" in core.lost[0]
    assert dispatched == ["lost"]
    assert driver.closed and isinstance(driver.error, OSError)
    driver.write(b"after")  # nowhere to go: dropped
    assert not driver.unsent


# -- a list of work requests posted at once (QueuePairFront.post_send_list) ----------

T = 10.0


def _echo_server(count: int, got: list[bytes]) -> tuple[rdma.Listener, threading.Thread]:
    listener = rdma.listen("127.0.0.1", 0, receive_buffers=64, receive_size=256)

    def run() -> None:
        with listener.accept(timeout=T) as qp:
            for _ in range(count):
                got.append(qp.receive(timeout=T))
            qp.send(b"done", timeout=T)
            qp.receive(timeout=T)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener, thread


def test_a_posted_list_arrives_in_order_and_goes_out_in_one_write() -> None:
    """Sends posted as one list: one write hands all of them to TCP (the
    first by the small-message lane, the rest by the send queue), each
    completes in send_cq with its wr_id, and the peer gets them in order."""
    messages = [bytes([n]) * (1 + n) for n in range(40)]
    got: list[bytes] = []
    listener, thread = _echo_server(len(messages), got)
    with listener, rdma.connect("127.0.0.1", listener.port, receive_buffers=2, timeout=T) as qp:
        driver = qp._driver
        writes: list[int] = []
        send = driver._send
        write = driver.write

        def counted_send(chunks: list[Any]) -> None:
            writes.append(len(chunks))
            send(chunks)

        def counted_write(data: Any) -> None:
            writes.append(1)
            write(data)

        driver._send = counted_send  # type: ignore[method-assign]
        driver.write = counted_write  # type: ignore[method-assign]
        qp.post_send_list(SendWR(m, wr_id=n) for n, m in enumerate(messages))
        assert len(writes) == 1 and writes[0] > 1  # one gathering write, not one per message
        done = [qp.send_cq.wait(timeout=T) for _ in messages]
        assert [c.wr_id for c in done] == list(range(len(messages)))
        assert all(c.ok for c in done)
        assert qp.receive(timeout=T) == b"done"
        qp.send(b"bye", timeout=T)
    thread.join(T)
    assert got == messages


def test_a_bad_request_in_a_list_stops_it_after_the_ones_before() -> None:
    """The requests before a bad one are posted and written; the bad one
    raises as post_send would; those after it are not posted."""
    got: list[bytes] = []
    listener, thread = _echo_server(2, got)
    with listener, rdma.connect("127.0.0.1", listener.port, receive_buffers=2, timeout=T) as qp:
        wrs: list[SendQueueWR] = [
            SendWR(b"one", wr_id=1),
            SendWR(b"two", wr_id=2),
            WriteWR(b"bad", 1, 2**64 - 1, wr_id=3),  # wraps the remote TO
            SendWR(b"never", wr_id=4),
        ]
        with pytest.raises(LocalProtocolError):
            qp.post_send_list(wrs)
        assert [qp.send_cq.wait(timeout=T).wr_id for _ in range(2)] == [1, 2]
        assert qp.receive(timeout=T) == b"done"
        assert qp.send_cq.poll() == []
        qp.send(b"bye", timeout=T)
    thread.join(T)
    assert got == [b"one", b"two"]
