"""The blocking driver's own write of a small message's FPDU (``Driver.write``,
what ``QueuePair.send`` hands it from the small-message lane): one ``send``,
what the kernel does not take waits, in order, behind nothing and ahead of
everything later, and a failed connection is reported as lost."""

from __future__ import annotations

import socket
from typing import Any

from iwarp.sync._driver import Driver


class _Core:
    """A core with nothing of its own to send, that records how it ended."""

    borrows_input = False
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
