"""``iwarp decode`` on large generated captures: MB/s, peak RSS, tshark's ratio, ``--jobs``.

    python bench/decode_bench.py [--size 200M] [--repeat 3] [--keep DIR]
                                 [--kinds default,marked,ethernet] [--no-tshark]
                                 [--jobs-files 4] [--split KIND|none] [--pure]
                                 [-- DECODE ARGS...]

Makes three captures with ``bench/make_capture.py`` in a temporary directory
(deleted afterwards unless ``--keep``): ``default`` (its usual mix, 16
connections at once), ``marked`` (40 at once, every other connection
with markers both ways, every stream cut anywhere by the MSS) and
``ethernet`` (40 at once, the usual mix at MSS 1460: an MTU 1500 link, where
the cost is per packet). Then runs,
interleaved and ``--repeat`` times, each in a fresh process: ``iwarp
decode`` once per variant (default: the summary with the receiver replay,
the summary with ``--no-receiver``, and ``--json``, every record as JSON),
and tshark with the iWARP dissectors three ways (when it is installed and
not ``--no-tshark``): ``-O iwarp_mpa`` (a line per frame and the MPA
layer's details: the analyzer's detail), ``-T fields`` with the FPDU
fields of ``--json`` (one line per FPDU frame: like for like with
``--json``) and ``-q -Y iwarp_mpa`` (the dissectors without output:
tshark's floor; ``-q`` alone does not run them). For
each it reports wall and CPU seconds, MB/s of capture on both clocks (CPU
time is what the machine's other load changes least), CPU microseconds per
packet and milliseconds per MB, the process's own
peak RSS (``wait4``), FPDUs found against those the generator sent, and
for tshark its FPDUs and "Bad CRC32" verdicts; then, for each ``iwarp
decode`` variant, each tshark's CPU time over iwarp's (how many times
faster iwarp is), and where the summary stands against issue 34's goals
(MB/s of capture per CPU second: 150 on the ``ethernet`` capture, 400 on the
large-FPDU ones; 5x tshark ``-O iwarp_mpa``). ``--pure`` adds the summary
on the pure-Python path (``IWARP_NO_ACCEL=1``: the decode kernels' twin).
With ``--repeat`` above 1 each figure is a range.

Then ``--jobs`` on one capture (``--split``, the ethernet one by default):
``--jobs 1`` against ``--jobs 2``, which splits its connections across two
workers, with the same figures as below. Then ``--jobs`` across files:
``iwarp decode --jobs 1`` and ``--jobs 2`` over ``--jobs-files`` captures
(the ones made, each named more than once), interleaved, each ``--repeat``
times: wall and CPU seconds (the workers' included), CPU time over wall time
(how many cores the run kept busy), the speed-up on the wall clock, and how
idle the machine's CPUs were during each run (``/proc/stat``): a second
worker is only as fast as the core it finds free.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
#: tshark as the project's agreement tests run it (tests/analyze/tshark_fields.py).
TSHARK_ARGS = (
    "-n",
    *("-o", "tcp.try_heuristic_first:TRUE", "-o", "tcp.desegment_tcp_streams:TRUE"),
    *("--disable-heuristic", "rpcrdma_iwarp", "--disable-heuristic", "smb_direct_iwarp"),
)
DECODE = (sys.executable, "-m", "iwarp", "decode", "--progress", "no")
#: The FPDU fields of ``iwarp decode --json`` as tshark names them (one
#: line per frame with an FPDU; several FPDUs' values joined by commas).
TSHARK_FIELDS = (
    *("frame.number", "tcp.stream", "tcp.seq", "iwarp_mpa.ulpdulength", "iwarp_mpa.crc"),
    *("iwarp_mpa.crc_check", "iwarp_mpa.marker_res", "iwarp_mpa.marker_fpduptr"),
    *("iwarp_ddp.tagged_flag", "iwarp_ddp.last_flag", "iwarp_ddp.stag"),
    *("iwarp_ddp.tagged_offset", "iwarp_ddp.qn", "iwarp_ddp.msn", "iwarp_ddp.mo"),
    *("iwarp_rdma.opcode", "_ws.expert.message"),
)
#: tshark's variants: name, extra arguments.
TSHARK_VARIANTS = (
    ("tshark -O iwarp_mpa", ("-O", "iwarp_mpa")),
    (
        "tshark -T fields (FPDU fields)",
        ("-T", "fields", "-Y", "iwarp_mpa", *(a for f in TSHARK_FIELDS for a in ("-e", f))),
    ),
    # -q alone skips the iWARP dissectors; a filter on them makes them run.
    ("tshark -q -Y iwarp_mpa (dissection, no output)", ("-q", "-Y", "iwarp_mpa")),
)
#: Issue 34's goals for the summary, MB/s of capture per CPU second, per capture.
GOAL_MBPS = {"default": 400, "marked": 400, "ethernet": 150}
#: And its speed over tshark -O iwarp_mpa on the same file.
GOAL_RATIO = 5.0
#: The name of the pure-Python variant (--pure).
PURE = "iwarp decode (summary, pure Python: IWARP_NO_ACCEL=1)"
KINDS = {
    "default": {"concurrent": 16, "mix": "default"},
    "marked": {"concurrent": 40, "mix": "marked"},
    "ethernet": {"concurrent": 40, "mix": "ethernet"},
}


@dataclass
class Run:
    """One child process: its clocks, its own peak RSS and two counts from its output."""

    status: int
    wall: float
    cpu: float
    rss_mib: float
    counts: tuple[int, int]
    #: The share of the machine's CPU time that was idle during the run.
    idle: float = 0.0


def measure(
    argv: list[str], count: Callable[[TextIO], tuple[int, int]], env: dict[str, str] | None = None
) -> Run:
    """Run ``argv`` to completion, its output in a file read back line by line
    (this process stays small: a child's peak RSS counts its parent's at the fork)."""
    with tempfile.TemporaryFile("w+") as out:
        idle_before, total_before = cpu_idle()
        started = time.perf_counter()
        child = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=None if env is None else os.environ | env,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        idle_after, total_after = cpu_idle()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        counts = count(out)
    # The child's CPU time includes its own children's (the --jobs workers).
    cpu = usage.ru_utime + usage.ru_stime
    idle = (idle_after - idle_before) / max(1, total_after - total_before)
    return Run(child.returncode, wall, cpu, usage.ru_maxrss / 1024, counts, idle)


def iwarp_counts(lines: TextIO) -> tuple[int, int]:
    """FPDUs and errors from iwarp decode's summary (text or JSON)."""
    fpdus = errors = -1
    for line in lines:
        if line.startswith('{"type": "capture_summary"'):
            summary = json.loads(line)
            fpdus, errors = summary["fpdus"], summary["errors"]
        elif line.startswith("{"):
            continue
        elif found := re.search(r", (\d+) FPDUs \(", line):
            fpdus = int(found.group(1))
        elif line.endswith(" protocol errors\n"):
            errors = int(line.split()[0])
    return fpdus, errors


def tshark_counts(lines: TextIO) -> tuple[int, int]:
    """FPDUs tshark decoded and its "Bad CRC32" verdicts, from -O output or
    from -T fields (a ULPDU_Length per FPDU, the expert messages last)."""
    fpdus = bad = 0
    for line in lines:
        if "\t" in line:
            lengths = line.split("\t")[3]
            fpdus += len(lengths.split(",")) if lengths else 0
            bad += line.count("Bad CRC32")
            continue
        fpdus += "iWARP Marker Protocol data unit Aligned framing" in line
        bad += "Bad CRC32" in line
    return fpdus, bad


def cpu_idle() -> tuple[int, int]:
    """The machine's idle and total CPU ticks so far (/proc/stat), or zeros."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return ticks[3] + ticks[4], sum(ticks)


def make_captures(kinds: list[str], directory: Path, size: str, seed: int) -> dict[str, Any]:
    """The captures, made in a child process (whose memory is not ours); their manifests."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import make_capture as m\n"
        "kinds = json.loads(sys.argv[1])\n"
        "out = {k: m.make_capture(p, m.parse_size(sys.argv[2]), seed=int(sys.argv[3]), **a)\n"
        "       for k, (p, a) in kinds.items()}\n"
        "print(json.dumps(out))\n"
    )
    plan = {
        kind: (str(directory / f"bench-{kind}-{size}-{seed}.pcap"), KINDS[kind]) for kind in kinds
    }
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(plan), size, str(seed)],
        capture_output=True,
        text=True,
        check=True,
    )
    manifests: dict[str, Any] = json.loads(done.stdout)
    for kind, manifest in manifests.items():
        manifest["path"] = plan[kind][0]
    return manifests


@dataclass
class Figures:
    """Every run of one command on one capture."""

    runs: list[Run] = field(default_factory=list)

    def span(self, values: list[float], fmt: str) -> str:
        low, high = min(values), max(values)
        return format(low, fmt) if len(values) == 1 else f"{low:{fmt}}-{high:{fmt}}"

    def line(self, size: int, frames: int = 0) -> str:
        walls = [r.wall for r in self.runs]
        cpus = [r.cpu for r in self.runs]
        # The cost per packet and per MB (CPU): on small frames the analyzer's
        # cost is per packet, on large FPDUs per octet.
        per = (
            f", {self.span([c * 1e6 / frames for c in cpus], '.2f')} us/packet, "
            f"{self.span([c * 1e3 / (size / 1e6) for c in cpus], '.1f')} ms/MB"
            if frames and size
            else ""
        )
        return (
            f"{self.span(cpus, '.2f')} s CPU ({self.span([size / 1e6 / c for c in cpus], '.0f')}"
            f" MB/s{per}), {self.span(walls, '.2f')} s wall "
            f"({self.span([size / 1e6 / w for w in walls], '.0f')} MB/s), peak RSS "
            f"{self.span([r.rss_mib for r in self.runs], '.0f')} MiB"
        )


def goals(kind: str, size: int, summary: Figures, tshark_cpu: list[float] | None) -> str:
    """Where the summary's runs stand against issue 34's goals."""
    rates = [size / 1e6 / r.cpu for r in summary.runs]
    goal = GOAL_MBPS[kind]
    text = (
        f"goals: >= {goal} MB/s (CPU): {summary.span(rates, '.0f')} "
        f"({'met' if min(rates) >= goal else 'not met'})"
    )
    if tshark_cpu:
        ratios = [t / r.cpu for t, r in zip(tshark_cpu, summary.runs, strict=True)]
        text += (
            f"; >= {GOAL_RATIO:.0f}x tshark -O: {summary.span(ratios, '.2f')}x "
            f"({'met' if min(ratios) >= GOAL_RATIO else 'not met'})"
        )
    return text


def jobs_scaling(paths: list[Path], repeat: int) -> None:
    """``iwarp decode --jobs 1`` against ``--jobs 2`` over ``paths``, interleaved
    (one path: its connections split across the workers)."""
    size = sum(p.stat().st_size for p in paths)
    runs: dict[int, Figures] = {1: Figures(), 2: Figures()}
    for _ in range(repeat):
        for jobs, figures in runs.items():
            argv = [*DECODE, "--jobs", str(jobs), *map(str, paths)]
            figures.runs.append(measure(argv, lambda lines: (0, 0)))
    if len(paths) == 1:
        print(
            f"\n--jobs on one capture, split by connection ({paths[0].name}, {size / 1e6:.1f} MB):"
        )
    else:
        print(f"\n--jobs over {len(paths)} captures ({size / 1e6:.1f} MB):")
    for jobs, figures in runs.items():
        idle = [100 * r.idle for r in figures.runs]
        busy = [r.cpu / r.wall for r in figures.runs if r.wall]
        status = sorted({r.status for r in figures.runs})
        print(
            f"  iwarp decode --jobs {jobs}: {figures.line(size)}; CPU time over wall time "
            f"{figures.span(busy, '.2f')} (cores kept busy); the machine's CPUs "
            f"{figures.span(idle, '.0f')} % idle during the runs; exit {status}"
        )
    speedups = [a.wall / b.wall for a, b in zip(runs[1].runs, runs[2].runs, strict=True) if b.wall]
    print(f"  --jobs 2 over --jobs 1 (wall clock): {runs[1].span(speedups, '.2f')}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="200M", help="capture size (K, M, G; default 200M)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (default 1)")
    parser.add_argument(
        "--kinds",
        default="default,marked,ethernet",
        help="captures, of default,marked,ethernet (all three by default)",
    )
    parser.add_argument("--no-tshark", action="store_true", help="do not run tshark")
    parser.add_argument("--keep", metavar="DIR", help="make the captures here and keep them")
    parser.add_argument(
        "--jobs-files",
        type=int,
        default=4,
        metavar="N",
        help="captures for the --jobs 1 / --jobs 2 comparison (0: leave it out; default 4)",
    )
    parser.add_argument(
        "--split",
        default="ethernet",
        metavar="KIND",
        help="the capture whose connections --jobs 2 splits, against --jobs 1 "
        "(one of --kinds; 'none' leaves it out; default ethernet, else the first made)",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="also run the summary on the pure-Python path (IWARP_NO_ACCEL=1)",
    )
    parser.add_argument("decode_args", nargs="*", help="one variant of extra decode arguments")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds or args.repeat < 1 or args.jobs_files < 0:
        parser.error(f"--kinds takes {', '.join(KINDS)}; --repeat at least 1; --jobs-files >= 0")
    tshark = None if args.no_tshark else shutil.which("tshark")
    directory = Path(args.keep or tempfile.mkdtemp(prefix="iwarp-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    variants = [args.decode_args] if args.decode_args else [[], ["--no-receiver"], ["--json"]]
    captures: dict[str, tuple[Path, int, int]] = {}
    frames: dict[str, int] = {}
    try:
        started = time.perf_counter()
        manifests = make_captures(kinds, directory, args.size, args.seed)
        made = time.perf_counter() - started
        for kind, manifest in manifests.items():
            path = Path(manifest["path"])
            size = path.stat().st_size
            sent = sum(manifest["total"]["fpdus"].values())
            captures[kind] = (path, size, sent)
            frames[kind] = manifest["frames"]
            print(
                f"capture {kind}: {size / 1e6:.1f} MB, {manifest['frames']} frames, "
                f"{manifest['connections']} connections, {sent} FPDUs"
            )
        print(f"(made in {made:.1f} s)")
        from iwarp._accel import describe

        print(f"iwarp: {describe()}; tshark: {tshark or 'not installed (no ratio)'}")
        results: dict[tuple[str, str], Figures] = {}
        counts: dict[tuple[str, str], tuple[int, int, int]] = {}
        for _ in range(args.repeat):
            for kind, (path, _size, _sent) in captures.items():
                commands: list[tuple[str, list[str]]] = [
                    (
                        "iwarp decode " + (" ".join(extra) or "(summary, receiver replay on)"),
                        [*DECODE, str(path), *extra],
                    )
                    for extra in variants
                ]
                if args.pure:
                    commands.append((PURE, [*DECODE, str(path)]))
                if tshark is not None:
                    commands += [
                        (name, [tshark, *TSHARK_ARGS, *extra, "-r", str(path)])
                        for name, extra in TSHARK_VARIANTS
                    ]
                for name, argv in commands:
                    counter = tshark_counts if name.startswith("tshark") else iwarp_counts
                    run = measure(argv, counter, {"IWARP_NO_ACCEL": "1"} if name == PURE else None)
                    results.setdefault((kind, name), Figures()).runs.append(run)
                    counts[(kind, name)] = (*run.counts, run.status)
        for kind, (_path, size, sent) in captures.items():
            print(
                f"\n{kind} capture ({size / 1e6:.1f} MB, {frames[kind]} packets, "
                f"{sent} FPDUs sent):"
            )
            tshark_cpu: dict[str, list[float]] = {}
            if tshark is not None:
                tshark_cpu = {
                    name: [r.cpu for r in results[(kind, name)].runs] for name, _ in TSHARK_VARIANTS
                }
            for (k, name), figures in results.items():
                if k != kind:
                    continue
                found, bad, status = counts[(k, name)]
                if name.startswith("tshark"):
                    tail = f"; {found} FPDUs, {bad} 'Bad CRC32'"
                else:
                    tail = (
                        f"; {found} FPDUs ({'as sent' if found == sent else f'SENT {sent}'}), "
                        f"{bad} errors, exit {status}"
                    )
                    speeds = []
                    for tshark_name, cpus in tshark_cpu.items():
                        ratios = [t / r.cpu for t, r in zip(cpus, figures.runs, strict=True)]
                        speeds.append(
                            f"{figures.span(ratios, '.2f')}x {tshark_name.split(' (')[0]}"
                        )
                    if speeds:
                        tail += "; speed (CPU) over " + ", ".join(speeds)
                print(f"  {name}: {figures.line(size, frames[kind])}{tail}")
            summary = results.get((kind, "iwarp decode (summary, receiver replay on)"))
            if summary is not None:
                print("  " + goals(kind, size, summary, tshark_cpu.get(TSHARK_VARIANTS[0][0])))
        split = args.split if args.split in captures else next(iter(captures))
        if args.split != "none":
            jobs_scaling([captures[split][0]], args.repeat)
        if args.jobs_files:
            paths = [captures[kinds[i % len(kinds)]][0] for i in range(args.jobs_files)]
            jobs_scaling(paths, args.repeat)
        print(json.dumps({"os_load": os.getloadavg(), "cpus": os.cpu_count()}))
    finally:
        if not args.keep:
            for path, _, _ in captures.values():
                path.unlink(missing_ok=True)
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
