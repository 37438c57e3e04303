"""iwarp itself as a conformance target: ``iwarp listen`` and ``iwarp connect`` in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Startup timeouts of the targets, short so that the SHOULD timeout cases are quick.
TARGET_TIMEOUT = "2"


@contextmanager
def _listener(argv: Sequence[str]) -> Iterator[int]:
    """A process that prints ``iwarp listen --json``'s lines; yields its port."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "listening", first
        # Keep reading its report lines so that it never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield int(first["port"])
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def listening(options: Sequence[str]) -> AbstractContextManager[int]:
    """``iwarp listen`` on a free port; yields the port."""
    return _listener([sys.executable, "-m", "iwarp", "listen", "--port", "0", "--json", *options])


@contextmanager
def _connector(argv: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A process that runs ``iwarp connect`` again and again (initiator_loop.py)."""
    env = dict(os.environ)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def connecting(
    port: int, options: Sequence[str]
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """An ``iwarp connect`` that reconnects to ``port`` once per case."""
    return _connector(
        [sys.executable, str(HERE / "initiator_loop.py"), "127.0.0.1", str(port), *options]
    )


def switched_connecting(
    switch: str, port: int, options: Sequence[str]
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``iwarp connect OPTIONS`` to ``port``, once per case, with one switch of
    broken_target.py on."""
    script = [sys.executable, str(HERE / "broken_target.py"), switch]
    return _connector([*script, "connect", "127.0.0.1", str(port), *options])


def switched(switch: str, options: Sequence[str]) -> AbstractContextManager[int]:
    """``iwarp listen OPTIONS`` with one switch of broken_target.py on (a mutant or a
    check-order variant); yields the port."""
    script = [sys.executable, str(HERE / "broken_target.py"), switch]
    return _listener([*script, "listen", "--port", "0", "--json", *options])
