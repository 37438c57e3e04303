"""``iwarp conformance``: test an MPA/DDP/RDMAP implementation against the RFCs, case by case."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iwarp.conformance import all_cases, expected
from iwarp.conformance.model import Result, matches, select
from iwarp.conformance.pace import STARTUP_WAIT, STARTUP_WAIT_MAX, StartupWait
from iwarp.conformance.report import (
    format_case,
    format_result,
    group_header,
    junit,
    list_json,
    summary_line,
    to_json,
    write_html,
    write_text,
)
from iwarp.conformance.runner import (
    DEFAULT_TIMEOUT,
    MPA_MODES,
    InitiatorTarget,
    ResponderTarget,
    Runner,
    ShellLauncher,
    TargetUnavailableError,
)
from iwarp.conformance.terms import TargetRole

__all__ = ["register"]

EPILOG = """\
examples:
  iwarp conformance 127.0.0.1 7471    the target is an MPA Responder (iwarp listen, rping -s)
  iwarp conformance --listen 7472 --peer-cmd 'rping -c -a 127.0.0.1 -p {port} -C 1'
                                      the target is an MPA Initiator, started once per case
  iwarp conformance --list rfc6581    the cases of a spec (rfc5041/7.2: of a section;
                                      rfc5044/7.1.1/1: that case only)
  iwarp conformance --list --json     the catalogue as JSON
  iwarp conformance HOST PORT rfc5041/ --strict --junit report.xml
  iwarp conformance HOST PORT --mpa-mode culley --culley-line 'iwarp culley-02 framing follows'
                                      draft-culley-02 framing (iwarp listen --mpa-mode culley
                                      --op mpa): only the draft-culley/ cases run

Exit status: 0 when no case failed, 1 when one did, 2 for bad usage, an unreachable target
or one that answers a valid MPA Request with no MPA frame within --timeout.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "conformance",
        help="test an iWARP implementation against RFC 5044/6581/5041/5040, case by case",
        description="Run conformance cases against an iWARP target: each case opens a fresh "
        "connection, sends what the case needs (valid or broken on purpose) and checks the "
        "target's answer against the text it quotes (spec, section, short quote). The target is "
        "an MPA Responder (HOST PORT: the tool connects) or an MPA Initiator (--listen PORT: the "
        "tool listens and runs --peer-cmd once per case). Cases that need cooperation the target "
        "does not offer (an advertised buffer, a posted receive) are skipped with the reason.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        nargs="*",
        metavar="HOST PORT | PREFIX",
        help="the Responder to connect to, then the cases: an exact id (rfc5044/7.1.1/1), a "
        "spec or section (rfc6581, rfc5041/7.2) or a prefix ending in /; with --listen or "
        "--list only the cases. Cases may come before or after the options",
    )
    parser.add_argument(
        "--listen",
        type=int,
        metavar="PORT",
        help="play the Responder: listen on PORT for the target's connections",
    )
    parser.add_argument(
        "--listen-host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on with --listen (default 127.0.0.1)",
    )
    parser.add_argument(
        "--peer-cmd",
        metavar="CMD",
        help="shell command that makes the target connect once, run per case; "
        "{port} is replaced by the listening port. Without it the target must "
        "connect by itself once per case",
    )
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument(
        "--mpa-mode",
        choices=MPA_MODES,
        default="rfc",
        help="rfc: the target starts with an MPA Request/Reply (default); culley: "
        "draft-culley-iwarp-mpa-02, no frames, markers and CRC from the first octet (only the "
        "draft-culley/ cases run, the others skip)",
    )
    parser.add_argument(
        "--culley-line",
        default="",
        metavar="TEXT",
        help="with --mpa-mode culley: a streaming line (TEXT and a newline) each side sends "
        "before it frames, as iwarp listen --mpa-mode culley wants ('iwarp culley-02 framing "
        "follows'); without it both sides frame at once after the TCP connection",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PREFIX",
        help="leave out the cases under PREFIX (repeatable), e.g. one that kills the target",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also run the SHOULD cases (timeouts, header copies, markers)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds per case (default {DEFAULT_TIMEOUT:g}; the cases that wait for the "
        "target's own startup timer wait --startup-wait instead)",
    )
    parser.add_argument(
        "--startup-wait",
        type=float,
        metavar="SECONDS",
        help="how long the --strict cases on the target's own MPA startup timer "
        "(rfc5044/7.1.2/8-12: no Request, half a frame...) wait for its close, from the "
        f"start of their connection. Default {STARTUP_WAIT:g}: a target that has not "
        "closed by then is neither passed nor failed, the case is skipped (the RFCs give "
        "the timer no value). Given, the wait is a verdict: a close that did not come "
        f"fails the case. At most {STARTUP_WAIT_MAX:g}; e.g. 75 for Chelsio's cxgb4, "
        "whose timer is 60 s",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON report at the end (with --list: the selected cases as JSON)",
    )
    parser.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    parser.add_argument(
        "--html",
        type=Path,
        metavar="DIR",
        help="write an HTML report to DIR: index.html (every case, its verdict and time, by "
        "section) and one page per case (its quote, verdict, timings and wire log decoded)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="write this run's statuses as an expected-results record (JSON) "
        "that a later run can be compared with (see --expect)",
    )
    parser.add_argument(
        "--expect",
        type=Path,
        metavar="FILE",
        help="compare with a record written by --record: exit 1 when any "
        "case's status differs (instead of when any case fails)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run N cases at once against a Responder target, each on its own connection "
        "(default 1: a target that serves one connection at a time, such as a loop of "
        "single-shot servers, needs it); an Initiator target always runs one at a time. "
        "The --strict cases that only wait for a Responder's startup timer (no Request "
        "completes on their connections) start first and run beside the others at any N",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="run even the startup-timer cases in turn with the others, so that the target "
        "never has more than one of the tool's connections in MPA startup, for a target whose "
        "MPA code serves one connection at a time until its startup ends; their waits "
        "(--startup-wait) then add up",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long after a Responder target's MPA Reply before sending (default 0): "
        "for targets that install their FPDU receive path only after sending the Reply, such "
        "as Linux siw 6.1, where FPDUs arriving in between sit unread and a case meets silence",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the tool's own free values (the sink STag and TO of its Read Requests, "
        "the private data it sends, RFC 7306 Request Identifiers, MSNs where the RFCs leave "
        "them free): drawn per run and printed in the report, so that a target's constants "
        "cannot match the tool's by habit; --seed N replays a run octet for octet",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show what was seen for passing cases too"
    )
    # Cases may follow the options too (iwarp conformance HOST PORT --strict CASE).
    parser.set_defaults(func=run, intermixed=True)


def _fail(message: str) -> int:
    print(f"iwarp conformance: error: {message}", file=sys.stderr)
    return 2


def _timer_note(wait: StartupWait) -> str:
    """The header's word on the startup-timer cases' wait."""
    if wait.chosen:
        return f"a startup timer must close within {wait.seconds:g} s (--startup-wait)"
    return (
        f"a startup timer is judged when it closes within {wait.seconds:g} s "
        "(--startup-wait S waits longer)"
    )


def run(args: argparse.Namespace) -> int:
    words: list[str] = list(args.target)
    role: TargetRole | None = None
    target: ResponderTarget | InitiatorTarget | None = None
    if args.listen is not None:
        role = TargetRole.INITIATOR
        launch = ShellLauncher(args.peer_cmd) if args.peer_cmd else None
        target = InitiatorTarget(args.listen, host=args.listen_host, command=args.peer_cmd or "")
        if launch is not None:
            target.launch = launch
    elif not args.list:
        if len(words) < 2 or not words[1].isdigit():
            return _fail("give HOST PORT of an MPA Responder, or --listen PORT")
        target = ResponderTarget(words[0], int(words[1]))
        role = TargetRole.RESPONDER
        words = words[2:]
    elif args.peer_cmd:
        return _fail("--peer-cmd needs --listen")
    if args.timeout <= 0:
        return _fail("--timeout must be positive")
    if args.culley_line and args.mpa_mode != "culley":
        return _fail("--culley-line needs --mpa-mode culley")
    if args.culley_line and ("\n" in args.culley_line or len(args.culley_line) > 1000):
        return _fail("--culley-line is one line of at most 1000 characters")
    if not 1 <= args.jobs <= 64:
        return _fail("--jobs must be between 1 and 64")
    if args.seed is not None and not 0 <= args.seed < 1 << 64:
        return _fail("--seed must be between 0 and 2^64-1")
    if not 0 <= args.settle <= 10:
        return _fail("--settle must be between 0 and 10 seconds")
    startup_wait = StartupWait()
    if args.startup_wait is not None:
        try:
            startup_wait = StartupWait(args.startup_wait, chosen=True)
        except ValueError as exc:  # 0, negative, NaN, inf, over the limit
            return _fail(f"--startup-wait: {exc}")
    catalogue = all_cases()
    if args.mpa_mode == "culley" and not words:
        words = ["draft-culley/"]  # the RFC cases would only skip
    unknown = [w for w in [*words, *args.exclude] if not any(matches(c.id, w) for c in catalogue)]
    if unknown:
        return _fail(
            f"no case matches {' '.join(unknown)} (an exact id, a spec or section such as "
            "rfc5041/7.2, or a prefix ending in /)"
        )
    cases = select(catalogue, words, strict=args.strict, role=role)
    cases = [c for c in cases if not any(matches(c.id, p) for p in args.exclude)]
    if not cases:
        return _fail(
            f"no case matches {' '.join(words) or 'the selection'}"
            + ("" if args.strict else " (SHOULD cases need --strict)")
        )
    if args.startup_wait is not None and not any(c.timer for c in cases):
        return _fail(
            "--startup-wait: none of the selected cases waits for the target's startup timer "
            "(rfc5044/7.1.2/8-12 are SHOULD cases: they run with --strict)"
        )
    if args.list:
        if args.json:
            print(list_json(cases))
            return 0
        previous = None
        for item in cases:
            if (head := group_header(item, previous)) is not None:
                print(head)
            print(format_case(item))
            previous = item
        print(f"{len(cases)} cases")
        return 0
    assert target is not None
    want: dict[str, dict[str, str]] = {}
    if args.expect is not None:
        try:
            want = json.loads(args.expect.read_text())["cases"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return _fail(f"cannot read the record {args.expect}: {exc}")
    colour = sys.stdout.isatty() and not args.json
    results: list[Result] = []

    def show(result: Result) -> None:
        previous = results[-1].case if results else None
        results.append(result)
        if not args.json:
            if (head := group_header(result.case, previous)) is not None:
                print(head, flush=True)
            print(format_result(result, colour=colour, verbose=args.verbose), flush=True)

    culley_line = (args.culley_line + "\n").encode() if args.culley_line else b""
    runner = Runner(
        target,
        timeout=args.timeout,
        on_result=show,
        mpa_mode=args.mpa_mode,
        culley_line=culley_line,
        settle=args.settle,
        seed=args.seed,
        startup_wait=startup_wait,
    )
    try:
        # A target that is no MPA Responder at all ends the run here, in one line.
        runner.probe()
        if not args.json:
            print(
                f"target: {target.describe()}; {len(cases)} cases; seed {runner.seed} "
                f"(--seed {runner.seed} replays the tool's values)"
                + (f"; {_timer_note(startup_wait)}" if any(c.timer for c in cases) else ""),
                flush=True,
            )
        runner.run(cases, jobs=args.jobs, overlap_idle=not args.one_at_a_time)
    except TargetUnavailableError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        runner.close()
        print(f"interrupted after {len(results)} cases: {summary_line(results)}", file=sys.stderr)
        return 130
    if args.json:
        print(to_json(results, target.describe(), runner.seed))
    else:
        if runner.probe_note:
            print(f"start-up: {runner.probe_note}")
        write_text(results, sys.stdout, colour=colour)
    rows = [r.as_dict() for r in results]
    try:
        if args.junit is not None:
            args.junit.write_bytes(junit(results, target.describe()))
        if args.html is not None:
            write_html(results, target.describe(), args.html)
        if args.record is not None:
            args.record.write_text(expected.record(rows, target.describe()))
    except OSError as exc:
        return _fail(f"cannot write a report: {exc.strerror or exc}")
    if args.expect is not None:
        diff = expected.compare(want, rows)
        for line in diff:
            print(f"differs from {args.expect}: {line}", file=sys.stderr)
        return 1 if diff else 0
    return 1 if any(r.status == "failed" for r in results) else 0
