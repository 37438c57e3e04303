"""The host side of a case: ``iwarp`` subcommands as child processes, and what they offer.

The suite drives iwarp through its command line, as users do, so every case
also tests the CLI contract. Before a case runs, :func:`missing` says exactly
which subcommand or option it would need and iwarp does not have (yet).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def cli_commands() -> dict[str, set[str]]:
    """iwarp's subcommands, each with its option strings (from its own parser)."""
    from iwarp.cli import build_parser

    found: dict[str, set[str]] = {}
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = _options(sub)
    return found


def _options(parser: argparse.ArgumentParser) -> set[str]:
    opts = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                opts.update(f"{name} {o}" for o in _options(sub))
                opts.add(name)
    return opts


@dataclass(frozen=True, slots=True)
class Need:
    """An iwarp subcommand a case runs, with the options it passes."""

    command: str
    options: tuple[str, ...] = ()


def missing(needs: tuple[Need, ...], commands: dict[str, set[str]] | None) -> str | None:
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
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
