"""Synthesized captures: one TCP connection written as a classic pcap file.

Used to show bytes produced by the sans-IO cores to independent decoders
(Wireshark's ``tshark``) and to the project's own analyzer, with full control
of how the stream is cut into TCP segments and in which order they appear.
Frames are Ethernet + IPv4 (or IPv6) + TCP with correct checksums.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Final

from iwarp._typing import Buffer

__all__ = ["FIN", "ACK", "PSH", "SYN", "Direction", "Endpoint", "TcpCapture", "tcp_frame"]

_PCAP_HEADER: Final = struct.Struct("<IHHiIII")
_RECORD_HEADER: Final = struct.Struct("<IIII")
_ETH: Final = struct.Struct("!6s6sH")
_IPV4: Final = struct.Struct("!BBHHHBBH4s4s")
_IPV6: Final = struct.Struct("!IHBB16s16s")
_TCP: Final = struct.Struct("!HHIIBBHHH")
_LINKTYPE_ETHERNET: Final = 1
#: TCP flags (RFC 9293 §3.1).
FIN, SYN, PSH, ACK = 0x01, 0x02, 0x08, 0x10
_FIN, _SYN, _PSH, _ACK = FIN, SYN, PSH, ACK
_MASK32: Final = 0xFFFFFFFF


class Direction(Enum):
    """Who sends: the connecting side (client) or the accepting side (server)."""

    C2S = "c2s"
    S2C = "s2c"


def _checksum(*parts: Buffer) -> int:
    """The Internet checksum (RFC 1071) of ``parts`` laid end to end, each
    but the last of even length (a word never straddles two parts).

    Since 2**16 leaves 1 modulo 0xFFFF, the number a part's octets spell
    is congruent to the sum of its 16-bit words: one big-integer remainder
    in C instead of a Python int per word, and no copy to join the parts
    (a capture of bulk traffic spent a third of its time here).
    """
    total = 0
    for part in parts:
        value = int.from_bytes(part, "big")
        total += value << 8 if memoryview(part).nbytes % 2 else value
    # The end-around-carry sum is 0 only for all-zero words, else in 1..0xFFFF.
    folded = (total - 1) % 0xFFFF + 1 if total else 0
    return ~folded & 0xFFFF


@dataclass
class _Side:
    address: IPv4Address | IPv6Address
    port: int
    isn: int
    mac: bytes
    sent: int = 0  # octets of payload sent (SYN/FIN counted too)


@dataclass
class TcpCapture:
    """Builds the frames of one TCP connection.

    The handshake is written on creation; :meth:`send` adds payload segments
    (each acknowledged by the peer), :meth:`segment` adds one segment at any
    sequence offset (for out-of-order and retransmission cases), :meth:`close`
    adds FINs, :meth:`to_bytes`/:meth:`write` give the pcap file.
    """

    client: tuple[str, int] = ("127.0.0.1", 50000)
    server: tuple[str, int] = ("127.0.0.1", 4000)
    client_isn: int = 0x1000
    server_isn: int = 0x8000
    #: Seconds between frames (timestamps start at 1.0).
    tick: float = 0.0001
    _frames: list[bytes] = field(default_factory=list, init=False)
    _sides: dict[Direction, _Side] = field(default_factory=dict, init=False)
    _time: float = field(default=1.0, init=False)

    def __post_init__(self) -> None:
        c = _Side(ip_address(self.client[0]), self.client[1], self.client_isn, b"\x02" + bytes(5))
        s = _Side(
            ip_address(self.server[0]),
            self.server[1],
            self.server_isn,
            b"\x02" + bytes(4) + b"\x01",
        )
        if c.address.version != s.address.version:
            raise ValueError("client and server must use the same IP version")
        self._sides = {Direction.C2S: c, Direction.S2C: s}
        self._emit(Direction.C2S, c.isn, 0, _SYN, b"")
        c.sent = 1
        self._emit(Direction.S2C, s.isn, c.isn + 1, _SYN | _ACK, b"")
        s.sent = 1
        self._emit(Direction.C2S, c.isn + 1, s.isn + 1, _ACK, b"")

    def seq(self, direction: Direction) -> int:
        """The sequence number of the next octet ``direction`` will send."""
        side = self._sides[direction]
        return (side.isn + side.sent) & _MASK32

    def stream_start(self, direction: Direction) -> int:
        """The sequence number of the first payload octet of ``direction``."""
        return (self._sides[direction].isn + 1) & _MASK32

    def send(
        self,
        direction: Direction,
        data: Buffer,
        *,
        sizes: list[int] | None = None,
        mss: int | None = None,
    ) -> None:
        """Send ``data`` in order, cut by ``sizes`` (cycled) or ``mss``, or whole."""
        data = bytes(data)
        pos = 0
        turn = 0
        while pos < len(data):
            if sizes:
                step = sizes[turn % len(sizes)]
                turn += 1
            else:
                step = mss or len(data)
            piece = data[pos : pos + max(1, step)]
            side = self._sides[direction]
            self.segment(direction, side.sent - 1, piece)
            side.sent += len(piece)
            pos += len(piece)
        if data:
            peer = self._other(direction)
            self._emit(peer, self.seq(peer), self.seq(direction), _ACK, b"")

    def segment(self, direction: Direction, offset: int, payload: Buffer) -> None:
        """One segment carrying ``payload`` at stream ``offset`` (0 = first octet)."""
        side = self._sides[direction]
        peer = self._other(direction)
        seq = (side.isn + 1 + offset) & _MASK32
        self._emit(direction, seq, self.seq(peer), _ACK | _PSH, bytes(payload))

    def close(self) -> None:
        """FIN from the client, then FIN from the server, then the last ACK."""
        for direction in (Direction.C2S, Direction.S2C):
            peer = self._other(direction)
            self._emit(direction, self.seq(direction), self.seq(peer), _FIN | _ACK, b"")
            self._sides[direction].sent += 1
        self._emit(Direction.C2S, self.seq(Direction.C2S), self.seq(Direction.S2C), _ACK, b"")

    def to_bytes(self) -> bytes:
        header = _PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, 262144, _LINKTYPE_ETHERNET)
        return header + b"".join(self._frames)

    def write(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.to_bytes())

    # -- internals ------------------------------------------------------------

    def _other(self, direction: Direction) -> Direction:
        return Direction.S2C if direction is Direction.C2S else Direction.C2S

    def _emit(self, direction: Direction, seq: int, ack: int, flags: int, payload: bytes) -> None:
        src = self._sides[direction]
        dst = self._sides[self._other(direction)]
        frame = tcp_frame(
            Endpoint(src.address, src.port, src.mac),
            Endpoint(dst.address, dst.port, dst.mac),
            seq,
            ack,
            flags,
            payload,
        )
        seconds = int(self._time)
        micros = round((self._time - seconds) * 1e6)
        self._frames.append(_RECORD_HEADER.pack(seconds, micros, len(frame), len(frame)) + frame)
        self._time += self.tick


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a synthesized TCP connection."""

    address: IPv4Address | IPv6Address
    port: int
    mac: bytes


def tcp_frame(
    src: Endpoint, dst: Endpoint, seq: int, ack: int, flags: int, payload: Buffer
) -> bytes:
    """An Ethernet + IPv4/IPv6 + TCP frame carrying ``payload``, with correct
    checksums (RFC 791, RFC 8200, RFC 9293 §3.1); the one place that lays
    out these headers for every capture this package writes."""
    tcp = _TCP.pack(src.port, dst.port, seq & _MASK32, ack & _MASK32, 5 << 4, flags, 65535, 0, 0)
    length = len(tcp) + memoryview(payload).nbytes
    # ipaddress's properties are Python code: each read once per frame.
    here, there, v4 = src.address.packed, dst.address.packed, src.address.version == 4
    if v4:
        pseudo = here + there + struct.pack("!BBH", 0, 6, length)
    else:
        pseudo = here + there + struct.pack("!IxxxB", length, 6)
    # The payload is summed and copied once, into the frame itself.
    csum = _checksum(pseudo + tcp, payload)
    tcp = tcp[:16] + struct.pack("!H", csum) + tcp[18:]
    if v4:
        ip = _IPV4.pack(0x45, 0, 20 + length, 0, 0x4000, 64, 6, 0, here, there)
        ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
        ethertype = 0x0800
    else:
        ip = _IPV6.pack(6 << 28, length, 6, 64, here, there)
        ethertype = 0x86DD
    return b"".join((_ETH.pack(dst.mac, src.mac, ethertype), ip, tcp, payload))
