"""What the interop suite reads from iwarp's ``--help`` (it never imports the CLI)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

from iwarp.interop.host import CliOptions, HostCommand, end_process, missing, offered


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tool",
        description="An example in the description:\n  --not-an-option  is ignored\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-p", "--port", type=int, help="a port " * 20)
    parser.add_argument("--very-long-option-name-that-wraps", metavar="VALUE")
    group = parser.add_argument_group("MPA startup")
    group.add_argument("--markers", action="store_true", help="see --elsewhere")
    exclusive = parser.add_mutually_exclusive_group()
    exclusive.add_argument("-s", action="store_true")
    exclusive.add_argument("-c", action="store_true")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("build", help="build it")
    actions.add_parser("peer-run", help="a help text " * 10)
    return parser


def test_offered_lists_every_option_string_and_action() -> None:
    assert offered(_parser().format_help()) == {
        "-h",
        "--help",
        "-p",
        "--port",
        "--very-long-option-name-that-wraps",
        "--markers",
        "-s",
        "-c",
        "build",
        "peer-run",
    }


def test_the_real_cli_through_its_help() -> None:
    commands = CliOptions.load()
    assert commands is not None
    assert {"listen", "connect", "ping", "interop"} <= set(commands)
    assert (
        missing((HostCommand("listen", ("--host", "--port", "--op", "--json")),), commands) is None
    )
    assert missing((HostCommand("interop", ("peer",)),), commands) is None
    assert (
        missing((HostCommand("listen", ("--port", "--no-such-option")),), commands)
        == "'iwarp listen' has no --no-such-option option yet"
    )
    assert missing((HostCommand("no-such-command"),), commands) == (
        "iwarp has no 'no-such-command' command yet"
    )


def test_host_does_not_import_the_cli() -> None:
    code = (
        "import sys, iwarp.interop.suite\n"
        "from iwarp.interop.host import CliOptions\n"
        "options = CliOptions.load()\n"
        "assert options is not None and '--port' in options['listen']\n"
        "print('iwarp.cli' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def _child(code: str) -> subprocess.Popen[bytes]:
    # The child says it is ready only once its signal handling is in place.
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_end_process_signals_first_then_kills() -> None:
    polite = _child("import time; print('ready', flush=True); time.sleep(60)")
    end_process(polite, signal.SIGTERM, grace=30.0)
    assert polite.returncode == -signal.SIGTERM
    deaf = _child(
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    end_process(deaf, signal.SIGINT, grace=0.5)
    assert deaf.returncode == -signal.SIGKILL
    end_process(deaf, grace=0.5)  # already ended: nothing to do
    for proc in (polite, deaf):
        assert proc.stdout is not None
        proc.stdout.close()
