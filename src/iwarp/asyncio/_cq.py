"""The asyncio completion queue: :class:`~iwarp.rdma.front.CompletionQueueFront`
to poll or to await."""

from __future__ import annotations

import asyncio
from functools import partial

from iwarp.asyncio._within import within
from iwarp.asyncio.driver import wake
from iwarp.rdma.errors import ConnectionTerminatedError
from iwarp.rdma.front import CompletionQueueFront
from iwarp.rdmap.work import Completion

__all__ = ["CompletionQueue"]


class CompletionQueue(CompletionQueueFront):
    """Completions of work requests, in order (verbs' CQ), to poll or to await.

    One queue may serve several queue pairs, and a queue pair's send and
    receive work: pass it to :func:`connect` or :func:`serve` as
    ``send_cq`` and/or ``recv_cq`` (``shared_cq``: one for both).
    """

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` (default: all) completions without waiting."""
        return self._take(max_entries)

    async def wait(self, *, timeout: float | None = None) -> Completion:
        """The next completion.

        :raises ConnectionTerminatedError: every attached queue pair is over
            and no completion is left.
        :raises WaitTimeoutError: none came in time.
        """
        return await within(self._next(), timeout, "a completion")

    async def _next(self) -> Completion:
        while not self._items:
            if not self._drivers():
                raise ConnectionTerminatedError(self._why())
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(partial(wake, waiter))
            await waiter
        return self._items.popleft()
