"""An asyncio event loop in a thread of the test's own, for the behavioural
suites that drive asyncio servers and clients from plain test code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """The loop, the servers started on it, the handler futures and what the
    handlers raised; :meth:`finish` stops it all and re-raises the first."""

    def __init__(
        self,
        timeout: float,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self.timeout = timeout
        self.loop = loop_factory()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._servers: list[asyncio.Server] = []
        self._handlers: list[Future[None]] = []
        self.errors: list[BaseException] = []

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, self.timeout), self.loop)
        return future.result()

    def join(self) -> None:
        """Wait for the server handlers."""
        for done in self._handlers:
            done.result(self.timeout)

    def finish(self) -> None:
        try:
            self.join()

            async def stop() -> None:
                for server in self._servers:
                    server.close()
                    await server.wait_closed()
                await self.loop.shutdown_default_executor()

            self._call(stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(self.timeout)
            self.loop.close()
        if self.errors:
            raise self.errors[0]
