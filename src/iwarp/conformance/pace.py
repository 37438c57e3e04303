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

One kind of wait no answer bounds: a close from the target's own startup timer (RFC 5044
§7.1.2 rules 8 and 10), which fires on no input at all and has no value in the RFCs
(iwarp and siw: 5-10 s; Chelsio's cxgb4: 60 s). Such a wait lasts :class:`StartupWait`:
:data:`STARTUP_WAIT` by default, after which a missing close is no verdict (the case is
skipped, saying how to wait longer), or as long as the user chose, after which it is one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

__all__ = ["BULK", "FACTOR", "FLOOR", "STARTUP_WAIT", "STARTUP_WAIT_MAX", "Pace", "StartupWait"]

#: How many times the target's slowest answer a wait for an absent one lasts.
FACTOR: Final = 4.0
#: The shortest such wait, in seconds: scheduling noise on a busy host, not the target.
FLOOR: Final = 0.1
#: Octets sent at once beyond which the answer times say nothing of the transfer.
BULK: Final = 4096
#: Seconds the startup-timer cases wait for a close unless told otherwise: a timer of up to
#: this long is judged; the idle cases wait beside the others, and at ``-j 1`` a --strict
#: run's other cases against a target that drops faults silently take about as long, so
#: the wait adds little to the run.
STARTUP_WAIT: Final = 20.0
#: The longest wait ``--startup-wait`` may choose, in seconds.
STARTUP_WAIT_MAX: Final = 600.0


@dataclass(frozen=True, slots=True)
class StartupWait:
    """How long the cases on the target's own startup timer wait for its close.

    ``chosen``: the user set ``seconds`` (``--startup-wait``), so a timer that did not
    fire within it is a verdict: the case fails. By default a missing close says only that
    the timer, if any, is longer than ``seconds``: the case is skipped with that reason.
    """

    seconds: float = STARTUP_WAIT
    chosen: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.seconds <= STARTUP_WAIT_MAX:  # NaN fails this too
            raise ValueError(
                f"a startup wait is more than 0 and at most {STARTUP_WAIT_MAX:g} s, "
                f"not {self.seconds!r}"
            )

    def unjudged(self, what: str) -> str:
        """Why a case that saw no close within the default wait is skipped."""
        return (
            f"{what}: no close within {self.seconds:g} s; --startup-wait S to judge a longer "
            "timer (the RFCs give it no value; Chelsio's cxgb4 waits 60 s)"
        )


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
