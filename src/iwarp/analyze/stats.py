"""Per-connection statistics a protocol engineer looks at, in bounded memory.

Everything here is a fixed number of counters or buckets whatever the
length of the capture: opcode counts, an FPDU size histogram (powers of
two), throughput over time (buckets whose width doubles when there would
be too many), Read latency (a histogram of powers of two of microseconds)
and the first Terminates with their reasons.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from iwarp.rdmap.terminate import terminate_name

__all__ = ["DirectionStats", "LatencyStats", "SizeHistogram", "Timeline"]

#: Buckets of a timeline before their width doubles.
TIMELINE_BUCKETS: Final = 512
#: The first bucket width of a timeline, in seconds.
TIMELINE_START_WIDTH: Final = 0.001
#: Read Requests waiting for their Response that are remembered.
MAX_OUTSTANDING_READS: Final = 4096
#: Terminates listed per direction (all are counted).
MAX_TERMINATES: Final = 20


class SizeHistogram:
    """Counts by power-of-two bucket: bucket ``k`` holds sizes in ``[2**k, 2**(k+1))``
    (bucket 0 holds 0 and 1)."""

    __slots__ = ("counts", "largest", "smallest", "total")

    def __init__(self) -> None:
        self.counts = [0] * 18
        self.total = 0
        self.smallest: int | None = None
        self.largest = 0

    def add(self, size: int) -> None:
        # Once per FPDU: the bucket clamped by comparisons (no min/max calls).
        k = size.bit_length() - 1
        if k > 17:
            k = 17
        elif k < 0:
            k = 0
        self.counts[k] += 1
        self.total += size
        smallest = self.smallest
        if smallest is None or size < smallest:
            self.smallest = size
        self.largest = max(self.largest, size)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: SizeHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        if other.smallest is not None:
            self.smallest = (
                other.smallest if self.smallest is None else min(self.smallest, other.smallest)
            )
        self.largest = max(self.largest, other.largest)

    def to_json(self) -> dict[str, Any]:
        n = self.count
        return {
            "count": n,
            "min": self.smallest,
            "max": self.largest if n else None,
            "mean": round(self.total / n, 1) if n else None,
            # "[lo, hi)": count, for the buckets that hold any.
            "buckets": {
                f"{0 if k == 0 else 1 << k}-{(1 << (k + 1)) - 1}": c
                for k, c in enumerate(self.counts)
                if c
            },
        }


class Timeline:
    """Octets per time bucket from ``origin`` on; at most
    :data:`TIMELINE_BUCKETS` buckets (the width doubles to stay there)."""

    __slots__ = ("buckets", "origin", "width")

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.width = TIMELINE_START_WIDTH
        self.buckets: list[int] = []

    def add(self, time: float, octets: int) -> None:
        k = int((time - self.origin) / self.width) if time > self.origin else 0
        while k >= TIMELINE_BUCKETS:
            self._widen()
            k //= 2
        buckets = self.buckets
        if k >= len(buckets):
            buckets.extend([0] * (k + 1 - len(buckets)))
        buckets[k] += octets

    def _widen(self) -> None:
        old = self.buckets
        self.buckets = [sum(old[i : i + 2]) for i in range(0, len(old), 2)]
        self.width *= 2

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "bucket_seconds": self.width,
            "octets": list(self.buckets),
        }


class LatencyStats:
    """Latencies in seconds: count, sum, extremes, and a histogram of powers
    of two of microseconds (bucket ``k``: ``[2**k, 2**(k+1))`` µs)."""

    __slots__ = ("count", "counts", "largest", "smallest", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.smallest: float | None = None
        self.largest = 0.0
        self.counts = [0] * 40

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        if self.smallest is None or seconds < self.smallest:
            self.smallest = seconds
        self.largest = max(self.largest, seconds)
        micro = int(seconds * 1e6)
        self.counts[min(max(micro.bit_length() - 1, 0), 39)] += 1

    def merge(self, other: LatencyStats) -> None:
        if not other.count:
            return
        self.count += other.count
        self.total += other.total
        self.largest = max(self.largest, other.largest)
        if other.smallest is not None:
            self.smallest = (
                other.smallest if self.smallest is None else min(self.smallest, other.smallest)
            )
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]

    def percentile(self, fraction: float) -> float | None:
        """Upper edge of the bucket holding the given fraction (an upper bound)."""
        if not self.count:
            return None
        wanted = fraction * self.count
        seen = 0
        for k, c in enumerate(self.counts):
            seen += c
            if seen >= wanted:
                return min((1 << (k + 1)) * 1e-6, self.largest)
        return self.largest

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.smallest,
            "max": self.largest if self.count else None,
            "mean": self.total / self.count if self.count else None,
            "p50_at_most": self.percentile(0.5),
            "p99_at_most": self.percentile(0.99),
            "buckets_us": {
                f"{1 << k}-{(1 << (k + 1)) - 1}": c for k, c in enumerate(self.counts) if c
            },
        }


@dataclass
class Terminate:
    """One Terminate seen, with its reason in words."""

    time: float
    seq: int
    frame: int | None
    layer: int
    etype: int
    code: int

    @property
    def reason(self) -> str:
        return terminate_name(self.layer, self.etype, self.code)

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "seq": self.seq,
            "frame": self.frame,
            "layer": self.layer,
            "etype": self.etype,
            "code": self.code,
            "reason": self.reason,
        }


@dataclass
class OpcodeCount:
    fpdus: int = 0
    #: DDP messages: FPDUs with the Last flag.
    messages: int = 0
    #: ULP payload octets (after the DDP and RDMAP headers).
    octets: int = 0


@dataclass
class DirectionStats:
    """What one direction sent, over time."""

    origin: float
    opcodes: dict[str, OpcodeCount] = field(default_factory=dict)
    fpdu_sizes: SizeHistogram = field(default_factory=SizeHistogram)
    timeline: Timeline = field(init=False)
    #: Read latency of the Read Requests this direction sent.
    read_latency: LatencyStats = field(default_factory=LatencyStats)
    #: Capture times of Read Requests still waiting for their last Response.
    outstanding_reads: deque[float] = field(
        default_factory=lambda: deque(maxlen=MAX_OUTSTANDING_READS)
    )
    reads_unmatched: int = 0
    terminates: list[Terminate] = field(default_factory=list)
    terminate_count: int = 0
    #: Errors by time, for plots: ``(time, message)``, the first few.
    error_times: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.timeline = Timeline(self.origin)

    def opcode(self, name: str, payload: int, last: bool) -> None:
        count = self.opcodes.get(name)
        if count is None:
            count = self.opcodes[name] = OpcodeCount()
        count.fpdus += 1
        count.octets += payload
        if last:
            count.messages += 1

    def read_requested(self, time: float) -> None:
        if len(self.outstanding_reads) == MAX_OUTSTANDING_READS:
            self.reads_unmatched += 1  # the oldest falls off
        self.outstanding_reads.append(time)

    def read_answered(self, time: float) -> None:
        """The last Read Response for this direction's oldest Read Request
        (RDMAP answers Reads in order, RFC 5040 §5.2)."""
        if self.outstanding_reads:
            self.read_latency.add(max(0.0, time - self.outstanding_reads.popleft()))

    def terminated(self, record: Terminate) -> None:
        self.terminate_count += 1
        if len(self.terminates) < MAX_TERMINATES:
            self.terminates.append(record)

    def to_json(self) -> dict[str, Any]:
        return {
            "opcodes": {
                name: {"fpdus": c.fpdus, "messages": c.messages, "octets": c.octets}
                for name, c in sorted(self.opcodes.items())
            },
            "fpdu_sizes": self.fpdu_sizes.to_json(),
            "throughput": self.timeline.to_json(),
            "read_latency": self.read_latency.to_json(),
            "reads_outstanding": len(self.outstanding_reads),
            "reads_unmatched": self.reads_unmatched,
            "terminates": self.terminate_count,
            "terminate_list": [t.to_json() for t in self.terminates],
        }


#: Terminates and errors a capture's totals remember (for plot marks).
MAX_MARKS: Final = 200


class CaptureTotals:
    """Sums over every connection of a capture (or several), in bounded memory:
    for the total line, the plots and the CSV of connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.iwarp_connections = 0
        self.errors = 0
        self.fpdus = 0
        self.ulpdu_octets = 0
        self.tcp_octets = 0
        self.retransmissions = 0
        self.gaps = 0
        self.opcodes: dict[str, OpcodeCount] = {}
        self.fpdu_sizes = SizeHistogram()
        self.read_latency = LatencyStats()
        self.terminates = 0
        #: Octets over capture time by role, on one time axis from the first segment.
        self.timelines: dict[str, Timeline] = {}
        self.origin: float | None = None
        #: ``(time, role, text)`` of the first Terminates and errors.
        self.terminate_marks: list[tuple[float, str, str]] = []
        self.error_marks: list[tuple[float, str, str]] = []

    def add(self, role: str, stats: DirectionStats, origin: float) -> None:
        """One direction of a connection whose first segment came at ``origin``."""
        if self.origin is None or origin < self.origin:
            self.origin = origin
        for name, count in stats.opcodes.items():
            total = self.opcodes.setdefault(name, OpcodeCount())
            total.fpdus += count.fpdus
            total.messages += count.messages
            total.octets += count.octets
        self.fpdu_sizes.merge(stats.fpdu_sizes)
        self.read_latency.merge(stats.read_latency)
        self.terminates += stats.terminate_count
        timeline = self.timelines.get(role)
        if timeline is None:
            timeline = self.timelines[role] = Timeline(self.origin)
        if origin < timeline.origin:
            self._rebase(timeline, origin)
        own = stats.timeline
        for k, octets in enumerate(own.buckets):
            if octets:
                timeline.add(own.origin + (k + 0.5) * own.width, octets)
        for t in stats.terminates:
            if len(self.terminate_marks) < MAX_MARKS:
                self.terminate_marks.append((t.time, role, t.reason))
        for time, message in stats.error_times:
            if len(self.error_marks) < MAX_MARKS:
                self.error_marks.append((time, role, message))

    @staticmethod
    def _rebase(timeline: Timeline, origin: float) -> None:
        """Move a timeline's origin earlier (captures out of time order)."""
        old = Timeline(timeline.origin)
        old.buckets, old.width = timeline.buckets, timeline.width
        timeline.origin, timeline.buckets, timeline.width = origin, [], TIMELINE_START_WIDTH
        for k, octets in enumerate(old.buckets):
            if octets:
                timeline.add(old.origin + (k + 0.5) * old.width, octets)

    def merge(self, other: CaptureTotals) -> None:
        """Add another capture's totals (several files, one total)."""
        for name in (
            "connections",
            "iwarp_connections",
            "errors",
            "fpdus",
            "ulpdu_octets",
            "tcp_octets",
            "retransmissions",
            "gaps",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, count in other.opcodes.items():
            total = self.opcodes.setdefault(name, OpcodeCount())
            total.fpdus += count.fpdus
            total.messages += count.messages
            total.octets += count.octets
        self.fpdu_sizes.merge(other.fpdu_sizes)
        self.read_latency.merge(other.read_latency)
        self.terminates += other.terminates
        self.terminate_marks = (self.terminate_marks + other.terminate_marks)[:MAX_MARKS]
        self.error_marks = (self.error_marks + other.error_marks)[:MAX_MARKS]
        if other.origin is not None and (self.origin is None or other.origin < self.origin):
            self.origin = other.origin
        for role, theirs in other.timelines.items():
            timeline = self.timelines.get(role)
            if timeline is None:
                self.timelines[role] = theirs
                continue
            if theirs.origin < timeline.origin:
                self._rebase(timeline, theirs.origin)
            for k, octets in enumerate(theirs.buckets):
                if octets:
                    timeline.add(theirs.origin + (k + 0.5) * theirs.width, octets)

    def to_json(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "iwarp_connections": self.iwarp_connections,
            "errors": self.errors,
            "fpdus": self.fpdus,
            "ulpdu_octets": self.ulpdu_octets,
            "tcp_octets": self.tcp_octets,
            "tcp_retransmissions": self.retransmissions,
            "tcp_gaps": self.gaps,
            "opcodes": {
                name: {"fpdus": c.fpdus, "messages": c.messages, "octets": c.octets}
                for name, c in sorted(self.opcodes.items())
            },
            "fpdu_sizes": self.fpdu_sizes.to_json(),
            "read_latency": self.read_latency.to_json(),
            "terminates": self.terminates,
        }
