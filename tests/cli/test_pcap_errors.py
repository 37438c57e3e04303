"""``--pcap FILE`` that cannot be written: a usage error before anything
starts when it cannot be opened; a command stopped at once, with one line
naming the file and the error and its summary so far, when a write fails
during the run. Never a hang, never a traceback."""

from __future__ import annotations

import errno
import io
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clitools import IWARP
from iwarp.analyze.pcapng import PcapngWriter
from iwarp.cli import main
from iwarp.cli._capture import CaptureFile, sync_pcap_capture
from iwarp.cli._run import CommandStoppedError

#: Every command that takes --pcap, with what it needs besides.
COMMANDS = [
    ["demo"],
    ["connect", "127.0.0.1", "9"],
    ["listen", "--port", "0"],
    ["perf", "--server", "-p", "0"],
    ["perf", "127.0.0.1", "-p", "9"],
    ["ping", "-s", "-p", "0"],
    ["ping", "-c", "-a", "127.0.0.1", "-p", "9"],
    ["vitcp", "listen", "--port", "0"],
    ["vitcp", "connect", "127.0.0.1", "9"],
    ["proxy", "--listen", "0", "--to", "127.0.0.1:9"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_file_that_cannot_be_opened_is_a_usage_error(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no such directory" / "x.pcapng"
    assert main([*command, "--pcap", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"iwarp {command[0]}: --pcap {missing}: cannot open for writing:")
    assert "ENOENT" in line


def test_a_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--pcap", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "EISDIR" in line


def test_a_full_device_stops_the_command_with_one_line_and_its_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    assert main(["demo", "--count", "2", "--pcap", "/dev/full"]) == 1
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "iwarp demo: --pcap /dev/full: write failed: No space left on device (ENOSPC)"
    ]
    assert out.splitlines()[-1].startswith("summary:")
    assert 'interrupted="capture write failure"' in out


def _file_size_limit(octets: int) -> None:
    # A write past the limit fails with EFBIG (instead of SIGXFSZ killing us).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (octets, resource.RLIM_INFINITY))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and EFBIG as on Linux")
def test_a_write_failing_mid_run_stops_demo_with_what_it_measured(tmp_path: Path) -> None:
    path = tmp_path / "demo.pcapng"
    proc = subprocess.run(
        [*IWARP, "demo", "--size", "64K", "--count", "64", "--json", "--pcap", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        preexec_fn=lambda: _file_size_limit(200_000),
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"iwarp demo: --pcap {path}: write failed: File too large (EFBIG)"
    ]
    assert '"type": "connection"' in proc.stdout  # it had started
    last = proc.stdout.splitlines()[-1]
    assert '"type": "summary"' in last and '"interrupted": "capture write failure"' in last


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and EFBIG as on Linux")
def test_a_write_failing_mid_run_stops_the_blocking_ping_client(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    common = ["-a", "127.0.0.1", "-p", port, "--sync", "-S", "64"]
    server = subprocess.Popen(
        [*IWARP, "ping", "-s", *common, "-d"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline()
        path = tmp_path / "ping.pcapng"
        client = subprocess.run(
            [*IWARP, "ping", "-c", *common, "-C", "1000", "--delay", "0", "--pcap", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            preexec_fn=lambda: _file_size_limit(30_000),
        )
    finally:
        server.kill()
        server.communicate()
    assert client.returncode == 1, client.stderr
    first, summary = client.stderr.splitlines()
    assert first == f"iwarp ping: --pcap {path}: write failed: File too large (EFBIG)"
    assert summary.startswith("iwarp ping: interrupted by capture write failure: ")
    assert "Traceback" not in client.stderr


class _Failing(io.BytesIO):
    """A file whose writes fail after ``room`` octets, as a full disk's do."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: object) -> int:
        size = len(memoryview(data))  # type: ignore[arg-type]
        if self.tell() + size > self.room:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(data)  # type: ignore[arg-type]


def test_the_writer_keeps_a_failure_instead_of_raising_it_into_a_protocol() -> None:
    seen: list[OSError] = []
    writer = PcapngWriter(_Failing(400), on_error=seen.append)
    writer.frame(bytes(60))
    writer.frame(bytes(600))  # fails
    writer.frame(bytes(60))  # not tried again
    writer.close()
    assert writer.frames == 1
    assert [e.errno for e in seen] == [errno.EIO]
    assert writer.error is seen[0]


def test_without_a_handler_the_writer_raises() -> None:
    with pytest.raises(OSError):
        PcapngWriter(_Failing(10))


def test_the_blocking_capture_raises_stopped_naming_the_file(tmp_path: Path) -> None:
    target = CaptureFile(str(tmp_path / "x.pcapng"))
    target.command = "iwarp ping"
    target._out = _Failing(10)
    with pytest.raises(CommandStoppedError) as stopped, sync_pcap_capture(target, initiator=True):
        pass  # the header alone does not fit
    assert stopped.value.line == (
        f"iwarp ping: --pcap {target.path}: write failed: Input/output error (EIO)"
    )


def test_proxy_stops_with_one_line_when_its_capture_cannot_be_written(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    # The first block (the file's header) fails: the proxy stops at once.
    done = subprocess.run(
        [*IWARP, "proxy", "--listen", "0", "--to", "127.0.0.1:9", "--pcap", "/dev/full"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    assert done.stderr.splitlines() == [
        "iwarp proxy: --pcap /dev/full: write failed: No space left on device (ENOSPC)"
    ]
    assert "Traceback" not in done.stdout
