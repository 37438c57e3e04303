"""The asyncio driver's send-lane pump when the socket fills and frees at once.

When ``sendmsg`` finds the socket full, the driver hands the transport one
piece of the message and waits for ``resume_writing``. The transport pauses
the protocol only if it had to buffer that piece: when the kernel took the
whole piece at once (the peer read in between), nothing would ever call
``resume_writing``, so the pump must go on by itself (a perf sweep hung on
this under load).
"""

from __future__ import annotations

import asyncio
from typing import Any

from iwarp.asyncio.driver import CoreDriver
from iwarp.rdma.lanes import LaneState


class _Lane:
    """Full at the first look, then done; ``copy`` hands out 10 octets."""

    def __init__(self) -> None:
        self.total = 100
        self.sent = 0
        self.looks = 0

    @property
    def done(self) -> bool:
        return self.sent >= self.total

    def pump(self, fd: int) -> LaneState:
        self.looks += 1
        if self.looks == 1:
            self.sent += 40
            return LaneState.FULL
        self.sent = self.total
        return LaneState.DONE

    def copy(self, out: bytearray | memoryview) -> int:
        self.sent += 10
        return 10


class _Transport:
    """Takes every write at once, as a kernel with room does."""

    def __init__(self, driver: CoreDriver, *, buffers: bool) -> None:
        self.driver = driver
        self.buffers = buffers
        self.written = 0

    def is_closing(self) -> bool:
        return False

    def write(self, data: Any) -> None:
        self.written += len(data)
        if self.buffers:
            self.driver.pause_writing()


class _Core:
    def __init__(self) -> None:
        self.sent_lanes: list[object] = []

    def lane_sent(self, lane: object) -> None:
        self.sent_lanes.append(lane)

    def take_events(self) -> list[object]:
        return []


def _pump(*, buffers: bool) -> tuple[bool, _Lane, _Core, _Transport]:
    async def run() -> tuple[bool, _Lane, _Core, _Transport]:
        driver = CoreDriver()
        core = _Core()
        lane = _Lane()
        transport = _Transport(driver, buffers=buffers)
        driver.core = core  # type: ignore[assignment]
        driver.transport = transport  # type: ignore[assignment]
        driver._fd = 3
        driver._lane = lane  # type: ignore[assignment]
        return driver._pump_lane(), lane, core, transport

    return asyncio.run(run())


def test_a_piece_the_kernel_took_at_once_lets_the_lane_go_on() -> None:
    finished, lane, core, transport = _pump(buffers=False)
    assert finished and lane.looks == 2 and core.sent_lanes == [lane]
    assert transport.written == 10


def test_a_piece_the_transport_buffered_waits_for_resume_writing() -> None:
    finished, lane, core, _ = _pump(buffers=True)
    assert not finished and lane.looks == 1 and core.sent_lanes == []
