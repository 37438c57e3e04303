"""64-octet Send/Send round trips on iwarp.asyncio next to raw asyncio TCP on the same loop.

Run: python bench/async_rtt.py [--loop asyncio|uvloop|both] [--rounds N] [--repeat R]
                               [--size 64] [--block B]

A server process (spawned: the two ends never share a GIL) runs, on the
chosen event loop, an echo of each kind: a raw TCP echo (an
``asyncio.BufferedProtocol`` that writes back what it reads) and an
iwarp.asyncio queue pair that answers each Send with a Send of the same
octets (``await qp.send(await qp.receive())``). The client, on the same
kind of loop, times ``--block`` round trips on each in turn until it has
``--rounds`` of each (interleaved: both see the same machine load), and
prints t_min, median, average, stdev, p99, p99.9 and max of both, what
iWARP adds to raw TCP's median and the ratio. Both sides read with
``recv_into`` into a buffer of their own (iwarp's driver is a
``BufferedProtocol`` too): a plain ``Protocol`` on the default loop reads
with ``recv(262144)``, whose 256 KiB allocation per read costs three
system calls or none depending on the allocator's state (see
docs/performance.md, "A trap in the asyncio comparison"). Numbers only:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from iwarp.asyncio.rdma import ConnectionTerminatedError, QueuePair, connect, serve
from iwarp.cli._perf import latency_stats

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _loop_factory(name: str) -> LoopFactory:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


class _Echo(asyncio.BufferedProtocol):
    """The raw server: what arrives goes back at once."""

    def __init__(self) -> None:
        self._buffer = memoryview(bytearray(1 << 16))
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        assert self._transport is not None
        self._transport.write(bytes(self._buffer[:nbytes]))


class _Pinger(asyncio.BufferedProtocol):
    """The raw client: a future per round trip, resolved once ``size``
    octets came back."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._buffer = memoryview(bytearray(1 << 16))
        self._got = 0
        self.transport: asyncio.Transport | None = None
        self.back: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._got += nbytes
        if self._got >= self.size and self.back is not None and not self.back.done():
            self._got -= self.size
            self.back.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.back is not None and not self.back.done():
            self.back.set_exception(ConnectionError("the echo closed"))


def server(pipe: Connection, loop_name: str, size: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        async def handler(qp: QueuePair) -> None:
            try:
                while True:
                    await qp.send(await qp.receive())
            except ConnectionTerminatedError:
                pass
            finally:
                if not done.done():
                    done.set_result(None)

        raw = await loop.create_server(_Echo, "127.0.0.1", 0)
        rdma = await serve(handler, "127.0.0.1", 0, receive_buffers=4, receive_size=size)
        pipe.send((raw.sockets[0].getsockname()[1], rdma.sockets[0].getsockname()[1]))
        await asyncio.wait_for(done, 3600)  # the client closed its queue pair
        raw.close()
        rdma.close()

    loop = _loop_factory(loop_name)()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


async def _client(
    raw_port: int, rdma_port: int, rounds: int, size: int, block: int
) -> tuple[list[float], list[float]]:
    loop = asyncio.get_running_loop()
    transport, pinger = await loop.create_connection(lambda: _Pinger(size), "127.0.0.1", raw_port)
    qp = await connect("127.0.0.1", rdma_port, receive_buffers=4, receive_size=size)
    payload = os.urandom(size)
    clock = time.perf_counter
    raw_times: list[float] = []
    qp_times: list[float] = []
    warm = 100
    done = 0
    while done < rounds + warm:
        n = min(block, rounds + warm - done)
        for _ in range(n):
            t0 = clock()
            pinger.back = loop.create_future()
            transport.write(payload)
            await pinger.back
            if done >= warm:
                raw_times.append(clock() - t0)
        for _ in range(n):
            t1 = clock()
            await qp.send(payload)
            reply = await qp.receive()
            if done >= warm:
                qp_times.append(clock() - t1)
            if reply != payload:
                raise AssertionError("echo mismatch")
        done += n
    await qp.close()
    transport.close()
    return raw_times, qp_times


def measure(loop_name: str, rounds: int, size: int, block: int) -> tuple[list[float], list[float]]:
    """Round-trip times of the raw echo and of iwarp.asyncio, interleaved
    in blocks of ``block``, both ends on ``loop_name``'s loop."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=server, args=(child, loop_name, size), daemon=True)
    proc.start()
    raw_port, rdma_port = parent.recv()
    loop = _loop_factory(loop_name)()
    try:
        result = loop.run_until_complete(
            asyncio.wait_for(_client(raw_port, rdma_port, rounds, size, block), 3600)
        )
    finally:
        loop.close()
    proc.join(30)
    return result


_COLUMNS = (
    ("t_min", "min_us"),
    ("median", "typical_us"),
    ("average", "avg_us"),
    ("stdev", "stdev_us"),
    ("p99", "p99_us"),
    ("p99.9", "p99_9_us"),
    ("max", "max_us"),
)


def _row(label: str, times: list[float]) -> tuple[str, dict[str, Any]]:
    stats = latency_stats(times)
    cells = " ".join(f"{stats[key]:>8.1f}" for _, key in _COLUMNS)
    return f"      {label:<23} {cells}", stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop", "both"), default="both", help="event loop (both)"
    )
    parser.add_argument("--rounds", type=int, default=5000, help="timed rounds per run (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs (3)")
    parser.add_argument("--size", type=int, default=64, help="message octets (64)")
    parser.add_argument(
        "--block", type=int, default=100, help="rounds per connection before the next (100)"
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.repeat < 1 or args.size < 1 or args.block < 1:
        parser.error("--rounds, --repeat, --size and --block must be positive")
    loops = ["asyncio", "uvloop"] if args.loop == "both" else [args.loop]
    if "uvloop" in loops:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            if args.loop == "uvloop":
                parser.error("uvloop is not installed (pip install 'iwarp[uvloop]')")
            loops.remove("uvloop")
    print(
        f"{args.size}-octet round trips, {args.rounds} rounds per run, in blocks of "
        f"{args.block} interleaved; MPA CRC on; times in us"
    )
    header = " ".join(f"{name:>8}" for name, _ in _COLUMNS)
    ratios: dict[str, list[float]] = {name: [] for name in loops}
    added: dict[str, list[float]] = {name: [] for name in loops}
    for run in range(1, args.repeat + 1):
        for name in loops:  # the loops alternate: the same machine load for both
            raw, qps = measure(name, args.rounds, args.size, args.block)
            print(f"run {run}, {name} loop{'':<13} {header}")
            raw_line, raw_stats = _row("raw TCP, same loop", raw)
            qp_line, qp_stats = _row("iwarp.asyncio", qps)
            print(raw_line)
            print(qp_line)
            plus = qp_stats["typical_us"] - raw_stats["typical_us"]
            ratio = qp_stats["typical_us"] / raw_stats["typical_us"]
            added[name].append(plus)
            ratios[name].append(ratio)
            print(f"      median: iwarp.asyncio adds {plus:+.1f} us, {ratio:.2f}x raw TCP")
    for name in loops:
        print(
            f"{name} loop, iwarp.asyncio against raw TCP on the same loop: "
            f"{min(ratios[name]):.2f} .. {max(ratios[name]):.2f}x, adds "
            f"{min(added[name]):.1f} .. {max(added[name]):.1f} us over {len(added[name])} runs"
        )


if __name__ == "__main__":
    main()
