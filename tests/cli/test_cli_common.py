"""What every ``iwarp`` subcommand shares: argument checks, sizes with
units, summaries with time and rate, progress, and interrupts."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import signal
import socket
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli.test_receipt_offer import foreign_mpa_peer
from clitools import IWARP, by_type, connect, listen, run_in_process
from iwarp.cli._args import format_rate, port, size
from iwarp.cli._progress import Progress, ProgressMeter, WireOctets, tcp_octets

#: Every command line that takes a port, with "PORT" where it goes.
PORT_COMMANDS = [
    ["connect", "127.0.0.1", "PORT"],
    ["listen", "--port", "PORT"],
    ["ping", "-c", "-p", "PORT"],
    ["ping", "-s", "-p", "PORT"],
    ["vitcp", "connect", "127.0.0.1", "PORT"],
    ["vitcp", "listen", "--port", "PORT"],
    ["interop", "peer", "echo-server", "--port", "PORT"],
    ["perf", "-s", "--port", "PORT"],
]


# In this process (the parser refuses a bad port before any command starts): a
# Python start each was most of these 24 cases' time.
@pytest.mark.parametrize("bad", ["99999", "-1", "http"])
@pytest.mark.parametrize("command", PORT_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_bad_port_is_a_usage_error(command: list[str], bad: str) -> None:
    argv = [bad if word == "PORT" else word for word in command]
    proc = run_in_process(*argv, refused=True)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "port" in proc.stderr and bad in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("text", "octets"),
    [
        ("4096", 4096),
        ("64K", 65_536),
        ("64k", 65_536),
        ("64KiB", 65_536),
        ("64KB", 65_536),
        ("50M", 50 << 20),
        ("2G", 2 << 30),
        ("1GiB", 1 << 30),
        ("3 MiB", 3 << 20),
    ],
)
def test_sizes_take_units(text: str, octets: int) -> None:
    assert size(text) == octets


@pytest.mark.parametrize("text", ["", "-1", "1X", "0.3", "K", "1.5M"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size(text)


@given(st.integers(min_value=0, max_value=1 << 40), st.sampled_from("KMGT"))
def test_sizes_round_trip_plain_and_binary(octets: int, unit: str) -> None:
    assert size(str(octets)) == octets
    scale = 1 << (10 * ("KMGT".index(unit) + 1))
    assert size(f"{octets}{unit}") == size(f"{octets}{unit}iB") == octets * scale


@given(st.integers(min_value=-(1 << 20), max_value=1 << 20))
def test_ports_are_the_tcp_range(value: int) -> None:
    if 0 <= value <= 0xFFFF:
        assert port(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            port(str(value))


@pytest.mark.slow
def test_every_size_option_takes_units() -> None:
    with listen("--count", "2", "--max-size", "2KiB", "--memory-budget", "1M") as listener:
        rc, out = connect(listener.port, "--count", "2", "--size", "1K")
        lrc, lines = listener.finish()
    assert (rc, lrc) == (0, 0), (out, lines)
    (summary,) = by_type(out, "summary")
    assert summary["octets"] == 2048
    assert lines[-1]["octets"] == 2048


def test_summaries_give_elapsed_time_and_rate() -> None:
    with listen("--count", "4") as listener:
        rc, out = connect(listener.port, "--count", "4", "--size", "64KiB")
        lrc, lines = listener.finish()
    assert (rc, lrc) == (0, 0)
    for summary in (out[-1], lines[-1]):
        assert summary["type"] == "summary"
        seconds, rate = summary["seconds"], summary["mib_per_s"]
        assert isinstance(seconds, float) and seconds > 0
        assert isinstance(rate, float)
        # The summary rounds the rate to 0.1 and the seconds to 1e-6: on a
        # fast run the second rounding alone moves the rate by several
        # hundredths, so the bound is both.
        expected = 4 * 65536 / seconds / (1 << 20)
        assert abs(rate - expected) <= 0.05 + expected * 0.5e-6 / seconds + 1e-9
        assert len(str(summary["sha256"])) == 64


@pytest.mark.slow
def test_the_human_summary_names_time_and_rate() -> None:
    with listen("--count", "1") as listener:
        proc = subprocess.run(
            [*IWARP, "connect", "127.0.0.1", str(listener.port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        listener.finish()
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.splitlines()[-1]
    assert summary.startswith("summary:") and "seconds=" in summary and "mib_per_s=" in summary


@pytest.mark.slow
def test_progress_lines_on_stderr_when_asked() -> None:
    # (Many messages: an interval in which none moved prints nothing.)
    with listen("--count", "3000") as listener:
        proc = subprocess.run(
            [
                *IWARP,
                "connect",
                "127.0.0.1",
                str(listener.port),
                "--json",
                "--count",
                "3000",
                "--progress",
                "--interval",
                "0.01",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        listener.finish()
    assert proc.returncode == 0, proc.stderr
    # stdout stays one JSON record per line; progress went to stderr.
    assert all(json.loads(line) for line in proc.stdout.splitlines())
    assert "messages" in proc.stderr and "MiB/s" in proc.stderr


@pytest.mark.parametrize(
    ("quiet", "forced", "shown"), [(True, False, False), (True, True, True), (False, False, True)]
)
def test_json_runs_show_progress_only_when_asked(quiet: bool, forced: bool, shown: bool) -> None:
    stream = io.StringIO()

    async def run() -> None:
        progress = Progress(
            lambda: (1, 1000), quiet=quiet, forced=forced, interval=0.01, delay=0, stream=stream
        )
        progress.start()
        await asyncio.sleep(0.2)
        progress.stop()

    asyncio.run(run())
    assert ("1 messages" in stream.getvalue()) == shown


def test_progress_is_silent_while_nothing_moves() -> None:
    """An idle ping server, a ping client waiting for its connection, a demo
    between messages: no "0 messages" line every interval (issue 37)."""
    stream = io.StringIO()

    async def run() -> None:
        progress = Progress(lambda: (0, 0), forced=True, interval=0.01, delay=0, stream=stream)
        progress.start()
        await asyncio.sleep(0.2)
        progress.stop()

    asyncio.run(run())
    assert stream.getvalue() == ""


def test_progress_meter_text() -> None:
    meter = ProgressMeter(start=100.0, terminal=False)
    first = meter.report(101.0, 10, 2 << 20)
    assert first == "[    0.0-    1.0 s] 10 messages, 2.00 MiB, 2.0 MiB/s\n"
    # iperf style: each line is what moved in its interval, and its rate.
    second = meter.report(103.0, 20, 6 << 20)
    assert second == "[    1.0-    3.0 s] 10 messages, 4.00 MiB, 2.0 MiB/s\n"
    tty = ProgressMeter(start=0.0, terminal=True)
    line = tty.report(2.0, 1, 1000)
    # One rewriting line: the totals are labelled, the rate is the interval's.
    assert line == "\r    2.0 s  total 1 messages, 1000 B  last 2.0 s: 0.0 MiB/s\x1b[K"
    assert tty.finish() == "\r\x1b[K"
    assert format_rate(5, 0.0) == "- MiB/s"


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20)), min_size=1, max_size=20))
def test_an_idle_quiet_meter_prints_only_intervals_that_moved(
    steps: list[tuple[int, int]],
) -> None:
    meter = ProgressMeter(start=0.0, terminal=False, idle_quiet=True)
    messages = octets = 0
    for second, (more_messages, more_octets) in enumerate(steps, 1):
        messages += more_messages
        octets += more_octets if more_messages else 0
        line = meter.report(float(second), messages, octets)
        assert (line == "") == (more_messages == 0)
        if line:
            # The interval is the last second, whatever was skipped before it.
            assert line.startswith(f"[{second - 1:7.1f}-{second:7.1f} s] {more_messages} messages")
    assert meter.finish() == ""


def test_a_message_still_moving_counts_its_octets_on_the_wire() -> None:
    meter = ProgressMeter(start=0.0, terminal=False)
    meter.rebase(0, 0, 500)  # the handshake went before the run
    # One long message: none complete, yet TCP moved 3 MiB and then 2 MiB more.
    assert (
        meter.report(1.0, 0, 0, 500 + (3 << 20))
        == "[    0.0-    1.0 s] 0 messages, 3.00 MiB, 3.0 MiB/s\n"
    )
    assert meter.report(2.0, 0, 0, 500 + (5 << 20)).endswith("0 messages, 2.00 MiB, 2.0 MiB/s\n")
    # It completes (4 MiB of payload, less than its framed octets): no step back.
    assert meter.report(3.0, 1, 4 << 20, 500 + (5 << 20)).endswith("1 messages, 0 B, 0.0 MiB/s\n")
    # The next message counts from where the last one completed (4 MiB + 2 MiB;
    # 5 MiB were shown already).
    assert meter.report(4.0, 1, 4 << 20, 500 + (7 << 20)).endswith(
        "0 messages, 1.00 MiB, 1.0 MiB/s\n"
    )


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.none() | st.integers(0, 1 << 20)),
        min_size=1,
        max_size=20,
    )
)
def test_progress_within_messages_never_goes_back(
    steps: list[tuple[int, int, int | None]],
) -> None:
    meter = ProgressMeter(start=0.0, terminal=False, idle_quiet=False)
    messages = octets = wire = 0
    for second, (more_messages, more_octets, more_wire) in enumerate(steps, 1):
        messages += more_messages
        octets += more_octets if more_messages else 0
        wire += more_wire or 0
        line = meter.report(float(second), messages, octets, None if more_wire is None else wire)
        moved = line.split("] ")[1].split(", ")[1]
        assert not moved.startswith("-")
    # Never less than the completed messages' octets.
    assert meter._last_octets >= octets


def test_wire_octets_count_what_tcp_moved_both_ways() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        left = socket.create_connection(server.getsockname())
        right, _ = server.accept()
    with left, right:
        if tcp_octets(left) is None:
            pytest.skip("the system does not report TCP octets (TCP_INFO)")
        wire = WireOctets()
        assert wire() is None  # no connection yet: unknown
        wire.add(left)
        before = wire()  # (Linux counts the SYN as one octet acknowledged)
        assert before is not None
        left.sendall(b"x" * 1000)
        assert right.recv(1000, socket.MSG_WAITALL) == b"x" * 1000
        right.sendall(b"y" * 300)
        assert left.recv(300, socket.MSG_WAITALL) == b"y" * 300
        # Acknowledged by the peer: loopback acknowledges at once, but ask a few times.
        for _ in range(100):
            if wire() == before + 1300:
                break
            time.sleep(0.01)
        assert wire() == before + 1300
        wire.drop(left)  # what an ended connection moved is kept
        assert wire() == before + 1300
    assert tcp_octets(left) is None  # closed


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_listener_prints_its_partial_summary(
    signum: signal.Signals, status: int
) -> None:
    with listen() as listener:  # no --count: runs until interrupted
        rc, out = connect(listener.port, "--count", "5", "--size", "1000")
        assert rc == 0, out
        # The listener counted every message before its receipt let the
        # connector finish.
        listener.proc.send_signal(signum)
        lrc, lines = listener.finish()
    assert lrc == status
    summary = lines[-1]
    assert summary["type"] == "summary"
    assert summary["interrupted"] == signum.name
    (sent,) = by_type(out, "summary")
    for key in ("messages", "octets", "sha256"):
        assert summary[key] == sent[key]


@pytest.mark.slow
def test_an_interrupted_connector_prints_what_it_moved() -> None:
    # An MPA peer that accepts but never advertises: the connector waits.
    with foreign_mpa_peer([]) as port:
        proc = subprocess.Popen(
            [*IWARP, "connect", "127.0.0.1", str(port), "--json", "--count", "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "established"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 130, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["type"] == "summary" and summary["interrupted"] == "SIGINT"
    assert summary["messages"] == 0 and len(summary["sha256"]) == 64
    assert "Traceback" not in err


def test_version_reports_accelerator_python_and_crc32c() -> None:
    import importlib.metadata
    import platform

    from iwarp import __version__, _accel

    proc = subprocess.run(
        [*IWARP, "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == f"iwarp {__version__}"
    assert lines[1] == f"accelerator: {_accel.describe()}"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    assert lines[2].startswith(f"Python: {python} (")
    assert lines[3] == f"crc32c: {importlib.metadata.version('crc32c')}"


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    from iwarp.cli import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child_name, child in action.choices.items():
                    walk(f"{name} {child_name}", child)

    walk("iwarp", build_parser())
    return found


PARSERS = dict(_every_parser())


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_help_explains_in_plain_text(name: str) -> None:
    parser = PARSERS[name]
    text = parser.format_help()
    assert parser.description, f"{name} has no description"
    assert "``" not in text
    assert "seed 0" not in text  # drafts by name, not by the seed file's number
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{name} {action.option_strings[0]} has no help"


def test_the_readme_lists_every_command() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = [line for line in readme.splitlines() if line.startswith("| `iwarp ")]
    for name in PARSERS:
        words = name.split()[1:]
        if not words:
            continue
        command, *action = words
        rows = [row for row in table if f"`iwarp {command}" in row.split("|")[1]]
        assert rows, f"README's command table has no row for iwarp {command}"
        if action:
            cell = " ".join(row.split("|")[1] for row in rows)
            assert action[0] in cell, f"README's command table does not name {name}"


@pytest.mark.parametrize("op", ["send", "write", "read"])
def test_the_connector_learns_why_the_listener_refused(op: str) -> None:
    with listen("--connections", "1", "--max-size", "1000", "--op", op) as listener:
        rc, out = connect(listener.port, "--size", "1001", "--op", op)
        lrc, lines = listener.finish()
    assert (rc, lrc) == (1, 1)
    (error,) = by_type(out, "error")
    assert error["message"] == (
        "the listener refused: messages of 1001 octets exceed its --max-size 1000 (1000 octets)"
    )
    assert "reset" not in str(error["message"])
    assert "exceed --max-size 1000" in str(by_type(lines, "error")[0]["message"])


def test_the_connector_learns_of_a_full_memory_budget() -> None:
    with listen("--connections", "1", "--memory-budget", "64K") as listener:
        rc, out = connect(listener.port, "--size", "100K")
        listener.finish()
    assert rc == 1
    (error,) = by_type(out, "error")
    assert str(error["message"]).startswith(
        "the listener refused: no room for a buffer of 102400 octets in its --memory-budget"
    )


@pytest.mark.parametrize("choice", ["", "asyncio"])
def test_version_names_the_event_loop(choice: str) -> None:
    import importlib.util
    import os

    env = {**os.environ, "IWARP_LOOP": choice}
    proc = subprocess.run(
        [*IWARP, "--version"], capture_output=True, text=True, timeout=30, check=True, env=env
    )
    loop = proc.stdout.splitlines()[4]
    if choice == "asyncio":
        assert loop == "event loop: asyncio's own (IWARP_LOOP=asyncio)"
    elif importlib.util.find_spec("uvloop") is not None:
        assert loop.startswith("event loop: uvloop ") and "IWARP_LOOP=asyncio" in loop
    else:
        assert loop.startswith("event loop: asyncio's own (uvloop is not installed")


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_commands_run_on_the_loop_chosen(choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_loop (what every asyncio command runs through) uses uvloop's loop
    unless IWARP_LOOP=asyncio, and returns the coroutine's result."""
    import asyncio

    from iwarp.cli._run import run_loop

    if choice == "uvloop":
        uvloop = pytest.importorskip("uvloop")
    monkeypatch.setenv("IWARP_LOOP", choice)

    async def loop_type() -> type:
        return type(asyncio.get_running_loop())

    kind = run_loop(loop_type())
    if choice == "uvloop":
        assert issubclass(kind, uvloop.Loop)
    else:
        assert kind.__module__.startswith("asyncio")


@pytest.mark.parametrize("value", ["uvlop", "trio", "1"])
def test_an_unknown_loop_is_refused_with_the_choices(value: str) -> None:
    """A misspelt IWARP_LOOP is an error naming the choices (exit 2, no traceback), not a
    silent uvloop; --version says so too."""
    import os

    env = {**os.environ, "IWARP_LOOP": value}
    proc = subprocess.run(
        [*IWARP, "listen", "--port", "0", "--count", "1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 2 and not proc.stdout
    assert (
        proc.stderr
        == f"iwarp: IWARP_LOOP={value!r} names no event loop: use uvloop or asyncio (or unset it)\n"
    )
    version = subprocess.run(
        [*IWARP, "--version"], capture_output=True, text=True, timeout=30, check=True, env=env
    )
    assert version.stdout.splitlines()[4].startswith("event loop: none, the commands refuse")


def test_uvloop_asked_for_but_missing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from iwarp.cli import _run

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )
    monkeypatch.setenv("IWARP_LOOP", " UVloop ")
    problem = _run.loop_problem()
    assert problem is not None and "uvloop is not installed" in problem
    monkeypatch.setenv("IWARP_LOOP", "")
    assert _run.loop_problem() is None
