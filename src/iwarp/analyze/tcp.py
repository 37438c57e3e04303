"""TCP reassembly for the analyzer: each connection's two byte streams.

Offline, so simpler than a live receiver: every segment of a direction is
collected, then laid out by sequence number. The first copy of an octet is
kept (what a receiver commits, seed 000 §3.1.2); later copies that differ
are reported as conflicts. Retransmissions, segments that fill a hole (out
of order) and holes left at the end (octets the capture missed) are
counted and listed, so the MPA decoder can tell a gap from a protocol error.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from iwarp.analyze.capture import TCP_FIN, TCP_RST, TCP_SYN, TcpPacket

__all__ = ["ByteStream", "Connection", "HalfConnection", "track_connections"]

_MASK: Final = 0xFFFFFFFF
_HALF: Final = 1 << 31
_TCP_ACK: Final = 0x10
#: Octets of one direction the analyzer lays out; later data is ignored.
MAX_STREAM: Final = 1 << 30


def _signed(delta: int) -> int:
    return ((delta + _HALF) & _MASK) - _HALF


@dataclass
class HalfConnection:
    """One direction of a connection: the segments its sender sent."""

    src: str
    sport: int
    dst: str
    dport: int
    #: Sequence number of the SYN, if captured.
    isn: int | None = None
    fin: int | None = None
    reset: bool = False
    packets: list[TcpPacket] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{_host(self.src)}:{self.sport} -> {_host(self.dst)}:{self.dport}"

    def reassemble(self) -> ByteStream:
        return ByteStream.from_packets(self.packets, self.isn)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@dataclass
class Connection:
    """A TCP connection: ``index`` counts connections as Wireshark's tcp.stream."""

    index: int
    #: The side that sent the SYN (or the first packet, if no SYN was captured).
    client: HalfConnection
    server: HalfConnection
    syn_seen: bool = False


@dataclass
class ByteStream:
    """The octets of one direction, laid out from sequence number ``base``.

    Only captured octets are held (one buffer per run), so a capture whose
    sequence numbers jump far ahead costs no memory for the jump.
    """

    base: int
    #: Sorted, disjoint ``(lo, hi)`` ranges of captured octets.
    runs: list[tuple[int, int]]
    #: The octets of each run, in the order of ``runs``.
    chunks: list[bytearray]
    #: ``(offset, frame)`` of each segment that brought new octets, sorted.
    frames: list[tuple[int, int]]
    retransmissions: int = 0
    out_of_order: int = 0
    #: ``(frame, offset, length)`` of later copies that disagree with the first.
    conflicts: list[tuple[int, int, int]] = field(default_factory=list)
    #: Octets the capture missed: ``(lo, hi)``, including a missing tail before a FIN.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    #: Offset of the FIN, if captured.
    fin: int | None = None

    @classmethod
    def from_packets(cls, packets: Iterable[TcpPacket], isn: int | None) -> ByteStream:
        packets = list(packets)
        with_data = [p for p in packets if p.wire_length]
        if isn is not None:
            base = (isn + 1) & _MASK
        elif with_data:
            first = with_data[0].seq
            base = (first + min(_signed(p.seq - first) for p in with_data)) & _MASK
        else:
            base = 0
        stream = cls(base, [], [], [])
        segments: list[tuple[int, bytes, int]] = []
        for packet in packets:
            offset = _signed(packet.seq - base) + (1 if packet.flags & TCP_SYN else 0)
            if packet.flags & TCP_FIN:
                stream.fin = offset + len(packet.payload)
            if not packet.payload:
                continue
            payload = packet.payload
            if offset < 0:
                payload = payload[-offset:]
                offset = 0
            if payload and offset < MAX_STREAM:
                segments.append((offset, payload, packet.frame))
        stream._lay_out(segments)
        stream.gaps = stream._holes()
        return stream

    # -- layout ----------------------------------------------------------------

    def _lay_out(self, segments: list[tuple[int, bytes, int]]) -> None:
        """One buffer per final run, sized first so that no octet is copied
        twice whatever the order; then the segments in capture order."""
        for lo, hi in sorted((offset, offset + len(payload)) for offset, payload, _ in segments):
            if self.runs and lo <= self.runs[-1][1]:
                self.runs[-1] = (self.runs[-1][0], max(hi, self.runs[-1][1]))
            else:
                self.runs.append((lo, hi))
        self.chunks = [bytearray(hi - lo) for lo, hi in self.runs]
        written: list[tuple[int, int]] = []  # sorted, disjoint: octets laid out so far
        highest = 0
        for offset, payload, frame in segments:
            if not self._place(written, offset, payload, frame):
                self.retransmissions += 1
            elif offset < highest:
                self.out_of_order += 1
            highest = max(highest, offset + len(payload))

    def _place(
        self, written: list[tuple[int, int]], offset: int, payload: bytes, frame: int
    ) -> bool:
        """Write the octets of ``payload`` not written before (the first copy
        of an octet stays); returns whether there were any."""
        end = offset + len(payload)
        i = bisect_right(self.runs, (offset, _MASK << 32)) - 1  # the run holding it all
        run_lo, chunk = self.runs[i][0], self.chunks[i]
        # Written ranges overlapping or touching [offset, end] are written[k:m].
        k = bisect_left(written, (offset,))
        if k > 0 and written[k - 1][1] >= offset:
            k -= 1
        m = bisect_right(written, (end, _MASK << 32))
        fresh: list[tuple[int, int]] = []
        cursor = offset
        for lo, hi in written[k:m]:
            if lo > cursor:
                fresh.append((cursor, lo))
            seen_lo, seen_hi = max(lo, offset), min(hi, end)
            if seen_lo < seen_hi and (
                chunk[seen_lo - run_lo : seen_hi - run_lo]
                != payload[seen_lo - offset : seen_hi - offset]
            ):
                self.conflicts.append((frame, seen_lo, seen_hi - seen_lo))
            cursor = max(cursor, hi)
        if cursor < end:
            fresh.append((cursor, end))
        if not fresh:
            return False
        for lo, hi in fresh:
            chunk[lo - run_lo : hi - run_lo] = payload[lo - offset : hi - offset]
        self.frames.insert(bisect_right(self.frames, (offset, frame)), (offset, frame))
        merged_lo = min(offset, written[k][0]) if k < m else offset
        merged_hi = max(end, written[m - 1][1]) if k < m else end
        written[k:m] = [(merged_lo, merged_hi)]
        return True

    def _holes(self) -> list[tuple[int, int]]:
        holes = []
        cursor = 0
        for lo, hi in self.runs:
            if lo > cursor:
                holes.append((cursor, lo))
            cursor = hi
        if self.fin is not None and self.fin > cursor:
            holes.append((cursor, self.fin))
        return holes

    # -- queries ---------------------------------------------------------------

    @property
    def end(self) -> int:
        """Offset just past the last captured octet."""
        return self.runs[-1][1] if self.runs else 0

    def seq(self, offset: int) -> int:
        return (self.base + offset) & _MASK

    def offset_of(self, seq: int) -> int:
        return _signed(seq - self.base)

    def run_end(self, offset: int) -> int:
        """End of the captured run holding ``offset`` (``offset`` if none does)."""
        i = bisect_right(self.runs, (offset, _MASK << 32)) - 1
        if i >= 0 and self.runs[i][0] <= offset < self.runs[i][1]:
            return self.runs[i][1]
        return offset

    def next_captured(self, offset: int) -> int | None:
        """The first captured offset at or after ``offset``."""
        if self.run_end(offset) > offset:
            return offset
        i = bisect_right(self.runs, (offset, _MASK << 32))
        return self.runs[i][0] if i < len(self.runs) else None

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` octets at ``offset`` if all were captured."""
        if offset < 0 or self.run_end(offset) < offset + size:
            return None
        return self.captured(offset, offset + size)

    def captured(self, lo: int, hi: int) -> bytes:
        """The captured octets from ``lo`` up to ``hi`` or the end of the run
        holding ``lo``, whichever comes first (empty if ``lo`` was missed)."""
        i = bisect_right(self.runs, (lo, _MASK << 32)) - 1
        if i < 0 or not self.runs[i][0] <= lo < self.runs[i][1]:
            return b""
        run_lo = self.runs[i][0]
        return bytes(self.chunks[i][lo - run_lo : hi - run_lo])

    def find(self, key: bytes, stop: int) -> int:
        """Offset of the first ``key`` that lies wholly before ``stop`` in one
        run of captured octets, or -1."""
        for (lo, _), chunk in zip(self.runs, self.chunks, strict=True):
            if lo >= stop:
                break
            at = chunk.find(key, 0, stop - lo)
            if at >= 0:
                return lo + at
        return -1

    def frame_at(self, offset: int) -> int | None:
        """The frame whose segment brought the octet at ``offset`` (approximately:
        the last segment starting at or before it)."""
        i = bisect_right(self.frames, (offset, 1 << 62)) - 1
        return self.frames[i][1] if i >= 0 else None


def track_connections(packets: Iterable[TcpPacket]) -> list[Connection]:
    """Group segments into connections, in order of first appearance.

    A SYN without ACK on a known address pair whose connection already
    carried data (or closed) starts a new connection, as port reuse does.
    """
    connections: list[Connection] = []
    live: dict[tuple[str, int, str, int], Connection] = {}
    for packet in packets:
        key = (packet.src, packet.sport, packet.dst, packet.dport)
        back = (packet.dst, packet.dport, packet.src, packet.sport)
        connection = live.get(key) or live.get(back)
        is_open = packet.flags & TCP_SYN and not packet.flags & _TCP_ACK
        if connection is not None and is_open:
            client = connection.client
            half = client if (client.src, client.sport) == (packet.src, packet.sport) else None
            reused = half is not None and half.isn != packet.seq and half.fin is not None
            if half is None or reused:
                connection = None
        if connection is None:
            client = HalfConnection(packet.src, packet.sport, packet.dst, packet.dport)
            server = HalfConnection(packet.dst, packet.dport, packet.src, packet.sport)
            connection = Connection(len(connections), client, server)
            connections.append(connection)
            live[key] = connection
            live.pop(back, None)
        half = (
            connection.client
            if (packet.src, packet.sport) == (connection.client.src, connection.client.sport)
            else connection.server
        )
        if packet.flags & TCP_SYN:
            half.isn = packet.seq
            connection.syn_seen = True
        if packet.flags & TCP_FIN:
            half.fin = packet.seq + len(packet.payload)
        if packet.flags & TCP_RST:
            half.reset = True
        half.packets.append(packet)
    return connections
