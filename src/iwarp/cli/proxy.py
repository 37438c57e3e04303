"""``iwarp proxy``: a protocol-aware man in the middle between two iWARP peers.

Accepts TCP connections, opens one to ``--to`` for each, forwards the
octets both ways, prints the conversation as ``iwarp decode -T text``
would (or as JSON records with ``--json``), and applies ``--fault`` SPECs
at chosen FPDUs or MPA frames. Each connection ends with a summary record;
Ctrl-C prints the summaries of those still open. See docs/proxy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from iwarp.analyze.fields import record_row
from iwarp.analyze.listing import list_line
from iwarp.analyze.records import Record, json_line
from iwarp.cli._args import count, port
from iwarp.cli._capture import CaptureFile, add_pcap_option
from iwarp.cli._report import EXIT_USAGE, RecordPrinter
from iwarp.cli._run import run_interruptible
from iwarp.proxy.core import ProxyConnection
from iwarp.proxy.server import ProxyOptions, ProxyServer
from iwarp.proxy.spec import Fault, FaultSpecError, parse_fault

FAULT_HELP = (
    "a fault to inject, repeatable: items separated by ';': to=initiator|to=responder "
    "(required), an optional display filter (iwarp decode -Y's grammar), nth=N or every, "
    "and one action: corrupt-crc, flip-payload, rewrite FIELD=VALUE, drop-fpdu, duplicate, "
    "delay MS, stall S, resegment N, terminate LAYER/TYPE/CODE, fin, rst; e.g. "
    "'to=responder; opcode == rdma_read_request; nth=2; corrupt-crc' (docs/proxy.md)"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "proxy",
        help="a man in the middle between two iWARP peers: decode live, inject faults",
        description="Accept TCP connections on --listen, open one to --to for each, forward "
        "the octets both ways while decoding MPA frames and FPDUs (one line each, as iwarp "
        "decode -T text prints them), apply --fault SPECs, and print a summary per "
        "connection: FPDUs each way, the faults applied, and what each end did afterwards "
        "(a Terminate, a close, a reset, or silence).",
    )
    parser.add_argument(
        "--listen",
        required=True,
        metavar="[HOST:]PORT",
        help="address to accept on (default host 127.0.0.1; port 0: any free port, printed)",
    )
    parser.add_argument("--to", required=True, metavar="HOST:PORT", help="the Responder to reach")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC", help=FAULT_HELP)
    parser.add_argument(
        "--json", action="store_true", help="one JSON record a line instead of the listing"
    )
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print no decode lines, only faults, refusals and summaries",
    )
    parser.add_argument(
        "--mpa-mode",
        choices=("rfc", "culley"),
        default="rfc",
        help="rfc: each connection starts with an MPA Request/Reply (default); culley: "
        "draft-culley-iwarp-mpa-02, no frames: each direction streams, then sends FPDUs with "
        "markers and CRCs, which the proxy finds by them (as iwarp connect/listen "
        "--mpa-mode culley speak)",
    )
    parser.add_argument(
        "--raw-ulp",
        action="store_true",
        help="the ULPDUs are not DDP segments (iwarp connect/listen --op mpa): do not decode "
        "or check DDP/RDMAP headers",
    )
    parser.add_argument(
        "--max-connections",
        type=count,
        default=64,
        help="connections proxied at once; more are closed at accept (default 64)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="close a connection after S seconds with no octet either way (default 300; 0: never)",
    )
    parser.add_argument(
        "--connections",
        type=count,
        default=0,
        help="exit after this many connections ended (default 0: run until interrupted)",
    )
    add_pcap_option(parser)
    parser.set_defaults(func=run)


def _address(text: str, *, default_host: str | None) -> tuple[str, int]:
    host, colon, port_text = text.rpartition(":")
    if not colon:
        if default_host is None:
            raise ValueError(f"{text!r} is not HOST:PORT")
        host, port_text = default_host, text
    host = host.strip("[]") or (default_host or "")
    if not host:
        raise ValueError(f"{text!r} names no host")
    try:
        return host, port(port_text)
    except (ValueError, argparse.ArgumentTypeError):
        raise ValueError(f"{text!r}: {port_text!r} is not a port (0..65535)") from None


def run(args: argparse.Namespace) -> int:
    out = RecordPrinter(args.json, prog="iwarp proxy")
    try:
        listen = _address(args.listen, default_host="127.0.0.1")
        target = _address(args.to, default_host=None)
        faults: list[Fault] = [parse_fault(spec) for spec in args.fault]
        if not 0 <= args.idle_timeout < float("inf"):  # also refuses nan
            raise ValueError("--idle-timeout takes seconds, 0 or more")
        if args.max_connections < 1:
            raise ValueError("--max-connections takes 1 or more")
    except (ValueError, FaultSpecError) as exc:
        out.emit({"type": "error", "code": None, "message": f"bad options: {exc}"})
        return EXIT_USAGE
    options = ProxyOptions(
        target=target,
        faults=faults,
        max_connections=args.max_connections,
        idle_timeout=args.idle_timeout or None,
        fpdu_records=not args.quiet,
        startup=args.mpa_mode,
        ddp=not args.raw_ulp,
    )
    open_now: list[dict[str, object]] = []

    def interrupted(reason: str) -> None:
        for summary in open_now:
            out.emit({**summary, "interrupted": reason})

    try:
        return run_interruptible(_serve(args, listen, options, out, open_now), interrupted)
    except OSError as exc:
        out.emit({"type": "error", "code": None, "message": f"cannot listen: {exc}"})
        return 1


async def _serve(
    args: argparse.Namespace,
    listen: tuple[str, int],
    options: ProxyOptions,
    out: RecordPrinter,
    open_now: list[dict[str, object]],
) -> int:
    quiet: list[bool] = []
    done = asyncio.Event()
    ended = [0]
    capture = None
    pcap: CaptureFile | None = args.pcap
    handle = pcap.take() if pcap is not None else None  # opened before the command started
    failed_writes: list[OSError] = []

    def write_failed(exc: OSError) -> None:
        failed_writes.append(exc)
        done.set()

    try:
        if handle is not None:
            from iwarp.analyze.pcapng import PcapngWriter

            capture = PcapngWriter(handle, application="iwarp proxy", on_error=write_failed)

        def on_record(core: ProxyConnection, record: Record) -> None:
            if args.quiet and not (record.direction and _is_fault(record)):
                return
            if args.json:
                line = json_line(record)
            else:
                row = record_row(record, core.where(record))
                row.pop("frame", None)  # a read number, not a capture's frame
                line = list_line(row)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

        def on_summary(summary: dict[str, object]) -> None:
            if quiet:
                return
            out.emit(summary)
            ended[0] += 1
            if args.connections and ended[0] >= args.connections:
                done.set()

        server = ProxyServer(
            options,
            on_record=on_record,
            on_summary=on_summary,
            on_refused=out.emit,
            capture=capture,
        )
        host, bound = await server.start(*listen)
        out.emit(
            {
                "type": "listening",
                "address": f"{host}:{bound}",
                "to": f"{options.target[0]}:{options.target[1]}",
                "faults": [f.text for f in options.faults],
            }
        )
        try:
            await done.wait()
            if failed_writes and pcap is not None:
                # The capture cannot be written: stop with one line and the
                # summaries of the connections still open.
                open_now.extend(server.open_summaries())
                quiet.append(True)
                raise pcap.write_failed(failed_writes[0])
        except asyncio.CancelledError:
            # Ctrl-C or SIGTERM: the summaries of the connections still open
            # are printed by ``interrupted``, which names the signal.
            open_now.extend(server.open_summaries())
            quiet.append(True)
            raise
        finally:
            await server.close()
        return 0
    finally:
        if capture is not None:
            capture.close()
        if handle is not None:
            # After a failed write the file still holds what it could not
            # flush: closing it fails the same way, and that was said.
            with contextlib.suppress(OSError):
                handle.close()


def _is_fault(record: Record) -> bool:
    message = getattr(record, "message", "")
    return isinstance(message, str) and message.startswith("fault ")
