"""``iwarp demo``: responder and initiator on loopback, every byte verified."""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest

from clitools import IWARP
from iwarp.cli import main


@pytest.mark.parametrize(
    "flags",
    [[], ["--markers"], ["--no-crc"], ["--p2p", "write"], ["--p2p", "send", "--size", "0"]],
)
def test_demo_json_lines(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--size", "70000", "--count", "3", *flags]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    connection, *ops, summary = lines
    assert connection["type"] == "connection" and connection["revision"] == 2
    assert connection["crc"] == ("--no-crc" not in flags)
    assert connection["markers_send"] == ("--markers" in flags)
    assert [op["op"] for op in ops] == ["send", "rdma_write", "rdma_read"]
    size = 0 if "0" in flags else 70000
    for op in ops:
        assert op["verified"] is True and op["messages"] == 3 and op["octets"] == 3 * size
    assert summary == {**summary, "type": "summary", "verified": True, "octets": 9 * size}


def test_demo_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--size", "4096", "--count", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("connection: responder=127.0.0.1:")
    assert " revision=2 crc=yes " in lines[0]
    assert [line.split()[1] for line in lines[1:4]] == ["op=send", "op=rdma_write", "op=rdma_read"]
    for line in lines[1:4]:
        assert " verified=yes " in line and line.endswith(" sha256_of=arrived")
        assert re.search(r" sha256=[0-9a-f]{64} ", line)  # in full
    assert lines[4].startswith("summary: messages=6 planned_messages=6 octets=24576 ")
    assert lines[4].endswith(" verified=yes")


def test_progress_counts_octets_within_a_long_message(capsys: pytest.CaptureFixture[str]) -> None:
    # One message of 64 MiB per operation, a report every 10 ms: a line shows
    # octets moved while no message has completed yet.
    argv = ["demo", "--size", "64M", "--count", "1", "--progress", "--interval", "0.01"]
    assert main(argv) == 0
    lines = capsys.readouterr().err.splitlines()
    partial = [line for line in lines if re.search(r"\] 0 messages, [1-9][0-9.]* [KMG]i?B", line)]
    assert partial, lines


@pytest.mark.slow
@pytest.mark.parametrize("as_json", [False, True])
def test_an_interrupted_demo_keeps_its_header_and_says_not_checked(as_json: bool) -> None:
    proc = subprocess.Popen(
        [
            *IWARP,
            "demo",
            "--size",
            "64K",
            "--count",
            "1000000",
            "--progress",
            "--interval",
            "0.05",
            *(["--json"] if as_json else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    header = proc.stdout.readline()  # printed once connected, before any data
    assert "messages" in proc.stderr.readline()  # progress: the Sends are under way
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    *ops, summary = rest.splitlines()
    if as_json:
        assert json.loads(header)["type"] == "connection"
        assert json.loads(ops[-1])["verified"] is None
        assert json.loads(summary)["verified"] is None
        assert json.loads(summary)["interrupted"] == "SIGINT"
    else:
        assert header.startswith("connection: responder=127.0.0.1:")
        assert ops[-1].startswith("operation: op=send ")
        assert re.search(r'verified="interrupted: \d+ of 1000000 messages checked', ops[-1])
        assert summary.startswith("summary: ")
        assert re.search(
            r'verified="interrupted: \d+ of 3000000 messages checked, all matched" '
            r"interrupted=SIGINT$",
            summary,
        )
    assert "NO" not in rest
