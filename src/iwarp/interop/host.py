"""The host side of a case: ``iwarp`` subcommands as child processes, and what they offer.

The suite drives iwarp through its command line, as users do, so every case
also tests the CLI contract. Before a case runs, :func:`missing` says exactly
which subcommand or option it would need and iwarp does not have (yet); what
iwarp has is read from its ``--help`` (:class:`CliOptions`), so this module
never imports the CLI (which imports the interop package).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: An option's invocation in ``--help``: two spaces, then its option strings
#: (``-p PORT, --port PORT``) up to the gap before the help text.
_OPTION_LINE: Final = re.compile(r"^  (-[^ ].*?)(?: {2,}|$)")
#: A sub-action under a subcommand's ACTION (``    listen     help...``).
_ACTION_LINE: Final = re.compile(r"^    ([a-z][\w-]*)(?: {2,}|$)")
#: The titles argparse gives its first section (``optional arguments`` before 3.10).
_FIRST_SECTIONS: Final = frozenset({"positional arguments:", "options:", "optional arguments:"})
#: How long ``iwarp ... --help`` may take (it only imports the package).
_HELP_TIMEOUT: Final = 60.0


def offered(help_text: str) -> set[str]:
    """The option strings and sub-actions an argparse ``--help`` text lists.

    Only the sections after the usage and description are read (argparse
    starts them with ``positional arguments:`` or ``options:``), so examples
    in a description never count.
    """
    found: set[str] = set()
    in_sections = False
    for line in help_text.splitlines():
        if line in _FIRST_SECTIONS:
            in_sections = True
            continue
        if not in_sections:
            continue
        if option := _OPTION_LINE.match(line):
            found.update(part.split(" ")[0] for part in option[1].split(", "))
        elif action := _ACTION_LINE.match(line):
            found.add(action[1])
    return found


def cli_help(command: str = "") -> str | None:
    """What ``iwarp COMMAND --help`` prints, or None if it fails (no such command)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "iwarp", *command.split(), "--help"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            text=True,
            timeout=_HELP_TIMEOUT,
            env=dict(os.environ, COLUMNS="200"),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


class CliOptions(Mapping[str, frozenset[str]]):
    """iwarp's subcommands and the options each offers, read from ``--help``
    as a user would (one child process per subcommand asked about, cached).

    ``commands["listen"]`` holds ``--port``, ``--op``...; a command with
    sub-actions also holds their names (``"peer"`` in ``commands["interop"]``).
    """

    def __init__(self, commands: frozenset[str]) -> None:
        self._commands = commands
        self._options: dict[str, frozenset[str]] = {}

    @classmethod
    def load(cls) -> CliOptions | None:
        """The CLI's commands, or None when ``iwarp --help`` fails."""
        text = cli_help()
        return None if text is None else cls(frozenset(offered(text)))

    def __getitem__(self, command: str) -> frozenset[str]:
        if command not in self._commands:
            raise KeyError(command)
        if command not in self._options:
            text = cli_help(command)
            self._options[command] = frozenset(offered(text or ""))
        return self._options[command]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._commands))

    def __len__(self) -> int:
        return len(self._commands)


@dataclass(frozen=True, slots=True)
class HostCommand:
    """An iwarp subcommand a case runs, with the options it passes."""

    command: str
    options: tuple[str, ...] = ()


def missing(
    needs: tuple[HostCommand, ...], commands: Mapping[str, AbstractSet[str]] | None
) -> str | None:
    """Why ``needs`` cannot be met (a precise sentence), or None when they can."""
    if commands is None:
        return "the iwarp CLI does not load"
    for need in needs:
        if need.command not in commands:
            return f"iwarp has no '{need.command}' command yet"
        absent = [o for o in need.options if o not in commands[need.command]]
        if absent:
            return f"'iwarp {need.command}' has no {', '.join(absent)} option yet"
    return None


def end_process(
    proc: subprocess.Popen[Any], sig: signal.Signals = signal.SIGTERM, *, grace: float
) -> None:
    """Stop a child we started: ``sig`` (so it can finish its output), then
    SIGKILL if it has not ended after ``grace`` seconds. Reaps it either way."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def port_listening(port: int) -> bool:
    """Whether some TCP socket listens on ``port`` on this host (IPv4 or IPv6)."""
    suffix = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(suffix) and fields[3] == "0A":
                return True
    return False


@dataclass(frozen=True, slots=True)
class ProcResult:
    """How an iwarp child process ended; ``rc`` is None when it was stopped by us."""

    rc: int | None
    output: str
    seconds: float
    timed_out: bool = False

    def json_lines(self) -> list[dict[str, Any]]:
        """The JSON objects the process printed, one per line; other lines are skipped."""
        objs = []
        for raw in self.output.splitlines():
            line = raw.strip()
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    objs.append(value)
        return objs


class IwarpProcess:
    """``python -m iwarp ARGS`` with output in ``log``; only this process is ever signalled."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self._t0 = time.monotonic()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with log.open("wb") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "iwarp", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    @property
    def command(self) -> str:
        return "iwarp " + " ".join(self.args)

    def running(self) -> bool:
        return self._proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait(self, timeout: float) -> ProcResult:
        """Wait up to ``timeout``; then interrupt it (SIGINT, then SIGKILL)."""
        timed_out = False
        try:
            self._proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop()
        rc = self._proc.returncode
        return ProcResult(
            None if timed_out else rc, self.output(), time.monotonic() - self._t0, timed_out
        )

    def stop(self) -> None:
        end_process(self._proc, signal.SIGINT, grace=3.0)
