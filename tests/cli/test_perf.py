"""``iwarp perf``: perftest's flags, the server and client over loopback,
every op and mode, both ends' tables, sweeps, and interrupts."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iwarp.cli import _perf, main
from iwarp.cli._perf import (
    ATOMIC_SIZE,
    CONTROL_ID,
    CONTROL_SIZE,
    MAX_SIZE,
    OPS,
    SWEEP_SIZES,
    WINDOW,
    PerfError,
    PerfResult,
    PerfTest,
    Served,
    Ticker,
    check_word,
    decode,
    latency_stats,
    op_failed,
    peak_rate,
)
from iwarp.cli.perf import parse_size
from iwarp.errors import TerminateLayer
from iwarp.rdmap.errors import RdmapErrorType, RemoteOperationCode
from iwarp.rdmap.memory import Access, ProtectionDomain
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import Completion, CompletionStatus, WorkOpcode

IWARP = [sys.executable, "-m", "iwarp"]


@pytest.mark.parametrize(
    ("text", "value"), [("64", 64), ("4K", 4096), ("1m", 1 << 20), ("1G", 1 << 30), ("2KiB", 2048)]
)
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "0", "-1", "1T", "2G", "x"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(Exception, match="size"):
        parse_size(text)


def test_peak_is_the_best_interval_not_the_average() -> None:
    # 100 messages at an even pace over about a second, and 30 more at once
    # in its sixth tenth: that tenth holds 40.
    stamps = sorted([(i + 0.5) / 100 for i in range(100)] + [0.55 + i * 1e-5 for i in range(30)])
    peak = peak_rate(stamps, 1000, 1.0)
    assert peak == pytest.approx(40 * 1000 / 0.1, rel=0.01)
    assert peak > 3 * (130 * 1000 / 1.0)


def test_peak_leaves_out_the_pipe_filling() -> None:
    # 64 completions at once (TCP took them into its buffers), then an even pace.
    stamps = [1e-6 * i for i in range(1, 65)] + [0.01 * i for i in range(1, 101)]
    assert peak_rate(stamps, 1) == pytest.approx(100.0, rel=0.15)
    assert peak_rate([], 1) == 0.0


def test_latency_columns_are_perftests() -> None:
    times = [i * 1e-6 for i in range(1, 1001)]
    stats = latency_stats(times)
    assert stats["min_us"] == pytest.approx(1.0) and stats["max_us"] == pytest.approx(1000.0)
    assert stats["typical_us"] == pytest.approx(statistics.median(times) * 1e6)
    assert stats["avg_us"] == pytest.approx(500.5)
    assert stats["stdev_us"] == pytest.approx(statistics.stdev(times) * 1e6)
    assert stats["p99_us"] == pytest.approx(991.0) and stats["p99_9_us"] == pytest.approx(1000.0)


@given(st.sampled_from(OPS), st.integers(1, MAX_SIZE), st.booleans(), st.booleans())
def test_test_descriptions_round_trip(op: str, size: int, latency: bool, raw: bool) -> None:
    test = PerfTest(op, ATOMIC_SIZE if op == "atomic" else size, latency, raw)
    assert PerfTest.decode(test.encode()) == test


@given(st.integers(1, MAX_SIZE).filter(lambda size: size != ATOMIC_SIZE))
def test_an_atomic_test_of_another_size_is_refused(size: int) -> None:
    with pytest.raises(PerfError, match="8 octets"):
        PerfTest.decode(PerfTest("atomic", size, False, False).encode())


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(st.binary(max_size=64) | _JSON.map(lambda value: json.dumps(value).encode()))
def test_any_control_message_gives_a_test_or_a_perf_error(data: bytes) -> None:
    try:
        test = PerfTest.decode(data)
    except PerfError:
        return
    assert test.op in OPS and 0 < test.size <= MAX_SIZE


def test_hostile_control_messages_are_perf_errors() -> None:
    for data in (b"[" * 5000, b'{"op": "write", "size": 1e999, "latency": false}', b"\xff"):
        with pytest.raises(PerfError):
            PerfTest.decode(data)
    with pytest.raises(PerfError):
        decode(b"[" * 100_000)


_RESULT = {
    "op": "write",
    "bytes": 64,
    "latency": False,
    "iterations": 1,
    "adapter": "sync",
    "markers": False,
    "crc": True,
    "accel": "C",
    "peer_accel": "C",
    "peak_mib_s": 1.0,
    "average_mib_s": 1.0,
    "messages_per_s": 1.0,
    **dict.fromkeys(
        ("min_us", "max_us", "typical_us", "avg_us", "stdev_us", "p99_us", "p99_9_us"), 1.0
    ),
}


@given(
    st.dictionaries(st.sampled_from(sorted(_RESULT)), _JSON | st.integers(10**300, 10**400)),
    st.booleans(),
)
def test_a_garbled_result_never_breaks_the_server(data: dict[str, object], latency: bool) -> None:
    lines: list[str] = []
    served = Served("sync", lines.append)
    served.result({**_RESULT, "latency": latency, **data}, detail=True)  # a row, or "unreadable"
    assert served.tests == 1


@pytest.mark.parametrize("key", ["peak_mib_s", "messages_per_s", "min_us"])
def test_a_result_too_large_for_a_float_is_unreadable_not_a_crash(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    served = Served("sync", print)
    served.result({**_RESULT, "latency": key == "min_us", key: 10**400}, detail=True)
    assert "the client's result is unreadable" in capsys.readouterr().err


@given(st.lists(st.floats(1e-7, 10.0), min_size=1, max_size=300))
def test_latency_statistics_are_ordered(times: list[float]) -> None:
    stats = latency_stats(times)
    assert stats["min_us"] <= stats["typical_us"] <= stats["max_us"]
    assert stats["min_us"] <= stats["p99_us"] <= stats["p99_9_us"] <= stats["max_us"]
    assert stats["min_us"] * (1 - 1e-9) <= stats["avg_us"] <= stats["max_us"] * (1 + 1e-9)
    assert stats["stdev_us"] >= 0


def test_a_short_run_has_its_average_as_peak() -> None:
    """Local completions of -n 100: most of them at once, as TCP takes them
    into its buffers, then the wait for the server's confirmation. The old
    peak (ten intervals of 0.7 ms) showed ~10x the average (issue 37)."""
    stamps = [1e-5 * i for i in range(1, 81)] + [0.004 + 1e-5 * i for i in range(20)]
    elapsed = 0.007
    assert peak_rate(stamps, 65536, elapsed) == pytest.approx(100 * 65536 / elapsed)


def test_a_steady_run_peaks_near_its_average() -> None:
    # 2 s of completions at an even pace, after a burst that fills the pipe
    stamps = [1e-6 * i for i in range(1, 200)] + [0.001 * i for i in range(1, 2001)]
    average = len(stamps) / 2.0
    assert 0.8 * average <= peak_rate(stamps, 1, 2.0) <= 1.5 * average


@given(st.lists(st.floats(1e-6, 100.0), min_size=2, max_size=300), st.integers(1, 1 << 20))
def test_the_peak_is_at_least_the_mean_of_the_counted_intervals(
    stamps: list[float], size: int
) -> None:
    stamps.sort()
    end = stamps[-1]
    if end < 0.5:  # fewer than five intervals of 0.1 s: the average
        assert peak_rate(stamps, size) == len(stamps) * size / end
        return
    if end < 1.0:  # fewer than ten: intervals of end / int(end / 0.1)
        return
    # the nine intervals after the first hold every completion from end / 10
    counted = sum(1 for stamp in stamps if stamp >= end * 0.1000001)
    assert peak_rate(stamps, size) >= counted / 9 * size / (end / 10) * 0.999999


def start_server(*flags: str, count: int | None) -> tuple[subprocess.Popen[str], int]:
    counted = [] if count is None else ["--count", str(count)]
    proc = subprocess.Popen(
        [*IWARP, "perf", "--server", "--bind", "127.0.0.1", "-p", "0", *counted, *flags],
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
    proc, port = start_server(count=None)
    yield port
    proc.kill()
    proc.communicate(timeout=10)


def run_client(capsys: pytest.CaptureFixture[str], port: int, *flags: str) -> tuple[int, str, str]:
    status = main(["perf", "127.0.0.1", "-p", str(port), *flags])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_every_op_and_mode(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    for op in ("write", "read", "send"):
        status, out, _ = run_client(capsys, server, "--op", op, "-s", "8K", "-n", "50", "--json")
        assert status == 0
        data = json.loads(out)
        assert data["op"] == op and data["bytes"] == 8192 and data["iterations"] == 50
        assert data["average_mib_s"] > 0 and data["peak_mib_s"] > 0
        assert data["messages_per_s"] > 0 and data["crc"] is True
        assert data["adapter"] == data["peer_adapter"] == "asyncio"
        assert set(data["cpu_us_per_mib"]) == {"client", "server"}
    for op in ("write", "read", "send"):
        status, out, _ = run_client(
            capsys, server, "--op", op, "-s", "64", "-n", "20", "--latency", "--json"
        )
        assert status == 0
        data = json.loads(out)
        assert data["iterations"] == 20 and "cpu_us_per_mib" not in data
        assert 0 < data["min_us"] <= data["typical_us"] <= data["p99_us"] <= data["p99_9_us"]
        assert data["p99_9_us"] <= data["max_us"] and data["min_us"] <= data["avg_us"]


def test_both_ends_print_the_table_and_raw_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    proc, port = start_server(count=2)
    try:
        status, out, _ = run_client(capsys, port, "-s", "64K", "-n", "40", "--compare-raw")
        assert status == 0
        lines = out.splitlines()
        header = next(i for i, line in enumerate(lines) if "#bytes" in line)
        assert "BW peak[MiB/sec]" in lines[header] and "MsgRate[Mpps]" in lines[header]
        assert "ratio" in lines[header]
        row = lines[header + 1]
        assert row.split()[:2] == ["65536", "40"] and row.endswith("x")
        assert any(line.startswith("CPU per MiB:") for line in lines)
        raw = next(line for line in lines if line.startswith("raw TCP (asyncio, same loop"))
        assert "one send per message" in raw and "message rate" in raw
        status, out, _ = run_client(
            capsys, port, "--op", "send", "-s", "64", "--latency", "-n", "30", "--compare-raw"
        )
        assert status == 0
        lines = out.splitlines()
        header = next(i for i, line in enumerate(lines) if "#bytes" in line)
        for column in ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "99% ", "99.9% "):
            assert column in lines[header]
        assert not any("CPU per MiB" in line for line in lines)
        server_out, server_err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, server_err
    # the server prints the same rows
    assert row in server_out.splitlines()
    assert lines[header + 1] in server_out.splitlines()


def test_compare_raw_json(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_client(
        capsys, server, "--op", "send", "-s", "64", "-n", "200", "--compare-raw", "--json"
    )
    assert status == 0
    data = json.loads(out)
    raw = data["raw_tcp"]
    assert raw["iterations"] == 200 and raw["messages_per_s"] > 0
    assert data["msg_rate_ratio"] == pytest.approx(data["messages_per_s"] / raw["messages_per_s"])
    status, out, _ = run_client(
        capsys, server, "-s", "64", "--latency", "-n", "30", "--compare-raw", "--json"
    )
    data = json.loads(out)
    assert data["raw_tcp"]["typical_us"] > 0
    assert data["added_typical_us"] == pytest.approx(
        data["typical_us"] - data["raw_tcp"]["typical_us"]
    )


def test_sweep_prints_a_row_per_size_on_both_ends(capsys: pytest.CaptureFixture[str]) -> None:
    proc, port = start_server(count=len(SWEEP_SIZES))
    try:
        status, out, _ = run_client(capsys, port, "-a", "-n", "3", "--op", "read")
        assert status == 0
        server_out, server_err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, server_err
    for text in (out, server_out):
        rows = [line.split() for line in text.splitlines() if line.split()[:1] != []]
        sizes = [int(r[0]) for r in rows if r[0].isdigit()]
        assert sizes == [1 << i for i in range(1, 24)]
        assert sum("#bytes" in line for line in text.splitlines()) == 1


@pytest.mark.slow
def test_duration_prints_progress(server: int, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_client(
        capsys, server, "-s", "4K", "-D", "1.2", "--json", "--progress", "--interval", "0.5"
    )
    assert status == 0
    assert json.loads(out)["iterations"] > 0
    progress = [line for line in err.splitlines() if "messages" in line and "/s" in line]
    assert 1 <= len(progress) <= 3


def test_markers_must_match(capsys: pytest.CaptureFixture[str]) -> None:
    proc, port = start_server("--markers", count=2)
    try:
        status, _, err = run_client(capsys, port, "-n", "5")
        assert status == 1 and "--markers" in err
        status, out, _ = run_client(capsys, port, "-n", "5", "--markers", "--json")
        assert status == 0 and json.loads(out)["markers"] is True
        proc.wait(timeout=30)
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.communicate()


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf"]) == 2
    assert "HOST" in capsys.readouterr().err
    assert main(["perf", "--server", "somehost"]) == 2
    assert main(["perf", "127.0.0.1", "-p", "1", "-n", "1"]) == 1
    assert "iwarp perf:" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["perf", "-s"], ["perf", "-s", "--bind", "127.0.0.1"], ["perf", "-s", "-p", "5000"]]
)
def test_the_old_server_flag_is_a_clear_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--server" in err and "ib_write_bw" in err


def test_a_host_after_s_is_not_a_size(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["perf", "-s", "127.0.0.1"])
    assert exit_.value.code == 2
    assert "--server" in capsys.readouterr().err


def test_help_says_what_s_means() -> None:
    out = subprocess.run(
        [*IWARP, "perf", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "ib_write_bw" in out and "--server" in out and "-D" in out and "-a" in out


# --- interrupts: real processes, real signals ------------------------------------------


_PROGRESS = ("--progress", "--interval", "0.2")


def _client_under_way(port: int, *flags: str) -> subprocess.Popen[str]:
    client = subprocess.Popen(
        [*IWARP, "perf", "127.0.0.1", "-p", str(port), "-D", "60", *_PROGRESS, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert client.stderr is not None
    line = client.stderr.readline()  # the first progress line: the test runs
    assert "messages" in line, line
    return client


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("mode", [[], ["--latency", "-s", "64", "--op", "send"]])
def test_an_interrupted_client_prints_its_results_so_far(
    signum: signal.Signals, status: int, mode: list[str]
) -> None:
    server, port = start_server(count=None)
    client = _client_under_way(port, *mode)
    try:
        client.send_signal(signum)
        out, err = client.communicate(timeout=20)
    finally:
        for proc in (client, server):
            proc.kill()
            proc.communicate()
    assert client.returncode == status, err
    assert f"interrupted by {signum.name}" in err and "Traceback" not in err
    header = next(i for i, line in enumerate(out.splitlines()) if "#bytes" in line)
    row = out.splitlines()[header + 1].split()
    assert int(row[1]) > 0  # iterations so far


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_server_says_what_it_served(signum: signal.Signals, status: int) -> None:
    server, port = start_server(count=None)
    client = _client_under_way(port, "--op", "send", "-s", "1K")
    try:
        server.send_signal(signum)
        _, server_err = server.communicate(timeout=20)
        _, client_err = client.communicate(timeout=20)
    finally:
        for proc in (client, server):
            proc.kill()
            proc.communicate()
    assert server.returncode == status, server_err
    assert f"interrupted by {signum.name}: 0 tests served" in server_err
    assert "1024-octet send bandwidth test was under way" in server_err
    assert "Traceback" not in server_err and "Traceback" not in client_err
    assert client.returncode == 1 and "iwarp perf:" in client_err


def test_an_idle_server_stops_on_sigint() -> None:
    server, _ = start_server(count=None)
    server.send_signal(signal.SIGINT)
    _, err = server.communicate(timeout=20)
    assert server.returncode == 130
    assert "interrupted by SIGINT: 0 tests served" in err and "Traceback" not in err


# --- the blocking adapter (--sync) ------------------------------------------------------


@pytest.fixture
def sync_server() -> Iterator[int]:
    proc, port = start_server("--sync", count=None)
    yield port
    proc.kill()
    proc.communicate(timeout=10)


def test_sync_runs_every_op_and_mode(sync_server: int, capsys: pytest.CaptureFixture[str]) -> None:
    for op in ("write", "read", "send"):
        for mode in ([], ["--latency"]):
            status, out, err = run_client(
                capsys, sync_server, "--sync", "--op", op, "-s", "4K", "-n", "30", *mode, "--json"
            )
            assert status == 0, err
            data = json.loads(out)
            assert data["op"] == op and data["iterations"] == 30
            assert data["adapter"] == data["peer_adapter"] == "sync"
            assert (data["typical_us"] if mode else data["average_mib_s"]) > 0


@pytest.mark.parametrize("client", [["--sync"], []])
def test_a_sync_server_prints_the_result_row_of_each_test(
    client: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The client sends its result and closes at once: the server used to
    # lose the row ("test failed: ... closed the connection"; seen with 64K
    # messages, where the close overtakes the server's repost; a race, so
    # three tests).
    proc, port = start_server("--sync", count=3)
    try:
        for _ in range(3):
            status, _, err = run_client(capsys, port, *client, "-s", "64K", "-n", "400")
            assert status == 0, err
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "test failed" not in err and "Traceback" not in err
    assert len(re.findall(r"^\s+65536\s+400\s", out, re.MULTILINE)) == 3, out


@pytest.mark.parametrize("client", [["--sync"], []])
def test_the_adapters_talk_to_each_other(
    client: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    server_flags = [] if client else ["--sync"]
    proc, port = start_server(*server_flags, count=2)
    try:
        for mode in ([], ["--latency"]):
            status, out, err = run_client(
                capsys, port, *client, "--op", "send", "-s", "64", "-n", "50", *mode, "--json"
            )
            assert status == 0, err
            data = json.loads(out)
            assert {data["adapter"], data["peer_adapter"]} == {"sync", "asyncio"}
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("busy", "style"),
    [
        ([], "non-blocking socket busy-polled 200 us, then poll"),
        (["--busy-poll", "0"], "blocking recv"),
    ],
)
def test_sync_compares_with_raw_tcp_that_waits_the_same_way(
    busy: list[str], style: str, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, port = start_server("--sync", *busy, count=2)
    try:
        status, out, err = run_client(
            capsys, port, "--sync", *busy, "-s", "64", "--latency", "-n", "200", "--compare-raw"
        )
        assert status == 0, err
        assert f"raw TCP ({style}): t_typical" in out
        flags = ["--op", "send", "-s", "64", "-n", "300", "--compare-raw", "--json"]
        status, out, err = run_client(capsys, port, "--sync", *busy, *flags)
        assert status == 0, err
        data = json.loads(out)
        assert data["raw_tcp"]["style"] == style and data["raw_tcp"]["iterations"] == 300
        assert data["msg_rate_ratio"] > 0
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0


def test_busy_poll_belongs_to_sync(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "127.0.0.1", "--busy-poll", "0"]) == 2
    assert "--sync" in capsys.readouterr().err


@pytest.mark.parametrize("busy_poll", [0.0, 200e-6])
def test_raw_socket_moves_every_octet(busy_poll: float) -> None:
    from iwarp.cli._perf_sync import RawSocket

    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    sender, receiver = RawSocket(a, busy_poll), RawSocket(b, busy_poll)
    data = bytes(range(256)) * 8192  # 2 MiB: more than the socket buffers hold
    got = bytearray(len(data))
    thread = threading.Thread(target=receiver.recv_exactly, args=(memoryview(got),))
    thread.start()
    sender.sendall(data)
    thread.join(timeout=60)
    sender.close()
    with pytest.raises(ConnectionError):
        receiver.recv_exactly(memoryview(bytearray(1)))
    receiver.close()
    assert got == data


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sync_ends_stop_on_signals(signum: signal.Signals, status: int) -> None:
    server, port = start_server("--sync", count=None)
    client = _client_under_way(port, "--sync", "--op", "send", "-s", "1K")
    try:
        client.send_signal(signum)
        out, err = client.communicate(timeout=20)
        assert client.returncode == status, err
        assert f"interrupted by {signum.name}" in err and "Traceback" not in err
        assert any(line.split()[:1] == ["1024"] for line in out.splitlines())
        # the server goes on serving the next client, then stops on the signal
        client = _client_under_way(port, "--sync", "-s", "1K", "--latency")
        server.send_signal(signum)
        _, server_err = server.communicate(timeout=20)
        _, client_err = client.communicate(timeout=20)
    finally:
        for proc in (client, server):
            proc.kill()
            proc.communicate()
    assert server.returncode == status, server_err
    assert f"interrupted by {signum.name}: 1 tests served" in server_err
    assert "1024-octet write latency test was under way" in server_err
    assert "Traceback" not in server_err + client_err
    assert client.returncode == 1 and "iwarp perf:" in client_err


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_a_server_refuses_messages_over_its_max_size(
    adapter: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    proc, port = start_server("--max-size", "4K", *adapter, count=2)
    try:
        status, _, err = run_client(capsys, port, *adapter, "-s", "8K", "-n", "5")
        assert status == 1
        assert "the server refused the test: 8192-octet messages are over" in err
        assert "--max-size (4096 octets)" in err
        status, out, err = run_client(capsys, port, *adapter, "-s", "4K", "-n", "5", "--json")
        assert status == 0, err
        assert json.loads(out)["bytes"] == 4096
        _, server_err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 0
    assert "test failed (8192-octet write bandwidth test): refused: 8192-octet" in server_err


# --- RFC 7306 atomics (--op atomic) -------------------------------------------------------


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_atomic_rate_and_latency_as_typed(
    adapter: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``iwarp perf HOST --op atomic`` (rate) and ``--latency``, each with
    --compare-raw, against a server of the same adapter; the client checks
    that the server's word counted every FetchAdd of 1."""
    proc, port = start_server(*adapter, count=3)
    try:
        status, out, err = run_client(
            capsys, port, *adapter, "--op", "atomic", "-n", "300", "--compare-raw", "--json"
        )
        assert status == 0, err
        data = json.loads(out)
        assert (data["op"], data["bytes"], data["iterations"]) == ("atomic", 8, 300)
        assert data["adapter"] == data["peer_adapter"] == ("sync" if adapter else "asyncio")
        assert data["messages_per_s"] > 0 and data["raw_tcp"]["iterations"] == 300
        assert data["raw_tcp"]["messages_per_s"] > 0
        # Operations per second and each one's time, not CPU per MiB (issue 37).
        assert data["ops_per_s"] == data["messages_per_s"] and data["peak_ops_s"] > 0
        assert 0 < data["min_us"] <= data["typical_us"] <= data["p99_us"] <= data["max_us"]
        assert "cpu_us_per_mib" not in data and data["cpu_us_per_op"]["client"] > 0
        status, out, err = run_client(
            capsys, port, *adapter, "--op", "atomic", "-s", "4K", "--latency", "-n", "40"
        )
        assert status == 0
        assert "moves 8 octets (a 64-bit word), not the 4096 of -s" in err
        lines = out.splitlines()
        assert lines[0].startswith("RDMA Atomic (FetchAdd) latency")
        header = next(i for i, line in enumerate(lines) if "#bytes" in line)
        assert lines[header + 1].split()[:2] == ["8", "40"]
        status, out, _ = run_client(capsys, port, *adapter, "--op", "atomic", "-n", "50")
        assert status == 0
        assert "RDMA Atomic (FetchAdd) bandwidth" in out
        assert "raw TCP" not in out
        assert "ops average[/sec]" in out and "t_typical[usec]" in out
        assert "CPU per operation:" in out and "CPU per MiB" not in out
    finally:
        try:  # it exits after its three tests (--count 3)
            server_out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait(timeout=10)
    assert server_out.count("RDMA Atomic (FetchAdd)") == 3  # the server printed each test


def test_atomic_has_no_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "127.0.0.1", "--op", "atomic", "-a"]) == 2
    assert "--op atomic has one size" in capsys.readouterr().err


def test_a_lost_increment_is_an_error() -> None:
    result = PerfResult(PerfTest("atomic", ATOMIC_SIZE, False, False), "asyncio", False, True)
    result.iterations = 5
    check_word({"cpu": 0.0, "word": 5}, result)
    for report in ({"cpu": 0.0, "word": 4}, {"cpu": 0.0}, {"word": -1}):
        with pytest.raises(PerfError):
            check_word(report, result)
    result.test = PerfTest("write", 64, False, False)
    check_word({"cpu": 0.0}, result)  # only atomics report a word


def test_a_refused_fetch_add_names_rfc_7306() -> None:
    refusal = TerminateHeader(
        TerminateLayer.RDMAP, RdmapErrorType.REMOTE_OPERATION, RemoteOperationCode.UNEXPECTED_OPCODE
    )
    completion = Completion(1, WorkOpcode.ATOMIC_FETCH_ADD, CompletionStatus.REMOTE_INVALID_REQUEST)
    message = str(op_failed("atomic", completion, refusal))
    assert "does not support RFC 7306" in message and "needs a server with them" in message
    assert "RFC 7306" not in str(op_failed("read", completion, refusal))


#: A perf server whose queue pairs answer Atomic Requests as a stack without
#: RFC 7306 does (atomic_ird=0), for the client's message.
_NO_ATOMICS_SERVER = """
import sys
import iwarp.rdma.connection as connection
from iwarp.cli import main

class NoAtomics(connection.RdmapStream):
    def __init__(self, *args, **kwargs):
        kwargs["atomic_ird"] = 0
        super().__init__(*args, **kwargs)

connection.RdmapStream = NoAtomics
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_a_server_without_atomics_is_named(
    adapter: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Against a server that answers FetchAdd with Unexpected OpCode (RFC 7306
    §1.1), ``--latency`` ends with a message naming RFC 7306 (exit 1)."""
    command = [sys.executable, "-c", _NO_ATOMICS_SERVER, "perf", "--server"]
    proc = subprocess.Popen(
        [*command, "--bind", "127.0.0.1", "-p", "0", *adapter],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving on 127.0.0.1:" in line, line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        status, _, err = run_client(
            capsys, port, *adapter, "--op", "atomic", "-n", "20", "--latency"
        )
        assert status == 1
        assert "does not support RFC 7306 Atomic Operations" in err, err
        assert "needs a server with them" in err and "Traceback" not in err
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_the_raw_tcp_server_bounds_what_a_peer_that_never_reads_costs() -> None:
    """``--compare-raw`` echo (latency, atomics): a peer that sends and never
    reads pauses the server's reading, so its write buffer stays bounded;
    a second connection is refused; closing ends the test's connection."""
    from iwarp.cli._perf_async import _RawListener

    chunk = bytes(1 << 16)

    async def scenario() -> tuple[int, int, bool, bytes]:
        loop = asyncio.get_running_loop()
        listener = await _RawListener.open("127.0.0.1", PerfTest("send", 1 << 16, True, True))
        sock = socket.create_connection(("127.0.0.1", listener.port))
        sock.setblocking(False)
        other = socket.create_connection(("127.0.0.1", listener.port))
        try:
            await loop.sock_sendall(sock, (1 << 40).to_bytes(8, "big"))
            biggest = sent = stalls = 0
            while sent < 32 << 20 and stalls < 200:  # bounded: 32 MiB or 200 stalls
                try:
                    sent += sock.send(chunk)
                    stalls = 0
                except BlockingIOError:
                    stalls += 1
                    await asyncio.sleep(0.001)
                transport = listener.transport
                if transport is not None:
                    biggest = max(biggest, transport.get_write_buffer_size())
            other.settimeout(10)
            refused = await loop.run_in_executor(None, other.recv, 1)
            assert listener.transport is not None
            listener.close()
            return biggest, sent, listener.transport.is_closing(), refused
        finally:
            sock.close()
            other.close()

    biggest, sent, closing, refused = asyncio.run(scenario())
    assert sent < 32 << 20  # the server stopped reading
    assert biggest <= 4 << 20, biggest  # before: every octet sent, buffered to echo
    assert closing
    assert refused == b""  # the second connection was closed at once


class _FloodingQueuePair:
    """A server that, once a bandwidth test ended, sends control messages
    without end: the client must take the first (the report) and stop."""

    def __init__(self) -> None:
        self.reads = 0
        self.send_cq = self

    def post_send(self, wr: object) -> None:
        pass

    def post_send_list(self, wrs: object) -> None:
        pass

    def poll(self) -> list[object]:  # the send completion queue's: none at once
        return []

    def wait(self) -> object:  # the send completion queue's
        return type("Done", (), {"status": CompletionStatus.SUCCESS})()

    def send(self, data: object, solicited: bool = False) -> None:
        pass

    def receive(self, timeout: float | None = None) -> bytes:
        self.reads += 1
        if self.reads > 1000:
            raise AssertionError("the client reads on after the report")
        return b'{"cpu": 0.5}'


def _flood_result() -> tuple[PerfResult, Ticker]:
    result = PerfResult(PerfTest("write", 64, False, False), "sync", False, True, limit=3)
    return result, Ticker(result, enabled=False, forced=False, interval=1.0)


def test_the_sync_client_reads_no_more_than_the_report() -> None:
    from iwarp.cli import _perf_sync

    qp = _FloodingQueuePair()
    result, ticker = _flood_result()
    region = ProtectionDomain().register(bytearray(64))
    report = _perf_sync._bandwidth(qp, region, 0, result, ticker, 0)  # type: ignore[arg-type]
    assert report == {"cpu": 0.5} and result.iterations == 3 and qp.reads == 1


def test_the_asyncio_client_reads_no_more_than_the_report() -> None:
    from iwarp.cli import _perf_async

    class Flooding(_FloodingQueuePair):
        async def wait(self) -> object:
            for _ in range(20):  # a completion takes a while: the reader reads meanwhile
                await asyncio.sleep(0)
            return _FloodingQueuePair.wait(self)

        async def send(self, data: object, solicited: bool = False) -> None:  # type: ignore[override]
            pass

        async def receive(self, timeout: float | None = None) -> bytes:  # type: ignore[override]
            await asyncio.sleep(0)
            return _FloodingQueuePair.receive(self)

    async def scenario() -> tuple[dict[str, object], int]:
        qp = Flooding()
        result, ticker = _flood_result()
        region = ProtectionDomain().register(bytearray(64))
        report = await _perf_async._bandwidth(qp, region, 0, result, ticker, 0)  # type: ignore[arg-type]
        return report, qp.reads

    report, reads = asyncio.run(scenario())
    assert report == {"cpu": 0.5} and reads == 1


class _ShortOfMemoryQueuePair:
    """A server queue pair whose registrations of ``size``-octet buffers
    fail (MemoryError), after a client asked for a test of ``size``."""

    def __init__(self, test: PerfTest) -> None:
        self.test = test
        self.sent: list[bytes] = []
        self.recv_cq = self
        self.params = type("Params", (), {"markers_receive": False, "crc": True})()
        self._pd = ProtectionDomain()

    def wait(self) -> object:  # the receive completion queue's: the test description
        fields = {"status": CompletionStatus.SUCCESS, "wr_id": CONTROL_ID, "solicited": False}
        return type("Done", (), {**fields, "byte_len": len(self.test.encode())})()

    def register(self, buffer: bytearray, access: Access) -> object:
        if len(buffer) == self.test.size:
            raise MemoryError
        return self._pd.register(buffer, access)

    def post_recv(self, wr: object) -> None:
        pass

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def test_a_server_short_of_memory_for_a_send_latency_test_refuses_it() -> None:
    from iwarp.cli import _perf_sync

    test = PerfTest("send", 64, True, False)
    qp = _ShortOfMemoryQueuePair(test)
    control = ProtectionDomain().register(bytearray(CONTROL_SIZE))
    control.view[: len(test.encode())] = test.encode()
    served = Served("sync", lambda line: None)
    _perf_sync._serve_one(qp, control, test, served, "127.0.0.1")  # type: ignore[arg-type]
    assert len(qp.sent) == 1 and "cannot allocate" in decode(qp.sent[0])["error"]
    assert served.tests == 1


@pytest.mark.parametrize("adapter", [[], ["--sync"]], ids=["asyncio", "sync"])
def test_a_client_whose_server_goes_away_prints_the_row_so_far(adapter: list[str]) -> None:
    """The server ends mid-test: the client's row of what it measured,
    marked interrupted, and one line saying where it ended; exit 1. The
    server's own failure line names the client and the test (issue 37)."""
    server, port = start_server(*adapter, count=None)
    client = _client_under_way(port, "--json", *adapter)
    try:
        server.kill()
        out, err = client.communicate(timeout=30)
    finally:
        for proc in (client, server):
            proc.kill()
            proc.communicate()
    assert client.returncode == 1, err
    assert "Traceback" not in err
    row = json.loads(out.splitlines()[-1])
    assert row["iterations"] > 0 and row["interrupted"].startswith("connection lost: ")
    assert "iwarp perf: the test ended " in err


def test_the_server_names_the_client_and_the_test_that_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    served = Served("asyncio")
    served.begin(PerfTest("write", 65536, latency=False, raw=False))
    served.failed("receive failed: flushed", client=("127.0.0.1", 40000))
    assert capsys.readouterr().err == (
        "iwarp perf: test failed (client 127.0.0.1:40000, 65536-octet write bandwidth test): "
        "receive failed: flushed\n"
    )


def test_perftest_flags_are_taken_or_said_not_to_apply(
    server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["-s", "8K", "-n", "20", "--report_gbits", "-F", "-R", "-d", "siw0", "-x", "3"]
    status, out, err = run_client(capsys, server, *flags, "-t", "64")
    assert status == 0, err
    assert "BW peak[Gb/sec]" in out and "BW average[Gb/sec]" in out
    assert err.splitlines() == [
        "iwarp perf: -d siw0 ignored: iwarp runs over the kernel's TCP, no RDMA device",
        "iwarp perf: -x 3 ignored: TCP addresses, no GID table",
        f"iwarp perf: -t 64 ignored: {WINDOW} messages stay in flight "
        "(Reads and atomics: the negotiated ORD)",
    ]


def test_report_gbits_converts_mib() -> None:
    lines: list[str] = []
    data = {
        "latency": False,
        "bytes": 65536,
        "iterations": 10,
        "peak_mib_s": 1000.0,
        "average_mib_s": 500.0,
        "messages_per_s": 8000.0,
    }
    _perf.table(data, lines.append, header=False, detail=False, gbits=True)
    assert lines[0].split()[2:4] == [
        f"{1000 * 8 * 2**20 / 1e9:.2f}",
        f"{500 * 8 * 2**20 / 1e9:.2f}",
    ]


def test_a_crc_the_client_did_not_ask_for_is_said_on_both_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """MPA uses CRC when either end asks: a client's --no-crc against a
    default server runs with CRC, and both ends say so (issue 37)."""
    proc, port = start_server(count=1)
    try:
        status, out, err = run_client(capsys, port, "-n", "20", "-s", "4K", "--no-crc")
        _, server_err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert status == 0, err
    assert "CRC on" in out
    assert "iwarp perf: CRC is on although --no-crc: the server asks for it" in err
    assert "CRC is on although the client 127.0.0.1:" in server_err
    assert "has --no-crc: this server asks for it" in server_err


def test_the_server_says_when_markers_differ(capsys: pytest.CaptureFixture[str]) -> None:
    served = Served("asyncio", markers=False, crc=False)
    test = PerfTest("write", 4096, latency=False, raw=False, crc=True)
    served.settings_differ(test, True, ("127.0.0.1", 5000))
    assert capsys.readouterr().err.splitlines() == [
        "iwarp perf: markers differ: the client 127.0.0.1:5000 asks for markers (--markers), "
        "this server does not; the client ends the test",
        "iwarp perf: CRC is on although this server has --no-crc: the client 127.0.0.1:5000 "
        "asks for it",
    ]
    assert PerfTest.decode(test.encode()) == test
    assert PerfTest.decode(b'{"op": "send", "size": 8, "latency": true}').crc is None


# --- -q N: queue pairs in parallel, one summed row ---------------------------------------


def _row(out: str, size: int) -> str:
    """The table row of a ``size``-octet test in a table's output."""
    rows = [line for line in out.splitlines() if re.match(rf"^\s+{size}\s+\d", line)]
    assert len(rows) == 1, out
    return rows[0]


@pytest.mark.parametrize("adapter", [[], ["--sync"]], ids=["asyncio", "sync"])
def test_q_runs_queue_pairs_in_parallel_and_both_ends_print_their_sum(
    adapter: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Two tests: the server counts a test of several queue pairs once, and exits.
    proc, port = start_server(*adapter, count=2)
    try:
        status, out, err = run_client(capsys, port, *adapter, "-q", "3", "-s", "4K", "-n", "40")
        assert status == 0, err
        assert "3 queue pairs in parallel, rates and BW summed" in out
        client_bw = _row(out, 4096)
        flags = ["-q", "2", "-s", "64", "-n", "25", "--latency", "--op", "send"]
        status, latency_out, err = run_client(capsys, port, *adapter, *flags)
        assert status == 0, err
        assert "2 queue pairs in parallel, latency: the mean of their figures" in latency_out
        client_lat = _row(latency_out, 64)
        server_out, server_err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, server_err
    assert "test failed" not in server_err and "Traceback" not in server_err
    assert client_bw.split()[1] == "120"  # 3 x 40 messages
    assert client_lat.split()[1] == "50"  # 2 x 25 round trips
    # The server sums the same queue pairs' rows: the same rows.
    assert _row(server_out, 4096) == client_bw
    assert _row(server_out, 64) == client_lat


def test_q_json_sums_rates_and_averages_latency(
    server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_client(capsys, server, "-q", "2", "-s", "8K", "-n", "30", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["qps"] == 2 and data["iterations"] == 60
    assert data["average_mib_s"] > 0 and data["messages_per_s"] > 0
    status, out, err = run_client(capsys, server, "-q", "3", "--op", "atomic", "-n", "20", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["qps"] == 3 and data["iterations"] == 60 and data["ops_per_s"] > 0


def _bandwidth_row(
    iterations: int, average: float, seconds: float, cpu: float
) -> dict[str, object]:
    return {
        "op": "write",
        "bytes": 1 << 20,
        "latency": False,
        "iterations": iterations,
        "seconds": seconds,
        "average_mib_s": average,
        "peak_mib_s": average * 1.2,
        "messages_per_s": average,
        "cpu_us_per_mib": {"client": cpu, "server": cpu / 2},
    }


def test_combine_sums_rates_and_takes_the_longest_cpu_measure() -> None:
    rows = [_bandwidth_row(100, 50.0, 2.0, 1000.0), _bandwidth_row(300, 150.0, 2.0, 500.0)]
    out = _perf.combine(rows)
    assert out["qps"] == 2 and out["iterations"] == 400
    assert out["average_mib_s"] == 200.0 and out["messages_per_s"] == 200.0
    assert out["peak_mib_s"] == pytest.approx(240.0)
    # The process's CPU spans both: the larger measure (1000 us x 100 MiB =
    # 0.1 s, 500 us x 300 MiB = 0.15 s) over all 400 MiB.
    assert out["cpu_us_per_mib"]["client"] == pytest.approx(0.15e6 / 400)
    assert _perf.combine(rows[:1]) is rows[0]


def test_combine_averages_latency_and_keeps_an_interruption() -> None:
    stats = [latency_stats([1e-5, 2e-5, 3e-5]), latency_stats([3e-5, 4e-5, 5e-5])]
    rows = [{"op": "send", "bytes": 64, "latency": True, "iterations": 3, **s} for s in stats]
    rows[1]["interrupted"] = "SIGINT"
    out = _perf.combine(rows)
    assert out["iterations"] == 6 and out["interrupted"] == "SIGINT"
    assert out["typical_us"] == pytest.approx(30.0) and out["min_us"] == pytest.approx(20.0)


def test_a_test_of_several_queue_pairs_round_trips_and_is_checked() -> None:
    test = PerfTest("write", 4096, False, False, qps=3, group="ab12")
    assert PerfTest.decode(test.encode()) == test
    assert "qps" not in json.loads(PerfTest("write", 4096, False, False).encode())
    with pytest.raises(PerfError, match="group"):
        PerfTest.decode(b'{"op": "write", "size": 8, "latency": false, "qps": 2}')
    with pytest.raises(PerfError, match="qps"):
        PerfTest.decode(b'{"op": "write", "size": 8, "latency": false, "qps": 65, "group": "x"}')


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["127.0.0.1", "-q", "0"], "queue pairs must be 1 to 64"),
        (["127.0.0.1", "-q", "65"], "queue pairs must be 1 to 64"),
        (["127.0.0.1", "-q", "2", "--compare-raw"], "not with --compare-raw"),
        (["--server", "-q", "2"], "not with --server"),
    ],
)
def test_q_usage_errors(flags: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        status = main(["perf", *flags])
        raise SystemExit(status)
    assert info.value.code == 2
    assert words in capsys.readouterr().err


def test_the_server_sums_a_groups_rows_and_counts_a_failed_group_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines: list[str] = []
    served = Served("asyncio", lines.append)
    test = PerfTest("write", 1 << 20, False, False, qps=2, group="g1")
    rows = [_bandwidth_row(100, 50.0, 2.0, 1000.0), _bandwidth_row(300, 150.0, 2.0, 500.0)]
    for row in rows:
        row.update(adapter="sync", markers=False, crc=True, accel="C", peer_accel="C")
    served.result(rows[0], detail=True, test=test)
    assert served.tests == 0 and not lines  # waits for the other queue pair
    served.result(rows[1], detail=True, test=test)
    assert served.tests == 1 and "2 queue pairs in parallel" in lines[0]
    assert re.match(r"^\s+1048576\s+400\s", lines[3]), lines
    # A failing queue pair fails its test once; the others' rows are not printed.
    failing = PerfTest("write", 1 << 20, False, False, qps=3, group="g2")
    served.result(rows[0], detail=True, test=failing)
    served.failed("receive failed: reset", client=("127.0.0.1", 1), test=failing)
    served.failed("receive failed: reset", client=("127.0.0.1", 2), test=failing)
    served.result(rows[1], detail=True, test=failing)
    assert served.tests == 2 and len(lines) == 5  # (a CPU line below the first row)
    assert capsys.readouterr().err.count("1048576-octet write bandwidth test") == 2


def test_the_servers_line_for_a_client_gone_names_the_close(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A client interrupted mid-test: the server's line says the client
    closed the connection, not 'receive failed: flushed'."""
    proc, port = start_server(count=None)
    try:
        client = _client_under_way(port, "-q", "2", "-s", "4K")
        client.send_signal(signal.SIGINT)
        client.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "flushed" not in err, err
    failures = [line for line in err.splitlines() if "test failed" in line]
    assert failures and all("the peer 127.0.0.1:" in line for line in failures), err
    assert "interrupted by SIGINT: 1 tests served" in err  # two queue pairs, one test


# --- BW peak on a real run: the rule printed, and the relation it reports ---------------

_RULE = re.compile(
    r"^BW peak: the best of (\d+) intervals of ([\d.]+) s \(the first, where the pipe fills, "
    r"left out\); ([\d.]+)x the average(?: \(a steady run stays within 1.5x\)|: over 1.5x, "
    r"the rate was not steady \(other load on the machine\?\))$"
)
_SHORT = re.compile(
    r"^BW peak: not meaningful for a run of ([\d.]+) s \(under 5 intervals of 0.1 s\): "
    r"the average is shown$"
)


@pytest.mark.parametrize("run", [["-D", "0.8"], ["-n", "20"]], ids=["long", "short"])
def test_a_real_runs_peak_is_printed_with_its_rule(
    server: int, run: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A real run against a local server. Not a timed assertion: the rule
    line must match what the row reports (the ratio, and whether it is
    within 1.5x), and a run too short for five intervals must be marked."""
    status, out, err = run_client(capsys, server, "-s", "64K", *run)
    assert status == 0, err
    lines = out.splitlines()
    row = lines[3].split()
    peak, average = float(row[2]), float(row[3])
    rule = lines[4]
    if match := _RULE.match(rule):
        intervals = int(match.group(1)) + 1
        assert intervals >= 5
        ratio = float(match.group(3))
        assert ratio == pytest.approx(peak / average, abs=0.01)
        assert ("steady run stays within" in rule) == (ratio <= 1.5)
        if ratio <= 1.5:
            assert peak <= 1.5 * average + 0.01
    else:
        assert _SHORT.match(rule), rule
        assert peak == average  # the average stands for it
    status, out, err = run_client(capsys, server, "-s", "64K", *run, "--json")
    assert status == 0, err
    data = json.loads(out)
    if data["peak_intervals"]:
        assert data["peak_intervals"] >= 5 and data["seconds"] >= 0.5
    else:
        assert data["peak_mib_s"] == pytest.approx(data["average_mib_s"])
