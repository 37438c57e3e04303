"""One error style for a peer that is not there, mismatches named by both
ends, and sizes refused before any connection."""

from __future__ import annotations

import errno
import json
import socket
import subprocess

import pytest

from clitools import IWARP
from iwarp.cli._report import EXIT_FAILED, EXIT_USAGE, format_error, unreachable
from iwarp.sockets import is_connect_failure


def closed_port() -> int:
    """A port on which nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*IWARP, *argv], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("argv", "prog", "hint"),
    [
        (["connect"], "iwarp connect", "e.g. iwarp listen --host 127.0.0.1 --port {port}"),
        (
            ["connect", "--op", "mpa"],
            "iwarp connect",
            "e.g. iwarp listen --host 127.0.0.1 --port {port} --op mpa",
        ),
        (
            ["vitcp", "connect"],
            "iwarp vitcp connect",
            "e.g. iwarp vitcp listen --host 127.0.0.1 --port {port}",
        ),
    ],
    ids=["connect", "connect-mpa", "vitcp"],
)
def test_a_peer_that_is_not_there_is_said_alike(argv: list[str], prog: str, hint: str) -> None:
    port = closed_port()
    text = run(*argv, "127.0.0.1", str(port))
    assert text.returncode == EXIT_FAILED and text.stdout == ""
    (line,) = text.stderr.splitlines()
    assert line.startswith(
        f"{prog}: error: cannot reach 127.0.0.1:{port}: connection refused: nothing listens "
        "on that port (tried: TCP connect); hint: start "
    )
    assert hint.format(port=port) in line
    scripted = run(*argv, "127.0.0.1", str(port), "--json")
    assert scripted.returncode == EXIT_FAILED and scripted.stderr == ""
    record = json.loads(scripted.stdout.splitlines()[-1])
    assert record["type"] == "error" and record["error"] == "unreachable"
    assert record["address"] == f"127.0.0.1:{port}" and record["tried"] == "TCP connect"
    assert hint.format(port=port) in str(record["hint"])


@pytest.mark.parametrize(
    ("argv", "prog", "hint", "status"),
    [
        (["ping", "-c", "-C", "1", "-a", "127.0.0.1", "-p"], "iwarp ping", "iwarp ping -s", 1),
        (
            ["ping", "--sync", "-c", "-C", "1", "-a", "127.0.0.1", "-p"],
            "iwarp ping",
            "iwarp ping -s",
            1,
        ),
        (["perf", "127.0.0.1", "-p"], "iwarp perf", "iwarp perf --server", 1),
        (["perf", "--sync", "127.0.0.1", "-p"], "iwarp perf", "iwarp perf --server", 1),
        # No verdict at all: conformance's own status for "could not run" (2).
        (["conformance", "127.0.0.1"], "iwarp conformance", "iwarp listen --host 127.0.0.1", 2),
    ],
    ids=["ping", "ping-sync", "perf", "perf-sync", "conformance"],
)
def test_the_other_clients_say_it_alike(argv: list[str], prog: str, hint: str, status: int) -> None:
    port = closed_port()
    text = run(*argv, str(port))
    assert text.returncode == status, text.stderr
    (line,) = [x for x in text.stderr.splitlines() if "error" in x]
    assert line.startswith(
        f"{prog}: error: cannot reach 127.0.0.1:{port}: connection refused: nothing listens "
        "on that port (tried: TCP connect); hint: start "
    ), line
    assert hint in line and "Traceback" not in text.stderr


def test_only_connect_failures_count_as_unreachable() -> None:
    assert is_connect_failure(ConnectionRefusedError(errno.ECONNREFUSED, "x"))
    assert is_connect_failure(socket.gaierror(-2, "Name or service not known"))
    assert is_connect_failure(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert not is_connect_failure(ConnectionResetError(errno.ECONNRESET, "reset"))
    assert not is_connect_failure(OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"))
    assert not is_connect_failure(TimeoutError())  # a wait of ours, not the connect
    assert not is_connect_failure(ValueError("x"))


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "x"), "connection refused"),
        (TimeoutError(), "no answer (timed out)"),
        (socket.gaierror(-2, "Name or service not known"), "the host name does not resolve"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "no route to the host"),
        (OSError(errno.EPERM, "Operation not permitted"), "operation not permitted"),
    ],
)
def test_each_cause_is_said_plainly(error: OSError, reason: str) -> None:
    record = unreachable("::1", 7, error, tried="TCP connect", hint="start it")
    assert str(record["reason"]).startswith(reason)
    assert record["address"] == "[::1]:7"
    said = f"cannot reach [::1]:7: {record['reason']} (tried: TCP connect); hint: start it"
    assert format_error("iwarp x", record) == f"iwarp x: error: {said}"


def test_a_size_no_connection_could_carry_is_refused_before_connecting() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        port = str(server.getsockname()[1])
        for argv, said in [
            (["--op", "mpa", "--size", "100K"], "exceeds 64768, the largest MULPDU"),
            (["--size", "5G"], "exceeds 4294967295"),
        ]:
            proc = run("connect", "127.0.0.1", port, *argv)
            assert proc.returncode == EXIT_USAGE and said in proc.stderr, proc.stderr
        proc = run("vitcp", "connect", "127.0.0.1", port, "--size", "5G")
        assert proc.returncode == EXIT_USAGE and "usage: iwarp vitcp connect" in proc.stderr
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
