"""A deterministic, realistic large iWARP capture, for benchmarks and tests.

    python bench/make_capture.py OUT.pcap --size 2G [--seed 1] [--manifest OUT.json]

Many MPA connections run at once and are interleaved in bursts, as a
capture point on a busy link sees them; new ones start as others end until
the file reaches ``--size``. Each connection has its own mix, drawn from
the seed:

* MSS 1460 (MTU 1500) or 8960 (jumbo frames); Rev 1 or Rev 2 frames;
  CRCs on (mostly) or off; markers in none, one or both directions;
* FPDUs aligned to TCP segments (as iWARP NICs send them), or larger FPDUs
  cut anywhere by the MSS (as a software stack with segmentation offload);
* RDMA Writes (4 KiB to 1 MiB), Sends both ways, RDMA Reads (Read Request,
  then Read Responses after a delay), and at the end of some a Terminate;
* TCP: pure ACKs, a few retransmitted segments, a few pairs of segments
  swapped (reordering); a few small connections that only exchange Sends.

Every octet on the wire comes from the project's encoders (DDP/RDMAP
headers, :class:`~iwarp.mpa.framing.FpduEncoder`). IP and TCP checksums
are left zero (as captured on a host with checksum offload). The manifest
(``--manifest``, JSON) lists what was sent: per connection and direction,
FPDUs, messages and payload octets per opcode, Reads, Terminates,
retransmitted and reordered segments; a decode must find exactly that.

Never commit a generated capture: make it on demand (it is deterministic).
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final

from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.mpa.framing import FpduEncoder, fpdu_wire_size
from iwarp.mpa.wire import EnhancedData, FrameFlags, MpaFrame, Revision, RtrFlags
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest, TerminateHeader, rdmap_control

_PCAP_HEADER: Final = struct.Struct("<IHHiIII")
_RECORD: Final = struct.Struct("<IIII")
_ETH_IP_TCP: Final = struct.Struct("!6s6sHBBHHHBBH4s4sHHIIBBHHH")
_SYN, _FIN, _PSH, _ACK = 0x02, 0x01, 0x08, 0x10
_MASK: Final = 0xFFFFFFFF
_LINK_BPS: Final = 25e9  # the capture link's rate, for timestamps
_NAMES: Final = {op: op.name for op in RdmapOpcode}


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


@dataclass
class DirectionCounts:
    """What one direction sent, for the manifest."""

    fpdus: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    octets: dict[str, int] = field(default_factory=dict)
    reads: int = 0
    terminates: int = 0
    retransmitted: int = 0
    reordered: int = 0
    data_segments: int = 0
    tcp_octets: int = 0

    def count(self, name: str, payload: int, last: bool) -> None:
        self.fpdus[name] = self.fpdus.get(name, 0) + 1
        self.octets[name] = self.octets.get(name, 0) + payload
        if last:
            self.messages[name] = self.messages.get(name, 0) + 1


@dataclass
class Conn:
    """One connection's plan and state."""

    index: int
    client: bytes
    server: bytes
    cport: int
    sport: int
    mss: int
    crc: bool
    markers: tuple[bool, bool]  # in FPDUs initiator->responder, responder->initiator
    aligned: bool
    rev: int
    budget: int  # octets of payload to send before closing
    small: bool
    isn: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    encoders: list[FpduEncoder] = field(default_factory=list)
    counts: list[DirectionCounts] = field(
        default_factory=lambda: [DirectionCounts(), DirectionCounts()]
    )
    msn: list[int] = field(default_factory=lambda: [1, 1])
    read_msn: list[int] = field(default_factory=lambda: [1, 1])
    #: Octets of a cut stream not yet sent (non-aligned connections), per direction.
    pending: list[bytearray] = field(default_factory=lambda: [bytearray(), bytearray()])
    #: Data segments since the last ACK, per direction.
    unacked: list[int] = field(default_factory=lambda: [0, 0])
    sent: int = 0

    def mulpdu(self, direction: int) -> int:
        """The largest ULPDU that fills one segment (aligned) or a 16 KiB FPDU."""
        emss = self.mss if self.aligned else 16384
        markers = self.markers[direction]
        n = emss - 8 - (4 * (emss // 512 + 2) if markers else 0)
        n -= n % 4
        while fpdu_wire_size(n, 511 if markers else 0, markers=markers) > emss:
            n -= 4
        return n


class Writer:
    """pcap records: Ethernet + IPv4 + TCP around each payload."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.clock = 1_700_000_000.0
        self.ip_id = 0
        self.written = _PCAP_HEADER.size
        self.frames = 0
        out.write(_PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))

    def packet(
        self,
        conn: Conn,
        direction: int,
        seq: int,
        ack: int,
        flags: int,
        payload: bytes | bytearray | memoryview = b"",
    ) -> bytes:
        """The frame of one segment (not written yet: see :meth:`write`)."""
        client = direction == 0
        src, dst = (conn.client, conn.server) if client else (conn.server, conn.client)
        sport, dport = (conn.cport, conn.sport) if client else (conn.sport, conn.cport)
        self.ip_id = (self.ip_id + 1) & 0xFFFF
        header = _ETH_IP_TCP.pack(
            b"\x02\x00\x00\x00\x00\x01" if client else b"\x02\x00\x00\x00\x00\x02",
            b"\x02\x00\x00\x00\x00\x02" if client else b"\x02\x00\x00\x00\x00\x01",
            0x0800,
            0x45,
            0,
            40 + len(payload),
            self.ip_id,
            0x4000,
            64,
            6,
            0,
            src,
            dst,
            sport,
            dport,
            seq & _MASK,
            ack & _MASK,
            0x50,
            flags,
            65535,
            0,
            0,
        )
        return header + bytes(payload)

    def write(self, frame: bytes) -> None:
        self.clock += len(frame) * 8 / _LINK_BPS + 2e-7
        seconds = int(self.clock)
        micros = int((self.clock - seconds) * 1e6)
        self.out.write(_RECORD.pack(seconds, micros, len(frame), len(frame)))
        self.out.write(frame)
        self.written += _RECORD.size + len(frame)
        self.frames += 1


#: Connection mixes: ``default`` as above; ``marked``: every other connection
#: with markers both ways and every one with FPDUs cut anywhere by the MSS;
#: ``ethernet``: the default's draws with every connection at MSS 1460 (MTU
#: 1500), where the analyzer's cost is per packet rather than per octet.
MIXES: Final = ("default", "marked", "ethernet")


class Generator:
    def __init__(self, seed: int, size: int, concurrent: int, mix: str = "default") -> None:
        if mix not in MIXES:
            raise ValueError(f"unknown mix {mix!r} (one of {', '.join(MIXES)})")
        self.mix = mix
        self.rng = random.Random(seed)
        self.size = size
        self.concurrent = concurrent
        self.data = self.rng.randbytes(1 << 20)
        self.conns: list[Conn] = []

    # -- plans ----------------------------------------------------------------

    def new_conn(self) -> Conn:
        rng = self.rng
        index = len(self.conns)
        small = rng.random() < 0.15
        markers = rng.choice([(False, False)] * 4 + [(True, True), (True, False), (False, True)])
        aligned = rng.random() < 0.65
        if self.mix == "marked":
            markers = (True, True) if index % 2 == 0 else (False, False)
            aligned = False
        mss = rng.choice([1460, 1460, 1460, 8960])
        if self.mix == "ethernet":
            mss = 1460
        conn = Conn(
            index=index,
            client=bytes([10, 0, (index >> 8) & 0xFF, index & 0xFF]),
            server=bytes([10, 1, 0, 1 + index % 4]),
            cport=20000 + index % 40000,
            sport=4791,
            mss=mss,
            crc=rng.random() < 0.9,
            markers=markers,
            aligned=aligned,
            rev=rng.choice([Revision.REV1, Revision.REV2]),
            budget=rng.randint(2_000, 40_000) if small else rng.randint(8 << 20, 64 << 20),
            small=small,
        )
        self.conns.append(conn)
        return conn

    def run(self, writer: Writer) -> None:
        active: list[tuple[Conn, Iterator[list[bytes]]]] = []
        while writer.written < self.size or active:
            while writer.written < self.size and len(active) < self.concurrent:
                conn = self.new_conn()
                bursts = self.connection(conn, writer)
                for frame in next(bursts):  # the SYNs: streams numbered as created
                    writer.write(frame)
                active.append((conn, bursts))
            if writer.written >= self.size:
                for conn, _ in active:
                    conn.budget = 0  # finish the current operation, then close
            k = self.rng.randrange(len(active))
            try:
                for frame in next(active[k][1]):
                    writer.write(frame)
            except StopIteration:
                active.pop(k)

    # -- one connection, as bursts of frames ------------------------------------

    def connection(self, conn: Conn, writer: Writer) -> Iterator[list[bytes]]:
        rng = self.rng
        conn.isn = [rng.getrandbits(32), rng.getrandbits(32)]
        conn.seq = [conn.isn[0] + 1, conn.isn[1] + 1]
        yield [
            writer.packet(conn, 0, conn.isn[0], 0, _SYN),
            writer.packet(conn, 1, conn.isn[1], conn.seq[0], _SYN | _ACK),
            writer.packet(conn, 0, conn.seq[0], conn.seq[1], _ACK),
        ]
        yield self.handshake(conn, writer)
        # Workload: bursts until the budget is spent.
        while conn.sent < conn.budget:
            burst = self.operation(conn, writer)
            if burst:
                yield burst
        if not conn.small and rng.random() < 0.3:
            yield self.terminate(conn, writer)
        flush = self.flush(conn, writer, 0) + self.flush(conn, writer, 1)
        if flush:
            yield flush
        yield [
            writer.packet(conn, 0, conn.seq[0], conn.seq[1], _FIN | _ACK),
            writer.packet(conn, 1, conn.seq[1], conn.seq[0] + 1, _FIN | _ACK),
            writer.packet(conn, 0, conn.seq[0] + 1, conn.seq[1] + 1, _ACK),
        ]

    def handshake(self, conn: Conn, writer: Writer) -> list[bytes]:
        def frame(request: bool, markers: bool) -> MpaFrame:
            flags = FrameFlags(0)
            if markers:
                flags |= FrameFlags.MARKERS
            if conn.crc:
                flags |= FrameFlags.CRC
            private = b"iwarp"
            if conn.rev == Revision.REV2:
                flags |= FrameFlags.ENHANCED
                private = EnhancedData(16, 16, RtrFlags(0)).pack() + private
            return MpaFrame(
                is_request=request, flags=flags, revision=conn.rev, private_data=private
            )

        # M in a frame asks for markers in FPDUs sent *to* its sender.
        request = frame(True, conn.markers[1]).pack()
        reply = frame(False, conn.markers[0]).pack()
        frames = [
            writer.packet(conn, 0, conn.seq[0], conn.seq[1], _PSH | _ACK, request),
            writer.packet(conn, 1, conn.seq[1], conn.seq[0] + len(request), _PSH | _ACK, reply),
        ]
        conn.seq[0] += len(request)
        conn.seq[1] += len(reply)
        conn.counts[0].tcp_octets += len(request)
        conn.counts[1].tcp_octets += len(reply)
        conn.encoders = [
            FpduEncoder(markers=conn.markers[d], crc=conn.crc, origin=conn.seq[d] & _MASK)
            for d in (0, 1)
        ]
        return frames

    def operation(self, conn: Conn, writer: Writer) -> list[bytes]:
        rng = self.rng
        roll = rng.random()
        if conn.small or roll < 0.25:
            direction = rng.randrange(2)
            return self.send(conn, writer, direction, rng.randint(16, 4096))
        if roll < 0.80:
            size = rng.choice([4096, 65536, 65536, 262144, 1 << 20])
            return self.rdma_write(conn, writer, 0, size)
        return self.rdma_read(conn, writer, rng.choice([4096, 65536, 262144]))

    # -- messages ---------------------------------------------------------------------

    def _payload(self, n: int) -> bytes:
        at = self.rng.randrange(0, (1 << 20) - n) if n < (1 << 20) else 0
        return self.data[at : at + n]

    def send(self, conn: Conn, writer: Writer, direction: int, size: int) -> list[bytes]:
        msn = conn.msn[direction]
        conn.msn[direction] += 1
        opcode = RdmapOpcode.SEND if self.rng.random() < 0.7 else RdmapOpcode.SEND_WITH_SE
        chunk = conn.mulpdu(direction) - 18
        ulpdus = []
        for mo in range(0, max(size, 1), chunk):
            last = mo + chunk >= size
            body = self._payload(min(chunk, size - mo))
            header = UntaggedHeader(qn=0, msn=msn, mo=mo, last=last, rsvdulp=rdmap_control(opcode))
            ulpdus.append((header.pack() + body, _NAMES[opcode], len(body), last))
        return self.emit(conn, writer, direction, ulpdus)

    def rdma_write(self, conn: Conn, writer: Writer, direction: int, size: int) -> list[bytes]:
        chunk = conn.mulpdu(direction) - 14
        stag, base = 0x1000 + conn.index, 0x10000
        ulpdus = []
        for off in range(0, size, chunk):
            last = off + chunk >= size
            body = self._payload(min(chunk, size - off))
            header = TaggedHeader(
                stag=stag, to=base + off, last=last, rsvdulp=rdmap_control(RdmapOpcode.RDMA_WRITE)
            )
            ulpdus.append((header.pack() + body, "RDMA_WRITE", len(body), last))
        return self.emit(conn, writer, direction, ulpdus)

    def rdma_read(self, conn: Conn, writer: Writer, size: int) -> list[bytes]:
        msn = conn.read_msn[0]
        conn.read_msn[0] += 1
        sink, source = 0x2000 + conn.index, 0x3000 + conn.index
        request = (
            UntaggedHeader(
                qn=1, msn=msn, mo=0, last=True, rsvdulp=rdmap_control(RdmapOpcode.RDMA_READ_REQUEST)
            ).pack()
            + ReadRequest(sink_stag=sink, sink_to=0, size=size, src_stag=source, src_to=0).pack()
        )
        frames = self.emit(conn, writer, 0, [(request, "RDMA_READ_REQUEST", 28, True)])
        frames += self.flush(conn, writer, 0)
        conn.counts[0].reads += 1
        chunk = conn.mulpdu(1) - 14
        ulpdus = []
        for off in range(0, size, chunk):
            last = off + chunk >= size
            body = self._payload(min(chunk, size - off))
            header = TaggedHeader(
                stag=sink, to=off, last=last, rsvdulp=rdmap_control(RdmapOpcode.RDMA_READ_RESPONSE)
            )
            ulpdus.append((header.pack() + body, "RDMA_READ_RESPONSE", len(body), last))
        # The responder answers after the request was seen (other traffic in between).
        return frames + self.emit(conn, writer, 1, ulpdus) + self.flush(conn, writer, 1)

    def terminate(self, conn: Conn, writer: Writer) -> list[bytes]:
        layer, etype, code = self.rng.choice([(1, 1, 0x00), (0, 1, 0x01), (2, 0, 2), (0, 2, 0x06)])
        header = UntaggedHeader(
            qn=2, msn=1, mo=0, last=True, rsvdulp=rdmap_control(RdmapOpcode.TERMINATE)
        )
        body = TerminateHeader(layer, etype, code).pack()
        conn.counts[1].terminates += 1
        return self.emit(conn, writer, 1, [(header.pack() + body, "TERMINATE", len(body), True)])

    # -- FPDUs into segments --------------------------------------------------------------

    def emit(
        self,
        conn: Conn,
        writer: Writer,
        direction: int,
        ulpdus: list[tuple[bytes, str, int, bool]],
    ) -> list[bytes]:
        encoder = conn.encoders[direction]
        counts = conn.counts[direction]
        segments: list[bytes] = []
        for ulpdu, name, payload, last in ulpdus:
            fpdu = encoder.encode_bytes(ulpdu)
            counts.count(name, payload, last)
            conn.sent += len(fpdu)
            if conn.aligned:
                segments.append(fpdu)
            else:
                pending = conn.pending[direction]
                pending += fpdu
                while len(pending) >= conn.mss:
                    segments.append(bytes(pending[: conn.mss]))
                    del pending[: conn.mss]
        return self.segments(conn, writer, direction, segments)

    def flush(self, conn: Conn, writer: Writer, direction: int) -> list[bytes]:
        pending = conn.pending[direction]
        if not pending:
            return []
        segment = bytes(pending)
        pending.clear()
        return self.segments(conn, writer, direction, [segment])

    def segments(
        self, conn: Conn, writer: Writer, direction: int, payloads: list[bytes]
    ) -> list[bytes]:
        """Frames for the payloads in order, with ACKs back, a few retransmissions
        and a few swapped pairs."""
        rng = self.rng
        counts = conn.counts[direction]
        peer = 1 - direction
        out: list[bytes] = []
        retransmit: deque[tuple[int, bytes]] = deque()  # (frames from now, frame)
        i = 0
        while i < len(payloads):
            swap = i + 1 < len(payloads) and rng.random() < 0.002
            group = [payloads[i], payloads[i + 1]] if swap else [payloads[i]]
            frames = []
            for payload in group:
                frames.append(
                    writer.packet(
                        conn, direction, conn.seq[direction], conn.seq[peer], _ACK, payload
                    )
                )
                conn.seq[direction] += len(payload)
                counts.data_segments += 1
                counts.tcp_octets += len(payload)
            if swap:
                frames.reverse()
                counts.reordered += 1
            elif rng.random() < 0.001:
                retransmit.append((rng.randint(1, 4), frames[0]))
                counts.retransmitted += 1
            out += frames
            for _ in group:
                conn.unacked[direction] += 1
                if conn.unacked[direction] >= 2:
                    conn.unacked[direction] = 0
                    out.append(writer.packet(conn, peer, conn.seq[peer], conn.seq[direction], _ACK))
            while retransmit and retransmit[0][0] <= 0:
                out.append(retransmit.popleft()[1])
            retransmit = deque((n - 1, f) for n, f in retransmit)
            i += len(group)
        out += [f for _, f in retransmit]
        return out

    # -- manifest ------------------------------------------------------------------------

    def manifest(self, writer: Writer) -> dict[str, Any]:
        connections = []
        for conn in self.conns:
            connections.append(
                {
                    "stream": conn.index,
                    "mss": conn.mss,
                    "crc": conn.crc,
                    "markers": list(conn.markers),
                    "aligned": conn.aligned,
                    "rev": int(conn.rev),
                    "directions": [vars(c) for c in conn.counts],
                }
            )
        total: dict[str, Any] = {"fpdus": {}, "messages": {}, "octets": {}}
        for conn in self.conns:
            for c in conn.counts:
                for key in ("fpdus", "messages", "octets"):
                    for name, n in getattr(c, key).items():
                        total[key][name] = total[key].get(name, 0) + n
        for key in ("reads", "terminates", "retransmitted", "reordered", "data_segments"):
            total[key] = sum(getattr(c, key) for conn in self.conns for c in conn.counts)
        return {
            "frames": writer.frames,
            "octets": writer.written,
            "connections": len(self.conns),
            "total": total,
            "per_connection": connections,
        }


def make_capture(
    path: str, size: int, *, seed: int = 1, concurrent: int = 16, mix: str = "default"
) -> dict[str, Any]:
    """Write the capture to ``path``; returns its manifest."""
    generator = Generator(seed, size, concurrent, mix)
    with open(path, "wb", buffering=1 << 20) as out:
        writer = Writer(out)
        generator.run(writer)
    return generator.manifest(writer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="pcap file to write")
    parser.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("200M"),
        help="approximate file size (K, M, G suffixes; default 200M)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--concurrent", type=int, default=16, help="connections open at once (default 16)"
    )
    parser.add_argument(
        "--mix",
        choices=MIXES,
        default="default",
        help="connection mix: default (above), marked (every other connection with "
        "markers both ways, every FPDU stream cut anywhere by the MSS) or ethernet (the "
        "default's with every connection at MSS 1460, MTU 1500)",
    )
    parser.add_argument("--manifest", help="write what was sent as JSON here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    manifest = make_capture(
        args.out, args.size, seed=args.seed, concurrent=args.concurrent, mix=args.mix
    )
    elapsed = time.perf_counter() - started
    if args.manifest:
        with open(args.manifest, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
    print(
        f"{args.out}: {manifest['octets'] / 1e6:.1f} MB, {manifest['frames']} frames, "
        f"{manifest['connections']} connections, {manifest['total']['data_segments']} data "
        f"segments in {elapsed:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
