"""The receive path alone: the receive lane against the usual path.

Run: python bench/recv_lane_bench.py [--op write|send|read|all] [--emss N]
     [--size BYTES] [--mib N] [--repeat N] [--chunk BYTES] [--ring BYTES] [--markers]

Two endpoints in memory make the wire octets of ``--mib`` MiB of 1 MiB
messages once (RDMA Writes into one region, Sends into 64 posted 1 MiB
buffers, or the Read Responses of RDMA Reads), at segments sized by
``--emss`` (1448: MTU 1500; 65483: MTU 65536), CRC on, markers off (or on
with ``--markers``). Then,
for each path in turn (interleaved, ``--repeat`` rounds), a fresh receiver
gets them over a loopback TCP connection: ``--chunk`` octets are written,
then the receiver reads until it has them all, timed with the thread's CPU
clock around its reads only (the kernel's copy to user memory included,
the sender's system calls not):

* ``usual``: ``recv_into`` a 1 MiB buffer, then ``receive_data`` of what
  arrived (the blocking driver's way for a bulk transfer);
* ``lane``: ``ReceiveLane.pump`` (the C kernel reads into the 1 MiB ring,
  checks and places, the cores learn what it placed).

Prints us of CPU per MiB received for each, and checks that both placed
the same octets. Needs the C accelerator (``IWARP_NO_LANES`` unset).
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable

from iwarp.mpa.config import MpaConfig, Role
from iwarp.rdma import lanes
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.lanes import RING_SIZE, ReceiveLane
from iwarp.rdma.port import LanePort
from iwarp.rdmap.memory import Access, MemoryRegion, MemoryRegistry
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR
from iwarp.sockets import RECEIVE_BULK

MIB = 1 << 20
POSTED = 64
RECV_BUFFER = RECEIVE_BULK


def pump(a: QueuePairEndpoint, b: QueuePairEndpoint) -> None:
    """Move octets both ways until both ends are quiet."""
    for _ in range(1000):
        moved = False
        for src, dst in ((a, b), (b, a)):
            src.take_events()
            data = b"".join(bytes(c) for c in src.data_to_send(None))
            if data:
                moved = True
                dst.receive_data(data, 0.0)
        if not moved:
            return
    raise RuntimeError("the handshake did not settle")


class Setup:
    """A connected pair; the receiver's memory, and the wire octets of the
    messages for it."""

    def __init__(self, op: str, emss: int, size: int, count: int, markers: bool = False) -> None:
        registry = MemoryRegistry()
        config = MpaConfig(markers=markers)
        a = QueuePairEndpoint(Role.INITIATOR, registry.alloc_pd(), config)
        b = QueuePairEndpoint(Role.RESPONDER, registry.alloc_pd(), config)
        a.set_emss(emss)
        b.set_emss(emss)
        pump(a, b)
        self.a, self.b = a, b
        #: The end that receives the messages.
        self.rx = b
        self.sinks: list[MemoryRegion] = []
        if op == "write":
            region = b.pd.register(bytearray(size), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
            self.sinks.append(region)
            source = bytes(range(256)) * (size // 256)
            for k in range(count):
                a.post_send(WriteWR(source, region.stag, 0, wr_id=k))
            self.wire = self._drain(a)
        elif op == "send":
            for k in range(POSTED):
                region = b.pd.register(bytearray(size), Access.LOCAL_WRITE)
                b.post_recv(RecvWR(Sge(region), wr_id=k))
                self.sinks.append(region)
            source = bytes(range(256)) * (size // 256)
            for k in range(count):
                a.post_send(SendWR(source, wr_id=k))
            self.wire = self._drain(a)
        else:  # read: the initiator asks, the responder answers
            exposed = b.pd.register(bytes(range(256)) * (size // 256), Access.REMOTE_READ)
            sink = a.pd.register(bytearray(size), Access.LOCAL_WRITE)
            self.sinks.append(sink)
            for k in range(count):
                a.post_send(ReadWR(Sge(sink), exposed.stag, 0, wr_id=k))
            requests = b"".join(bytes(c) for c in a.data_to_send(None))
            b.receive_data(requests, 0.0)
            self.wire = self._drain(b)
            self.rx = a

    @staticmethod
    def _drain(a: QueuePairEndpoint) -> bytes:
        out: list[bytes] = []
        while True:
            chunk = a.data_to_send(None)
            if not chunk:
                return b"".join(out)
            out.extend(bytes(c) for c in chunk)


def connected() -> tuple[socket.socket, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    tx = socket.create_connection(listener.getsockname())
    rx, _ = listener.accept()
    listener.close()
    for s in (tx, rx):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MIB)
    rx.setblocking(False)
    return tx, rx


def run(setup: Setup, chunk: int, path: str, ring: int = RING_SIZE) -> float:
    """CPU seconds of the receiver's reads for the setup's wire octets."""
    b, wire = setup.rx, setup.wire
    tx, rx = connected()
    fd = rx.fileno()
    assert isinstance(b.lanes, LanePort), "the lanes do not run"
    lane = ReceiveLane(b.lanes, ring)
    buffer = bytearray(RECV_BUFFER)
    view = memoryview(buffer)

    def usual() -> int:
        try:
            n = rx.recv_into(buffer)
        except BlockingIOError:
            return 0
        b.receive_data(view[:n], 0.0)
        return n

    def by_lane() -> int:
        lane.pump(fd, 0.0)
        return lane.got

    receive: Callable[[], int] = by_lane if path == "lane" else usual
    spent = 0.0
    received = sent = 0
    try:
        while sent < len(wire):
            piece = wire[sent : sent + chunk]
            tx.sendall(piece)
            sent += len(piece)
            start = time.thread_time()
            while received < sent:
                received += receive()
            spent += time.thread_time() - start
    finally:
        tx.close()
        rx.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=["write", "send", "read", "all"], default="all")
    parser.add_argument("--emss", type=int, action="append", help="1448 and 65483 by default")
    parser.add_argument("--size", type=int, default=MIB)
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=MIB)
    parser.add_argument("--ring", type=int, default=RING_SIZE, help="the lane's ring octets")
    parser.add_argument("--markers", action="store_true", help="MPA markers on (both ways)")
    args = parser.parse_args()
    if not lanes.ACTIVE:
        sys.exit("the receive lane needs the C accelerator (and IWARP_NO_LANES unset)")
    ops = ["write", "send", "read"] if args.op == "all" else [args.op]
    count = max(1, args.mib * MIB // args.size)
    for emss in args.emss or [1448, 65483]:
        for op in ops:
            figures: dict[str, list[float]] = {"usual": [], "lane": []}
            memory: dict[str, list[bytes]] = {}
            for _ in range(args.repeat):
                for path in ("usual", "lane"):
                    setup = Setup(op, emss, args.size, count, args.markers)
                    cpu = run(setup, args.chunk, path, args.ring)
                    figures[path].append(cpu * 1e6 / (len(setup.wire) / MIB))
                    memory[path] = [bytes(r.view) for r in setup.sinks]
            if memory["usual"] != memory["lane"]:
                sys.exit(f"{op} at EMSS {emss}: the two paths placed different octets")
            line = ", ".join(f"{path} {min(v):.0f}-{max(v):.0f}" for path, v in figures.items())
            marked = " markers" if args.markers else ""
            print(f"{op:5} EMSS {emss:5}{marked}: us of CPU per MiB received: {line}", flush=True)


if __name__ == "__main__":
    main()
