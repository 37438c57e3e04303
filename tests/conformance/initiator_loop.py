"""Run ``iwarp connect ARGS`` again and again in one process: an Initiator target that
reconnects by itself once per conformance case (no process start per case).

Bounded: at most ``ITERATIONS`` connections and ``SECONDS`` of wall time.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time

from iwarp.cli import main

ITERATIONS = 400
SECONDS = 600.0


def run(argv: list[str]) -> None:
    end = time.monotonic() + SECONDS
    for _ in range(ITERATIONS):
        if time.monotonic() > end:
            return
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["connect", *argv])
        time.sleep(0.01)


if __name__ == "__main__":
    run(sys.argv[1:])
