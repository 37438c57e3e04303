"""DDP segmentation at the data source (RFC 5041 §5.2).

A message becomes one or more segments of at most MULPDU octets each,
header included; the last carries the L flag, a zero-length message is
exactly one segment.

:class:`OutgoingMessage` describes a message's segments without building
them: :meth:`~OutgoingMessage.next_run` hands out
:class:`~iwarp.mpa.runs.SegmentRun` s (header template, payload slice,
segment size) that MPA frames in one call (with the C accelerator, straight
from the caller's buffer into the FPDUs: the one copy of the send path).
Runs are made lazily, a batch at a time, so a 16 MiB RDMA Write never sits
in memory twice. :func:`tagged_segments` / :func:`untagged_segments` give
the same segments as ``bytearray`` ULPDUs, one at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

from iwarp._typing import Buffer
from iwarp.ddp.wire import (
    DDP_VERSION,
    LAST_FLAG,
    MAX_MSN,
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    fits_to_space,
)
from iwarp.errors import LocalProtocolError
from iwarp.mpa.runs import SegmentRun

__all__ = ["MAX_MESSAGE", "OutgoingMessage", "tagged_segments", "untagged_segments"]

#: RFC 5041 §5.2: "The ULP Message Length MUST be less than 2^32."
MAX_MESSAGE = 0xFFFFFFFF
#: Octets of ULPDUs per run at most: MPA frames a run into one buffer, and
#: buffers this size come from the allocator's reused heap, not from fresh
#: pages (measured: 1 MiB runs framed 3-5 times slower, page faults).
RUN_OCTETS = 64 * 1024

_pack_tagged = TAGGED_HEADER.pack_into
_pack_untagged = UNTAGGED_HEADER.pack_into


def _check(payload: memoryview, header: int, mulpdu: int) -> int:
    if len(payload) > MAX_MESSAGE:
        raise LocalProtocolError("a DDP message must be shorter than 2**32 octets (RFC 5041 §5.2)")
    room = mulpdu - header
    if room <= 0:
        raise LocalProtocolError(f"MULPDU {mulpdu} leaves no room after a {header}-octet header")
    return room


class OutgoingMessage:
    """One DDP message being segmented, as runs of segments.

    Build it with :meth:`tagged` or :meth:`untagged` (which make the checks
    of :func:`tagged_segments` / :func:`untagged_segments`); then call
    :meth:`next_run` until :attr:`done`.
    """

    __slots__ = ("_header", "_room", "base", "field_at", "field_size", "offset", "payload")

    def __init__(
        self, header: bytes, payload: memoryview, room: int, field_at: int, base: int
    ) -> None:
        self._header = header
        self.payload = payload
        self._room = room
        self.field_at = field_at
        self.field_size = len(header) - field_at
        self.base = base
        #: Payload octets already handed out in runs; -1 before the first run.
        self.offset = -1

    @classmethod
    def tagged(
        cls,
        payload: Buffer,
        *,
        stag: int,
        to: int,
        rsvdulp: int,
        mulpdu: int,
        version: int = DDP_VERSION,
    ) -> OutgoingMessage:
        """A tagged message placed at ``to`` in the buffer ``stag``.

        :raises LocalProtocolError: as :func:`tagged_segments`.
        """
        view = memoryview(payload).cast("B")
        room = _check(view, TAGGED_HEADER_SIZE, mulpdu)
        if not fits_to_space(to, len(view)):
            raise LocalProtocolError("the message would wrap the 64-bit Tagged Offset")
        header = TAGGED_HEADER.pack(TAGGED_FLAG | (version & 3), rsvdulp, stag, 0)
        return cls(header, view, room, 6, to)

    @classmethod
    def untagged(
        cls,
        payload: Buffer,
        *,
        qn: int,
        msn: int,
        rsvdulp: int,
        rsvdulp2: int = 0,
        mulpdu: int,
        version: int = DDP_VERSION,
    ) -> OutgoingMessage:
        """An untagged message ``msn`` on queue ``qn``.

        :raises LocalProtocolError: as :func:`untagged_segments`.
        """
        view = memoryview(payload).cast("B")
        room = _check(view, UNTAGGED_HEADER_SIZE, mulpdu)
        if not 0 <= msn <= MAX_MSN:
            raise LocalProtocolError(f"MSN {msn} is not a 32-bit value")
        header = UNTAGGED_HEADER.pack(version & 3, rsvdulp, rsvdulp2, qn, msn, 0)
        return cls(header, view, room, 14, 0)

    def set_mulpdu(self, mulpdu: int) -> None:
        """Segment what is left to the new MULPDU (an EMSS change, RFC 5044
        §4.5); runs already handed out keep theirs.

        :raises LocalProtocolError: no payload octet would fit a segment.
        """
        room = mulpdu - len(self._header)
        if room < 1:
            raise LocalProtocolError(f"MULPDU {mulpdu} leaves no room after the DDP header")
        self._room = room

    @property
    def done(self) -> bool:
        """Every segment was handed out."""
        return self.offset >= len(self.payload)

    @property
    def next_segment(self) -> int:
        """Octets of the next segment's ULPDU (header included); 0 when
        :attr:`done`."""
        left = len(self.payload) - max(self.offset, 0)
        if left < 0 or (left == 0 and self.offset >= 0):
            return 0
        return len(self._header) + min(self._room, left)

    def next_run(self, limit: int | None = None) -> SegmentRun | None:
        """The next segments, about ``limit`` octets of ULPDUs (at least one
        segment); None when :attr:`done`."""
        total = len(self.payload)
        start = max(self.offset, 0)
        if self.offset >= total:
            return None
        room = self._room
        limit = RUN_OCTETS if limit is None else min(limit, RUN_OCTETS)
        count = max(1, limit // (room + len(self._header)))
        stop = min(total, start + count * room)
        self.offset = stop
        return SegmentRun(
            self._header,
            self.payload,
            start,
            stop,
            room,
            self.field_at,
            self.field_size,
            self.base,
            LAST_FLAG,
        )

    def rest(self) -> SegmentRun | None:
        """Every segment not handed out yet, as one run of any size (a send
        lane writes it whole); None when :attr:`done`."""
        total = len(self.payload)
        if self.offset >= total:
            return None
        start = max(self.offset, 0)
        self.offset = total
        return SegmentRun(
            self._header,
            self.payload,
            start,
            total,
            self._room,
            self.field_at,
            self.field_size,
            self.base,
            LAST_FLAG,
        )


def tagged_segments(
    payload: Buffer, *, stag: int, to: int, rsvdulp: int, mulpdu: int, version: int = DDP_VERSION
) -> Iterator[bytearray]:
    """Segments of a tagged message placed at ``to`` in the buffer ``stag``.

    Each segment's TO is the initial TO plus its offset in the message (RFC
    5041 §5.2). ``version`` is DV: 1, or 0 for RDMAC peers (RFC 5044 App. C).

    :raises LocalProtocolError: the message is too long, ``mulpdu`` too
        small, or the message would wrap the 64-bit TO.
    """
    view = memoryview(payload).cast("B")
    room = _check(view, TAGGED_HEADER_SIZE, mulpdu)
    total = len(view)
    if not fits_to_space(to, total):
        raise LocalProtocolError("the message would wrap the 64-bit Tagged Offset")
    if total <= room:  # one segment (most messages): no generator to run
        ulpdu = bytearray(TAGGED_HEADER_SIZE + total)
        control = TAGGED_FLAG | LAST_FLAG | (version & 3)
        _pack_tagged(ulpdu, 0, control, rsvdulp, stag, to)
        ulpdu[TAGGED_HEADER_SIZE:] = view
        return iter((ulpdu,))
    return _tagged(view, total, room, stag, to, rsvdulp, version)


def _tagged(
    view: memoryview, total: int, room: int, stag: int, to: int, rsvdulp: int, version: int
) -> Iterator[bytearray]:
    control = TAGGED_FLAG | (version & 3)
    offset = 0
    while True:
        n = min(room, total - offset)
        last = offset + n == total
        ulpdu = bytearray(TAGGED_HEADER_SIZE + n)
        _pack_tagged(ulpdu, 0, control | (LAST_FLAG if last else 0), rsvdulp, stag, to + offset)
        ulpdu[TAGGED_HEADER_SIZE:] = view[offset : offset + n]
        yield ulpdu
        offset += n
        if last:
            return


def untagged_segments(
    payload: Buffer,
    *,
    qn: int,
    msn: int,
    rsvdulp: int,
    rsvdulp2: int = 0,
    mulpdu: int,
    version: int = DDP_VERSION,
) -> Iterator[bytearray]:
    """Segments of an untagged message ``msn`` on queue ``qn``.

    Each segment's MO is its offset in the message (RFC 5041 §5.2).

    :raises LocalProtocolError: the message is too long or ``mulpdu`` too
        small.
    """
    view = memoryview(payload).cast("B")
    room = _check(view, UNTAGGED_HEADER_SIZE, mulpdu)
    if not 0 <= msn <= MAX_MSN:
        raise LocalProtocolError(f"MSN {msn} is not a 32-bit value")
    total = len(view)
    if total <= room:  # one segment (most messages): no generator to run
        ulpdu = bytearray(UNTAGGED_HEADER_SIZE + total)
        control = LAST_FLAG | (version & 3)
        _pack_untagged(ulpdu, 0, control, rsvdulp, rsvdulp2, qn, msn, 0)
        ulpdu[UNTAGGED_HEADER_SIZE:] = view
        return iter((ulpdu,))
    return _untagged(view, total, room, qn, msn, rsvdulp, rsvdulp2, version)


def _untagged(
    view: memoryview,
    total: int,
    room: int,
    qn: int,
    msn: int,
    rsvdulp: int,
    rsvdulp2: int,
    version: int,
) -> Iterator[bytearray]:
    control = version & 3
    offset = 0
    while True:
        n = min(room, total - offset)
        last = offset + n == total
        ulpdu = bytearray(UNTAGGED_HEADER_SIZE + n)
        flags = control | (LAST_FLAG if last else 0)
        _pack_untagged(ulpdu, 0, flags, rsvdulp, rsvdulp2, qn, msn, offset)
        ulpdu[UNTAGGED_HEADER_SIZE:] = view[offset : offset + n]
        yield ulpdu
        offset += n
        if last:
            return
