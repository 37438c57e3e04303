"""Instructions per MiB of a bulk transfer, sender and receiver, counted by callgrind.

Run: python bench/bulk_instructions.py [--mib N] [--mode MODE ...] [--markers] [--netns NAME]

Each mode moves 1 MiB messages between two ends in one process, one thread
each (the sender is the main thread, the receiver a thread of its own), over
loopback TCP, CRC on:

* ``sync-write``: RDMA Writes of 1 MiB on two iwarp.sync queue pairs;
* ``sync-read``: RDMA Reads of 1 MiB (the receiver is the Read's issuer:
  the Read Responses come to it);
* ``sync-send``: Sends of 1 MiB into buffers the receiver reposts;
* ``raw``: plain TCP, ``sendall`` of 1 MiB and ``recv_into`` a 1 MiB buffer.

FPDUs are sized from the connection's MSS, as on a real network: run it in a
network namespace whose loopback has the MTU to measure (``--netns NAME``
runs valgrind under ``ip netns exec NAME``; ``ip netns add bN1500 && ip netns
exec bN1500 ip link set lo mtu 1500 up`` makes one of MTU 1500).

Each mode runs twice under ``valgrind --tool=callgrind --separate-threads=yes``
with N/4 and N + N/4 MiB after 4 MiB to warm up; the difference of the two
runs' totals over N is the count per MiB, per thread (start-up, imports and
connection setup cancel out). Both queue pairs sleep in ``poll`` at once
(``busy_poll = 0``): a busy poll's loop would count itself. User space
only: the kernel's copies and TCP are not counted, so raw TCP's figure is
what a process adds to them. Under valgrind the accelerator's CRC32C is
the ``crc32`` instruction code (valgrind's CPU has no VPCLMULQDQ), some
1.3 M instructions per MiB of the counts; the folding code runs natively.
Both runs use one string-hash seed. Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_MODES = ("sync-write", "sync-read", "sync-send", "raw")
_MIB = 1 << 20
_WARM = 4
_TIMEOUT = 120.0
_POSTED = 8


def _sync(mode: str, count: int, markers: bool) -> None:
    import iwarp.sync as rdma
    from iwarp.mpa.config import MpaConfig
    from iwarp.rdmap.work import RecvWR, Sge

    config = MpaConfig(crc=True, markers=markers)
    access = rdma.Access.LOCAL_WRITE | rdma.Access.REMOTE_WRITE | rdma.Access.REMOTE_READ
    total = _WARM + count
    ready = threading.Event()
    port: list[int] = []

    def receiver() -> None:
        pd = rdma.ProtectionDomain()
        region = pd.register(bytearray(_MIB), access)
        sinks = [pd.register(bytearray(_MIB), rdma.Access.LOCAL_WRITE) for _ in range(_POSTED)]

        def setup(qp: rdma.QueuePair) -> None:
            if mode == "sync-send":
                for i, sink in enumerate(sinks):
                    qp.post_recv(RecvWR(Sge(sink), wr_id=i))

        with rdma.listen(
            "127.0.0.1",
            0,
            pd=pd,
            config=config,
            receive_buffers=0 if mode == "sync-send" else 2,
            setup=setup,
        ) as listener:
            port.append(listener.port)
            ready.set()
            with listener.accept(timeout=_TIMEOUT) as qp:
                qp.busy_poll = 0  # a spinning wait would count its own loop
                if mode == "sync-write":
                    qp.receive(timeout=_TIMEOUT)  # the Initiator speaks first (RFC 5044 §7.1.2)
                    qp.send(region.stag.to_bytes(4, "big"), timeout=_TIMEOUT)
                    qp.receive(timeout=_TIMEOUT)  # "done": every Write before it is placed
                elif mode == "sync-read":
                    stag = int.from_bytes(qp.receive(timeout=_TIMEOUT), "big")
                    for _ in range(total):
                        qp.rdma_read(region, stag, 0, timeout=_TIMEOUT)
                    qp.send(b"done", timeout=_TIMEOUT)
                else:
                    for _ in range(total):
                        done = qp.recv_cq.wait(timeout=_TIMEOUT)
                        qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
                        qp.send(b"c", timeout=_TIMEOUT)  # a credit
                qp.wait_closed(timeout=_TIMEOUT)

    thread = threading.Thread(target=receiver)
    thread.start()
    ready.wait(_TIMEOUT)
    data = os.urandom(_MIB)
    with rdma.connect(
        "127.0.0.1", port[0], config=config, receive_buffers=4, timeout=_TIMEOUT
    ) as qp:
        qp.busy_poll = 0
        if mode == "sync-write":
            qp.send(b"hello", timeout=_TIMEOUT)
            stag = int.from_bytes(qp.receive(timeout=_TIMEOUT), "big")
            for _ in range(total):
                qp.rdma_write(data, stag, 0, timeout=_TIMEOUT)
            qp.send(b"done", timeout=_TIMEOUT)
        elif mode == "sync-read":
            source = qp.pd.register(bytearray(data), access)
            qp.send(source.stag.to_bytes(4, "big"), timeout=_TIMEOUT)
            qp.receive(timeout=_TIMEOUT)
        else:
            for i in range(total):
                if i >= _POSTED:
                    qp.receive(timeout=_TIMEOUT)  # wait for a credit: a buffer is posted
                qp.send(data, timeout=_TIMEOUT)
            for _ in range(min(total, _POSTED)):
                qp.receive(timeout=_TIMEOUT)
    thread.join(_TIMEOUT)


def _raw(count: int) -> None:
    total = (_WARM + count) * _MIB
    with socket.create_server(("127.0.0.1", 0)) as server:
        s1 = socket.create_connection(server.getsockname())
        s2, _ = server.accept()
    for sock in (s1, s2):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def receiver() -> None:
        view = memoryview(bytearray(_MIB))
        left = total
        while left:
            n = s2.recv_into(view[: min(_MIB, left)])
            if not n:
                raise ConnectionError("peer closed")
            left -= n

    thread = threading.Thread(target=receiver)
    thread.start()
    data = os.urandom(_MIB)
    for _ in range(_WARM + count):
        s1.sendall(data)
    thread.join(_TIMEOUT)
    s1.close()
    s2.close()


def _per_thread(prefix: str) -> list[int]:
    """Each thread's total instructions, in thread order, from the files
    ``--separate-threads=yes`` wrote."""
    counts: list[tuple[int, int]] = []
    for path in Path(prefix).parent.glob(Path(prefix).name + "*"):
        found = re.search(r"-(\d+)$", path.name)
        text = path.read_text(errors="replace")
        total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if found and total:
            counts.append((int(found.group(1)), int(total.group(1))))
    return [n for _, n in sorted(counts)]


def _instructions(args: argparse.Namespace, mode: str, count: int, out: str) -> list[int]:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    command = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--run",
        mode,
        "--count",
        str(count),
    ]
    if args.markers:
        command.append("--markers")
    if args.netns:
        command = ["ip", "netns", "exec", args.netns, *command]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode}: valgrind failed:\n{done.stderr[-2000:]}")
    return _per_thread(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=16, help="MiB per measured difference")
    parser.add_argument("--mode", action="append", choices=_MODES)
    parser.add_argument("--markers", action="store_true", help="MPA markers on")
    parser.add_argument("--netns", help="run in this network namespace (ip netns exec)")
    parser.add_argument("--run", choices=_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        if args.run == "raw":
            _raw(args.count)
        else:
            _sync(args.run, args.count, args.markers)
        return
    low, high = args.mib // 4, args.mib + args.mib // 4
    for mode in args.mode or list(_MODES):
        with tempfile.TemporaryDirectory() as tmp:
            a = _instructions(args, mode, low, f"{tmp}/low/cg")
            b = _instructions(args, mode, high, f"{tmp}/high/cg")
        # Thread 1 sends (the Read's responder answers from it), thread 2 receives.
        per = [(y - x) / (high - low) for x, y in zip(a, b, strict=False)]
        sender = per[0] if per else 0.0
        receiver = sum(per[1:])
        print(
            f"{mode:11} markers {'on ' if args.markers else 'off'}  instructions per MiB:"
            f" sender {sender:12,.0f}  receiver {receiver:12,.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
