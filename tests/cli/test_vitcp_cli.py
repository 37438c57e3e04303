"""``iwarp vitcp``: written data's hash, interrupts, a port that is not VI/TCP."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from clitools import IWARP
from iwarp.cli.vitcp import payload


@contextmanager
def vitcp_listener(*args: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [*IWARP, "vitcp", "listen", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "listening"
        yield proc, int(first["port"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def vitcp_connect(port: int, *args: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [*IWARP, "vitcp", "connect", "127.0.0.1", str(port), "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    summary = json.loads(proc.stdout.splitlines()[-1]) if proc.stdout.strip() else {}
    return proc.returncode, summary, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("count", "size"), [(1, 1000), (7, 1 << 20)])
def test_write_reports_the_written_datas_hash_on_both_sides(count: int, size: int) -> None:
    expected = hashlib.sha256(b"".join(payload(i + 1, size) for i in range(count))).hexdigest()
    with vitcp_listener("--count", str(count)) as (listener, port):
        rc, summary, err = vitcp_connect(
            port, "--op", "write", "--count", str(count), "--size", str(size)
        )
        out, _ = listener.communicate(timeout=30)
    assert rc == 0 and listener.returncode == 0, err
    assert summary["sha256"] == expected and summary["sha256_of"] == "written"
    peer = summary["peer"]
    assert isinstance(peer, dict) and peer["sha256"] == expected and peer["writes"] == count
    (listener_summary,) = [json.loads(line) for line in out.splitlines()]
    assert listener_summary["sha256"] == expected
    assert listener_summary["seconds"] > 0 and listener_summary["mib_per_s"] is not None


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_vitcp_listener_prints_the_summary_so_far(
    signum: signal.Signals, status: int
) -> None:
    with vitcp_listener() as (listener, port):  # no --count: until interrupted
        rc, summary, err = vitcp_connect(port, "--count", "3", "--size", "500")
        assert rc == 0, err
        listener.send_signal(signum)
        out, _ = listener.communicate(timeout=30)
    assert listener.returncode == status
    last = json.loads(out.splitlines()[-1])
    assert last["interrupted"] == signum.name and last["status"] == "interrupted"
    assert last["messages"] == 3 and last["octets"] == 1500
    assert last["sha256"] == summary["sha256"]


@pytest.mark.slow
def test_a_port_that_is_not_vitcp_gives_the_real_cause() -> None:
    """A server that accepts and closes at once (not VI/TCP): the connector
    backs off between attempts and says what happened."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted = 0
    stop = threading.Event()

    def serve() -> None:
        nonlocal accepted
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted += 1
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        rc, record, err = vitcp_connect(server.getsockname()[1], "--timeout", "2")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert rc == 1
    match = re.search(
        r"closed the TCP connection without a VI/TCP answer, (\d+) times \(is it a VI/TCP "
        r"listener\?\)",
        str(record.get("message")),  # with --json, errors stay in the JSON stream
    )
    assert match, (record, err)
    # Backing off (0.05 s doubling to 1 s): a handful of attempts in 2 s.
    assert int(match.group(1)) == accepted and accepted <= 10
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_long_run_of_sends_with_the_defaults_loses_nothing() -> None:
    """Descriptor flow control is on by default: 20,000 Sends of 4 KiB do not
    outrun the listener's posted descriptors (without it, runs of this size
    ended with "no receive descriptor posted" after 1,500-3,700 messages)."""
    with vitcp_listener("--count", "20000") as (listener, port):
        rc, summary, err = vitcp_connect(port, "--count", "20000", "--size", "4K")
        out, lerr = listener.communicate(timeout=60)
    assert rc == 0, err
    assert summary["status"] == "ok" and summary["messages"] == 20000
    assert summary["flow_control"] is True
    final = json.loads(out.splitlines()[-1])
    assert final["status"] == "ok", lerr
    assert final["messages"] == 20000 and final["sha256"] == summary["sha256"]


@pytest.mark.slow
def test_an_interrupted_vitcp_connector_reports_progress_and_what_it_sent() -> None:
    # Descriptor flow control (the default): without it, a stream of Sends
    # outruns the listener's posted descriptors (the draft's §3.3 remedy).
    with vitcp_listener("--flow-control") as (_, port):
        connector = subprocess.Popen(
            [
                *IWARP,
                "vitcp",
                "connect",
                "127.0.0.1",
                str(port),
                "--json",
                "--count",
                "100000",
                "--size",
                "4K",
                "--flow-control",
                "--progress",
                "--interval",
                "0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert connector.stderr is not None
            assert "messages" in connector.stderr.readline()  # a progress line: under way
            connector.send_signal(signal.SIGINT)
            out, err = connector.communicate(timeout=30)
        finally:
            if connector.poll() is None:
                connector.kill()
                connector.communicate()
    assert connector.returncode == 130, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["interrupted"] == "SIGINT" and summary["status"] == "interrupted"
    moved = summary["messages"]
    assert 0 < moved < 100000 and summary["octets"] == moved * 4096
    expected = hashlib.sha256(b"".join(payload(i + 1, 4096) for i in range(moved)))
    assert summary["sha256"] == expected.hexdigest()
