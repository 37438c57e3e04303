"""Clean forwarding through ``iwarp proxy``: RDMA Write bandwidth with and
without the proxy in the path.

Run: python bench/proxy_bench.py [--size 64K] [--iters 2000] [--repeat 3] [--markers]
                                 [--decode] [--fault SPEC]...

Starts ``iwarp perf --server`` and ``iwarp proxy --quiet`` in front of it
(each its own process: three processes, as on a real path), then runs
``iwarp perf --op write`` straight to the server and through the proxy in
turn, ``--repeat`` times each (interleaved, so both see the same machine
load), and prints each run's MiB/s, the medians and their ratio, and the
CPU per MiB moved of the proxy process and of the two peers (the server
from ``/proc``, the client from its rusage), direct and proxied: CPU is
steadier than the wall clock on a shared machine. ``--pcap FILE`` has the
proxy record both legs. With ``--quiet`` and no fault
the proxy counts FPDUs and checks their CRCs without a record for each;
``--decode`` makes it build them (its ``--json`` output, thrown away).
For MTU 1500, run it in a network namespace of its own::

    ip netns add pxbench && ip netns exec pxbench ip link set lo mtu 1500 up
    ip netns exec pxbench .venv/bin/python bench/proxy_bench.py
    ip netns del pxbench

Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

IWARP = [sys.executable, "-m", "iwarp"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on port {port}")


def run_perf(port: int, args: argparse.Namespace) -> tuple[float, float]:
    """One ``iwarp perf`` run: its MiB/s and the CPU seconds the client used."""
    command = [*IWARP, "perf", "127.0.0.1", "-p", str(port), "--op", "write"]
    command += ["-s", args.size, "-n", str(args.iters), "--json"]
    if args.markers:
        command.append("--markers")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"iwarp perf failed: {done.stderr or done.stdout}")
    record = json.loads(done.stdout.splitlines()[-1])
    return float(record["average_mib_s"]), client


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU of a running process (Linux ``/proc``), else None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mebibytes(size: str, iters: int) -> float:
    units = {"K": 1 << 10, "M": 1 << 20}
    scale = units.get(size[-1:].upper(), 1)
    digits = size[:-1] if scale > 1 else size
    return int(digits) * scale * iters / (1 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="64K", help="message size (perf's -s)")
    parser.add_argument("--iters", type=int, default=2000, help="messages per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind")
    parser.add_argument("--markers", action="store_true", help="MPA markers on")
    parser.add_argument(
        "--decode", action="store_true", help="the proxy builds every FPDU's record (--json)"
    )
    parser.add_argument("--fault", action="append", default=[], help="a --fault for the proxy")
    parser.add_argument("--pcap", metavar="FILE", help="the proxy records both legs to FILE")
    args = parser.parse_args()
    server_port, proxy_port = free_port(), free_port()
    server = subprocess.Popen(
        [*IWARP, "perf", "--server", "-p", str(server_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    faults = [word for spec in args.fault for word in ("--fault", spec)]
    if args.pcap:
        faults += ["--pcap", args.pcap]
    listen = ["--listen", str(proxy_port), "--to", f"127.0.0.1:{server_port}"]
    proxy = subprocess.Popen(
        [*IWARP, "proxy", "--json" if args.decode else "--quiet", *listen, *faults],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(server_port)
        wait_for(proxy_port)
        direct: list[float] = []
        through: list[float] = []
        #: CPU ms per MiB: the proxy, and (direct, proxied) the client and the server.
        cpu: dict[str, list[float]] = {
            k: [] for k in ("proxy", "client", "server", "client+p", "server+p")
        }
        moved = mebibytes(args.size, args.iters)

        def per_mib(seconds: float | None) -> float:
            return float("nan") if seconds is None else seconds * 1000 / moved

        for i in range(args.repeat):
            s0 = cpu_seconds(server.pid)
            rate, client = run_perf(server_port, args)
            s1 = cpu_seconds(server.pid)
            direct.append(rate)
            cpu["client"].append(per_mib(client))
            cpu["server"].append(per_mib(None if s0 is None or s1 is None else s1 - s0))
            p0 = cpu_seconds(proxy.pid)
            rate, client = run_perf(proxy_port, args)
            p1, s2 = cpu_seconds(proxy.pid), cpu_seconds(server.pid)
            through.append(rate)
            cpu["proxy"].append(per_mib(None if p0 is None or p1 is None else p1 - p0))
            cpu["client+p"].append(per_mib(client))
            cpu["server+p"].append(per_mib(None if s1 is None or s2 is None else s2 - s1))
            print(
                f"run {i + 1}: direct {direct[-1]:9.1f} MiB/s   proxied {through[-1]:9.1f} MiB/s"
                f"   CPU ms/MiB: proxy {cpu['proxy'][-1]:.2f}, client {cpu['client'][-1]:.2f}"
                f" / {cpu['client+p'][-1]:.2f} proxied, server {cpu['server'][-1]:.2f}"
                f" / {cpu['server+p'][-1]:.2f} proxied"
            )
        a, b = statistics.median(direct), statistics.median(through)
        print(f"median: direct {a:.1f} MiB/s, proxied {b:.1f} MiB/s, ratio {b / a:.2f}")
        m = {k: statistics.median(v) for k, v in cpu.items()}
        print(
            f"median CPU ms/MiB of {moved:.0f} MiB: proxy {m['proxy']:.2f}; "
            f"client {m['client']:.2f} direct, {m['client+p']:.2f} proxied; "
            f"server {m['server']:.2f} direct, {m['server+p']:.2f} proxied"
        )
    finally:
        for proc in (proxy, server):
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
