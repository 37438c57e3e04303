"""What idle TCP connections cost an ``iwarp.asyncio.rdma.serve`` listener.

Run: python bench/idle_connections.py [--count 10000] [--timeout 5]

The listener runs in this process with ``request_timeout`` (the MPA
startup timeout) of ``--timeout`` seconds; a child process opens
``--count`` TCP connections to it and sends nothing (a flood of idle
connections). The script prints:

* RSS and open descriptors of the listener: at the start, with every
  connection accepted, and after the startup timeouts closed them;
* the memory per connection ((peak - baseline) / count);
* how many connections the listener closed by its startup timeout (the
  child sees EOF or a reset on each), and how many it did not.

Bounded: ``--count`` connections, each process gives up after
``--timeout`` + 30 seconds. RLIMIT_NOFILE is raised to the hard limit in
both processes (each connection takes a descriptor on each side).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import selectors
import socket
import subprocess
import sys
import time

from iwarp.asyncio.rdma import QueuePair, serve
from iwarp.mpa.config import MpaConfig


def raise_fd_limit(need: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def flood(port: int, count: int, limit: float) -> None:
    """The child: ``count`` idle connections; report how many the server closed."""
    raise_fd_limit(count + 64)
    sel = selectors.DefaultSelector()
    socks = []
    failed = 0
    for _ in range(count):
        sock = socket.socket()
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            failed += 1
            sock.close()
            continue
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, sock)
        socks.append(sock)
    print(f"opened {len(socks)} failed {failed}", flush=True)
    closed = 0
    deadline = time.monotonic() + limit
    while closed < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1.0):
            sock = key.data
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                sock.close()
                closed += 1
    print(f"closed_by_server {closed} still_open {len(socks) - closed}", flush=True)


async def listener(count: int, timeout: float) -> None:
    config = MpaConfig(request_timeout=timeout)
    served = 0

    async def handler(qp: QueuePair) -> None:
        nonlocal served
        served += 1

    gc.collect()
    base_rss, base_fds = rss_kib(), open_fds()
    server = await serve(handler, "127.0.0.1", 0, config=config, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--flood",
        str(port),
        "--count",
        str(count),
        "--timeout",
        str(timeout),
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    opened = (await child.stdout.readline()).decode().strip()
    peak_rss, peak_fds = rss_kib(), open_fds()
    started = time.monotonic()
    for _ in range(int(timeout * 20)):  # sample while the timeouts are pending
        await asyncio.sleep(0.05)
        peak_rss, peak_fds = max(peak_rss, rss_kib()), max(peak_fds, open_fds())
    result = (await asyncio.wait_for(child.stdout.readline(), timeout + 30)).decode().strip()
    await child.wait()
    elapsed = time.monotonic() - started
    await asyncio.sleep(0.5)
    server.close()
    await server.wait_closed()
    after_rss, after_fds = rss_kib(), open_fds()
    gc.collect()
    collected_rss = rss_kib()
    accepted = peak_fds - base_fds - 1  # the listening socket
    print(f"child: {opened}; {result} ({elapsed:.1f} s after all were opened)")
    print(f"handlers run (startup completed): {served}")
    print(
        f"listener RSS KiB: baseline {base_rss}  peak {peak_rss}  after {after_rss}"
        f"  after gc.collect() {collected_rss}"
    )
    print(
        f"listener fds:     baseline {base_fds}  peak {peak_fds}  after {after_fds}"
        f"  (descriptors per accepted connection: {accepted / count:.2f})"
    )
    print(
        f"memory per idle connection: {(peak_rss - base_rss) * 1024 / count:,.0f} octets"
        f" (RSS growth / {count})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=5.0, help="MPA startup timeout (s)")
    parser.add_argument("--flood", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        flood(args.flood, args.count, args.timeout + 30)
        return
    limit = raise_fd_limit(args.count + 64)
    if limit < args.count + 64:
        sys.exit(f"RLIMIT_NOFILE is {limit}: too low for {args.count} connections")
    asyncio.run(listener(args.count, args.timeout))


if __name__ == "__main__":
    main()
