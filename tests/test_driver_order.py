"""The drivers' order rule (:mod:`iwarp.contract`, "Order"): everything the
core produced is handed out before the driver feeds it the next input, the
peer's FIN included.

A scripted core answers a request and, as the real stack does once MPA
closes, drops whatever answer it still holds when it hears the FIN. A peer
that sends its request and half-closes at once must still get the whole
answer, from the blocking and the asyncio driver, with the receive lane on
and off.
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import threading
import time
from typing import Any

import pytest

from iwarp._typing import Buffer
from iwarp.asyncio.driver import CoreDriver
from iwarp.contract import Lanes
from iwarp.mpa.framing import FpduDecoder
from iwarp.rdma import lanes
from iwarp.rdma.lanes import ReceiveLane
from iwarp.rdmap.stream import LaneWindows
from iwarp.sockets import RECEIVE_CHUNK
from iwarp.sync._driver import Driver


class ScriptedCore:
    """Answers ``answer`` octets (in ``batch``-octet pieces, segmented
    lazily) once ``request`` octets arrived; on the FIN drops what it did
    not hand out yet and must close. Has lanes (with the receive lane on)
    that take every octet on its usual path."""

    borrows_input = True

    def __init__(self, request: int, answer: int, batch: int) -> None:
        self.request = request
        self.answer = answer
        self.batch = batch
        self.received = 0
        self.pending = 0
        self.handed_out = 0
        self.dropped = 0
        self.fin = False
        self.closed = False
        self.log: list[str] = []
        self.lanes: Lanes | None = FeedAll(self) if lanes.RECEIVE_ACTIVE else None

    # -- the contract -----------------------------------------------------------

    def receive_data(self, data: Buffer, now: float) -> list[Any]:
        size = memoryview(data).nbytes
        if not size:
            self.log.append("fin")
            self.fin = self.closed = True
            self.dropped += self.pending
            self.pending = 0
            return []
        self.log.append("data")
        before = self.received
        self.received += size
        if before < self.request <= self.received:
            self.pending = self.answer
        return []

    def data_to_send(self, limit: int | None = None) -> list[Buffer]:
        if self.closed or not self.pending:
            return []
        size = min(self.batch, self.pending)
        self.pending -= size
        self.handed_out += size
        self.log.append("out")
        return [b"A" * size]

    @property
    def has_data_to_send(self) -> bool:
        return bool(self.pending) and not self.closed

    @property
    def must_close(self) -> bool:
        return self.closed

    def settled(self) -> bool:
        return not self.has_data_to_send and not self.must_close

    def take_events(self) -> list[Any]:
        return []

    def get_timer(self) -> float | None:
        return None

    def handle_timer(self, now: float) -> list[Any]:
        return []

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[Any]:
        self.log.append("lost")
        self.closed = True
        return []

    def set_emss(self, emss: int) -> None:
        pass


class FeedAll:
    """The lanes of a scripted core: no send lane; a receive ring that
    hands every octet to the core's usual path."""

    def __init__(self, core: ScriptedCore) -> None:
        self.core = core

    def take_send(self) -> None:
        return None

    def send_done(self) -> list[Any]:
        return []

    def receive_ring(self) -> ReceiveLane:
        return ReceiveLane(self)

    # -- what the ring asks (iwarp.rdma.lanes.RingOwner) --------------------------

    def lane_target(self) -> tuple[FpduDecoder | None, LaneWindows | None]:
        return None, None

    def lane_write_window(self, stag: int) -> None:
        return None

    def lane_placed(
        self, records: list[tuple[int, int, int, int, int]], octets: int, phase: int, now: float
    ) -> None:
        raise AssertionError("nothing is placed")

    def lane_resync(self) -> int:
        return 0

    def lane_feed(self, data: Buffer, now: float) -> None:
        self.core.receive_data(data, now)

    def take_events(self) -> list[Any]:
        return []


def _pair() -> tuple[socket.socket, socket.socket]:
    near, far = socket.socketpair()
    far.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    return near, far


def _read_all(sock: socket.socket, into: list[int]) -> None:
    total = 0
    while chunk := sock.recv(1 << 20):
        total += len(chunk)
    into.append(total)


def _lane(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    if on and not lanes.RECEIVE_ACTIVE:
        pytest.skip("the receive lane needs the accelerator")
    monkeypatch.setattr(lanes, "RECEIVE_ACTIVE", on)


# Cases: (request octets, answer octets, lane on). A request that fills the
# driver's receive buffer exactly: the next read is the FIN (the usual loop)
# or comes with it (the lane). A large answer: the kernel is full when the
# FIN is read, and most of the answer is still the core's.
CASES = [
    pytest.param(RECEIVE_CHUNK, 4096, False, id="full-read-then-fin"),
    pytest.param(RECEIVE_CHUNK, 4096, True, id="lane-data-with-fin"),
    pytest.param(4, 8 << 20, False, id="answer-larger-than-the-kernel-takes"),
    pytest.param(RECEIVE_CHUNK, 8 << 20, True, id="lane-large-answer"),
]


@pytest.mark.parametrize(("request_size", "answer", "lane"), CASES)
def test_sync_answer_before_fin(
    monkeypatch: pytest.MonkeyPatch, request_size: int, answer: int, lane: bool
) -> None:
    _lane(monkeypatch, lane)
    near, far = _pair()
    with near, far:
        far.sendall(b"R" * request_size)
        far.shutdown(socket.SHUT_WR)
        core = ScriptedCore(request_size, answer, 64 << 10)
        driver = Driver(near, core, lambda events: None)
        for _ in range(100):
            if driver.eof:
                break
            driver.wait(None)
        assert driver.eof
        got: list[int] = []
        reader = threading.Thread(target=_read_all, args=(far, got))
        reader.start()
        for _ in range(100_000):
            if driver.closed:
                break
            driver.wait(None)
        reader.join(30)
        assert driver.closed
        assert core.dropped == 0
        assert got == [answer]
        assert core.log[-1] == "fin"
        # Everything handed out came before the FIN reached the core.
        assert core.handed_out == answer


class ScriptedFront:
    """The least :class:`~iwarp.contract.DrivenFront`: opens the scripted core."""

    keep_open_after_eof = False
    fin_on_clean_close = False

    def __init__(self, core: ScriptedCore) -> None:
        self.core = core
        self.driver: CoreDriver | None = None

    def open(self, now: float, emss: int) -> ScriptedCore:
        assert self.driver is not None
        self.driver.started()  # the own-socket path (and so the receive lane)
        return self.core

    def dispatch(self, events: list[Any]) -> None:
        pass

    def lost(self) -> None:
        pass


@pytest.mark.parametrize(("request_size", "answer", "lane"), CASES)
def test_asyncio_answer_before_fin(
    monkeypatch: pytest.MonkeyPatch, request_size: int, answer: int, lane: bool
) -> None:
    _lane(monkeypatch, lane)

    async def run() -> tuple[ScriptedCore, list[int]]:
        loop = asyncio.get_running_loop()
        near, far = _pair()
        with far:
            far.sendall(b"R" * request_size)
            far.shutdown(socket.SHUT_WR)
            core = ScriptedCore(request_size, answer, 64 << 10)
            front = ScriptedFront(core)

            def make() -> CoreDriver:
                front.driver = CoreDriver(front)
                return front.driver

            await loop.connect_accepted_socket(make, near)
            driver = front.driver
            assert driver is not None
            for _ in range(2000):
                if driver._eof or driver.gone:
                    break
                await asyncio.sleep(0.005)
            got: list[int] = []
            await asyncio.wait_for(loop.run_in_executor(None, _read_all, far, got), 30)
            await asyncio.wait_for(driver.closed, 30)
            return core, got

    core, got = asyncio.run(run())
    assert core.dropped == 0
    assert got == [answer]
    assert core.fin and core.handed_out == answer


def _unread(sock: socket.socket) -> int:
    got = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", got)[0])


@pytest.mark.parametrize("lane", [False, True], ids=["usual", "lane"])
def test_a_read_that_fails_after_data_processes_the_data_first(
    monkeypatch: pytest.MonkeyPatch, lane: bool
) -> None:
    """The peer's octets and then its reset (SO_LINGER 0) in the socket: the
    blocking driver hands every octet that arrived to the core, then
    reports the loss (one C call of the receive lane reads both: the data
    goes to the core before its OSError does)."""
    _lane(monkeypatch, lane)
    size = 100_000  # what the default receive buffer holds
    with socket.create_server(("127.0.0.1", 0)) as server:
        far = socket.create_connection(server.getsockname())
        near, _ = server.accept()
    with near:
        far.sendall(b"D" * size)
        for _ in range(1000):  # all of it in our receive queue before the reset
            if _unread(near) >= size:
                break
            time.sleep(0.002)
        assert _unread(near) == size
        far.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        far.close()  # RST behind the data
        core = ScriptedCore(size + 1, 0, 1)
        driver = Driver(near, core, lambda events: None)
        if lane:
            assert core.lanes is not None
            driver._recv_lane = core.lanes.receive_ring()  # as after a bulk read
        for _ in range(1000):
            if driver.closed:
                break
            driver.wait(None)
        assert driver.closed
        assert core.received == size
        assert core.log[-1] == "lost" and "lost" not in core.log[:-1]
        assert isinstance(driver.error, ConnectionResetError)


class LastWordCore(ScriptedCore):
    """Answers the request, then must close (as after a Terminate). While
    it hands out its last batch, the peer's next octets arrive (``junk``
    sends them): input the driver never reads before it closes."""

    def __init__(self, answer: int, junk: socket.socket) -> None:
        super().__init__(4, answer, 64 << 10)
        self.junk = junk

    def data_to_send(self, limit: int | None = None) -> list[Buffer]:
        out = super().data_to_send(limit)
        if out and not self.pending:
            self.junk.sendall(b"J" * 1000)  # lands unread in the driver's socket
        return out

    @property
    def must_close(self) -> bool:
        return self.closed or (self.handed_out == self.answer and not self.pending)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """(ours, the peer's): the peer's receive window small, our send buffer
    large, so what we write waits in our kernel when we close."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        far = socket.socket()
        far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        far.connect(server.getsockname())
        near, _ = server.accept()
    near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    return near, far


def _read_to_end(sock: socket.socket) -> tuple[int, str]:
    total = 0
    try:
        while chunk := sock.recv(1 << 16):
            total += len(chunk)
    except ConnectionResetError:
        return total, "reset"
    return total, "fin"


ANSWER = 128 << 10


def test_sync_close_with_unread_input_loses_nothing() -> None:
    """The blocking driver closes (the core must) with the peer's octets
    unread and its last answer still in the kernel: the write side is shut
    and the input discarded first, so the peer gets all of it and a FIN,
    not a reset that drops what was not sent yet."""
    near, far = _tcp_pair()
    with far:
        far.sendall(b"REQ!")
        core = LastWordCore(ANSWER, far)
        driver = Driver(near, core, lambda events: None)
        for _ in range(100):
            if driver.closed:
                break
            driver.wait(None)
        assert driver.closed
        assert _read_to_end(far) == (ANSWER, "fin")


def test_asyncio_close_with_unread_input_loses_nothing() -> None:
    """The same for the asyncio driver: the transport stops reading when it
    closes, so the peer's octets stay unread; they are discarded (our
    write side shut) right before the socket closes."""

    async def run() -> tuple[int, str]:
        loop = asyncio.get_running_loop()
        near, far = _tcp_pair()
        with far:
            far.sendall(b"REQ!")
            front = ScriptedFront(LastWordCore(ANSWER, far))

            def make() -> CoreDriver:
                front.driver = CoreDriver(front)
                return front.driver

            await loop.connect_accepted_socket(make, near)
            assert front.driver is not None
            await asyncio.wait_for(front.driver.closed, 30)
            return await asyncio.wait_for(loop.run_in_executor(None, _read_to_end, far), 30)

    assert asyncio.run(run()) == (ANSWER, "fin")
