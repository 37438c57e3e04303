"""Progress of long runs on standard error.

A run that lasts longer than :data:`DELAY` seconds (or any run, with
``--progress``) reports its counters every ``--interval`` seconds: on a
terminal as one line that rewrites itself (labelled totals and the rate of
the last interval), otherwise as one line per interval as iperf prints
them (what moved in that interval and its rate), so logs keep the history.
Nothing is printed for an interval in which nothing moved (an idle
listener, a ping server between clients, a client still waiting for its
connection): a line says that something moved.

A message counts once it is complete, so a long one (``demo --size 3G
--count 1``) would show nothing for the whole transfer: where the
operating system says how many octets TCP moved on the connections
(:class:`WireOctets`, Linux's ``TCP_INFO``), the octets moved since the
last completed message are added to the total, read once per report and
never on the data path. They are TCP payload, MPA, DDP and RDMAP framing
included (a few percent over the message's own octets), so the total never
goes back when the message completes. :class:`ProgressMeter`
decides the text for a moment (no I/O, no clock); :class:`Progress` runs it
on the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from iwarp.cli._args import format_octets, format_rate

__all__ = [
    "DELAY",
    "Progress",
    "ProgressMeter",
    "WireOctets",
    "add_progress_options",
    "tcp_octets",
]

#: Runs shorter than this print no progress unless asked.
DELAY: Final = 2.0


#: struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received,
#: two u64 at offset 120 (Linux 4.1 and later).
_TCP_INFO_OCTETS: Final = struct.Struct("=QQ")
_TCP_INFO_OFFSET: Final = 120
_TCP_INFO: Final[int | None] = getattr(socket, "TCP_INFO", None)


def tcp_octets(sock: Any) -> int | None:
    """Octets TCP moved on ``sock`` so far: sent and acknowledged by the
    peer plus received, from ``TCP_INFO``; None where the system does not
    say (not Linux, an older kernel, a closed socket)."""
    if _TCP_INFO is None or sock is None:
        return None
    size = _TCP_INFO_OFFSET + _TCP_INFO_OCTETS.size
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, size)
    except (OSError, ValueError, AttributeError):
        return None
    if len(info) < size:
        return None
    acked, received = _TCP_INFO_OCTETS.unpack_from(info, _TCP_INFO_OFFSET)
    return int(acked + received)


@dataclass
class WireOctets:
    """The octets TCP moved on a set of connections, for progress within a
    message: connections are added as they open and dropped as they end
    (what an ended one moved is kept). Called for the total; None where
    the system does not say."""

    _sockets: dict[int, Any] = field(default_factory=dict)
    _ended: int = 0

    def add(self, sock: Any) -> None:
        """Count ``sock`` (a socket or a transport's ``"socket"``) from now on."""
        if sock is not None:
            self._sockets[id(sock)] = sock

    def drop(self, sock: Any) -> None:
        """``sock`` is ending: keep what it moved, stop asking it."""
        if self._sockets.pop(id(sock), None) is not None:
            self._ended += tcp_octets(sock) or 0

    def __call__(self) -> int | None:
        if not self._sockets and not self._ended:
            return None
        known = [tcp_octets(sock) for sock in self._sockets.values()]
        if any(octets is None for octets in known):
            return None
        return self._ended + sum(octets or 0 for octets in known)


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
    #: The completed counters and the wire octets when they last changed.
    _done: tuple[int, int] = (0, 0)
    _wire_base: int | None = None

    def rebase(self, messages: int, octets: int, wire: int | None) -> None:
        """Completed counters and wire octets as the run starts (so what
        moved before the first report counts)."""
        self._done, self._wire_base = (messages, octets), wire

    def report(self, now: float, messages: int, octets: int, wire: int | None = None) -> str:
        """The text to write at ``now`` for the counters so far (totals), with
        ``\\r`` or ``\\n`` as fits; empty for an idle interval of an
        ``idle_quiet`` meter. ``wire``: octets TCP moved so far (None:
        unknown), for the part of a message not complete yet."""
        if wire is not None:
            if (messages, octets) != self._done or self._wire_base is None:
                self.rebase(messages, octets, wire)
            octets += wire - (self._wire_base or 0)
        if self._wire_base is not None:
            # Framing counted within a message, or the wire unknown for a
            # moment (a connection just closed): the total stays put.
            octets = max(self._last_octets, octets)
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

    ``counters`` gives (messages, octets) so far; ``wire`` (optional,
    :class:`WireOctets`) the octets TCP moved, for progress within a
    message. Nothing is printed with
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
        wire: Callable[[], int | None] | None = None,
    ) -> None:
        self._counters = counters
        self._wire = wire
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
            self.meter.rebase(*self._counters(), self._read_wire())
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
            report = self.meter.report(time.monotonic(), messages, octets, self._read_wire())
            self._write(report)

    def wire_add(self, sock: Any) -> None:
        """Count what TCP moves on ``sock`` (with a :class:`WireOctets`)."""
        if isinstance(self._wire, WireOctets):
            self._wire.add(sock)

    def wire_drop(self, sock: Any) -> None:
        """``sock`` ends: keep what it moved (with a :class:`WireOctets`)."""
        if isinstance(self._wire, WireOctets):
            self._wire.drop(sock)

    def _read_wire(self) -> int | None:
        return None if self._wire is None else self._wire()

    def _write(self, text: str) -> None:
        if text:
            with contextlib.suppress(OSError, ValueError):
                self._stream.write(text)
                self._stream.flush()
