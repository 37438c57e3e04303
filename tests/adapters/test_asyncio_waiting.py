"""How the asyncio driver wakes the calls that wait on it (the fronts call
``wake``; each adapter call waits in ``woken`` or ``wait_until``), without
a transport."""

from __future__ import annotations

import asyncio
from typing import Any

from iwarp.asyncio.driver import CoreDriver, wait_until


class _Front:
    """The least a driver needs of a front; nothing is opened here."""

    keep_open_after_eof = True
    fin_on_clean_close = False

    def open(self, now: float, emss: int) -> Any:
        raise AssertionError("TCP is not opened in this test")

    def dispatch(self, events: list[Any]) -> None:
        pass

    def lost(self) -> None:
        pass


def test_wake_resumes_every_input_waiter_and_a_key_only_its_own() -> None:
    async def main() -> list[str]:
        front = _Front()
        driver = CoreDriver(front)
        order: list[str] = []

        async def waiter(name: str, key: object = None) -> None:
            await driver.woken(key)
            order.append(name)

        tasks = [
            asyncio.create_task(waiter("a")),
            asyncio.create_task(waiter("b")),
            asyncio.create_task(waiter("w7", 7)),
        ]
        await asyncio.sleep(0)
        driver.wake(8)  # nobody waits for 8
        driver.wake()  # a and b, not the keyed one
        await asyncio.sleep(0)
        assert order == ["a", "b"]
        driver.wake(7)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["a", "b", "w7"]


def test_tcp_loss_wakes_every_waiter_and_wait_until_returns() -> None:
    async def main() -> None:
        front = _Front()
        driver = CoreDriver(front)
        keyed = asyncio.ensure_future(driver.woken(3))
        until = asyncio.create_task(wait_until(driver, lambda: False))
        await asyncio.sleep(0)
        assert not keyed.done() and not until.done()
        driver.connection_lost(None)  # no transport was made: only the wake-ups
        await asyncio.wait_for(asyncio.gather(keyed, until), 5)
        assert driver.gone

    asyncio.run(main())
