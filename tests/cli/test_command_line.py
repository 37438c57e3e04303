"""The ``iwarp`` command itself, as a user types it: the command list,
usage errors from the command at fault, lazy start-up, Ctrl-C at any moment."""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clitools import IWARP, run_in_process
from iwarp.cli import COMMANDS, INTERRUPTED, build_parser, main

#: A command line of every (sub)command that takes options.
COMMAND_LINES = [
    ["demo"],
    ["listen"],
    ["connect", "127.0.0.1", "1"],
    ["ping", "-c"],
    ["decode", "x.pcap"],
    ["vitcp", "listen"],
    ["vitcp", "connect", "127.0.0.1", "1"],
    ["interop", "list"],
    ["conformance", "127.0.0.1", "1"],
    ["perf", "127.0.0.1"],
]


def run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IWARP, *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_iwarp_alone_lists_the_commands() -> None:
    proc = run()
    assert proc.returncode == 2
    assert proc.stdout.startswith("usage: iwarp")
    for name, summary in COMMANDS.items():
        assert name in proc.stdout
        assert summary.split()[0] in proc.stdout
    assert "iwarp COMMAND --help" in proc.stdout
    assert "error" not in proc.stderr


def test_help_lists_the_same_commands_and_exits_0() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    assert proc.stdout == run().stdout


# In this process (argparse refuses before any command starts): a Python start
# each was most of this test's time.
@pytest.mark.parametrize("argv", COMMAND_LINES, ids=lambda a: " ".join(a[:2]))
def test_an_unknown_option_prints_the_commands_own_usage(argv: list[str]) -> None:
    proc = run_in_process(*argv, "--no-such-option", refused=True)
    assert proc.returncode == 2
    nested = argv[0] in ("vitcp", "interop")  # commands with actions
    name = " ".join(["iwarp", *argv[: 2 if nested else 1]])
    assert proc.stderr.startswith(f"usage: {name} "), proc.stderr
    assert f"{name}: error: unrecognized arguments: --no-such-option" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_each_summary_is_the_commands_own_help() -> None:
    import argparse

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    shown = {choice.dest: choice.help for choice in sub._choices_actions}
    assert shown == COMMANDS


def test_help_and_the_command_list_import_no_command() -> None:
    # iwarp --help answers without importing any subcommand (nor asyncio):
    # what keeps it fast.
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from iwarp.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["--help"])
            except SystemExit:
                pass
            main([])
        loaded = [m for m in sys.modules if m.startswith("iwarp.cli.") or m == "asyncio"]
        print(json.dumps(loaded))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    # Only the Ctrl-C catcher main() installs first (it imports signal alone).
    assert json.loads(proc.stdout) == ["iwarp.cli._interrupt"]


def test_running_a_command_imports_only_that_command() -> None:
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from iwarp.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["listen", "--help"])
            except SystemExit:
                pass
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("iwarp.cli."))))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    commands = [m.rsplit(".", 1)[1] for m in json.loads(proc.stdout)]
    assert "listen" in commands
    assert not set(commands) & (COMMANDS.keys() - {"listen"})


def test_main_runs_again_in_the_same_process(capsys: pytest.CaptureFixture[str]) -> None:
    # (A helper module of the package must not shadow the dispatcher.)
    for _ in range(2):
        assert main(["demo", "--size", "1", "--count", "1", "--json"]) == 0
    assert capsys.readouterr().out.count('"type": "summary"') == 2


def test_ctrl_c_during_the_start_up_imports_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    def interrupted(name: str, package: str | None = None) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", interrupted)
    assert main(["demo"]) == INTERRUPTED


#: Imports the first module named on the command line and, in the middle of
#: importing it, interrupts itself as a Ctrl-C would; then runs iwarp.
_INTERRUPT_DURING_IMPORT = textwrap.dedent(
    """
    import importlib.abc, os, signal, sys
    target = sys.argv[1]

    class Interrupt(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target_=None):
            if name == target:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Interrupt())
    from iwarp.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("iwarp.cli.listen", ["listen"]),
        ("asyncio", ["listen"]),
        ("iwarp.cli.demo", ["demo"]),
        ("iwarp.cli.vitcp", ["vitcp", "listen"]),
        ("iwarp.asyncio.rdma", ["connect", "127.0.0.1", "9"]),
    ],
)
def test_ctrl_c_while_a_command_is_imported_prints_no_traceback(
    module: str, argv: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_DURING_IMPORT, module, *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == INTERRUPTED, proc.stderr
    assert proc.stderr == ""


#: The ``iwarp`` script as pip writes it, saying when main() has started
#: (from inside it, where iwarp handles Ctrl-C): before that is Python's
#: start-up (the interpreter and the import of iwarp.cli, a few milliseconds).
_SCRIPT = textwrap.dedent(
    """
    import sys
    import iwarp.cli

    command_in = iwarp.cli._command_in

    def ready(argv):
        sys.stderr.write("ready\\n")
        sys.stderr.flush()
        return command_in(argv)

    iwarp.cli._command_in = ready
    sys.exit(iwarp.cli.main(sys.argv[1:]))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.1, 0.3, 0.6])
def test_ctrl_c_at_any_moment_of_a_run_prints_no_traceback(delay: float) -> None:
    # From the lazy imports to a running listener: whenever it lands.
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, "listen", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline() == "ready\n"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == INTERRUPTED, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The options of ``parser`` and of every (sub)command under it."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


@pytest.mark.parametrize(
    ("row", "commands"),
    [("demo", ["demo"]), ("listen", ["listen", "connect"]), ("vitcp", ["vitcp"])],
)
def test_the_readme_names_only_options_the_commands_have(row: str, commands: list[str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if line.startswith(f"| `iwarp {row}")]
    named = set(re.findall(r"--[a-z][a-z0-9-]*", line))
    known = set().union(*(_options(build_parser(only=command)) for command in commands))
    assert named and named <= known, named - known
