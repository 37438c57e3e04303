"""Capture files: pcap and pcapng, down to TCP segments.

Link layers: Ethernet (with 802.1Q/802.1ad tags), Linux cooked capture v1
(SLL) and v2 (SLL2), raw IP, BSD loopback (NULL). Network layers: IPv4
(non-first fragments are skipped) and IPv6 (extension headers walked).
Everything else in the file is counted and skipped.

Formats: pcap (libpcap, both byte orders, micro- and nanosecond stamps) and
pcapng (Section Header, Interface Description, Enhanced/Simple/obsolete
Packet blocks; ``if_tsresol`` honoured).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address, IPv6Address
from typing import BinaryIO, Final, NamedTuple

from iwarp.analyze.kernels import kernels

__all__ = [
    "BLOCK_CAP",
    "FRAME_CAP",
    "CaptureError",
    "CaptureStats",
    "TcpPacket",
    "read_tcp_packets",
]

# Link types (https://www.tcpdump.org/linktypes.html).
LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPE_LINUX_SLL2: Final = 276
#: DLT_RAW as some platforms number it in files.
_RAW_ALIASES: Final = frozenset({12, 14, LINKTYPE_RAW})
#: Link types this reader decodes, by name.
SUPPORTED_LINKTYPES: Final = {
    LINKTYPE_NULL: "BSD loopback",
    LINKTYPE_ETHERNET: "Ethernet",
    LINKTYPE_LINUX_SLL: "Linux cooked v1",
    LINKTYPE_LINUX_SLL2: "Linux cooked v2",
    LINKTYPE_IPV4: "raw IPv4",
    LINKTYPE_IPV6: "raw IPv6",
    **{raw: "raw IP" for raw in _RAW_ALIASES},
}


def _check_linktype(linktype: int) -> None:
    """An unsupported link type is an error: its frames would silently vanish."""
    if linktype not in SUPPORTED_LINKTYPES:
        names = ", ".join(sorted(set(SUPPORTED_LINKTYPES.values())))
        raise CaptureError(
            f"link type {linktype} is not supported (https://www.tcpdump.org/linktypes.html); "
            f"supported: {names}"
        )


_ETHERTYPE_IPV4: Final = 0x0800
_ETHERTYPE_IPV6: Final = 0x86DD
_ETHERTYPE_VLAN: Final = frozenset({0x8100, 0x88A8, 0x9100})
_IPPROTO_TCP: Final = 6
_IPV6_EXTENSIONS: Final = frozenset({0, 43, 60})  # hop-by-hop, routing, destination
_IPV6_FRAGMENT: Final = 44
_IPV6_AH: Final = 51

_PCAP_MAGIC: Final = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
_PCAPNG_SHB: Final = 0x0A0D0D0A
_PCAPNG_BOM: Final = 0x1A2B3C4D

_U16: Final = struct.Struct("!H")
_IPV4: Final = struct.Struct("!BBHHHBB2x4s4s")
_IPV6: Final = struct.Struct("!4xHBB16s16s")
_TCP: Final = struct.Struct("!HHIIBB")


class CaptureError(Exception):
    """The file is not a capture this reader understands."""


class TcpPacket(NamedTuple):
    """One TCP segment as captured (a tuple: millions are made per capture)."""

    #: 1-based frame number in the file, as Wireshark counts.
    frame: int
    time: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    #: Payload octets on the wire; more than ``len(payload)`` when the
    #: capture was cut short (snaplen).
    wire_length: int


@dataclass(slots=True)
class CaptureStats:
    """What the reader saw besides TCP segments."""

    frames: int = 0
    tcp: int = 0
    skipped: int = 0
    fragments: int = 0
    #: The file ends in the middle of a record or block (the capture was cut off).
    truncated_file: bool = False
    #: Offset in the (decompressed) file of the record or block it ends in.
    truncated_at: int | None = None
    #: Records or blocks longer than :data:`FRAME_CAP` / :data:`BLOCK_CAP`,
    #: cut to it (the frame decodes as one cut by a snaplen).
    oversized: int = 0
    #: Frame number of the first of them.
    first_oversized: int | None = None


TCP_SYN: Final = 0x02
TCP_FIN: Final = 0x01
TCP_RST: Final = 0x04


#: Dotted IPv4 addresses the kernels made, by address (bounded there).
_ADDRESSES: Final[dict[int, str]] = {}
#: A frame for :func:`_decode`: ``(linktype, time, data)``.
_Frame = tuple[int, float, bytes]


def read_tcp_packets(f: BinaryIO, stats: CaptureStats | None = None) -> Iterator[TcpPacket]:
    """Every TCP segment in the pcap or pcapng file ``f``, in file order."""
    stats = stats if stats is not None else CaptureStats()
    head = f.read(4)
    if head in _PCAP_MAGIC:
        frames = _pcap_frames(f, head, stats)
    elif len(head) == 4 and int.from_bytes(head, "little") == _PCAPNG_SHB:
        frames = _pcapng_frames(f, head, stats)
    else:
        raise CaptureError("not a pcap or pcapng file")
    kernel = kernels
    for item in frames:
        stats.frames += 1
        if isinstance(item, TcpPacket):  # decoded by the batch kernel already
            stats.tcp += 1
            yield item
            continue
        linktype, time, data = item
        packet = kernel.tcp_packet(stats.frames, linktype, time, data, TcpPacket, _ADDRESSES)
        if packet is None:
            packet = _decode(stats.frames, linktype, time, data, stats)
        if packet is None:
            stats.skipped += 1
        else:
            stats.tcp += 1
            yield packet


# -- file formats ---------------------------------------------------------------

#: Octets asked of the file at a time.
_READ_CHUNK: Final = 1 << 20
#: Most octets of one frame kept (libpcap's largest snaplen, MAXIMUM_SNAPLEN):
#: a record or block announcing more is cut to it, the rest read past.
FRAME_CAP: Final = 256 << 10
#: Most octets of one pcapng block held (its body past the cut is read past).
BLOCK_CAP: Final = 4 << 20


class _Input:
    """The capture's octets as one buffer refilled from the file, each octet
    counted from the file's start; memory is what one record or block holds
    (at most :data:`BLOCK_CAP` plus a read), whatever a length field claims."""

    __slots__ = ("base", "buf", "cut", "pos", "source")

    def __init__(self, f: BinaryIO, consumed: int) -> None:
        # read1 returns what is there, so a live pipe is decoded as it comes
        # rather than a buffer at a time.
        self.source = getattr(f, "read1", f.read)
        self.buf = b""
        self.pos = 0
        #: File offset of ``buf[0]``.
        self.base = consumed
        #: A compressed file ended before its end-of-stream marker.
        self.cut = False

    def read(self, size: int) -> bytes:
        try:
            data: bytes = self.source(size)
        except EOFError:  # gzip/xz: "ended before the end-of-stream marker"
            self.cut = True
            return b""
        return data

    @property
    def offset(self) -> int:
        """File offset of the next octet."""
        return self.base + self.pos

    def need(self, size: int) -> bool:
        """At least ``size`` octets from :attr:`pos` in :attr:`buf`; False if
        the file ends first (``size`` is at most a cap, never a claimed length)."""
        buf, pos = self.buf, self.pos
        if len(buf) - pos >= size:
            return True
        parts = [buf[pos:]]
        have = len(parts[0])
        self.base += pos
        while have < size:
            more = self.read(_READ_CHUNK)
            if not more:
                break
            parts.append(more)
            have += len(more)
        self.buf = b"".join(parts)
        self.pos = 0
        return have >= size

    def skip(self, size: int) -> bool:
        """Read past ``size`` octets, holding none of them; False at the end."""
        held = len(self.buf) - self.pos
        if size <= held:
            self.pos += size
            return True
        size -= held
        self.base += len(self.buf)
        self.buf, self.pos = b"", 0
        while size > 0:
            more = self.read(min(size, _READ_CHUNK))
            if not more:
                return False
            self.base += len(more)
            size -= len(more)
        return True

    def at_end(self, stats: CaptureStats) -> bool:
        """Nothing more in the file (a compressed file that stops short of its
        end marker is cut off, even between records)."""
        if self.need(1):
            return False
        if self.cut:
            _cut_off(stats, self.offset)
        return True


def _cut_off(stats: CaptureStats, offset: int) -> None:
    stats.truncated_file = True
    stats.truncated_at = offset


def _oversized(stats: CaptureStats) -> None:
    stats.oversized += 1
    if stats.first_oversized is None:
        stats.first_oversized = stats.frames + 1


def _pcap_frames(f: BinaryIO, magic: bytes, stats: CaptureStats) -> Iterator[TcpPacket | _Frame]:
    """The file's frames, most decoded already.

    The batch kernel (``pcap_batch``) takes every complete record of the
    buffer; the record at its edge (incomplete, longer than
    :data:`FRAME_CAP`, or the end of the file) is taken here, one at a time.
    """
    order, resolution = _PCAP_MAGIC[magic]
    rest = f.read(20)
    if len(rest) < 20:
        raise CaptureError("truncated pcap header")
    linktype = struct.unpack(order + "16xI", rest)[0] & 0x0FFFFFFF
    _check_linktype(linktype)
    record = struct.Struct(order + "IIII")
    source = _Input(f, 24)
    kernel = kernels
    big = order == ">"
    while True:
        if len(source.buf) - source.pos >= 16:
            # stats.frames counts every frame handed out so far: the
            # consumer counts each before it asks for the next.
            batch, source.pos = kernel.pcap_batch(
                source.buf,
                source.pos,
                big,
                resolution,
                linktype,
                FRAME_CAP,
                stats.frames,
                TcpPacket,
                _ADDRESSES,
            )
            yield from batch
        buf, pos = source.buf, source.pos
        start = source.base + pos
        if len(buf) - pos < 16:
            if source.at_end(stats):
                return
            if not source.need(16):
                _cut_off(stats, start)
                return
            buf, pos = source.buf, source.pos
        seconds, fraction, caplen, _ = record.unpack_from(buf, pos)
        keep = min(caplen, FRAME_CAP)
        end = pos + 16 + keep
        if end > len(buf):
            if not source.need(16 + keep):
                _cut_off(stats, start)
                return
            buf, pos = source.buf, source.pos
            end = pos + 16 + keep
        data = buf[pos + 16 : end]
        source.pos = end
        if caplen > keep:
            if not source.skip(caplen - keep):
                _cut_off(stats, start)
                return
            _oversized(stats)
        yield linktype, seconds + fraction * resolution, data


def _pcapng_frames(f: BinaryIO, first: bytes, stats: CaptureStats) -> Iterator[TcpPacket | _Frame]:
    """The file's frames; the batch kernel (``pcapng_batch``) decodes the
    Enhanced Packet Blocks (every other block is taken here)."""
    order = "<"
    interfaces: list[tuple[int, float]] = []
    source = _Input(f, 0)
    source.buf = first
    kernel = kernels
    while True:
        if interfaces and len(source.buf) - source.pos >= 32:
            batch, source.pos = kernel.pcapng_batch(
                source.buf,
                source.pos,
                order == ">",
                interfaces,
                FRAME_CAP,
                BLOCK_CAP,
                stats.frames,
                TcpPacket,
                _ADDRESSES,
            )
            yield from batch
        start = source.offset
        if source.at_end(stats):
            return
        if not source.need(8):
            _cut_off(stats, start)
            return
        head = source.buf[source.pos : source.pos + 8]
        if head[:4] == b"\x0a\x0d\x0d\x0a":  # Section Header: a palindrome type
            # Its byte-order magic decides how everything in the section reads.
            if not source.need(12):
                _cut_off(stats, start)
                return
            bom = source.buf[source.pos + 8 : source.pos + 12]
            order = "<" if int.from_bytes(bom, "little") == _PCAPNG_BOM else ">"
            if struct.unpack(order + "I", bom)[0] != _PCAPNG_BOM:
                raise CaptureError("bad pcapng byte-order magic")
            block_type = _PCAPNG_SHB
            interfaces = []
        else:
            block_type = struct.unpack(order + "I", head[:4])[0]
        length = struct.unpack(order + "I", head[4:8])[0]
        if length < 12 or length % 4:
            raise CaptureError(f"bad pcapng block length {length}")
        # The body is held up to BLOCK_CAP; past it, read past (never held).
        keep = min(length - 12, BLOCK_CAP)
        if not source.need(8 + keep):
            _cut_off(stats, start)
            return
        body = source.buf[source.pos + 8 : source.pos + 8 + keep]
        source.pos += 8 + keep
        if not source.skip(length - 12 - keep) or not source.need(4):
            _cut_off(stats, start)
            return
        source.pos += 4  # the trailing length
        cut = keep < length - 12
        packet: tuple[int, float, int, int] | None = None
        if block_type == 1 and len(body) >= 8:  # Interface Description Block
            linktype = struct.unpack_from(order + "H", body, 0)[0]
            _check_linktype(linktype)
            interfaces.append((linktype, _tsresol(body[8:], order)))
        elif block_type == 6 and len(body) >= 20:  # Enhanced Packet Block
            iface, high, low, caplen = struct.unpack_from(order + "IIII", body, 0)
            if iface < len(interfaces):
                linktype, resolution = interfaces[iface]
                packet = linktype, ((high << 32) | low) * resolution, 20, caplen
        elif block_type == 3 and interfaces and len(body) >= 4:  # Simple Packet Block
            original = struct.unpack_from(order + "I", body, 0)[0]
            packet = interfaces[0][0], 0.0, 4, min(original, length - 16)
        elif block_type == 2 and len(body) >= 20:  # obsolete Packet Block
            iface, _, high, low, caplen = struct.unpack_from(order + "HHIII", body, 0)
            if iface < len(interfaces):
                linktype, resolution = interfaces[iface]
                packet = linktype, ((high << 32) | low) * resolution, 20, caplen
        if packet is not None:
            linktype, time, at, caplen = packet
            if cut or caplen > FRAME_CAP:
                _oversized(stats)
            yield linktype, time, body[at : at + min(caplen, FRAME_CAP)]


def _tsresol(options: bytes, order: str) -> float:
    """The interface's time unit from its ``if_tsresol`` option (default µs)."""
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(order + "HH", options, pos)
        if code == 0:
            break
        if code == 9 and length >= 1:
            value = options[pos + 4]
            return float(2 ** -(value & 0x7F)) if value & 0x80 else 10.0**-value
        pos += 4 + (length + 3) // 4 * 4
    return 1e-6


# -- link, network and transport layers ------------------------------------------


def _decode(
    frame: int, linktype: int, time: float, data: bytes, stats: CaptureStats
) -> TcpPacket | None:
    network = _link(linktype, data)
    if network is None:
        return None
    ethertype, offset = network
    if ethertype == _ETHERTYPE_IPV4:
        ip = _ipv4(data, offset, stats)
    elif ethertype == _ETHERTYPE_IPV6:
        ip = _ipv6(data, offset, stats)
    else:
        return None
    if ip is None:
        return None
    src, dst, start, end = ip
    if end - start < _TCP.size or len(data) < start + _TCP.size:
        return None
    sport, dport, seq, ack, data_offset, flags = _TCP.unpack_from(data, start)
    header_length = (data_offset >> 4) * 4
    if header_length < 20:
        return None
    payload_start = start + header_length
    wire_length = max(0, end - payload_start)
    # A capture cut short (snaplen) holds less than the IP length says.
    payload = data[payload_start : min(end, len(data))] if payload_start < len(data) else b""
    return TcpPacket(frame, time, src, sport, dst, dport, seq, ack, flags, payload, wire_length)


def _link(linktype: int, data: bytes) -> tuple[int, int] | None:
    """``(ethertype, offset of the network header)``, or None."""
    if linktype == LINKTYPE_ETHERNET:
        offset = 12
        while len(data) >= offset + 2:
            ethertype: int = _U16.unpack_from(data, offset)[0]
            if ethertype not in _ETHERTYPE_VLAN:
                return ethertype, offset + 2
            offset += 4
        return None
    if linktype == LINKTYPE_LINUX_SLL and len(data) >= 16:
        return _U16.unpack_from(data, 14)[0], 16
    if linktype == LINKTYPE_LINUX_SLL2 and len(data) >= 20:
        return _U16.unpack_from(data, 0)[0], 20
    if linktype in _RAW_ALIASES and data:
        version = data[0] >> 4
        return (_ETHERTYPE_IPV4 if version == 4 else _ETHERTYPE_IPV6 if version == 6 else 0), 0
    if linktype == LINKTYPE_IPV4:
        return _ETHERTYPE_IPV4, 0
    if linktype == LINKTYPE_IPV6:
        return _ETHERTYPE_IPV6, 0
    if linktype == LINKTYPE_NULL and len(data) >= 4:
        family = int.from_bytes(data[:4], "little")
        if family > 0xFFFF:
            family = int.from_bytes(data[:4], "big")
        return (_ETHERTYPE_IPV4 if family == 2 else _ETHERTYPE_IPV6), 4
    return None


@lru_cache(maxsize=4096)
def _v4(packed: bytes) -> str:
    return str(IPv4Address(packed))


@lru_cache(maxsize=4096)
def _v6(packed: bytes) -> str:
    return str(IPv6Address(packed))


def _ipv4(data: bytes, offset: int, stats: CaptureStats) -> tuple[str, str, int, int] | None:
    if len(data) < offset + _IPV4.size:
        return None
    version_ihl, _, total, _, fragment, _, proto, src, dst = _IPV4.unpack_from(data, offset)
    if version_ihl >> 4 != 4 or proto != _IPPROTO_TCP:
        return None
    if fragment & 0x3FFF:  # MF set or a non-zero offset
        stats.fragments += 1
        if fragment & 0x1FFF:
            return None
    if version_ihl & 0x0F < 5:
        return None
    start = offset + (version_ihl & 0x0F) * 4
    # The IP length, not the frame length: Ethernet pads short frames.
    end = offset + total if total else len(data)
    return _v4(src), _v4(dst), start, end


def _ipv6(data: bytes, offset: int, stats: CaptureStats) -> tuple[str, str, int, int] | None:
    if len(data) < offset + 40 or data[offset] >> 4 != 6:
        return None
    payload_length, next_header, _, src, dst = _IPV6.unpack_from(data, offset)
    start = offset + 40
    end = start + payload_length if payload_length else len(data)
    while next_header != _IPPROTO_TCP:
        if len(data) < start + 8:
            return None
        if next_header in _IPV6_EXTENSIONS:
            following, size = data[start], (data[start + 1] + 1) * 8
        elif next_header == _IPV6_AH:
            following, size = data[start], (data[start + 1] + 2) * 4
        elif next_header == _IPV6_FRAGMENT:
            stats.fragments += 1
            if _U16.unpack_from(data, start + 2)[0] & 0xFFF8:
                return None
            following, size = data[start], 8
        else:
            return None
        next_header = following
        start += size
    return _v6(src), _v6(dst), start, end
