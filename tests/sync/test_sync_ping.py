"""``iwarp ping --sync`` against ``iwarp ping`` on asyncio and against itself,
as two processes on loopback: the same rping conversation on both adapters."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

PING = [sys.executable, "-m", "iwarp", "ping"]


def start_server(*flags: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [*PING, "-s", "-a", "127.0.0.1", "-p", "0", "-d", "--timeout", "30", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on port "), line
    return proc, int(line.split()[-1])


@pytest.mark.parametrize(
    ("client_sync", "server_sync"),
    [(True, False), (False, True), (True, True)],
    ids=["sync-client", "sync-server", "both-sync"],
)
@pytest.mark.parametrize("flags", [(), ("--markers",), ("--p2p", "read")], ids=str)
def test_ping_across_adapters(client_sync: bool, server_sync: bool, flags: tuple[str, ...]) -> None:
    server, port = start_server(*(("--sync",) if server_sync else ()))
    try:
        client = subprocess.run(
            [
                *PING,
                *("-c", "-a", "127.0.0.1", "-p", str(port), "-C", "5", "-S", "48", "-V", "-v"),
                *("--delay", "0", "--timeout", "30", *flags),
                *(("--sync",) if client_sync else ()),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
        server.wait()
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, err
    pings = [line for line in client.stdout.splitlines() if line.startswith("ping data: ")]
    assert [p.split(":")[1].strip() for p in pings] == [f"rdma-ping-{i}" for i in range(5)]
    assert out.count("server ping data: rdma-ping-") == 5
    assert "5 pings served" in out


def test_sync_ping_times_out_cleanly() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # TCP, never an MPA Reply
        result = subprocess.run(
            [
                *PING,
                "-c",
                "-a",
                "127.0.0.1",
                "-p",
                str(silent.getsockname()[1]),
                "--sync",
                "--timeout",
                "0.5",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert "timed out" in result.stderr and "Traceback" not in result.stderr
