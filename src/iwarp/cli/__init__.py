"""The ``iwarp`` command line: a thin shell around the protocol cores.

Each subcommand lives in its own module, which defines ``register(sub)``:
it adds its parser to the ``argparse`` subparsers and sets ``func`` (a
callable taking the parsed namespace and returning the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import platform
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


def version_text() -> str:
    """``iwarp --version``: the package, the path that runs the per-FPDU
    loops (C accelerator or pure Python), Python and crc32c versions."""
    try:
        crc = importlib.metadata.version("crc32c")
    except importlib.metadata.PackageNotFoundError:
        crc = "not installed"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return (
        f"iwarp {__version__}\n"
        f"accelerator: {_accel.describe()}\n"
        f"Python: {python} ({sys.executable})\n"
        f"crc32c: {crc}"
    )


class _Version(argparse.Action):
    """Prints :func:`version_text` as it is (argparse's own action rewraps it)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iwarp",
        description="iWARP (MPA, DDP, RDMAP) and VI/TCP: talk to peers, test them, read captures.",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="show the version, accelerator state, Python and crc32c versions, and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"iwarp.cli.{name}").register(sub)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help shows text, not reStructuredText: descriptions taken from module
    docstrings lose their ``literal`` markup, in every subcommand."""
    for text_owner in (parser, *parser._actions):
        for attribute in ("description", "epilog", "help"):
            text = getattr(text_owner, attribute, None)
            if isinstance(text, str) and "``" in text:
                setattr(text_owner, attribute, text.replace("``", ""))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if isinstance(choice.help, str):
                    choice.help = choice.help.replace("``", "")
            for child in set(action.choices.values()):
                _plain_help(child)


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
