"""The ``iwarp`` command line: a thin shell around the protocol cores.

Each subcommand lives in its own module, which defines ``register(sub)``:
it adds its parser to the ``argparse`` subparsers and sets ``func`` (a
callable taking the parsed namespace and returning the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from iwarp import __version__, _accel

#: Subcommand modules, in the order ``iwarp --help`` lists them.
COMMANDS: tuple[str, ...] = (
    "demo",
    "listen",
    "connect",
    "ping",
    "decode",
    "vitcp",
    "interop",
    "conformance",
    "perf",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iwarp",
        description="iWARP (MPA, DDP, RDMAP) and VI/TCP: talk to peers, test them, read captures.",
    )
    parser.add_argument(
        "--version", action="version", version=f"iwarp {__version__} ({_accel.describe()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"iwarp.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``iwarp`` script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
