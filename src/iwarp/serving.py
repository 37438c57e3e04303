"""What a server does with its connections, whichever driver runs it.

Nothing here waits or touches a socket:

* **reports**: an error that ended a connection, or an application
  handler's exception, is reported once with the peer's address, to the
  application's :data:`FailureHook` when it gave one, else on the ``iwarp``
  logger (:func:`report`, :func:`handler_failed`);
* **memory after a burst**: :class:`BurstRelease` decides when a server
  whose connections end runs a full collection (see
  docs/performance.md, "Idle connections before MPA startup").

The asyncio servers (:func:`iwarp.asyncio.server.start_server` and the
``serve`` calls built on it) use both; the blocking adapter has no server
loop (its listeners accept one connection per call).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable

__all__ = ["RELEASE_AFTER", "BurstRelease", "FailureHook", "handler_failed", "report"]

log = logging.getLogger("iwarp")

#: Called with an error that ended a connection before (or outside) the
#: application's handler, and the peer's address.
FailureHook = Callable[[BaseException, object], None]


def report(on_failure: FailureHook | None, exc: BaseException, peer: object) -> None:
    """Report an error that ended a connection outside the handler, once."""
    if on_failure is not None:
        on_failure(exc, peer)
    else:
        log.info("connection from %s ended: %s", peer, exc)


def handler_failed(on_failure: FailureHook | None, exc: BaseException, peer: object) -> None:
    """Report the exception an application's handler raised, once: to
    ``on_failure`` when given, else logged as an error."""
    if on_failure is not None:
        on_failure(exc, peer)
    else:
        log.error("handler for %s failed: %r", peer, exc)


#: A server whose open connections fall to a quarter of a high-water mark of
#: at least this many runs one full collection (:class:`BurstRelease`); 0: never.
RELEASE_AFTER = 1024


class BurstRelease:
    """When a server runs ``gc.collect()`` as its connections end.

    After a burst (a high-water mark of at least ``threshold`` open
    connections, :data:`RELEASE_AFTER` by default), a collection runs, if
    the cyclic GC is enabled, each time the open connections fall to a
    quarter of the last mark and once more when none is left: a few
    collections per burst. Ended connections are freed by reference
    counting; what the collection gives back is memory the allocator
    keeps: a full collection empties CPython's free lists (tuples, dicts,
    floats kept for reuse), whose scattered entries hold whole 1 MiB
    pymalloc arenas. After 10,000 idle connections it returned some 30 MB
    in about 12 ms.
    """

    __slots__ = ("_burst", "_high_water", "threshold")

    def __init__(self, threshold: int | None = None) -> None:
        #: The smallest high-water mark that counts as a burst (0: never).
        self.threshold = RELEASE_AFTER if threshold is None else threshold
        self._high_water = 0
        self._burst = False  # a mark >= threshold since the last collection at 0

    def opened(self, open_now: int) -> None:
        """A connection was accepted; ``open_now`` are open with it."""
        self._high_water = max(self._high_water, open_now)
        self._burst = self._burst or (0 < self.threshold <= self._high_water)

    def ended(self, open_now: int) -> bool:
        """A connection ended; ``open_now`` are left. Runs a full collection
        when one is due (and the cyclic GC is enabled); returns whether one
        was due."""
        if not self._burst or (open_now > self._high_water // 4 and open_now):
            return False
        # Down to a quarter (then a quarter of that...) and once more at none.
        self._high_water = open_now
        self._burst = open_now > 0
        if gc.isenabled():
            gc.collect()
        return True
