"""``iwarp ping`` server and client as two processes on loopback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _server(*flags: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "iwarp",
            "ping",
            "-s",
            "-a",
            "127.0.0.1",
            "-p",
            "0",
            "-d",
            "--timeout",
            "30",
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on port "), line
    return proc, int(line.split()[-1])


def _client(port: int, *flags: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``iwarp ping -c`` against 127.0.0.1:port to completion."""
    argv = [sys.executable, "-m", "iwarp", "ping", "-c", "-a", "127.0.0.1", "-p", str(port)]
    return subprocess.run(
        [*argv, *flags], check=False, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "flags",
    [(), ("--no-crc",), ("--markers",), ("--p2p", "write"), ("--p2p", "read"), ("--rev", "1")],
)
def test_ping_client_and_server(flags: tuple[str, ...]) -> None:
    server, port = _server()
    try:
        client = _client(
            port,
            *("-C", "4", "-S", "40", "-V", "-v", "--delay", "0", "--timeout", "30"),
            *flags,
            timeout=60,
        )
        out, err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert client.returncode == 0, client.stderr
    lines = client.stdout.splitlines()
    assert lines == [f"ping data: {_payload(n, 40)}" for n in range(4)]
    assert server.returncode == 0, err
    assert "4 pings served" in out
    assert out.count("server ping data: rdma-ping-") == 4


def _payload(n: int, size: int) -> str:
    from iwarp.apps.rping import ping_payload

    return ping_payload(n, size, 65 + n)[: size - 1].decode()


def test_ping_client_fails_without_a_server() -> None:
    server, port = _server()
    server.kill()
    server.wait()
    client = _client(port, "-C", "1", "--timeout", "10", timeout=30)
    assert client.returncode == 1 and "iwarp ping:" in client.stderr
