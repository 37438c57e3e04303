"""Honest summaries, as a user sees them: servers silent while idle, rates
over the time data moved, full hashes that say what they cover, one
``key=value`` layout."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from clitools import IWARP, by_type, connect, listen
from iwarp.cli._mpa_options import message
from iwarp.cli._report import format_record

#: A summary line in the human layout: ``summary: key=value ...``.
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def fields(line: str) -> dict[str, str]:
    """The ``key=value`` fields of a human-layout line (quoted values unquoted)."""
    found = {}
    for key, value in _FIELD.findall(line.split(": ", 1)[1]):
        found[key] = json.loads(value) if value.startswith('"') else value
    return found


def sha256_of_messages(count: int, size: int) -> str:
    import hashlib

    return hashlib.sha256(b"".join(message(i, size) for i in range(count))).hexdigest()


def test_the_human_layout_quotes_values_with_spaces() -> None:
    line = format_record(
        {"type": "summary", "a": 1, "b": "two words", "c": True, "d": None, "e": 'q"uote'}
    )
    assert line == 'summary: a=1 b="two words" c=yes d=- e="q\\"uote"'
    assert fields(line) == {"a": "1", "b": "two words", "c": "yes", "d": "-", "e": 'q"uote'}


@pytest.mark.slow
def test_an_idle_listener_prints_nothing_and_its_rate_leaves_out_idle_time() -> None:
    proc = subprocess.Popen(
        [*IWARP, "listen", "--port", "0", "--progress", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        began = time.monotonic()
        listening = fields(proc.stdout.readline())
        time.sleep(1.0)  # idle: twenty intervals with nothing to say
        rc, out = connect(int(listening["port"]), "--count", "4", "--size", "1000")
        assert rc == 0, out
        moved = time.monotonic() - began  # the listener's data moved before this
        time.sleep(1.0)  # idle again
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    progress = [line for line in stderr.splitlines() if "messages" in line]
    # Only intervals in which messages arrived: at least one, a few at most.
    assert 1 <= len(progress) <= 4, stderr
    assert all(not line.split("] ")[1].startswith("0 messages") for line in progress)
    summary = fields(stdout.splitlines()[-1])
    assert summary["messages"] == "4" and summary["interrupted"] == "SIGINT"
    assert summary["sha256"] == sha256_of_messages(4, 1000)
    assert summary["sha256_of"] == "received"
    # From the first connection to the last message: neither idle second.
    assert float(summary["seconds"]) < moved - 1.0


def test_connect_and_listen_say_what_each_hash_covers() -> None:
    with listen("--count", "2", "--op", "read") as listener:
        rc, out = connect(listener.port, "--count", "2", "--size", "100", "--op", "read")
        lrc, lines = listener.finish()
    assert (rc, lrc) == (0, 0)
    (mine,) = by_type(out, "summary")
    (theirs,) = by_type(lines, "summary")
    assert mine["sha256"] == theirs["sha256"] == sha256_of_messages(2, 100)
    assert (mine["sha256_of"], theirs["sha256_of"]) == ("read", "served")


def _vitcp_payloads(count: int, size: int) -> str:
    import hashlib

    from iwarp.cli.vitcp import payload

    return hashlib.sha256(b"".join(payload(i + 1, size) for i in range(count))).hexdigest()


def test_vitcp_text_summaries_give_full_hashes_of_what_moved() -> None:
    listener = subprocess.Popen(
        [*IWARP, "vitcp", "listen", "--port", "0", "--count", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        first = listener.stdout.readline()
        assert first.startswith("listening: host=127.0.0.1 port=")
        proc = subprocess.run(
            [*IWARP, "vitcp", "connect", "127.0.0.1", fields(first)["port"], "--count", "20"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        out, err = listener.communicate(timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.communicate()
    assert proc.returncode == 0 and listener.returncode == 0, proc.stderr + err
    summary, peer = proc.stdout.splitlines()
    mine, theirs, logged = fields(summary), fields(peer), fields(out.splitlines()[-1])
    expected = _vitcp_payloads(20, 1024)
    assert summary.startswith("summary: role=connector op=send messages=20 octets=20480 ")
    assert (mine["sha256"], mine["sha256_of"]) == (expected, "sent")
    assert peer.startswith("peer: role=listener ")
    for record in (theirs, logged):
        assert (record["sha256"], record["sha256_of"], record["octets"]) == (
            expected,
            "received",
            "20480",
        )
