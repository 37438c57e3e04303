"""``iwarp decode``: analyze a capture file (pcap or pcapng) of iWARP or VI/TCP traffic."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from iwarp.analyze.analyzer import (
    Analysis,
    ConnectionReport,
    DirectionSummary,
    Options,
    analyze_file,
)
from iwarp.analyze.capture import CaptureError
from iwarp.analyze.records import ErrorRecord, NoteRecord
from iwarp.errors import MpaErrorCode
from iwarp.mpa.wire import MpaFrame

#: Exit status when the capture shows protocol errors.
EXIT_PROTOCOL_ERRORS = 1
#: Exit status when the file cannot be read (or has no such --stream).
EXIT_BAD_FILE = 2

_TRISTATE = {"auto": None, "yes": True, "no": False}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "decode",
        help="decode and check MPA/DDP/RDMAP or VI/TCP in a capture file",
        description="Read a pcap or pcapng capture, reassemble every TCP connection, find MPA "
        "by its Request/Reply frames and check every FPDU: markers (position, reserved "
        "field, FPDUPTR), PAD, CRC, DDP and RDMAP headers. VI/TCP connections are decoded "
        "too. Exit status 1 when the capture shows protocol errors, 2 when it cannot be read "
        "or --stream names no connection in it.",
    )
    parser.add_argument("capture", help="pcap or pcapng file")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
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
        "--stream",
        metavar="N",
        type=int,
        action="append",
        default=[],
        help="only this connection (tcp.stream number; repeatable)",
    )
    parser.set_defaults(func=run)


def _seq(text: str) -> int:
    value = int(text, 0)
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"{text} is not a 32-bit sequence number")
    return value


def run(args: argparse.Namespace) -> int:
    options = Options(
        mpa_start=tuple(args.mpa_start),
        markers=_TRISTATE[args.markers],
        crc=_TRISTATE[args.crc],
        resync=args.resync,
        ddp=not args.raw_ulp,
    )
    try:
        analysis = analyze_file(args.capture, options)
    except (OSError, CaptureError) as exc:
        print(f"iwarp decode: {args.capture}: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    if args.stream:
        known = {c.index for c in analysis.connections}
        missing = sorted(set(args.stream) - known)
        if missing:
            # A typo must not pass for a clean capture (exit 0, no errors).
            print(
                f"iwarp decode: {args.capture}: no TCP connection {missing[0]} "
                f"(streams: {', '.join(map(str, sorted(known))) or 'none'})",
                file=sys.stderr,
            )
            return EXIT_BAD_FILE
        analysis.connections = [c for c in analysis.connections if c.index in args.stream]
    if args.json:
        write_json(analysis, sys.stdout)
    else:
        write_summary(analysis, args.capture, sys.stdout)
    return EXIT_PROTOCOL_ERRORS if analysis.error_count else 0


def write_json(analysis: Analysis, out: TextIO) -> None:
    """Every record as one JSON line, then one summary line per connection."""
    for connection in analysis.connections:
        if connection.protocol is None:
            continue
        for record in connection.records:
            out.write(json.dumps(record.to_json()) + "\n")
        out.write(json.dumps(_summary_json(connection)) + "\n")


def _summary_json(connection: ConnectionReport) -> dict[str, object]:
    return {
        "type": "stream_summary",
        "stream": connection.index,
        "client": connection.client,
        "server": connection.server,
        "protocol": connection.protocol,
        "errors": len(connection.errors),
        "directions": [
            {
                "direction": d.direction,
                "sender": d.sender,
                "protocol": d.protocol,
                "markers": None if d.framing is None else d.framing.markers,
                "crc": None if d.framing is None else d.framing.crc,
                "start_seq": d.start_seq,
                "fpdus": d.fpdus,
                "segments": d.segments,
                "ulpdu_octets": d.ulpdu_octets,
                "messages": dict(d.messages),
                "errors": d.errors,
                "tcp_octets": d.octets,
                "tcp_gaps": d.gaps,
                "tcp_retransmissions": d.retransmissions,
                "tcp_out_of_order": d.out_of_order,
                "receiver": None if d.receiver is None else d.receiver.to_json(),
            }
            for d in connection.directions
        ],
    }


def write_summary(analysis: Analysis, name: str, out: TextIO) -> None:
    """The readable report: per connection, what was negotiated, sent and wrong."""
    stats = analysis.stats
    shown = [c for c in analysis.connections if c.protocol is not None]
    out.write(
        f"{name}: {stats.frames} frames, {stats.tcp} TCP segments, "
        f"{len(analysis.connections)} TCP connections, {len(shown)} with iWARP or VI/TCP\n"
    )
    if stats.truncated_file:
        out.write("  (the file ends in the middle of a record)\n")
    for connection in shown:
        out.write(
            f"\nstream {connection.index}: {connection.client} -> {connection.server}  "
            f"{(connection.protocol or '').upper()}\n"
        )
        if connection.request is not None:
            out.write(f"  Request: {_frame_text(connection.request)}\n")
        if connection.reply is not None:
            out.write(f"  Reply:   {_frame_text(connection.reply)}\n")
        for direction in connection.directions:
            out.write(f"  {_direction_text(direction)}\n")
        errors = connection.errors
        notes = [r for r in connection.records if isinstance(r, NoteRecord)]
        for title, records in (("errors", errors), ("notes", notes)):
            if records:
                out.write(f"  {title}:\n")
            for record in records[:50]:
                out.write(f"    {_line(record)}\n")
            if len(records) > 50:
                out.write(f"    ... {len(records) - 50} more (see --json)\n")
    out.write(f"\n{analysis.error_count} protocol errors\n")


def _frame_text(frame: MpaFrame) -> str:
    text = (
        f"Rev {frame.revision}, M={int(frame.markers)} C={int(frame.crc)} "
        f"R={int(frame.reject)} S={int(frame.is_enhanced)}"
    )
    enhanced = frame.enhanced
    if enhanced is not None:
        flags = str(enhanced.flags.name) if enhanced.flags else "none"
        text += f", IRD {enhanced.ird} ORD {enhanced.ord}, flags {flags}"
    return text + f", private data {len(frame.ulp_private_data)} octets"


def _direction_text(d: DirectionSummary) -> str:
    head = f"{d.direction} {d.sender}: {d.octets} octets"
    tcp = []
    if d.retransmissions:
        tcp.append(f"{d.retransmissions} retransmissions")
    if d.out_of_order:
        tcp.append(f"{d.out_of_order} out of order")
    if d.gaps:
        tcp.append(f"{d.gaps} gaps")
    if tcp:
        head += " (" + ", ".join(tcp) + ")"
    if d.framing is not None:
        head += (
            f"; markers {'on' if d.framing.markers else 'off'}, "
            f"CRC {'on' if d.framing.crc else 'off'}, from seq {d.start_seq}: "
            f"{d.fpdus} FPDUs, {d.ulpdu_octets} ULPDU octets"
        )
    elif d.protocol == "vitcp":
        head += f"; {d.segments} VI segments"
    if d.messages:
        head += " [" + ", ".join(f"{k} {v}" for k, v in d.messages.most_common()) + "]"
    head += f"; {d.errors} errors"
    replay = d.receiver
    if replay is not None:
        head += (
            f"\n    out-of-order receiver: {replay.passed} ULPDUs passed "
            f"({replay.passed_ahead} ahead of order), {replay.delivered} delivered, "
            f"at most {replay.peak_buffered} octets held"
        )
        if replay.error is not None:
            head += f", stopped by MPA error {int(replay.error.mpa_code)}"
    return head


def _line(record: ErrorRecord | NoteRecord) -> str:
    where = f"frame {record.frame} seq {record.seq} {record.direction}"
    if isinstance(record, ErrorRecord):
        if record.code is not None and record.layer == "mpa":
            code = MpaErrorCode(record.code)
            return f"{where}: MPA error {record.code} ({code.name}): {record.message}"
        return f"{where}: {record.layer}: {record.message}"
    return f"{where}: {record.message}"
