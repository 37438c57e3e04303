"""RDMA over TCP (MPA + DDP + RDMAP) next to raw Python TCP, two processes on loopback.

Run: python bench/rdma_bench.py [--size BYTES] [--count N] [--rounds N]

1. Bulk goodput of ``count`` messages of ``size`` octets (1 MiB):
   raw TCP (``sendall`` / ``recv_into``), then RDMA Write and Send over the
   iWARP stack with CRC32C on, markers off and on. Each transfer ends with
   an acknowledgement from the receiver, so the time covers delivery. The
   Send receiver keeps 8 buffers posted and reposts each as it completes
   (verbs); a last row receives with the simple API, ``receive()``, which
   copies each message out as ``bytes``.
2. Round-trip latency of a 64-octet message: raw TCP ping-pong against a
   Send answered by a Send (CRC on, markers off); an asyncio TCP echo
   (``asyncio.Protocol``, no iWARP) shows what the event loop alone costs.

The receiver runs in a child process (this script with ``--serve``); the
ratio column compares with raw TCP measured in the same run. The CPU
columns are each process's CPU time (user + system, ``time.process_time``)
per MiB moved: on a shared machine they move less than the rates, and they
show which side limits.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time

from iwarp.asyncio.rdma import Access, ProtectionDomain, QueuePair, connect, serve
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap.work import CompletionStatus, RecvWR, Sge, WriteWR

PING = 64


# --- the receiving process ------------------------------------------------------


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def serve_asyncio_echo() -> None:
    loop = asyncio.get_running_loop()
    closed = loop.create_future()

    class Echo(_Echo):
        def connection_lost(self, exc: Exception | None) -> None:
            if not closed.done():
                closed.set_result(None)

    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    cpu = time.process_time()
    await closed
    report_cpu(cpu)
    server.close()


def report_cpu(start: float) -> None:
    """The receiving process's CPU seconds since ``start``, for the sender to read."""
    print(time.process_time() - start, flush=True)


def serve_raw(mode: str, size: int, count: int, rounds: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    cpu = time.process_time()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode == "bulk":
        buf = bytearray(size)
        view = memoryview(buf)
        left = size * count
        while left:
            n = conn.recv_into(view[: min(size, left)])
            if not n:
                return
            left -= n
        conn.sendall(b"k")
        report_cpu(cpu)
    else:
        buf = bytearray(PING)
        for _ in range(rounds):
            got = 0
            while got < PING:
                got += conn.recv_into(memoryview(buf)[got:])
            conn.sendall(buf)
        report_cpu(cpu)
    conn.close()


#: Receive buffers the verbs Send receiver keeps posted (reposted as each completes).
SEND_RECEIVES = 8


async def serve_rdma(mode: str, size: int, count: int, rounds: int, markers: bool) -> None:
    pd = ProtectionDomain()
    target = pd.register(bytearray(size), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    sinks = [pd.register(bytearray(size), Access.LOCAL_WRITE) for _ in range(SEND_RECEIVES)]
    finished = asyncio.get_running_loop().create_future()
    cpu = 0.0

    def post_receives(qp: QueuePair) -> None:
        if mode == "send":
            for i, sink in enumerate(sinks):
                qp.post_recv(RecvWR(Sge(sink), wr_id=i))

    async def handler(qp: QueuePair) -> None:
        nonlocal cpu
        cpu = time.process_time()
        if mode == "write":
            await qp.receive()  # the initiator speaks first (RFC 5044 §7.1.2 rule 4)
            await qp.send(target.stag.to_bytes(4, "big"))
            await qp.receive()  # "done": every Write before it is placed
            await qp.send(b"k")
        elif mode == "send":  # verbs: each Send is placed in a posted buffer, reposted
            for _ in range(count):
                done = await qp.recv_cq.wait()
                assert done.status is CompletionStatus.SUCCESS, done
                qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
            await qp.send(b"k")
        elif mode == "send-simple":  # receive() returns each message as bytes
            for _ in range(count):
                await qp.receive()
            await qp.send(b"k")
        else:
            for _ in range(rounds):
                await qp.send(await qp.receive())
        await qp.closed  # the sender closes when it has its answer
        finished.set_result(None)

    buffers = {"send": 0, "send-simple": 32}.get(mode, 4)
    server = await serve(
        handler,
        "127.0.0.1",
        0,
        pd=pd,
        config=MpaConfig(crc=True, markers=markers),
        receive_buffers=buffers,
        receive_size=max(size, PING) if mode == "send-simple" else PING,
        setup=post_receives,
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await finished
    report_cpu(cpu)
    server.close()


# --- the sending process ----------------------------------------------------------


def start_server(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


#: A bulk result: octets per second, and CPU seconds of sender and receiver.
Bulk = tuple[float, float, float]


def finish(proc: subprocess.Popen[str]) -> float:
    """Wait for the receiving process; its CPU seconds."""
    assert proc.stdout is not None
    cpu = float(proc.stdout.readline())
    proc.wait(timeout=30)
    return cpu


def raw_bulk(size: int, count: int) -> Bulk:
    proc, port = start_server("raw-bulk", str(size), str(count), "0")
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


def raw_ping(rounds: int) -> list[float]:
    proc, port = start_server("raw-ping", "0", "0", str(rounds))
    data = bytes(PING)
    buf = bytearray(PING)
    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(rounds):
            start = time.perf_counter()
            sock.sendall(data)
            got = 0
            while got < PING:
                got += sock.recv_into(memoryview(buf)[got:])
            times.append(time.perf_counter() - start)
    finish(proc)
    return times


async def rdma_bulk(mode: str, size: int, count: int, markers: bool) -> Bulk:
    proc, port = start_server(
        f"rdma-{mode}" + ("-markers" if markers else ""), str(size), str(count), "0"
    )
    qp = await connect(
        "127.0.0.1", port, config=MpaConfig(crc=True, markers=markers), receive_buffers=2
    )
    data = bytes(size)
    if mode == "write":
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
        sends = [qp.send(data) for _ in range(count)]
        await asyncio.gather(*sends)
    await qp.receive()  # the receiver's acknowledgement
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    await qp.close()
    return size * count / elapsed, cpu, finish(proc)


async def asyncio_ping(rounds: int) -> list[float]:
    proc, port = start_server("asyncio-echo", "0", "0", str(rounds))
    loop = asyncio.get_running_loop()
    replies: asyncio.Queue[bytes] = asyncio.Queue()
    closed = loop.create_future()

    class Client(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            replies.put_nowait(data)

        def connection_lost(self, exc: Exception | None) -> None:
            closed.set_result(None)

    transport, _ = await loop.create_connection(Client, "127.0.0.1", port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = bytes(PING)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        transport.write(data)
        got = 0
        while got < PING:
            got += len(await replies.get())
        times.append(time.perf_counter() - start)
    transport.close()
    await closed
    finish(proc)
    return times


async def rdma_ping(rounds: int) -> list[float]:
    proc, port = start_server("rdma-ping", "0", "0", str(rounds))
    qp = await connect("127.0.0.1", port, config=MpaConfig(crc=True), receive_buffers=4)
    data = bytes(PING)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await qp.send(data)
        await qp.receive()
        times.append(time.perf_counter() - start)
    await qp.close()
    finish(proc)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--count", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--serve", nargs=4, metavar=("MODE", "SIZE", "COUNT", "ROUNDS"))
    args = parser.parse_args()
    if args.serve:
        mode, size, count, rounds = args.serve[0], *map(int, args.serve[1:])
        if mode.startswith("raw-"):
            serve_raw(mode[4:], size, count, rounds)
        elif mode == "asyncio-echo":
            asyncio.run(serve_asyncio_echo())
        else:
            kind = mode[5:].removesuffix("-markers")
            asyncio.run(serve_rdma(kind, size, count, rounds, mode.endswith("-markers")))
        return

    size, count = args.size, args.count
    mib = size * count / (1 << 20)
    print(f"bulk: {count} messages of {size} octets ({mib:.0f} MiB), two processes, loopback")
    print(f"  {'':<34} {'':>14} {'':>5}   CPU us/MiB: sender receiver")
    runs: list[tuple[str, Bulk]] = [("raw TCP sendall/recv_into", raw_bulk(size, count))]
    raw = runs[0][1][0]
    for mode, markers in (
        ("write", False),
        ("write", True),
        ("send", False),
        ("send", True),
        ("send-simple", False),
    ):
        name = f"RDMA {mode.title()}, CRC on, markers {'on' if markers else 'off'}"
        if mode == "send-simple":
            name = "Send into receive(), markers off"
        runs.append((name, asyncio.run(rdma_bulk(mode, size, count, markers))))
    for name, (rate, sender, receiver) in runs:
        cpu = f"{sender / mib * 1e6:6.0f} {receiver / mib * 1e6:8.0f}"
        print(f"  {name:<34} {rate / 1e6:9.1f} MB/s   {rate / raw:.2f}x   {cpu:>21}")
    print(f"latency: {PING}-octet round trip, {args.rounds} rounds (median, p99)")
    raw_t = raw_ping(args.rounds)
    asyncio_t = asyncio.run(asyncio_ping(args.rounds))
    rdma_t = asyncio.run(rdma_ping(args.rounds))
    for name, times in (
        ("raw TCP ping-pong", raw_t),
        ("asyncio TCP echo (no iWARP)", asyncio_t),
        ("Send / Send, CRC on", rdma_t),
    ):
        median = statistics.median(times)
        p99 = sorted(times)[int(len(times) * 0.99)]
        ratio = median / statistics.median(raw_t)
        print(f"  {name:<34} {median * 1e6:7.1f} us  p99 {p99 * 1e6:7.1f} us   {ratio:.2f}x")


if __name__ == "__main__":
    main()
