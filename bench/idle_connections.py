"""What idle TCP connections cost an ``iwarp.asyncio.rdma.serve`` listener.

Run: python bench/idle_connections.py [--count 10000] [--timeout 5]
     [--gc-off] [--fd-limit N] [--trim]

The listener runs in this process with ``request_timeout`` (the MPA
startup timeout) of ``--timeout`` seconds; a child process opens
``--count`` TCP connections to it and sends nothing (a flood of idle
connections). The script prints:

* RSS and open descriptors of the listener: at the start, with every
  connection accepted, and after the startup timeouts closed them;
* the memory per connection ((peak - baseline) / count);
* how many connections the listener closed by its startup timeout (the
  child sees EOF or a reset on each), and how many it did not, with the
  time each took from the child's connect to the close (median, max);
* with ``--trim``, RSS after ``gc.collect()`` and then after glibc's
  ``malloc_trim(0)`` (a diagnosis: what the allocators keep, not what
  objects hold).

``--gc-off`` disables the cyclic GC in the listener for the whole run
(memory must then be released by reference counting alone).
``--fd-limit N`` lowers the listener's RLIMIT_NOFILE to N (the child keeps
a high one) to see what the listener does when it runs out of descriptors.

Bounded: ``--count`` connections, each process gives up after
``--timeout`` + 30 seconds. RLIMIT_NOFILE is raised to the hard limit in
both processes (each connection takes a descriptor on each side).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import errno
import gc
import logging
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


# Kept open: readable when descriptors run out.
_status = open("/proc/self/status")  # noqa: SIM115


def rss_kib() -> int:
    _status.seek(0)
    for line in _status.read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_fds() -> int:
    """Open descriptors (0 when none is left to list them with)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def flood(port: int, count: int, limit: float) -> None:
    """The child: ``count`` idle connections; report how many the server
    closed and how long after our connect."""
    raise_fd_limit(count + 64)
    sel = selectors.DefaultSelector()
    opened_at: dict[socket.socket, float] = {}
    failed = 0
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        # Non-blocking: a connection the listener's backlog cannot take yet
        # must not hold up the others (it completes once there is room).
        err = sock.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            failed += 1
            sock.close()
            continue
        sel.register(sock, selectors.EVENT_READ, sock)
        opened_at[sock] = time.monotonic()
    print(f"opened {len(opened_at)} failed {failed}", flush=True)
    lifetimes: list[float] = []
    deadline = time.monotonic() + limit
    while len(lifetimes) < len(opened_at) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1.0):
            sock = key.data
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                lifetimes.append(time.monotonic() - opened_at[sock])
                sel.unregister(sock)
                sock.close()
    lifetimes.sort()
    median = lifetimes[len(lifetimes) // 2] if lifetimes else 0.0
    longest = lifetimes[-1] if lifetimes else 0.0
    print(
        f"closed_by_server {len(lifetimes)} still_open {len(opened_at) - len(lifetimes)}"
        f" (connect to close: median {median:.1f} s, max {longest:.1f} s)",
        flush=True,
    )


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: give free heap memory back to the system."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


async def listener(count: int, timeout: float, gc_off: bool, trim: bool) -> None:
    config = MpaConfig(request_timeout=timeout)
    served = 0

    async def handler(qp: QueuePair) -> None:
        nonlocal served
        served += 1

    gc.collect()
    if gc_off:
        gc.disable()
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
    started = time.perf_counter()
    gc.collect()
    collect_ms = (time.perf_counter() - started) * 1e3
    collected_rss = rss_kib()
    trimmed = f"  after malloc_trim(0) {rss_kib()}" if trim and malloc_trim() else ""
    accepted = peak_fds - base_fds - 1  # the listening socket
    print(f"child: {opened}; {result} ({elapsed:.1f} s after all were opened)")
    print(f"handlers run (startup completed): {served}")
    print(
        f"listener RSS KiB: baseline {base_rss}  peak {peak_rss}  after {after_rss}"
        f"  after gc.collect() {collected_rss}{trimmed}"
    )
    print(f"gc.collect() after they closed took {collect_ms:.1f} ms")
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
    parser.add_argument("--gc-off", action="store_true", help="no cyclic GC in the listener")
    parser.add_argument(
        "--fd-limit", type=int, metavar="N", help="the listener's RLIMIT_NOFILE (to exhaust it)"
    )
    parser.add_argument(
        "--trim", action="store_true", help="also RSS after malloc_trim(0) (diagnosis)"
    )
    parser.add_argument("--flood", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        flood(args.flood, args.count, args.timeout + 30)
        return
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.fd_limit:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.fd_limit, hard))
    else:
        limit = raise_fd_limit(args.count + 64)
        if limit < args.count + 64:
            sys.exit(f"RLIMIT_NOFILE is {limit}: too low for {args.count} connections")
    asyncio.run(listener(args.count, args.timeout, args.gc_off, args.trim))


if __name__ == "__main__":
    main()
