"""A SIGINT before a command's own handling is in place (see :mod:`iwarp.cli._run`).

Kept apart from ``_run`` so that ``iwarp.cli.main`` installs it before it
imports anything heavy: every command's start pays for this module only.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

__all__ = ["catch_early_interrupts", "early_interrupt"]

#: A SIGINT that arrived before the command's own handling was in place.
#: Python's default handler raises KeyboardInterrupt wherever the main thread
#: is, and CPython swallows an exception raised inside a weak-reference
#: callback ("Exception ignored in: ... _get_module_lock ... cb"): an
#: interrupt during a lazy import could be lost, and the command ran on.
_early: list[signal.Signals] = []


def _early_interrupt(signum: int, frame: FrameType | None) -> None:
    _early.append(signal.Signals(signum))
    raise KeyboardInterrupt


def catch_early_interrupts() -> Callable[[], None]:
    """From here until a command installs its own handling, a SIGINT raises
    KeyboardInterrupt as Python's default does and is also remembered
    (:func:`early_interrupt`), so one an import swallowed still ends the
    command. Returns the function that puts the previous handler back."""
    _early.clear()
    try:
        previous = signal.signal(signal.SIGINT, _early_interrupt)
    except ValueError:  # not the main thread: nothing to catch
        return lambda: None

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)
        _early.clear()

    return restore


def early_interrupt() -> signal.Signals | None:
    """The SIGINT :func:`catch_early_interrupts` saw, if any."""
    return _early[0] if _early else None
