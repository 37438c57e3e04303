"""``iwarp listen`` / ``iwarp connect``: the CLI contract, run as processes."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from iwarp.mpa.wire import REQUEST_KEY

IWARP = [sys.executable, "-m", "iwarp"]


class Listener:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[dict[str, object]] = []
        first = self.read_line(10)
        assert first["type"] == "listening", first
        port = first["port"]
        assert isinstance(port, int)
        self.port = port

    def read_line(self, timeout: float) -> dict[str, object]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no output from iwarp listen within {timeout} s"
        line = self.proc.stdout.readline()
        assert line, "iwarp listen exited early"
        record: dict[str, object] = json.loads(line)
        self.lines.append(record)
        return record

    def finish(self, timeout: float = 15) -> tuple[int, list[dict[str, object]]]:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines += [json.loads(line) for line in out.splitlines() if line.strip()]
        return self.proc.returncode, self.lines


@contextmanager
def listen(*args: str) -> Iterator[Listener]:
    proc = subprocess.Popen(
        [*IWARP, "listen", "--port", "0", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Listener(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def connect(port: int, *args: str) -> tuple[int, list[dict[str, object]]]:
    proc = subprocess.run(
        [*IWARP, "connect", "127.0.0.1", str(port), "--json", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def by_type(lines: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [line for line in lines if line["type"] == kind]


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--mpa-rev", "1", "--markers"],
        ["--mpa-rev", "1", "--no-crc"],
        # DDP version 0 (Rev 0) is not implemented: bare MPA ULPDUs.
        ["--mpa-rev", "0", "--markers", "--no-crc", "--op", "mpa"],
    ],
)
def test_messages_arrive_and_summaries_agree(options: list[str]) -> None:
    with listen("--count", "20", *options) as listener:
        rc, out = connect(listener.port, "--count", "20", "--size", "1500", *options)
        lrc, lines = listener.finish()
    assert rc == 0 and lrc == 0, (out, lines)
    (sent,) = by_type(out, "summary")
    received = lines[-1]
    assert received["type"] == "summary"  # the summary is the last line
    for key in ("messages", "octets", "sha256"):
        assert received[key] == sent[key]
    assert sent["messages"] == 20 and sent["octets"] == 20 * 1500
    (established,) = by_type(out, "established")
    rev = int(options[1]) if options else 2
    assert established["rev"] == rev
    assert established["markers_receive"] == ("--markers" in options)
    assert established["crc"] == ("--no-crc" not in options)
    (server_side,) = by_type(lines, "established")
    assert server_side["markers_send"] == ("--markers" in options)


def test_parameters_private_data_and_rfc6581() -> None:
    with listen(
        "--count", "1", "--private-data", "cafe", "--ird", "4", "--ord", "2", "--rtr", "read"
    ) as listener:
        rc, out = connect(
            listener.port,
            "--private-data",
            "0102",
            "--ird",
            "0x3fff",
            "--ord",
            "8",
            "--p2p",
            "--rtr",
            "write,read",
            "--size",
            "0",
        )
        lrc, lines = listener.finish()
    assert rc == 0 and lrc == 0, (out, lines)
    (est,) = by_type(out, "established")
    assert est["peer_private_data"] == "cafe"
    assert est["peer_ird"] == 4 and est["peer_ord"] == 0x3FFF  # §9.1: 0x3FFF echoed
    assert est["ord"] == 4 and est["rtr"] == "read" and est["peer_to_peer"] is True
    (request,) = by_type(lines, "request")
    assert request["private_data"] == "0102" and request["ird"] == 0x3FFF
    assert request["rtr"] == ["write", "read"] and request["p2p"] is True


def test_reject() -> None:
    with listen("--reject", "--private-data", "6e6f", "--connections", "1") as listener:
        rc, out = connect(listener.port, "--mpa-rev", "1")
        lrc, lines = listener.finish()
    assert rc == 1
    (rejected,) = by_type(out, "rejected")
    assert rejected["private_data"] == "6e6f" and rejected["reject"] is True
    assert lrc == 0 and by_type(lines, "rejected")
    assert lines[-1]["type"] == "summary" and lines[-1]["messages"] == 0


def test_errors_have_codes_and_nonzero_status() -> None:
    with listen("--connections", "2", "--timeout", "0.5") as listener:
        # An enhanced Request to a Rev 1 peer is closed (RFC 6581 §10) ...
        with listen("--mpa-rev", "1", "--connections", "1") as rev1:
            rc, out = connect(rev1.port)
            rev1_rc, rev1_lines = rev1.finish()
        assert rc == 1 and by_type(out, "error")[0]["code"] == 1
        assert rev1_rc == 1 and by_type(rev1_lines, "error")[0]["code"] == 4
        # ... garbage gets error 4, silence error 1 after the timeout.
        with socket.create_connection(("127.0.0.1", listener.port)) as bad:
            bad.sendall(b"NOT MPA AT ALL, JUST TEXT")
            assert bad.recv(100) == b""
        with socket.create_connection(("127.0.0.1", listener.port)) as quiet:
            start = time.monotonic()
            assert quiet.recv(100) == b""
            assert time.monotonic() - start < 3
        lrc, lines = listener.finish()
    assert lrc == 1
    assert sorted(int(str(e["code"])) for e in by_type(lines, "error")) == [1, 4]
    assert lines[-1]["type"] == "summary" and lines[-1]["errors"] == 2


def test_connection_refused_and_bad_options() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out = connect(port)
    assert rc == 1 and out[-1]["type"] == "error" and out[-1]["code"] == 1
    rc, out = connect(port, "--pd-limit", "600")
    assert rc == 2 and "bad options" in str(out[-1]["message"])
    proc = subprocess.run(
        [*IWARP, "connect", "127.0.0.1", str(port), "--private-data", "xyz"],
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 2  # argparse usage error


def test_siw_request_accepted_by_listen() -> None:
    """Linux siw's Request ("MPA ID Req Frame" 10 02 00 04 | 00 01 00 01)."""
    with listen("--connections", "1") as listener:
        with socket.create_connection(("127.0.0.1", listener.port)) as siw:
            siw.sendall(REQUEST_KEY + bytes.fromhex("10020004 00010001"))
            reply = b""
            while len(reply) < 24:
                chunk = siw.recv(100)
                assert chunk
                reply += chunk
            assert reply[:16] == b"MPA ID Rep Frame"
            # Rev 2, S echoed, C set (we want CRC), no reject; IRD/ORD 1/1
            # (clamped to the Initiator's values, RFC 6581 §9.1).
            assert (
                reply[16] == 0x50
                and reply[17] == 2
                and reply[18:24] == bytes.fromhex("0004 00010001")
            )
        lrc, lines = listener.finish()
    (request,) = by_type(lines, "request")
    assert request["rev"] == 2 and request["ird"] == 1 and request["ord"] == 1
    (est,) = by_type(lines, "established")
    assert est["crc"] is True and est["ird"] == 1 and est["ord"] == 1
    assert lrc == 0


def test_siw_compatible_request_from_connect() -> None:
    """iwarp connect can send what siw accepts: Rev 2, PD <= 256 in total."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            [
                *IWARP,
                "connect",
                "127.0.0.1",
                str(port),
                "--pd-limit",
                "256",
                "--ird",
                "1",
                "--ord",
                "1",
                "--private-data",
                "ab" * 252,
                "--timeout",
                "1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        conn, _ = server.accept()
        with conn:
            data = b""
            while len(data) < 20 + 256:
                chunk = conn.recv(1000)
                assert chunk
                data += chunk
        proc.communicate(timeout=10)
    assert data[:16] == REQUEST_KEY and data[17] == 2 and data[18:20] == b"\x01\x00"
    assert data[20:24] == bytes.fromhex("00010001") and data[24:] == b"\xab" * 252
    assert proc.returncode == 1  # no Reply came: error 1
    rc, out2 = connect(port, "--pd-limit", "256", "--private-data", "ab" * 253)
    assert rc == 1 and "exceeds the limit of 256" in str(out2[-1]["message"])
