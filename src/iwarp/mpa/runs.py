"""The shapes of data MPA exchanges with the layer above, in batches.

DDP describes the segments of a message as :class:`SegmentRun` s and MPA
frames a run in one call (on the C path, one kernel call or one send lane);
a receive hands the ULPDUs it completed up as one :class:`UlpduBatch`. They
are MPA's interface to its upper layer, so they are declared here, below DDP
in the layer order (docs/design.md), apart from the codec that uses them
(:mod:`iwarp.mpa.framing`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["SegmentRun", "UlpduBatch"]


class SegmentRun(NamedTuple):
    """Consecutive DDP segments of one message, described, not yet built.

    Segment ``k`` carries ``payload[start + k*room : ...]`` (at most ``room``
    octets, the last up to ``stop``; ``start == stop`` is one empty segment).
    Its ULPDU is ``header`` with the big-endian ``field_size``-octet field at
    ``field_at`` set to ``base`` plus the segment's offset in ``payload`` (the
    TO or MO, RFC 5041 §5.2), and ``last_mask`` (the L flag) or-ed into the
    first octet when the segment ends ``payload``. DDP builds these
    (:mod:`iwarp.ddp.segmentation`); MPA frames them in one call.
    """

    header: bytes
    payload: memoryview
    start: int
    stop: int
    room: int
    field_at: int
    field_size: int
    base: int
    last_mask: int

    @property
    def largest(self) -> int:
        """The largest ULPDU of the run (the first)."""
        return len(self.header) + min(self.room, self.stop - self.start)

    def ulpdus(self) -> Iterator[bytearray]:
        """The ULPDUs one by one (the pure-Python path; one copy each)."""
        header, payload, size = self.header, self.payload, len(self.header)
        total = len(payload)
        offset = self.start
        at, stop = self.field_at, self.field_at + self.field_size
        while True:
            n = min(self.room, self.stop - offset)
            ulpdu = bytearray(size + n)
            ulpdu[:size] = header
            ulpdu[at:stop] = (self.base + offset).to_bytes(self.field_size, "big")
            if offset + n == total:
                ulpdu[0] |= self.last_mask
            ulpdu[size:] = payload[offset : offset + n]
            yield ulpdu
            offset += n
            if offset >= self.stop:
                return

    @property
    def segments(self) -> int:
        """Segments in the run."""
        if self.stop == self.start:
            return 1
        return -(-(self.stop - self.start) // self.room)


class UlpduBatch:
    """The ULPDUs one receive completed, in order, without an object per ULPDU.

    ``views`` come first (at most one: the ULPDU that completed a held-back
    FPDU); then the ULPDUs that lie in ``buffer``: ``records`` holds one
    (offset, length) pair of unsigned 32-bit integers per ULPDU, as the
    ``scan`` kernel finds them. One shape, whichever kernels run. Iterating
    yields every ULPDU as a read-only memoryview.
    """

    __slots__ = ("buffer", "records", "views")

    def __init__(
        self,
        views: list[memoryview],
        buffer: memoryview | None = None,
        records: memoryview | None = None,
    ) -> None:
        self.views = views
        self.buffer = buffer
        #: ``records[2*k]`` is the offset of ULPDU k in ``buffer``, ``records[2*k+1]`` its length.
        self.records = records

    def __len__(self) -> int:
        extra = len(self.records) // 2 if self.records is not None else 0
        return len(self.views) + extra

    def __iter__(self) -> Iterator[memoryview]:
        yield from self.views
        buffer, records = self.buffer, self.records
        if buffer is not None and records is not None:
            for k in range(0, len(records), 2):
                at = records[k]
                yield buffer[at : at + records[k + 1]]
