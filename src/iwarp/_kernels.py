"""The accelerator's kernels in pure Python: the twin of ``iwarp._speedups``.

The same functions with the same names, signatures, results and errors as
the C module (src/iwarp/_speedups.c); :mod:`iwarp._accel` picks one of the
two once, at import, and the call sites (``mpa/framing.py``,
``rdmap/stream.py``) call whichever it picked, with no branch of their own.
The docstrings here are the contract of both; the stub
``_speedups.pyi`` re-exports these signatures, so the interface is declared
once. Tests compare the two modules function by function.

These loops walk buffers; every protocol decision stays with their callers.
Like the C file, this module sits below the protocol packages and imports
none of them: the layout facts it relies on are restated here (RFC 5044
§4.1-§4.3, §6.1: an FPDU is the 16-bit ULPDU_Length, the ULPDU, PAD to a
multiple of 4 and the CRC-32C, little-endian on the wire; markers are 4
octets every 512 stream octets, a 16-bit FPDUPTR in the low half).

Arguments the C module takes as ``Py_ssize_t`` are refused here as there
(``OverflowError`` beyond its range); buffers an output may not overlap are
refused when they are views of one object (the C module also refuses any
other overlap of memory, which Python cannot see).
"""

from __future__ import annotations

import struct
import sys
from array import array
from functools import lru_cache
from typing import TYPE_CHECKING

from iwarp._typing import Buffer

if TYPE_CHECKING:

    def crc32c(data: Buffer, value: int = 0, /) -> int:
        """CRC-32C (RFC 3385) of ``data``, continuing from ``value``."""
        ...

else:
    from crc32c import crc32c

__all__ = ["crc32c", "describe", "frame_run", "place_run", "scan", "segment_run"]

_MARKER_INTERVAL = 512
_PHASE_MASK = 511
#: Content octets between two markers (512 on the wire minus the marker).
_MARKER_STRIDE = 508
_FPDUPTR_MASK = 0xFFFC
_MAX_SSIZE = sys.maxsize
_MAX_U64 = (1 << 64) - 1
_LAST_FLAG = 0x40
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ZERO_CRC = bytes(4)
_ZERO_MARKER = bytes(4)
_pack_marker = struct.Struct(">HH").pack
_pack_length = struct.Struct(">H").pack
_pack_crc = struct.Struct("<I").pack
_unpack_length = struct.Struct(">H").unpack_from
_unpack_crc = struct.Struct("<I").unpack_from
_unpack_fpduptr = struct.Struct(">2xH").unpack_from
_unpack_tagged = struct.Struct(">IQ").unpack_from
_unpack_untagged = struct.Struct(">III").unpack_from
#: Clears the two low FPDUPTR bits, which receivers treat as zero.
_CLEAR_LOW_BITS = bytes(b & 0xFC for b in range(256))

# scan's error codes (the MPA error each becomes is the caller's to raise).
SCAN_CRC = 2
SCAN_MARKER = 3
SCAN_LENGTH = 4


def describe() -> str:
    """Which CRC-32C implementation runs."""
    return "CRC32C by the crc32c package"


def _ssize(*values: int) -> None:
    if min(values) < -_MAX_SSIZE - 1 or max(values) > _MAX_SSIZE:
        raise OverflowError("Python int too large to convert to C ssize_t")


def _u64(value: int, name: str) -> None:
    if not 0 <= value <= _MAX_U64:
        raise OverflowError(f"{name} must be an unsigned 64-bit value")


def _octets(data: Buffer) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _writable(data: Buffer) -> memoryview:
    view = _octets(data)
    if view.readonly:
        raise BufferError("the buffer is not writable")
    return view


def _shares(a: memoryview, b: memoryview) -> bool:
    """Both non-empty views of one object (see the module docstring)."""
    return bool(a.nbytes and b.nbytes) and a.obj is b.obj


def _records(records: Buffer) -> tuple[memoryview, int]:
    """The (offset, length) words of ``records`` and how many records are whole."""
    raw = _octets(records)
    total = raw.nbytes // 8
    return raw[: total * 8].cast("I"), total


# -- framing (sender) -----------------------------------------------------------------


def frame_run(
    out: Buffer | None,
    header: Buffer,
    payload: Buffer,
    start: int,
    stop: int,
    room: int,
    field_at: int,
    field_size: int,
    base: int,
    last_mask: int,
    markers: bool,
    crc: bool,
    phase: int,
    /,
) -> tuple[bytes | int, int]:
    """The FPDUs of a run of DDP segments of one message (RFC 5041 §5.2,
    RFC 5044 §4-§6); returns ``(frames, phase)``.

    Segments of ``payload[start:stop]``, ``room`` octets each (the last may
    be shorter; ``start == stop`` frames one empty segment). Each ULPDU is
    ``header`` with the big-endian ``field_size``-octet field at
    ``field_at`` set to ``base`` + the segment's offset in ``payload`` (the
    TO or MO, modulo the field), ``last_mask`` or-ed into octet 0 for the
    segment that ends ``payload``; then the payload slice. Each FPDU is
    length, ULPDU, PAD, markers where the stream has them (``phase``: the
    first octet's stream position past a marker position, modulo 512), CRC
    (zero when off). ``phase`` comes back for the octet after the run.

    ``out`` None: ``frames`` is a new ``bytes``. Else ``out`` is a writable
    buffer of at least ``segments * fpdu_bound(len(header) + min(room,
    stop - start))`` octets (see the code) and ``frames`` is the number of
    octets written at its start.

    :raises ValueError: inconsistent arguments, ``out`` too small, or ``out``
        over ``header`` or ``payload``.
    :raises OverflowError: ``base`` is not an unsigned 64-bit value.
    """
    _ssize(start, stop, room, field_at, field_size, last_mask, phase)
    _u64(base, "base")
    head = bytes(header)
    data = _octets(payload)
    hlen = len(head)
    total = data.nbytes
    if (
        hlen > 32
        or not 1 <= field_size <= 8
        or field_size > hlen
        or field_at < 0
        or field_at > hlen - field_size
        or room <= 0
        or room > 0xFFFF - hlen
        or start < 0
        or stop < start
        or stop > total
        or not 0 <= last_mask <= 0xFF
        or not 0 <= phase <= _PHASE_MASK
        or phase & 3
    ):
        raise ValueError("frame_run: inconsistent arguments")
    segments = 1 if stop == start else (stop - start - 1) // room + 1
    content = 9 + hlen + min(stop - start, room)
    each = content + 4 * (content // _MARKER_STRIDE + 3)
    if segments > _MAX_SSIZE // each:
        raise ValueError("frame_run: the run is too long")
    bound = segments * each
    if out is None:
        dest = memoryview(bytearray(bound))
    else:
        dest = _writable(out)
        if dest.nbytes < bound:
            raise ValueError("frame_run: the output buffer is too small")
        if _shares(dest, memoryview(header)) or _shares(dest, data):
            raise ValueError("frame_run: the output buffer overlaps an input")
    field_stop = field_at + field_size
    field_mask = (1 << (8 * field_size)) - 1
    pos = 0
    offset = start
    while True:
        n = min(room, stop - offset)
        ulpdu = hlen + n
        pad = -(2 + ulpdu) & 3
        value = ((base + offset) & field_mask).to_bytes(field_size, "big")
        last = offset + n == total
        begin = pos
        if not markers:
            dest[pos : pos + 2] = _pack_length(ulpdu)
            pos += 2
            dest[pos : pos + hlen] = head
            dest[pos + field_at : pos + field_stop] = value
            if last:
                dest[pos] |= last_mask
            pos += hlen
            dest[pos : pos + n] = data[offset : offset + n]
            pos += n
            if pad:
                dest[pos : pos + pad] = _PADS[pad]
                pos += pad
            phase = (phase + pos - begin + 4) & _PHASE_MASK
        else:
            head_now = bytearray(head)
            head_now[field_at:field_stop] = value
            if last:
                head_now[0] |= last_mask
            body = b"".join((_pack_length(ulpdu), head_now, data[offset : offset + n], _PADS[pad]))
            if phase == 0:  # RFC 5044 §4.3: FPDUPTR 0, CRC'd with this FPDU
                dest[pos : pos + 4] = _ZERO_MARKER
                pos += 4
                phase = 4
            # Markers at every 512th stream octet: the first ``at`` octets
            # into the body, then every 508 body octets, one right before
            # the CRC when the body ends on a marker position.
            at = _MARKER_INTERVAL - phase
            count = (len(body) - at) // _MARKER_STRIDE + 1 if at <= len(body) else 0
            if count:
                slices, high, low = _frame_plan(at, len(body), count)
                between: list[Buffer] = [_ZERO_MARKER] * (2 * count + 1)
                whole = memoryview(body)
                between[::2] = [whole[piece] for piece in slices]
                frame = b"".join(between)
                size = len(frame)
                dest[pos : pos + size] = frame
                first = pos + at
                stop_at = first + _MARKER_INTERVAL * count
                dest[first + 2 : stop_at : _MARKER_INTERVAL] = high
                dest[first + 3 : stop_at : _MARKER_INTERVAL] = low
            else:
                size = len(body)
                dest[pos : pos + size] = body
            pos += size
            phase = (phase + size + 4) & _PHASE_MASK
        dest[pos : pos + 4] = _pack_crc(crc32c(dest[begin:pos])) if crc else _ZERO_CRC
        pos += 4
        offset += n
        if offset >= stop:
            break
    if out is None:
        return dest[:pos].tobytes(), phase
    return pos, phase


@lru_cache(maxsize=4096)
def _frame_plan(at: int, size: int, count: int) -> tuple[tuple[slice, ...], bytes, bytes]:
    """The ``count`` markers a sent FPDU body of ``size`` octets (length
    field to PAD) gets, the first ``at`` octets into it: the body's pieces
    between them and every FPDUPTR's high and low octets (each counts from
    the length field, markers before it included). Cached, as the receive
    side's plan."""
    cuts = [at + _MARKER_STRIDE * k for k in range(count)]
    ptrs = [at + _MARKER_INTERVAL * k for k in range(count)]
    return (
        tuple(slice(a, b) for a, b in zip([0, *cuts], [*cuts, size], strict=True)),
        bytes((p >> 8) & 0xFF for p in ptrs),
        bytes(p & 0xFF for p in ptrs),
    )


# -- scanning (receiver) --------------------------------------------------------------


@lru_cache(maxsize=4096)
def _marker_plan(at: int, n: int, count: int) -> tuple[bytes, bytes, bool, struct.Struct | None]:
    """The ``count`` markers of a received FPDU, the first ``at`` octets past
    its length field, whose ULPDU has ``n`` octets: every FPDUPTR's high and
    low octets, whether one exceeds 16 bits (no marker can hold it) and,
    when some split the ULPDU, a Struct whose fields are the ULPDU's pieces
    between them on the wire (from the first ULPDU octet): unpacking and
    joining them cuts the markers out in a few C calls. Cached: a bulk
    transfer repeats a few (phase, length) pairs."""
    ptrs = [at + _MARKER_INTERVAL * k for k in range(count)]
    cuts = [c for c in (at - 2 + _MARKER_STRIDE * k for k in range(count)) if c < n]
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    return (
        bytes((p >> 8) & 0xFF for p in ptrs),
        bytes(p & 0xFF for p in ptrs),
        ptrs[-1] > 0xFFFF,
        struct.Struct("<" + "4x".join(f"{size}s" for size in sizes)) if cuts else None,
    )


def scan(
    buffer: Buffer,
    start: int,
    end: int,
    markers: bool,
    crc: bool,
    phase: int,
    limit: int,
    either: bool,
    /,
) -> tuple[bytes, int, int, int, int, int, int]:
    """Decode every complete FPDU of ``buffer[start:end]``; returns
    ``(records, stop, phase, error, a, b, where)``.

    ``records`` holds one (ULPDU offset, ULPDU length) pair of native
    unsigned 32-bit integers per FPDU decoded. With ``markers`` the buffer
    must be writable: markers are checked and cut out in place, so each
    ULPDU is contiguous. ``phase`` is ``buffer[start]``'s stream position
    past a marker position (modulo 512); it comes back for ``stop``, the
    first octet not consumed. ``either``: the markers inside an FPDU that
    starts with a marker may also count from that marker (4 more), the
    reading of Rev 0 and culley-02 peers.

    ``error`` is 0, or 2 (CRC: ``a`` received, ``b`` computed, ``where`` the
    FPDU's first octet), 3 (marker: ``a`` the FPDUPTR found, ``b`` the one
    expected, ``where`` the marker) or 4 (ULPDU_Length above ``limit``:
    ``a`` the length, ``where`` the length field); decoding stops there.

    :raises ValueError: inconsistent arguments.
    :raises BufferError: markers on and ``buffer`` is read-only.
    """
    _ssize(start, end, phase, limit)
    view = _writable(buffer) if markers else _octets(buffer)
    size = view.nbytes
    if (
        start < 0
        or end < start
        or end > size
        or size > 0xFFFFFFFF
        or not 0 <= phase <= _PHASE_MASK
        or phase & 3
        or limit < 0
    ):
        raise ValueError("scan: inconsistent arguments")
    records = array("I")
    append = records.append
    i = start
    error = a = b = where = 0
    while True:
        lead = 4 if markers and phase == 0 else 0
        if end - i < lead + 2:
            break
        n: int = _unpack_length(view, i + lead)[0]
        if n > limit:
            error, a, where = SCAN_LENGTH, n, i + lead
            break
        content = 6 + n + (-(2 + n) & 3)
        count = 0
        at = 0
        wire = content
        if markers:
            at = _MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)
            if at < content:
                count = (content - at + _MARKER_STRIDE - 1) // _MARKER_STRIDE
            wire = lead + content + 4 * count
        stop = i + wire
        if stop > end:
            break
        if crc:
            received: int = _unpack_crc(view, stop - 4)[0]
            computed = crc32c(view[i : stop - 4])
            if received != computed:
                error, a, b, where = SCAN_CRC, received, computed, i
                break
        header = i + lead
        if lead:
            found: int = _unpack_fpduptr(view, i)[0]
            if found & _FPDUPTR_MASK:
                error, a, b, where = SCAN_MARKER, found, 0, i
                break
        if count:
            first = header + at
            last = first + _MARKER_INTERVAL * count
            high, low, overflow, pieces = _marker_plan(at, n, count)
            if (
                overflow
                or view[first + 2 : last : _MARKER_INTERVAL].tobytes() != high
                or view[first + 3 : last : _MARKER_INTERVAL].tobytes().translate(_CLEAR_LOW_BITS)
                != low
            ):
                # One by one: which marker is wrong (or, with ``either``,
                # whether each fits one of the two readings).
                marker = first
                while marker < last:
                    found = _unpack_fpduptr(view, marker)[0]
                    expected = marker - header
                    masked = found & _FPDUPTR_MASK
                    if masked != expected and not (either and lead and masked == expected + lead):
                        break
                    marker += _MARKER_INTERVAL
                if marker < last:
                    error, a, b, where = SCAN_MARKER, found, expected, marker
                    break
            if pieces is not None:
                # Cut the markers that split the ULPDU out, in place.
                ulpdu = view[header + 2 :]
                ulpdu[:n] = b"".join(pieces.unpack_from(ulpdu))
        append(header + 2)
        append(n)
        i = stop
        phase = (phase + wire) & _PHASE_MASK
    return records.tobytes(), i, phase, error, a, b, where


# -- placement ------------------------------------------------------------------------


def segment_run(
    buffer: Buffer,
    records: Buffer,
    index: int,
    tagged: bool,
    control_mask: int,
    control: int,
    rdmap: int,
    key: int,
    msn: int,
    offset: int,
    /,
) -> tuple[int, int, bool]:
    """How many decoded segments, from record ``index`` on, continue one
    tagged or untagged message with nothing to decide per segment; returns
    ``(count, octets, last)``: their payload octets and whether the last
    had the L flag.

    Each segment counted lies in ``buffer``, is longer than its header (14
    octets tagged, 18 untagged), has ``(DDP control & control_mask) ==
    control`` and RsvdULP octet ``== rdmap``; tagged: STag ``== key`` and TO
    ``== offset``; untagged: QN ``== key``, MSN ``== msn``, MO ``==
    offset``; ``offset`` advancing by each payload (modulo 2**64). A tagged
    run ends after a segment with L set. ``records`` as :func:`scan` gives
    them (at any alignment; a torn last record is ignored).

    :raises OverflowError: ``offset`` is not an unsigned 64-bit value.
    """
    _ssize(index, control_mask, control, rdmap, key, msn)
    _u64(offset, "offset")
    data = _octets(buffer)
    words, total = _records(records)
    size = data.nbytes
    hsize = 14 if tagged else 18
    count = octets = 0
    last = False
    k = index
    while 0 <= k < total:
        at = words[2 * k]
        n = words[2 * k + 1]
        if n <= hsize or at > size or n > size - at:
            break
        control_octet = data[at]
        if control_octet & control_mask != control or data[at + 1] != rdmap:
            break
        if tagged:
            stag, to = _unpack_tagged(data, at + 2)
            if stag != key or to != offset:
                break
        else:
            qn, number, mo = _unpack_untagged(data, at + 6)
            if qn != key or number != msn or mo != offset:
                break
        length = n - hsize
        offset = (offset + length) & _MAX_U64
        octets += length
        count += 1
        if control_octet & _LAST_FLAG:
            last = True
            break
        k += 1
    return count, octets, last


def place_run(
    buffer: Buffer,
    records: Buffer,
    index: int,
    count: int,
    header_size: int,
    target: Buffer,
    /,
) -> None:
    """Copy the payloads (past ``header_size`` octets) of
    ``records[index:index+count]`` one after the other into ``target``,
    which must be exactly their total length. Nothing is written unless
    every record lies in ``buffer``.

    :raises ValueError: records out of range or outside ``buffer``, a
        target of another length, or a target over ``buffer`` or
        ``records``.
    :raises TypeError: ``target`` is read-only.
    """
    _ssize(index, count, header_size)
    data = _octets(buffer)
    raw = _octets(records)
    dest = _octets(target)
    if dest.readonly:
        raise TypeError("place_run: the target must be a writable buffer")
    words, total = _records(raw)
    if index < 0 or count < 0 or index > total or count > total - index or header_size < 0:
        raise ValueError("place_run: records out of range")
    if _shares(dest, data) or _shares(dest, raw):
        raise ValueError("place_run: the target overlaps the input")
    size = data.nbytes
    room = dest.nbytes
    need = 0
    for k in range(index, index + count):
        at = words[2 * k]
        n = words[2 * k + 1]
        if n < header_size or at > size or n > size - at:
            raise ValueError("place_run: a record lies outside the buffer")
        if n - header_size > room - need:
            raise ValueError("place_run: the target is not the run's length")
        need += n - header_size
    if need != room:
        raise ValueError("place_run: the target is not the run's length")
    pos = 0
    for k in range(index, index + count):
        at = words[2 * k] + header_size
        n = words[2 * k + 1] - header_size
        dest[pos : pos + n] = data[at : at + n]
        pos += n
