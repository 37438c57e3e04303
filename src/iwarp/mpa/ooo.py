"""Out-of-order FPDU reception: pass ULPDUs as they arrive, deliver them in order.

Seed 000 §3.1.2 and §3.2 split what an MPA-aware receiver tells DDP in two:
*passing* a ULPDU as soon as its FPDU is complete and valid, wherever it sits
in the stream, and *delivering* (indicating completion) in the order sent,
once everything before has arrived. :class:`OutOfOrderReceiver` is that
receiver, sans-IO: TCP segments go in as ``(sequence number, payload)`` in
any order, with duplicates and overlaps; events come out.

How FPDUs are found (seed 000 §5.4, RFC 5044 §4.3):

* the *chain*: from the first octet of MPA full operation, each ULPDU_Length
  gives the next FPDU start (§5.4 item 1). The chain is authoritative: it is
  exactly what an in-order receiver (:class:`~iwarp.mpa.framing.FpduDecoder`)
  sees, so every error is reported by the chain, at its place in the stream;
* *islands*: a Marker inside data that arrived out of order points back
  (FPDUPTR) to the start of the FPDU holding it (§5.4 item 2), and the
  lengths walk on from there (item 3). An island FPDU is passed only if it is
  complete, its CRC and every marker inside are right, it holds the marker
  that located it, and it overlaps no other passed FPDU. Anything else about
  an island is not trusted and is left for the chain to judge, which it will:
  every octet is eventually checked by the chain (CRC, markers) or matched
  against the islands it meets (RFC 5044 §8 code 3 "when a gap ... is
  closed").

Each octet is committed once: duplicates and overlaps never replace data
already received (§3.1.2), and no ULPDU is passed twice. Octets are dropped
as soon as the FPDU holding them is passed, so with markers and FPDU-aligned
segments of at least one marker interval, almost nothing is held whatever is
in flight (Appendix 11.1.2, BufferSizeAF); without markers everything after a
hole waits for it (BufferSizeNAF and worse).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from typing import Final, TypeAlias

from iwarp._typing import Buffer
from iwarp.errors import MpaError, MpaErrorCode
from iwarp.mpa.framing import FpduDecoder, fpdu_wire_size
from iwarp.mpa.runs import UlpduBatch
from iwarp.mpa.wire import (
    FPDUPTR_MASK,
    HEADER_SIZE,
    MARKER,
    MARKER_INTERVAL,
    MARKER_SIZE,
    MAX_ULPDU,
    ULPDU_LENGTH,
)

__all__ = [
    "OutOfOrderReceiver",
    "ReceiveEvent",
    "ReceiveFailed",
    "UlpduDelivered",
    "UlpduPassed",
]

_SEQ_MASK: Final = 0xFFFFFFFF
_HALF: Final = 1 << 31
#: Candidate starts located by the length walk of an island, not a marker.
_CHAINED: Final = -1


@dataclass(frozen=True, slots=True)
class UlpduPassed:
    """A valid FPDU was received: its ULPDU may be placed now (seed 000 §3.2)."""

    #: TCP sequence number of the FPDU's first octet (a leading marker included).
    seq: int
    #: Octets from the first octet of MPA full operation (not wrapped).
    offset: int
    #: The ULPDU, markers removed; the receiver keeps no reference to it.
    ulpdu: memoryview
    #: Octets of the FPDU on the wire (markers, PAD and CRC included).
    wire_length: int


@dataclass(frozen=True, slots=True)
class UlpduDelivered:
    """Everything up to the end of this FPDU has arrived: deliver it, in order."""

    seq: int
    offset: int
    ulpdu_length: int
    wire_length: int


@dataclass(frozen=True, slots=True)
class ReceiveFailed:
    """The half connection failed (RFC 5044 §8); nothing follows this event."""

    error: MpaError


ReceiveEvent: TypeAlias = UlpduPassed | UlpduDelivered | ReceiveFailed


class OutOfOrderReceiver:
    """Receives one MPA half connection from TCP segments in any order.

    :param start: TCP sequence number of the first octet of MPA full
        operation (the marker origin, RFC 5044 §4.3).
    :param markers: the sender inserts markers (the M bit we sent).
    :param crc: CRCs are checked (either side set C).
    :param max_ulpdu: a longer ULPDU_Length is an error (code 3), as in
        :class:`~iwarp.mpa.framing.FpduDecoder`.
    :param window: octets accepted beyond the next FPDU to deliver (the TCP
        receive window); later data is ignored, as TCP would. At most 2**30,
        which keeps 32-bit sequence comparisons unambiguous.
    """

    __slots__ = (
        "_block_at",
        "_blocks",
        "_cand_at",
        "_candidates",
        "_held",
        "_max_wire",
        "_next",
        "_passed",
        "_passed_at",
        "_seen_hi",
        "_seen_lo",
        "_tail",
        "_tail_need",
        "_tail_octets",
        "_tail_size",
        "crc",
        "either_fpduptr",
        "error",
        "markers",
        "max_ulpdu",
        "start",
        "window",
    )

    def __init__(
        self,
        *,
        start: int,
        markers: bool,
        crc: bool,
        max_ulpdu: int = MAX_ULPDU,
        window: int = 1 << 30,
        either_fpduptr: bool = False,
    ) -> None:
        if not 0 <= start <= _SEQ_MASK:
            raise ValueError(f"start must be a 32-bit sequence number, got {start}")
        if not 0 <= max_ulpdu <= 0xFFFF:
            raise ValueError(f"max_ulpdu must be 0..65535, got {max_ulpdu}")
        if not 0 < window <= 1 << 30:
            raise ValueError(f"window must be 1..2**30, got {window}")
        self.start = start
        self.markers = markers
        self.crc = crc
        self.max_ulpdu = max_ulpdu
        self.window = window
        #: Rev 0 / culley-02 peers: FPDUPTR may also count back to the
        #: FPDU's first octet (seeds 000, 002), see FpduDecoder.
        self.either_fpduptr = either_fpduptr
        #: The first error, or None. Set once; nothing is passed after it.
        self.error: MpaError | None = None
        # Longest possible FPDU: bounds how far back new data can complete one.
        self._max_wire = fpdu_wire_size(max_ulpdu, 1, markers=markers) + MARKER_SIZE
        self._next = 0  # offset of the next FPDU to deliver: the chain
        # Octets received and not yet consumed by a passed FPDU.
        self._block_at: list[int] = []
        self._blocks: dict[int, bytes] = {}
        self._held = 0
        # Octet ranges ever received at or after _next (sorted, disjoint).
        self._seen_lo: list[int] = []
        self._seen_hi: list[int] = []
        # Island FPDUs passed, not yet delivered: start -> (end, ULPDU length).
        self._passed_at: list[int] = []
        self._passed: dict[int, tuple[int, int]] = {}
        # Island FPDU starts not yet passed -> offset of the marker that found them.
        self._cand_at: list[int] = []
        self._candidates: dict[int, int] = {}
        # While the stream arrives in order: a decoder positioned at _next
        # (holding nothing itself), and the octets from _next on, kept as
        # they came until they complete the FPDU at _next (nothing else is
        # held: _blocks and _seen_* are empty). Spilled into _blocks when a
        # segment comes out of order.
        self._tail: FpduDecoder | None = None
        self._tail_octets: list[Buffer] = []
        self._tail_size = 0
        #: Wire size of the FPDU at _next once its header is here (0: feed
        #: the decoder now, it has an error to report), else None.
        self._tail_need: int | None = None

    # -- public API -----------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Payload octets held: received but not yet part of a passed FPDU."""
        return self._held if self._tail is None else self._tail_size

    @property
    def bookkeeping(self) -> int:
        """Entries of metadata held (received ranges, passed and candidate FPDUs)."""
        held = 1 if self._tail is not None and self._tail_size else 0
        return held + len(self._seen_lo) + len(self._passed) + len(self._candidates)

    @property
    def delivered_offset(self) -> int:
        """Offset of the next FPDU to be delivered (everything before was)."""
        return self._next

    @property
    def delivered_seq(self) -> int:
        """Sequence number of the next FPDU to be delivered."""
        return self._seq(self._next)

    def receive(self, seq: int, payload: Buffer) -> list[ReceiveEvent]:
        """Take one TCP segment's payload starting at sequence number ``seq``.

        Returns the ULPDUs it lets us pass, the deliveries it completes, and
        at most one :class:`ReceiveFailed`, last. Octets before the MPA start,
        already received, or beyond the window are ignored.
        """
        events: list[ReceiveEvent] = []
        if self.error is not None or not payload:
            return events
        delta = ((seq - self._seq(self._next) + _HALF) & _SEQ_MASK) - _HALF
        lo = self._next + delta
        hi = min(lo + len(payload), self._next + self.window)
        lo_clipped = max(lo, self._next)
        if lo_clipped >= hi:
            return events
        if hi == lo + len(payload) and self._in_order_at(lo):
            # Nothing out of order is held: the in-order fast path.
            self._receive_in_order(payload, events)
            return events
        self._spill()
        view = memoryview(payload)
        pieces = self._commit(lo_clipped, hi)
        if not pieces:
            return events  # a duplicate: the first copy was committed
        for a, b in pieces:
            self._store(a, bytes(view[a - lo : b - lo]))
        try:
            if self.markers:
                self._find_markers(pieces)
            self._grow_islands(pieces[0][0] - self._max_wire, pieces[-1][1], events)
            self._advance_chain(events)
        except MpaError as exc:
            self._fail(exc, events)
        return events

    def receive_count(self, seq: int, payload: Buffer) -> tuple[int, int, int]:
        """:meth:`receive` without the events, for whoever only counts them.

        Returns ``(passed, passed_ahead, delivered)``: the ULPDUs passed, those
        of them not delivered by this same segment (passed ahead of their
        turn), and the deliveries. The receiver's state afterwards is the
        same as after :meth:`receive`; a failure is in :attr:`error`. A
        segment that continues the stream in order builds no event.
        """
        tail = self._tail
        if tail is not None and self.error is None and payload:
            # In order: the octets start right after those held (32-bit
            # sequence arithmetic) and stay within the window.
            held = self._tail_size
            size = len(payload)
            lo = (seq - self.start - self._next + _HALF) & _SEQ_MASK
            if lo == _HALF + held and held + size <= self.window:
                batch = self._take_in_order(tail, payload)
                count = 0 if batch is None else len(batch)
                return count, 0, count
        passed = delivered = 0
        waiting: set[int] = set()
        for event in self.receive(seq, payload):
            if isinstance(event, UlpduPassed):
                passed += 1
                waiting.add(event.offset)
            elif isinstance(event, UlpduDelivered):
                delivered += 1
                waiting.discard(event.offset)
        return passed, len(waiting), delivered

    def receive_run(self, seq: int, payloads: list[bytes]) -> tuple[int, int, int, int]:
        """:meth:`receive_count` for each of ``payloads`` in turn, the first at
        sequence number ``seq`` and each right after the one before, with the
        figures summed: ``(passed, passed_ahead, delivered, peak)``, where
        ``peak`` is the most octets :attr:`buffered` after any of them. The
        receiver's state afterwards is the same as after those calls; a
        payload after a failure is not taken (its :attr:`buffered` not
        counted), as whoever stops feeding at the error would do.

        While the stream is in order, the run is taken in one step (one
        decoder call for all its FPDUs) and ``buffered`` after each payload
        worked out from where its FPDUs end; if that step meets an error,
        the receiver is put back as it was and the payloads go one by one.
        """
        tail = self._tail
        if tail is not None and self.error is None and payloads:
            held = self._tail_size
            total = sum(len(p) for p in payloads)
            lo = (seq - self.start - self._next + _HALF) & _SEQ_MASK
            if lo == _HALF + held and held + total <= self.window and all(payloads):
                start, octets, need = self._next, list(self._tail_octets), self._tail_need
                batch = self._take_in_order(tail, b"".join(payloads))
                if self.error is None:
                    return self._run_figures(start, held, payloads, batch)
                # Put back what the step changed (_fail emptied the rest,
                # which is empty while in order) and go one by one.
                self.error = None
                self._next = start
                self._tail = self._decoder(start)
                self._tail_octets, self._tail_size, self._tail_need = octets, held, need
        passed = ahead = delivered = peak = 0
        for payload in payloads:
            if self.error is not None:
                break
            p, a, d = self.receive_count(seq, payload)
            passed, ahead, delivered = passed + p, ahead + a, delivered + d
            peak = max(peak, self.buffered)
            seq = (seq + len(payload)) & _SEQ_MASK
        return passed, ahead, delivered, peak

    def _run_figures(
        self, start: int, held: int, payloads: list[bytes], batch: UlpduBatch | None
    ) -> tuple[int, int, int, int]:
        """:meth:`receive_run`'s figures for a run taken in one step from
        ``start`` (``held`` octets held before): an in-order receiver passes
        each FPDU once the payload completing it came, so after a payload
        it holds what came past the last FPDU end before."""
        ends: list[int] = []
        offset = start
        markers = self.markers
        for ulpdu in batch or ():
            offset += fpdu_wire_size(len(ulpdu), offset % MARKER_INTERVAL, markers=markers)
            ends.append(offset - start)
        count = len(ends)
        ends.append(1 << 62)  # past every payload
        peak = last = k = 0
        came = held
        for payload in payloads:
            came += len(payload)
            while ends[k] <= came:
                last = ends[k]
                k += 1
            peak = max(peak, came - last)
        return count, 0, count, peak

    def _take_in_order(self, tail: FpduDecoder, payload: Buffer) -> UlpduBatch | None:
        """Hold in-order octets; once they complete the FPDU at _next, feed
        them all to the decoder and hold again what follows its last whole
        FPDU. Returns what the decoder passed (None: nothing was fed). The
        decoder is chunking-blind, so it finds the same FPDUs and errors as
        when fed every segment, without a call per segment."""
        if not isinstance(payload, bytes):
            payload = bytes(payload)  # the caller may reuse its buffer
        self._tail_octets.append(payload)
        self._tail_size += len(payload)
        need = self._tail_need
        if need is None:
            need = self._tail_need = self._tail_wire()
            if need is None:
                return None
        if self._tail_size < need:
            return None
        octets = self._tail_octets
        data = octets[0] if len(octets) == 1 else b"".join(octets)
        if self._tail_size == need and not self.markers:
            # Exactly one FPDU (a segment per FPDU, the usual case): the
            # decoder's whole-FPDU check; anything wrong goes to feed_batch.
            whole = tail.take_whole(memoryview(data))
            if whole is not None:
                self._next += need
                self._tail_octets = []
                self._tail_size = 0
                self._tail_need = None
                return UlpduBatch([whole])
        batch = tail.feed_batch(data)
        if tail.error is not None:
            offset = self._next
            for ulpdu in batch:
                offset += fpdu_wire_size(len(ulpdu), offset % MARKER_INTERVAL, markers=self.markers)
            self._next = offset
            self._fail(tail.error, [])
            return batch
        rest = tail.release()
        self._next += self._tail_size - len(rest)
        self._tail_octets = [rest] if rest else []
        self._tail_size = len(rest)
        self._tail_need = None
        return batch

    def _tail_wire(self) -> int | None:
        """Wire size of the FPDU at _next from the octets held in order; None
        while its length field is missing, 0 if above the limit (the
        decoder reports it)."""
        phase = self._next % MARKER_INTERVAL
        lead = MARKER_SIZE if self.markers and phase == 0 else 0
        if self._tail_size < lead + HEADER_SIZE:
            return None
        first = self._tail_octets[0]
        if len(first) < lead + HEADER_SIZE:
            first = b"".join(self._tail_octets)
        length: int = ULPDU_LENGTH.unpack_from(first, lead)[0]
        if length > self.max_ulpdu:
            return 0
        return fpdu_wire_size(length, phase, markers=self.markers)

    def _in_order_at(self, lo: int) -> bool:
        """Whether octets at ``lo`` continue the stream with nothing else held
        but the start of the next FPDU (no islands, no later octets)."""
        if self._tail is not None:
            return lo == self._next + self._tail_size
        if self._passed or self._candidates:
            return False
        if not self._seen_lo:
            return lo == self._next
        return self._seen_lo == [self._next] and self._seen_hi == [lo]

    def _receive_in_order(self, payload: Buffer, events: list[ReceiveEvent]) -> None:
        """Frame octets that continue the stream when nothing else is held.

        One FpduDecoder, kept from segment to segment while the stream stays
        in order, checks every FPDU completed (the chain's checks, without the
        bookkeeping); the octets of an incomplete FPDU are held as they came
        (octets held before, the head of the next FPDU, come first).
        """
        start = self._next
        tail = self._tail
        if tail is None:
            tail = self._tail = self._decoder(start)
            if self._seen_lo:
                head = self._read(start, self._seen_hi[0] - start)
                assert head is not None  # the only octets held are exactly these
                self._blocks.clear()
                self._block_at.clear()
                self._held = 0
                self._seen_lo.clear()
                self._seen_hi.clear()
                self._tail_octets = [bytes(head)]
                self._tail_size = len(head)
        batch = self._take_in_order(tail, payload)
        if batch is None:
            return
        offset = start
        for ulpdu in batch:
            wire = fpdu_wire_size(len(ulpdu), offset % MARKER_INTERVAL, markers=self.markers)
            seq = self._seq(offset)
            events.append(UlpduPassed(seq, offset, ulpdu, wire))
            events.append(UlpduDelivered(seq, offset, len(ulpdu), wire))
            offset += wire
        if self.error is not None:
            events.append(ReceiveFailed(self.error))

    def _spill(self) -> None:
        """Hand the octets held in order back to the octet store."""
        if self._tail is None:
            return
        self._tail = None
        if self._tail_size:
            held = b"".join(self._tail_octets)
            self._commit(self._next, self._next + len(held))
            self._store(self._next, held)
        self._tail_octets = []
        self._tail_size = 0
        self._tail_need = None

    # -- sequence space and octet storage -----------------------------------

    def _seq(self, offset: int) -> int:
        return (self.start + offset) & _SEQ_MASK

    def _commit(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Record ``[lo, hi)`` as received; return the parts that are new."""
        seen_lo, seen_hi = self._seen_lo, self._seen_hi
        i = bisect_right(seen_hi, lo)  # first range ending after lo
        new: list[tuple[int, int]] = []
        cursor = lo
        j = i
        while j < len(seen_lo) and seen_lo[j] < hi:
            if seen_lo[j] > cursor:
                new.append((cursor, seen_lo[j]))
            cursor = max(cursor, seen_hi[j])
            j += 1
        if cursor < hi:
            new.append((cursor, hi))
        if new:
            # Merge [lo, hi) with ranges i..j-1 and with touching neighbours.
            merged_lo = min(lo, seen_lo[i]) if i < j else lo
            merged_hi = max(hi, seen_hi[j - 1]) if i < j else hi
            if i > 0 and seen_hi[i - 1] == merged_lo:
                i -= 1
                merged_lo = seen_lo[i]
            if j < len(seen_lo) and seen_lo[j] == merged_hi:
                merged_hi = seen_hi[j]
                j += 1
            seen_lo[i:j] = [merged_lo]
            seen_hi[i:j] = [merged_hi]
        return new

    def _store(self, offset: int, data: bytes) -> None:
        insort(self._block_at, offset)
        self._blocks[offset] = data
        self._held += len(data)

    def _read(self, offset: int, size: int) -> Buffer | None:
        """Octets ``[offset, offset+size)`` if all are held, else None."""
        at = self._block_at
        i = bisect_right(at, offset) - 1
        if i < 0:
            return None
        start = at[i]
        block = self._blocks[start]
        skip = offset - start
        if skip + size <= len(block):
            return memoryview(block)[skip : skip + size]
        if skip >= len(block):
            return None
        parts = [memoryview(block)[skip:]]
        have = len(block) - skip
        end = start + len(block)
        while have < size:
            i += 1
            if i >= len(at) or at[i] != end:
                return None
            block = self._blocks[end]
            take = min(len(block), size - have)
            parts.append(memoryview(block)[:take])
            have += take
            end += len(block)
        return b"".join(parts)

    def _consume(self, lo: int, hi: int) -> None:
        """Drop held octets ``[lo, hi)``: they belong to a passed FPDU."""
        at = self._block_at
        i = max(bisect_right(at, lo) - 1, 0)
        while i < len(at) and at[i] < hi:
            start = at[i]
            block = self._blocks[start]
            end = start + len(block)
            if end <= lo:
                i += 1
                continue
            del at[i]
            del self._blocks[start]
            self._held -= len(block)
            if start < lo:
                self._store(start, block[: lo - start])
                i += 1
            if end > hi:
                self._store(hi, block[hi - start :])
                i += 1

    # -- finding FPDUs --------------------------------------------------------

    def _find_markers(self, pieces: list[tuple[int, int]]) -> None:
        """Turn every marker completed by the new octets into a candidate start."""
        done: set[int] = set()
        for a, b in pieces:
            first = -(-(max(a - MARKER_SIZE + 1, self._next)) // MARKER_INTERVAL)
            for marker in range(first * MARKER_INTERVAL, b, MARKER_INTERVAL):
                if marker in done:
                    continue
                done.add(marker)
                raw = self._read(marker, MARKER_SIZE)
                if raw is None or self._passed_around(marker) is not None:
                    continue
                # RFC 5044 §4.3: FPDUPTR 0 means the FPDU follows the marker;
                # otherwise it counts back to the ULPDU_Length field. The low
                # two bits are treated as zero.
                ptr = MARKER.unpack_from(raw)[1] & FPDUPTR_MASK
                header = marker + MARKER_SIZE if ptr == 0 else marker - ptr
                if header % MARKER_INTERVAL == 0 and ptr and self.either_fpduptr:
                    # Seeds 000/002: it counts back to an FPDU that starts
                    # with a marker (a length field cannot sit there).
                    header += MARKER_SIZE
                start = header - MARKER_SIZE if header % MARKER_INTERVAL == 4 else header
                if start > self._next and start not in self._candidates:
                    insort(self._cand_at, start)
                    self._candidates[start] = marker

    def _passed_around(self, offset: int) -> int | None:
        """Start of the passed island FPDU holding ``offset``, if any."""
        i = bisect_right(self._passed_at, offset) - 1
        if i >= 0:
            start = self._passed_at[i]
            if offset < self._passed[start][0]:
                return start
        return None

    def _passed_within(self, lo: int, hi: int) -> bool:
        """Whether a passed island FPDU starts in ``(lo, hi)``."""
        i = bisect_right(self._passed_at, lo)
        return i < len(self._passed_at) and self._passed_at[i] < hi

    def _decoder(self, start: int) -> FpduDecoder:
        return FpduDecoder(
            markers=self.markers,
            crc=self.crc,
            origin=self.start,
            position=self._seq(start),
            max_ulpdu=self.max_ulpdu,
            either_fpduptr=self.either_fpduptr,
        )

    def _measure(self, start: int) -> int | MpaError | None:
        """Wire length of the FPDU at ``start`` from its ULPDU_Length field.

        None while the field is missing; the decoder's code 3 error when the
        length exceeds ``max_ulpdu``.
        """
        phase = start % MARKER_INTERVAL
        lead = MARKER_SIZE if self.markers and phase == 0 else 0
        head = self._read(start + lead, HEADER_SIZE)
        if head is None:
            return None
        length: int = ULPDU_LENGTH.unpack_from(head)[0]
        if length > self.max_ulpdu:
            decoder = self._decoder(start)
            decoder.feed(bytes(lead) + bytes(head))  # sets the decoder's code 3
            return decoder.error
        return fpdu_wire_size(length, phase, markers=self.markers)

    def _complete(self, start: int, wire: int) -> memoryview | MpaError | None:
        """The ULPDU of the FPDU ``[start, start+wire)`` if all of it is here.

        Returns the error it has instead, or None while octets are missing.
        The checks (CRC, every marker inside) are FpduDecoder's.
        """
        data = self._read(start, wire)
        if data is None:
            return None
        decoder = self._decoder(start)
        out = decoder.feed(data)
        if decoder.error is not None:
            return decoder.error
        return out[0]

    def _grow_islands(self, lo: int, hi: int, events: list[ReceiveEvent]) -> None:
        """Pass every island FPDU that octets in ``[lo, hi)`` may have completed."""
        cand_at = self._cand_at
        i = bisect_left(cand_at, lo)
        while i < len(cand_at) and cand_at[i] < hi:
            start = cand_at[i]
            if self._try_island(start, events):
                i = bisect_left(cand_at, start)  # the list changed around us
            else:
                i += 1

    def _try_island(self, start: int, events: list[ReceiveEvent]) -> bool:
        """Try the candidate at ``start`` and the FPDUs its lengths lead to.

        Returns whether the candidate list changed (it was passed or dropped).
        """
        changed = False
        while True:
            marker = self._candidates.get(start)
            if marker is None:
                return changed
            if start <= self._next or self._passed_around(start) is not None:
                self._drop_candidate(start)
                return True
            wire = self._measure(start)
            if wire is None:
                return changed
            if isinstance(wire, MpaError):
                # Not trusted, so not reported: the chain will judge these octets.
                self._drop_candidate(start)
                return True
            end = start + wire
            if (marker != _CHAINED and not start <= marker < end) or self._passed_within(
                start, end
            ):
                self._drop_candidate(start)
                return True
            ulpdu = self._complete(start, wire)
            if ulpdu is None:
                return changed
            self._drop_candidate(start)
            changed = True
            if isinstance(ulpdu, MpaError):
                return True
            insort(self._passed_at, start)
            self._passed[start] = (end, len(ulpdu))
            self._consume(start, end)
            events.append(UlpduPassed(self._seq(start), start, ulpdu, wire))
            if end in self._passed:
                return True
            if end not in self._candidates:
                insort(self._cand_at, end)
                self._candidates[end] = _CHAINED
            start = end

    def _drop_candidate(self, start: int) -> None:
        del self._candidates[start]
        del self._cand_at[bisect_left(self._cand_at, start)]

    def _advance_chain(self, events: list[ReceiveEvent]) -> None:
        """Walk the lengths from the next FPDU to deliver, delivering in order."""
        while True:
            start = self._next
            island = self._passed.pop(start, None)
            if island is not None:
                del self._passed_at[0]  # islands all lie after the chain
                end, length = island
                events.append(UlpduDelivered(self._seq(start), start, length, end - start))
                self._next = end
                continue
            holder = self._passed_around(start)
            if holder is not None:
                raise MpaError(
                    MpaErrorCode.MARKER_MISMATCH,
                    f"the FPDU found by ULPDU_Length at sequence {self._seq(start)} lies "
                    f"inside the FPDU a marker located at sequence {self._seq(holder)}",
                    stream_offset=self._seq(start),
                )
            wire = self._measure(start)
            if wire is None:
                break
            if isinstance(wire, MpaError):
                raise wire
            end = start + wire
            if self._passed_within(start, end):
                # RFC 5044 §8 code 3, checked "when a gap ... is closed": its
                # CRC cannot be checked, the octets belong to a valid FPDU.
                raise MpaError(
                    MpaErrorCode.MARKER_MISMATCH,
                    f"ULPDU_Length of the FPDU at sequence {self._seq(start)} runs into "
                    "an FPDU that a marker located",
                    stream_offset=self._seq(start),
                )
            ulpdu = self._complete(start, wire)
            if ulpdu is None:
                break
            if isinstance(ulpdu, MpaError):
                raise ulpdu
            self._consume(start, end)
            events.append(UlpduPassed(self._seq(start), start, ulpdu, wire))
            events.append(UlpduDelivered(self._seq(start), start, len(ulpdu), wire))
            self._next = end
        self._forget_before(self._next)

    def _forget_before(self, offset: int) -> None:
        """Drop bookkeeping the chain has gone past."""
        cut = bisect_right(self._cand_at, offset)
        for start in self._cand_at[:cut]:
            del self._candidates[start]
        del self._cand_at[:cut]
        cut = bisect_right(self._seen_hi, offset)
        del self._seen_lo[:cut]
        del self._seen_hi[:cut]
        if self._seen_lo and self._seen_lo[0] < offset:
            # A range the chain is inside: only its part from the chain on is
            # kept, so the in-order path can take over again (_in_order_at).
            self._seen_lo[0] = offset

    def _fail(self, error: MpaError, events: list[ReceiveEvent]) -> None:
        # RFC 5044 §8: nothing more is passed or delivered on this half connection.
        self.error = error
        events.append(ReceiveFailed(error))
        self._tail = None
        self._tail_octets = []
        self._tail_size = 0
        self._tail_need = None
        self._blocks.clear()
        self._block_at.clear()
        self._held = 0
        self._passed.clear()
        self._passed_at.clear()
        self._candidates.clear()
        self._cand_at.clear()
