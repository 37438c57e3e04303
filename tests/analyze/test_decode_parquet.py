"""``iwarp decode --parquet DIR``: the ``--csv`` tables as Parquet."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import subprocess
from pathlib import Path

import pytest
from analyze_traffic import resegmented, standard

from clitools import IWARP, run_in_process
from iwarp.analyze.tables import TABLES
from iwarp.cli import main


def decode(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IWARP, "decode", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def damage(name: str, pieces: list[bytes]) -> list[bytes]:
    """The Responder's first FPDU with a wrong CRC."""
    if name != "responder":
        return pieces
    first = bytearray(pieces[0])
    first[-1] ^= 1
    return [bytes(first), *pieces[1:]]


def captures(tmp_path: Path) -> list[Path]:
    """A clean capture (markers, cut anywhere) and one with a damaged CRC."""
    clean, _ = standard(True, False).capture(resegmented([300, 7]))
    damaged, _ = standard(False, True).capture(mutate=damage)
    paths = [tmp_path / "c0.pcap", tmp_path / "c1.pcap"]
    for cap, path in zip((clean, damaged), paths, strict=True):
        cap.write(str(path))
    return paths


def csv_rows(directory: Path, name: str) -> list[list[str]]:
    with open(directory / name, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def as_csv(value: object) -> str:
    """A Parquet value as the csv module writes the same Python value."""
    out = io.StringIO()
    csv.writer(out).writerow([value])
    return next(csv.reader(io.StringIO(out.getvalue())))[0]


def parquet_rows(directory: Path, name: str) -> list[list[str]]:
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(directory / name.replace(".csv", ".parquet"))
    header = [str(c) for c in table.column_names]
    columns = [table.column(c).to_pylist() for c in header]
    return [header, *([as_csv(v) for v in row] for row in zip(*columns, strict=True))]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_same_tables_as_csv(tmp_path: Path, jobs: str) -> None:
    pytest.importorskip("pyarrow")
    paths = captures(tmp_path)
    done = decode(
        *map(str, paths),
        "--csv",
        str(tmp_path / "csv"),
        "--parquet",
        str(tmp_path / "pq"),
        "--jobs",
        jobs,
    )
    assert done.returncode == 1, done.stderr  # the damaged CRC
    for name, columns in TABLES.items():
        rows = csv_rows(tmp_path / "csv", name)
        assert rows[0] == list(columns)
        assert parquet_rows(tmp_path / "pq", name) == rows
    fpdus = csv_rows(tmp_path / "csv", "fpdus.csv")
    assert len(fpdus) == 1 + 2 * 9
    assert {row[0] for row in fpdus[1:]} == {str(p) for p in paths}
    assert len(csv_rows(tmp_path / "csv", "errors.csv")) == 2
    assert sorted(os.listdir(tmp_path / "pq")) == sorted(
        n.replace(".csv", ".parquet") for n in TABLES
    )


def test_typed_columns(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = captures(tmp_path)[0]
    assert run_in_process("decode", str(path), "--parquet", str(tmp_path / "pq")).returncode == 0
    fpdus = pq.read_table(tmp_path / "pq" / "fpdus.parquet")
    schema = fpdus.schema
    assert schema.field("stag").type == pa.int64() and schema.field("crc_ok").type == pa.bool_()
    assert schema.field("opcode_name").type == pa.string()
    stags = [s for s in fpdus.column("stag").to_pylist() if s is not None]
    assert stags and all(isinstance(s, int) for s in stags)
    connections = pq.read_table(tmp_path / "pq" / "connections.parquet").schema
    assert connections.field("markers").type == pa.bool_()
    assert connections.field("first_time").type == pa.float64()


def test_rows_go_out_in_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from iwarp.analyze import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP", 4)
    path = captures(tmp_path)[0]
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["decode", str(path), "--parquet", str(tmp_path / "pq")])
    assert status == 0
    fpdus = pq.ParquetFile(tmp_path / "pq" / "fpdus.parquet")
    assert fpdus.metadata.num_rows == 9 and fpdus.num_row_groups == 3


def test_without_pyarrow_a_clear_error_before_reading(tmp_path: Path) -> None:
    # A pyarrow that cannot be imported, ahead of any installed one.
    blocker = tmp_path / "blocked" / "pyarrow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "blocked")}
    done = decode(str(tmp_path / "never-read.pcap"), "--parquet", str(tmp_path / "pq"), env=env)
    assert done.returncode == 2
    assert done.stderr == (
        "iwarp decode: --parquet needs pyarrow, an optional extra: pip install "
        "'iwarp[parquet]' (or pip install pyarrow)\n"
    )
    assert not (tmp_path / "pq").exists()


def test_the_documented_duckdb_query(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    for path in captures(tmp_path):
        done = run_in_process("decode", str(path), "--parquet", str(tmp_path / "runs" / path.stem))
        assert done.returncode in (0, 1)
    rows = duckdb.sql(
        f"""
        SELECT capture, opcode_name, count(*) AS fpdus, sum(payload_length) AS octets,
               count(*) FILTER (WHERE NOT crc_ok) AS bad_crcs
        FROM read_parquet('{tmp_path}/runs/*/fpdus.parquet')
        GROUP BY ALL ORDER BY capture, fpdus DESC, opcode_name
        """
    ).fetchall()
    by_capture: dict[str, int] = {}
    for capture, _, fpdus, _, _ in rows:
        by_capture[capture] = by_capture.get(capture, 0) + fpdus
    assert sorted(by_capture.values()) == [9, 9]
    assert sum(r[4] for r in rows) == 1
