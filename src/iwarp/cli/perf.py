"""``iwarp perf``: bandwidth and latency of RDMA Write, Read, Send and
RFC 7306 FetchAdd, as perftest measures.

``iwarp perf --server`` serves; ``iwarp perf HOST`` connects and runs a test
over the public verbs API (the same path an application takes). The flags
are perftest's (ib_write_bw, ib_send_lat...): ``-s SIZE`` is the message
size (as in ib_write_bw; the server flag is ``--server``), ``-n`` the
iterations, ``-D`` seconds instead, ``-p`` the port, ``-a`` every size from
2 to 2^23 octets (one table row per size).

* bandwidth (default): ``-n`` messages (1000) of ``-s`` octets (64K), kept in
  flight; the time runs until the server confirms that every octet was
  placed. Printed like ib_write_bw: BW peak (the best of ten equal
  intervals of the run, none shorter than 0.1 s, the first, where the pipe
  fills, left out; a run under 0.5 s, fewer than five intervals, shows its
  average, marked not meaningful: its intervals would time bursts of TCP's
  buffering, not the transfer), BW average, message rate. A line under a
  single test's row states the rule and the peak's ratio to the average
  (a steady run stays within 1.5x; it says when a run's did not).
* ``--latency``: one message at a time; t_min, t_max, t_typical (median),
  t_avg, t_stdev, 99% and 99.9% in microseconds, as ib_send_lat prints. A
  Send is answered by a Send of the same size; a Read completes when its
  data arrived; a Write is followed by a zero-length Send that the server
  answers (RDMA gives a Write's target no completion to answer from).
* ``--compare-raw``: the same octets (or the same ping-pong) over plain TCP
  between the same two processes right after each test, waiting the same
  way (on the same event loop; with ``--sync``, busy polling or sleeping as
  the queue pairs do), one send per message; prints the ratios of
  bandwidth, message rate or latency.
* ``--op atomic``: RFC 7306 FetchAdds of 1 on one 64-bit word of the
  server's (registered with Atomic access), 8 octets each whatever ``-s``
  says, as ib_atomic_bw / ib_atomic_lat: the rate keeps as many in flight
  as the queue pair's limit on outstanding Atomic Requests; ``--latency``
  times ``fetch_add`` one at a time. ``--compare-raw`` compares with plain
  TCP requests answered by as many octets, as many in flight. A server
  without RFC 7306 atomics ends the test with a message saying so.
* ``--sync``: the blocking adapter (iwarp.sync) instead of asyncio, on
  either end or both.
* ``-q N``: N queue pairs (connections) run the test in parallel between
  the same client and server (asyncio: on one event loop; ``--sync``: a
  thread each), ``-n`` messages each; the row sums them: iterations,
  bandwidth (BW average, and BW peak as the sum of each one's peak),
  message rate; latency figures are the mean of the queue pairs' own (the
  title says which). The server takes the N connections of one test
  together and prints the same summed row. Not with ``--compare-raw``.

Both ends print the result table (the client sends its figures to the
server when a test ends). The client describes each test in its first Send
(JSON), one connection per test; the server needs no per-test flags, but
asks for markers and CRC as its own ``--markers``/``--no-crc`` say (MPA:
each receiver asks for markers in what it receives), and the client
refuses a mismatch with a clear message, which the server says too. MPA
uses CRC when either end asks: a ``--no-crc`` that the other end
overrides is said on both ends. Ctrl-C or SIGTERM stops either
end within a second with the results so far (exit 130 or 143). A client
whose server goes away mid-test prints the row measured until then
(``interrupted`` in --json) and where it ended, exit 1; the server's line
for a failed test names the client's address and the test.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final

from iwarp.cli._args import port, size
from iwarp.cli._capture import add_pcap_option, captured, sync_pcap_capture
from iwarp.cli._perf import (
    ATOMIC_SIZE,
    MAX_QPS,
    MAX_SAMPLES,
    MAX_SIZE,
    OPS,
    SWEEP_SIZES,
    WINDOW,
    PerfError,
    PerfResult,
    PerfTest,
    Printer,
    Served,
    Ticker,
    combine,
    summary,
)
from iwarp.cli._progress import add_progress_options
from iwarp.cli._report import format_error, unreachable
from iwarp.cli._run import run_blocking_interruptible, run_interruptible
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.sockets import is_connect_failure
from iwarp.sync import BUSY_POLL

__all__ = ["DEFAULT_PORT", "PerfError", "PerfResult", "parse_size", "register", "run", "summary"]

DEFAULT_PORT: Final = 18515  # perftest's default port, so firewalls set up for it fit
DEFAULT_SIZE: Final = 1 << 16
DEFAULT_ITERS: Final = 1000
#: What ``-s`` holds when given no value: ``-s`` used to mean "serve".
_NO_SIZE: Final = -1
_SERVE_HINT: Final = "-s is the message size, as in ib_write_bw (-s 64K); to serve, use --server"


def parse_size(text: str) -> int:
    """``64``, ``4K``, ``1M``, ``1G`` (powers of 1024, the CLI's one size
    parser) to octets, 1 to 1G."""
    try:
        value = size(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} ({_SERVE_HINT})") from None
    if not 0 < value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size must be 1 octet to 1G, got {text}")
    return value


def _iterations(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of iterations: {text!r}") from None
    if not 0 < value <= MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"iterations must be 1 to {MAX_SAMPLES}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _qps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of queue pairs: {text!r}") from None
    if not 0 < value <= MAX_QPS:
        raise argparse.ArgumentTypeError(f"queue pairs must be 1 to {MAX_QPS}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("must be 0 to 3600 seconds")
    return value


def _microseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of microseconds: {text!r}") from None
    if not 0 <= value <= 1e6:
        raise argparse.ArgumentTypeError("must be 0 to 1000000 microseconds")
    return value / 1e6


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "perf",
        help="bandwidth and latency of RDMA Write/Read/Send/atomics (like perftest)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("host", nargs="?", help="server to test (omit with --server)")
    parser.add_argument(
        "--server", action="store_true", help="serve tests (perftest's server; not -s)"
    )
    parser.add_argument("--bind", default="0.0.0.0", help="server: address to bind")
    parser.add_argument(
        "-p", "--port", type=port, default=DEFAULT_PORT, help=f"TCP port ({DEFAULT_PORT})"
    )
    parser.add_argument(
        "--count",
        type=_positive,
        help="server: exit after this many tests (each size of a sweep is one; default: serve on)",
    )
    parser.add_argument(
        "--max-size",
        type=parse_size,
        default=MAX_SIZE,
        metavar="SIZE",
        help="server: refuse tests of larger messages (1G; the server allocates its "
        "buffers of that size)",
    )
    parser.add_argument(
        "--op",
        choices=OPS,
        default="write",
        help="what to measure: RDMA Write (default), RDMA Read, Send, or RFC 7306 FetchAdd "
        f"(atomic: {ATOMIC_SIZE} octets each, like ib_atomic_bw / ib_atomic_lat)",
    )
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument(
        "-s",
        "--size",
        type=parse_size,
        nargs="?",
        const=_NO_SIZE,
        default=DEFAULT_SIZE,
        help="message size, K/M/G suffixes (64K), as ib_write_bw's -s",
    )
    sizes.add_argument(
        "-a", "--all", action="store_true", help="every size from 2 to 2^23 octets, a row each"
    )
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument(
        "-n", "--iters", type=_iterations, help=f"messages per size ({DEFAULT_ITERS})"
    )
    runs.add_argument("-D", "--duration", type=_seconds, help="seconds per size instead of -n")
    parser.add_argument(
        "-q",
        "--qp",
        type=_qps,
        default=1,
        metavar="N",
        help=f"N queue pairs (connections) in parallel, as perftest's -q (1 to {MAX_QPS}): "
        "rates and BW summed, latency the mean of theirs; --sync: a thread each",
    )
    parser.add_argument("--markers", action="store_true", help="ask for MPA markers")
    parser.add_argument("--no-crc", action="store_true", help="do not ask for MPA CRC")
    parser.add_argument("--latency", action="store_true", help="latency instead of bandwidth")
    parser.add_argument(
        "--compare-raw",
        action="store_true",
        help="also measure plain TCP waiting the same way, print the ratios",
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="run on the blocking adapter (iwarp.sync) instead of asyncio; either end may",
    )
    parser.add_argument(
        "--busy-poll",
        type=_microseconds,
        default=None,
        metavar="US",
        help=f"with --sync: microseconds each wait busy-polls before it sleeps "
        f"({BUSY_POLL * 1e6:.0f}; 0 sleeps at once); --compare-raw's TCP waits the same way",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per test")
    parser.add_argument(
        "--report_gbits",
        "--report-gbits",
        action="store_true",
        help="BW columns in Gb/sec (10^9 bits) instead of MiB/sec, as perftest's --report_gbits",
    )
    perftest = parser.add_argument_group(
        "perftest flags that change nothing here (accepted so perftest command lines run)"
    )
    perftest.add_argument(
        "-F",
        "--CPU-freq",
        action="store_true",
        help="perftest: do not fail on CPU frequency warnings; iwarp perf checks none",
    )
    perftest.add_argument(
        "-R",
        "--rdma_cm",
        action="store_true",
        help="perftest: connect with rdma_cm; iwarp perf always connects as rdma_cm does on "
        "iWARP (TCP, then MPA startup)",
    )
    perftest.add_argument(
        "-d",
        "--ib-dev",
        metavar="DEV",
        help="perftest: the RDMA device; iwarp runs over the kernel's TCP, so there is none "
        "to choose (a one-line note says it is ignored)",
    )
    perftest.add_argument(
        "-x",
        "--gid-index",
        metavar="N",
        help="perftest: the GID index; none here (TCP addresses, no GID table): ignored, "
        "with a note",
    )
    perftest.add_argument(
        "-t",
        "--tx-depth",
        metavar="N",
        help=f"perftest: send queue depth; iwarp perf keeps {WINDOW} messages in flight "
        "(Reads and atomics: the negotiated ORD) and says so when -t asks otherwise",
    )
    add_progress_options(parser)
    add_pcap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.size == _NO_SIZE:
        print(f"iwarp perf: -s needs a size: {_SERVE_HINT}", file=sys.stderr)
        return 2
    if args.server and args.host:
        print("iwarp perf: --server takes no HOST (use --bind)", file=sys.stderr)
        return 2
    if not args.server and not args.host:
        print("iwarp perf: give HOST, or --server to serve", file=sys.stderr)
        return 2
    if args.qp > 1 and (args.server or args.compare_raw):
        what = "--server (it takes the queue pairs the client asks for)"
        if not args.server:
            what = "--compare-raw (its plain TCP runs one connection)"
        print(f"iwarp perf: -q is a client setting, not with {what}", file=sys.stderr)
        return 2
    if args.busy_poll is not None and not args.sync:
        print("iwarp perf: --busy-poll is a setting of --sync (iwarp.sync)", file=sys.stderr)
        return 2
    if args.op == "atomic" and not args.server:
        if args.all:
            print(
                f"iwarp perf: --op atomic has one size ({ATOMIC_SIZE} octets, a 64-bit word); "
                "-a sweeps message sizes",
                file=sys.stderr,
            )
            return 2
        if args.size not in (DEFAULT_SIZE, ATOMIC_SIZE):
            print(
                f"iwarp perf: --op atomic moves {ATOMIC_SIZE} octets (a 64-bit word), "
                f"not the {args.size} of -s",
                file=sys.stderr,
            )
        args.size = ATOMIC_SIZE
    _perftest_notes(args)
    config = MpaConfig(markers=args.markers, crc=not args.no_crc)
    try:
        if args.server:
            return _serve(args, config)
        return _client(args, config)
    except (OSError, IwarpError, PerfError) as exc:
        if not args.server and is_connect_failure(exc):
            hint = (
                f"start a server there, e.g. iwarp perf --server --bind {args.host} -p {args.port}"
            )
            exc_record = unreachable(args.host, args.port, exc, tried="TCP connect", hint=hint)
            print(format_error("iwarp perf", exc_record), file=sys.stderr)
        else:
            print(f"iwarp perf: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"iwarp perf: not enough memory for {args.size}-octet messages", file=sys.stderr)
        return 1


def _serve(args: argparse.Namespace, config: MpaConfig) -> int:
    served = Served(
        "sync" if args.sync else "asyncio",
        max_size=args.max_size,
        markers=args.markers,
        crc=not args.no_crc,
    )

    def interrupted(why: str) -> None:
        print(f"iwarp perf: interrupted by {why}: {served.text()}", file=sys.stderr)

    if args.sync:
        from iwarp.cli import _perf_sync

        def blocking() -> int:
            with sync_pcap_capture(args.pcap, initiator=False):
                busy_poll = BUSY_POLL if args.busy_poll is None else args.busy_poll
                return _perf_sync.run_server(
                    args.bind, args.port, config, args.count, served, busy_poll
                )

        return run_blocking_interruptible(blocking, interrupted)

    from iwarp.cli import _perf_async

    work = _perf_async.run_server(args.bind, args.port, config, args.count, served)
    return run_interruptible(captured(args.pcap, work), interrupted)


def _perftest_notes(args: argparse.Namespace) -> None:
    """One line for each perftest flag given that does not apply here."""
    notes = []
    if args.ib_dev is not None:
        notes.append(f"-d {args.ib_dev} ignored: iwarp runs over the kernel's TCP, no RDMA device")
    if args.gid_index is not None:
        notes.append(f"-x {args.gid_index} ignored: TCP addresses, no GID table")
    if args.tx_depth is not None and args.tx_depth != str(WINDOW):
        notes.append(
            f"-t {args.tx_depth} ignored: {WINDOW} messages stay in flight "
            "(Reads and atomics: the negotiated ORD)"
        )
    for note in notes:
        print(f"iwarp perf: {note}", file=sys.stderr)


def _client(args: argparse.Namespace, config: MpaConfig) -> int:
    printer = Printer(print, as_json=args.json, gbits=args.report_gbits)
    sizes = SWEEP_SIZES if args.all else (args.size,)
    detail = not args.all
    limit = args.iters or (MAX_SAMPLES if args.duration else DEFAULT_ITERS)
    adapter = "sync" if args.sync else "asyncio"
    current: list[PerfResult] = []  # the test under way: a result per queue pair

    def begin(size_: int) -> tuple[list[PerfResult], Ticker]:
        group = secrets.token_hex(8) if args.qp > 1 else None
        test = PerfTest(
            args.op,
            size_,
            args.latency,
            args.compare_raw,
            crc=not args.no_crc,
            qps=args.qp,
            group=group,
        )
        current[:] = [
            PerfResult(
                test, adapter, args.markers, not args.no_crc, limit=limit, duration=args.duration
            )
            for _ in range(args.qp)
        ]
        ticker = Ticker(
            current[0],
            enabled=not args.json,
            forced=args.progress,
            interval=args.interval,
            results=list(current),
        )
        return list(current), ticker

    def row(results: list[PerfResult]) -> dict[str, Any]:
        return combine([summary(result) for result in results])

    def end(results: list[PerfResult]) -> None:
        current.clear()
        printer.result(row(results), detail=detail)

    def interrupted(why: str) -> None:
        where = "between tests"
        if current:
            for result in current:
                result.interrupt(why)
            iterations = sum(result.iterations for result in current)
            where = f"{iterations} iterations into the {current[0].test.size}-octet test"
            if iterations:
                printer.result(row(current), detail=detail)
        print(f"iwarp perf: interrupted by {why}, {where}", file=sys.stderr)

    def lost(exc: BaseException) -> int:
        # The server went away (or refused) mid-test: the row measured so
        # far, marked interrupted, then why; exit 1.
        iterations = sum(result.iterations for result in current)
        if not iterations:
            raise exc
        for result in current:
            result.interrupt(f"connection lost: {exc}")
        printer.result(row(current), detail=detail)
        print(
            f"iwarp perf: the test ended {iterations} iterations into the "
            f"{current[0].test.size}-octet test (the row is what was measured until then): {exc}",
            file=sys.stderr,
        )
        return 1

    if args.sync:
        from iwarp.cli import _perf_sync

        busy_poll = BUSY_POLL if args.busy_poll is None else args.busy_poll

        def one(result: PerfResult, ticker: Ticker) -> None:
            _perf_sync.run_client(
                args.host,
                args.port,
                config,
                result,
                detail=detail,
                ticker=ticker,
                busy_poll=busy_poll,
            )

        def blocking() -> int:
            with sync_pcap_capture(args.pcap, initiator=True):
                for size_ in sizes:
                    results, ticker = begin(size_)
                    try:
                        _in_threads(one, results, ticker)
                    except (OSError, IwarpError, PerfError) as exc:
                        return lost(exc)
                    end(results)
            return 0

        return run_blocking_interruptible(blocking, interrupted)

    from iwarp.cli import _perf_async

    async def tests() -> int:
        for size_ in sizes:
            results, ticker = begin(size_)
            runs = [
                _perf_async.run_client(
                    args.host, args.port, config, result, detail=detail, ticker=ticker
                )
                for result in results
            ]
            try:
                await _together(runs)
            except (OSError, IwarpError, PerfError) as exc:
                return lost(exc)
            end(results)
        return 0

    return run_interruptible(captured(args.pcap, tests()), interrupted)


async def _together(runs: list[Coroutine[Any, Any, None]]) -> None:
    """Run a test's queue pairs at once; the first failure cancels the
    others (their rows so far stay in their results) and is raised."""
    if len(runs) == 1:
        await runs[0]
        return
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _in_threads(
    one: Callable[[PerfResult, Ticker], None], results: list[PerfResult], ticker: Ticker
) -> None:
    """``one`` for each queue pair's result, a thread each (one: in this
    thread); the first failure is raised once all ended (a failing queue
    pair's peer ends the others' tests too). The joins wait in short steps
    so that a signal reaches this thread."""
    if len(results) == 1:
        one(results[0], ticker)
        return
    errors: list[BaseException] = []

    def run(result: PerfResult) -> None:
        try:
            one(result, ticker)
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    if errors:
        raise errors[0]
