"""MPA connection setup and transfer: sans-IO handshakes, loopback sockets.

Run: python bench/mpa_connection.py [--connections N] [--seconds S]

1. In memory: full Request/Reply exchanges per second (two MpaConnection
   objects, Rev 2 with RFC 6581 data, no sockets).
2. Loopback: N concurrent connect()s to one serve() on one event loop,
   each exchanging one ULPDU; time to set all of them up, and the loop's
   peak resident memory growth per connection.
3. Loopback: one connection sending 1400-octet ULPDUs with send_many
   batches, CRC on, markers off/on: MB/s of ULPDU payload received.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time

from iwarp.asyncio.mpa import MpaSocket, connect, serve
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection


def handshakes(seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            init = MpaConnection(Role.INITIATOR, private_data=b"bench")
            resp = MpaConnection(Role.RESPONDER)
            resp.receive_data(b"".join(init.data_to_send()), 0.0)
            resp.accept(b"ok")
            resp.take_events()
            init.receive_data(b"".join(resp.data_to_send()), 0.0)
        done += 200
    return done / (time.perf_counter() - start)


async def echo(sock: MpaSocket) -> None:
    async for ulpdu in sock:
        sock.send(ulpdu)


async def many(n: int) -> tuple[float, float]:
    server = await serve(echo, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    sem = asyncio.Semaphore(512)

    async def one() -> MpaSocket:
        async with sem:
            sock = await connect("127.0.0.1", port)
            sock.send(b"ping")
            assert await sock.receive() == b"ping"
            return sock

    socks = await asyncio.gather(*(one() for _ in range(n)))
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await asyncio.gather(*(s.close() for s in socks))
    server.close()
    await server.wait_closed()
    return elapsed, (after - before) * 1024 / n  # ru_maxrss is in KiB on Linux


async def stream(markers: bool, seconds: float) -> float:
    got = 0
    done = asyncio.Event()

    async def sink(sock: MpaSocket) -> None:
        nonlocal got
        async for ulpdu in sock:
            got += len(ulpdu)
        done.set()

    config = MpaConfig(markers=markers)
    server = await serve(sink, "127.0.0.1", 0, config=config)
    port = server.sockets[0].getsockname()[1]
    sock = await connect("127.0.0.1", port, config=config)
    payload = bytes(1400)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        sock.send_many([payload] * 64)
        await sock.drain()
    await sock.close()
    await done.wait()
    elapsed = time.perf_counter() - start
    server.close()
    await server.wait_closed()
    return got / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    print(f"in-memory handshakes (Rev 2, RFC 6581): {handshakes(args.seconds):,.0f}/s")
    elapsed, per = asyncio.run(many(args.connections))
    print(
        f"loopback: {args.connections} concurrent connections set up and echoed once "
        f"in {elapsed:.2f} s ({args.connections / elapsed:,.0f}/s), "
        f"~{per / 1024:.1f} KiB peak RSS growth per connection (both ends)"
    )
    for markers in (False, True):
        rate = asyncio.run(stream(markers, args.seconds))
        print(f"loopback stream, 1400-octet ULPDUs, CRC on, markers {markers}: {rate:.0f} MB/s")


if __name__ == "__main__":
    main()
