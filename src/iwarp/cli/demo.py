"""``iwarp demo``: a responder and an initiator on loopback, RDMA both ways.

It negotiates MPA Rev 2 (RFC 6581) with CRC, markers on request, then moves
data with Send, RDMA Write and RDMA Read, checks every byte (SHA-256 of
what arrived against what was sent) and reports the negotiated parameters,
the operations, the octets and the throughput. Each record is printed as
soon as it is known, as ``type: key=value`` lines or, with ``--json``, one
JSON object per line: the connection, each operation (with ``verified``
and the ``sha256`` of what arrived), a summary. An interrupted run keeps
what it printed; the operation it stopped in is ``not checked
(interrupted)`` (``verified`` null in JSON), not a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
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
from iwarp.cli._args import SIZE_HELP, count, rate_mib_per_s, size
from iwarp.cli._capture import add_pcap_option, pcap_capture
from iwarp.cli._progress import Progress, WireOctets, add_progress_options
from iwarp.cli._report import RecordPrinter
from iwarp.cli._run import run_interruptible
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import MpaParams
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.memory import MemoryRegion
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
    parser.add_argument(
        "--size", type=size, default=1 << 20, help=f"message size (default 1MiB; {SIZE_HELP})"
    )
    parser.add_argument(
        "--count", type=count, default=16, help="messages per operation (default 16)"
    )
    parser.add_argument("--markers", action="store_true", help="ask for MPA markers both ways")
    parser.add_argument("--no-crc", action="store_true", help="do not use CRC32C")
    parser.add_argument("--p2p", choices=tuple(_RTR), help="RFC 6581 peer-to-peer with this RTR")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    add_progress_options(parser)
    add_pcap_option(parser)
    parser.set_defaults(func=run)


@dataclass
class OpResult:
    """One operation's outcome; ``verified`` is None when it was not
    checked (the run was interrupted before its data had all arrived)."""

    op: str
    messages: int
    octets: int
    seconds: float
    verified: bool | None
    sha256: str

    def as_json(self) -> dict[str, object]:
        return {
            "type": "operation",
            "op": self.op,
            "messages": self.messages,
            "octets": self.octets,
            "seconds": round(self.seconds, 6),
            "mib_per_s": rate_mib_per_s(self.octets, self.seconds),
            "verified": self.verified,
            "sha256": self.sha256,
            "sha256_of": "arrived",
        }


#: ``verified`` as the human layout says it.
_VERDICT = {True: "yes", False: "NO", None: "not checked (interrupted)"}


def _emit(out: RecordPrinter, record: dict[str, object]) -> None:
    if not out.json and "verified" in record:
        record = {**record, "verified": _VERDICT[record["verified"]]}  # type: ignore[index]
    out.emit(record)


#: Octets of buffers each operation keeps at once (at least one message):
#: memory stays a few buffers of --size however large --count is.
WINDOW_OCTETS = 32 << 20


def run(args: argparse.Namespace) -> int:
    if args.size < 0 or args.count < 1:
        print("iwarp demo: --size must be >= 0 and --count >= 1", file=sys.stderr)
        return 2
    results: list[OpResult] = []
    current: list[_Op] = []
    out = RecordPrinter(args.json)

    def interrupted(why: str) -> None:
        # What finished was printed; the operation under way was not checked.
        unchecked = [op.result(checked=False) for op in current[-1:] if not op.finished]
        for result in unchecked:
            _emit(out, result.as_json())
        _summary(out, results + unchecked, interrupted=why)

    return run_interruptible(_demo(args, out, results, current), interrupted)


class _Op:
    """Counts and hashes one operation as it runs (what was sent, what arrived)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages = 0
        self.octets = 0
        self._sent = hashlib.sha256()
        self._got = hashlib.sha256()
        self._sizes_match = True
        self._start = time.perf_counter()
        self.seconds = 0.0
        self.finished = False

    def sent(self, data: bytes | memoryview) -> None:
        self._sent.update(data)

    def arrived(self, data: bytes | memoryview, expected: int) -> None:
        self._got.update(data)
        self.messages += 1
        self.octets += len(data)
        self._sizes_match &= len(data) == expected

    def result(self, *, checked: bool = True) -> OpResult:
        """The outcome so far; ``checked=False``: not verified (yet)."""
        seconds = self.seconds or time.perf_counter() - self._start
        got = self._got.hexdigest()
        verified = got == self._sent.hexdigest() and self._sizes_match if checked else None
        return OpResult(self.name, self.messages, self.octets, seconds, verified, got)

    def finish(self) -> OpResult:
        self.seconds = time.perf_counter() - self._start
        self.finished = True
        return self.result()


class _Messages:
    """Message ``i`` is a window into one random buffer (``size`` + 8 per
    message): distinct messages without holding them all."""

    def __init__(self, size: int, count: int) -> None:
        self.size = size
        self._data = memoryview(os.urandom(size + 8 * count))

    def __getitem__(self, index: int) -> memoryview:
        return self._data[8 * index : 8 * index + self.size]


async def _demo(
    args: argparse.Namespace, out: RecordPrinter, results: list[OpResult], current: list[_Op]
) -> int:
    async with pcap_capture(args.pcap):
        return await _run_ops(args, out, results, current)


async def _run_ops(
    args: argparse.Namespace, out: RecordPrinter, results: list[OpResult], current: list[_Op]
) -> int:
    size, count = args.size, args.count
    window = max(1, min(count, WINDOW_OCTETS // max(size, 1)))
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
    # The responder's memory: a window of slots the initiator may write and read.
    server_pd = ProtectionDomain()
    target = bytearray(max(size, 1) * window)
    target_mr = server_pd.register(
        target, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ, address=0x100000
    )
    inbox: asyncio.Queue[bytes] = asyncio.Queue()
    release = asyncio.Event()

    async def handler(qp: QueuePair) -> None:
        with contextlib.suppress(ConnectionTerminatedError):
            while not release.is_set():
                await inbox.put(await qp.receive())

    # Sends come in windows, so a few buffers always suffice (the pool
    # reposts each buffer as its message completes).
    server = await serve(
        handler,
        "127.0.0.1",
        0,
        pd=server_pd,
        config=responder,
        receive_buffers=min(count, max(2, window)),
        receive_size=max(size, 1),
    )
    port = server.sockets[0].getsockname()[1]
    qp = await connect("127.0.0.1", port, config=initiator)
    _emit(out, _connection(f"127.0.0.1:{port}", qp.params))
    messages = _Messages(size, count)

    def counters() -> tuple[int, int]:
        done = [*results, *(op.result() for op in current[-1:])]
        return sum(r.messages for r in done), sum(r.octets for r in done)

    # The initiator's connection carries every operation, either way.
    wire = WireOctets()
    wire.add(qp.get_extra_info("socket"))
    progress = Progress(
        counters, forced=args.progress, quiet=args.json, interval=args.interval, wire=wire
    )
    progress.start()
    try:
        # Send: each message into one of the responder's posted receive buffers.
        op = _begin(current, "send")
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            for i in batch:
                op.sent(messages[i])
                await qp.send(messages[i])
            for _ in batch:
                op.arrived(await inbox.get(), size)
        _finished(out, results, op)

        # RDMA Write: a window of messages side by side into the responder's
        # slots; a Send after them (delivered once they are placed) lets the
        # responder's memory be checked before the next window.
        op = _begin(current, "rdma_write")
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            writes = []
            for slot, i in enumerate(batch):
                op.sent(messages[i])
                writes.append(
                    qp.rdma_write(messages[i], target_mr.stag, _to(target_mr, slot, size))
                )
            await asyncio.gather(*writes)
            await qp.send(b"")
            await inbox.get()
            for slot in range(len(batch)):
                op.arrived(memoryview(target)[slot * size : (slot + 1) * size], size)
        _finished(out, results, op)

        # RDMA Read: the responder's slots read back into the initiator's memory.
        sink = qp.register(bytearray(max(size, 1) * window), Access.LOCAL_WRITE)
        op = _begin(current, "rdma_read")
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            for slot, i in enumerate(batch):
                target[slot * size : (slot + 1) * size] = messages[i]
                op.sent(messages[i])
            for slot in range(len(batch)):
                local = Sge(sink, slot * size, size)
                await qp.rdma_read(local, target_mr.stag, _to(target_mr, slot, size))
                op.arrived(sink.view[slot * size : (slot + 1) * size], size)
        _finished(out, results, op)
    finally:
        progress.stop()

    release.set()
    await qp.close()
    server.close()
    await server.wait_closed()
    _summary(out, results)
    return 0 if all(r.verified for r in results) else 1


def _begin(current: list[_Op], name: str) -> _Op:
    op = _Op(name)
    current[:] = [op]
    return op


def _finished(out: RecordPrinter, results: list[OpResult], op: _Op) -> None:
    result = op.finish()
    results.append(result)
    _emit(out, result.as_json())


def _to(region: MemoryRegion, slot: int, size: int) -> int:
    return int(region.address) + slot * size


def _connection(responder: str, params: MpaParams) -> dict[str, object]:
    """The first record: who talks to whom, and what MPA negotiated."""
    rtr = (
        params.rtr.name.lower() if params.peer_to_peer and params.rtr and params.rtr.name else None
    )
    return {
        "type": "connection",
        "responder": responder,
        "initiator": "127.0.0.1",
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


def _summary(
    out: RecordPrinter, results: list[OpResult], *, interrupted: str | None = None
) -> None:
    """The last record: octets, time and rate over the operations, and
    whether every byte was verified (None: not all of it was checked)."""
    verdicts = {r.verified for r in results}
    verified = False if False in verdicts else (None if None in verdicts else True)
    total = sum(r.octets for r in results)
    seconds = sum(r.seconds for r in results)
    summary: dict[str, object] = {
        "type": "summary",
        "octets": total,
        "seconds": round(seconds, 6),
        "mib_per_s": rate_mib_per_s(total, seconds),
        "verified": verified,
    }
    if interrupted is not None:
        summary["interrupted"] = interrupted
    out.closed = True
    _emit(out, summary)
