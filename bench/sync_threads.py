"""Busy polling against sleeping with many connections and a threaded server.

Run: python bench/sync_threads.py [--clients 4] [--rounds 1000] [--repeat 2]

A spawned server process accepts ``--clients`` queue pairs and echoes on
each in a thread of its own (so their waits share one GIL); as many client
processes each time ``--rounds`` 64-octet Send/Send round trips. Runs
alternate between ``busy_poll`` = :data:`iwarp.sync.BUSY_POLL` and 0 (every
wait sleeps in ``poll`` at once) on both ends, ``--repeat`` times each, and
print the mean round trip per client and the round trips per second of all
clients together. Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from multiprocessing.queues import Queue

import iwarp.sync as rdma

SIZE = 64
TIMEOUT = 30.0  # no single step may take longer


def _echo(qp: rdma.QueuePair, busy_poll: float) -> None:
    qp.busy_poll = busy_poll
    try:
        while True:
            qp.send(qp.receive(timeout=TIMEOUT), timeout=TIMEOUT)
    except rdma.ConnectionTerminatedError:
        pass
    finally:
        qp.close()


def server(ports: Queue[int], clients: int, busy_poll: float) -> None:
    with rdma.listen("127.0.0.1", 0) as listener:
        ports.put(listener.port)
        qps = [listener.accept(timeout=TIMEOUT) for _ in range(clients)]
    threads = [threading.Thread(target=_echo, args=(qp, busy_poll)) for qp in qps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def client(port: int, busy_poll: float, rounds: int, results: Queue[float]) -> None:
    with rdma.connect("127.0.0.1", port, timeout=TIMEOUT) as qp:
        qp.busy_poll = busy_poll
        payload = b"x" * SIZE
        for _ in range(100):  # warm-up
            qp.send(payload, timeout=TIMEOUT)
            qp.receive(timeout=TIMEOUT)
        start = time.perf_counter()
        for _ in range(rounds):
            qp.send(payload, timeout=TIMEOUT)
            if qp.receive(timeout=TIMEOUT) != payload:
                raise AssertionError("echo mismatch")
        results.put((time.perf_counter() - start) / rounds)


def run(clients: int, rounds: int, busy_poll: float) -> float:
    """Mean seconds per round trip over the clients."""
    ctx = mp.get_context("spawn")
    ports: Queue[int] = ctx.Queue()
    results: Queue[float] = ctx.Queue()
    proc = ctx.Process(target=server, args=(ports, clients, busy_poll), daemon=True)
    proc.start()
    port = ports.get(timeout=TIMEOUT)
    procs = [
        ctx.Process(target=client, args=(port, busy_poll, rounds, results), daemon=True)
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    times = [results.get(timeout=10 * TIMEOUT) for _ in procs]
    for p in [*procs, proc]:
        p.join(TIMEOUT)
    return sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4, help="client processes (4)")
    parser.add_argument("--rounds", type=int, default=1000, help="round trips per client (1000)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each mode (2)")
    args = parser.parse_args()
    if args.clients < 1 or args.rounds < 1 or args.repeat < 1:
        parser.error("--clients, --rounds and --repeat must be positive")
    print(f"{args.clients} clients, {args.rounds} round trips each, {SIZE} octets")
    for _ in range(args.repeat):
        for busy_poll in (rdma.BUSY_POLL, 0.0):
            mean = run(args.clients, args.rounds, busy_poll)
            print(
                f"busy_poll {busy_poll * 1e6:5.0f} us: {mean * 1e6:7.1f} us per round trip, "
                f"{args.clients / mean:8.0f} round trips/s in all"
            )


if __name__ == "__main__":
    main()
