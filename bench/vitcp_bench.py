"""VI/TCP throughput: the §3.6 CRC, the sans-IO endpoints, and loopback TCP.

Run: python bench/vitcp_bench.py [--seconds S]

1. CRC: octets/s of ``iwarp.vitcp.crc.crc`` (both bit orders) on 64 KiB
   segments, next to zlib.crc32 on the same octets (the floor it builds on).
2. Core: two VitcpConnections joined in memory; Sends of 1 MiB cut into
   segments of the MTU and reassembled, fed in 256 KiB reads as a socket
   delivers them, CRC off and on.
3. Loopback: the asyncio adapter over 127.0.0.1, 16 MiB Sends, Reliable
   Delivery and Reliable Reception, CRC off and on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import zlib
from collections.abc import Callable

from iwarp.asyncio.vitcp import VitcpListener, connect
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.crc import CrcOrder, crc
from iwarp.vitcp.wire import Reliability

READ_SIZE = 256 * 1024
MIB = 1 << 20


def rate(func: Callable[[], int], seconds: float) -> float:
    """Octets per second that ``func`` (returning octets handled) sustains."""
    func()
    done = 0
    start = time.perf_counter()
    while True:
        done += func()
        now = time.perf_counter()
        if now - start >= seconds:
            return done / (now - start)


def crc_rates(seconds: float) -> None:
    data = os.urandom(65536)
    for order in CrcOrder:
        r = rate(lambda o=order: len(crc(data, o)) and len(data), seconds)  # type: ignore[misc]
        print(f"crc {order.name:9}  64 KiB segments: {r / MIB:8.1f} MiB/s")
    floor = rate(lambda: zlib.crc32(data) and len(data), seconds)
    print(f"zlib.crc32 floor     64 KiB blocks:   {floor / MIB:8.1f} MiB/s")


def out(core: VitcpConnection) -> bytes:
    """What ``core`` has to send, joined."""
    return b"".join(bytes(part) for part in core.data_to_send())


def core_pair(config: VitcpConfig) -> tuple[VitcpConnection, VitcpConnection]:
    a = VitcpConnection(config, ViRole.ACTIVE)
    b = VitcpConnection(config, ViRole.PASSIVE)
    a.connect(0.0)
    b.tcp_accepted(0.0)
    a.tcp_established(0.0)
    b.receive_data(out(a), 0.0)
    b.match()
    b.accept()
    a.receive_data(out(b), 0.0)
    return a, b


def core_rates(seconds: float) -> None:
    message = os.urandom(MIB)
    for use_crc in (False, True):
        config = VitcpConfig(crc=use_crc, mtu=65000)
        a, b = core_pair(config)

        def one(a: VitcpConnection = a, b: VitcpConnection = b) -> int:
            b.post_receive(1)
            ack = out(b)
            if ack:  # b"" would mean FIN
                a.receive_data(ack, 0.0)
            a.send(message)
            wire = out(a)
            for i in range(0, len(wire), READ_SIZE):
                b.receive_data(wire[i : i + READ_SIZE], 0.0)
            return len(message)

        r = rate(one, seconds)
        print(
            f"core send+receive 1 MiB, MTU 65000, crc {'on ' if use_crc else 'off'}: "
            f"{r / MIB:8.1f} MiB/s"
        )


async def loopback(level: Reliability, use_crc: bool, seconds: float) -> float:
    config = VitcpConfig(reliability=level, crc=use_crc, mtu=65000)
    listener = await VitcpListener.start("127.0.0.1", 0, config=config)
    server = asyncio.create_task(listener.accept(b"bench", keep_posted=8))
    client = await connect("127.0.0.1", listener.port, b"bench", config=config)
    vi = await server
    data = os.urandom(16 * MIB)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        await client.send(data)
        await vi.receive()
        done += len(data)
    elapsed = time.perf_counter() - start
    await client.close()
    await listener.close()
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    args = parser.parse_args()
    crc_rates(args.seconds)
    core_rates(args.seconds)
    for level in (Reliability.DELIVERY, Reliability.RECEPTION):
        for use_crc in (False, True):
            r = asyncio.run(loopback(level, use_crc, args.seconds))
            print(
                f"loopback 16 MiB Sends, {level.name.lower():9}, crc "
                f"{'on ' if use_crc else 'off'}: {r / MIB:8.1f} MiB/s"
            )


if __name__ == "__main__":
    main()
