"""Bulk RDMA Write and Send against raw Python TCP, both adapters, one run.

Run: python bench/lanes_bench.py [--size BYTES] [--count N] [--repeat N]
     [--adapter sync|asyncio|both] [--markers off|on|both]

For each adapter (``iwarp.sync``, blocking; ``iwarp.asyncio``) and each
configuration (RDMA Write, Send; CRC on; markers off and on) it measures
raw TCP between two fresh processes (``sendall`` / ``recv_into``) and right
after it the RDMA transfer of ``count`` messages of ``size`` octets (1 MiB),
and prints the rate, the ratio to that raw TCP run, and each process's CPU
time per MiB (user + system; sender / receiver). Every transfer ends with an
acknowledgement from the receiver, so the time covers delivery. The Send
receiver keeps 16 buffers posted (verbs), reposts each as it completes and
returns a credit every 8 messages, so the sender never overruns it.

Large messages go by send lane where the C accelerator is built
(``iwarp.rdma.lanes``); ``IWARP_NO_LANES=1`` measures the accelerator's
framing path without them, ``IWARP_NO_ACCEL=1`` the pure-Python path.
Run it inside a network namespace to choose the MTU (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

import iwarp.sync as sync_rdma
from iwarp import _accel
from iwarp.asyncio import rdma as aio_rdma
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import lanes
from iwarp.rdmap.work import CompletionStatus, RecvWR, Sge, WriteWR

WRITE_ACCESS = sync_rdma.Access.LOCAL_WRITE | sync_rdma.Access.REMOTE_WRITE
#: Receive buffers the Send receiver keeps posted; a credit every CREDIT messages.
POSTED = 16
CREDIT = 8
TIMEOUT = 120.0
#: Carries ``--busy-poll`` to the receiving process.
BUSY_POLL_ENV = "LANES_BENCH_BUSY_POLL"


def set_busy_poll(qp: sync_rdma.QueuePair) -> None:
    """``busy_poll`` of a blocking queue pair as ``--busy-poll`` says (else
    the library's default)."""
    value = os.environ.get(BUSY_POLL_ENV)
    if value is not None:
        qp.busy_poll = float(value)


# --- the receiving process ------------------------------------------------------


def report_cpu(start: float) -> None:
    print(time.process_time() - start, flush=True)


def serve_raw(size: int, count: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    cpu = time.process_time()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    view = memoryview(bytearray(size))
    left = size * count
    while left:
        n = conn.recv_into(view[: min(size, left)])
        if not n:
            return
        left -= n
    conn.sendall(b"k")
    report_cpu(cpu)
    conn.close()


def serve_sync(op: str, markers: bool, size: int, count: int) -> None:
    pd = sync_rdma.ProtectionDomain()
    target = pd.register(bytearray(size), WRITE_ACCESS)
    sinks = [pd.register(bytearray(size), sync_rdma.Access.LOCAL_WRITE) for _ in range(POSTED)]

    def setup(qp: sync_rdma.QueuePair) -> None:
        if op == "send":
            for i, sink in enumerate(sinks):
                qp.post_recv(RecvWR(Sge(sink), wr_id=i))

    listener = sync_rdma.listen(
        "127.0.0.1",
        0,
        pd=pd,
        config=MpaConfig(crc=True, markers=markers),
        receive_buffers=0 if op == "send" else 2,
        setup=setup,
    )
    print(listener.port, flush=True)
    with listener.accept(timeout=TIMEOUT) as qp:
        set_busy_poll(qp)
        cpu = time.process_time()
        if op == "write":
            qp.receive(timeout=TIMEOUT)  # the initiator speaks first
            qp.send(target.stag.to_bytes(4, "big"), timeout=TIMEOUT)
            qp.receive(timeout=TIMEOUT)  # "done": every Write before it is placed
        else:
            for i in range(count):
                done = qp.recv_cq.wait(timeout=TIMEOUT)
                assert done.status is CompletionStatus.SUCCESS, done
                qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
                if (i + 1) % CREDIT == 0:
                    qp.send(b"c", timeout=TIMEOUT)
        qp.send(b"k", timeout=TIMEOUT)
        report_cpu(cpu)
        qp.wait_closed(timeout=TIMEOUT)
    listener.close()


async def serve_asyncio(op: str, markers: bool, size: int, count: int) -> None:
    pd = aio_rdma.ProtectionDomain()
    target = pd.register(bytearray(size), WRITE_ACCESS)
    sinks = [pd.register(bytearray(size), aio_rdma.Access.LOCAL_WRITE) for _ in range(POSTED)]
    finished = asyncio.get_running_loop().create_future()

    def setup(qp: aio_rdma.QueuePair) -> None:
        if op == "send":
            for i, sink in enumerate(sinks):
                qp.post_recv(RecvWR(Sge(sink), wr_id=i))

    async def handler(qp: aio_rdma.QueuePair) -> None:
        cpu = time.process_time()
        if op == "write":
            await qp.receive()
            await qp.send(target.stag.to_bytes(4, "big"))
            await qp.receive()
        else:
            for i in range(count):
                done = await qp.recv_cq.wait()
                assert done.status is CompletionStatus.SUCCESS, done
                qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
                if (i + 1) % CREDIT == 0:
                    await qp.send(b"c")
        await qp.send(b"k")
        report_cpu(cpu)
        await qp.closed
        finished.set_result(None)

    server = await aio_rdma.serve(
        handler,
        "127.0.0.1",
        0,
        pd=pd,
        config=MpaConfig(crc=True, markers=markers),
        receive_buffers=0 if op == "send" else 2,
        setup=setup,
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await finished
    server.close()


# --- the sending process ----------------------------------------------------------

#: A result: octets per second, CPU seconds of sender and receiver.
Result = tuple[float, float, float]


def start_server(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def finish(proc: subprocess.Popen[str]) -> float:
    assert proc.stdout is not None
    cpu = float(proc.stdout.readline())
    proc.wait(timeout=TIMEOUT)
    return cpu


def raw(size: int, count: int) -> Result:
    proc, port = start_server("raw", "write", "off", str(size), str(count))
    data = bytes(size)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cpu = time.process_time()
        start = time.perf_counter()
        for _ in range(count):
            sock.sendall(data)
        sock.recv(1)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return size * count / elapsed, cpu, finish(proc)


def run_sync(op: str, markers: bool, size: int, count: int) -> Result:
    proc, port = start_server("sync", op, "on" if markers else "off", str(size), str(count))
    config = MpaConfig(crc=True, markers=markers)
    data = bytes(size)
    with sync_rdma.connect(
        "127.0.0.1", port, config=config, receive_buffers=4, timeout=TIMEOUT
    ) as qp:
        set_busy_poll(qp)
        if op == "write":
            qp.send(b"hello", timeout=TIMEOUT)
            stag = int.from_bytes(qp.receive(timeout=TIMEOUT), "big")
            cpu = time.process_time()
            start = time.perf_counter()
            for _ in range(count):
                qp.rdma_write(data, stag, 0, timeout=TIMEOUT)
            qp.send(b"done", timeout=TIMEOUT)
        else:
            cpu = time.process_time()
            start = time.perf_counter()
            credits = 0
            for i in range(count):
                if i >= POSTED and i % CREDIT == 0:
                    qp.receive(timeout=TIMEOUT)  # a credit: CREDIT more buffers are posted
                    credits += 1
                qp.send(data, timeout=TIMEOUT)
            for _ in range(count // CREDIT - credits):
                qp.receive(timeout=TIMEOUT)
        assert qp.receive(timeout=TIMEOUT) == b"k"
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return size * count / elapsed, cpu, finish(proc)


async def run_asyncio(op: str, markers: bool, size: int, count: int) -> Result:
    proc, port = start_server("asyncio", op, "on" if markers else "off", str(size), str(count))
    config = MpaConfig(crc=True, markers=markers)
    qp = await aio_rdma.connect("127.0.0.1", port, config=config, receive_buffers=4)
    data = bytes(size)
    if op == "write":
        await qp.send(b"hello")
        stag = int.from_bytes(await qp.receive(), "big")
        cpu = time.process_time()
        start = time.perf_counter()
        for i in range(count):
            qp.post_send(WriteWR(data, stag, 0, wr_id=i))
        await qp.send(b"done")
    else:
        cpu = time.process_time()
        start = time.perf_counter()
        pending = []
        credits = 0
        for i in range(count):
            if i >= POSTED and i % CREDIT == 0:
                await qp.receive()
                credits += 1
            pending.append(asyncio.ensure_future(qp.send(data)))
        await asyncio.gather(*pending)
        for _ in range(count // CREDIT - credits):
            await qp.receive()
    assert await qp.receive() == b"k"
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    await qp.close()
    return size * count / elapsed, cpu, finish(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--adapter", choices=("sync", "asyncio", "both"), default="both")
    parser.add_argument("--markers", choices=("off", "on", "both"), default="both")
    parser.add_argument("--op", choices=("write", "send", "both"), default="both")
    parser.add_argument(
        "--busy-poll",
        type=float,
        help="busy_poll seconds of the blocking queue pairs (default: the library's, 200 us)",
    )
    parser.add_argument("--serve", nargs=5, metavar=("ADAPTER", "OP", "MARKERS", "SIZE", "COUNT"))
    args = parser.parse_args()
    if args.serve:
        adapter, op, markers = args.serve[0], args.serve[1], args.serve[2] == "on"
        size, count = int(args.serve[3]), int(args.serve[4])
        if adapter == "raw":
            serve_raw(size, count)
        elif adapter == "sync":
            serve_sync(op, markers, size, count)
        else:
            asyncio.run(serve_asyncio(op, markers, size, count))
        return

    if args.busy_poll is not None:
        os.environ[BUSY_POLL_ENV] = str(args.busy_poll)
    size, count = args.size, args.count
    mib = size * count / (1 << 20)
    adapters = ("sync", "asyncio") if args.adapter == "both" else (args.adapter,)
    ops = ("write", "send") if args.op == "both" else (args.op,)
    marker_modes = (False, True) if args.markers == "both" else (args.markers == "on",)
    print(
        f"{count} messages of {size} octets ({mib:.0f} MiB), CRC on, two processes; "
        f"{_accel.describe()}, send lanes {'on' if lanes.ACTIVE else 'off'}"
    )
    print(
        f"  {'':<28} {'RDMA MB/s':>10} {'raw MB/s':>9} {'ratio':>6}"
        f"   CPU us/MiB sender/receiver: RDMA      raw"
    )
    for _ in range(args.repeat):
        for adapter in adapters:
            for op in ops:
                for markers in marker_modes:
                    base = raw(size, count)
                    if adapter == "sync":
                        got = run_sync(op, markers, size, count)
                    else:
                        got = asyncio.run(run_asyncio(op, markers, size, count))
                    name = f"{adapter} {op}, markers {'on' if markers else 'off'}"
                    cpu = f"{got[1] / mib * 1e6:5.0f} / {got[2] / mib * 1e6:5.0f}"
                    cpu_raw = f"{base[1] / mib * 1e6:5.0f} / {base[2] / mib * 1e6:5.0f}"
                    print(
                        f"  {name:<28} {got[0] / 1e6:10.1f} {base[0] / 1e6:9.1f} "
                        f"{got[0] / base[0]:5.2f}x   {cpu:>29}  {cpu_raw}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
