"""``iwarp proxy`` as a command: the listing, --json, --pcap, the summary,
Ctrl-C, the connection limit and the idle timeout."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clitools import IWARP, by_type, connect, listen

T = 15.0


class ProxyProcess:
    def __init__(self, proc: subprocess.Popen[str], json_lines: bool) -> None:
        self.proc = proc
        self.json = json_lines
        first = self.line()
        if json_lines:
            record = json.loads(first)
            assert record["type"] == "listening", record
            address = str(record["address"])
        else:
            assert first.startswith("listening: "), first
            address = first.split("address=")[1].split()[0]
        self.port = int(address.rpartition(":")[2])

    def line(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], T)
        assert ready, "no output from iwarp proxy"
        return self.proc.stdout.readline()

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=T)
        return self.proc.returncode, out, err


@contextmanager
def proxy_cli(target: int, *args: str, json_lines: bool = False) -> Iterator[ProxyProcess]:
    command = [*IWARP, "proxy", "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{target}"]
    proc = subprocess.Popen(
        [*command, *(["--json"] if json_lines else []), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield ProxyProcess(proc, json_lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
def test_listing_summary_and_pcap(tmp_path: Path) -> None:
    pcap = tmp_path / "both.pcapng"
    with (
        listen("--connections", "1") as listener,
        proxy_cli(
            listener.port,
            "--connections",
            "1",
            "--pcap",
            str(pcap),
            "--fault",
            "to=responder; nth=2; corrupt-crc",
        ) as px,
    ):
        status, _ = connect(px.port, "--count", "3")
        listener.finish()
        code, out, err = px.finish()
    assert status == 1 and code == 0, err
    assert "Traceback" not in err
    lines = out.splitlines()
    assert any(" MPA    Request Rev 2" in line for line in lines)
    assert any("NOTE   fault corrupt-crc toward the responder at fpdu 2" in line for line in lines)
    (summary,) = [line for line in lines if line.startswith("summary: ")]
    assert "fpdus_to_responder=" in summary
    # The Terminate iwarp listen sends right before it closes is read,
    # even when the close resets the connection.
    assert any("RDMAP  TERMINATE" in line for line in lines), lines
    assert 'responder_after="terminate 2/0/2' in summary
    decoded = subprocess.run(
        [*IWARP, "decode", str(pcap), "-T", "text"],
        capture_output=True,
        text=True,
        timeout=T,
        check=False,
    )
    # Both legs: the initiator's (CRC right) and the responder's (CRC wrong).
    assert decoded.stdout.count("Request Rev 2") == 2
    assert "CRC BAD" in decoded.stdout or "[mpa 2]" in decoded.stdout


@pytest.mark.slow
def test_json_records_and_ctrl_c_prints_the_open_summary() -> None:
    with listen() as listener, proxy_cli(listener.port, json_lines=True) as px:
        sock = socket.create_connection(("127.0.0.1", px.port))
        sock.sendall(b"MPA ID Req Frame" + bytes([0x40, 1, 0, 0]))
        record = json.loads(px.line())
        assert record["type"] == "frame" or "mpa" in json.dumps(record).lower()
        time.sleep(0.3)
        px.proc.send_signal(signal.SIGINT)
        code, out, err = px.finish()
        sock.close()
    assert code == 130, err
    summaries = [json.loads(line) for line in out.splitlines() if '"summary"' in line]
    assert summaries and summaries[0]["interrupted"] == "SIGINT"
    assert summaries[0]["fpdus_to_responder"] == 0


@pytest.mark.slow
def test_connection_limit_and_idle_timeout() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    with proxy_cli(
        port, "--max-connections", "1", "--idle-timeout", "0.5", "--connections", "1"
    ) as px:
        first = socket.create_connection(("127.0.0.1", px.port))
        accepted, _ = server.accept()
        second = socket.create_connection(("127.0.0.1", px.port))
        refused = px.line()
        assert refused.startswith("refused: ") and "connection limit 1" in refused
        second.settimeout(T)
        assert second.recv(10) == b""
        code, out, _ = px.finish()  # the first connection idles out, then it exits
        first.close()
        accepted.close()
    server.close()
    assert code == 0
    assert "idle_timeout=yes" in out


def test_unreachable_target_is_refused_not_a_traceback() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.close()  # nobody listens there now
    with proxy_cli(port, "--quiet") as px:
        sock = socket.create_connection(("127.0.0.1", px.port))
        line = px.line()
        sock.close()
        px.proc.send_signal(signal.SIGTERM)
        code, _, err = px.finish()
    assert line.startswith("refused: ") and "cannot reach" in line
    assert code == 143 and "Traceback" not in err


def test_help_explains_the_grammar() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "iwarp", "proxy", "--help"],
        capture_output=True,
        text=True,
        timeout=T,
        check=False,
    )
    assert proc.returncode == 0
    for word in ("corrupt-crc", "resegment", "terminate LAYER/TYPE/CODE", "--idle-timeout"):
        assert word in proc.stdout
    assert by_type([], "x") == []


@pytest.mark.slow
def test_culley_streams_are_followed() -> None:
    """--mpa-mode culley: iwarp connect/listen frame without Request/Reply
    after a streaming line each way; the proxy finds and counts the FPDUs."""
    culley = ("--mpa-mode", "culley", "--op", "mpa")
    with (
        listen("--connections", "1", *culley) as listener,
        proxy_cli(
            listener.port,
            "--connections",
            "1",
            "--mpa-mode",
            "culley",
            "--raw-ulp",
            json_lines=True,
        ) as px,
    ):
        status, lines = connect(px.port, "--count", "3", "--size", "1000", *culley)
        _, heard = listener.finish()
        code, out, err = px.finish()
    assert status == 0 and code == 0, (lines, err)
    assert by_type(lines, "summary")[0]["sha256"] == by_type(heard, "summary")[0]["sha256"]
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (summary,) = [r for r in records if r.get("type") == "summary"]
    assert summary["fpdus_to_responder"] >= 3 and summary["fpdus_to_initiator"] >= 1
    assert summary["errors"] == 0, records
    notes = [r["message"] for r in records if r.get("type") == "note"]
    assert any("culley-02 FPDUs from here, after 32 streaming octets" in n for n in notes)
