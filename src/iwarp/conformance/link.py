"""A TCP connection to the target, with deadlines and a record of what crossed it.

Blocking sockets with ``select``: a case is a short scripted conversation, so
plain calls with a deadline read better than callbacks. Every octet received
stays in :attr:`Link.received` (the report shows it on failure); how the
connection ended (FIN or RST) is kept in :attr:`Link.ended`.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from typing import Final

__all__ = ["Link"]

#: Octets read per recv call.
_CHUNK: Final = 65536
#: Largest record kept of one connection (a misbehaving target may stream).
RECORD_LIMIT: Final = 1 << 20


class Link:
    """One TCP connection; reads into a buffer the session consumes from the front."""

    def __init__(self, sock: socket.socket, *, started: float | None = None) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self.sock = sock
        self.started = time.monotonic() if started is None else started
        #: Octets received and not yet consumed.
        self.inbox = bytearray()
        #: Every octet received (up to RECORD_LIMIT).
        self.received = bytearray()
        #: "FIN" or "RST" once the target ended its side, else None.
        self.ended: str | None = None
        #: Seconds from the start of the case to the end of the target's side.
        self.ended_at: float | None = None
        #: Why our last send failed (the target reset or closed), else None.
        self.send_error: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def send(self, data: bytes) -> bool:
        """Send every octet (within 5 s); False when the target no longer takes them."""
        view = memoryview(data)
        limit = time.monotonic() + 5.0
        while view:
            if time.monotonic() > limit:
                self.send_error = "the target stopped reading (send blocked 5 s)"
                return False
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                select.select([], [self.sock], [], 0.05)
                continue
            except OSError as exc:
                self.send_error = f"send failed: {exc.strerror or exc}"
                self._pull(0)  # learn how the target ended, if it did
                return False
            view = view[sent:]
        return True

    def _pull(self, timeout: float) -> bool:
        """Read what is there (waiting up to ``timeout``); False when nothing came."""
        if self.ended is not None:
            return False
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            data = self.sock.recv(_CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            self._end("RST")
            return True
        if not data:
            self._end("FIN")
            return True
        self.inbox += data
        room = RECORD_LIMIT - len(self.received)
        if room > 0:
            self.received += data[:room]
        return True

    def _end(self, how: str) -> None:
        self.ended = how
        self.ended_at = self.elapsed()

    def fill(self, n: int, deadline: float) -> bool:
        """Wait until ``n`` octets are buffered; False at the deadline or the end."""
        while len(self.inbox) < n:
            if self.ended is not None:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._pull(left)
        return True

    def take(self, n: int) -> bytes:
        data = bytes(self.inbox[:n])
        del self.inbox[:n]
        return data

    def wait_end(self, deadline: float, *, until_data: bool = False) -> str | None:
        """Read until the target ends its side; "FIN"/"RST", or None at the deadline (or,
        with ``until_data``, as soon as unread octets are in :attr:`inbox`)."""
        while self.ended is None:
            if until_data and self.inbox:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._pull(left)
        return self.ended

    def settle(self, seconds: float) -> None:
        """Collect whatever arrives during ``seconds``."""
        deadline = time.monotonic() + seconds
        while self.ended is None and time.monotonic() < deadline:
            self._pull(deadline - time.monotonic())

    def close(self, *, reset: bool = False) -> None:
        with contextlib.suppress(OSError):
            if reset:
                self.sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            self.sock.close()
