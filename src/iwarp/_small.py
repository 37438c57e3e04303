"""The small-message lane's kernels in pure Python: the twin of
``src/iwarp/_small.c`` (same names, signatures, results and errors; these
docstrings are the contract of both, and tests compare the two).

:mod:`iwarp.rdma.small` chooses one of them once, at import: the C functions
when the accelerator runs, these otherwise (``IWARP_NO_ACCEL=1``).

A one-segment Send is framed into its FPDU in one call (:func:`small_send`),
and a received whole FPDU that is a one-segment Send for the head posted
receive buffer is checked and placed in one call (:func:`small_receive`).
The protocol's decisions (MSN, which buffer, completions, the stream
position) stay with the cores; these only check and move octets.
"""

from __future__ import annotations

from operator import index
from typing import Final

from iwarp._crc32c import crc32c
from iwarp._kernels import _MAX_SSIZE, _ssize
from iwarp._typing import Buffer
from iwarp.ddp.wire import (
    LAST_FLAG,
    TAGGED_FLAG,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
)
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.mpa.wire import CRC_FIELD, MARKER, MARKER_INTERVAL, ULPDU_LENGTH

__all__ = ["small_receive", "small_send"]

_PHASE_MASK: Final = MARKER_INTERVAL - 1
_MIN_SSIZE: Final = -_MAX_SSIZE - 1
#: Content octets between two markers (RFC 5044 §4.3).
_STRIDE: Final = MARKER_INTERVAL - 4
_ZERO_MARKER: Final = bytes(4)
_PADS: Final = (b"", b"\0", b"\0\0", b"\0\0\0")
_pack_length = ULPDU_LENGTH.pack
_pack_crc = CRC_FIELD.pack
_unpack_length = ULPDU_LENGTH.unpack_from
_unpack_crc = CRC_FIELD.unpack_from
_unpack_header = UNTAGGED_HEADER.unpack_from


def _check_phase(phase: int) -> None:
    if not 0 <= phase <= _PHASE_MASK or phase & 3:
        index(phase)  # TypeError for a non-integer, as the C function's conversion
        _ssize(phase)  # OverflowError first, as the C function's argument parsing
        raise ValueError("phase must be a multiple of 4 below 512")


def _first_marker(phase: int, lead: int) -> int:
    """Content offset of the first marker inside an FPDU (RFC 5044 §4.3)."""
    return MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)


def small_send(
    header: Buffer, payload: Buffer, markers: bool, crc: bool, phase: int, /
) -> tuple[bytes, int]:
    """The FPDU of the ULPDU ``header + payload`` whose first octet is at
    marker phase ``phase`` (RFC 5044 §4.1: ULPDU_Length, ULPDU, PAD, CRC,
    or zero for the CRC field with ``crc`` off; with ``markers`` a marker
    every 512 octets from the marker origin, §4.3), and the marker phase
    after it. The octets are those :meth:`FpduEncoder.encode
    <iwarp.mpa.framing.FpduEncoder.encode>` gives.

    :raises ValueError: ``phase`` is not a multiple of 4 below 512, the
        ULPDU does not fit the 16-bit length field, or (with ``markers``) a
        marker's FPDUPTR would not fit its 16 bits (a ULPDU of about 65,000
        octets or more; senders keep MULPDU below that).
    :raises OverflowError: ``phase`` is outside the C ``Py_ssize_t`` range.
    :raises TypeError: ``phase`` is not an integer, or the octets are not a
        buffer.
    """
    _check_phase(phase)
    n = len(header) + len(payload)
    if n > 0xFFFF:
        raise ValueError("the ULPDU exceeds the 16-bit ULPDU_Length field")
    pad = -(2 + n) & 3
    content = b"".join((_pack_length(n), header, payload, _PADS[pad]))
    if not markers:
        body = content
    else:
        lead = 4 if phase == 0 else 0
        at = _first_marker(phase, lead)
        pieces = [_ZERO_MARKER] if lead else []
        start = k = 0
        # Markers fall before content offsets at, at + 508, ... below the
        # end of the FPDU; one at the CRC's offset goes before the CRC. Each
        # FPDUPTR counts back to the ULPDU_Length field.
        while at <= len(content):
            if at + 4 * k > 0xFFFF:
                raise ValueError("a marker's FPDUPTR would exceed its 16 bits (RFC 5044 §4.3)")
            pieces.append(content[start:at])
            pieces.append(MARKER.pack(0, at + 4 * k))
            start = at
            at += _STRIDE
            k += 1
        pieces.append(content[start:])
        body = b"".join(pieces)
    frame = body + (_pack_crc(crc32c(body)) if crc else _ZERO_MARKER)
    return frame, (phase + len(frame)) & _PHASE_MASK


def _gather(data: Buffer, lead: int, at: int, markers: bool, c: int, length: int) -> bytes:
    """Content octets ``[c, c + length)`` of an FPDU, markers skipped (the
    first at content offset ``at``, then every 508)."""
    view = memoryview(data)
    out = bytearray()
    skipped = 0
    nxt = at
    if markers:
        while nxt <= c:
            nxt += _STRIDE
            skipped += 4
    while length:
        chunk = min(length, nxt - c) if markers else length
        start = lead + c + skipped
        out += view[start : start + chunk]
        c += chunk
        length -= chunk
        if markers and c == nxt:
            nxt += _STRIDE
            skipped += 4
    return bytes(out)


def small_receive(
    data: Buffer,
    markers: bool,
    crc: bool,
    phase: int,
    limit: int,
    version: int,
    msn: int,
    send: int,
    send_se: int,
    head: Buffer,
    /,
) -> tuple[int, int, int] | None:
    """Check and place a received FPDU that is a one-segment Send.

    When ``data`` is exactly one whole FPDU starting at marker phase
    ``phase`` (ULPDU_Length <= ``limit``; every marker exactly as RFC 5044
    §4.3 writes it; the CRC right when ``crc`` is on) whose ULPDU is one
    untagged DDP segment (RFC 5041 §4.3) with DV ``version``, L set, queue
    0, MSN ``msn`` and MO 0, RDMAP control octet ``send`` or ``send_se``
    (RFC 5040 §4.2), and whose payload fits ``head`` (a writable buffer):
    the payload is copied to the start of ``head`` and the completion
    record returned, as (payload length, RDMAP control octet, marker phase
    after the FPDU).

    Anything else: None, and nothing was written; the full path takes
    ``data`` and reports what is wrong with it. Only what the full path
    accepts is accepted here: an FPDU whose markers would count back past
    0xFFFF (RFC 5044 §4.3's FPDUPTR has 16 bits) is declined, and the full
    path answers it with MPA error 3.

    Integers are compared as Python compares them (a negative ``limit``
    takes nothing; ``msn`` counts modulo 2**32).

    :raises ValueError: ``phase`` is not a multiple of 4 below 512, or
        ``head`` and ``data`` are views of one object (the C function also
        refuses any other overlap of their memory).
    :raises OverflowError: an integer is outside the C ``Py_ssize_t`` range.
    :raises TypeError: ``head`` is not writable, or an integer argument
        is not an integer (a float, None...).
    """
    # In the C function's order: data, the integers, head, then the phase.
    view = memoryview(data).cast("B")
    if not (
        type(phase) is int
        and type(limit) is int
        and type(version) is int
        and type(msn) is int
        and type(send) is int
        and type(send_se) is int
        and _MIN_SSIZE <= phase <= _MAX_SSIZE
        and _MIN_SSIZE <= limit <= _MAX_SSIZE
        and _MIN_SSIZE <= version <= _MAX_SSIZE
        and _MIN_SSIZE <= msn <= _MAX_SSIZE
        and _MIN_SSIZE <= send <= _MAX_SSIZE
        and _MIN_SSIZE <= send_se <= _MAX_SSIZE
    ):  # (inline: this runs per small message)
        # Integers only, as the C function's conversion takes them (a float
        # is a TypeError; a bool or an IntEnum is its integer).
        for value in (phase, limit, version, msn, send, send_se):
            index(value)
        _ssize(phase, limit, version, msn, send, send_se)
    target = memoryview(head)
    if target.readonly:
        raise TypeError("head must be a writable buffer")
    _check_phase(phase)
    size = len(view)
    if target.obj is view.obj and target.nbytes and size:  # as _kernels._shares
        raise ValueError("small_receive: head overlaps data")
    if not markers:
        return _receive_unmarked(view, size, crc, phase, limit, version, msn, send, send_se, target)
    lead = 4 if phase == 0 else 0
    if size < lead + 2 + UNTAGGED_HEADER_SIZE + 4:
        return None
    if lead and view[:4] != _ZERO_MARKER:
        return None
    n: int = ULPDU_LENGTH.unpack_from(view, lead)[0]
    if n > limit or n < UNTAGGED_HEADER_SIZE or fpdu_wire_size(n, phase, markers=markers) != size:
        return None
    at = _first_marker(phase, lead)
    content = 6 + n + (-(2 + n) & 3)
    if markers:
        k = 0
        while at + _STRIDE * k < content:
            off = lead + at + MARKER_INTERVAL * k
            if off - lead > 0xFFFF:
                return None  # past 16 bits: the full path's MPA error 3 (RFC 5044 §4.3)
            if view[off : off + 4] != MARKER.pack(0, off - lead):
                return None
            k += 1
    if crc and CRC_FIELD.unpack_from(view, size - 4)[0] != crc32c(view[: size - 4]):
        return None
    header = _gather(view, lead, at, markers, 2, UNTAGGED_HEADER_SIZE)
    control, rdmap, _, qn, got_msn, mo = UNTAGGED_HEADER.unpack(header)
    if (
        control & (TAGGED_FLAG | VERSION_MASK) != version
        or not control & LAST_FLAG
        or rdmap not in (send, send_se)
        or qn != 0
        or got_msn != msn & 0xFFFFFFFF
        or mo != 0
    ):
        return None
    length = n - UNTAGGED_HEADER_SIZE
    if length > target.nbytes:
        return None  # DDP reports the message too long (RFC 5041 §7.1)
    payload = _gather(view, lead, at, markers, 2 + UNTAGGED_HEADER_SIZE, length)
    target.cast("B")[:length] = payload
    return length, rdmap, (phase + size) & _PHASE_MASK


def _receive_unmarked(
    view: memoryview,
    size: int,
    crc: bool,
    phase: int,
    limit: int,
    version: int,
    msn: int,
    send: int,
    send_se: int,
    target: memoryview,
) -> tuple[int, int, int] | None:
    """:func:`small_receive` without markers: the ULPDU lies in one piece."""
    if size < 2 + UNTAGGED_HEADER_SIZE + 4:
        return None
    n: int = _unpack_length(view, 0)[0]
    # RFC 5044 §4.1: length field, ULPDU, PAD to a multiple of 4, CRC.
    if (n + 9) & ~3 != size or n > limit or n < UNTAGGED_HEADER_SIZE:
        return None  # (a ULPDU shorter than its DDP header: the full path says so)
    if crc and _unpack_crc(view, size - 4)[0] != crc32c(view[: size - 4]):
        return None
    control, rdmap, _, qn, got_msn, mo = _unpack_header(view, 2)
    if (
        control & (TAGGED_FLAG | VERSION_MASK) != version
        or not control & LAST_FLAG
        or rdmap not in (send, send_se)
        or qn
        or got_msn != msn & 0xFFFFFFFF
        or mo
    ):
        return None
    length = n - UNTAGGED_HEADER_SIZE
    if length > target.nbytes:
        return None  # DDP reports the message too long (RFC 5041 §7.1)
    if target.format != "B":
        target = target.cast("B")
    target[:length] = view[2 + UNTAGGED_HEADER_SIZE : 2 + n]
    return length, rdmap, (phase + size) & _PHASE_MASK
