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
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TextIO

from iwarp.analyze.analyzer import ConnectionReport, Options, Output, analyze_stream
from iwarp.analyze.capture import CaptureError, CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.fields import ALIASES, FIELDS, Row, field_named, format_value
from iwarp.analyze.filter import FilterError, compile_filter
from iwarp.analyze.kernels import kernels
from iwarp.analyze.listing import FrameIndex, hex_dump, list_line
from iwarp.analyze.origin import peek_origin
from iwarp.analyze.parquet import (
    ParquetTables,
    ParquetUnavailableError,
)
from iwarp.analyze.parquet import check_available as check_parquet
from iwarp.analyze.parquet import concatenate as concatenate_parquet
from iwarp.analyze.plot import PlotUnavailableError, check_available, write_plot
from iwarp.analyze.records import (
    ErrorRecord,
    FpduRecord,
    FrameRecord,
    Record,
    ViSegmentRecord,
    json_line,
)
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
from iwarp.cli._args import format_octets, format_rate, rate_mib_per_s

if TYPE_CHECKING:
    from concurrent.futures import Future

    from iwarp.analyze.shards import SplitAnalysis

#: Exit status when the capture shows protocol errors.
EXIT_PROTOCOL_ERRORS = 1
#: Exit status when a file cannot be read (or has no such --stream).
EXIT_BAD_FILE = 2
#: Exit status when a capture is cut off (the file ends inside a record) and
#: shows no protocol errors.
EXIT_TRUNCATED = 3
EXIT_INTERRUPTED = 130
#: Exit status when the reader of standard output went away (``| head``):
#: what the shell reports for tshark and coreutils, ended by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13

_TRISTATE = {"auto": None, "yes": True, "no": False}

#: Output views (-T): the per-connection summary, the one-line listing,
#: a field list, JSON lines; and -V's tree.
SUMMARY, LISTING, FIELD_LIST, JSON, VERBOSE = "summary", "text", "fields", "json", "verbose"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "decode",
        help="decode and check MPA/DDP/RDMAP or VI/TCP in capture files",
        description="Read pcap or pcapng captures (also gzip, xz, and zstd if a reader is "
        "installed; '-' reads standard input, e.g. tcpdump -U -w - | iwarp decode -), "
        "reassemble every TCP connection, find MPA by its Request/Reply frames and check "
        "every FPDU: markers (position, reserved field, FPDUPTR), PAD, CRC, DDP and RDMAP "
        "headers (not in captures iwarp wrote with --op mpa, whose file says its ULPDUs "
        "are bare). VI/TCP connections are decoded too. Records come out while the capture is "
        "read; memory follows the open connections, not the file. Each connection's summary "
        "gives messages and octets per opcode, FPDU sizes, throughput, TCP gaps and "
        "retransmissions, Read latency, Terminates with their reasons and the time from SYN "
        "to MPA full operation; -T text lists each record on a line, -Y filters them, "
        "-T fields prints chosen fields for scripts. Records longer than 256 KiB are cut to "
        "it (as libpcap does). Exit status 1 when a capture shows protocol errors, 2 when one "
        "cannot be read, --stream names no connection in it or an option is wrong, 3 when one "
        "is cut off (the file ends in the middle of a record; said in the summary) and none "
        "shows errors, 141 (quietly) when the reader of standard output goes away.",
    )
    parser.add_argument("capture", nargs="+", help="pcap or pcapng files ('-' for standard input)")
    style = parser.add_mutually_exclusive_group()
    style.add_argument(
        "-T",
        dest="view",
        choices=(SUMMARY, LISTING, FIELD_LIST, JSON),
        default=None,
        help="output: summary (per connection, the default), text (one line per frame, "
        "FPDU, VI segment, error and note: frame, time, sender -> receiver, protocol, "
        "opcode, STag/TO or QN/MSN/MO, lengths, CRC verdict, markers; the default with "
        "-Y, -c or -x), fields (the -e fields of each record, one line each, for "
        "scripts; the default with -e), json (as --json)",
    )
    style.add_argument("--json", action="store_true", help="one JSON object per line")
    style.add_argument(
        "-V",
        "--verbose",
        action="store_true",
        help="list every frame, FPDU (MPA, markers, DDP, RDMAP fields), error and note, "
        "as tshark -V does, before the summaries",
    )
    parser.add_argument(
        "--fields",
        action=_ListFields,
        help="list the field names -Y tests (and -e prints), with what each is, and exit",
    )
    parser.add_argument(
        "-Y",
        "--display-filter",
        metavar="EXPR",
        type=_display_filter,
        default=None,
        help="show only the records EXPR matches, e.g. 'opcode == rdma_write and stag == "
        "0x100a', 'crc_ok == false or error', 'tcp.stream in {1 3} && not msn < 10', "
        "'addr == 10.0.0.0/8' (fields: --fields; grammar: docs/analyzer.md); implies "
        "-T text unless another view is given; summaries and statistics count everything",
    )
    parser.add_argument(
        "-e",
        dest="fields",
        metavar="FIELD",
        action="append",
        type=_field,
        default=[],
        help="with -T fields: a field to print (repeatable, in order; names as -Y's, "
        "see --fields); a record without it gives an empty value",
    )
    parser.add_argument(
        "-E",
        dest="field_options",
        metavar="OPTION=VALUE",
        action="append",
        type=_field_option,
        default=[],
        help="with -T fields, as tshark: separator=/t|/s|CHAR (default tab), "
        "header=y|n (a first line of field names), quote=d|s|n (values in double, single "
        "or no quotes), aggregator=/s|CHAR (between the two values of addr and port; "
        "default ',')",
    )
    parser.add_argument(
        "-c",
        "--count",
        metavar="N",
        type=_positive,
        default=None,
        help="stop after the first N records shown (per capture); the closing lines "
        "count what was decoded until then",
    )
    parser.add_argument(
        "-x",
        "--hex",
        action="store_true",
        help="after each FPDU and MPA frame of the listing (or of -V), its octets as "
        "captured (markers, PAD, CRC included) in hex and ASCII, as tshark -x",
    )
    parser.add_argument(
        "--csv",
        metavar="DIR",
        help="also write fpdus.csv, messages.csv, connections.csv and errors.csv into DIR",
    )
    parser.add_argument(
        "--parquet",
        metavar="DIR",
        help="also write the same tables as Parquet (fpdus.parquet, ...) into DIR, for "
        "DuckDB, pandas or Spark (needs pip install 'iwarp[parquet]')",
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
        help="worker processes: several captures are decoded at once, one per worker "
        "(default: one per CPU, at most one per capture); one capture file is split by "
        "connection across N workers (default 1), which helps when it holds many "
        "connections and the CPUs are idle; the output is the same",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "yes", "no"),
        default="auto",
        help="progress (percent, MiB/s, ETA) on stderr; auto: when stderr is a terminal",
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
        help="the ULPDUs are not DDP segments: do not decode or check DDP/RDMAP headers "
        "(implied for captures of iwarp connect/listen --op mpa --pcap, whose file says so)",
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


class _ListFields(argparse.Action):
    """``--fields``: the field table, then exit (as ``--help``: no capture needed)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        aliases: dict[str, list[str]] = {}
        for alias, name in ALIASES.items():
            aliases.setdefault(name, []).append(alias)
        lines = []
        for f in FIELDS.values():
            also = f" (also {', '.join(aliases[f.name])})" if f.name in aliases else ""
            lines.append(f"{f.name:<16}{f.kind.value:<9}{f.help}{also}\n")
        try:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
        except BrokenPipeError:
            parser.exit(_reader_gone())
        parser.exit(0)


def _field(text: str) -> str:
    if field_named(text) is None:
        raise argparse.ArgumentTypeError(f"no field {text!r} (iwarp decode --fields lists them)")
    return text


_FIELD_OPTIONS = {
    "separator": None,
    "aggregator": None,
    "header": ("y", "n"),
    "quote": ("d", "s", "n"),
}


def _field_option(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or key not in _FIELD_OPTIONS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected separator=, header=, quote= or aggregator="
        )
    allowed = _FIELD_OPTIONS[key]
    if allowed is not None and value not in allowed:
        raise argparse.ArgumentTypeError(f"{key} is one of {', '.join(allowed)}")
    if allowed is None:
        value = {"/t": "\t", "/s": " "}.get(value, value)
        if len(value) != 1:
            raise argparse.ArgumentTypeError(f"{key} is one character, /t or /s")
    return key, value


def _display_filter(text: str) -> str:
    """A -Y expression, checked now (a fault is a usage error, exit 2)."""
    try:
        compile_filter(text)
    except FilterError as exc:
        raise argparse.ArgumentTypeError(exc.describe()) from None
    return text


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
    #: SUMMARY, LISTING, FIELD_LIST, JSON or VERBOSE.
    view: str = SUMMARY
    streams: tuple[int, ...] = ()
    progress: bool = False
    limits: Limits = field(default_factory=Limits)
    #: Records shown per capture before decoding stops (-c).
    count: int | None = None
    #: Octets of FPDUs and frames after their line (-x).
    hexdump: bool = False
    #: Records shown: a -Y expression (checked when the options were read).
    display_filter: str | None = None
    #: -T fields: the fields (as given), separator, quote, aggregator.
    fields: tuple[str, ...] = ()
    separator: str = "\t"
    quote: str = ""
    aggregator: str = ","
    #: Worker processes one capture's connections are split across (1: none).
    split: int = 1

    @property
    def json(self) -> bool:
        return self.view == JSON

    @property
    def rows(self) -> bool:
        """Records need their fields, time and addresses."""
        return self.view in (LISTING, FIELD_LIST) or self.hexdump or self.display_filter is not None


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
    #: DDP/RDMAP headers were not decoded (--raw-ulp, or the file says so).
    raw_ulp: bool = False


def run(args: argparse.Namespace) -> int:
    if args.plot:
        try:
            check_available(args.plot)
        except PlotUnavailableError as exc:
            print(f"iwarp decode: {exc}", file=sys.stderr)
            return EXIT_BAD_FILE
    if args.parquet:
        try:
            check_parquet()
        except ParquetUnavailableError as exc:
            print(f"iwarp decode: {exc}", file=sys.stderr)
            return EXIT_BAD_FILE
    files: list[str] = args.capture
    if files.count("-") > 1:
        print("iwarp decode: standard input ('-') can be read only once", file=sys.stderr)
        return EXIT_BAD_FILE
    progress = {"yes": True, "no": False}.get(args.progress, sys.stderr.isatty())
    view = args.view or (
        JSON
        if args.json
        else VERBOSE
        if args.verbose
        else FIELD_LIST
        if args.fields
        else LISTING
        if args.count or args.hex or args.display_filter
        else SUMMARY
    )
    if args.hex and view not in (LISTING, VERBOSE):
        print("iwarp decode: -x goes with the listing (-T text) or -V", file=sys.stderr)
        return EXIT_BAD_FILE
    if bool(args.fields) != (view == FIELD_LIST) or (args.field_options and not args.fields):
        print("iwarp decode: -T fields goes with -e FIELD (and -E)", file=sys.stderr)
        return EXIT_BAD_FILE
    if (args.count or args.display_filter) and view == SUMMARY:
        print(
            "iwarp decode: -c and -Y are about records shown: not with -T summary",
            file=sys.stderr,
        )
        return EXIT_BAD_FILE
    field_format = _field_format(dict(args.field_options))
    settings = Settings(
        Options(
            mpa_start=tuple(args.mpa_start),
            markers=_TRISTATE[args.markers],
            crc=_TRISTATE[args.crc],
            resync=args.resync,
            ddp=not args.raw_ulp,
            receiver=not args.no_receiver,
        ),
        view=view,
        streams=tuple(args.stream),
        progress=progress,
        count=args.count,
        hexdump=args.hex,
        display_filter=args.display_filter,
        fields=tuple(args.fields),
        separator=field_format["separator"],
        quote=field_format["quote"],
        aggregator=field_format["aggregator"],
        split=args.jobs if len(files) == 1 and files[0] != "-" and args.jobs else 1,
    )
    if view == FIELD_LIST and dict(args.field_options).get("header") == "y":
        sys.stdout.write(settings.separator.join(settings.fields) + "\n")
    jobs = args.jobs or min(len(files), os.cpu_count() or 1)
    try:
        if len(files) == 1 or jobs == 1 or "-" in files:
            results = []
            for i, path in enumerate(files):
                csv_dir = _csv_part(args.csv, i, len(files))
                parquet_dir = _csv_part(args.parquet, i, len(files))
                results.append(decode_capture(path, settings, sys.stdout, csv_dir, parquet_dir))
        else:
            results = _parallel(files, settings, jobs, args.csv, progress, args.parquet)
        for directory, join in ((args.csv, concatenate), (args.parquet, concatenate_parquet)):
            if directory and len(files) > 1:
                parts = [
                    p for p in (_csv_part(directory, i, len(files)) for i in range(len(files))) if p
                ]
                join(parts, directory)
                for part in parts:
                    shutil.rmtree(part, ignore_errors=True)
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("iwarp decode: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _reader_gone()
    total = CaptureTotals()
    for result in results:
        total.merge(result.totals)
    if len(files) > 1 and settings.view != FIELD_LIST:
        try:
            _write_total(results, total, settings, sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:
            return _reader_gone()
    if args.plot and any(r.status != EXIT_BAD_FILE for r in results):
        title = files[0] if len(files) == 1 else f"{len(files)} captures"
        write_plot(total, args.plot, f"iwarp decode: {title}")
    statuses = {r.status for r in results}
    for status in (EXIT_BAD_FILE, EXIT_PROTOCOL_ERRORS, EXIT_TRUNCATED):
        if status in statuses:
            return status
    return 0


def _field_format(options: dict[str, str]) -> dict[str, str]:
    """Settings of -T fields from its -E options."""
    return {
        "separator": options.get("separator", "\t"),
        "quote": {"d": '"', "s": "'"}.get(options.get("quote", "n"), ""),
        "aggregator": options.get("aggregator", ","),
    }


def _reader_gone() -> int:
    """Standard output's reader closed the pipe (``iwarp decode ... | head``):
    stop quietly, as tshark and coreutils do. What is still buffered goes to
    /dev/null, so that closing standard output at exit says nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file (tests): nothing is flushed at exit
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def _csv_part(directory: str | None, index: int, count: int) -> str | None:
    """Where one capture's tables go: DIR itself, or a part to join (several captures)."""
    if directory is None:
        return None
    if count == 1:
        return directory
    return os.path.join(directory, f".part-{os.getpid()}-{index}")


# -- one capture -------------------------------------------------------------------


def decode_capture(
    path: str,
    settings: Settings,
    out: TextIO,
    csv_dir: str | None,
    parquet_dir: str | None = None,
) -> FileResult:
    """Decode one capture, writing its records and reports to ``out`` (and
    its tables into ``csv_dir`` and ``parquet_dir``)."""
    name = "<stdin>" if path == "-" else path
    result = FileResult(name)
    started = time.perf_counter()
    counter: list[CountingReader] = []
    try:
        f = open_capture(path, counter)
    except (OSError, CaptureError) as exc:
        return _failed(result, exc)
    options = settings.options
    if options.ddp and peek_origin(f).raw_ulp:
        options = replace(options, ddp=False)  # the writer says its ULPDUs are bare
    result.raw_ulp = not options.ddp
    tables: list[CsvTables] = []
    if csv_dir:
        tables.append(CsvTables(csv_dir, name))
    if parquet_dir:
        tables.append(ParquetTables(parquet_dir, name))
    size = capture_size(path)
    meter = _Progress(name, size, counter[0]) if settings.progress and size else None
    streams = set(settings.streams)
    live = path == "-"
    totals = result.totals
    stats = result.stats
    index = FrameIndex(keep_octets=settings.hexdump) if settings.rows else None
    shows = compile_filter(settings.display_filter) if settings.display_filter else None
    shown = errors_seen = 0
    stopped = False
    # With -c, what was read of connections not yet reported when it stops.
    counting = _ReadSoFar() if settings.count else None
    workers: Generator[Output, None, None] | None = None
    split: SplitAnalysis | None = None
    in_step = True
    try:
        with f:
            packets: Iterable[TcpPacket] = read_tcp_packets(f, stats)
            if meter is not None:
                packets = meter.wrap(packets)
            if index is not None:
                packets = index.wrap(packets)
            if settings.split > 1:
                # Imported here: multiprocessing costs the usual run's start-up.
                from iwarp.analyze.shards import SplitAnalysis

                split = SplitAnalysis(
                    path,
                    options,
                    settings.limits,
                    settings.split,
                    # The summary alone needs the connections' reports only.
                    records=settings.view != SUMMARY or bool(tables),
                )
                # Read here too only for what needs the segments in step.
                in_step = meter is not None or index is not None
                workers = split.outputs(packets if in_step else None)
                outputs: Iterator[Output] = workers
            else:
                outputs = analyze_stream(packets, options, settings.limits)
            if settings.json and not (tables or streams or live or settings.count or index):
                # The usual --json, every record: written in batches (the
                # loop below then finds nothing left).
                _json_lines(outputs, totals, out)
            for output in outputs:
                if isinstance(output, ConnectionReport):
                    _account(totals, output, streams)
                    if counting is not None:
                        counting.reported(output, streams)
                    if index is not None:
                        index.forget(output.index)
                    if streams and output.index not in streams:
                        continue
                    for table in tables:
                        table.connection(output)
                    if output.protocol is None and not output.error_count:
                        continue
                    if settings.json:
                        out.write(json.dumps(summary_json(output)) + "\n")
                    elif settings.view in (SUMMARY, VERBOSE):
                        write_connection_text(output, out)
                    if live:
                        out.flush()
                    continue
                if streams and output.stream not in streams:
                    continue
                if counting is not None:
                    counting.record(output)
                if isinstance(output, ErrorRecord):
                    errors_seen += 1
                for table in tables:
                    table.record(output)
                row = None
                if shows is not None:
                    assert index is not None
                    row = index.row(output)
                    if not shows.matches(row):
                        continue
                if not _show(output, settings, out, index, row):
                    continue
                shown += 1
                if live:
                    out.flush()  # a live pipe: each record as soon as it is known
                if shown == settings.count:
                    stopped = True  # -c: the first N records are out
                    break
    except BrokenPipeError:
        raise  # standard output is gone, not the capture
    except (OSError, CaptureError) as exc:
        _failed(result, exc)
    finally:
        if workers is not None:
            workers.close()  # stopped early (-c, an error): the workers too
            if not in_step:  # what the workers' reader saw
                assert split is not None
                stats = result.stats = split.stats
        if meter is not None:
            meter.clear()
        for table in tables:
            table.close()
    result.octets_read = counter[0].count if split is None or in_step else split.octets_read
    result.seconds = time.perf_counter() - started
    if result.status == EXIT_BAD_FILE and result.message and stats.frames == 0:
        return result
    if stopped:
        # Connections still open were not reported: count every error
        # record decoded until then (each reported one was such a record),
        # and the connections and FPDUs read until then.
        totals.errors = errors_seen
        if counting is not None:
            counting.into(totals)
    missing = [] if stopped else sorted(s for s in streams if s >= totals.connections)
    extra = {
        "octets_read": result.octets_read,
        "seconds": round(result.seconds, 3),
        "mib_per_s": rate_mib_per_s(result.octets_read, result.seconds),
        "raw_ulp": result.raw_ulp,
        "stopped_after": settings.count if stopped else None,
    }
    if settings.json:
        out.write(json.dumps(capture_json(name, stats, totals, extra)) + "\n")
    elif settings.view != FIELD_LIST:  # scripts read the field lines only
        remarks = []
        if stopped:
            remarks.append(f"stopped after the first {settings.count} records (-c)")
        if result.raw_ulp and settings.options.ddp:
            remarks.append(
                "written by iwarp --op mpa: bare MPA ULPDUs, DDP/RDMAP headers not decoded"
            )
        write_capture_text(
            name,
            stats,
            totals,
            out,
            f" ({format_octets(result.octets_read)} in {result.seconds:.2f} s, "
            f"{format_rate(result.octets_read, result.seconds)})",
            remarks,
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


#: Lines of --json gathered before they are written.
_JSON_BATCH = 256


def _json_lines(
    outputs: Iterator[Record | ConnectionReport], totals: CaptureTotals, out: TextIO
) -> None:
    """Every record and connection summary as a JSON line, as the loop of
    :func:`decode_capture` writes them when nothing is filtered, counted or
    tabled, in batches of lines; the lines decoded before a capture error
    are written before it goes on."""
    lines: list[str] = []
    append = lines.append
    kernel = kernels  # an FPDU record's line (json_line when the kernel declines it)
    try:
        for output in outputs:
            if type(output) is FpduRecord:
                line = kernel.fpdu_json(output)
                append(line if line is not None else json_line(output))
            elif isinstance(output, ConnectionReport):
                _account(totals, output, set())
                if output.protocol is None and not output.error_count:
                    continue
                append(json.dumps(summary_json(output)))
            else:
                append(json_line(output))
            if len(lines) >= _JSON_BATCH:
                out.write("\n".join(lines) + "\n")
                lines.clear()
    except (OSError, CaptureError) as exc:
        if lines and not isinstance(exc, BrokenPipeError):
            out.write("\n".join(lines) + "\n")
        raise
    if lines:
        out.write("\n".join(lines) + "\n")


def _failed(result: FileResult, exc: BaseException) -> FileResult:
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    print(f"iwarp decode: {result.name}: {message}", file=sys.stderr)
    result.status = EXIT_BAD_FILE
    result.message = message
    return result


class _ReadSoFar:
    """Connections and FPDUs read before ``-c`` stopped the reading: the
    reported connections' and those of the records read of the others."""

    def __init__(self) -> None:
        self.connections: set[int] = set()
        self.protocol: set[int] = set()
        self.fpdus = 0

    def reported(self, report: ConnectionReport, streams: set[int]) -> None:
        self.connections.add(report.index)
        if report.protocol is not None and not (streams and report.index not in streams):
            self.protocol.add(report.index)

    def record(self, record: Record) -> None:
        self.connections.add(record.stream)
        if isinstance(record, (FrameRecord, FpduRecord, ViSegmentRecord)):
            self.protocol.add(record.stream)
        if isinstance(record, FpduRecord):
            self.fpdus += 1

    def into(self, totals: CaptureTotals) -> None:
        totals.connections = max(totals.connections, len(self.connections))
        totals.iwarp_connections = max(totals.iwarp_connections, len(self.protocol))
        totals.fpdus = max(totals.fpdus, self.fpdus)


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


def _show(
    record: Record, settings: Settings, out: TextIO, index: FrameIndex | None, row: Row | None
) -> bool:
    """Write a record as the view shows it (``row``: its fields, if known);
    whether it was shown (the summary shows records only in its
    per-connection blocks)."""
    view = settings.view
    if view == SUMMARY:
        return False
    if view == JSON:
        out.write(json_line(record) + "\n")
        return True
    if view == FIELD_LIST:
        assert index is not None
        out.write(_field_line(row if row is not None else index.row(record), settings) + "\n")
        return True
    lines = verbose_lines(record) if view == VERBOSE else []
    if view == LISTING:
        assert index is not None
        lines.append(list_line(row if row is not None else index.row(record)))
    if settings.hexdump and index is not None:
        octets = index.octets(record)
        if octets is not None:
            lines.extend(hex_dump(octets))
            lines.append("")
    out.write("\n".join(lines) + "\n")
    return True


def _field_line(row: Row, settings: Settings) -> str:
    values = []
    for name in settings.fields:
        found = field_named(name)
        assert found is not None  # checked when the options were read
        value = row.get(found.name)
        if isinstance(value, tuple):
            text = settings.aggregator.join(format_value(found, v) for v in value)
        else:
            text = format_value(found, value)
        if settings.quote:
            text = (
                settings.quote + text.replace(settings.quote, settings.quote * 2) + settings.quote
            )
        values.append(text)
    return settings.separator.join(values)


class _Progress:
    """A self-updating line on stderr: percent of the file, MiB/s, ETA."""

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
            f"\r{self.name}: {100 * done / self.size:5.1f}%  {rate / (1 << 20):7.1f} MiB/s  "
            f"ETA {minutes}:{seconds:02d} "
        )
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


# -- several captures ------------------------------------------------------------------


def _worker(
    path: str, settings: Settings, out_path: str, csv_dir: str | None, parquet_dir: str | None
) -> FileResult:
    with open(out_path, "w", encoding="utf-8") as out:
        return decode_capture(path, settings, out, csv_dir, parquet_dir)


def _parallel(
    files: list[str],
    settings: Settings,
    jobs: int,
    csv: str | None,
    progress: bool,
    parquet: str | None = None,
) -> list[FileResult]:
    """Each capture in a worker process, its output in a temporary file,
    copied to standard output in the order the files were given."""
    # Imported here: one capture (the usual run) needs no worker processes.
    from concurrent.futures import ProcessPoolExecutor

    worker_settings = replace(settings, progress=False)
    results: list[FileResult] = []
    with tempfile.TemporaryDirectory(prefix="iwarp-decode-") as scratch:
        outputs = [os.path.join(scratch, f"{i}.out") for i in range(len(files))]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures: list[Future[FileResult]] = [
                pool.submit(
                    _worker,
                    path,
                    worker_settings,
                    out,
                    _csv_part(csv, i, len(files)),
                    _csv_part(parquet, i, len(files)),
                )
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
        f"{format_octets(octets)} read\n"
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
