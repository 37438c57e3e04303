"""``iwarp perf --compare-raw`` over a matrix of cases, repeated, as ranges.

Run: python bench/perf_matrix.py [--netns NAME] [--repeat N] [--size 1M] [--iters N]

For each repetition it runs, one after the other (so the compared runs are
interleaved and see the same machine): RDMA Write and Send of ``--size``
messages with markers off and on, then a 64-octet Send/Send ping-pong; each
run measures raw TCP between the same two processes right after the RDMA
test (``--compare-raw``). With ``--netns`` both processes run in that
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
]


def iwarp(netns: str | None) -> list[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return [*prefix, sys.executable, "-m", "iwarp", "perf"]


def one(netns: str | None, flags: list[str], size: str, iters: int) -> dict[str, Any]:
    server_flags = ["--markers"] if "--markers" in flags else []
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
        count = ["--iters", str(iters * 4 if "--latency" in flags else iters)]
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
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in CASES}
    for _ in range(args.repeat):
        for name, flags in CASES:
            result = one(args.netns, flags, args.size, args.iters)
            print(json.dumps({"case": name, **result}), flush=True)
            results[name].append(result)
    print(f"\nranges over {args.repeat} runs ({args.netns or 'default namespace'}):")
    for name, runs in results.items():
        ratios = [r["ratio"] for r in runs]
        if "typical_us" in runs[0]:
            added = [r["added_typical_us"] for r in runs]
            medians = [r["typical_us"] for r in runs]
            raws = [r["raw_tcp"]["typical_us"] for r in runs]
            print(
                f"  {name:<30} t_typical {min(medians):.1f}-{max(medians):.1f} us, raw TCP "
                f"{min(raws):.1f}-{max(raws):.1f} us, added {min(added):.1f}-{max(added):.1f} us"
            )
            continue
        cpu = [r["cpu_us_per_mib"] for r in runs]
        raw_cpu = [r["raw_tcp"]["cpu_us_per_mib"] for r in runs]
        rates = [r["average_mib_s"] for r in runs]
        raw_rates = [r["raw_tcp"]["average_mib_s"] for r in runs]
        print(
            f"  {name:<30} {min(ratios):.2f}-{max(ratios):.2f}x raw TCP; "
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
