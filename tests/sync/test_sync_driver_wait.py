"""The blocking driver's wait when input is there at its first look (the
busy-polling ping-pong's usual case): the input is handled without asking
the core's timer first, and a timer that is due still runs unless the core
says it is settled (which means it has none)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from iwarp._typing import Buffer
from iwarp.sync._driver import Driver


class Core:
    """A core that only records what the driver asks of it."""

    borrows_input = False
    lanes = None

    def __init__(self, settled: bool, timer: float | None) -> None:
        self._settled = settled
        self.timer = timer
        self.received = bytearray()
        self.timer_asks = 0
        self.timers_run = 0

    def receive_data(self, data: Buffer, now: float) -> list[Any]:
        self.received += data
        return []

    def settled(self) -> bool:
        return self._settled

    @property
    def has_data_to_send(self) -> bool:
        return False

    @property
    def must_close(self) -> bool:
        return False

    def data_to_send(self, limit: int | None = None) -> list[Buffer]:
        return []

    def take_events(self) -> list[Any]:
        return []

    def get_timer(self) -> float | None:
        self.timer_asks += 1
        return self.timer

    def handle_timer(self, now: float) -> list[Any]:
        self.timers_run += 1
        self.timer = None
        return []


@pytest.mark.parametrize(("settled", "timer"), [(True, None), (False, None), (False, 0.0)])
def test_input_at_the_first_look(settled: bool, timer: float | None) -> None:
    near, far = socket.socketpair()
    with near, far:
        core = Core(settled, timer)
        driver = Driver(near, core, lambda events: None)  # type: ignore[arg-type]
        driver.busy_poll = 1.0  # spins: input is read without sleeping
        far.sendall(b"ping")
        assert driver.wait(None)
        assert bytes(core.received) == b"ping"
        # Settled: no timer, not asked. Else the timer is asked after the
        # input, and one that is due (0.0, long past) runs.
        assert core.timer_asks == (0 if settled else 1)
        assert core.timers_run == (1 if timer is not None else 0)
        driver.close()
