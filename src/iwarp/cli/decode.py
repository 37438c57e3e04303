"""``iwarp decode``: analyze captures (pcap or pcapng) of iWARP or VI/TCP traffic.

Streaming: records are written while the capture is read, so a live pipe
(``tcpdump -U -w - | iwarp decode -``) is decoded as it goes, and memory
follows the open connections, not the file. Several captures are decoded
in parallel processes (``--jobs``), each reported in turn, then a total.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

from iwarp.analyze.analyzer import ConnectionReport, Options, analyze_stream
from iwarp.analyze.capture import CaptureError, CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.plot import PlotUnavailableError, check_available, write_plot
from iwarp.analyze.records import Record
from iwarp.analyze.render import (
    capture_json,
    summary_json,
    verbose_lines,
    write_capture_text,
    write_connection_text,
)
from iwarp.analyze.source import CountingReader, capture_size, open_capture
from iwarp.analyze.stats import CaptureTotals
from iwarp.analyze.tables import CsvTables, concatenate
from iwarp.analyze.tcp import Limits

#: Exit status when the capture shows protocol errors.
EXIT_PROTOCOL_ERRORS = 1
#: Exit status when a file cannot be read (or has no such --stream).
EXIT_BAD_FILE = 2
#: Exit status when a capture is cut off (the file ends inside a record) and
#: shows no protocol errors.
EXIT_TRUNCATED = 3
EXIT_INTERRUPTED = 130

_TRISTATE = {"auto": None, "yes": True, "no": False}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "decode",
        help="decode and check MPA/DDP/RDMAP or VI/TCP in capture files",
        description="Read pcap or pcapng captures (also gzip, xz, and zstd if a reader is "
        "installed; '-' reads standard input, e.g. tcpdump -U -w - | iwarp decode -), "
        "reassemble every TCP connection, find MPA by its Request/Reply frames and check "
        "every FPDU: markers (position, reserved field, FPDUPTR), PAD, CRC, DDP and RDMAP "
        "headers. VI/TCP connections are decoded too. Records come out while the capture is "
        "read; memory follows the open connections, not the file. Each connection's summary "
        "gives messages and octets per opcode, FPDU sizes, throughput, TCP gaps and "
        "retransmissions, Read latency, Terminates with their reasons and the time from SYN "
        "to MPA full operation. Records longer than 256 KiB are cut to it (as libpcap "
        "does). Exit status 1 when a capture shows protocol errors, 2 when one cannot be "
        "read or --stream names no connection in it, 3 when one is cut off (the file ends "
        "in the middle of a record; said in the summary) and none shows errors.",
    )
    parser.add_argument("capture", nargs="+", help="pcap or pcapng files ('-' for standard input)")
    style = parser.add_mutually_exclusive_group()
    style.add_argument("--json", action="store_true", help="one JSON object per line")
    style.add_argument(
        "-V",
        "--verbose",
        action="store_true",
        help="list every frame, FPDU (MPA, markers, DDP, RDMAP fields), error and note, "
        "as tshark -V does, before the summaries",
    )
    parser.add_argument(
        "--csv",
        metavar="DIR",
        help="also write fpdus.csv, messages.csv, connections.csv and errors.csv into DIR",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw throughput over time (Terminates and errors marked), FPDU sizes and "
        "Read latency into FILE (.svg, .png or .pdf; needs pip install 'iwarp[plot]')",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        metavar="N",
        type=_positive,
        default=None,
        help="captures decoded at once, in separate processes (default: one per CPU, "
        "at most one per capture)",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "yes", "no"),
        default="auto",
        help="progress (percent, MB/s, ETA) on stderr; auto: when stderr is a terminal",
    )
    parser.add_argument(
        "--mpa-start",
        metavar="SEQ",
        action="append",
        type=_seq,
        default=[],
        help="TCP sequence number of the first octet of MPA full operation, for a stream "
        "whose Request/Reply was not captured (repeatable: one per direction)",
    )
    parser.add_argument(
        "--markers",
        choices=tuple(_TRISTATE),
        default="auto",
        help="markers in streams whose frames were not captured (default: find out)",
    )
    parser.add_argument(
        "--crc",
        choices=tuple(_TRISTATE),
        default="auto",
        help="CRCs in streams whose frames were not captured (default: find out)",
    )
    parser.add_argument(
        "--resync",
        action="store_true",
        help="look for FPDUs (by markers and CRCs) in connections without MPA frames",
    )
    parser.add_argument(
        "--raw-ulp",
        action="store_true",
        help="the ULPDUs are not DDP segments (e.g. traffic of iwarp connect): "
        "do not decode or check DDP/RDMAP headers",
    )
    parser.add_argument(
        "--no-receiver",
        action="store_true",
        help="skip the second opinion: replaying each MPA direction through the "
        "out-of-order receiver (faster)",
    )
    parser.add_argument(
        "--stream",
        metavar="N",
        type=int,
        action="append",
        default=[],
        help="only this connection (tcp.stream number; repeatable)",
    )
    parser.set_defaults(func=run)


def _seq(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number") from None
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"{text} is not a 32-bit sequence number")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


@dataclass(frozen=True)
class Settings:
    """What every capture is decoded with (picklable: sent to worker processes)."""

    options: Options
    json: bool = False
    verbose: bool = False
    streams: tuple[int, ...] = ()
    progress: bool = False
    limits: Limits = field(default_factory=Limits)


@dataclass
class FileResult:
    """How one capture went."""

    name: str
    status: int = 0
    message: str | None = None
    stats: CaptureStats = field(default_factory=CaptureStats)
    totals: CaptureTotals = field(default_factory=CaptureTotals)
    octets_read: int = 0
    seconds: float = 0.0


def run(args: argparse.Namespace) -> int:
    if args.plot:
        try:
            check_available(args.plot)
        except PlotUnavailableError as exc:
            print(f"iwarp decode: {exc}", file=sys.stderr)
            return EXIT_BAD_FILE
    files: list[str] = args.capture
    if files.count("-") > 1:
        print("iwarp decode: standard input ('-') can be read only once", file=sys.stderr)
        return EXIT_BAD_FILE
    progress = {"yes": True, "no": False}.get(args.progress, sys.stderr.isatty())
    settings = Settings(
        Options(
            mpa_start=tuple(args.mpa_start),
            markers=_TRISTATE[args.markers],
            crc=_TRISTATE[args.crc],
            resync=args.resync,
            ddp=not args.raw_ulp,
            receiver=not args.no_receiver,
        ),
        json=args.json,
        verbose=args.verbose,
        streams=tuple(args.stream),
        progress=progress,
    )
    jobs = args.jobs or min(len(files), os.cpu_count() or 1)
    try:
        if len(files) == 1 or jobs == 1 or "-" in files:
            results = []
            for i, path in enumerate(files):
                csv_dir = _csv_part(args.csv, i, len(files))
                results.append(decode_capture(path, settings, sys.stdout, csv_dir))
        else:
            results = _parallel(files, settings, jobs, args.csv, progress)
        if args.csv and len(files) > 1:
            parts = [
                p for p in (_csv_part(args.csv, i, len(files)) for i in range(len(files))) if p
            ]
            concatenate(parts, args.csv)
            for part in parts:
                shutil.rmtree(part, ignore_errors=True)
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("iwarp decode: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    total = CaptureTotals()
    for result in results:
        total.merge(result.totals)
    if len(files) > 1:
        _write_total(results, total, settings, sys.stdout)
    if args.plot and any(r.status != EXIT_BAD_FILE for r in results):
        title = files[0] if len(files) == 1 else f"{len(files)} captures"
        write_plot(total, args.plot, f"iwarp decode: {title}")
    statuses = {r.status for r in results}
    for status in (EXIT_BAD_FILE, EXIT_PROTOCOL_ERRORS, EXIT_TRUNCATED):
        if status in statuses:
            return status
    return 0


def _csv_part(directory: str | None, index: int, count: int) -> str | None:
    """Where one capture's tables go: DIR itself, or a part to join (several captures)."""
    if directory is None:
        return None
    if count == 1:
        return directory
    return os.path.join(directory, f".part-{os.getpid()}-{index}")


# -- one capture -------------------------------------------------------------------


def decode_capture(path: str, settings: Settings, out: TextIO, csv_dir: str | None) -> FileResult:
    """Decode one capture, writing its records and reports to ``out``."""
    name = "<stdin>" if path == "-" else path
    result = FileResult(name)
    started = time.perf_counter()
    counter: list[CountingReader] = []
    try:
        f = open_capture(path, counter)
    except (OSError, CaptureError) as exc:
        return _failed(result, exc)
    tables = CsvTables(csv_dir, name) if csv_dir else None
    size = capture_size(path)
    meter = _Progress(name, size, counter[0]) if settings.progress and size else None
    streams = set(settings.streams)
    live = path == "-"
    totals = result.totals
    stats = result.stats
    try:
        with f:
            packets: Iterable[TcpPacket] = read_tcp_packets(f, stats)
            if meter is not None:
                packets = meter.wrap(packets)
            for output in analyze_stream(packets, settings.options, settings.limits):
                if isinstance(output, ConnectionReport):
                    _account(totals, output, streams)
                    if streams and output.index not in streams:
                        continue
                    if tables is not None:
                        tables.connection(output)
                    if output.protocol is None and not output.error_count:
                        continue
                    if settings.json:
                        out.write(json.dumps(summary_json(output)) + "\n")
                    else:
                        write_connection_text(output, out)
                    if live:
                        out.flush()
                    continue
                if streams and output.stream not in streams:
                    continue
                _record(output, settings, out, tables)
                if live:
                    out.flush()  # a live pipe: each record as soon as it is known
    except (OSError, CaptureError) as exc:
        _failed(result, exc)
    finally:
        if meter is not None:
            meter.clear()
        if tables is not None:
            tables.close()
    result.octets_read = counter[0].count
    result.seconds = time.perf_counter() - started
    if result.status == EXIT_BAD_FILE and result.message and stats.frames == 0:
        return result
    missing = sorted(s for s in streams if s >= totals.connections)
    extra = {
        "octets_read": result.octets_read,
        "seconds": round(result.seconds, 3),
    }
    if settings.json:
        out.write(json.dumps(capture_json(name, stats, totals, extra)) + "\n")
    else:
        rate = result.octets_read / result.seconds / 1e6 if result.seconds else 0.0
        write_capture_text(
            name,
            stats,
            totals,
            out,
            f" ({result.octets_read / 1e6:.1f} MB in {result.seconds:.2f} s, {rate:.1f} MB/s)",
        )
    out.flush()
    if missing and result.status != EXIT_BAD_FILE:
        # A typo must not pass for a clean capture (exit 0, no errors).
        known = f"0-{totals.connections - 1}" if totals.connections else "none"
        print(
            f"iwarp decode: {name}: no TCP connection {missing[0]} (streams: {known})",
            file=sys.stderr,
        )
        result.status = EXIT_BAD_FILE
    elif result.status != EXIT_BAD_FILE:
        result.status = (
            EXIT_PROTOCOL_ERRORS if totals.errors else EXIT_TRUNCATED if stats.truncated_file else 0
        )
    return result


def _failed(result: FileResult, exc: BaseException) -> FileResult:
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    print(f"iwarp decode: {result.name}: {message}", file=sys.stderr)
    result.status = EXIT_BAD_FILE
    result.message = message
    return result


def _account(totals: CaptureTotals, report: ConnectionReport, streams: set[int]) -> None:
    totals.connections += 1
    if streams and report.index not in streams:
        return
    if report.protocol is not None:
        totals.iwarp_connections += 1
    totals.errors += report.error_count
    for d in report.directions:
        totals.fpdus += d.fpdus
        totals.ulpdu_octets += d.ulpdu_octets
        totals.tcp_octets += d.octets
        totals.retransmissions += d.retransmissions
        totals.gaps += d.gaps
        if d.stats is not None:
            totals.add(d.direction, d.stats, report.first_time)


def _record(record: Record, settings: Settings, out: TextIO, tables: CsvTables | None) -> None:
    if tables is not None:
        tables.record(record)
    if settings.json:
        out.write(json.dumps(record.to_json()) + "\n")
    elif settings.verbose:
        out.write("\n".join(verbose_lines(record)) + "\n")


class _Progress:
    """A self-updating line on stderr: percent of the file, MB/s, ETA."""

    def __init__(self, name: str, size: int, reader: CountingReader) -> None:
        self.name = name
        self.size = size
        self.reader = reader
        self.started = self.last = time.monotonic()
        self.shown = False

    def wrap(self, packets: Iterable[TcpPacket]) -> Iterator[TcpPacket]:
        for i, packet in enumerate(packets):
            if not i & 1023:
                self.update()
            yield packet

    def update(self) -> None:
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        done = self.reader.count
        elapsed = now - self.started
        rate = done / elapsed if elapsed else 0.0
        eta = (self.size - done) / rate if rate else 0.0
        minutes, seconds = divmod(int(eta), 60)
        sys.stderr.write(
            f"\r{self.name}: {100 * done / self.size:5.1f}%  {rate / 1e6:7.1f} MB/s  "
            f"ETA {minutes}:{seconds:02d} "
        )
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


# -- several captures ------------------------------------------------------------------


def _worker(path: str, settings: Settings, out_path: str, csv_dir: str | None) -> FileResult:
    with open(out_path, "w", encoding="utf-8") as out:
        return decode_capture(path, settings, out, csv_dir)


def _parallel(
    files: list[str], settings: Settings, jobs: int, csv: str | None, progress: bool
) -> list[FileResult]:
    """Each capture in a worker process, its output in a temporary file,
    copied to standard output in the order the files were given."""
    worker_settings = Settings(
        settings.options,
        json=settings.json,
        verbose=settings.verbose,
        streams=settings.streams,
        progress=False,
        limits=settings.limits,
    )
    results: list[FileResult] = []
    with tempfile.TemporaryDirectory(prefix="iwarp-decode-") as scratch:
        outputs = [os.path.join(scratch, f"{i}.out") for i in range(len(files))]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures: list[Future[FileResult]] = [
                pool.submit(_worker, path, worker_settings, out, _csv_part(csv, i, len(files)))
                for i, (path, out) in enumerate(zip(files, outputs, strict=True))
            ]
            for i, (future, out) in enumerate(zip(futures, outputs, strict=True)):
                result = future.result()
                results.append(result)
                if progress:
                    sys.stderr.write(f"\r{i + 1}/{len(files)} captures decoded ")
                    sys.stderr.flush()
                with open(out, encoding="utf-8") as f:
                    shutil.copyfileobj(f, sys.stdout)
                os.unlink(out)
        if progress:
            sys.stderr.write("\r" + " " * 40 + "\r")
    return results


def _write_total(
    results: list[FileResult], total: CaptureTotals, settings: Settings, out: TextIO
) -> None:
    frames = sum(r.stats.frames for r in results)
    octets = sum(r.octets_read for r in results)
    seconds = sum(r.seconds for r in results)
    failed = [r.name for r in results if r.status == EXIT_BAD_FILE]
    if settings.json:
        line = {
            "type": "total",
            "captures": len(results),
            "unreadable": failed,
            "frames": frames,
            "tcp_segments": sum(r.stats.tcp for r in results),
            "truncated": [r.name for r in results if r.stats.truncated_file],
            "octets_read": octets,
            "cpu_seconds": round(seconds, 3),
            **total.to_json(),
        }
        out.write(json.dumps(line) + "\n")
        return
    out.write(
        f"\ntotal: {len(results)} captures, {frames} frames, {total.connections} TCP "
        f"connections, {total.iwarp_connections} with iWARP or VI/TCP, {total.fpdus} FPDUs, "
        f"{octets / 1e6:.1f} MB read\n"
    )
    for result in results:
        state = (
            f"unreadable: {result.message}"
            if result.status == EXIT_BAD_FILE and result.message
            else f"{result.totals.errors} protocol errors"
            + (", cut off" if result.stats.truncated_file else "")
        )
        out.write(f"  {result.name}: {state}\n")
    out.write(f"{total.errors} protocol errors\n")
