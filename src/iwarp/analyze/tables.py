"""``iwarp decode --csv DIR``: one table per record type, for pandas or DuckDB.

``fpdus.csv``, ``messages.csv`` (DDP messages: FPDUs up to the one with the
Last flag), ``connections.csv`` (one row per direction of a connection) and
``errors.csv`` (errors and notes). Every row names its capture, so tables of
many runs can be concatenated.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TextIO

from iwarp.analyze.analyzer import ConnectionReport
from iwarp.analyze.records import ErrorRecord, FpduRecord, NoteRecord, Record

__all__ = ["TABLES", "CsvTables", "RowWriter", "concatenate"]

FPDU_COLUMNS: Final = (
    *("capture", "stream", "direction", "seq", "frame", "wire_length", "ulpdu_length"),
    *("crc_ok", "markers", "markers_ok", "opcode", "opcode_name", "tagged", "last"),
    *("stag", "to", "qn", "msn", "mo", "payload_length"),
)
MESSAGE_COLUMNS: Final = (
    *("capture", "stream", "direction", "opcode_name", "first_seq", "first_frame"),
    *("last_frame", "fpdus", "payload_octets", "stag", "to", "qn", "msn", "complete"),
)
CONNECTION_COLUMNS: Final = (
    *("capture", "stream", "client", "server", "protocol", "direction", "sender"),
    *("markers", "crc", "fpdus", "ulpdu_octets", "tcp_octets", "tcp_retransmissions"),
    *("tcp_out_of_order", "tcp_gaps", "tcp_gap_octets", "errors", "setup_seconds"),
    *("reads", "read_latency_mean", "read_latency_max", "terminates", "first_time", "last_time"),
)
ERROR_COLUMNS: Final = (
    *("capture", "stream", "direction", "seq", "frame", "kind", "code", "layer", "message"),
)
#: File name -> columns.
TABLES: Final = {
    "fpdus.csv": FPDU_COLUMNS,
    "messages.csv": MESSAGE_COLUMNS,
    "connections.csv": CONNECTION_COLUMNS,
    "errors.csv": ERROR_COLUMNS,
}


class RowWriter(Protocol):
    """Where a table's rows go (a :func:`csv.writer`, or another format's)."""

    def writerow(self, row: Sequence[Any], /) -> object: ...


@dataclass
class _Message:
    first: FpduRecord
    last_frame: int | None
    fpdus: int
    octets: int


class CsvTables:
    """Writes the records and reports of one capture into ``directory``."""

    def __init__(self, directory: str, capture: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.capture = capture
        self._files: list[TextIO] = []
        writers = [self._table(directory, name, columns) for name, columns in TABLES.items()]
        self._fpdus, self._messages, self._connections, self._errors = writers
        self._open: dict[tuple[int, str], _Message] = {}

    def _table(self, directory: str, name: str, columns: tuple[str, ...]) -> RowWriter:
        """The writer of one table (``name`` as in :data:`TABLES`)."""
        f = open(os.path.join(directory, name), "w", newline="", encoding="utf-8")  # noqa: SIM115
        self._files.append(f)
        writer = csv.writer(f)
        writer.writerow(columns)
        return writer

    def record(self, record: Record) -> None:
        if isinstance(record, FpduRecord):
            self._fpdu(record)
        elif isinstance(record, (ErrorRecord, NoteRecord)):
            error = isinstance(record, ErrorRecord)
            self._errors.writerow(
                (
                    self.capture,
                    record.stream,
                    record.direction,
                    record.seq,
                    record.frame,
                    "error" if error else "note",
                    record.code if isinstance(record, ErrorRecord) else None,
                    record.layer if isinstance(record, ErrorRecord) else None,
                    record.message,
                )
            )

    def _fpdu(self, record: FpduRecord) -> None:
        ulp: dict[str, Any] = record.ulp
        self._fpdus.writerow(
            (
                self.capture,
                record.stream,
                record.direction,
                record.seq,
                record.frame,
                record.wire_length,
                record.ulpdu_length,
                record.crc_ok,
                len(record.markers),
                all(m.ok for m in record.markers),
                ulp.get("opcode"),
                ulp.get("opcode_name"),
                ulp.get("tagged"),
                ulp.get("last"),
                ulp.get("stag"),
                ulp.get("to"),
                ulp.get("qn"),
                ulp.get("msn"),
                ulp.get("mo"),
                ulp.get("payload_length"),
            )
        )
        key = (record.stream, record.direction)
        message = self._open.get(key)
        payload = ulp.get("payload_length", record.ulpdu_length)
        if message is None:
            message = self._open[key] = _Message(record, record.frame, 0, 0)
        message.fpdus += 1
        message.octets += payload if isinstance(payload, int) else 0
        message.last_frame = record.frame
        if ulp.get("last", True):
            self._message(message, complete=True)
            del self._open[key]

    def _message(self, message: _Message, *, complete: bool) -> None:
        first = message.first
        ulp: dict[str, Any] = first.ulp
        self._messages.writerow(
            (
                self.capture,
                first.stream,
                first.direction,
                ulp.get("opcode_name"),
                first.seq,
                first.frame,
                message.last_frame,
                message.fpdus,
                message.octets,
                ulp.get("stag"),
                ulp.get("to"),
                ulp.get("qn"),
                ulp.get("msn"),
                complete,
            )
        )

    def connection(self, report: ConnectionReport) -> None:
        for key in [k for k in self._open if k[0] == report.index]:
            self._message(self._open.pop(key), complete=False)
        for d in report.directions:
            stats = d.stats
            latency = stats.read_latency if stats is not None else None
            self._connections.writerow(
                (
                    self.capture,
                    report.index,
                    report.client,
                    report.server,
                    report.protocol,
                    d.direction,
                    d.sender,
                    None if d.framing is None else d.framing.markers,
                    None if d.framing is None else d.framing.crc,
                    d.fpdus,
                    d.ulpdu_octets,
                    d.octets,
                    d.retransmissions,
                    d.out_of_order,
                    d.gaps,
                    d.gap_octets,
                    d.errors,
                    report.setup_seconds,
                    latency.count if latency else 0,
                    latency.total / latency.count if latency and latency.count else None,
                    latency.largest if latency and latency.count else None,
                    stats.terminate_count if stats is not None else 0,
                    report.first_time,
                    report.last_time,
                )
            )

    def close(self) -> None:
        for (_, _), message in list(self._open.items()):
            self._message(message, complete=False)
        self._open.clear()
        self._finish()

    def _finish(self) -> None:
        """All rows are written: close the tables."""
        for f in self._files:
            f.close()


def concatenate(parts: list[str], directory: str) -> None:
    """Join the tables of several captures (each a directory) into ``directory``."""
    os.makedirs(directory, exist_ok=True)
    for name in TABLES:
        with open(os.path.join(directory, name), "w", encoding="utf-8", newline="") as out:
            for i, part in enumerate(parts):
                path = os.path.join(part, name)
                if not os.path.exists(path):
                    continue
                with open(path, encoding="utf-8", newline="") as f:
                    header = f.readline()
                    if i == 0 or out.tell() == 0:
                        out.write(header)
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
