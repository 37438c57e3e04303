"""Running a subcommand's coroutine so that Ctrl-C and SIGTERM end it cleanly.

``iwarp listen`` runs until interrupted by default, so an interrupt is how
most runs end: the command's partial summary (messages, octets, sha256 so
far) is printed and the exit status is 128 + the signal number (130 for
SIGINT, 143 for SIGTERM), as shells expect.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["run_interruptible"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_interruptible(
    main: Coroutine[Any, Any, int], on_signal: Callable[[signal.Signals], None]
) -> int:
    """Run ``main``; on SIGINT or SIGTERM cancel it, call ``on_signal`` (which
    prints the partial summary) and return 128 + the signal number."""
    return asyncio.run(_guarded(main, on_signal))


async def _guarded(
    main: Coroutine[Any, Any, int], on_signal: Callable[[signal.Signals], None]
) -> int:
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
    try:
        status = await task
    except asyncio.CancelledError:
        if not caught:
            raise
        on_signal(caught[0])
        return 128 + int(caught[0])
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return status
