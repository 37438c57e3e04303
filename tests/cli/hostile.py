"""A hostile TCP relay for tests: re-segments, stalls, and flips bits.

Each accepted connection is relayed to ``127.0.0.1:target`` by two
threads. Every chunk read is written on in random pieces (with
``TCP_NODELAY``, so the peer sees many small segments), with random short
stalls between them. ``flips`` picks, per connection and direction, stream
offsets whose octet gets one bit inverted; the relay records the flips it
made, so a test can hold the endpoints to account for each of them.
Everything is bounded: pieces, stalls and the connection count.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: ``flips(connection_index, direction) -> offsets`` ("c2s" or "s2c").
FlipPlan = Callable[[int, str], list[int]]


def no_flips(_index: int, _direction: str) -> list[int]:
    return []


@dataclass
class Flip:
    connection: int
    direction: str
    offset: int
    bit: int


@dataclass
class HostileRelay:
    """Relays connections to ``target``; use as a context manager."""

    target: int
    seed: int = 0
    flips: FlipPlan = no_flips
    max_piece: int = 700
    stall_probability: float = 0.02
    max_stall: float = 0.003
    made: list[Flip] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port: int = self.server.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accepted = 0
        self._closers: list[_Closer] = []
        #: Connection index -> the relay's address towards the target, as
        #: the target sees its peer ("host:port").
        self.upstream: dict[int, str] = {}
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HostileRelay:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._acceptor.join(5)
        for closer in self._closers:  # a direction that never ended
            closer.close()
        for thread in self._threads:
            thread.join(5)
        self.server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            index = self._accepted
            self._accepted += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            host, port = upstream.getsockname()[:2]
            self.upstream[index] = f"{host}:{port}"
            for sock in (client, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            closer = _Closer(client, upstream)
            self._closers.append(closer)
            for src, dst, direction in ((client, upstream, "c2s"), (upstream, client, "s2c")):
                rng = random.Random(f"{self.seed}/{index}/{direction}")
                flips = sorted(self.flips(index, direction))
                thread = threading.Thread(
                    target=self._pipe,
                    args=(src, dst, rng, flips, index, direction, closer),
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def _pipe(
        self,
        src: socket.socket,
        dst: socket.socket,
        rng: random.Random,
        flips: list[int],
        index: int,
        direction: str,
        closer: _Closer,
    ) -> None:
        offset = 0
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:  # src was reset: pass the reset on
                closer.abort()
                return
            if not data:
                break
            chunk = bytearray(data)
            while flips and flips[0] < offset + len(chunk):
                at = flips.pop(0)
                if at >= offset:
                    bit = rng.randrange(8)
                    chunk[at - offset] ^= 1 << bit
                    with self._lock:
                        self.made.append(Flip(index, direction, at, bit))
            offset += len(chunk)
            pos = 0
            try:
                while pos < len(chunk):
                    step = rng.randint(1, self.max_piece)
                    dst.sendall(chunk[pos : pos + step])
                    pos += step
                    if rng.random() < self.stall_probability:
                        time.sleep(rng.uniform(0, self.max_stall))
            except OSError:
                # dst is gone: stop reading src; the other direction reads
                # what dst sent before its reset and then passes it on.
                return
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            return
        closer.half_closed()


class _Closer:
    """Closes both sockets of a connection once both directions ended;
    a reset on one side is passed on as a reset."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.socks = (a, b)
        self.lock = threading.Lock()
        self.ended = 0

    def half_closed(self) -> None:
        with self.lock:
            self.ended += 1
            if self.ended == 2:
                for sock in self.socks:
                    sock.close()

    def close(self) -> None:
        with self.lock:
            for sock in self.socks:
                sock.close()

    def abort(self) -> None:
        with self.lock:
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
