"""What ``flush()`` costs on iwarp.sync: next to an 8-octet RDMA Read (the
same round trip) and a plain RDMA Write (local completion only).

Run: python bench/flush_cost.py [--rounds N] [--size 64]

A server process (spawned: the two ends never share a GIL) registers a
region and waits; the client times, interleaved in blocks of 100 so all
see the same machine load, ``rdma_write`` of ``--size`` octets,
``rdma_write(..., flush=True)``, ``flush()`` alone and an 8-octet
``rdma_read``, and prints each one's median and its ratio to the Read.
Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import iwarp.sync as rdma
from iwarp.rdmap.memory import Access

BLOCK = 100


def _server(conn: Connection) -> None:
    listener = rdma.listen("127.0.0.1", 0, receive_buffers=2)
    conn.send(listener.port)
    with listener.accept(timeout=30) as qp:
        access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
        region = qp.register(bytearray(1 << 16), access)
        qp.send(region.stag.to_bytes(4, "big"), timeout=30)
        qp.receive(timeout=600)  # serves the client's Reads meanwhile, until "done"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2000, help="calls of each kind")
    parser.add_argument("--size", type=int, default=64, help="octets per Write")
    args = parser.parse_args()
    ours, theirs = mp.get_context("spawn").Pipe()
    server = mp.get_context("spawn").Process(target=_server, args=(theirs,))
    server.start()
    with rdma.connect("127.0.0.1", ours.recv(), receive_buffers=2, timeout=30) as qp:
        stag = int.from_bytes(qp.receive(timeout=30), "big")
        data, sink = b"x" * args.size, qp.register(bytearray(8))
        calls: dict[str, Callable[[], object]] = {
            "rdma_write": lambda: qp.rdma_write(data, stag, 0, timeout=30),
            "rdma_write(flush=True)": lambda: qp.rdma_write(data, stag, 0, flush=True, timeout=30),
            "flush()": lambda: qp.flush(timeout=30),
            "rdma_read of 8 octets": lambda: qp.rdma_read(sink, stag, 0, timeout=30),
        }
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(max(args.rounds // BLOCK, 1)):
            for name, call in calls.items():
                started = time.perf_counter()
                for _ in range(BLOCK):
                    call()
                times[name].append((time.perf_counter() - started) / BLOCK * 1e6)
        qp.send(b"done", timeout=30)
    server.join(30)
    read = statistics.median(times["rdma_read of 8 octets"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:24s} median {median:9.1f} us per call, {median / read:5.2f}x the Read")


if __name__ == "__main__":
    main()
