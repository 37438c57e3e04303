"""The ``iwarp`` command line: a thin shell around the protocol cores.

Each subcommand lives in its own module, which defines ``register(sub)``:
it adds its parser to the ``argparse`` subparsers and sets ``func`` (a
callable taking the parsed namespace and returning the exit status).

Only the module of the command being run is imported (``iwarp --help``
and ``iwarp`` alone import none: they list :data:`COMMANDS`), so start-up
stays fast and a Ctrl-C at any moment, during those imports too, ends the
run with status 130 and no traceback.
"""

from __future__ import annotations

import sys

# Not imported from typing: start-up imports as little as it can (a Ctrl-C
# before main() runs is Python's to report). Type checkers read it as true.
TYPE_CHECKING = False

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

#: Subcommand modules, in the order ``iwarp --help`` lists them, with the
#: line it shows for each (the same text as each module's ``help=``; a test
#: keeps the two equal).
COMMANDS: dict[str, str] = {
    "demo": "RDMA over TCP on loopback: Send, RDMA Write, RDMA Read, every byte verified",
    "listen": "accept iWARP connections as MPA Responder and count the messages received",
    "connect": "open an iWARP connection as MPA Initiator and move messages",
    "ping": "rping-compatible RDMA ping-pong (Send, RDMA Read, RDMA Write)",
    "decode": "decode and check MPA/DDP/RDMAP or VI/TCP in capture files",
    "vitcp": "VI/TCP (Internet VI): listen for or open VI connections and move data",
    "interop": "run iwarp against Linux siw and rdma-core tools in a qemu guest",
    "conformance": "test an iWARP implementation against RFC 5044/6581/5041/5040, case by case",
    "proxy": "a man in the middle between two iWARP peers: decode live, inject faults",
    "perf": "bandwidth and latency of RDMA Write/Read/Send/atomics (like perftest)",
}

#: Exit status of a run ended by SIGINT (128 + 2), as shells expect.
INTERRUPTED = 130


def version_text() -> str:
    """``iwarp --version``: the package, the path that runs the per-FPDU
    loops (C accelerator or pure Python), Python and crc32c versions, and the
    event loop the asyncio commands run on."""
    import importlib.metadata
    import platform

    from iwarp import __version__, _accel
    from iwarp.cli._run import describe_loop

    try:
        crc = importlib.metadata.version("crc32c")
    except importlib.metadata.PackageNotFoundError:
        crc = "not installed"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return (
        f"iwarp {__version__}\n"
        f"accelerator: {_accel.describe()}\n"
        f"Python: {python} ({sys.executable})\n"
        f"crc32c: {crc}\n"
        f"event loop: {describe_loop()}"
    )


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``iwarp`` parser with every subcommand (``only=None``), or with
    the full parser of the command ``only`` and a one-line entry for each
    other (nothing else imported: what :func:`main` uses)."""
    import argparse
    import importlib

    class Version(argparse.Action):
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

    parser = argparse.ArgumentParser(
        prog="iwarp",
        description="iWARP (MPA, DDP, RDMAP) and VI/TCP: talk to peers, test them, read captures.",
        epilog="iwarp COMMAND --help explains a command's options.",
    )
    parser.add_argument(
        "--version",
        action=Version,
        nargs=0,
        help="show the version, accelerator state, Python and crc32c versions, and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"iwarp.cli.{name}").register(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help shows text, not reStructuredText: descriptions taken from module
    docstrings lose their ``literal`` markup, in every subcommand."""
    import argparse

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


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not an
    option: ``iwarp`` itself takes only ``--help`` and ``--version``)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` came from, e.g. ``iwarp vitcp
    listen``'s: the one whose usage a user needs to see."""
    import argparse

    while True:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(args, action.dest, None)
                if isinstance(chosen, str) and chosen in action.choices:
                    parser = action.choices[chosen]
                    break
        else:
            return parser


def _dispatch(argv: Sequence[str]) -> int:
    if not argv:
        # The command list, not an error about a missing argument.
        build_parser(only="").print_help()
        return 2
    parser = build_parser(only=_command_in(argv) or "")
    args, unknown = parser.parse_known_args(argv)
    if unknown and getattr(args, "intermixed", False):
        # A command whose positionals may follow its options (``iwarp conformance
        # HOST PORT --strict CASE``): its own parser reads them mixed, and says
        # what it does not know with its usage.
        import argparse

        words = list(argv)
        rest = words[words.index(args.command) + 1 :]
        inner = _innermost(parser, args)
        args = inner.parse_intermixed_args(rest, argparse.Namespace(command=args.command))
        unknown = []
    if unknown:
        # Said by the command's own parser, so its usage shows its options.
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    from iwarp.cli._run import loop_problem

    problem = loop_problem()
    if problem is not None:
        print(f"iwarp: {problem}", file=sys.stderr)
        return 2
    if getattr(args, "pcap", None) is not None:
        from iwarp.cli._capture import open_captures

        # Before anything starts: a --pcap FILE that cannot be written is a usage error.
        problem = open_captures(args, f"iwarp {args.command}")
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    from iwarp.cli._interrupt import early_interrupt

    if early_interrupt() is not None:  # an interrupt the imports swallowed
        return INTERRUPTED
    status: int = args.func(args)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``iwarp`` script; returns the exit status.

    Ctrl-C anywhere (parsing, imports, a command without its own handling)
    ends with :data:`INTERRUPTED` and no traceback; a closed standard
    output (``iwarp decode ... | head``) ends quietly with 0.
    """
    from iwarp.cli._interrupt import catch_early_interrupts

    restore = catch_early_interrupts()
    try:
        return _dispatch(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        return 0
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
