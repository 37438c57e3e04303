"""FPDU framing: ULPDUs to FPDUs and back (RFC 5044 §4-§6), sans-IO.

:class:`FpduEncoder` turns one ULPDU into one FPDU; :class:`FpduDecoder` takes
the in-order byte stream in chunks of any size and returns complete ULPDUs.
Both know where Markers go because they track the stream position relative
to the *marker origin*: the first octet of MPA full operation (RFC 5044
§4.3), given as any 32-bit value (a TCP sequence number, or 0).

Layout of one FPDU on the wire, with the positions the code below relies on::

    [marker]  ULPDU_Length  ULPDU ... [marker] ... ULPDU  PAD  [marker]  CRC
     ^ only when the FPDU starts on a marker position (FPDUPTR 0)

Everything is a multiple of 4 octets from the marker origin on (FPDUs are
padded to 4, markers are 4 long and 512 apart), so a marker never splits the
ULPDU_Length field, the PAD or the CRC: it sits before the length field
(FPDUPTR 0), inside the ULPDU, or right before the CRC. The CRC covers every
octet of the FPDU before the CRC field, markers included (RFC 5044 §6.1).
"""

from __future__ import annotations

from functools import lru_cache
from sys import getrefcount
from typing import Final, NamedTuple

from iwarp._accel import kernels
from iwarp._crc32c import crc32c
from iwarp._kernels import SCAN_CRC, SCAN_LENGTH, SCAN_MARKER
from iwarp._typing import Buffer
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.runs import SegmentRun, UlpduBatch
from iwarp.mpa.wire import (
    CRC_FIELD,
    MARKER,
    MARKER_INTERVAL,
    MAX_ULPDU,
    ULPDU_LENGTH,
    ZERO_MARKER,
)

__all__ = ["FpduDecoder", "FpduEncoder", "fpdu_wire_size"]

_SEQ_MASK = 0xFFFFFFFF
_PHASE_MASK = MARKER_INTERVAL - 1
#: Content octets between two markers (512 on the wire minus the marker).
_MARKER_STRIDE = MARKER_INTERVAL - 4
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ZERO_CRC = bytes(4)
_pack_length = ULPDU_LENGTH.pack
_pack_crc = CRC_FIELD.pack
_pack_marker = MARKER.pack
#: Up to this many markers per FPDU the encoder places them in a plain loop.
_LOOP_MAX = 4
_unpack_length = ULPDU_LENGTH.unpack_from
_unpack_crc = CRC_FIELD.unpack_from


def _check_position(origin: int, position: int | None) -> tuple[int, int]:
    for name, value in (("origin", origin), ("position", position)):
        if value is not None and not 0 <= value <= _SEQ_MASK:
            raise ValueError(f"{name} must be a 32-bit stream position, got {value}")
    if position is None:
        position = origin
    offset = (position - origin) & _SEQ_MASK
    if offset & 3:
        raise ValueError("FPDUs start at multiples of 4 octets from the marker origin")
    return position, offset & _PHASE_MASK


def fpdu_wire_size(ulpdu_length: int, phase: int, *, markers: bool) -> int:
    """Octets on the wire of an FPDU carrying ``ulpdu_length`` octets.

    ``phase`` is the FPDU's first octet relative to the marker origin, modulo
    512 (0: it starts on a marker position, so a leading marker is counted).
    Markers, PAD and CRC are included (RFC 5044 §4.1, §4.3).
    """
    content = 6 + ulpdu_length + (-(2 + ulpdu_length) & 3)
    if not markers:
        return content
    lead = 4 if phase == 0 else 0
    at = MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)
    if at >= content:
        return lead + content
    return lead + content + 4 * ((content - at + _MARKER_STRIDE - 1) // _MARKER_STRIDE)


class _MarkerPlan(NamedTuple):
    """Where the markers of one FPDU fall, relative to its ULPDU."""

    #: Markers that split the ULPDU (a last one may follow the PAD).
    inside: int
    #: Slices of the ULPDU between those markers.
    pieces: tuple[slice, ...]
    #: High and low octets of every marker's FPDUPTR, in order.
    ptr_high: bytes
    ptr_low: bytes


@lru_cache(maxsize=4096)
def _marker_plan(at: int, n: int, count: int) -> _MarkerPlan:
    """Plan ``count`` markers, the first ``at`` octets past the length field
    (the encoder's; the decoder's are checked by the ``scan`` kernel).

    Cached: a bulk transfer repeats a few (phase, length) pairs, so the work
    per FPDU is a handful of C-level slice operations, not a Python loop per
    marker.
    """
    cuts = [at - 2 + _MARKER_STRIDE * k for k in range(count)]
    cuts = [c for c in cuts if c < n]
    bounds = list(zip([0, *cuts], [*cuts, n], strict=True))
    ptrs = [at + MARKER_INTERVAL * k for k in range(count)]
    return _MarkerPlan(
        inside=len(cuts),
        pieces=tuple(slice(a, b) for a, b in bounds),
        ptr_high=bytes((p >> 8) & 0xFF for p in ptrs),
        ptr_low=bytes(p & 0xFF for p in ptrs),
    )


class _BufferPool:
    """Output buffers for framed runs, reused once nobody holds them.

    A buffer is handed out as a memoryview, which keeps a reference to it
    until the transport has sent it and dropped the view; a buffer only the
    pool references can be overwritten. Reusing them keeps the sender on
    memory already mapped and in cache: fresh 64 KiB buffers cost a page
    fault per 4 KiB, measured as the largest cost of framing here.
    """

    __slots__ = ("_buffers",)
    SIZE = 96 * 1024
    COUNT = 64

    def __init__(self) -> None:
        self._buffers: list[bytearray] = []

    def get(self, size: int) -> bytearray:
        if size > self.SIZE:
            return bytearray(size)
        for buffer in self._buffers:
            # Referenced by the list, the loop variable and the call only.
            if getrefcount(buffer) <= 3:
                return buffer
        buffer = bytearray(self.SIZE)
        if len(self._buffers) < self.COUNT:
            self._buffers.append(buffer)
        return buffer


_POOL = _BufferPool()

#: Runs framed into at most this many octets get a ``bytes`` object of
#: their own: cheaper than finding a free pooled buffer and viewing it.
_SMALL_RUN: Final = 2048


class _Framer:
    """What both directions track: the options and the stream position."""

    __slots__ = ("_phase", "_position", "crc", "markers", "max_ulpdu")
    _LIMIT: int

    def __init__(
        self,
        *,
        markers: bool = False,
        crc: bool = True,
        origin: int = 0,
        position: int | None = None,
        max_ulpdu: int = MAX_ULPDU,
    ) -> None:
        if not 0 <= max_ulpdu <= self._LIMIT:
            raise ValueError(f"max_ulpdu must be 0..{self._LIMIT}, got {max_ulpdu}")
        self.markers = markers
        self.crc = crc
        self.max_ulpdu = max_ulpdu
        self._position, self._phase = _check_position(origin, position)

    @property
    def phase(self) -> int:
        """Marker phase of the next octet: its offset from the marker origin,
        modulo 512 (kept up to date when markers are on)."""
        return self._phase

    def advance(self, octets: int, phase: int) -> None:
        """Count ``octets`` of whole FPDUs framed or decoded outside this
        framer (a send lane, :mod:`iwarp.rdma.lanes`; the small-message
        lane, :mod:`iwarp.rdma.small`), after which the marker phase is
        ``phase``. A decoder must hold nothing back (:attr:`FpduDecoder.buffered`
        is 0): the octets are the next ones of the stream."""
        self._position = (self._position + octets) & _SEQ_MASK
        if self.markers:
            self._phase = phase & _PHASE_MASK


class FpduEncoder(_Framer):
    """Frames ULPDUs into FPDUs for one direction of one MPA connection.

    :param markers: insert a Marker at every 512th octet of the stream.
    :param crc: compute the CRC; otherwise the field is sent as zero.
    :param origin: stream position (e.g. TCP sequence number) of the first
        octet of MPA full operation; markers are placed relative to it.
    :param position: stream position of the next octet this encoder emits
        (defaults to ``origin``); ``position - origin`` must be a multiple of 4.
    :param max_ulpdu: refuse larger ULPDUs (the current MULPDU, at most 64768).
    """

    __slots__ = ()
    _LIMIT = MAX_ULPDU  # RFC 5044 §5.3: no sender posts more

    @property
    def position(self) -> int:
        """Stream position (mod 2**32) of the next octet to be sent."""
        return self._position

    def encode(self, ulpdu: Buffer) -> list[Buffer]:
        """Frame one ULPDU; returns the FPDU as a list of buffers, in order.

        The ULPDU itself is not copied: the list holds it (or memoryview
        slices of it), ready for ``writelines``/``sendmsg``. The caller must
        not modify ``ulpdu`` until those buffers are sent.

        :raises LocalProtocolError: the ULPDU is larger than ``max_ulpdu``.
        """
        n = len(ulpdu)
        if n > self.max_ulpdu:
            raise LocalProtocolError(
                f"ULPDU of {n} octets exceeds the maximum of {self.max_ulpdu} (MULPDU); "
                "DDP must segment it"
            )
        pad = -(2 + n) & 3
        content = 6 + n + pad  # length + ULPDU + PAD + CRC
        head = _pack_length(n)
        if not self.markers:
            self._position = (self._position + content) & _SEQ_MASK
            if not self.crc:
                return [head, ulpdu, _PADS[pad] + _ZERO_CRC]
            value = crc32c(ulpdu, crc32c(head))
            if pad:
                value = crc32c(_PADS[pad], value)
            return [head, ulpdu, _PADS[pad] + _pack_crc(value)]

        # With markers the FPDU is joined into one buffer and summed in one
        # CRC pass: measured cheaper than summing many small pieces.
        phase = self._phase
        lead = 4 if phase == 0 else 0  # RFC 5044 §4.3: a marker between FPDUs
        # is 0 and belongs to (and is CRC'd with) the FPDU that follows it.
        at = MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)  # first inner marker
        count = (content - at + _MARKER_STRIDE - 1) // _MARKER_STRIDE if at < content else 0
        pieces: list[Buffer] = [ZERO_MARKER, head] if lead else [head]
        if count <= _LOOP_MAX:
            # Few markers (MSS-sized FPDUs): a plain loop is cheapest.
            tail = False  # the rest of the ULPDU and the PAD are emitted
            src = 0  # next ULPDU octet to emit
            cut = at - 2  # ULPDU offset of the next marker
            ptr = at  # its FPDUPTR
            for _ in range(count):
                if cut < n:
                    pieces.append(ulpdu[src:cut])
                    src = cut
                elif not tail:  # the marker follows the ULPDU and PAD: before the CRC
                    pieces.append(ulpdu[src:])
                    pieces.append(_PADS[pad])
                    tail = True
                pieces.append(_pack_marker(0, ptr))
                cut += _MARKER_STRIDE
                ptr += MARKER_INTERVAL
            if not tail:
                pieces.append(ulpdu[src:])
                pieces.append(_PADS[pad])
            frame: bytes | bytearray = b"".join(pieces)
        else:
            # Many markers: a cached plan, zero placeholders, then every
            # FPDUPTR written with two strided stores (markers are 512 apart).
            plan = _marker_plan(at, n, count)
            between: list[Buffer] = [ZERO_MARKER] * (2 * plan.inside + 1)
            between[::2] = [ulpdu[piece] for piece in plan.pieces]
            pieces += between
            pieces.append(_PADS[pad])
            if count > plan.inside:  # a marker after the PAD, right before the CRC
                pieces.append(ZERO_MARKER)
            frame = bytearray().join(pieces)
            first = lead + at + 2
            stop = first + MARKER_INTERVAL * count
            frame[first:stop:MARKER_INTERVAL] = plan.ptr_high
            frame[first + 1 : stop + 1 : MARKER_INTERVAL] = plan.ptr_low
        wire = len(frame) + 4
        self._phase = (phase + wire) & _PHASE_MASK
        self._position = (self._position + wire) & _SEQ_MASK
        return [frame, _pack_crc(crc32c(frame)) if self.crc else _ZERO_CRC]

    def encode_run(self, run: SegmentRun) -> list[Buffer]:
        """Frame every segment of ``run``; returns the FPDUs as buffers, in order.

        The whole run is framed in one kernel call (``frame_run``) into one
        buffer: the same octets as :meth:`encode` of each ULPDU.

        :raises LocalProtocolError: a segment is larger than ``max_ulpdu``
            (nothing is framed).
        """
        largest = run.largest
        if largest > self.max_ulpdu:
            raise LocalProtocolError(
                f"ULPDU of {largest} octets exceeds the maximum of {self.max_ulpdu} (MULPDU); "
                "DDP must segment it"
            )
        segments = run.segments
        content = 9 + largest  # as frame_run bounds it: each ULPDU <= the first
        bound = segments * (content + 4 * (content // _MARKER_STRIDE + 3))
        # A small message gets a bytes object of its own (no pooled buffer).
        buffer = None if bound <= _SMALL_RUN else _POOL.get(bound)
        framed, phase = kernels.frame_run(
            buffer,
            run.header,
            run.payload,
            run.start,
            run.stop,
            run.room,
            run.field_at,
            run.field_size,
            run.base,
            run.last_mask,
            self.markers,
            self.crc,
            self._phase,
        )
        if self.markers:
            self._phase = phase
        if isinstance(framed, bytes):
            self._position = (self._position + len(framed)) & _SEQ_MASK
            return [framed]
        assert buffer is not None
        self._position = (self._position + framed) & _SEQ_MASK
        return [memoryview(buffer)[:framed]]

    def encode_bytes(self, ulpdu: Buffer) -> bytes:
        """Frame one ULPDU and return the FPDU as one ``bytes`` object."""
        return b"".join(self.encode(ulpdu))


def _readonly(data: Buffer) -> bool:
    return isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly)


class FpduDecoder(_Framer):
    """Recovers ULPDUs from the in-order byte stream of one MPA half connection.

    Feed it the received octets in chunks of any size with :meth:`feed`; it
    returns the ULPDUs completed by each chunk, markers removed and checked,
    PAD dropped, CRC verified when on.

    After the first error (:attr:`error`) the half connection is dead: RFC
    5044 §8 says MPA "MUST NOT pass or deliver any additional FPDUs", so
    later octets are discarded and :meth:`feed` returns nothing.

    Memory stays bounded: an FPDU whose ULPDU_Length exceeds ``max_ulpdu`` is
    an error, not an allocation, and at most one incomplete FPDU is kept
    between calls.

    A marker's FPDUPTR has its two low bits masked (RFC 5044 §4.3: "MUST be
    treated as zero"). With ``either_fpduptr`` (Rev 0 and culley-02 peers)
    the markers inside an FPDU that starts with a marker may also count
    back to the beginning of the FPDU, as seeds 000 and 002 define it (4
    more than RFC 5044's count to the ULPDU_Length field: 512 rather than
    508 for the first). The encoder always sends RFC 5044's reading.
    """

    __slots__ = ("_pending", "either_fpduptr", "error")
    _LIMIT = 0xFFFF  # a receiver may accept what the 16-bit field can say

    def __init__(
        self,
        *,
        markers: bool = False,
        crc: bool = True,
        origin: int = 0,
        position: int | None = None,
        max_ulpdu: int = MAX_ULPDU,
        either_fpduptr: bool = False,
    ) -> None:
        super().__init__(
            markers=markers, crc=crc, origin=origin, position=position, max_ulpdu=max_ulpdu
        )
        #: Accept the FPDU-start reading of FPDUPTR too (seeds 000, 002).
        self.either_fpduptr = either_fpduptr
        self._pending = bytearray()
        #: The first error seen, or None. Set once, never cleared.
        self.error: MpaError | None = None

    @property
    def position(self) -> int:
        """Stream position (mod 2**32) of the next octet expected."""
        return (self._position + len(self._pending)) & _SEQ_MASK

    def release(self) -> bytes:
        """Give back the octets held as the start of an incomplete FPDU and
        hold nothing more (MPA exits: they are streaming data)."""
        pending = bytes(self._pending)
        self._pending.clear()
        return pending

    @property
    def buffered(self) -> int:
        """Octets held back as the start of an incomplete FPDU."""
        return len(self._pending)

    def to_complete(self) -> int:
        """Octets that would complete the held-back FPDU (its length field
        first, when that is not all here yet); 0 when nothing is held. A
        receive lane hands exactly these to :meth:`feed_batch`, so that the
        decoder then holds nothing and the next octet starts an FPDU."""
        pending = self._pending
        if not pending:
            return 0
        header = (4 if self.markers and self._phase == 0 else 0) + 2
        if len(pending) < header:
            return header - len(pending)
        lead = header - 2
        n: int = _unpack_length(pending, lead)[0]
        if n > self.max_ulpdu:
            return 1  # feed_batch reports it
        return fpdu_wire_size(n, self._phase, markers=self.markers) - len(pending)

    def take_whole(self, data: memoryview) -> memoryview | None:
        """The ULPDU of ``data`` when ``data`` is exactly one whole, valid
        FPDU without markers (length within the limit, CRC right) and
        nothing is held back: consumed as :meth:`feed_batch` would, and
        returned as a read-only view into ``data``. The out-of-order
        receiver's in-order segments take it (one FPDU per segment is the
        usual case).

        None: nothing was done; :meth:`feed_batch` takes ``data`` and
        reports what is wrong with it.
        """
        size = len(data)
        if self._pending or self.markers or self.error is not None or size < 8:
            return None
        n: int = _unpack_length(data, 0)[0]
        # RFC 5044 §4.1: length field, ULPDU, PAD to a multiple of 4, CRC.
        if (n + 9) & ~3 != size or n > self.max_ulpdu:
            return None
        if self.crc and _unpack_crc(data, size - 4)[0] != crc32c(data[: size - 4]):
            return None
        self._phase = (self._phase + size) & _PHASE_MASK
        self._position = (self._position + size) & _SEQ_MASK
        return data[2 : 2 + n].toreadonly()

    def feed(self, data: Buffer) -> list[memoryview]:
        """Consume received octets; return the ULPDUs they complete.

        ULPDUs are read-only memoryviews. When ``data`` is ``bytes`` they may
        be views into it (no copy); other buffers are copied once first, so
        the caller may reuse its buffer after the call.

        Check :attr:`error` after each call: when set, the ULPDUs returned are
        those that preceded the error, and nothing after it is delivered.
        """
        return list(self.feed_batch(data))

    def feed_batch(self, data: Buffer, *, borrow: bool = False) -> UlpduBatch:
        """:meth:`feed`, returning the ULPDUs as one :class:`UlpduBatch`.

        The ULPDUs found in ``data`` are not turned into Python objects: the
        batch holds the buffer and their offsets.

        ``borrow``: the caller consumes the batch before it reuses ``data``
        (e.g. places every ULPDU at once), so ``data`` is decoded where it
        lies, not copied first; with markers, a writable ``data`` has its
        markers cut out in place. Only the start of an incomplete FPDU is
        copied (held back for the next call).
        """
        views: list[memoryview] = []
        if self.error is not None or not data:
            return UlpduBatch(views)
        view: memoryview
        if borrow and (not self.markers or not _readonly(data)):
            view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
        elif self.markers:
            # Markers are cut out in place, in a copy.
            view = memoryview(bytearray(data))
        else:
            view = memoryview(data if isinstance(data, bytes) else bytes(data))
        batch = UlpduBatch(views)
        try:
            start = self._complete_pending(view, views) if self._pending else 0
            if not self._pending:
                start = self._scan(view, start, batch)
                if start < len(view):
                    self._pending += view[start:]
        except MpaError as exc:
            self.error = exc
            self._pending.clear()
        return batch

    # -- internals ----------------------------------------------------------
    #
    # Wire size of an FPDU whose length field says n, starting at ``phase``
    # octets past a marker position (RFC 5044 §4.3):
    #   lead    = 4 if markers and phase == 0 (the zero marker before it)
    #   content = 2 + n + PAD + 4
    #   at      = 512 - (phase + lead) % 512: content offset of the first
    #             marker inside; later ones follow every 508 content octets
    #   count   = markers with a content offset below ``content``
    #   wire    = lead + content + 4 * count
    # fpdu_wire_size computes it; the hot loop in _scan inlines it.

    def _wire_size(self, view: memoryview) -> int:
        """Wire size of the FPDU whose header starts ``view`` (slow path)."""
        lead = 4 if self.markers and self._phase == 0 else 0
        n: int = _unpack_length(view, lead)[0]
        self._check_length(n, lead)
        return fpdu_wire_size(n, self._phase, markers=self.markers)

    def _check_length(self, n: int, lead: int, position: int | None = None) -> None:
        """Code 3 for a length above the limit; ``position``: the FPDU's start."""
        if n > self.max_ulpdu:
            if position is None:
                position = self._position
            raise MpaError(
                MpaErrorCode.MARKER_MISMATCH,
                f"ULPDU_Length {n} exceeds the receive limit of {self.max_ulpdu} octets; "
                "the length field cannot delimit a valid FPDU",
                stream_offset=(position + lead) & _SEQ_MASK,
            )

    def _complete_pending(self, view: memoryview, out: list[memoryview]) -> int:
        """Top up the held-back FPDU from ``view``; returns octets consumed.

        Only the octets that FPDU needs are taken, so the held-back buffer
        never exceeds one FPDU.
        """
        pending = self._pending
        used = 0
        header = (4 if self.markers and self._phase == 0 else 0) + 2
        if len(pending) < header:
            used = min(header - len(pending), len(view))
            pending += view[:used]
            if len(pending) < header:
                return used
        with memoryview(pending) as frame:
            wire = self._wire_size(frame)
        take = min(wire - len(pending), len(view) - used)
        pending += view[used : used + take]
        used += take
        if len(pending) == wire:
            # Hand the buffer over rather than copying it: ULPDUs may be views
            # into it, and nothing here writes to it again.
            self._pending = bytearray()
            batch = UlpduBatch(out)
            self._scan(memoryview(pending), 0, batch)
            out.extend(batch)
        return used

    def _scan(self, view: memoryview, i: int, batch: UlpduBatch) -> int:
        """Decode every complete FPDU in ``view[i:]`` (the ``scan`` kernel);
        returns where it stopped.

        The ULPDUs stay in ``view`` (markers cut out in place); ``batch``
        gets the buffer and their offsets. The first error is raised as the
        MPA error it is (RFC 5044 §8: code 2 for the CRC, code 3 for a
        marker or a length field that cannot delimit an FPDU), with the
        stream offset of the FPDU or the marker.
        """
        records, stop, phase, error, a, b, where = kernels.scan(
            view,
            i,
            len(view),
            self.markers,
            self.crc,
            self._phase,
            self.max_ulpdu,
            self.either_fpduptr,
        )
        base = self._position - i  # wire index -> stream position
        self._position = (base + stop) & _SEQ_MASK
        self._phase = phase
        if records:
            batch.buffer = view.toreadonly()
            batch.records = memoryview(records).cast("I")
        if error == SCAN_CRC:
            raise MpaError(
                MpaErrorCode.CRC_MISMATCH,
                f"CRC field {a:#010x}, computed {b:#010x}",
                stream_offset=(base + where) & _SEQ_MASK,
            )
        if error == SCAN_MARKER:
            raise MpaError(
                MpaErrorCode.MARKER_MISMATCH,
                f"marker FPDUPTR {a:#06x} disagrees with ULPDU_Length framing (expected {b:#06x})",
                stream_offset=(base + where) & _SEQ_MASK,
            )
        if error == SCAN_LENGTH:
            self._check_length(a, 0, base + where)
        return stop
