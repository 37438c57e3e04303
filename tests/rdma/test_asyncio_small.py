"""The asyncio driver's own write of a small message's FPDU
(``CoreDriver.write``, what the asyncio ``QueuePair.send`` hands it
from the small-message lane): one ``write`` on the socket while the
transport holds nothing, else behind what it holds, in order; its reaction
to input that causes nothing (no pull from the core); and a list of work
requests posted at once (``post_send_list``)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from iwarp.asyncio.driver import CoreDriver
from iwarp.asyncio.rdma import QueuePair, connect, serve
from iwarp.rdmap.work import SendWR

from .test_asyncio_lanes import LoopFactory, loop_factory, run

__all__ = ["loop_factory"]


class _Core:
    """A core with nothing of its own to send; counts the driver's pulls."""

    borrows_input = False
    lanes = None
    must_close = False

    def __init__(self) -> None:
        self.lost: list[str] = []
        self.pulls = 0
        self.has_data_to_send = False

    def data_to_send(self, limit: int | None = None) -> list[Any]:
        self.pulls += 1
        self.has_data_to_send = False
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
        return []


class _Front:
    """The front the driver serves: it opens the core and takes its events."""

    keep_open_after_eof = False
    fin_on_clean_close = False

    def __init__(self) -> None:
        self.core = _Core()

    def open(self, now: float, emss: int) -> _Core:
        return self.core

    def dispatch(self, events: list[Any]) -> None:
        pass

    def lost(self) -> None:
        pass


async def _driver_on(sock: socket.socket, front: _Front) -> CoreDriver:
    """A driver on ``sock`` for ``front`` (the caller keeps the front: the
    driver holds it weakly)."""
    loop = asyncio.get_running_loop()
    _, driver = await loop.connect_accepted_socket(
        lambda: CoreDriver(front),  # type: ignore[arg-type]
        sock,
    )
    driver.started()
    assert driver._fd is not None  # writes on the socket itself
    return driver


def test_frames_the_kernel_does_not_take_wait_in_order(loop_factory: LoopFactory) -> None:
    """Frames written while the peer does not read: the kernel takes the
    first ones, one maybe in part; the transport keeps the rest, and every
    later frame goes behind it: the peer reads them all, in order."""
    frames = [bytes([n % 251]) * (1000 + n % 97) for n in range(3000)]
    expected = b"".join(frames)

    async def main() -> None:
        left, right = socket.socketpair()
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        right.setblocking(False)
        front = _Front()
        driver = await _driver_on(left, front)
        assert driver.transport is not None
        for frame in frames:
            driver.write(frame)
        assert driver.transport.get_write_buffer_size() > 0  # the kernel was full
        loop = asyncio.get_running_loop()
        got = bytearray()
        while len(got) < len(expected):
            got += await loop.sock_recv(right, 1 << 16)
        assert bytes(got) == expected
        driver.abort()
        right.close()

    run(loop_factory, main)


def test_a_frame_written_on_a_failed_connection_ends_it(loop_factory: LoopFactory) -> None:
    """The peer reset the connection: the write fails, the transport is
    aborted and the core hears of the loss, with the write's error."""

    async def main() -> None:
        left, right = socket.socketpair()
        front = _Front()
        driver = await _driver_on(left, front)
        right.close()
        driver.write(b"x" * 64)
        await asyncio.wait_for(driver.closed, 10)
        core = front.core
        assert core.lost and "TCP connection lost" in core.lost[0]

    run(loop_factory, main)


@pytest.mark.parametrize("output", [False, True])
def test_input_pulls_from_the_core_only_when_it_has_output(
    loop_factory: LoopFactory, output: bool
) -> None:
    """Input that caused no output (a small message taken by the lane) is
    not followed by a pull from the core; input that did is."""

    async def main() -> None:
        left, right = socket.socketpair()
        front = _Front()
        driver = await _driver_on(left, front)
        core = front.core
        pulls = core.pulls
        core.has_data_to_send = output
        driver.feed(b"input")
        assert (core.pulls > pulls) is output
        driver.abort()
        right.close()

    run(loop_factory, main)


def test_a_posted_list_arrives_in_order(loop_factory: LoopFactory) -> None:
    """Sends posted as one list on the asyncio adapter: each completes in
    send_cq with its wr_id, and the peer gets them in order."""
    messages = [bytes([n]) * (1 + n) for n in range(40)]
    got: list[bytes] = []

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            for _ in messages:
                got.append(await qp.receive())
            await qp.send(b"done")
            await qp.receive()

        server = await serve(handler, "127.0.0.1", 0, receive_buffers=64, receive_size=256)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        qp.post_send_list([SendWR(m, wr_id=n) for n, m in enumerate(messages)])
        done = [await qp.send_cq.wait() for _ in messages]
        assert [c.wr_id for c in done] == list(range(len(messages)))
        assert all(c.ok for c in done)
        assert await qp.receive() == b"done"
        await qp.send(b"bye")
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
    assert got == messages


def test_sends_wait_while_the_peer_does_not_read(loop_factory: LoopFactory) -> None:
    """Small messages sent at once still wait when the transport is over its high-water
    mark: against a peer that stops reading, ``send`` blocks and the sender's buffer stays
    bounded; once the peer reads again, every message arrives."""
    count = 0
    paused = asyncio.Event()
    resume = asyncio.Event()
    got: list[bytes] = []

    async def main() -> None:
        nonlocal count

        async def handler(qp: QueuePair) -> None:
            transport = qp._driver.transport
            assert transport is not None
            transport.pause_reading()
            paused.set()
            await resume.wait()
            transport.resume_reading()
            while len(got) < count:
                got.append(await qp.receive())

        server = await serve(handler, "127.0.0.1", 0, receive_buffers=64, receive_size=256)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        await paused.wait()
        transport = qp._driver.transport
        assert transport is not None
        high = transport.get_write_buffer_limits()[1]
        blocked = False
        for n in range(200_000):  # bounded: ~15 MB if nothing ever blocked
            try:
                await asyncio.wait_for(qp.send(n.to_bytes(4, "big") * 16), 0.5)
            except TimeoutError:
                blocked = True  # this message is in the transport: it arrives too
                count = n + 1
                break
            assert transport.get_write_buffer_size() <= high + 64 + 32
        assert blocked, "200000 sends never waited for a peer that does not read"
        resume.set()
        for _ in range(600):
            if len(got) == count:
                break
            await asyncio.sleep(0.05)
        assert [int.from_bytes(m[:4], "big") for m in got] == list(range(count))
        await qp.close()
        server.close()
        await server.wait_closed()

    run(loop_factory, main)


def test_a_timed_out_wait_for_closed_leaves_the_connection_alone(
    loop_factory: LoopFactory,
) -> None:
    """``wait_for(qp.closed, t)`` timing out cancels the caller's wait only: the queue pair
    still works and ``closed`` resolves when TCP really goes."""

    async def main() -> None:
        async def handler(qp: QueuePair) -> None:
            await qp.send(await qp.receive())
            await qp.receive()

        server = await serve(handler, "127.0.0.1", 0, receive_buffers=4, receive_size=64)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port, receive_buffers=2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(qp.closed, 0.05)
        assert not qp.closed.done()
        await qp.send(b"still here")
        assert await qp.receive() == b"still here"
        await qp.send(b"bye")
        await asyncio.wait_for(qp.closed, 10)  # the handler returned: its end closed
        server.close()
        await server.wait_closed()

    run(loop_factory, main)
