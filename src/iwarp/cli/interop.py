"""iwarp interop: run iwarp against Linux soft-iWARP (siw) in a qemu guest.

iwarp interop build [--force]           build the guest (Debian packages, cached)
iwarp interop siw [--case PATTERN] ...  run the interop suite, print the report
iwarp interop list                      list the cases
iwarp interop guest [--variant V] [CMD] boot the guest, run CMD (or print its info)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from iwarp.cli._args import count, port, size
from iwarp.interop.guest import VARIANTS, GuestBuilder, GuestBuildError, GuestImage, cache_root
from iwarp.interop.perftest import CLIENT_TESTS as PERFTEST_CLIENT_TESTS
from iwarp.interop.perftest import TESTS as PERFTEST_TESTS
from iwarp.mpa.config import MpaConfig


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "interop",
        help="run iwarp against Linux siw and rdma-core tools in a qemu guest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = parser.add_subparsers(dest="interop_command", metavar="ACTION", required=True)

    build = inner.add_parser(
        "build",
        help="build (or reuse) the siw guest",
        description="Build the qemu guest the suite runs in: a Linux kernel with siw and "
        "rdma-core's tools from Debian packages, cached under ~/.cache/iwarp/siw (rebuilt "
        "only when its inputs change, or with --force). See docs/interop.md.",
    )
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build.set_defaults(func=run_build)

    siw = inner.add_parser(
        "siw",
        help="run the interop suite against siw",
        description="Boot the siw guest and run the interop cases (rping, ucmatose, "
        "rdma_client, perftest and iwarp's own commands against siw, both directions), then "
        "print the report: pass, fail or not run, with each case's reason. Exit 0 if nothing "
        "failed, 1 if a case failed, 3 if the guest is not built (said in one line on stderr; "
        "--json and --report still give the report, every case not run).",
    )
    siw.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only cases whose name matches (glob, or substring); repeatable",
    )
    siw.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="only cases on this siw build; repeatable",
    )
    siw.add_argument("--json", action="store_true", help="print the report as JSON")
    siw.add_argument(
        "--report",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="also write the report here (JSON if FILE ends in .json); repeatable",
    )
    siw.add_argument("--build", action="store_true", help="build the guest first if needed")
    siw.add_argument(
        "--workdir", type=Path, help="captures and logs (default: a new folder in the cache)"
    )
    siw.add_argument("--siw-debug", action="store_true", help="siw dynamic debug into dmesg")
    siw.set_defaults(func=run_suite)

    lister = inner.add_parser(
        "list",
        help="list the cases",
        description="List the interop cases (name, siw build, direction, options), "
        "filtered like iwarp interop siw.",
    )
    lister.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only cases whose name matches (glob, or substring); repeatable",
    )
    lister.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="only cases on this siw build; repeatable",
    )
    lister.set_defaults(func=run_list)

    peer = inner.add_parser(
        "peer",
        help="play the iwarp side of an rdma-core example (ucmatose, rdma_client, perftest -R)",
        description="Play iwarp's side of an rdma-core example so the example runs against "
        "iwarp: ucmatose's server or client, rdma_server's echo, or perftest's -R server or "
        "client (perftest-write-bw, ...); prints one JSON summary line.",
    )
    perftest = tuple(f"perftest-{t.replace('_', '-')}" for t in PERFTEST_TESTS)
    perftest += tuple(f"perftest-{t.replace('_', '-')}-client" for t in PERFTEST_CLIENT_TESTS)
    peer.add_argument(
        "peer", choices=("ucmatose-server", "ucmatose-client", "echo-server", *perftest)
    )
    peer.add_argument("--host", default="127.0.0.1", help="address to bind or connect to")
    peer.add_argument(
        "--port", type=port, required=True, help="TCP port to listen on or connect to"
    )
    peer.add_argument("-c", dest="connections", type=count, default=1, help="connections (1)")
    peer.add_argument("-C", dest="count", type=count, default=10, help="messages each way (10)")
    peer.add_argument("-S", dest="size", type=size, default=100, help="message size (100)")
    peer.add_argument("-s", dest="octets", type=size, default=65536, help="perftest -s (65536)")
    peer.add_argument("-n", dest="iterations", type=count, default=1000, help="perftest -n (1000)")
    peer.add_argument("--no-crc", action="store_true", help="do not ask for MPA CRC")
    peer.add_argument(
        "--timeout", type=float, default=60.0, help="give up after this many seconds (60)"
    )
    peer.set_defaults(func=run_peer)

    guest = inner.add_parser(
        "guest",
        help="boot the guest and run a shell command in it",
        description="Boot the siw guest (one siw build: --variant) and run a shell command "
        "in it, printing its output and exiting with its status; without a command, print "
        "the guest's kernel, siw and package versions.",
    )
    guest.add_argument(
        "--variant",
        default="default",
        choices=sorted(VARIANTS),
        help="which siw build to boot (default: default)",
    )
    guest.add_argument(
        "--timeout", type=float, default=120.0, help="seconds the command may run (120)"
    )
    guest.add_argument("script", nargs=argparse.REMAINDER, help="command (default: guest info)")
    guest.set_defaults(func=run_guest)


def _log(text: str) -> None:
    print(f"[interop] {text}", file=sys.stderr, flush=True)


def _image(build: bool) -> GuestImage | None:
    image = GuestImage.load()
    if image is None and build:
        image = GuestBuilder(log=_log).build()
    return image


def run_build(args: argparse.Namespace) -> int:
    try:
        GuestBuilder(log=_log).build(force=args.force)
    except GuestBuildError as exc:
        _log(f"cannot build the guest: {exc}")
        return 2
    return 0


def run_list(args: argparse.Namespace) -> int:
    from iwarp.interop.cases import all_cases
    from iwarp.interop.suite import select

    for case in select(all_cases(), args.case, args.variant):
        print(f"{case.name:40} {case.variant:9} {case.direction}  {case.options}")
    return 0


def run_suite(args: argparse.Namespace) -> int:
    from iwarp.interop.cases import all_cases
    from iwarp.interop.report import Report
    from iwarp.interop.suite import InteropRunner, InteropStatus, Outcome, order_for_boot, select

    cases = select(all_cases(), args.case, args.variant)
    if not cases:
        _log("no case matches")
        return 2
    t0 = time.monotonic()
    try:
        image = _image(args.build)
    except GuestBuildError as exc:
        image = None
        _log(f"cannot build the guest: {exc}")
    if image is None:
        reason = GuestImage.problem() or "the siw guest is not built (run: iwarp interop build)"
        report = Report([Outcome(c, InteropStatus.NOT_RUN, reason) for c in cases])
        # One line, not a table of "not run" (the report still goes where
        # --json or --report asked).
        print(
            f"iwarp interop siw: {reason}; none of {len(cases)} cases run (exit status 3)",
            file=sys.stderr,
        )
        return _finish(report, args, guest_missing=True)
    workdir = args.workdir or cache_root() / "runs" / time.strftime("suite-%Y%m%d-%H%M%S")
    workdir.mkdir(parents=True, exist_ok=True)
    runner = InteropRunner(image, workdir, log=_log, siw_debug=args.siw_debug)
    outcomes: list[Outcome] = []
    by_name = {}
    try:
        for case in order_for_boot(cases):
            outcome = runner.run_case(case)
            by_name[case.name] = outcome
            mark = (
                f"{outcome.status}".upper()
                if outcome.status is not InteropStatus.NOT_RUN
                else "not run"
            )
            time_text = (
                f" {outcome.seconds:.1f}s" if outcome.status is not InteropStatus.NOT_RUN else ""
            )
            _log(f"{mark:7} {case.name}{time_text}: {outcome.reason}")
    finally:
        runner.close()
    outcomes = [by_name[c.name] for c in cases if c.name in by_name]
    report = Report(
        outcomes,
        boots=runner.boots,
        total_seconds=time.monotonic() - t0,
        guest={
            "kernel": image.kver,
            "workdir": str(workdir),
            "rping_sizes": [runner.facts.rping_min_size, runner.facts.rping_max_size],
            "packages": {
                k: v
                for k, v in image.packages.items()
                if k in ("rdma-core", "rdmacm-utils", "perftest", "ibverbs-providers")
            },
        },
    )
    return _finish(report, args)


def _finish(report: Any, args: argparse.Namespace, *, guest_missing: bool = False) -> int:
    if args.json or not guest_missing:
        sys.stdout.write(report.to_json() if args.json else report.to_text())
    for path in args.report:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json() if path.suffix == ".json" else report.to_text())
    if guest_missing:
        return 3
    return 1 if report.failed else 0


def run_guest(args: argparse.Namespace) -> int:
    from iwarp.interop.vm import Guest, GuestError

    image = GuestImage.load()
    if image is None:
        _log(GuestImage.problem() or "the siw guest is not built (run: iwarp interop build)")
        return 3
    script = " ".join(args.script[1:] if args.script[:1] == ["--"] else args.script)
    try:
        with Guest(image, variant=args.variant) as guest:
            _log(f"guest ready in {guest.boot_seconds:.1f} s (siw {args.variant})")
            if not script:
                sys.stdout.write(guest.info())
                return 0
            result = guest.run(script, timeout=args.timeout)
            sys.stdout.write(result.output)
            if result.rc is None:
                _log(f"command did not finish in {args.timeout:.0f} s")
                return 124
            return result.rc
    except GuestError as exc:
        _log(str(exc))
        return 2


def run_peer(args: argparse.Namespace) -> int:
    import json

    from iwarp.cli._run import run_loop
    from iwarp.interop import peers
    from iwarp.mpa.config import MpaConfig

    # Many connections at once: a siw Responder under emulation may answer
    # later than the usual 10 s.
    config = MpaConfig(crc=not args.no_crc, reply_timeout=max(10.0, args.timeout / 2))
    common = {"config": config, "timeout": args.timeout}
    if args.peer.startswith("perftest-"):
        return _run_perftest_peer(args, config)
    if args.peer == "echo-server":
        job = peers.echo_server(args.host, args.port, messages=args.count, **common)
    else:
        play = peers.ucmatose_server if args.peer == "ucmatose-server" else peers.ucmatose_client
        job = play(
            args.host,
            args.port,
            connections=args.connections,
            count=args.count,
            size=args.size,
            **common,
        )
    result = run_loop(job)
    summary = {
        "type": "summary",
        "peer": args.peer,
        "connections": result.connections,
        "sent": result.sent,
        "received": result.received,
        "errors": result.errors[:10],
    }
    print(json.dumps(summary), flush=True)
    return 0 if result.ok else 1


def _run_perftest_peer(args: argparse.Namespace, config: MpaConfig) -> int:
    """``iwarp interop peer perftest-write-bw[-client]``: perftest -R's server or client side."""
    import json

    from iwarp.cli._run import run_loop
    from iwarp.interop.perftest import perftest_client, perftest_server

    name = args.peer.removeprefix("perftest-")
    client = name.endswith("-client")
    test = name.removesuffix("-client").replace("-", "_")
    common = {
        "test": test,
        "size": args.octets,
        "iterations": args.iterations,
        "config": config,
        "timeout": args.timeout,
    }
    bandwidth = None
    if client:
        result, bandwidth = run_loop(perftest_client(args.host, args.port, **common))
    else:
        result = run_loop(perftest_server(args.host, args.port, **common))
    summary: dict[str, Any] = {
        "type": "summary",
        "peer": args.peer,
        "channel_messages": result.channel_messages,
        "key_messages": len(result.keys),
        "data_connections": result.data_connections,
        "data_messages": result.data_messages,
        "errors": result.errors[:10],
    }
    if bandwidth is not None:
        summary["bw_average_mib_s"] = round(bandwidth, 3)
    print(json.dumps(summary), flush=True)
    return 0 if result.ok else 1
