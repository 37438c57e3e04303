"""``iwarp demo``: a responder and an initiator on loopback, RDMA both ways.

It negotiates MPA Rev 2 (RFC 6581) with CRC, markers on request, then moves
data with Send, RDMA Write and RDMA Read, checks every byte (SHA-256 of
what arrived against what was sent) and reports the negotiated parameters,
the operations, the octets and the throughput. Each record is printed as
soon as it is known, as ``type: key=value`` lines or, with ``--json``, one
JSON object per line: the connection, each operation (with ``verified``
and the ``sha256`` of what arrived), a summary. Each message is compared
with what was sent as it arrives, so a run cut short (Ctrl-C, SIGTERM, the
connection lost) says how much it checked: the operation it stopped in and
the summary count the messages and octets checked, ``verified`` says
``interrupted: N of M messages checked`` (null in JSON, with
``interrupted``), never ``yes``, and the exit status is not 0.
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
from iwarp.cli._run import CommandStoppedError, run_interruptible
from iwarp.errors import IwarpError
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
        "verify every byte and report the negotiated parameters and throughput. Stopped "
        "early (Ctrl-C, SIGTERM, a lost connection) it reports how many messages and octets it "
        "checked, never verified=yes, and exits non-zero (130/143 for a signal, 1 otherwise).",
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
    """One operation's outcome: ``messages`` and ``octets`` arrived and were
    each compared with what was sent, of ``planned`` messages. ``verified``
    is True when all of them arrived and matched, False when one did not,
    None when the run was cut short with all it checked matching."""

    op: str
    messages: int
    octets: int
    seconds: float
    verified: bool | None
    sha256: str
    planned: int

    def as_json(self) -> dict[str, object]:
        return {
            "type": "operation",
            "op": self.op,
            "messages": self.messages,
            "planned_messages": self.planned,
            "octets": self.octets,
            "seconds": round(self.seconds, 6),
            "mib_per_s": rate_mib_per_s(self.octets, self.seconds),
            "verified": self.verified,
            "sha256": self.sha256,
            "sha256_of": "arrived",
        }


def _verdict(record: dict[str, object]) -> str:
    """``verified`` as the human layout says it: ``yes``, ``NO``, or how
    far a run cut short checked."""
    verified = record["verified"]
    if verified is True:
        return "yes"
    if verified is False:
        return "NO"
    return (
        f"interrupted: {record['messages']} of {record['planned_messages']} messages checked, "
        "all matched"
    )


def _emit(out: RecordPrinter, record: dict[str, object]) -> None:
    if not out.json and "verified" in record:
        record = {**record, "verified": _verdict(record)}
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
        # What finished was printed; the operation under way says how far
        # it checked, and the summary counts every message planned.
        partial = [op.result() for op in current[-1:] if not op.finished]
        for result in partial:
            _emit(out, result.as_json())
        _summary(out, results + partial, 3 * args.count, interrupted=why)

    return run_interruptible(_demo(args, out, results, current), interrupted)


class _Op:
    """One operation as it runs: each message that arrives is compared with
    the one sent (and hashed, for the report), so a run cut short knows
    exactly what it checked."""

    def __init__(self, name: str, planned: int) -> None:
        self.name = name
        self.planned = planned
        self.messages = 0
        self.octets = 0
        self.mismatched = 0
        self._got = hashlib.sha256()
        self._start = time.perf_counter()
        self.seconds = 0.0
        self.finished = False

    def arrived(self, data: bytes | memoryview, sent: memoryview) -> None:
        self._got.update(data)
        self.messages += 1
        self.octets += len(data)
        self.mismatched += not _same(data, sent)

    def result(self) -> OpResult:
        """The outcome so far (``verified`` None while not all arrived)."""
        seconds = self.seconds or time.perf_counter() - self._start
        verified: bool | None = None
        if self.mismatched:
            verified = False
        elif self.finished and self.messages == self.planned:
            verified = True
        got = self._got.hexdigest()
        return OpResult(self.name, self.messages, self.octets, seconds, verified, got, self.planned)

    def finish(self) -> OpResult:
        self.seconds = time.perf_counter() - self._start
        self.finished = True
        return self.result()


#: Octets compared at a time: memoryviews compare item by item (8 ms a MiB),
#: bytes by memcmp, so each piece is copied to bytes first: pieces under
#: malloc's mmap threshold reuse the same memory (no page faults, memory bounded).
_COMPARE_CHUNK = 1 << 16


def _same(got: bytes | memoryview, sent: memoryview) -> bool:
    """Whether ``got`` holds exactly the octets of ``sent``."""
    if len(got) != len(sent):
        return False
    view = memoryview(got)
    return all(
        bytes(view[at : at + _COMPARE_CHUNK]) == bytes(sent[at : at + _COMPARE_CHUNK])
        for at in range(0, len(sent), _COMPARE_CHUNK)
    )


class _Messages:
    """Message ``i`` is a window into one random buffer (``size`` + 8 per
    message): distinct messages without holding them all."""

    def __init__(self, size: int, count: int) -> None:
        self.size = size
        self._data = memoryview(os.urandom(size + 8 * count))

    def __getitem__(self, index: int) -> memoryview:
        return self._data[8 * index : 8 * index + self.size]


#: The summary's reason when the connection ended under the demo.
CONNECTION_LOST = "connection lost"


async def _demo(
    args: argparse.Namespace, out: RecordPrinter, results: list[OpResult], current: list[_Op]
) -> int:
    async with pcap_capture(args.pcap):
        try:
            return await _run_ops(args, out, results, current)
        except (IwarpError, OSError) as exc:
            # The peer gone (a reset, a Terminate): one line, then what was
            # checked until then, exit 1.
            raise CommandStoppedError(f"iwarp demo: {exc}", CONNECTION_LOST) from None


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
        op = _begin(current, "send", count)
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            for i in batch:
                await qp.send(messages[i])
            for i in batch:
                op.arrived(await inbox.get(), messages[i])
        _finished(out, results, op)

        # RDMA Write: a window of messages side by side into the responder's
        # slots; a Send after them (delivered once they are placed) lets the
        # responder's memory be checked before the next window.
        op = _begin(current, "rdma_write", count)
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            writes = []
            for slot, i in enumerate(batch):
                writes.append(
                    qp.rdma_write(messages[i], target_mr.stag, _to(target_mr, slot, size))
                )
            await asyncio.gather(*writes)
            await qp.send(b"")
            await inbox.get()
            for slot, i in enumerate(batch):
                op.arrived(memoryview(target)[slot * size : (slot + 1) * size], messages[i])
        _finished(out, results, op)

        # RDMA Read: the responder's slots read back into the initiator's memory.
        sink = qp.register(bytearray(max(size, 1) * window), Access.LOCAL_WRITE)
        op = _begin(current, "rdma_read", count)
        for first in range(0, count, window):
            batch = range(first, min(first + window, count))
            for slot, i in enumerate(batch):
                target[slot * size : (slot + 1) * size] = messages[i]
            for slot, i in enumerate(batch):
                local = Sge(sink, slot * size, size)
                await qp.rdma_read(local, target_mr.stag, _to(target_mr, slot, size))
                op.arrived(sink.view[slot * size : (slot + 1) * size], messages[i])
        _finished(out, results, op)
    finally:
        progress.stop()

    release.set()
    await qp.close()
    server.close()
    await server.wait_closed()
    _summary(out, results, 3 * count)
    return 0 if all(r.verified for r in results) else 1


def _begin(current: list[_Op], name: str, planned: int) -> _Op:
    op = _Op(name, planned)
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
    out: RecordPrinter, results: list[OpResult], planned: int, *, interrupted: str | None = None
) -> None:
    """The last record: messages and octets checked (of ``planned``
    messages), time and rate over the operations, and whether every byte
    was verified: True only when all ``planned`` arrived and matched (a run
    cut short is None, or False if a message did not match)."""
    verdicts = {r.verified for r in results}
    messages = sum(r.messages for r in results)
    if False in verdicts:
        verified: bool | None = False
    elif interrupted is None and verdicts == {True} and messages == planned:
        verified = True
    else:
        verified = None
    total = sum(r.octets for r in results)
    seconds = sum(r.seconds for r in results)
    summary: dict[str, object] = {
        "type": "summary",
        "messages": messages,
        "planned_messages": planned,
        "octets": total,
        "seconds": round(seconds, 6),
        "mib_per_s": rate_mib_per_s(total, seconds),
        "verified": verified,
    }
    if interrupted is not None:
        summary["interrupted"] = interrupted
    out.closed = True
    _emit(out, summary)
