"""What both adapters of ``iwarp perf`` share: the test, its result, the
statistics perftest prints, the table, and the control messages.

The client describes each test in its first Send (JSON, :class:`PerfTest`);
the server answers with what it set up (STag, receive credits, its MPA
settings) and, after the test, its CPU time; at the end the client sends
the result (:func:`summary`) so that the server prints the same table row.
One test per connection: a sweep (``-a``) connects once per size.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from iwarp import _accel
from iwarp.cli._progress import DELAY, ProgressMeter
from iwarp.rdma.errors import AtomicsNotSupportedError, describe_terminate, refuses_extensions
from iwarp.rdma.front import QueuePairFront
from iwarp.rdmap.memory import Access, MemoryRegion
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import Completion, RecvWR, Sge

__all__ = [
    "ATOMIC_SIZE",
    "CONTROL_ID",
    "CONTROL_SIZE",
    "MAX_SAMPLES",
    "MAX_SIZE",
    "OPS",
    "SEND_MEMORY",
    "SEND_RECEIVES",
    "SWEEP_SIZES",
    "WINDOW",
    "PerfError",
    "accept_answer",
    "atomic_window",
    "bandwidth_window",
    "check_word",
    "combine",
    "MAX_QPS",
    "no_atomics",
    "op_failed",
    "Printer",
    "Served",
    "RawResult",
    "PerfResult",
    "PerfTest",
    "Ticker",
    "latency_stats",
    "peak_intervals",
    "peak_rate",
    "peak_rule",
    "post_buffers",
    "raw_server_side",
    "send_receives",
    "summary",
    "table",
]

OPS: Final = ("write", "read", "send", "atomic")
#: What one ``atomic`` message moves: an RFC 7306 FetchAdd acts on one
#: 64-bit word (as perftest's ib_atomic_bw / ib_atomic_lat, whatever -s says).
ATOMIC_SIZE: Final = 8
#: Messages kept in flight in bandwidth mode (perftest's default tx depth).
WINDOW: Final = 128
#: Receive buffers the server keeps posted for Send bandwidth, at most
#: (perftest's default rx depth), and the memory they may take together
#: (fewer buffers for large messages: 64 of 1 MiB, 8 of 8 MiB); it returns
#: credits as it reposts them, a quarter at a time (a Send needs a posted
#: buffer, RFC 5040).
SEND_RECEIVES: Final = 512
SEND_MEMORY: Final = 64 << 20
#: Control messages (JSON) fit this; the server's Send sinks are never smaller.
CONTROL_SIZE: Final = 4096
#: wr_id of the server's control receive buffer (data buffers count from 0).
CONTROL_ID: Final = 1 << 40
#: Largest message size accepted (a test buffer is allocated on both ends).
MAX_SIZE: Final = 1 << 30
#: ``-a``: perftest's sweep, 2 to 2^23 octets.
SWEEP_SIZES: Final = tuple(1 << i for i in range(1, 24))
#: Timings kept per test (8 octets each); a ``-D`` run stops when it has them.
MAX_SAMPLES: Final = 10_000_000
MIB: Final = float(1 << 20)
#: ``-q``: queue pairs (connections) of one test, at most.
MAX_QPS: Final = 64
#: BW peak: the best of this many equal intervals of a run (:func:`peak_rate`).
PEAK_INTERVALS: Final = 10
#: BW peak: no interval shorter than this (seconds), where a burst of local
#: completions (a socket buffer's worth) would pass for a rate.
PEAK_MIN_INTERVAL: Final = 0.1
#: BW peak: a run cut into fewer intervals than this has no peak of its own
#: (the average stands for it, marked not meaningful).
PEAK_MIN_INTERVALS: Final = 5
#: A steady run's peak stays within this many times its average; the row's
#: rule line says when a run's does not (its rate varied: other load).
PEAK_STEADY_RATIO: Final = 1.5


class PerfError(Exception):
    """The test could not run (mismatched options, a failed operation, a bad test)."""


def no_atomics(exc: AtomicsNotSupportedError) -> PerfError:
    """The error of an atomic test whose server has no RFC 7306 atomics."""
    return PerfError(f"{exc} (iwarp perf --op atomic needs a server with them)")


def op_failed(op: str, completion: Completion, terminate: TerminateHeader | None) -> PerfError:
    """The error of a failed data operation (a work request's completion);
    an ``atomic`` one refused as a peer without RFC 7306 refuses it (§1.1)
    says so."""
    if op == "atomic" and refuses_extensions(terminate):
        return no_atomics(AtomicsNotSupportedError(completion, terminate))
    what = "" if terminate is None else f" ({describe_terminate(terminate)})"
    return PerfError(f"{op} failed: {completion.status.value}{what}")


def atomic_window(atomic_ord: int) -> int:
    """FetchAdds kept in flight in atomic bandwidth mode: the queue pair's
    limit on outstanding Atomic Requests (RFC 7306 §5.2.1), within WINDOW."""
    return min(WINDOW, max(1, atomic_ord))


def bandwidth_window(qp: QueuePairFront, op: str) -> int:
    """Messages a bandwidth test keeps in flight: WINDOW, or fewer Reads and
    FetchAdds as the queue pair's limits on outstanding requests say."""
    if op == "read":
        return min(WINDOW, max(1, qp.params.ord))
    if op == "atomic":
        return atomic_window(qp.stream.atomic_ord)
    return WINDOW


def post_buffers(
    qp: QueuePairFront, test: PerfTest, control: MemoryRegion
) -> tuple[list[MemoryRegion], MemoryRegion | None, MemoryRegion | None]:
    """The server's buffers for ``test`` (either adapter), all allocated
    before it answers: a Send test's sinks, each posted as a receive (data
    and control Sends land in them), and for Send latency the buffer each
    Send is answered from; else the target region of the Writes, Reads or
    FetchAdds, and ``control`` posted again for control messages (and
    Write-latency pings). Returns (sinks, target, answer).

    :raises MemoryError: they cannot be allocated.
    """
    sinks: list[MemoryRegion] = []
    if test.op == "send":
        answer = None
        if test.latency:
            answer = qp.register(bytearray(test.size), Access.LOCAL_WRITE)
        for i in range(send_receives(test.size, test.latency)):
            sinks.append(qp.register(bytearray(max(test.size, CONTROL_SIZE)), Access.LOCAL_WRITE))
            qp.post_recv(RecvWR(Sge(sinks[i]), wr_id=i))
        return sinks, None, answer
    access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
    if test.op == "atomic":  # FetchAdds on its word (RFC 7306 §5.3)
        access |= Access.REMOTE_ATOMIC
    target = qp.register(bytearray(test.size), access)
    qp.post_recv(RecvWR(Sge(control), wr_id=CONTROL_ID))
    return sinks, target, None


def accept_answer(answer: dict[str, Any], markers: bool, result: PerfResult) -> int:
    """The client's reading of the server's answer to its test description:
    the peer's accelerator and adapter go into ``result``; returns its STag.

    :raises PerfError: the server refused the test, asks for other markers
        than ``markers``, or sent no valid STag.
    """
    refused(answer)
    if bool(answer.get("markers")) != markers:
        raise PerfError(
            "markers differ: give the server the same --markers setting "
            "(an MPA receiver asks for markers in what it receives)"
        )
    result.peer_accel = str(answer.get("accel", "?"))
    result.peer_adapter = str(answer.get("adapter", "?"))
    return integer(answer, "stag", 0, 0xFFFFFFFF)


def crc_note(asked: bool, crc: bool) -> str | None:
    """The client's line when the connection's CRC is not what it asked for."""
    if crc and not asked:
        return (
            "CRC is on although --no-crc: the server asks for it (MPA uses CRC when either "
            "end asks); give the server --no-crc too"
        )
    return None


def raw_server_side(raw: RawResult, message: dict[str, Any]) -> None:
    """The server's side of a ``--compare-raw`` run (its CPU time and how
    it waited) into ``raw``.

    :raises PerfError: the server's raw TCP side failed, or sent no valid time.
    """
    if "error" in message:
        raise PerfError(f"raw TCP on the server: {message['error']}")
    raw.cpu_server = seconds(message, "cpu")
    theirs = str(message.get("style", raw.style))
    if theirs != raw.style:
        raw.style = f"client: {raw.style}; server: {theirs}"


def check_word(report: dict[str, Any], result: PerfResult) -> None:
    """After an atomic test: the server's word (RFC 7306 words are
    big-endian) must have counted every FetchAdd of 1 that completed.

    :raises PerfError: it did not, or the report has no word.
    """
    if result.test.op != "atomic":
        return
    word = integer(report, "word", 0, (1 << 64) - 1)
    if word != result.iterations:
        raise PerfError(
            f"the server's word is {word} after {result.iterations} FetchAdds of 1 completed"
        )


def send_receives(size: int, latency: bool) -> int:
    """Receive buffers the server posts for a Send test of ``size`` octets."""
    return 2 if latency else max(2, min(SEND_RECEIVES, SEND_MEMORY // max(size, CONTROL_SIZE)))


@dataclass(frozen=True)
class PerfTest:
    """What the client asks the server for (its first Send)."""

    op: str
    size: int
    latency: bool
    raw: bool
    #: Whether the client asked for CRC (None: not said), so that the
    #: server can say when MPA's rule (CRC if either end asks) overrode it.
    crc: bool | None = None
    #: ``-q``: the test's queue pairs (connections), each describing the
    #: same test with the same ``group``, so that the server sums their rows.
    qps: int = 1
    group: str | None = None

    def encode(self) -> bytes:
        message: dict[str, Any] = {
            "op": self.op,
            "size": self.size,
            "latency": self.latency,
            "raw": self.raw,
        }
        if self.crc is not None:
            message["crc"] = self.crc
        if self.qps > 1:
            message.update(qps=self.qps, group=self.group)
        return json.dumps(message).encode()

    @classmethod
    def decode(cls, data: bytes) -> PerfTest:
        """:raises PerfError: not a test description this server runs."""
        message = decode(data)
        op = message.get("op")
        if op not in OPS:
            raise PerfError(f"not a test description: op {op!r} is not one of {', '.join(OPS)}")
        latency, raw = message.get("latency"), message.get("raw", False)
        if not isinstance(latency, bool) or not isinstance(raw, bool):
            raise PerfError("not a test description: latency and raw must be true or false")
        size = integer(message, "size", 1, MAX_SIZE)
        if op == "atomic" and size != ATOMIC_SIZE:
            raise PerfError(f"not a test description: an atomic test moves {ATOMIC_SIZE} octets")
        crc = message.get("crc")
        qps = integer(message, "qps", 1, MAX_QPS) if "qps" in message else 1
        group = message.get("group")
        if qps > 1 and (not isinstance(group, str) or not 0 < len(group) <= 64):
            raise PerfError("not a test description: a test of several queue pairs needs a group")
        return cls(
            str(op),
            size,
            latency,
            raw,
            crc if isinstance(crc, bool) else None,
            qps,
            group if qps > 1 else None,
        )

    @property
    def echo(self) -> bool:
        """Whether ``--compare-raw``'s plain TCP answers each message with
        as many octets (a ping-pong, or atomics' requests and responses)
        instead of one octet at the end."""
        return self.latency or self.op == "atomic"


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def refused(answer: dict[str, Any]) -> None:
    """:raises PerfError: the server's answer refuses the test."""
    if "error" in answer:
        raise PerfError(f"the server refused the test: {answer['error']}")


def decode(data: bytes) -> dict[str, Any]:
    """A control message; :raises PerfError: the peer sent something else."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        raise PerfError("the peer sent a control message that is not JSON") from None
    if not isinstance(message, dict):
        raise PerfError("the peer sent a control message that is not an object")
    return message


def integer(message: dict[str, Any], key: str, low: int, high: int) -> int:
    """``message[key]``, a whole number from ``low`` to ``high``.

    :raises PerfError: missing or out of range (the peer misbehaves).
    """
    value = message.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PerfError(f"the peer's control message has no valid {key!r} ({low} to {high})")
    return value


def seconds(message: dict[str, Any], key: str) -> float:
    """``message[key]``, a CPU time in seconds (0 when missing).

    :raises PerfError: not a finite number >= 0.
    """
    value = message.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise PerfError(f"the peer's control message has no valid {key!r} (seconds)")
    return float(value)


@dataclass
class RawResult:
    """Plain TCP between the same two ends (``--compare-raw``)."""

    style: str
    elapsed: float = 0.0
    iterations: int = 0
    times: list[float] = field(default_factory=list)
    cpu_client: float = 0.0
    cpu_server: float = 0.0


@dataclass
class PerfResult:
    """What one test measured; the loops fill it in as they go, so an
    interrupted test still has its counts and timings so far."""

    test: PerfTest
    adapter: str
    markers: bool
    crc: bool
    #: Messages (bandwidth) or round trips (latency) to run, at most.
    limit: int = MAX_SAMPLES
    #: Seconds to run (``-D``) instead, within ``limit``.
    duration: float | None = None
    accel: str = field(default_factory=_accel.describe)
    peer_accel: str = "?"
    peer_adapter: str = "?"
    #: ``time.perf_counter()`` when the timed part began (None: not yet).
    started: float | None = None
    elapsed: float = 0.0
    #: Bandwidth: completions so far; latency: round trips so far.
    iterations: int = 0
    #: Bandwidth: when each completion came, seconds after ``started``.
    stamps: array[float] = field(default_factory=lambda: array("d"))
    #: Latency: each round trip, seconds.
    times: array[float] = field(default_factory=lambda: array("d"))
    #: ``time.process_time()`` when the timed part began.
    cpu_started: float | None = None
    cpu_client: float = 0.0
    cpu_server: float = 0.0
    raw: RawResult | None = None
    #: Set when the test did not finish (the signal's name).
    interrupted: str | None = None

    def interrupt(self, why: str) -> None:
        """Freeze a test cut short: its time runs until now."""
        self.interrupted = why
        if self.started is not None and not self.elapsed:
            if self.test.latency:
                self.elapsed = math.fsum(self.times)
            else:
                self.elapsed = time.perf_counter() - self.started


def peak_rate(stamps: array[float] | list[float], size: int, elapsed: float | None = None) -> float:
    """perftest's BW peak as the best interval, by a rule that makes it mean
    something (octets per second).

    The run, on the clock that times the average (``elapsed``: to the
    server's confirmation; default the last completion), is cut into equal
    intervals of a tenth of it but never shorter than
    :data:`PEAK_MIN_INTERVAL`; the interval in which most messages
    completed gives the peak. The first interval does not count: the pipe
    fills in it, and its completions say that TCP took the messages into
    its buffers, not that they moved. A completion is local (TCP took the
    message), so an interval of a few milliseconds can hold a socket
    buffer's worth of completions at once and show many times the real
    rate: a run with fewer than :data:`PEAK_MIN_INTERVALS` intervals of
    that length (under 0.5 s) has no peak but its average (four intervals
    left after the first are too few to tell a best one from noise)."""
    n = len(stamps)
    end = elapsed if elapsed is not None else (stamps[-1] if n else 0.0)
    if n < 2 or end <= 0:
        return 0.0
    intervals = peak_intervals(end)
    if not intervals:
        return n * size / end
    width = end / intervals
    slices = [0] * intervals
    for stamp in stamps:
        slices[min(intervals - 1, int(stamp / width))] += 1
    return max(slices[1:]) * size / width


def peak_intervals(end: float) -> int:
    """How many equal intervals :func:`peak_rate` cuts a run of ``end``
    seconds into (the first of them is left out), or 0 when the run is too
    short for a peak that means anything (its average stands for it)."""
    if end <= 0:
        return 0
    width = max(end / PEAK_INTERVALS, PEAK_MIN_INTERVAL)
    intervals = min(PEAK_INTERVALS, int(end / width))
    return intervals if intervals >= PEAK_MIN_INTERVALS else 0


def peak_ratio(data: dict[str, Any]) -> float | None:
    """A row's peak over its average (None: no meaningful peak)."""
    atomic = data.get("op") == "atomic"
    peak = data.get("peak_ops_s" if atomic else "peak_mib_s", 0.0)
    average = data.get("ops_per_s" if atomic else "average_mib_s", 0.0)
    if not data.get("peak_intervals") or not average:
        return None
    return float(peak) / float(average)


def peak_rule(data: dict[str, Any]) -> str:
    """The line under a bandwidth row that says how its peak was taken and
    how it stands to the average."""
    name = "ops peak" if data.get("op") == "atomic" else "BW peak"
    intervals = data.get("peak_intervals", 0)
    seconds = data.get("seconds", 0.0)
    ratio = peak_ratio(data)
    if ratio is None:
        return (
            f"{name}: not meaningful for a run of {seconds:.3f} s (under {PEAK_MIN_INTERVALS} "
            f"intervals of {PEAK_MIN_INTERVAL} s): the average is shown"
        )
    rule = (
        f"{name}: the best of {intervals - 1} intervals of {seconds / intervals:.3f} s "
        "(the first, where the pipe fills, left out)"
    )
    if data.get("qps", 1) > 1:
        rule += ", summed over the queue pairs"
    if ratio <= PEAK_STEADY_RATIO:
        return f"{rule}; {ratio:.2f}x the average (a steady run stays within {PEAK_STEADY_RATIO}x)"
    return (
        f"{rule}; {ratio:.2f}x the average: over {PEAK_STEADY_RATIO}x, the rate was not steady "
        "(other load on the machine?)"
    )


def latency_stats(times: array[float] | list[float]) -> dict[str, float]:
    """perftest's latency columns, in microseconds: t_min, t_max, t_typical
    (the median), t_avg, t_stdev, 99% and 99.9% percentiles."""
    ordered = sorted(times)
    n = len(ordered)
    if not n:
        return dict.fromkeys(
            ("min_us", "max_us", "typical_us", "avg_us", "stdev_us", "p99_us", "p99_9_us"), 0.0
        )
    return {
        "min_us": ordered[0] * 1e6,
        "max_us": ordered[-1] * 1e6,
        "typical_us": statistics.median(ordered) * 1e6,
        "avg_us": math.fsum(ordered) / n * 1e6,
        "stdev_us": (statistics.stdev(ordered) if n > 1 else 0.0) * 1e6,
        "p99_us": ordered[min(n - 1, int(n * 0.99))] * 1e6,
        "p99_9_us": ordered[min(n - 1, int(n * 0.999))] * 1e6,
    }


def summary(result: PerfResult) -> dict[str, Any]:
    """The result as a JSON-ready dict (what ``--json`` prints, one per test)."""
    test = result.test
    out: dict[str, Any] = {
        "op": test.op,
        "bytes": test.size,
        "latency": test.latency,
        "iterations": result.iterations,
        "adapter": result.adapter,
        "markers": result.markers,
        "crc": result.crc,
        "accel": result.accel,
        "peer_accel": result.peer_accel,
        "peer_adapter": result.peer_adapter,
    }
    if result.interrupted:
        out["interrupted"] = result.interrupted
    raw = result.raw
    if test.latency:
        out.update(latency_stats(result.times))
        if raw is not None and raw.times:
            stats = latency_stats(raw.times)
            out["raw_tcp"] = {"style": raw.style, **stats}
            out["added_typical_us"] = out["typical_us"] - stats["typical_us"]
            out["ratio"] = out["typical_us"] / stats["typical_us"] if stats["typical_us"] else None
        return out
    octets = test.size * result.iterations
    seconds = result.elapsed
    out.update(
        seconds=seconds,
        average_mib_s=octets / seconds / MIB if seconds else 0.0,
        peak_mib_s=peak_rate(result.stamps, test.size, result.elapsed) / MIB,
        peak_intervals=peak_intervals(seconds) if len(result.stamps) >= 2 else 0,
        messages_per_s=result.iterations / seconds if seconds else 0.0,
    )
    mib = octets / MIB
    if test.op == "atomic":
        # 8-octet operations: a rate of operations, each one's time from
        # post to response, and CPU per operation (per MiB says nothing).
        out.update(
            ops_per_s=out["messages_per_s"],
            peak_ops_s=peak_rate(result.stamps, 1, result.elapsed),
        )
        if result.times:
            out.update(latency_stats(result.times))
        if result.iterations and not result.interrupted:
            out["cpu_us_per_op"] = {
                "client": result.cpu_client / result.iterations * 1e6,
                "server": result.cpu_server / result.iterations * 1e6,
            }
    elif mib and not result.interrupted:
        out["cpu_us_per_mib"] = {
            "client": result.cpu_client / mib * 1e6,
            "server": result.cpu_server / mib * 1e6,
        }
    if raw is not None and raw.elapsed and raw.iterations:
        raw_octets = test.size * raw.iterations
        rate = raw_octets / raw.elapsed
        out["raw_tcp"] = {
            "style": raw.style,
            "iterations": raw.iterations,
            "seconds": raw.elapsed,
            "average_mib_s": rate / MIB,
            "messages_per_s": raw.iterations / raw.elapsed,
            "cpu_us_per_mib": {
                "client": raw.cpu_client / (raw_octets / MIB) * 1e6,
                "server": raw.cpu_server / (raw_octets / MIB) * 1e6,
            },
        }
        out["ratio"] = out["average_mib_s"] / out["raw_tcp"]["average_mib_s"]
        out["msg_rate_ratio"] = out["messages_per_s"] / out["raw_tcp"]["messages_per_s"]
    return out


#: The latency figures of a row (:func:`latency_stats`).
_LATENCY_KEYS: Final = (
    "min_us",
    "max_us",
    "typical_us",
    "avg_us",
    "stdev_us",
    "p99_us",
    "p99_9_us",
)


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of a test of several queue pairs (``-q``), from each one's
    :func:`summary`, the same on both ends: iterations, bandwidth (average
    and peak) and message or operation rates summed; latency figures the
    mean of the queue pairs' (said in the title); ``seconds`` the longest
    queue pair's. CPU per MiB or per operation: the process's CPU is
    shared by its queue pairs, so the longest one's measure (which spans
    the others) over all the octets or operations."""
    if len(rows) == 1:
        return rows[0]
    out = dict(rows[0], qps=len(rows))
    out["iterations"] = sum(r["iterations"] for r in rows)
    out.pop("interrupted", None)
    for r in rows:
        if r.get("interrupted"):
            out["interrupted"] = r["interrupted"]
            break
    for key in ("average_mib_s", "peak_mib_s", "messages_per_s", "ops_per_s", "peak_ops_s"):
        if key in out:
            out[key] = math.fsum(r.get(key, 0.0) for r in rows)
    if "seconds" in out:
        out["seconds"] = max(r.get("seconds", 0.0) for r in rows)
    if "peak_intervals" in out:  # a summed peak means what its shortest run's does
        shortest = min(rows, key=lambda r: r.get("seconds", 0.0))
        out["peak_intervals"] = shortest.get("peak_intervals", 0)
    for key in _LATENCY_KEYS:
        if key in out:
            out[key] = math.fsum(r.get(key, 0.0) for r in rows) / len(rows)
    for key, per in (("cpu_us_per_mib", _row_mib), ("cpu_us_per_op", _row_ops)):
        if all(key in r for r in rows):
            total = math.fsum(per(r) for r in rows)
            out[key] = {
                side: max(r[key][side] * per(r) for r in rows) / total if total else 0.0
                for side in ("client", "server")
            }
        else:
            out.pop(key, None)
    return out


def _row_mib(row: dict[str, Any]) -> float:
    """MiB a row's test moved."""
    return float(row["bytes"]) * float(row["iterations"]) / MIB


def _row_ops(row: dict[str, Any]) -> float:
    """Operations a row's test completed."""
    return float(row["iterations"])


_LATENCY_COLUMNS: Final = (
    ("#bytes", 10, "bytes", "d"),
    ("#iterations", 12, "iterations", "d"),
    ("t_min[usec]", 12, "min_us", ".2f"),
    ("t_max[usec]", 12, "max_us", ".2f"),
    ("t_typical[usec]", 16, "typical_us", ".2f"),
    ("t_avg[usec]", 12, "avg_us", ".2f"),
    ("t_stdev[usec]", 14, "stdev_us", ".2f"),
    ("99% percentile[usec]", 21, "p99_us", ".2f"),
    ("99.9% percentile[usec]", 23, "p99_9_us", ".2f"),
)
_BANDWIDTH_COLUMNS: Final = (
    ("#bytes", 10, "bytes", "d"),
    ("#iterations", 12, "iterations", "d"),
    ("BW peak[MiB/sec]", 17, "peak_mib_s", ".2f"),
    ("BW average[MiB/sec]", 20, "average_mib_s", ".2f"),
    ("MsgRate[Mpps]", 14, "mpps", ".6f"),
)


def title(data: dict[str, Any]) -> str:
    """The line above a table: operation, mode, adapter and MPA settings."""
    mode = "latency" if data["latency"] else "bandwidth"
    flags = f"markers {'on' if data['markers'] else 'off'}, CRC {'on' if data['crc'] else 'off'}"
    op = {
        "write": "RDMA Write",
        "read": "RDMA Read",
        "send": "Send",
        "atomic": "RDMA Atomic (FetchAdd)",
    }[data["op"]]
    adapters = f"client {data['adapter']}, server {data.get('peer_adapter', '?')} adapter"
    qps = data.get("qps", 1)
    if qps > 1:
        summed = "latency: the mean of their figures" if data["latency"] else "rates and BW summed"
        flags += f"; {qps} queue pairs in parallel, {summed}"
    return f"{op} {mode} ({adapters}; {flags})"


#: --op atomic in bandwidth mode: operations per second, and each one's
#: time from post to response (with as many in flight as the ORD allows).
_ATOMIC_COLUMNS: Final = (
    ("#bytes", 10, "bytes", "d"),
    ("#iterations", 12, "iterations", "d"),
    ("ops peak[/sec]", 15, "peak_ops_s", ".0f"),
    ("ops average[/sec]", 18, "ops_per_s", ".0f"),
    ("t_typical[usec]", 16, "typical_us", ".2f"),
    ("t_avg[usec]", 12, "avg_us", ".2f"),
    ("99% percentile[usec]", 21, "p99_us", ".2f"),
)

#: --report_gbits: the bandwidth columns in Gb/sec (10^9 bits), as perftest's.
_GBITS_COLUMNS: Final = (
    ("#bytes", 10, "bytes", "d"),
    ("#iterations", 12, "iterations", "d"),
    ("BW peak[Gb/sec]", 17, "peak_gbit_s", ".2f"),
    ("BW average[Gb/sec]", 20, "average_gbit_s", ".2f"),
    ("MsgRate[Mpps]", 14, "mpps", ".6f"),
)
_GBIT_PER_MIB: Final = MIB * 8 / 1e9


def table(
    data: dict[str, Any],
    write: Callable[[str], None],
    *,
    header: bool,
    detail: bool,
    gbits: bool = False,
) -> None:
    """Print ``data`` (a :func:`summary`) as perftest's table row, with the
    column header first when ``header``; ``detail``: the CPU and raw TCP
    lines below the row (a single test; a sweep's rows go without);
    ``gbits``: bandwidth in Gb/sec."""
    latency = data["latency"]
    atomic = data.get("op") == "atomic" and not latency
    columns: tuple[tuple[str, int, str, str], ...]
    if latency:
        columns = _LATENCY_COLUMNS
    elif atomic:
        columns = _ATOMIC_COLUMNS
    else:
        columns = _GBITS_COLUMNS if gbits else _BANDWIDTH_COLUMNS
    raw = data.get("raw_tcp")
    values = dict(data, mpps=data.get("messages_per_s", 0.0) / 1e6)
    for _, _, key, _ in columns:
        values.setdefault(key, 0.0)  # (an interrupted atomic run: no times yet)
    if gbits and not latency:
        values["peak_gbit_s"] = data.get("peak_mib_s", 0.0) * _GBIT_PER_MIB
        values["average_gbit_s"] = data.get("average_mib_s", 0.0) * _GBIT_PER_MIB
    if header:
        names = " ".join(f"{name:>{width}}" for name, width, _, _ in columns)
        if raw is not None:
            names += f" {'raw t_typical[usec]' if latency else 'raw BW[MiB/sec]':>20} {'ratio':>7}"
        write(names)
    row = " ".join(f"{values[key]:>{width}{fmt}}" for _, width, key, fmt in columns)
    if raw is not None:
        raw_value = raw["typical_us"] if latency else raw["average_mib_s"]
        ratio = data.get("ratio")
        row += f" {raw_value:>20.2f} {'-' if ratio is None else f'{ratio:.2f}x':>7}"
    write(row)
    if not detail:
        return
    if not latency and "peak_intervals" in data:
        write(peak_rule(data))
    cpu = data.get("cpu_us_per_mib")
    if cpu and not latency:
        write(f"CPU per MiB: client {cpu['client']:.0f} us, server {cpu['server']:.0f} us")
    cpu = data.get("cpu_us_per_op")
    if cpu and not latency:
        write(f"CPU per operation: client {cpu['client']:.1f} us, server {cpu['server']:.1f} us")
    if raw is None:
        return
    if latency:
        write(
            f"raw TCP ({raw['style']}): t_typical {raw['typical_us']:.2f} us, "
            f"99% {raw['p99_us']:.2f} us; RDMA adds {data['added_typical_us']:.2f} us "
            f"({data['ratio']:.2f}x)"
        )
        return
    shape = (
        "8-octet requests each answered by 8 octets, as many in flight as FetchAdds"
        if data["op"] == "atomic"
        else "one send per message"
    )
    write(
        f"raw TCP ({raw['style']}, {shape}): {raw['average_mib_s']:.2f} MiB/s, "
        f"{raw['messages_per_s'] / 1e6:.6f} Mpps; RDMA/raw: bandwidth {data['ratio']:.2f}x, "
        f"message rate {data['msg_rate_ratio']:.2f}x"
    )
    raw_cpu = raw["cpu_us_per_mib"]
    write(
        f"raw TCP CPU per MiB: client {raw_cpu['client']:.0f} us, server {raw_cpu['server']:.0f} us"
    )


class Printer:
    """Prints results as they come: a title and the column header whenever
    the kind of test changes, then one row per test (or one JSON object
    per test). The client and the server print the same rows."""

    def __init__(
        self, write: Callable[[str], None], *, as_json: bool = False, gbits: bool = False
    ) -> None:
        self._write = write
        self._json = as_json
        self._gbits = gbits
        self._kind: tuple[Any, ...] | None = None

    def result(self, data: dict[str, Any], *, detail: bool = True) -> None:
        if self._json:
            self._write(json.dumps(data))
            return
        keys = ("op", "latency", "adapter", "markers", "crc", "qps")
        kind = tuple(data.get(key) for key in keys)
        kind += ("raw_tcp" in data,)
        header = kind != self._kind
        if header:
            self._kind = kind
            self._write(title(data))
            self._write(f"client: {data['accel']}; server: {data['peer_accel']}")
        table(data, self._write, header=header, detail=detail, gbits=self._gbits)


class Ticker:
    """Progress of a long test on stderr (the CLI's ``--progress`` and
    ``--interval``), called by the test loops once per message: a clock
    read, and a line when one is due."""

    def __init__(
        self,
        result: PerfResult,
        *,
        enabled: bool,
        forced: bool,
        interval: float,
        results: list[PerfResult] | None = None,
    ) -> None:
        self._result = result
        #: ``-q``: every queue pair's result, counted together (they share this ticker).
        self._results = results if results is not None else [result]
        self._stream = sys.stderr
        now = time.monotonic()
        self._interval = max(interval, 0.01)
        first = self._interval if forced else max(self._interval, DELAY)
        self._next = now + first if enabled or forced else math.inf
        terminal = bool(getattr(self._stream, "isatty", lambda: False)())
        label = f"{result.test.size}-octet {result.test.op}"
        self._meter = ProgressMeter(now, terminal, label)

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        count = sum(r.iterations for r in self._results)
        self._out(self._meter.report(now, count, count * self._result.test.size))

    def finish(self) -> None:
        self._out(self._meter.finish())

    def _out(self, text: str) -> None:
        if text:
            try:
                self._stream.write(text)
                self._stream.flush()
            except (OSError, ValueError):
                pass


class Served:
    """The server's side: what it prints as tests come and go, and its
    tally (what an interrupt prints)."""

    def __init__(
        self,
        adapter: str,
        write: Callable[[str], None] = print,
        *,
        max_size: int = MAX_SIZE,
        markers: bool = False,
        crc: bool = True,
    ) -> None:
        self.adapter = adapter
        #: Largest message a client may ask for (``--max-size``).
        self.max_size = max_size
        #: What this server asks for (``--markers``, not ``--no-crc``).
        self.markers = markers
        self.crc = crc
        self.tests = 0
        self.current: PerfTest | None = None
        #: Data messages (Send) or pings (Write latency) of the current test.
        self.messages = 0
        self._write = write
        self._printer = Printer(write)
        #: ``-q`` tests under way: each group's rows so far.
        self._groups: dict[str, list[dict[str, Any]]] = {}
        #: ``-q`` tests one of whose queue pairs failed (the latest, as a set in order).
        self._failed_groups: dict[str, None] = {}

    def listening(self, where: tuple[Any, ...]) -> None:
        self._write(
            f"iwarp perf: serving on {where[0]}:{where[1]} "
            f"({self.adapter} adapter, {_accel.describe()})"
        )
        sys.stdout.flush()

    def begin(self, test: PerfTest) -> None:
        self.current = test
        self.messages = 0

    def settings_differ(self, test: PerfTest, client_markers: bool, client: object) -> None:
        """Say when the client's MPA settings differ from this server's:
        markers (``client_markers``: whether it asked for them in what it
        receives; the client ends such a test) and CRC (on if either asks)."""
        who = f"the client {_address(client)}" if client is not None else "the client"
        notes = []
        if client_markers != self.markers:
            asks = "asks for markers (--markers)" if client_markers else "asks for no markers"
            notes.append(
                f"markers differ: {who} {asks}, this server "
                f"{'does' if self.markers else 'does not'}; the client ends the test"
            )
        if test.crc is False and self.crc:
            notes.append(f"CRC is on although {who} has --no-crc: this server asks for it")
        elif test.crc and not self.crc:
            notes.append(f"CRC is on although this server has --no-crc: {who} asks for it")
        for note in notes:
            print(f"iwarp perf: {note}", file=sys.stderr, flush=True)

    def refusal(self, test: PerfTest) -> str | None:
        """Why this server does not run ``test`` (None: it does)."""
        if test.size > self.max_size:
            return (
                f"{test.size}-octet messages are over this server's --max-size "
                f"({self.max_size} octets)"
            )
        return None

    def refuse(self, why: str) -> bytes:
        """The answer that refuses a test (the client raises it as a
        :class:`PerfError`); the test counts as failed here."""
        self.failed(f"refused: {why}")
        return encode({"error": why})

    def answer(self, stag: int, credits: int, markers: bool, crc: bool) -> dict[str, Any]:
        """The server's answer to a test description."""
        return {
            "stag": stag,
            "credits": credits,
            "markers": markers,
            "crc": crc,
            "accel": _accel.describe(),
            "adapter": self.adapter,
        }

    def report(self, cpu: float, target: MemoryRegion | None) -> dict[str, Any]:
        """What the server tells the client when a test ended: its CPU time
        and, after atomics, the word the FetchAdds of 1 counted up (the
        client checks that none was lost, :func:`check_word`)."""
        message: dict[str, Any] = {"cpu": cpu}
        test = self.current
        if test is not None and test.op == "atomic" and target is not None:
            message["word"] = int.from_bytes(target.view[:ATOMIC_SIZE], "big")
        return message

    def failed(self, why: str, *, client: object = None, test: PerfTest | None = None) -> None:
        """A test failed: one line naming the client (its address) and the
        test (``test``, else the one under way), if known. A queue pair of a
        ``-q`` test fails the whole test, counted once; its other queue
        pairs' rows are not printed."""
        counted = True
        if test is not None and test.qps > 1 and test.group is not None:
            self._groups.pop(test.group, None)
            counted = test.group not in self._failed_groups
            self._failed_groups[test.group] = None
            if len(self._failed_groups) > MAX_QPS:
                del self._failed_groups[next(iter(self._failed_groups))]
        test = test if test is not None else self.current
        self.tests += counted
        self.current = None
        about = []
        if client is not None:
            about.append(f"client {_address(client)}")
        if test is not None:
            mode = "latency" if test.latency else "bandwidth"
            about.append(f"{test.size}-octet {test.op} {mode} test")
        where = f" ({', '.join(about)})" if about else ""
        print(f"iwarp perf: test failed{where}: {why}", file=sys.stderr, flush=True)

    def result(self, data: dict[str, Any], *, detail: bool, test: PerfTest | None = None) -> None:
        """A test ended: print the client's result as a table row. A queue
        pair of a ``-q`` test (``test.qps`` > 1) waits for the others of its
        group: their rows summed (:func:`combine`) are one row, one test."""
        if test is not None and test.qps > 1 and test.group is not None:
            if test.group in self._failed_groups:
                return  # another queue pair of the test failed: the test did
            rows = self._groups.setdefault(test.group, [])
            rows.append(data)
            if len(rows) < test.qps:
                return
            del self._groups[test.group]
            if len(self._groups) > MAX_QPS:  # groups whose queue pairs failed: forget the oldest
                del self._groups[next(iter(self._groups))]
            data = combine(rows)
        self.tests += 1
        self.current = None
        try:
            self._printer.result(data, detail=detail)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            print(f"iwarp perf: the client's result is unreadable: {exc!r}", file=sys.stderr)
        sys.stdout.flush()

    def text(self) -> str:
        """The tally so far, for an interrupt."""
        text = f"{self.tests} tests served"
        test = self.current
        if test is not None:
            mode = "latency" if test.latency else "bandwidth"
            text += f"; a {test.size}-octet {test.op} {mode} test was under way"
            if test.op == "send" or (test.op == "write" and test.latency):
                text += f" ({self.messages} messages received)"
        return text


def _address(peer: object) -> str:
    """``host:port`` of a socket address (as given otherwise)."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(peer)
