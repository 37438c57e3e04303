"""The one semantics of a completion queue in every adapter
(:class:`CompletionQueueFront`); the adapters add the calls that wait."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from iwarp.contract import FrontDriver
from iwarp.rdmap.work import Completion


class AttachedQueuePair(Protocol):
    """What a queue uses of the queue pairs it serves
    (:class:`iwarp.rdma.front.QueuePairFront`, which imports this module)."""

    @property
    def _driver(self) -> FrontDriver: ...

    @property
    def end_reason(self) -> str: ...


__all__ = ["CompletionQueueFront"]


class CompletionQueueFront:
    """Completions of work requests, in order (verbs' CQ), in every adapter.

    One queue may serve several queue pairs, and a queue pair's send and
    receive work (pass it as ``send_cq`` and/or ``recv_cq``; ``shared_cq``
    makes one for both). Each completion is moved here from the endpoint
    that made it, so :meth:`poll` returns entries of every attached queue
    pair in the order they completed. The adapters add ``wait``.
    """

    def __init__(self) -> None:
        self._items: deque[Completion] = deque()
        self._fronts: list[AttachedQueuePair] = []
        #: One-shot callbacks of waiting calls: run when entries arrive or
        #: an attached queue pair's TCP connection is gone.
        self._waiting: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._items)

    def _take(self, max_entries: int | None) -> list[Completion]:
        items = self._items
        n = len(items) if max_entries is None else min(max_entries, len(items))
        return [items.popleft() for _ in range(n)]

    def _push(self, completions: list[Completion]) -> None:
        self._items.extend(completions)
        self._notify()

    def _notify(self) -> None:
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for callback in waiting:
                callback()

    def _drivers(self) -> list[FrontDriver]:
        """The drivers of the attached queue pairs whose TCP is not gone."""
        return [front._driver for front in self._fronts if not front._driver.gone]

    def _why(self) -> str:
        """Why no completion can come any more."""
        reasons = {front.end_reason for front in self._fronts}
        return "; ".join(sorted(reasons)) if reasons else "no queue pair uses this queue"

    def _attach(self, front: AttachedQueuePair) -> None:
        if front not in self._fronts:
            self._fronts.append(front)

    def _detach(self, front: AttachedQueuePair) -> None:
        if front in self._fronts:
            self._fronts.remove(front)
        self._notify()
