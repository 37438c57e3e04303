"""ping, perf and demo: summaries with time and rate, interrupts, captures,
and the demo's bounded memory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from clitools import IWARP
from iwarp.analyze.analyzer import analyze_file
from iwarp.analyze.records import FpduRecord
from iwarp.rdma.errors import connection_ended

_SUMMARY = re.compile(
    r"(\d+) pings of (\d+) octets, [\d.]+ (?:B|KiB|MiB|GiB) moved in [\d.]+ s, [\d.]+ MiB/s"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ping_server(port: int, *flags: str) -> subprocess.Popen[str]:
    server = subprocess.Popen(
        [*IWARP, "ping", "-s", "-a", "127.0.0.1", "-p", str(port), "-d", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    assert "listening" in server.stdout.readline()
    return server


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_ping_debug_ends_with_a_summary(adapter: list[str]) -> None:
    port = _free_port()
    server = _ping_server(port, *adapter)
    try:
        client = subprocess.run(
            [*IWARP, "ping", "-c", "-a", "127.0.0.1", "-p", str(port), "-C", "3", "-d", *adapter],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.kill()
        server.communicate()
    assert client.returncode == 0, client.stderr
    match = _SUMMARY.fullmatch(client.stdout.splitlines()[-1])
    assert match and match.group(1) == "3"


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
@pytest.mark.parametrize("side", ["client", "server"])
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_ping_says_how_far_it_got(
    side: str, signum: signal.Signals, status: int, adapter: list[str]
) -> None:
    port = _free_port()
    server = _ping_server(port, *adapter)
    client = subprocess.Popen(  # -C 0: ping until interrupted
        [*IWARP, "ping", "-c", "-a", "127.0.0.1", "-p", str(port), "-d", "--delay", "0", *adapter],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        while "completion" not in client.stdout.readline():  # pings are under way
            pass
        time.sleep(0.3)
        interrupted = client if side == "client" else server
        interrupted.send_signal(signum)
        _, err = interrupted.communicate(timeout=30)
    finally:
        for proc in (client, server):
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert interrupted.returncode == status, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"iwarp ping: interrupted by {signum.name}: ")
    match = _SUMMARY.search(line)
    assert match and int(match.group(1)) > 0
    assert "Traceback" not in err


def test_perf_takes_pcap(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [*IWARP, "perf", "--server", "--bind", "127.0.0.1", "--port", "0", "--count", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    assert "serving on 127.0.0.1:" in line, line
    port = int(line.split("127.0.0.1:")[1].split()[0])
    capture = tmp_path / "perf.pcapng"
    try:
        client = subprocess.run(
            [
                *IWARP,
                "perf",
                "127.0.0.1",
                "--port",
                str(port),
                "--iters",
                "20",
                "--size",
                "8K",
                "--pcap",
                str(capture),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert client.returncode == 0, client.stderr
    analysis = analyze_file(str(capture))
    assert analysis.error_count == 0
    writes = [
        r
        for r in analysis.records()
        if isinstance(r, FpduRecord) and r.ulp.get("opcode_name") == "RDMA_WRITE"
    ]
    assert len(writes) >= 20


#: Runs ``iwarp`` and prints its peak resident set size (KiB) on stderr at
#: exit: the VmHWM of its own memory, not ru_maxrss, which Linux carries over
#: exec from the parent (a child of a large pytest worker reported the
#: worker's size).
_MEASURED = [
    IWARP[0],
    "-c",
    "import atexit, runpy, sys; atexit.register(lambda: print('maxrss', "
    "[x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM:')][0], "
    "file=sys.stderr)); "
    "sys.argv[0] = 'iwarp'; runpy.run_module('iwarp', run_name='__main__')",
]


@pytest.mark.slow
def test_demo_memory_stays_a_few_buffers() -> None:
    """64 MiB moved per operation in 2 MiB messages: the process holds a few
    buffers of --size, not --count of them (that took count x size several
    times over before)."""
    size, count = 2 << 20, 128
    proc = subprocess.run(
        [*_MEASURED, "demo", "--size", "2M", "--count", str(count), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    peak = int(proc.stderr.split("maxrss ")[1].split()[0]) * 1024  # Linux: KiB
    # Each operation keeps a window of 32 MiB of messages on each side; the
    # run moves 256 MiB per operation, which the whole-run buffers held
    # several times over.
    assert peak < (192 << 20) < 2 * count * size


@pytest.mark.slow
def test_ping_reports_progress_on_stderr() -> None:
    """``--progress`` (or any run past two seconds): interval lines on a
    non-terminal stderr with the pings so far, rping's stdout untouched."""
    port = _free_port()
    server = _ping_server(port)
    options = ["--delay", "0", "--progress", "--interval", "0.1"]
    client = subprocess.Popen(  # -C 0: ping until stopped
        [*IWARP, "ping", "-c", "-a", "127.0.0.1", "-p", str(port), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress = re.compile(r"pings: \[ *[\d.]+- *[\d.]+ s\] (\d+) messages, .*/s\n")
    counts: list[int] = []
    try:
        assert client.stderr is not None
        while len(counts) < 100 and not (counts and counts[-1] > 0):  # until pings show
            line = client.stderr.readline()
            match = progress.fullmatch(line)
            assert match, line
            counts.append(int(match.group(1)))
        client.send_signal(signal.SIGINT)
        out, _ = client.communicate(timeout=30)
    finally:
        for proc in (client, server):
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert counts[-1] > 0 and counts == sorted(counts)
    assert out == ""


def _ping_client(port: int, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IWARP, "ping", "-c", "-a", "127.0.0.1", "-p", str(port), "--delay", "0", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_a_persistent_server_serves_clients_one_after_another(adapter: list[str]) -> None:
    port = _free_port()
    server = _ping_server(port, "-P", *adapter)
    try:
        for _ in range(3):
            client = _ping_client(port, "-C", "2", "-V", *adapter)
            assert client.returncode == 0, client.stderr
        assert server.poll() is None  # -P: still serving
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 130, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("iwarp ping: interrupted by SIGINT: 3 clients served, 6 pings of 64")
    assert "Traceback" not in err


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_the_client_connects_from_the_source_address(adapter: list[str]) -> None:
    port = _free_port()
    server = _ping_server(port, "-P", *adapter)
    try:
        good = _ping_client(port, "-C", "1", "-I", "127.0.0.2", *adapter)
        # an address of no interface here: only -I can make connecting fail
        bad = _ping_client(port, "-C", "1", "-I", "192.0.2.1", *adapter)
    finally:
        server.kill()
        server.communicate()
    assert good.returncode == 0, good.stderr
    assert bad.returncode == 1 and "iwarp ping:" in bad.stderr
    assert "assign requested address" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("adapter", [[], ["--sync"]])
def test_a_size_too_big_for_the_server_names_the_likely_cause(adapter: list[str]) -> None:
    port = _free_port()
    server = _ping_server(port, *adapter)  # -S 64 (rping's default)
    try:
        client = _ping_client(port, "-C", "1", "-S", "100000", *adapter)
    finally:
        server.kill()
        server.communicate()
    assert client.returncode == 1
    assert "disconnected after 0 pings" in client.stderr
    assert "give the server -S 100000 or more" in client.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["-c", "-P"], "-P is a server option"), (["-s", "-I", "127.0.0.1"], "-I is a client option")],
)
def test_ping_role_options_are_checked(flags: list[str], message: str) -> None:
    proc = subprocess.run(
        [*IWARP, "ping", *flags, "-p", "1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2 and message in proc.stderr


# --- demo cut short: what it checked, never "verified=yes" -----------------------------------


def test_a_demo_interrupted_after_its_first_progress_line_says_what_it_checked() -> None:
    size, count = 64 << 10, 100_000  # far more than moves before the signal
    options = ["--size", "64K", "--count", str(count), "--json", "--progress", "--interval", "0.1"]
    proc = subprocess.Popen(
        [*IWARP, "demo", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first progress line: data is moving
        assert "messages" in first, first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    records = [json.loads(line) for line in out.splitlines()]
    operations = [r for r in records if r["type"] == "operation"]
    summary = records[-1]
    assert summary["type"] == "summary" and summary["interrupted"] == "SIGINT"
    assert summary["verified"] is None  # not all was checked: never true
    assert summary["planned_messages"] == 3 * count
    assert summary["messages"] == sum(r["messages"] for r in operations) < 3 * count
    assert summary["octets"] == summary["messages"] * size
    assert operations and operations[-1]["verified"] is None
    assert all(r["verified"] is True for r in operations[:-1])


def _demo(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``iwarp demo --size 1K --count 2`` in this process (human layout)."""
    from iwarp.cli import main

    status = main(["demo", "--size", "1K", "--count", "2"])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_demo_interrupted_before_any_data_moved_does_not_say_verified(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import iwarp.cli.demo as demo
    from iwarp.asyncio.rdma import connect

    async def interrupted_connect(*args: Any, **kwargs: Any) -> Any:
        qp = await connect(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C before the first operation
        await asyncio.sleep(30)
        return qp

    monkeypatch.setattr(demo, "connect", interrupted_connect)
    status, out, _ = _demo(capsys)
    assert status == 130
    summary = out.splitlines()[-1]
    assert summary.startswith("summary: messages=0 planned_messages=6 octets=0 ")
    assert 'verified="interrupted: 0 of 6 messages checked, all matched"' in summary
    assert "verified=yes" not in out and "interrupted=SIGINT" in summary


def test_a_demo_whose_connection_ends_says_so_and_what_it_checked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from iwarp.asyncio.rdma import QueuePair

    async def peer_gone(self: QueuePair, *args: Any, **kwargs: Any) -> Any:
        raise connection_ended("127.0.0.1:9", None, False, True, "", "rdma_read")

    monkeypatch.setattr(QueuePair, "rdma_read", peer_gone)
    status, out, err = _demo(capsys)
    assert status == 1
    assert err.splitlines() == [
        "iwarp demo: rdma_read failed: the peer 127.0.0.1:9 closed the connection"
    ]
    lines = out.splitlines()
    assert sum("verified=yes" in line for line in lines) == 2  # Send and Write finished
    assert "op=rdma_read messages=0 planned_messages=2 " in lines[-2]
    assert lines[-1].startswith("summary: messages=4 planned_messages=6 octets=4096 ")
    assert 'verified="interrupted: 4 of 6 messages checked, all matched"' in lines[-1]
    assert 'interrupted="connection lost"' in lines[-1]
