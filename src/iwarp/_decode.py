"""The capture analyzer's kernels in pure Python: the twin of
``src/iwarp/_decode.c`` (same names, signatures, results and errors; these
docstrings are the contract of both, and tests/analyze/test_decode_twin.py
compares the two function by function on arbitrary input).

:mod:`iwarp.analyze.kernels` chooses one of them once, at import
(:func:`iwarp._accel.choose_decode`): the C functions when the accelerator
runs, these otherwise (``IWARP_NO_ACCEL=1``). The analyzer calls what was
chosen, with no branch of its own. The kernels only walk buffers: every
decision (connections, reassembly, framing, errors) is the analyzer's.

One difference is allowed, and said where it lies: :func:`fpdu_json` writes
every FPDU record's line, where the C writer declines records with values
of unusual kinds (None: the caller then asks this one).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from types import MemberDescriptorType
from typing import Any, Final, TypeVar

from iwarp._crc32c import crc32c
from iwarp._typing import Buffer
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.mpa.wire import (
    CRC_FIELD,
    CRC_SIZE,
    FPDUPTR_MASK,
    HEADER_SIZE,
    MARKER,
    MARKER_INTERVAL,
    MARKER_SIZE,
    ULPDU_LENGTH,
)
from iwarp.rdmap.wire import describe_ulpdu as _describe_any

__all__ = [
    "describe_table",
    "describe_ulpdu",
    "fpdu_count",
    "fpdu_json",
    "fpdu_view",
    "fpdu_walk",
    "json_table",
    "new_record",
    "pcap_batch",
    "pcapng_batch",
    "tcp_packet",
]

_P = TypeVar("_P", bound=tuple[Any, ...])
_R = TypeVar("_R")
#: A frame the capture loops leave to Python: (linktype, time, data).
_Frame = tuple[int, float, bytes]
#: A marker taken apart: (offset in the FPDU, reserved, fpduptr, expected fpduptr).
_Marker = tuple[int, int, int, int]

#: Dotted addresses remembered in the caller's cache, at most (then cleared).
ADDRESS_CACHE: Final = 4096
#: Most records or blocks one batch call decodes (bounds the list it returns).
BATCH_MAX: Final = 65536
#: Interfaces a pcapng batch knows at most (more: the caller takes the rest).
MAX_INTERFACES: Final = 64
#: Most FPDUs one walk call hands back.
WALK_MAX: Final = 4096
_LLONG_MAX: Final = (1 << 63) - 1
_SSIZE_MAX: Final = (1 << 63) - 1
_ETHERTYPE_IPV4: Final = 0x0800
_VLAN_TAGS: Final = frozenset({0x8100, 0x88A8, 0x9100})
#: The DDP control field's version (RFC 5041 §4) that plain headers carry.
_DDP_VERSION: Final = 1


# -- capture records down to TCP segments --------------------------------------------


def _link_layer(d: bytes, linktype: int) -> tuple[int, int] | None:
    """The frame's ethertype and network header's offset (capture.py _link),
    or None when the caller is to decide."""
    n = len(d)
    if linktype == 1:
        at = 12
        while n >= 2 and at <= n - 2:
            kind = int.from_bytes(d[at : at + 2], "big")
            if kind not in _VLAN_TAGS:
                return kind, at + 2
            at += 4
        return None
    if linktype == 113:
        return None if n < 16 else (int.from_bytes(d[14:16], "big"), 16)
    if linktype == 276:
        return None if n < 20 else (int.from_bytes(d[0:2], "big"), 20)
    if linktype in (12, 14, 101):
        return None if n < 1 or d[0] >> 4 != 4 else (_ETHERTYPE_IPV4, 0)
    if linktype == 228:
        return _ETHERTYPE_IPV4, 0
    if linktype == 0:
        if n < 4:
            return None
        family = int.from_bytes(d[0:4], "little")
        if family > 0xFFFF:
            family = int.from_bytes(d[0:4], "big")
        return (_ETHERTYPE_IPV4, 4) if family == 2 else None
    return None


def _dotted(cache: dict[int, str], address: int) -> str:
    text = cache.get(address)
    if text is None:
        text = f"{address >> 24}.{(address >> 16) & 0xFF}.{(address >> 8) & 0xFF}.{address & 0xFF}"
        if len(cache) >= ADDRESS_CACHE:
            cache.clear()
        cache[address] = text
    return text


def _check_packet_type(cls: object) -> None:
    if not (
        isinstance(cls, type)
        and issubclass(cls, tuple)
        and cls.__basicsize__ == tuple.__basicsize__
    ):
        raise TypeError("cls must be a plain tuple subclass (TcpPacket)")


def _packet(
    d: bytes, linktype: int, frame: int, time: float, cls: type[_P], cache: dict[int, str]
) -> _P | None:
    """The TcpPacket of a frame that is the common case: an IPv4 TCP segment
    without fragmentation on a link layer read here; None for anything else
    (the caller decides, and counts fragments and skipped frames)."""
    link = _link_layer(d, linktype)
    if link is None or link[0] != _ETHERTYPE_IPV4:
        return None
    n, at = len(d), link[1]
    if n - at < 20:
        return None
    version_ihl = d[at]
    if version_ihl >> 4 != 4 or d[at + 9] != 6:
        return None
    if int.from_bytes(d[at + 6 : at + 8], "big") & 0x3FFF:  # a fragment
        return None
    if version_ihl & 0x0F < 5:
        return None
    start = at + (version_ihl & 0x0F) * 4
    total = int.from_bytes(d[at + 2 : at + 4], "big")
    end = at + total if total else n  # the IP length: Ethernet pads short frames
    if end - start < 20 or start > n - 20:
        return None
    header = (d[start + 12] >> 4) * 4
    if header < 20:
        return None
    payload = start + header
    stop = min(end, n)  # a capture cut short (snaplen) holds less
    fields = (
        frame,
        time,
        _dotted(cache, int.from_bytes(d[at + 12 : at + 16], "big")),
        int.from_bytes(d[start : start + 2], "big"),
        _dotted(cache, int.from_bytes(d[at + 16 : at + 20], "big")),
        int.from_bytes(d[start + 2 : start + 4], "big"),
        int.from_bytes(d[start + 4 : start + 8], "big"),
        int.from_bytes(d[start + 8 : start + 12], "big"),
        d[start + 13],
        d[payload:stop] if payload < n and stop > payload else b"",
        end - payload if end > payload else 0,
    )
    return tuple.__new__(cls, fields)


def _item(
    d: bytes, linktype: int, frame: int, time: float, cls: type[_P], cache: dict[int, str]
) -> _P | _Frame:
    packet = _packet(d, linktype, frame, time, cls, cache)
    return (linktype, time, d) if packet is None else packet


def _u32(data: Buffer, at: int, big: bool) -> int:
    return int.from_bytes(data[at : at + 4], "big" if big else "little")


def pcap_batch(
    buffer: bytes,
    pos: int,
    big_endian: bool,
    resolution: float,
    linktype: int,
    frame_cap: int,
    frames_before: int,
    cls: type[_P],
    cache: dict[int, str],
    /,
) -> tuple[list[_P | _Frame], int]:
    """Every complete record of a pcap ``buffer`` from ``pos`` on whose caplen
    is at most ``frame_cap``, as items (a ``cls``, TcpPacket, numbered from
    ``frames_before + 1``, when the frame is the common case: Ethernet/VLAN,
    cooked, raw or loopback link, IPv4 without fragments, TCP; else the
    ``(linktype, time, data)`` triple for the caller to decode), and the
    position of the first record not taken: incomplete, longer than
    ``frame_cap``, or past :data:`BATCH_MAX` records. ``cache`` keeps the
    dotted addresses (cleared past :data:`ADDRESS_CACHE`). ValueError for
    a position or count out of range, TypeError for a ``cls`` that is not
    a plain tuple subclass."""
    _check_packet_type(cls)
    if (
        not 0 <= pos <= len(buffer)
        or frame_cap < 0
        or not 0 <= frames_before <= _LLONG_MAX - BATCH_MAX
    ):
        raise ValueError("pos, frame_cap or frames_before out of range")
    items: list[_P | _Frame] = []
    frames, size = frames_before, len(buffer)
    while len(items) < BATCH_MAX and size - pos >= 16:
        caplen = _u32(buffer, pos + 8, big_endian)
        if caplen > frame_cap or caplen > size - pos - 16:
            break
        time = float(_u32(buffer, pos, big_endian)) + float(
            _u32(buffer, pos + 4, big_endian)
        ) * float(resolution)
        frames += 1
        items.append(
            _item(bytes(buffer[pos + 16 : pos + 16 + caplen]), linktype, frames, time, cls, cache)
        )
        pos += 16 + caplen
    return items, pos


def pcapng_batch(
    buffer: bytes,
    pos: int,
    big_endian: bool,
    interfaces: list[tuple[int, float]],
    frame_cap: int,
    block_cap: int,
    frames_before: int,
    cls: type[_P],
    cache: dict[int, str],
    /,
) -> tuple[list[_P | _Frame], int]:
    """The Enhanced Packet Blocks of a pcapng ``buffer`` from ``pos`` on, as
    :func:`pcap_batch` takes records; ``interfaces`` is the section's list
    of ``(linktype, time resolution)`` (the first :data:`MAX_INTERFACES`
    count). Stops at the first block that is not a complete, well-formed
    EPB of a known interface whose frame fits ``frame_cap`` (any other
    block, a bad length, a block longer than ``block_cap``, the end of the
    buffer): the caller takes that one."""
    known = interfaces[:MAX_INTERFACES]
    _check_packet_type(cls)
    if (
        not 0 <= pos <= len(buffer)
        or frame_cap < 0
        or block_cap < 0
        or not 0 <= frames_before <= _LLONG_MAX - BATCH_MAX
    ):
        raise ValueError("pos, frame_cap, block_cap or frames_before out of range")
    table: list[tuple[int, float]] = []
    for entry in known:
        if type(entry) is not tuple or len(entry) != 2:
            raise TypeError("interfaces are (linktype, resolution) tuples")
        table.append((int(entry[0]), float(entry[1])))
    items: list[_P | _Frame] = []
    frames, size = frames_before, len(buffer)
    while len(items) < BATCH_MAX and size - pos >= 8:
        kind = _u32(buffer, pos, big_endian)
        length = _u32(buffer, pos + 4, big_endian)
        if kind != 6 or length < 32 or length % 4 or length - 12 > block_cap or length > size - pos:
            break
        body = pos + 8
        iface = _u32(buffer, body, big_endian)
        caplen = _u32(buffer, body + 12, big_endian)
        if iface >= len(table) or caplen > frame_cap:
            break
        n = min(caplen, length - 12 - 20)
        stamp = _u32(buffer, body + 4, big_endian) << 32 | _u32(buffer, body + 8, big_endian)
        linktype, resolution = table[iface]
        frames += 1
        data = bytes(buffer[body + 20 : body + 20 + n])
        items.append(_item(data, linktype, frames, float(stamp) * resolution, cls, cache))
        pos += length
    return items, pos


def tcp_packet(
    frame: int,
    linktype: int,
    time: float,
    data: bytes,
    cls: type[_P],
    cache: dict[int, str],
    /,
) -> _P | None:
    """One frame as :func:`pcap_batch` decodes it: a ``cls`` (TcpPacket) when it
    is the common case, else None (the caller decodes it)."""
    _check_packet_type(cls)
    return _packet(bytes(data), linktype, frame, float(time), cls, cache)


# -- DDP/RDMAP headers of a ULPDU ------------------------------------------------------


class _Tables:
    """What :func:`describe_table` and :func:`json_table` registered."""

    names: tuple[str | None, ...] = ()
    tagged: tuple[int, ...] = ()
    queue: tuple[int, ...] = ()
    fpdu: type[Any] | None = None
    marker: type[Any] | None = None
    ddp: tuple[tuple[str, str], ...] = ()
    rdmap: tuple[tuple[str, str], ...] = ()


def describe_table(
    names: tuple[str | None, ...], tagged: tuple[int, ...], queue: tuple[int, ...], /
) -> None:
    """Set the opcodes :func:`describe_ulpdu` describes: per opcode (16 of
    them) its name (None: left to the analyzer), the T bit it must come
    with and the queue it must use (-1: any)."""
    if len(names) != 16 or len(tagged) != 16 or len(queue) != 16:
        raise ValueError("one entry per opcode (16) in each table")
    if not all(name is None or isinstance(name, str) for name in names):
        raise TypeError("opcode names are str or None")
    _Tables.tagged = tuple(int(t) for t in tagged)
    _Tables.queue = tuple(int(q) for q in queue)
    _Tables.names = tuple(names)


def _plain_header(u: Buffer, n: int) -> int:
    """The size of a ULPDU's DDP/RDMAP header (14 tagged, 18 untagged) when
    it is plain: an opcode the table names, with the T bit and queue that
    opcode must use, DDP version 1, RDMAP version 0 or 1, and the whole
    header within ``n`` octets; else 0. Reads no further than that header."""
    names = _Tables.names
    if not names or n < 2:
        return 0
    control, rdmap = u[0], u[1]
    tagged = control >> 7
    opcode = rdmap & 0x0F
    if names[opcode] is None or control & 0x03 != _DDP_VERSION or rdmap >> 6 > 1:
        return 0
    if 0 <= _Tables.tagged[opcode] != tagged:
        return 0
    header = 14 if tagged else 18
    if n < header:
        return 0
    queue = _Tables.queue[opcode]
    if not tagged and queue >= 0 and queue != int.from_bytes(u[6:10], "big"):
        return 0
    return header


def describe_ulpdu(ulpdu: bytes, /) -> dict[str, object] | None:
    """The DDP/RDMAP fields of a ULPDU without problems whose opcode the
    table names (a Write, a Send or a Read Response: ``describe_ulpdu`` of
    :mod:`iwarp.rdmap.wire`, key for key and in its order), or None: the
    analyzer describes that one."""
    return _describe_any(ulpdu) if _plain_header(ulpdu, len(ulpdu)) else None


# -- FPDUs taken apart ---------------------------------------------------------------


def _check_walk(at: int, size: int, phase: int, count: int) -> None:
    if not 0 <= at <= size or not 0 <= phase < MARKER_INTERVAL or count < 0:
        raise ValueError("at, phase or count out of range")


def _cut_markers(
    f: Buffer, body: int, phase: int, lead: int, either: bool
) -> tuple[bytes, list[_Marker]]:
    """The FPDU's content (ULPDU_Length, ULPDU, PAD) with its markers cut out
    of its first ``body`` octets, and each marker (offset, Reserved,
    FPDUPTR, the FPDUPTR expected: RFC 5044 §4.3 counts back to the
    ULPDU_Length field; seeds 000/002 let a leading marker's FPDU count
    from its first octet)."""
    pieces: list[bytes] = []
    markers: list[_Marker] = []
    cursor = 0
    for m in range(-phase % MARKER_INTERVAL, body, MARKER_INTERVAL):
        if body - m < MARKER_SIZE:  # off the 4-octet grid only
            raise RuntimeError("a marker splits the CRC")
        reserved, pointer = MARKER.unpack_from(f, m)
        expected = 0 if m == 0 else m - lead
        if lead and m and either and pointer & FPDUPTR_MASK == m:
            expected = m
        markers.append((m, reserved, pointer, expected))
        pieces.append(bytes(f[cursor:m]))
        cursor = m + MARKER_SIZE
    pieces.append(bytes(f[cursor:body]))
    return b"".join(pieces), markers


def fpdu_view(
    chunk: bytearray,
    at: int,
    phase: int,
    markers: bool,
    either_fpduptr: bool,
    ddp: bool,
    /,
) -> tuple[int, bytes, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None] | None:
    """The FPDU whose first octet is ``chunk[at]``, at marker phase ``phase``
    (its offset from the last marker position, 0..511), taken apart:
    ``(wire_length, ulpdu, pad, crc, crc_expected, markers, ulp)``, the
    markers ``(offset in the FPDU, reserved, fpduptr, expected)`` listed and
    cut out, CRC-32C computed over everything before the CRC field; with
    ``ddp``, ulp is :func:`describe_ulpdu` of the ULPDU (None when that
    leaves it to the analyzer, and without ``ddp``). None when the chunk
    ends before the FPDU does. ValueError for ``at`` or ``phase`` out of
    range; RuntimeError when a marker would split the CRC (a phase off the
    4-octet grid)."""
    _check_walk(at, len(chunk), phase, 0)
    return _view(chunk, at, phase, markers, either_fpduptr, ddp)


def _view(
    data: Buffer, at: int, phase: int, markers: bool, either: bool, ddp: bool
) -> tuple[int, bytes, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None] | None:
    """:func:`fpdu_view` of any buffer, its arguments in range."""
    size = len(data)
    lead = MARKER_SIZE if markers and phase == 0 else 0
    if lead + HEADER_SIZE > size - at:
        return None
    length: int = ULPDU_LENGTH.unpack_from(data, at + lead)[0]
    wire = fpdu_wire_size(length, phase, markers=markers)
    if wire > size - at:
        return None
    f = bytes(data[at : at + wire])  # a copy: the caller's buffer stays free to grow
    body = wire - CRC_SIZE
    crc: int = CRC_FIELD.unpack_from(f, body)[0]
    crc_expected = crc32c(memoryview(f)[:body])
    found: list[_Marker] = []
    if markers:
        content, found = _cut_markers(f, body, phase, lead, either)
        if len(content) < HEADER_SIZE + length:
            raise RuntimeError("inconsistent FPDU size")
    else:
        content = f[:body]
    ulpdu = content[HEADER_SIZE : HEADER_SIZE + length]
    ulp = describe_ulpdu(ulpdu) if ddp else None
    return wire, ulpdu, content[HEADER_SIZE + length :], crc, crc_expected, tuple(found), ulp


def _clean(
    chunk: Buffer,
    at: int,
    phase: int,
    flags: tuple[bool, bool, bool, bool, int],
) -> tuple[int, int, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None] | None:
    """The FPDU at ``chunk[at]`` as the walk takes it when it is whole and
    clean (``(wire, ulpdu_length, pad, crc, crc_expected, markers, ulp)``),
    else None."""
    markers, either, ddp, crc_used, max_ulpdu = flags
    lead = MARKER_SIZE if markers and phase == 0 else 0
    if lead + HEADER_SIZE > len(chunk) - at:
        return None
    if ULPDU_LENGTH.unpack_from(chunk, at + lead)[0] > max_ulpdu:
        return None
    try:
        view = _view(chunk, at, phase, markers, either, ddp)
    except RuntimeError:  # a marker off the grid: never clean
        return None
    if view is None:
        return None
    wire, ulpdu, pad, crc, crc_expected, found, ulp = view
    if crc_used and crc != crc_expected:
        return None
    if any(r != 0 or p != e for _, r, p, e in found) or any(pad) or len(pad) > 3:
        return None
    if ddp and ulp is None:
        return None  # not a plain header: the analyzer describes it
    return wire, len(ulpdu), pad, crc, crc_expected, found, ulp


def _need(chunk: Buffer, at: int, phase: int, markers: bool) -> int:
    """The wire size of the FPDU at ``chunk[at]`` when its length field is in
    the chunk but its end is not, else 0."""
    lead = MARKER_SIZE if markers and phase == 0 else 0
    if lead + HEADER_SIZE > len(chunk) - at:
        return 0
    wire = fpdu_wire_size(ULPDU_LENGTH.unpack_from(chunk, at + lead)[0], phase, markers=markers)
    return wire if wire > len(chunk) - at else 0


def fpdu_walk(
    chunk: bytearray,
    at: int,
    phase: int,
    markers: bool,
    either_fpduptr: bool,
    ddp: bool,
    crc: bool,
    max_ulpdu: int,
    count: int,
    /,
) -> tuple[
    list[tuple[int, int, int, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None]],
    int,
    int,
]:
    """The FPDUs from ``chunk[at]`` on, in a row, as :func:`fpdu_view` takes
    each apart, while each is whole in the chunk and clean: CRC right (when
    ``crc``), every marker's Reserved zero and FPDUPTR exactly the expected
    value, PAD zero, ULPDU_Length at most ``max_ulpdu``, and (with ``ddp``)
    its ULPDU described by :func:`describe_ulpdu`. These are the FPDUs the
    analyzer's walk records with no error or note. At most ``count`` (and
    :data:`WALK_MAX`), each as ``(offset, wire_length, ulpdu_length, pad,
    crc, crc_expected, markers, ulp)`` (offsets are the chunk's; ulp None
    without ``ddp``). Returns them, where the walk stopped, and need: the
    wire size of the FPDU there when the chunk ends before it does (its
    length field in the chunk), else 0."""
    _check_walk(at, len(chunk), phase, count)
    count = min(count, WALK_MAX)
    flags = (markers, either_fpduptr, ddp, crc, max_ulpdu)
    taken: list[
        tuple[int, int, int, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None]
    ] = []
    while len(taken) < count:
        found = _clean(chunk, at, phase, flags)
        if found is None:
            break
        wire, length, pad, crc_field, crc_expected, marks, ulp = found
        taken.append((at, wire, length, pad, crc_field, crc_expected, marks, ulp))
        at += wire
        phase = (phase + wire) % MARKER_INTERVAL
    need = _need(chunk, at, phase, markers) if len(taken) < count else 0
    return taken, at, need


def fpdu_count(
    chunk: Buffer,
    at: int,
    phase: int,
    markers: bool,
    either_fpduptr: bool,
    ddp: bool,
    crc: bool,
    max_ulpdu: int,
    count: int,
    /,
) -> tuple[int, int, int]:
    """:func:`fpdu_walk` without the objects: how many clean FPDUs lie in a
    row from ``chunk[at]`` (at most ``count``; no :data:`WALK_MAX` here),
    where they end, and need as :func:`fpdu_walk` says it."""
    data = chunk
    _check_walk(at, len(data), phase, count)
    flags = (markers, either_fpduptr, ddp, crc, max_ulpdu)
    taken = 0
    while taken < count:
        found = _clean(data, at, phase, flags)
        if found is None:
            break
        taken += 1
        at += found[0]
        phase = (phase + found[0]) % MARKER_INTERVAL
    need = _need(data, at, phase, markers) if taken < count else 0
    return taken, at, need


# -- JSON lines ----------------------------------------------------------------------
#
# ``iwarp decode --json`` writes one record per line, as json.dumps(record.to_json())
# would (default separators, ASCII). FPDUs are most of a capture's records, so
# their line is built directly from the record, without the intermediate
# dicts; any value other than a bool, None, an int or a str goes through
# json.dumps, so the text is always json.dumps's.


def json_table(
    fpdu: type[Any],
    marker: type[Any],
    ddp_keys: tuple[str, ...],
    rdmap_keys: tuple[str, ...],
    /,
) -> None:
    """Set what :func:`fpdu_json` writes: the FPDU record's class, its markers'
    class, and the ULPDU keys written under "ddp" and "rdmap", in order
    (short printable ASCII str, at most 32 each)."""
    if not _all_types(fpdu, marker):
        raise TypeError("json_table(fpdu_type, marker_type, ddp_keys, rdmap_keys)")
    for keys in (ddp_keys, rdmap_keys):
        if len(keys) > 32:
            raise ValueError("too many keys")
        if not all(_plain_ascii(k) and len(k) <= 30 for k in keys):
            raise ValueError("keys are short printable ASCII str")
    _Tables.fpdu, _Tables.marker = fpdu, marker
    _Tables.ddp = tuple((k, encode_basestring_ascii(k)) for k in ddp_keys)
    _Tables.rdmap = tuple((k, encode_basestring_ascii(k)) for k in rdmap_keys)


def _all_types(*classes: object) -> bool:
    return all(isinstance(c, type) for c in classes)


def _plain_ascii(s: object) -> bool:
    return isinstance(s, str) and s.isascii() and s.isprintable() and '"' not in s and "\\" not in s


def _value(v: object) -> str:
    """One JSON value as json.dumps writes it."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, str):
        return encode_basestring_ascii(v)
    return json.dumps(v)


def _members(ulp: dict[str, object], keys: tuple[tuple[str, str], ...]) -> str:
    """The object of the keys of ``ulp`` that are present, in the order of
    ``keys`` (each with its JSON text)."""
    parts = []
    for key, name in keys:
        if key in ulp:
            v = ulp[key]
            t = type(v)
            if t is int:
                parts.append(f"{name}: {v}")
            elif t is bool:
                parts.append(f"{name}: true" if v else f"{name}: false")
            else:
                parts.append(f"{name}: {_value(v)}")
    return ", ".join(parts)


def _marker_line(m: Any) -> str:
    seq, reserved, ptr, expected = m.seq, m.reserved, m.fpduptr, m.expected
    if type(seq) is int and type(reserved) is int and type(ptr) is int and type(expected) is int:
        ok = "true" if m.ok else "false"
        return (
            f'{{"seq": {seq}, "reserved": {reserved}, "fpduptr": {ptr}, '
            f'"expected": {expected}, "ok": {ok}}}'
        )
    return json.dumps(m.to_json())


def fpdu_json(record: object, /) -> str | None:
    """The ``--json`` line of an FPDU record (the class :func:`json_table`
    registered; TypeError for any other, RuntimeError before the table),
    without its newline: json.dumps of its ``to_json()``, character for
    character. This twin writes every record's line; the C writer returns
    None for a record with values of unusual kinds (numbers beyond 64 bits,
    strings json.dumps escapes, other types), which its caller then hands
    to this function."""
    if _Tables.fpdu is None:
        raise RuntimeError("json_table was not called")
    if type(record) is not _Tables.fpdu:
        raise TypeError("an FpduRecord")
    r: Any = record
    stream, seq, frame, wire, length = r.stream, r.seq, r.frame, r.wire_length, r.ulpdu_length
    if not (
        type(stream) is int
        and type(seq) is int
        and type(wire) is int
        and type(length) is int
        and (frame is None or type(frame) is int)
        and r.crc_checked is True
    ):
        return json.dumps(r.to_json())
    ulp = r.ulp
    markers = ", ".join([_marker_line(m) for m in r.markers]) if r.markers else ""
    crc, expected = r.crc, r.crc_expected
    return (
        f'{{"type": "fpdu", "stream": {stream}, '
        f'"direction": {encode_basestring_ascii(r.direction)}, "seq": {seq}, '
        f'"frame": {"null" if frame is None else frame}, "wire_length": {wire}, '
        f'"ulpdu_length": {length}, "crc_ok": {"true" if crc == expected else "false"}, '
        f'"crc": "{crc:#010x}", "crc_expected": "{expected:#010x}", '
        f'"pad": "{r.pad.hex()}", "markers": [{markers}], '
        f'"ddp": {{{_members(ulp, _Tables.ddp)}}}, "rdmap": {{{_members(ulp, _Tables.rdmap)}}}}}'
    )


# -- a record made without its __init__ ------------------------------------------------

#: Py_TPFLAGS_HEAPTYPE (a class made at run time) and Py_TPFLAGS_IS_ABSTRACT.
_HEAPTYPE: Final = 1 << 9
_ABSTRACT: Final = 1 << 20


def _plain_class(cls: object) -> bool:
    """A class made at run time (a class statement's) whose bases up to
    object are too, none of variable size: an instance none of whose code
    ran is sound. (The C twin also asks that each has type()'s deallocator,
    which Python cannot see: a heap type made from a C spec passes here.)"""
    if not isinstance(cls, type) or cls.__flags__ & _ABSTRACT:
        return False
    t: type | None = cls
    while t is not object:
        if t is None or not t.__flags__ & _HEAPTYPE or t.__itemsize__:
            return False
        t = t.__base__
    return True


def new_record(cls: type[_R], slots: tuple[object, ...], /, *values: object) -> _R:
    """An instance of ``cls`` (a class of slots made by a class statement,
    every base too) with each member descriptor of ``slots`` (of ``cls`` or
    its bases) set to the value at its place, as a frozen slots dataclass's
    ``__init__`` sets its fields (``object.__setattr__`` each), without
    running any code of the class; TypeError for anything else."""
    if not _plain_class(cls):
        raise TypeError("cls is a class of slots made by a class statement")
    if type(slots) is not tuple or len(slots) != len(values):
        raise TypeError("slots is a tuple with one descriptor per value")
    for d in slots:
        if type(d) is not MemberDescriptorType or not issubclass(cls, d.__objclass__):
            raise TypeError("slots are member descriptors of cls or its bases")
    obj: _R = object.__new__(cls)
    for d, v in zip(slots, values, strict=True):
        d.__set__(obj, v)  # type: ignore[attr-defined]
    return obj
