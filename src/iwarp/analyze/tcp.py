"""TCP reassembly for the analyzer, streaming: each direction's octets in order.

A :class:`Reassembler` takes one direction's segments in capture order and
hands its :class:`StreamWindow` the octets in sequence order as soon as they
are contiguous. The first copy of an octet is kept (what a receiver
commits, seed 000 §3.1.2); later copies are compared with it while it is
still held (the window keeps the last :attr:`Limits.history` octets) and
reported when they differ. Segments past a hole wait, up to
:attr:`Limits.reassembly` octets; past that, or at the end of the capture,
the hole is given up: it becomes a gap in the window (octets the capture
missed), which the decoders cross as they would any gap.

Memory is what is outstanding: segments waiting past a hole, and what the
decoders have not consumed yet; never the whole stream.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = ["Limits", "Reassembler", "StreamWindow"]

_MASK: Final = 0xFFFFFFFF
_HALF: Final = 1 << 31
_KIB: Final = 1 << 10
_MIB: Final = 1 << 20
#: Dead octets at the front of a window's first buffer before they may be
#: cut off (and then only when they outweigh the live ones).
_COMPACT: Final = 64 * _KIB


def signed(delta: int) -> int:
    """A 32-bit sequence difference as a signed number (RFC 793 arithmetic)."""
    return ((delta + _HALF) & _MASK) - _HALF


@dataclass(frozen=True, slots=True)
class Limits:
    """What the analyzer holds at most, so that no capture makes it grow without bound.

    Past each limit it gives something up and says so in a note record.
    """

    #: Connections tracked at once; past it, the least recently active one
    #: is closed early (its later segments start a new connection).
    open_connections: int = 10_000
    #: Octets of one direction held past a hole before the hole is given up.
    reassembly: int = 8 * _MIB
    #: Octets of one direction held while the connection's protocol is not
    #: known yet (waiting for the other side's MPA frame); then it is decided
    #: without it.
    probe: int = 1 * _MIB
    #: Octets held in all connections together; past it, the largest holders
    #: give up their holes or decide at once.
    total: int = 160 * _MIB
    #: Octets kept after they were decoded, to compare retransmissions with.
    history: int = 64 * _KIB


class StreamWindow:
    """The octets of one direction not yet consumed, laid out from sequence ``base``.

    Offsets count from ``base`` (the SYN's sequence number plus one, or the
    first captured octet). Data is appended in order; holes the capture
    missed split it into runs. Decoders read with absolute offsets and
    :meth:`discard` what they are done with. The query methods mirror what
    the MPA and VI/TCP walkers need.

    Each run's octets sit in a buffer from a physical origin: what is
    discarded from the front of the first run stays in its buffer, dead,
    until it outweighs the live octets (then it is cut off in one move).
    Trimming the front on every discard would make the next append copy the
    whole buffer again (a front-trimmed bytearray cannot grow in place), every
    few segments on a capture of small segments; this way each octet is
    copied into the window once and moved at most once more on average,
    and a buffer is never more than twice its live octets plus ``compact``
    (64 KiB, the history's size). :attr:`held` counts the dead octets too:
    the limits bound what is in memory.
    """

    __slots__ = (
        "base",
        "chunks",
        "compact",
        "final",
        "frames",
        "history",
        "origin",
        "runs",
        "start",
    )

    def __init__(self, base: int, history: int = 64 * _KIB, compact: int = _COMPACT) -> None:
        self.base = base
        #: Sorted, disjoint ``[lo, hi]`` ranges of captured octets still held.
        self.runs: list[list[int]] = []
        #: The octets of each run, from :attr:`origin` on.
        self.chunks: list[bytearray] = []
        #: The offset of the first run's first octet in its buffer (the octets
        #: before ``runs[0][0]`` are dead); every other run starts at its lo.
        self.origin = 0
        #: ``(offset, frame)`` of segments that brought new octets, in order.
        self.frames: deque[tuple[int, int]] = deque()
        #: Offsets below this are gone.
        self.start = 0
        #: No more octets will come (end of capture or connection).
        self.final = False
        self.history = history
        #: Dead octets at the front of the first buffer before they may be cut
        #: off; 0 cuts them off at every discard (a window that must hold no
        #: more than its live octets, as the proxy's).
        self.compact = compact

    # -- filling ---------------------------------------------------------------

    def append(self, offset: int, data: bytes | memoryview, frame: int) -> None:
        """Octets at ``offset``, which is at or past :attr:`end` (past it: a gap)."""
        runs = self.runs
        if runs and runs[-1][1] == offset:
            self.chunks[-1] += data
            runs[-1][1] += len(data)
        else:
            if not runs:
                self.origin = offset
            runs.append([offset, offset + len(data)])
            self.chunks.append(bytearray(data))
        self.frames.append((offset, frame))

    def skip(self, upto: int) -> None:
        """Move the end of a window that holds nothing to ``upto``: octets
        consumed without being stored (a walker counted them in the caller's
        buffer, :meth:`~iwarp.analyze.mpa.FpduWalker.count_ahead`)."""
        if self.runs:
            raise ValueError("a window that holds octets cannot skip")
        self.start = max(self.start, upto)

    def discard(self, upto: int) -> None:
        """Drop what lies before ``upto``, keeping :attr:`history` octets for comparisons."""
        keep = upto - self.history
        if keep <= self.start:
            return
        self.start = keep
        runs, chunks = self.runs, self.chunks
        if runs and runs[0][1] <= keep:
            while runs and runs[0][1] <= keep:
                del runs[0]
                del chunks[0]
            if runs:
                self.origin = runs[0][0]
        if runs and runs[0][0] < keep:
            runs[0][0] = keep
            dead = keep - self.origin
            if dead >= self.compact and (not self.compact or dead >= runs[0][1] - keep):
                del chunks[0][:dead]
                self.origin = keep
        frames = self.frames
        while len(frames) > 1 and frames[1][0] <= keep:
            frames.popleft()

    def _origin(self, i: int) -> int:
        """The offset of run ``i``'s buffer's first octet."""
        return self.origin if i == 0 else self.runs[i][0]

    @property
    def held(self) -> int:
        """Octets held in memory: the runs' and the dead ones not cut off yet
        (what the limits must count)."""
        dead = self.runs[0][0] - self.origin if self.runs else 0
        return dead + sum(hi - lo for lo, hi in self.runs)

    # -- queries ---------------------------------------------------------------

    @property
    def end(self) -> int:
        """Offset just past the last octet received so far."""
        return self.runs[-1][1] if self.runs else self.start

    def seq(self, offset: int) -> int:
        return (self.base + offset) & _MASK

    def offset_of(self, seq: int) -> int:
        return signed(seq - self.base)

    def _run(self, offset: int) -> int:
        """Index of the run holding ``offset``, or -1."""
        runs = self.runs
        if runs and runs[-1][0] <= offset < runs[-1][1]:
            return len(runs) - 1
        i = bisect_right(runs, [offset, 1 << 62]) - 1
        if i >= 0 and runs[i][0] <= offset < runs[i][1]:
            return i
        return -1

    def run_end(self, offset: int) -> int:
        """End of the run holding ``offset`` (``offset`` if none does)."""
        i = self._run(offset)
        return self.runs[i][1] if i >= 0 else offset

    def next_captured(self, offset: int) -> int | None:
        """The first held offset at or after ``offset``."""
        if self._run(offset) >= 0:
            return offset
        i = bisect_right(self.runs, [offset, 1 << 62])
        return self.runs[i][0] if i < len(self.runs) else None

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` octets at ``offset`` if all are held."""
        i = self._run(offset)
        if i < 0:
            return None
        at = offset - self._origin(i)
        if offset + size > self.runs[i][1]:
            return None
        return bytes(self.chunks[i][at : at + size])

    def locate(self, offset: int) -> tuple[bytearray, int, int] | None:
        """The run holding ``offset``: its octets, where ``offset`` is in them,
        and the run's end offset (None if ``offset`` was not captured). The
        octets are valid until the window changes."""
        i = self._run(offset)
        if i < 0:
            return None
        return self.chunks[i], offset - self._origin(i), self.runs[i][1]

    def view(self, offset: int, size: int) -> memoryview | None:
        """Like :meth:`read` without a copy; valid until the window changes."""
        i = self._run(offset)
        if i < 0:
            return None
        at = offset - self._origin(i)
        if offset + size > self.runs[i][1]:
            return None
        return memoryview(self.chunks[i])[at : at + size]

    def captured(self, lo: int, hi: int) -> bytes:
        """The held octets from ``lo`` up to ``hi`` or the end of its run."""
        i = self._run(lo)
        if i < 0:
            return b""
        origin = self._origin(i)
        return bytes(self.chunks[i][lo - origin : min(hi, self.runs[i][1]) - origin])

    def find(self, key: bytes, stop: int) -> int:
        """Offset of the first ``key`` lying wholly before ``stop`` in one run, or -1."""
        for i, ((lo, hi), chunk) in enumerate(zip(self.runs, self.chunks, strict=True)):
            if lo >= stop:
                break
            origin = self._origin(i)
            at = chunk.find(key, lo - origin, min(stop, hi) - origin)
            if at >= 0:
                return origin + at
        return -1

    def frame_at(self, offset: int) -> int | None:
        """The frame whose segment brought the octet at ``offset`` (the last
        segment starting at or before it)."""
        frames = self.frames
        if not frames:
            return None
        if frames[-1][0] <= offset:
            return frames[-1][1]
        i = bisect_right(frames, (offset, 1 << 62)) - 1
        return frames[i][1] if i >= 0 else None


class Reassembler:
    """One direction's segments, in capture order, into its window in stream order."""

    __slots__ = (
        "captured",
        "conflicts",
        "delivered",
        "fin",
        "gap_octets",
        "gaps",
        "given_up",
        "highest",
        "limits",
        "out_of_order",
        "pending",
        "pending_octets",
        "retransmissions",
        "unchecked",
        "window",
    )

    def __init__(self, window: StreamWindow, limits: Limits) -> None:
        self.window = window
        self.limits = limits
        #: Next offset expected in order.
        self.delivered = window.end
        #: Segments past a hole: sorted, disjoint ``(lo, hi, octets, frame)``.
        self.pending: list[tuple[int, int, bytes, int]] = []
        self.pending_octets = 0
        self.highest = self.delivered
        self.retransmissions = 0
        self.out_of_order = 0
        #: Octets handed to the window (first copies).
        self.captured = 0
        #: ``(frame, offset, length)`` of copies that differ from the first.
        self.conflicts: list[tuple[int, int, int]] = []
        #: Retransmitted octets too old to compare (no longer held).
        self.unchecked = 0
        self.gaps = 0
        self.gap_octets = 0
        #: ``(lo, hi)`` of holes given up before the end (a limit was reached).
        self.given_up: list[tuple[int, int]] = []
        #: Offset of the FIN, if seen.
        self.fin: int | None = None

    def add(self, offset: int, payload: bytes, frame: int) -> None:
        """A segment's payload at ``offset`` (relative to the window's base)."""
        end = offset + len(payload)
        delivered = self.delivered
        if offset == delivered and not self.pending:  # the common case: in order
            self.window.append(offset, payload, frame)
            self.delivered = end
            self.captured += end - offset
            self.highest = max(self.highest, end)
            return
        if end <= delivered:
            self.retransmissions += 1
            self._compare(offset, payload, frame)
            return
        first = offset
        if offset < delivered:
            self._compare(offset, payload[: delivered - offset], frame)
            payload = payload[delivered - offset :]
            offset = delivered
        fresh = self._hold(offset, payload, frame)
        if not fresh:
            self.retransmissions += 1
        elif first < self.highest:
            self.out_of_order += 1
        self.highest = max(self.highest, end)
        self._drain()
        if self.pending_octets > self.limits.reassembly:
            self.give_up(self.limits.reassembly // 2)

    def _compare(self, offset: int, payload: bytes, frame: int) -> None:
        """Check a retransmitted copy against the first, where still held."""
        window = self.window
        hi = offset + len(payload)
        lo = max(offset, window.start)
        if lo > offset:
            self.unchecked += min(lo, hi) - offset
        while lo < hi:
            stop = min(hi, window.run_end(lo))
            if stop == lo:
                nxt = window.next_captured(lo)
                if nxt is None or nxt >= hi:
                    break
                lo = nxt
                continue
            if window.captured(lo, stop) != payload[lo - offset : stop - offset]:
                self.conflicts.append((frame, lo, stop - lo))
                return
            lo = stop

    def _hold(self, offset: int, payload: bytes, frame: int) -> bool:
        """Keep the octets of ``payload`` not held yet (the first copy stays);
        returns whether there were any."""
        pending = self.pending
        end = offset + len(payload)
        k = bisect_left(pending, (offset,))
        if k > 0 and pending[k - 1][1] > offset:
            k -= 1
        cursor = offset
        pieces: list[tuple[int, int]] = []
        for lo, hi, data, _ in pending[k:]:
            if lo >= end:
                break
            if lo > cursor:
                pieces.append((cursor, lo))
            seen_lo, seen_hi = max(lo, offset), min(hi, end)
            if data[seen_lo - lo : seen_hi - lo] != payload[seen_lo - offset : seen_hi - offset]:
                self.conflicts.append((frame, seen_lo, seen_hi - seen_lo))
            cursor = max(cursor, hi)
        if cursor < end:
            pieces.append((cursor, end))
        for lo, hi in pieces:
            insort(pending, (lo, hi, payload[lo - offset : hi - offset], frame))
            self.pending_octets += hi - lo
        return bool(pieces)

    def _drain(self) -> None:
        pending = self.pending
        while pending and pending[0][0] <= self.delivered:
            lo, hi, data, frame = pending.pop(0)
            self.pending_octets -= hi - lo
            if hi > self.delivered:
                self.window.append(self.delivered, data[self.delivered - lo :], frame)
                self.captured += hi - self.delivered
                self.delivered = hi

    def give_up(self, keep: int = 0) -> int:
        """Give up holes until at most ``keep`` octets wait past one; returns
        the octets of holes given up."""
        skipped = 0
        while self.pending and self.pending_octets > keep:
            lo = self.pending[0][0]
            if lo > self.delivered:
                self.gaps += 1
                self.gap_octets += lo - self.delivered
                self.given_up.append((self.delivered, lo))
                skipped += lo - self.delivered
                self.delivered = lo
            self._drain()
        return skipped

    def finish(self) -> None:
        """End of the direction: every hole left is a gap, a missing tail before the FIN too."""
        while self.pending:
            lo = self.pending[0][0]
            self.gaps += 1
            self.gap_octets += lo - self.delivered
            self.delivered = lo
            self._drain()
        if self.fin is not None and self.fin > self.delivered:
            self.gaps += 1
            self.gap_octets += self.fin - self.delivered
        self.window.final = True
