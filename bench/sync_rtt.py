"""Round trip of a 64-octet Send/Send on iwarp.sync next to raw TCP that waits the same way.

Run: python bench/sync_rtt.py [--rounds N] [--repeat R] [--size 64] [--no-crc] [--block B]

A server process (spawned, so the two ends never share a GIL) echoes on
four connections, two per waiting style, like next to like:

* **busy poll**: a sync queue pair as the library waits by default
  (busy polling ``BUSY_POLL``, then ``poll``), and a raw TCP socket that
  waits the same way (non-blocking, one ``recv`` per look, ``sched_yield``
  between looks, then ``poll``: ``iwarp perf --sync``'s raw socket);
* **sleep**: a sync queue pair with ``busy_poll = 0`` (each wait sleeps in
  ``poll`` at once), and a blocking raw TCP socket sleeping in ``recv``.

The client times ``--block`` round trips on each in turn until it has
``--rounds`` of each (interleaved, so all see the same machine load) and
prints, per style, t_min, median, average, stdev, p99, p99.9 and max of
raw TCP and of iwarp.sync, what iWARP adds to raw TCP's median and the
ratio. ``--repeat`` runs that several times to show the spread. Numbers
only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection

import iwarp.sync as rdma
from iwarp.cli._perf import latency_stats
from iwarp.cli._perf_sync import RawSocket
from iwarp.mpa.config import MpaConfig, Role
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdmap.memory import ProtectionDomain
from iwarp.rdmap.work import SendWR
from iwarp.sync._driver import BUSY_POLL


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed")
        got += n


def _tcp_echo(conn: socket.socket, size: int, busy_poll: float) -> None:
    raw = RawSocket(conn, busy_poll)
    view = memoryview(bytearray(size))
    try:
        while True:
            raw.recv_exactly(view)
            raw.sendall(view)
    except ConnectionError:
        return
    finally:
        raw.close()


def _qp_echo(qp: rdma.QueuePair, cpu: list[float]) -> None:
    """Echo until the client closes; ``cpu``: this thread's CPU seconds per
    echo after the first 100 (the client's warm-up)."""
    rounds = 0
    start = 0.0
    with qp:
        try:
            while True:
                if rounds == 100:
                    start = time.thread_time()
                qp.send(qp.receive())
                rounds += 1
        except rdma.ConnectionTerminatedError:
            pass
    if rounds > 100:
        cpu.append((time.thread_time() - start) / (rounds - 100))


#: The waiting styles, each measured on raw TCP and on iwarp.sync: busy
#: polling as the library does by default, and sleeping in poll (or recv) at
#: once (``busy_poll = 0``).
MODES = (("busy poll", BUSY_POLL), ("sleep", 0.0))


def server(pipe: Connection, size: int, crc: bool) -> None:
    tcp = socket.create_server(("127.0.0.1", 0))
    qp_listener = rdma.listen(
        "127.0.0.1", 0, config=MpaConfig(crc=crc), receive_buffers=4, receive_size=size
    )
    pipe.send((tcp.getsockname()[1], qp_listener.port))
    # One blocking echo per connection; the client drives one at a time.
    cpu: list[list[float]] = [[] for _ in MODES]
    threads = []
    for _, busy_poll in MODES:  # accepted in the order the client connects
        conn, _ = tcp.accept()
        threads.append(threading.Thread(target=_tcp_echo, args=(conn, size, busy_poll)))
        threads[-1].start()
    for (_, busy_poll), seconds in zip(MODES, cpu, strict=True):
        qp = qp_listener.accept(timeout=30)
        qp.busy_poll = busy_poll
        threads.append(threading.Thread(target=_qp_echo, args=(qp, seconds)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    pipe.send([c[0] if c else float("nan") for c in cpu])


def measure(
    rounds: int, size: int, crc: bool, block: int
) -> tuple[list[list[float]], list[list[float]], list[float], list[float]]:
    """Round-trip times of raw TCP and of iwarp.sync in each of :data:`MODES`,
    in alternating blocks of ``block`` rounds (the same machine load for
    all, and a busy-polling echo's last spin never overlaps another
    connection's rounds by more than one), and the CPU time per round trip
    of the client and of the server's echo thread of iwarp.sync in each mode."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=server, args=(child, size, crc), daemon=True)
    proc.start()
    tcp_port, qp_port = parent.recv()
    # connected one after the other: the server accepts them in this order
    raws = [
        RawSocket(socket.create_connection(("127.0.0.1", tcp_port)), busy_poll)
        for _, busy_poll in MODES
    ]
    payload = os.urandom(size)
    back = bytearray(size)
    view = memoryview(back)
    tcp_times: list[list[float]] = [[] for _ in MODES]
    qp_times: list[list[float]] = [[] for _ in MODES]
    qp_cpu = [0.0 for _ in MODES]
    clock = time.perf_counter
    cpu_clock = time.thread_time
    qps = []
    for _, busy_poll in MODES:
        qp = rdma.connect(
            "127.0.0.1", qp_port, config=MpaConfig(crc=crc), receive_buffers=4, receive_size=size
        )
        qp.busy_poll = busy_poll
        qps.append(qp)
    warm = 100  # the first rounds of each connection warm up
    done = 0
    while done < rounds + warm:
        n = min(block, rounds + warm - done)
        for m, (raw, qp) in enumerate(zip(raws, qps, strict=True)):
            for _ in range(n):
                t0 = clock()
                raw.sendall(payload)
                raw.recv_exactly(view)
                if done >= warm:
                    tcp_times[m].append(clock() - t0)
                if back != payload:
                    raise AssertionError("echo mismatch")
            c0 = cpu_clock()
            for _ in range(n):
                t1 = clock()
                qp.send(payload)
                reply = qp.receive()
                if done >= warm:
                    qp_times[m].append(clock() - t1)
                if reply != payload:
                    raise AssertionError("echo mismatch")
            if done >= warm:
                qp_cpu[m] += cpu_clock() - c0
        done += n
    for qp in qps:
        qp.close()
    for raw in raws:
        raw.close()
    server_cpu = parent.recv() if parent.poll(30) else [float("nan")] * len(MODES)
    proc.join(30)
    return tcp_times, qp_times, [c / rounds for c in qp_cpu], server_cpu


def cpu_cost(rounds: int, size: int, crc: bool) -> tuple[float, float]:
    """Median time of one round trip with both ends in this thread (no
    scheduling between processes): what the code and the syscalls cost, raw
    TCP and iwarp.sync."""
    config = MpaConfig(crc=crc)
    with rdma.listen("127.0.0.1", 0, config=config, receive_buffers=4, receive_size=size) as lst:
        accepted: list[rdma.QueuePair] = []
        thread = threading.Thread(target=lambda: accepted.append(lst.accept(timeout=30)))
        thread.start()  # only to accept; both ends then run in this thread
        a = rdma.connect(
            "127.0.0.1", lst.port, config=config, receive_buffers=4, receive_size=size, timeout=30
        )
        thread.join(30)
    b = accepted[0]
    with socket.create_server(("127.0.0.1", 0)) as tcp:
        s1 = socket.create_connection(tcp.getsockname())
        s2, _ = tcp.accept()
    for sock in (s1, s2):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = os.urandom(size)
    view = memoryview(bytearray(size))
    raw: list[float] = []
    qp: list[float] = []
    clock = time.perf_counter
    for i in range(rounds + 100):
        t0 = clock()
        s1.sendall(payload)
        _recv_exactly(s2, view)
        s2.sendall(view)
        _recv_exactly(s1, view)
        t1 = clock()
        a.send(payload)
        b.send(b.receive())
        a.receive()
        t2 = clock()
        if i >= 100:
            raw.append(t1 - t0)
            qp.append(t2 - t1)
    a.close()
    b.close()
    s1.close()
    s2.close()
    return statistics.median(raw) * 1e6, statistics.median(qp) * 1e6


def core_cost(rounds: int, size: int, crc: bool, posted: bool = False) -> float:
    """Median time of one Send each way through two sans-IO queue-pair
    endpoints wired together in memory (no sockets): the same calls the
    sync queue pair makes, without I/O; the protocol's share of a round trip.
    ``posted``: each Send a posted ``SendWR`` (verbs' ``post_send``), not
    the simple ``send``'s ``send_now``."""
    config = MpaConfig(crc=crc)
    a = QueuePairEndpoint(
        Role.INITIATOR, ProtectionDomain(), config, receive_buffers=4, receive_size=size
    )
    b = QueuePairEndpoint(
        Role.RESPONDER, ProtectionDomain(), config, receive_buffers=4, receive_size=size
    )
    b.receive_data(b"".join(a.data_to_send()), 0.0)
    a.receive_data(b"".join(b.data_to_send()), 0.0)
    payload = os.urandom(size)
    times: list[float] = []
    clock = time.perf_counter
    for i in range(rounds + 100):
        t0 = clock()
        for src, dst in ((a, b), (b, a)):
            frame = None if posted else src.send_now(payload)  # what QueuePair.send does first
            if frame is None:
                wr_id = src.next_wr_id()
                src.track(wr_id)
                src.post_send(SendWR(payload, wr_id))
                chunks = src.data_to_send()
                src.take_events()
                frame = b"".join(chunks)
            dst.receive_data(frame, 0.0)
            if dst.take_message() != payload:
                raise AssertionError("the message did not arrive")
        if i >= 100:
            times.append(clock() - t0)
    return statistics.median(times) * 1e6


_COLUMNS = (
    ("t_min", "min_us"),
    ("median", "typical_us"),
    ("average", "avg_us"),
    ("stdev", "stdev_us"),
    ("p99", "p99_us"),
    ("p99.9", "p99_9_us"),
    ("max", "max_us"),
)


def _row(label: str, times: list[float]) -> tuple[str, dict[str, float]]:
    stats = latency_stats(times)
    cells = " ".join(f"{stats[key]:>8.1f}" for _, key in _COLUMNS)
    return f"      {label:<23} {cells}", stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5000, help="timed rounds per run (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs (3)")
    parser.add_argument("--size", type=int, default=64, help="message octets (64)")
    parser.add_argument("--no-crc", action="store_true", help="MPA without CRC")
    parser.add_argument(
        "--block", type=int, default=100, help="rounds per connection before the next (100)"
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.repeat < 1 or args.size < 1 or args.block < 1:
        parser.error("--rounds, --repeat, --size and --block must be positive")
    mtu = _loopback_mtu()
    print(
        f"{args.size}-octet round trips, {args.rounds} rounds per run, in blocks of "
        f"{args.block} interleaved; "
        f"MPA CRC {'off' if args.no_crc else 'on'}; loopback MTU {mtu}; times in us"
    )
    header = " ".join(f"{name:>8}" for name, _ in _COLUMNS)
    added: list[list[float]] = [[] for _ in MODES]
    ratios: list[list[float]] = [[] for _ in MODES]
    for run in range(1, args.repeat + 1):
        tcp, qps, client_cpu, server_cpu = measure(
            args.rounds, args.size, not args.no_crc, args.block
        )
        print(f"run {run}")
        for m, (mode, busy_poll) in enumerate(MODES):
            style = f"busy_poll {busy_poll * 1e6:.0f} us" if busy_poll else "busy_poll 0"
            print(f"{f'  {mode} ({style})':<29} {header}")
            raw_line, raw_stats = _row("raw TCP, same waiting", tcp[m])
            qp_line, qp_stats = _row("iwarp.sync", qps[m])
            print(raw_line)
            print(qp_line)
            plus = qp_stats["typical_us"] - raw_stats["typical_us"]
            ratio = qp_stats["typical_us"] / raw_stats["typical_us"]
            added[m].append(plus)
            ratios[m].append(ratio)
            print(
                f"      median: iwarp.sync adds {plus:+.1f} us, {ratio:.2f}x raw TCP; CPU per "
                f"iwarp.sync round trip client {client_cpu[m] * 1e6:.1f} us, "
                f"server {server_cpu[m] * 1e6:.1f} us"
            )
    for m, (mode, busy_poll) in enumerate(MODES):
        print(
            f"{mode} (busy_poll {busy_poll * 1e6:.0f} us), iwarp.sync against raw TCP waiting "
            f"the same way: {min(ratios[m]):.2f} .. {max(ratios[m]):.2f}x, adds "
            f"{min(added[m]):.1f} .. {max(added[m]):.1f} us over {len(added[m])} runs"
        )
    print("\nboth ends in one thread (code and syscalls, no process switches):")
    cpu: list[float] = []
    for run in range(1, args.repeat + 1):
        raw_us, qp_us = cpu_cost(args.rounds, args.size, not args.no_crc)
        cpu.append(qp_us - raw_us)
        print(
            f"{run:>3}   raw TCP {raw_us:6.1f} us   iwarp.sync {qp_us:6.1f} us   "
            f"added {qp_us - raw_us:+6.1f} us"
        )
    print(f"added per round trip, one thread: {min(cpu):.1f} .. {max(cpu):.1f} us")
    cores = [core_cost(args.rounds, args.size, not args.no_crc) for _ in range(args.repeat)]
    print(
        f"of which the sans-IO queue-pair endpoints (one Send each way, in memory): "
        f"{min(cores):.1f} .. {max(cores):.1f} us"
    )
    posts = [core_cost(args.rounds, args.size, not args.no_crc, True) for _ in range(args.repeat)]
    print(
        f"the same with each Send a posted SendWR (post_send): "
        f"{min(posts):.1f} .. {max(posts):.1f} us"
    )


def _loopback_mtu() -> str:
    try:
        with open("/sys/class/net/lo/mtu") as f:
            return f.read().strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
