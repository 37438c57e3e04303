"""``iwarp perf``: sizes, the server and client over loopback, every op and mode."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from iwarp.cli import main
from iwarp.cli.perf import parse_size


@pytest.mark.parametrize(
    ("text", "value"), [("64", 64), ("4K", 4096), ("1m", 1 << 20), ("1G", 1 << 30), ("2KiB", 2048)]
)
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "0", "-1", "1T", "2G", "x"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(Exception, match="size"):
        parse_size(text)


def start_server(*flags: str, count: int) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iwarp",
            "perf",
            "-s",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--count",
            str(count),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving on 127.0.0.1:" in line, line
    return proc, int(line.split("127.0.0.1:")[1].split()[0])


@pytest.fixture
def server() -> Iterator[int]:
    proc, port = start_server(count=7)
    yield port
    proc.kill()
    proc.wait(timeout=10)


def run_client(capsys: pytest.CaptureFixture[str], port: int, *flags: str) -> tuple[int, str, str]:
    status = main(["perf", "127.0.0.1", "--port", str(port), *flags])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_every_op_and_mode(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    for op in ("write", "read", "send"):
        status, out, _ = run_client(
            capsys, server, "--op", op, "--size", "8K", "--iters", "50", "--json"
        )
        assert status == 0
        data = json.loads(out)
        assert data["op"] == op and data["bytes"] == 8192 and data["iterations"] == 50
        assert data["average_mib_s"] > 0 and data["peak_mib_s"] >= data["average_mib_s"]
        assert data["messages_per_s"] > 0 and data["crc"] is True
        assert set(data["cpu_us_per_mib"]) == {"client", "server"}
    for op in ("write", "read", "send"):
        status, out, _ = run_client(
            capsys, server, "--op", op, "--size", "64", "--iters", "20", "--latency", "--json"
        )
        assert status == 0
        data = json.loads(out)
        assert data["iterations"] == 20
        assert 0 < data["min_us"] <= data["median_us"] <= data["p99_us"] <= data["max_us"]


def test_table_and_compare_raw(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_client(capsys, server, "--size", "64K", "--iters", "40", "--compare-raw")
    assert status == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "#bytes" in line)
    assert "BW peak[MiB/s]" in lines[header] and "MsgRate" in lines[header]
    assert lines[header + 1].split()[:2] == ["65536", "40"]
    assert any(line.startswith("raw TCP:") and "RDMA/raw" in line for line in lines)
    status, out, _ = run_client(
        capsys,
        server,
        "--op",
        "send",
        "--size",
        "64",
        "--latency",
        "--iters",
        "30",
        "--compare-raw",
        "--json",
    )
    data = json.loads(out)
    assert data["raw_tcp"]["median_us"] > 0
    assert data["added_median_us"] == pytest.approx(
        data["median_us"] - data["raw_tcp"]["median_us"]
    )


@pytest.mark.slow
def test_duration_prints_progress(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_client(capsys, server, "--size", "4K", "--duration", "2.2", "--json")
    assert status == 0
    assert json.loads(out)["iterations"] > 0
    progress = [line for line in err.splitlines() if "messages" in line and "MiB/s" in line]
    assert 1 <= len(progress) <= 3


def test_markers_must_match(capsys: pytest.CaptureFixture[str]) -> None:
    proc, port = start_server("--markers", count=2)
    try:
        status, _, err = run_client(capsys, port, "--iters", "5")
        assert status == 1 and "--markers" in err
        status, out, _ = run_client(capsys, port, "--iters", "5", "--markers", "--json")
        assert status == 0 and json.loads(out)["markers"] is True
        proc.wait(timeout=30)
        assert proc.returncode == 0
    finally:
        proc.kill()


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf"]) == 2
    assert "HOST" in capsys.readouterr().err
    assert main(["perf", "-s", "somehost"]) == 2
    assert main(["perf", "127.0.0.1", "--port", "1", "--iters", "1"]) == 1
    assert "iwarp perf:" in capsys.readouterr().err
