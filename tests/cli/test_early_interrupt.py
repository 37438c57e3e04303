"""A Ctrl-C that CPython swallowed before a command's own handling was in place.

Python's default SIGINT handler raises KeyboardInterrupt wherever the main
thread is; raised inside a weak-reference callback (the import lock's, during
a lazy import) it is printed as "Exception ignored" and lost, and a listener
that was being started ran on for ever (seen in
tests/cli/test_command_line.py's Ctrl-C-at-any-moment test on the pure path).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

from iwarp.cli._interrupt import catch_early_interrupts, early_interrupt
from iwarp.cli._run import run_blocking_interruptible, run_interruptible


def _swallowed_interrupt() -> None:
    with contextlib.suppress(KeyboardInterrupt):  # as inside a weak-reference callback
        signal.raise_signal(signal.SIGINT)


async def _would_run(seconds: float) -> int:
    await asyncio.sleep(seconds)
    return 0


def test_an_asyncio_command_ends_on_an_interrupt_its_imports_swallowed() -> None:
    restore = catch_early_interrupts()
    stops: list[str] = []
    try:
        _swallowed_interrupt()
        assert early_interrupt() is signal.SIGINT
        status = run_interruptible(_would_run(5.0), stops.append)
    finally:
        restore()
    assert (status, stops) == (130, ["SIGINT"])
    assert early_interrupt() is None  # restore() forgets it


def test_a_blocking_command_ends_on_an_interrupt_its_imports_swallowed() -> None:
    restore = catch_early_interrupts()
    stops: list[str] = []
    ran: list[bool] = []
    try:
        _swallowed_interrupt()

        def command() -> int:
            ran.append(True)
            return 0

        status = run_blocking_interruptible(command, stops.append)
    finally:
        restore()
    assert (status, stops, ran) == (130, ["SIGINT"], [])


def test_without_an_interrupt_a_command_runs() -> None:
    restore = catch_early_interrupts()
    try:
        assert early_interrupt() is None
        assert run_interruptible(_would_run(0.0), lambda reason: None) == 0
    finally:
        restore()
