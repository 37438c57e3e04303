"""Running a subcommand's coroutine so that Ctrl-C and SIGTERM end it cleanly.

``iwarp listen`` runs until interrupted by default, so an interrupt is how
most runs end: the command's partial summary (messages, octets, sha256 so
far) is printed and the exit status is 128 + the signal number (130 for
SIGINT, 143 for SIGTERM), as shells expect.

A command can also be stopped from within by :class:`CommandStoppedError` (its
``--pcap`` file could not be written): one line saying why goes to standard
error, then the same partial summary, and the exit status is 1.

Every asyncio command runs on uvloop's event loop when uvloop is installed
(the optional ``iwarp[uvloop]`` extra): its loop costs less per wake-up, which
small messages feel most. ``IWARP_LOOP=asyncio`` keeps asyncio's own loop;
``iwarp --version`` says which loop the commands use.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

from iwarp.cli._interrupt import early_interrupt

__all__ = [
    "CAPTURE_FAILED",
    "CommandStoppedError",
    "describe_loop",
    "loop_problem",
    "run_blocking_interruptible",
    "run_interruptible",
    "run_loop",
]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


#: The reason a summary names when :class:`CommandStoppedError` ended the command.
CAPTURE_FAILED = "capture write failure"


class CommandStoppedError(Exception):
    """Ends a command before its end for a reason of its own environment (not
    the protocol's, not a signal): ``line`` is printed as it is, then the
    command's partial summary with ``reason``; exit status 1."""

    def __init__(self, line: str, reason: str = CAPTURE_FAILED) -> None:
        super().__init__(line)
        self.line = line
        self.reason = reason


def _stopped(exc: CommandStoppedError, on_stop: Callable[[str], None]) -> int:
    print(exc.line, file=sys.stderr)
    on_stop(exc.reason)
    return 1


#: ``IWARP_LOOP`` values: ``uvloop`` (the default when it is installed) or
#: ``asyncio`` (asyncio's own loop).
LOOP_VARIABLE = "IWARP_LOOP"


#: What ``IWARP_LOOP`` may say (case and spaces aside); unset or empty means uvloop when it
#: is installed.
LOOP_CHOICES = ("uvloop", "asyncio")


def loop_problem() -> str | None:
    """Why ``IWARP_LOOP`` cannot be followed (a sentence for the user), or None."""
    raw = os.environ.get(LOOP_VARIABLE, "")
    choice = raw.strip().lower()
    if not choice:
        return None
    if choice not in LOOP_CHOICES:
        return f"{LOOP_VARIABLE}={raw!r} names no event loop: use uvloop or asyncio (or unset it)"
    if choice == "uvloop" and importlib.util.find_spec("uvloop") is None:
        return (
            f"{LOOP_VARIABLE}=uvloop, but uvloop is not installed: pip install 'iwarp[uvloop]', "
            f"or {LOOP_VARIABLE}=asyncio for asyncio's own loop"
        )
    return None


def _use_uvloop() -> bool:
    choice = os.environ.get(LOOP_VARIABLE, "uvloop").strip().lower()
    return choice != "asyncio" and importlib.util.find_spec("uvloop") is not None


def describe_loop() -> str:
    """One line naming the event loop the asyncio commands run on."""
    problem = loop_problem()
    if problem is not None:
        return f"none, the commands refuse to run: {problem}"
    if _use_uvloop():
        import importlib.metadata

        try:
            version = importlib.metadata.version("uvloop")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - found but unnamed
            version = "?"
        return f"uvloop {version} ({LOOP_VARIABLE}=asyncio for asyncio's own loop)"
    if os.environ.get(LOOP_VARIABLE, "").strip().lower() == "asyncio":
        return f"asyncio's own ({LOOP_VARIABLE}=asyncio)"
    return "asyncio's own (uvloop is not installed: pip install 'iwarp[uvloop]')"


def run_loop(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` to its end on the commands' event loop (uvloop when it is
    installed and not turned off, else asyncio's own) and return its result."""
    if not _use_uvloop():
        return asyncio.run(main)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run_interruptible(main: Coroutine[Any, Any, int], on_stop: Callable[[str], None]) -> int:
    """Run ``main``; on SIGINT or SIGTERM cancel it, call ``on_stop`` with the
    signal's name (it prints the partial summary) and return 128 + the signal
    number; on :class:`CommandStoppedError` print its line, call ``on_stop`` with its
    reason and return 1."""
    try:
        status: int = run_loop(_guarded(main, on_stop))
    except CommandStoppedError as exc:
        return _stopped(exc, on_stop)
    return status


async def _guarded(main: Coroutine[Any, Any, int], on_stop: Callable[[str], None]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    caught: list[signal.Signals] = []

    def interrupt(signum: signal.Signals) -> None:
        if not caught:
            caught.append(signum)
            task.cancel()

    installed = []
    for signum in _SIGNALS:
        try:
            loop.add_signal_handler(signum, interrupt, signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            continue
        installed.append(signum)
    early = early_interrupt()
    if early is not None:  # (one an import swallowed before these were in place)
        interrupt(early)
    try:
        status = await task
    except asyncio.CancelledError:
        if not caught:
            raise
        on_stop(caught[0].name)
        return 128 + int(caught[0])
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return status


class _Interrupted(BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM."""

    def __init__(self, signum: signal.Signals) -> None:
        super().__init__(signum)
        self.signum = signum


def run_blocking_interruptible(main: Callable[[], int], on_stop: Callable[[str], None]) -> int:
    """:func:`run_interruptible` for blocking work (the ``iwarp.sync``
    adapter) in the main thread: the first SIGINT or SIGTERM raises out of
    whatever ``main`` waits in (later ones are ignored while it unwinds);
    then ``on_stop`` prints the partial summary and the result is 128 +
    the signal number; :class:`CommandStoppedError` as there. Elsewhere than the main
    thread ``main`` just runs."""
    caught: list[signal.Signals] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not caught:
            caught.append(signal.Signals(signum))
            raise _Interrupted(caught[0])

    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in _SIGNALS:
            previous[signum] = signal.signal(signum, interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        early = early_interrupt()
        if early is not None:  # (one an import swallowed before these were in place)
            caught.append(early)
            raise _Interrupted(early)
        return main()
    except _Interrupted as exc:
        on_stop(exc.signum.name)
        return 128 + int(exc.signum)
    except CommandStoppedError as exc:
        return _stopped(exc, on_stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
