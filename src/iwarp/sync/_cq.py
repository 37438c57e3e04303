"""The blocking completion queue: :class:`~iwarp.rdma.front.CompletionQueueFront`
with the calls that drive the sockets of the queue pairs it serves."""

from __future__ import annotations

from typing import cast

from iwarp.rdma.errors import ConnectionTerminatedError
from iwarp.rdma.front import CompletionQueueFront
from iwarp.rdmap.work import Completion
from iwarp.sync._calls import WaitTimeoutError, clock, deadline_after, wait_any
from iwarp.sync._driver import Driver

__all__ = ["CompletionQueue"]


class CompletionQueue(CompletionQueueFront):
    """Completions of work requests, in order (verbs' CQ; its semantics:
    :class:`~iwarp.rdma.front.CompletionQueueFront`); :meth:`poll` and
    :meth:`wait` drive the sockets of every queue pair it serves."""

    def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take up to ``max_entries`` (default: all) completions; never blocks.

        Reads what the kernel already holds for the attached queue pairs
        first, as ``ibv_poll_cq`` finds what the NIC did meanwhile.
        """
        drivers = cast(list[Driver], self._drivers())
        if drivers:
            wait_any(drivers, clock())
        return self._take(max_entries)

    def wait(self, *, timeout: float | None = None) -> Completion:
        """The next completion, waiting for it.

        :raises ConnectionTerminatedError: every attached queue pair is over
            and no completion is left.
        :raises WaitTimeoutError: none came in time.
        """
        deadline = deadline_after(timeout)
        while not self._items:
            drivers = cast(list[Driver], self._drivers())
            if not drivers:
                raise ConnectionTerminatedError(self._why())
            if deadline is not None and clock() >= deadline:
                raise WaitTimeoutError("timed out waiting for a completion")
            if not wait_any(drivers, deadline) and not self._items:
                for driver in drivers:
                    driver.check_stalled("a completion")
                raise ConnectionTerminatedError(self._why())
        return self._items.popleft()
