"""How long a case waits for an answer that may never come: as long as the target showed
it takes to answer, not a fixed number of seconds.

Many cases end on silence or on a connection still open: a broken Request the target
must close, a Terminate it must not answer, a broken carrier it may drop. A fixed wait
costs its whole length against every target that stays silent (a target that drops
faults silently paid 35 s for 14 fixed waits of 1-5 s) and is still only a guess for a
slow one. Every answer the target gives instead is timed (its Reply to a Request, its
answer to the hello, to a carrier, to a fence) and such a wait lasts :data:`FACTOR` times
the slowest of them, at least :data:`FLOOR` and never longer than the case's own bound.

What the timed answers cannot predict is how long tens of kilobytes take to reach the
target: Linux siw in the qemu guest answered the carrier (52 octets) within 10 ms and
20-70 KB of garbage 0.33-0.36 s after it was sent. A wait after more than :data:`BULK`
octets lasts at least the data phase's cooperation wait (1 s).
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["BULK", "FACTOR", "FLOOR", "Pace"]

#: How many times the target's slowest answer a wait for an absent one lasts.
FACTOR: Final = 4.0
#: The shortest such wait, in seconds: scheduling noise on a busy host, not the target.
FLOOR: Final = 0.1
#: Octets sent at once beyond which the answer times say nothing of the transfer.
BULK: Final = 4096


class Pace:
    """The answer times a target showed in one run (shared by its cases, thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slowest = 0.0
        self._count = 0

    def saw(self, seconds: float) -> None:
        """The target answered something ``seconds`` after the tool sent it."""
        with self._lock:
            self._slowest = max(self._slowest, seconds)
            self._count += 1

    @property
    def slowest(self) -> float:
        """The slowest answer so far (0.0 before the first)."""
        with self._lock:
            return self._slowest

    def wait(self, *, own: float | None = None, cap: float | None = None) -> float:
        """Seconds to wait for an answer that may not come.

        ``own``: the time the target took to answer the same kind of message on the same
        connection just before (a carrier, a fence): the closest measure, used alone.
        Without it, the slowest answer of the run. ``cap``: the case's own bound.
        """
        with self._lock:
            slowest, count = self._slowest, self._count
        if own is None and not count and cap is not None:
            return cap  # nothing to go by yet: the case's own bound
        seconds = max(FLOOR, FACTOR * (slowest if own is None else own))
        return seconds if cap is None else min(cap, seconds)

    def describe(self, *, own: float | None = None) -> str:
        """Why a wait is as long as it is, for a case's log and its failure."""
        if own is not None:
            return f"{FACTOR:g} times the {own:.3f}s its answer took, at least {FLOOR:g}s"
        with self._lock:
            slowest, count = self._slowest, self._count
        if not count:
            return "the case's own bound: the target has answered nothing yet"
        return (
            f"{FACTOR:g} times the slowest of the {count} answers the target gave so far "
            f"({slowest:.3f}s), at least {FLOOR:g}s"
        )
