"""``iwarp demo``: a responder and an initiator on loopback, RDMA both ways.

It negotiates MPA Rev 2 (RFC 6581) with CRC, markers on request, then moves
data with Send, RDMA Write and RDMA Read, checks every byte (SHA-256 of
what arrived against what was sent) and reports the negotiated parameters,
the operations, the octets and the throughput. ``--json`` prints one JSON
object per line: the connection, each operation (with ``verified``), a
summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass

from iwarp.asyncio.rdma import (
    Access,
    ConnectionTerminatedError,
    ProtectionDomain,
    QueuePair,
    connect,
    serve,
)
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import MpaParams
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.work import Sge

_RTR = {"write": RtrFlags.WRITE, "read": RtrFlags.READ, "send": RtrFlags.SEND}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="RDMA over TCP on loopback: Send, RDMA Write, RDMA Read, every byte verified",
        description="Start an iWARP responder and initiator on 127.0.0.1, negotiate MPA Rev 2 "
        "with CRC32C (markers optional), move data with Send, RDMA Write and RDMA Read, "
        "verify every byte and report the negotiated parameters and throughput.",
    )
    parser.add_argument("--size", type=int, default=1 << 20, help="message size (1 MiB)")
    parser.add_argument("--count", type=int, default=16, help="messages per operation (16)")
    parser.add_argument("--markers", action="store_true", help="ask for MPA markers both ways")
    parser.add_argument("--no-crc", action="store_true", help="do not use CRC32C")
    parser.add_argument("--p2p", choices=tuple(_RTR), help="RFC 6581 peer-to-peer with this RTR")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=run)


@dataclass
class OpResult:
    op: str
    messages: int
    octets: int
    seconds: float
    verified: bool
    sha256: str

    def as_json(self) -> dict[str, object]:
        rate = self.octets / self.seconds / 1e6 if self.seconds > 0 else None
        return {
            "type": "operation",
            "op": self.op,
            "messages": self.messages,
            "octets": self.octets,
            "seconds": round(self.seconds, 6),
            "mb_per_s": None if rate is None else round(rate, 1),
            "verified": self.verified,
            "sha256": self.sha256,
        }


def run(args: argparse.Namespace) -> int:
    if args.size < 0 or args.count < 1:
        print("iwarp demo: --size must be >= 0 and --count >= 1", file=sys.stderr)
        return 2
    return asyncio.run(asyncio.wait_for(_demo(args), 300))


async def _demo(args: argparse.Namespace) -> int:
    size, count = args.size, args.count
    p2p = args.p2p is not None
    initiator = MpaConfig(
        crc=not args.no_crc,
        markers=args.markers,
        peer_to_peer=p2p,
        rtr_types=_RTR[args.p2p] if p2p else RtrFlags.WRITE | RtrFlags.READ,
    )
    responder = MpaConfig(
        crc=not args.no_crc,
        markers=args.markers,
        rtr_types=RtrFlags.WRITE | RtrFlags.READ | RtrFlags.SEND,
    )
    # The responder's memory: one region the initiator may write and read.
    server_pd = ProtectionDomain()
    target = bytearray(size * count)
    target_mr = server_pd.register(
        target, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ, address=0x100000
    )
    inbox: asyncio.Queue[bytes] = asyncio.Queue()
    release = asyncio.Event()

    async def handler(qp: QueuePair) -> None:
        with contextlib.suppress(ConnectionTerminatedError):
            while not release.is_set():
                await inbox.put(await qp.receive())

    server = await serve(
        handler,
        "127.0.0.1",
        0,
        pd=server_pd,
        config=responder,
        receive_buffers=min(count, 64),
        receive_size=max(size, 1),
    )
    port = server.sockets[0].getsockname()[1]
    qp = await connect("127.0.0.1", port, config=initiator)
    messages = [os.urandom(size) for _ in range(count)]
    results: list[OpResult] = []

    # Send: each message into one of the responder's posted receive buffers.
    start = time.perf_counter()
    for message in messages:
        await qp.send(message)
    received = [await inbox.get() for _ in range(count)]
    results.append(_result("send", messages, received, time.perf_counter() - start))

    # RDMA Write: all messages side by side into the responder's region.
    start = time.perf_counter()
    writes = [
        qp.rdma_write(m, target_mr.stag, target_mr.address + i * size)
        for i, m in enumerate(messages)
    ]
    await asyncio.gather(*writes)
    await qp.send(b"")  # a Send after the Writes: they are placed when it is delivered
    await inbox.get()
    placed = [bytes(target[i * size : (i + 1) * size]) for i in range(count)]
    results.append(_result("rdma_write", messages, placed, time.perf_counter() - start))

    # RDMA Read: read the region back into the initiator's own memory.
    sink = qp.register(bytearray(size * count), Access.LOCAL_WRITE)
    start = time.perf_counter()
    for i in range(count):
        await qp.rdma_read(Sge(sink, i * size, size), target_mr.stag, target_mr.address + i * size)
    read = [bytes(sink.view[i * size : (i + 1) * size]) for i in range(count)]
    results.append(_result("rdma_read", messages, read, time.perf_counter() - start))

    params = qp.params
    release.set()
    await qp.close()
    server.close()
    await server.wait_closed()
    _report(args, params, results)
    return 0 if all(r.verified for r in results) else 1


def _result(op: str, sent: list[bytes], got: list[bytes], seconds: float) -> OpResult:
    digest = hashlib.sha256()
    for message in got:
        digest.update(message)
    expected = hashlib.sha256(b"".join(sent)).hexdigest()
    return OpResult(
        op=op,
        messages=len(got),
        octets=sum(len(m) for m in got),
        seconds=seconds,
        verified=digest.hexdigest() == expected and [len(m) for m in got] == [len(m) for m in sent],
        sha256=digest.hexdigest(),
    )


def _report(args: argparse.Namespace, params: MpaParams, results: list[OpResult]) -> None:
    rtr = (
        params.rtr.name.lower() if params.peer_to_peer and params.rtr and params.rtr.name else None
    )
    connection = {
        "type": "connection",
        "revision": params.revision,
        "crc": params.crc,
        "markers_send": params.markers_send,
        "markers_receive": params.markers_receive,
        "ird": params.ird,
        "ord": params.ord,
        "mulpdu": params.mulpdu,
        "peer_to_peer": params.peer_to_peer,
        "rtr": rtr,
    }
    verified = all(r.verified for r in results)
    total = sum(r.octets for r in results)
    seconds = sum(r.seconds for r in results)
    if args.json:
        print(json.dumps(connection))
        for result in results:
            print(json.dumps(result.as_json()))
        summary = {
            "type": "summary",
            "octets": total,
            "seconds": round(seconds, 6),
            "verified": verified,
        }
        print(json.dumps(summary))
        return
    print("iWARP demo: responder and initiator on 127.0.0.1")
    print(
        f"  negotiated: MPA Rev {params.revision}, CRC32C {'on' if params.crc else 'off'}, "
        f"markers {'on' if params.markers_send else 'off'}, IRD {params.ird} / ORD "
        f"{params.ord}, MULPDU {params.mulpdu}" + (f", peer-to-peer with {rtr} RTR" if rtr else "")
    )
    for r in results:
        rate = f"{r.octets / r.seconds / 1e6:8.1f} MB/s" if r.seconds > 0 else "        -"
        print(
            f"  {r.op:<10} {r.messages:4d} x {args.size} octets = {r.octets:>10} octets "
            f"in {r.seconds * 1e3:8.1f} ms {rate}  verified: {'yes' if r.verified else 'NO'}"
        )
    print(f"  every byte verified: {'yes' if verified else 'NO'}")
