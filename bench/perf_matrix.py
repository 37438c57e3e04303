"""``iwarp perf --compare-raw`` over a matrix of cases, repeated, as ranges.

Run: python bench/perf_matrix.py [--netns NAME] [--repeat N] [--size 1M] [--iters N]
                                 [--adapter asyncio|sync|both] [--cases a,b,...]

For each repetition and adapter it runs, one after the other (so the
compared runs are interleaved and see the same machine): RDMA Write and
Send of ``--size`` messages with markers off and on, a 64-octet Send/Send
ping-pong, the message rate of 64-octet Sends kept in flight (100 x
``--iters`` of them) and RDMA Read of ``--size`` messages (case 7); each
run measures raw TCP between the same two processes right after the RDMA
test (``--compare-raw``), waiting the same way (the same event loop for
asyncio; busy polling as the queue pairs do for ``iwarp.sync``) with one
send per message. With ``--netns`` both processes run in that
network namespace (e.g. one whose loopback MTU is 1500, see
docs/performance.md). It prints one JSON line per run and then, per case,
the range of the ratio to raw TCP, the RDMA and raw rates, and the CPU per
MiB of each side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

CASES: list[tuple[str, list[str]]] = [
    ("write, markers off", ["--op", "write"]),
    ("write, markers on", ["--op", "write", "--markers"]),
    ("send, markers off", ["--op", "send"]),
    ("send, markers on", ["--op", "send", "--markers"]),
    ("send/send 64 octets latency", ["--op", "send", "--latency", "--size", "64"]),
    ("message rate, 64-octet sends", ["--op", "send", "--size", "64"]),
    ("read, markers off", ["--op", "read"]),
]
#: Messages per run as a multiple of --iters.
SCALE = {"send/send 64 octets latency": 4, "message rate, 64-octet sends": 100}


def iwarp(netns: str | None) -> list[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return [*prefix, sys.executable, "-m", "iwarp", "perf"]


def one(netns: str | None, flags: list[str], size: str, iters: int) -> dict[str, Any]:
    server_flags = [f for f in flags if f in ("--markers", "--sync")]
    server = subprocess.Popen(
        [
            *iwarp(netns),
            "--server",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--count",
            "1",
            *server_flags,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        port = line.split("127.0.0.1:")[1].split()[0]
        sized = flags if "--size" in flags else [*flags, "--size", size]
        count = ["--iters", str(iters)]
        out = subprocess.run(
            [*iwarp(netns), "127.0.0.1", "--port", port, *sized, *count, "--compare-raw", "--json"],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout
        server.wait(timeout=60)
    finally:
        server.kill()
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--netns", help="run both ends in this network namespace")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", default="1M")
    parser.add_argument("--iters", type=int, default=300, help="messages (latency: 4x rounds)")
    parser.add_argument("--adapter", choices=("asyncio", "sync", "both"), default="both")
    parser.add_argument(
        "--cases", help="comma-separated case numbers to run (1-based, default all)"
    )
    args = parser.parse_args()
    if args.repeat < 1 or args.iters < 1:
        parser.error("--repeat and --iters must be positive")
    chosen = CASES
    if args.cases:
        try:
            chosen = [CASES[int(n) - 1] for n in args.cases.split(",")]
        except (ValueError, IndexError):
            parser.error(f"--cases takes numbers 1 to {len(CASES)}")
    adapters = ("asyncio", "sync") if args.adapter == "both" else (args.adapter,)
    runs_of: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for adapter in adapters:
            extra = ["--sync"] if adapter == "sync" else []
            for name, flags in chosen:
                iters = args.iters * SCALE.get(name, 1)
                result = one(args.netns, [*flags, *extra], args.size, iters)
                key = f"{adapter}: {name}"
                print(json.dumps({"case": key, **result}), flush=True)
                runs_of.setdefault(key, []).append(result)
    print(f"\nranges over {args.repeat} runs ({args.netns or 'default namespace'}):")
    for name, runs in runs_of.items():
        ratios = [r["ratio"] for r in runs]
        if "typical_us" in runs[0]:
            added = [r["added_typical_us"] for r in runs]
            medians = [r["typical_us"] for r in runs]
            raws = [r["raw_tcp"]["typical_us"] for r in runs]
            print(
                f"  {name:<38} {min(ratios):.2f}-{max(ratios):.2f}x raw TCP; t_typical "
                f"{min(medians):.1f}-{max(medians):.1f} us, raw TCP "
                f"{min(raws):.1f}-{max(raws):.1f} us, added {min(added):.1f}-{max(added):.1f} us"
            )
            continue
        if "message rate" in name:
            rates = [r["messages_per_s"] for r in runs]
            raw_rates = [r["raw_tcp"]["messages_per_s"] for r in runs]
            print(
                f"  {name:<38} {min(ratios):.2f}-{max(ratios):.2f}x raw TCP; RDMA "
                f"{min(rates):.0f}-{max(rates):.0f} msg/s, raw {min(raw_rates):.0f}-"
                f"{max(raw_rates):.0f} msg/s"
            )
            continue
        cpu = [r["cpu_us_per_mib"] for r in runs]
        raw_cpu = [r["raw_tcp"]["cpu_us_per_mib"] for r in runs]
        rates = [r["average_mib_s"] for r in runs]
        raw_rates = [r["raw_tcp"]["average_mib_s"] for r in runs]
        print(
            f"  {name:<38} {min(ratios):.2f}-{max(ratios):.2f}x raw TCP; "
            f"RDMA {min(rates):.0f}-{max(rates):.0f} MiB/s, raw {min(raw_rates):.0f}-"
            f"{max(raw_rates):.0f} MiB/s; CPU us/MiB client "
            f"{min(c['client'] for c in cpu):.0f}-{max(c['client'] for c in cpu):.0f} "
            f"server {min(c['server'] for c in cpu):.0f}-{max(c['server'] for c in cpu):.0f}; "
            f"raw client {min(c['client'] for c in raw_cpu):.0f}-"
            f"{max(c['client'] for c in raw_cpu):.0f} server "
            f"{min(c['server'] for c in raw_cpu):.0f}-{max(c['server'] for c in raw_cpu):.0f}"
        )


if __name__ == "__main__":
    main()
