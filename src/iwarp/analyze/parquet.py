"""``iwarp decode --parquet DIR``: the ``--csv`` tables as Apache Parquet.

The same four tables, the same rows and columns as
:mod:`iwarp.analyze.tables` (``fpdus``, ``messages``, ``connections``,
``errors``; every row names its capture), each a ``.parquet`` file with a
typed schema (integers, flags, seconds, text; absent values null), so
DuckDB, pandas or Spark read the results of many captures at once
(``read_parquet('runs/*/fpdus.parquet')``).

pyarrow is an optional extra (``pip install 'iwarp[parquet]'``):
:func:`check_available` says so before anything is read. Rows are written
in row groups of :data:`ROW_GROUP` as they come, so memory stays bounded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from iwarp.analyze.tables import TABLES, CsvTables, RowWriter

__all__ = [
    "ROW_GROUP",
    "SCHEMAS",
    "ParquetTables",
    "ParquetUnavailableError",
    "check_available",
    "concatenate",
    "table_file",
]

#: Rows buffered per table before they are written as a row group.
ROW_GROUP: Final = 65536

_INT, _FLOAT, _BOOL, _TEXT = "int64", "float64", "bool", "string"

#: Column types per table (the columns are those of ``TABLES``; text unless named).
SCHEMAS: Final[dict[str, dict[str, str]]] = {
    "fpdus.csv": {
        **dict.fromkeys(("stream", "seq", "frame", "wire_length", "ulpdu_length"), _INT),
        **dict.fromkeys(("markers", "opcode", "stag", "to", "qn", "msn", "mo"), _INT),
        "payload_length": _INT,
        **dict.fromkeys(("crc_ok", "markers_ok", "tagged", "last"), _BOOL),
    },
    "messages.csv": {
        **dict.fromkeys(("stream", "first_seq", "first_frame", "last_frame", "fpdus"), _INT),
        **dict.fromkeys(("payload_octets", "stag", "to", "qn", "msn"), _INT),
        "complete": _BOOL,
    },
    "connections.csv": {
        **dict.fromkeys(("stream", "fpdus", "ulpdu_octets", "tcp_octets"), _INT),
        **dict.fromkeys(("tcp_retransmissions", "tcp_out_of_order", "tcp_gaps"), _INT),
        **dict.fromkeys(("tcp_gap_octets", "errors", "reads", "terminates"), _INT),
        **dict.fromkeys(("markers", "crc"), _BOOL),
        **dict.fromkeys(("setup_seconds", "read_latency_mean", "read_latency_max"), _FLOAT),
        **dict.fromkeys(("first_time", "last_time"), _FLOAT),
    },
    "errors.csv": dict.fromkeys(("stream", "seq", "frame", "code"), _INT),
}


class ParquetUnavailableError(RuntimeError):
    """pyarrow is not installed."""


def check_available() -> None:
    """Raise :class:`ParquetUnavailableError` unless pyarrow can be imported."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ParquetUnavailableError(
            "--parquet needs pyarrow, an optional extra: pip install 'iwarp[parquet]' "
            "(or pip install pyarrow)"
        ) from None


def table_file(name: str) -> str:
    """``fpdus.csv`` -> ``fpdus.parquet``."""
    return name.removesuffix(".csv") + ".parquet"


def _schema(name: str) -> Any:
    import pyarrow as pa

    types = SCHEMAS[name]
    kinds = {_INT: pa.int64(), _FLOAT: pa.float64(), _BOOL: pa.bool_(), _TEXT: pa.string()}
    return pa.schema([(column, kinds[types.get(column, _TEXT)]) for column in TABLES[name]])


class _ParquetTable:
    """One table's rows, written a row group at a time."""

    def __init__(self, path: str, name: str) -> None:
        import pyarrow.parquet as pq

        self.schema = _schema(name)
        self.columns = len(self.schema)
        self.rows: list[Sequence[Any]] = []
        self.writer = pq.ParquetWriter(path, self.schema)

    def writerow(self, row: Sequence[Any], /) -> None:
        self.rows.append(row)
        if len(self.rows) >= ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if not self.rows:
            return
        columns = [
            pa.array([row[i] for row in self.rows], type=self.schema.field(i).type)
            for i in range(self.columns)
        ]
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.rows.clear()

    def close(self) -> None:
        self.flush()
        self.writer.close()


class ParquetTables(CsvTables):
    """The ``--csv`` tables of one capture, written into ``directory`` as Parquet."""

    def __init__(self, directory: str, capture: str) -> None:
        self._tables: list[_ParquetTable] = []
        super().__init__(directory, capture)

    def _table(self, directory: str, name: str, columns: tuple[str, ...]) -> RowWriter:
        table = _ParquetTable(os.path.join(directory, table_file(name)), name)
        self._tables.append(table)
        return table

    def _finish(self) -> None:
        for table in self._tables:
            table.close()


def concatenate(parts: list[str], directory: str) -> None:
    """Join the tables of several captures (each a directory) into ``directory``,
    a row group at a time."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    for name in TABLES:
        schema = _schema(name)
        with pq.ParquetWriter(os.path.join(directory, table_file(name)), schema) as out:
            for part in parts:
                path = os.path.join(part, table_file(name))
                if not os.path.exists(path):
                    continue
                source = pq.ParquetFile(path)
                for group in range(source.num_row_groups):
                    out.write_table(source.read_row_group(group))
