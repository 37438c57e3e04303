"""How ``iwarp decode`` shows records and reports: JSON objects, the
readable per-connection summary, and the verbose per-FPDU listing (``-V``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from iwarp.analyze.analyzer import ConnectionReport, DirectionSummary
from iwarp.analyze.capture import FRAME_CAP, CaptureStats
from iwarp.analyze.records import (
    ErrorRecord,
    FpduRecord,
    FrameRecord,
    NoteRecord,
    Record,
    ViSegmentRecord,
)
from iwarp.analyze.stats import CaptureTotals, DirectionStats
from iwarp.errors import MpaErrorCode
from iwarp.mpa.wire import MpaFrame
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import AtomicOpcode

__all__ = [
    "capture_json",
    "summary_json",
    "verbose_lines",
    "write_capture_text",
    "write_connection_text",
]


# -- JSON ------------------------------------------------------------------------


def summary_json(connection: ConnectionReport) -> dict[str, object]:
    """The ``stream_summary`` object of a connection."""
    return {
        "type": "stream_summary",
        "stream": connection.index,
        "client": connection.client,
        "server": connection.server,
        "protocol": connection.protocol,
        "errors": connection.error_count,
        "notes": connection.note_count,
        "first_time": connection.first_time,
        "last_time": connection.last_time,
        "setup_seconds": connection.setup_seconds,
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
                "tcp_gap_octets": d.gap_octets,
                "tcp_retransmissions": d.retransmissions,
                "tcp_out_of_order": d.out_of_order,
                "tcp_unchecked_octets": d.unchecked_octets,
                "receiver": None if d.receiver is None else d.receiver.to_json(),
                "stats": None if d.stats is None else d.stats.to_json(),
            }
            for d in connection.directions
        ],
    }


def capture_json(
    name: str, stats: CaptureStats, totals: CaptureTotals, extra: dict[str, Any]
) -> dict[str, object]:
    """The ``capture_summary`` object: what the file held, last line of a capture."""
    return {
        "type": "capture_summary",
        "capture": name,
        "frames": stats.frames,
        "tcp_segments": stats.tcp,
        "truncated": stats.truncated_file,
        "truncated_at": stats.truncated_at,
        "oversized_records": stats.oversized,
        "first_oversized_frame": stats.first_oversized,
        **totals.to_json(),
        **extra,
    }


# -- readable summary ---------------------------------------------------------------


def write_connection_text(connection: ConnectionReport, out: TextIO) -> None:
    """One connection's block of the readable report."""
    out.write(
        f"\nstream {connection.index}: {connection.client} -> {connection.server}  "
        f"{(connection.protocol or '').upper()}\n"
    )
    if connection.request is not None:
        out.write(f"  Request: {_frame_text(connection.request)}\n")
    if connection.reply is not None:
        out.write(f"  Reply:   {_frame_text(connection.reply)}\n")
    setup = connection.setup_seconds
    if setup is not None:
        out.write(f"  setup: TCP SYN to MPA full operation {_seconds(setup)}\n")
    for direction in connection.directions:
        out.write(f"  {_direction_text(direction)}\n")
        if direction.stats is not None:
            for line in _stats_lines(direction.stats):
                out.write(f"    {line}\n")
    errors = connection.errors
    notes = connection.kept_notes
    for title, records, count in (
        ("errors", errors, connection.error_count),
        ("notes", notes, connection.note_count),
    ):
        if records:
            out.write(f"  {title}:\n")
        for record in records[:50]:
            out.write(f"    {_line(record)}\n")
        if count > 50:
            out.write(f"    ... {count - 50} more (see --json)\n")


def write_capture_text(
    name: str,
    stats: CaptureStats,
    totals: CaptureTotals,
    out: TextIO,
    extra: str = "",
    remarks: Sequence[str] = (),
) -> None:
    """The capture's closing lines: what the file held, remarks on how it
    was read, and the error count."""
    out.write(
        f"\n{name}: {stats.frames} frames, {stats.tcp} TCP segments, "
        f"{totals.connections} TCP connections, {totals.iwarp_connections} with iWARP or "
        f"VI/TCP, {totals.fpdus} FPDUs{extra}\n"
    )
    if stats.truncated_file:
        out.write(
            f"  capture cut off: the file ends in the middle of the record at octet "
            f"{stats.truncated_at} (after frame {stats.frames}); the capture is truncated\n"
        )
    if stats.oversized:
        out.write(
            f"  {stats.oversized} records longer than {FRAME_CAP} octets were cut to "
            f"{FRAME_CAP} (the first is frame {stats.first_oversized})\n"
        )
    for remark in remarks:
        out.write(f"  ({remark})\n")
    out.write(f"{totals.errors} protocol errors\n")


def _seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.3f} ms"
    return f"{value:.3f} s"


def _rate(octets_per_second: float) -> str:
    return f"{octets_per_second / (1 << 20):.2f} MiB/s"


def _stats_lines(stats: DirectionStats) -> list[str]:
    lines = []
    if stats.opcodes:
        lines.append(
            "opcodes: "
            + ", ".join(
                f"{name} {c.messages} messages/{c.fpdus} FPDUs/{c.octets} octets"
                for name, c in sorted(stats.opcodes.items(), key=lambda kv: -kv[1].fpdus)
            )
        )
    sizes = stats.fpdu_sizes
    if sizes.count:
        lines.append(
            f"FPDU sizes: {sizes.smallest}-{sizes.largest} octets, mean "
            f"{sizes.total / sizes.count:.0f}; "
            + ", ".join(f"{k}: {v}" for k, v in sizes.to_json()["buckets"].items())
        )
    timeline = stats.timeline
    if timeline.buckets and sum(timeline.buckets):
        busy = len(timeline.buckets) * timeline.width
        peak = max(timeline.buckets) / timeline.width
        lines.append(
            f"throughput: {_rate(sum(timeline.buckets) / busy)} mean over {_seconds(busy)}, "
            f"peak {_rate(peak)} ({_seconds(timeline.width)} buckets)"
        )
    latency = stats.read_latency
    if latency.count:
        p99 = latency.percentile(0.99)
        lines.append(
            f"Read latency: {latency.count} Reads, mean {_seconds(latency.total / latency.count)}, "
            f"min {_seconds(latency.smallest or 0.0)}, max {_seconds(latency.largest)}, "
            f"p99 at most {_seconds(p99 or 0.0)}"
        )
    if stats.outstanding_reads or stats.reads_unmatched:
        lines.append(
            f"Reads never answered in the capture: "
            f"{len(stats.outstanding_reads) + stats.reads_unmatched}"
        )
    for t in stats.terminates:
        lines.append(f"Terminate at frame {t.frame} seq {t.seq}: {t.reason}")
    if stats.terminate_count > len(stats.terminates):
        lines.append(f"... {stats.terminate_count - len(stats.terminates)} more Terminates")
    return lines


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
        tcp.append(f"{d.gaps} gaps ({d.gap_octets} octets not captured)")
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


# -- verbose listing (-V) -------------------------------------------------------------


def verbose_lines(record: Record) -> list[str]:
    """A record and its fields as an indented tree, as ``tshark -V`` lists packets."""
    head = f"frame {record.frame} stream {record.stream} {record.direction} seq {record.seq}"
    if isinstance(record, FpduRecord):
        return [f"{head}: FPDU, {record.wire_length} octets", *_fpdu_tree(record)]
    if isinstance(record, FrameRecord):
        frame_fields = record.to_json()
        kind = "MPA Request" if record.mpa.is_request else "MPA Reply"
        fields = ", ".join(
            f"{k} {frame_fields[k]}"
            for k in ("rev", "m", "c", "r", "s", "pd_length", "ird", "ord", "p2p", "rtr")
            if frame_fields.get(k) is not None
        )
        lines = [f"{head}: {kind}", f"    {fields}"]
        if frame_fields["private_data"]:
            lines.append(f"    private data: {frame_fields['private_data']}")
        return lines
    if isinstance(record, ViSegmentRecord):
        vi = record.fields
        rest = ", ".join(f"{k} {v}" for k, v in vi.items() if k != "segment_type")
        return [f"{head}: VI/TCP {vi.get('segment_type')}", f"    {rest}"]
    if isinstance(record, (ErrorRecord, NoteRecord)):
        return [f"{head}: {_line(record).split(': ', 1)[1]}"]
    return [head]


def _fpdu_tree(record: FpduRecord) -> list[str]:
    crc = "not used"
    if record.crc_checked:
        verdict = "correct" if record.crc_ok else f"WRONG, computed {record.crc_expected:#010x}"
        # Said because tshark -V's "CRC check" shows the same four octets
        # read little-endian (its iwarp_mpa.crc field agrees with ours).
        swapped = int.from_bytes(record.crc.to_bytes(4, "big"), "little")
        crc = (
            f"{record.crc:#010x} ({verdict}; octets as sent, big-endian; "
            f'tshark -V\'s "CRC check" reads them little-endian: {swapped:#010x})'
        )
    lines = [
        f"    MPA: ULPDU_Length {record.ulpdu_length}, PAD {len(record.pad)} octets"
        f"{' (' + record.pad.hex() + ')' if any(record.pad) else ''}, CRC {crc}"
    ]
    for m in record.markers:
        ok = "ok" if m.ok else f"WRONG, expected {m.expected:#06x}"
        lines.append(
            f"    Marker at seq {m.seq}: FPDUPTR {m.fpduptr:#06x}, "
            f"Reserved {m.reserved:#06x} ({ok})"
        )
    ulp = record.ulp
    if not ulp:
        return lines
    if "tagged" in ulp:
        flags = ("T" if ulp["tagged"] else "") + ("L" if ulp.get("last") else "")
        ddp = f"    DDP: version {ulp.get('ddp_version')}, flags {flags or '-'}"
        if ulp["tagged"]:
            ddp += f", STag {_hex(ulp.get('stag'))}, TO {_hex(ulp.get('to'))}"
        else:
            ddp += f", QN {ulp.get('qn')}, MSN {ulp.get('msn')}, MO {ulp.get('mo')}"
        ddp += f", payload {ulp.get('payload_length')} octets"
        lines.append(ddp)
        rdmap = f"    RDMAP: version {ulp.get('rdmap_version')}, {ulp.get('opcode_name')}"
        if ulp.get("inv_stag"):
            rdmap += f", Invalidate STag {_hex(ulp.get('inv_stag'))}"
        lines.append(rdmap)
    read = ulp.get("read_request")
    if isinstance(read, dict):
        lines.append(
            f"        Read Request: sink STag {_hex(read['sink_stag'])} "
            f"TO {_hex(read['sink_to'])}, "
            f"{read['size']} octets from source STag {_hex(read['src_stag'])} "
            f"TO {_hex(read['src_to'])}"
        )
    atomic = ulp.get("atomic_request")
    if isinstance(atomic, dict):
        lines.append(_atomic_request_line(atomic))
    answer = ulp.get("atomic_response")
    if isinstance(answer, dict):
        lines.append(
            f"        Atomic Response: request {_hex(answer['request_id'])}, "
            f"original value {_hex(answer['original'])}"
        )
    immediate = ulp.get("immediate_data")
    if isinstance(immediate, str):
        lines.append(f"        Immediate Data: {immediate}")
    term = ulp.get("terminate")
    if isinstance(term, dict):
        lines.append(
            f"        Terminate: layer {term['layer']} type {term['etype']} code "
            f"{term['code']:#04x}: {terminate_name(term['layer'], term['etype'], term['code'])}"
        )
    problems = ulp.get("problems")
    if isinstance(problems, list) and problems:
        lines.append(f"    problems: {'; '.join(map(str, problems))}")
    return lines


def _atomic_request_line(fields: dict[str, object]) -> str:
    """An RFC 7306 Atomic Request header, by its operation."""
    code = fields["aopcode"]
    target = f"STag {_hex(fields['stag'])} TO {_hex(fields['to'])}"
    head = f"        Atomic Request {_hex(fields['request_id'])}: "
    if code == AtomicOpcode.FETCH_ADD:
        return f"{head}FetchAdd {_hex(fields['data'])} (mask {_hex(fields['mask'])}) at {target}"
    if code == AtomicOpcode.CMP_SWAP:
        return (
            f"{head}CmpSwap at {target}: compare {_hex(fields['compare'])} "
            f"(mask {_hex(fields['compare_mask'])}), swap {_hex(fields['data'])} "
            f"(mask {_hex(fields['mask'])})"
        )
    return f"{head}operation code {_hex(code)} at {target}"


def _hex(value: object) -> str:
    return f"{value:#x}" if isinstance(value, int) else str(value)
