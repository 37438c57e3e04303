"""Progress of long runs on standard error.

A run that lasts longer than :data:`DELAY` seconds (or any run, with
``--progress``) reports its counters every ``--interval`` seconds: on a
terminal as one line that rewrites itself (labelled totals and the rate of
the last interval), otherwise as one line per interval as iperf prints
them (what moved in that interval and its rate), so logs keep the history.
Nothing is printed for an interval in which nothing moved (an idle
listener, a ping server between clients, a client still waiting for its
connection): a line says that something moved. :class:`ProgressMeter`
decides the text for a moment (no I/O, no clock); :class:`Progress` runs it
on the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TextIO

from iwarp.cli._args import format_octets, format_rate

__all__ = ["DELAY", "Progress", "ProgressMeter", "add_progress_options"]

#: Runs shorter than this print no progress unless asked.
DELAY: Final = 2.0


def add_progress_options(parser: argparse.ArgumentParser) -> None:
    """``--progress`` and ``--interval`` (the same in every command)."""
    parser.add_argument(
        "--progress",
        action="store_true",
        help=f"report progress on stderr from the start (default: after {DELAY:g} s, "
        "and never with --json)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between progress reports (default 1)",
    )


@dataclass
class ProgressMeter:
    """The progress text of one run; times are ``time.monotonic()`` values."""

    start: float
    #: Whether the text rewrites one terminal line.
    terminal: bool
    label: str = ""
    #: Print nothing for an interval in which nothing moved (an idle run
    #: stays silent); False reports every interval.
    idle_quiet: bool = True
    _last_time: float | None = None
    _last_messages: int = 0
    _last_octets: int = 0
    _shown: bool = False

    def report(self, now: float, messages: int, octets: int) -> str:
        """The text to write at ``now`` for the counters so far (totals), with
        ``\\r`` or ``\\n`` as fits; empty for an idle interval of an
        ``idle_quiet`` meter."""
        elapsed = now - self.start
        since = self.start if self._last_time is None else self._last_time
        moved_messages = messages - self._last_messages
        moved = octets - self._last_octets
        self._last_time, self._last_messages, self._last_octets = now, messages, octets
        if self.idle_quiet and moved_messages == 0 and moved == 0:
            return ""
        self._shown = True
        rate = format_rate(moved, now - since)
        prefix = f"{self.label}: " if self.label else ""
        if self.terminal:
            return (
                f"\r{prefix}{elapsed:7.1f} s  total {messages} messages, {format_octets(octets)}"
                f"  last {now - since:.1f} s: {rate}\x1b[K"
            )
        return (
            f"{prefix}[{since - self.start:7.1f}-{elapsed:7.1f} s] {moved_messages} messages, "
            f"{format_octets(moved)}, {rate}\n"
        )

    def finish(self) -> str:
        """What ends the progress output (clears a terminal line)."""
        return "\r\x1b[K" if self.terminal and self._shown else ""


class Progress:
    """Writes a :class:`ProgressMeter`'s reports while the run goes on.

    ``counters`` gives (messages, octets) so far. Nothing is printed with
    ``quiet`` (``--json``) unless ``forced`` (``--progress``); unless
    ``idle_quiet`` is False nothing is printed while nothing moves.
    """

    def __init__(
        self,
        counters: Callable[[], tuple[int, int]],
        *,
        forced: bool = False,
        quiet: bool = False,
        interval: float = 1.0,
        label: str = "",
        stream: TextIO | None = None,
        delay: float = DELAY,
        idle_quiet: bool = True,
    ) -> None:
        self._counters = counters
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = forced or not quiet
        self._delay = 0.0 if forced else delay
        self._interval = max(interval, 0.01)
        terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        self.meter = ProgressMeter(time.monotonic(), terminal, label, idle_quiet)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Progress:
        """Start reporting (from the running event loop); returns self."""
        if self._enabled and self._task is None:
            self.meter.start = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def stop(self) -> None:
        """Stop reporting; a terminal line is cleared."""
        if self._task is None:
            return
        self._task.cancel()
        self._task = None
        self._write(self.meter.finish())

    async def _run(self) -> None:
        await asyncio.sleep(max(0.0, self._delay - self._interval))
        while True:
            await asyncio.sleep(self._interval)
            messages, octets = self._counters()
            self._write(self.meter.report(time.monotonic(), messages, octets))

    def _write(self, text: str) -> None:
        if text:
            with contextlib.suppress(OSError, ValueError):
                self._stream.write(text)
                self._stream.flush()
