"""Running ``iwarp listen`` and ``iwarp connect`` as processes in tests."""

from __future__ import annotations

import contextlib
import io
import json
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from iwarp.cli import main
from iwarp.mpa.framing import FpduDecoder
from iwarp.mpa.wire import REQUEST_KEY, FrameFlags

__all__ = [
    "IWARP",
    "Listener",
    "by_type",
    "connect",
    "listen",
    "mpa_peer",
    "read_terminate",
    "run_in_process",
    "send_header",
]

IWARP = [sys.executable, "-m", "iwarp"]


class Listener:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[dict[str, object]] = []
        # A bound for a listener that never starts, not a wait: a loaded
        # machine (CI's two cores) can take more than 10 s to start Python.
        first = self.read_line(60)
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


def run_in_process(*argv: str, refused: bool = False) -> subprocess.CompletedProcess[str]:
    """``iwarp ARGV`` by :func:`iwarp.cli.main` in this process, with what
    ``subprocess.run([*IWARP, *argv], capture_output=True, text=True)`` would
    give: the exit status (argparse's usage errors included) and the text of
    standard output and standard error.

    Starting Python and importing iwarp costs a quarter to half a second of
    CPU a run; a test that reads a command's output needs none of it. Only
    for commands that start no processes (one capture for ``decode``: more
    start ``--jobs`` workers), install no signal handlers and read no
    standard input; a test about the process itself (signals, pipes, the
    environment) runs it with :data:`IWARP`. An exception main lets out
    fails the test with its traceback, as a traceback on stderr would.

    ``refused``: the parser must refuse this command line (a usage error). Were
    it accepted, the command would start here, in the test's process, and
    might serve forever (pytest-timeout's alarm does not stop an event loop,
    which takes the exception for a callback's): instead the first call after
    parsing, ``loop_problem``, fails the test at once."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if refused:
            stack.enter_context(
                mock.patch("iwarp.cli._run.loop_problem", side_effect=_accepted(argv))
            )
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse: a usage error (2), or --help (0)
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                status = 1
    return subprocess.CompletedProcess([*IWARP, *argv], status, out.getvalue(), err.getvalue())


def _accepted(argv: tuple[str, ...]) -> AssertionError:
    return AssertionError(f"iwarp {' '.join(argv)}: accepted, the command would run")


def by_type(lines: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [line for line in lines if line["type"] == kind]


def mpa_peer(port: int) -> socket.socket:
    """A hand-made Initiator: Rev 1 Request with C=1, Reply read."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(REQUEST_KEY + bytes([FrameFlags.CRC, 1, 0, 0]))
    reply = b""
    while len(reply) < 20:
        chunk = sock.recv(20 - len(reply))
        assert chunk
        reply += chunk
    assert reply[:16] == b"MPA ID Rep Frame" and reply[16] & FrameFlags.CRC
    return sock


def read_terminate(sock: socket.socket) -> bytes | None:
    """The Terminate among the ULPDUs the listener sends (CRC on, no
    markers) before it closes, or None."""
    decoder = FpduDecoder(markers=False, crc=True)
    sock.settimeout(10)
    while data := sock.recv(4096):
        for ulpdu in decoder.feed(data):
            if ulpdu[1] & 0x0F == 0x07:  # RDMAP opcode Terminate
                return bytes(ulpdu)
    return None


def send_header(qn: int, msn: int = 1) -> bytes:
    """RFC 5041 §4.3 untagged header, L=1, DV=1; RDMAP Send, version 1."""
    return bytes([0x41, 0x43, 0, 0, 0, 0]) + b"".join(n.to_bytes(4, "big") for n in (qn, msn, 0))
