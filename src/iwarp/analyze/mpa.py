"""MPA in a reassembled byte stream: frames, FPDUs, markers, CRCs, resync.

Pure functions over a :class:`~iwarp.analyze.tcp.StreamWindow`; nothing here
reads files. Unlike a receiver, the analyzer does not stop at the first
error: it reports it and walks on by ULPDU_Length, and when it loses the
FPDU boundaries (a gap in the capture, or two bad FPDUs in a row) it finds
them again by markers (RFC 5044 §4.3, seed 000 §5.4 items 2 and 3) or, with
CRCs and no markers, by two consecutive FPDUs with valid CRCs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from iwarp._typing import Buffer
from iwarp.analyze.kernels import kernels, register
from iwarp.analyze.records import (
    ErrorRecord,
    FpduRecord,
    FrameRecord,
    MarkerRecord,
    NoteRecord,
    Record,
    record_maker,
)
from iwarp.analyze.tcp import StreamWindow
from iwarp.errors import MpaErrorCode
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.mpa.wire import (
    CRC_SIZE,
    ENHANCED_SIZE,
    FPDUPTR_MASK,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    MARKER,
    MARKER_INTERVAL,
    MARKER_SIZE,
    MAX_PRIVATE_DATA,
    MAX_ULPDU,
    RESERVED_FLAGS,
    ULPDU_LENGTH,
    FrameFlags,
    MpaFrame,
    Revision,
    parse_frame_header,
)
from iwarp.rdmap.wire import OPCODE_QUEUE, OPCODE_TAGGED, RdmapOpcode, describe_ulpdu

if TYPE_CHECKING:
    from iwarp._speedups import DecodeKernels

__all__ = [
    "LOOKAHEAD",
    "FpduView",
    "FpduWalker",
    "Framing",
    "find_frame",
    "find_start",
    "find_sync",
    "guess_framing",
    "inspect_fpdu",
    "read_frame",
    "walk_fpdus",
]

#: How far into a direction's stream a Request/Reply is looked for (a ULP
#: may stream before starting MPA, seed 000 §6.1).
FRAME_SEARCH: Final = 1 << 16
#: How far past a lost boundary a CRC scan looks for the next FPDU.
CRC_SCAN: Final = 1 << 14
#: Markers tried when resynchronizing before giving up.
MARKER_TRIES: Final = 256
#: Markers tried per phase when looking for the marker phase of a stream.
PHASE_TRIES: Final = 8
#: The shortest ULPDU DDP sends: a tagged header (RFC 5041 §4.2).
MIN_DDP_HEADER: Final = 14


@dataclass(frozen=True, slots=True)
class Framing:
    """How one direction's FPDUs are framed."""

    #: Offset (in the direction's StreamWindow) of the first octet of MPA full
    #: operation; markers sit at ``origin + k * 512``. When the start was not
    #: captured, any offset with the right phase.
    origin: int
    markers: bool
    crc: bool
    #: RDMAC mode (a Rev 0 frame, RFC 5044 Appendix C): DDP/RDMAP version 0.
    rdmac: bool = False
    #: The ULPDUs are DDP segments (RFC 5041): decode and check their headers.
    ddp: bool = True
    #: Rev 0 / culley-02 streams: a marker inside an FPDU that starts with a
    #: marker may count back to the FPDU's first octet (seeds 000, 002)
    #: rather than to its ULPDU_Length field (RFC 5044 §4.3).
    either_fpduptr: bool = False


@dataclass(frozen=True, slots=True)
class FpduView:
    """One FPDU taken apart (RFC 5044 §4): what :func:`inspect_fpdu` finds."""

    wire_length: int
    ulpdu: bytes
    pad: bytes
    crc: int
    crc_expected: int
    #: ``(offset in the FPDU, reserved, fpduptr, expected fpduptr)``.
    markers: tuple[tuple[int, int, int, int], ...]
    #: The ULPDU's :func:`describe_ulpdu` dict when the C loop made it
    #: (plain headers only), else None; not part of the comparison.
    ulp: dict[str, object] | None = field(default=None, compare=False)

    def valid(self, framing: Framing) -> bool:
        """CRC right (when used) and every marker right."""
        crc_ok = not framing.crc or self.crc == self.crc_expected
        return crc_ok and all(r == 0 and p & FPDUPTR_MASK == e for _, r, p, e in self.markers)


#: Most clean FPDUs one C walk call takes apart (bounds the list it returns).
WALK_BATCH: Final = 256
#: Opcodes whose ULPDUs the C loop describes: those describe_ulpdu gives
#: only DDP header fields for (the others, and any ULPDU with a problem,
#: go to describe_ulpdu).
PLAIN_OPCODES: Final = frozenset(
    {
        RdmapOpcode.RDMA_WRITE,
        RdmapOpcode.RDMA_READ_RESPONSE,
        RdmapOpcode.SEND,
        RdmapOpcode.SEND_WITH_INVALIDATE,
        RdmapOpcode.SEND_WITH_SE,
        RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE,
    }
)


def _tables(k: DecodeKernels) -> None:
    k.describe_table(
        tuple(RdmapOpcode(op).name if op in PLAIN_OPCODES else None for op in range(16)),
        tuple(int(OPCODE_TAGGED.get(op, -1)) for op in range(16)),
        tuple(OPCODE_QUEUE.get(op, -1) for op in range(16)),
    )


register(_tables)


def inspect_fpdu(stream: StreamWindow, start: int, framing: Framing) -> FpduView | int | None:
    """Take apart the FPDU at ``start``.

    Returns the view, or the offset where captured data stops short of the
    FPDU (a gap or the end of the capture), or None when ``start`` itself
    was not captured.
    """
    # Runs of captured octets never touch (a gap lies between two), so an
    # FPDU is complete only inside the run holding its first octet.
    found = stream.locate(start)
    if found is None:
        return None
    chunk, at, run_end = found
    phase = (start - framing.origin) % MARKER_INTERVAL
    taken = kernels.fpdu_view(
        chunk, at, phase, framing.markers, framing.either_fpduptr, framing.ddp
    )
    if taken is None:
        return run_end
    return FpduView(*taken)


# -- Request / Reply frames ------------------------------------------------------


def find_frame(stream: StreamWindow, key: bytes) -> int | None:
    """Offset of the first ``key`` (Request or Reply) near the stream start."""
    at = stream.find(key, FRAME_SEARCH)
    return None if at < 0 else at


def read_frame(
    stream: StreamWindow, offset: int, *, where: tuple[int, str]
) -> tuple[FrameRecord | None, int, list[Record]]:
    """Decode the frame at ``offset``.

    Returns the frame record (None if its header was not captured), the
    offset just past the frame, and the errors and notes it raises.
    """
    index, direction = where
    seq = stream.seq(offset)
    frame_no = stream.frame_at(offset)
    header = stream.read(offset, FRAME_HEADER_SIZE)
    if header is None:
        note = NoteRecord(index, direction, seq, frame_no, "MPA frame header not captured")
        return None, offset, [note]
    is_request, flags, revision, pd_length = parse_frame_header(header)
    assert is_request is not None  # found by its key
    out: list[Record] = []
    end = offset + FRAME_HEADER_SIZE + pd_length
    private = stream.read(offset + FRAME_HEADER_SIZE, pd_length)
    if private is None:
        out.append(NoteRecord(index, direction, seq, frame_no, "private data not fully captured"))
        private = stream.captured(offset + FRAME_HEADER_SIZE, end)
    mpa = MpaFrame(
        is_request=is_request,
        flags=FrameFlags(flags & ~RESERVED_FLAGS),
        revision=revision,
        private_data=private,
        reserved=flags & RESERVED_FLAGS,
    )
    name = "Request" if is_request else "Reply"

    def error(message: str) -> None:
        out.append(
            ErrorRecord(
                index, direction, seq, frame_no, int(MpaErrorCode.INVALID_FRAME), "mpa", message
            )
        )

    # RFC 5044 §7.1 / RFC 6581 §5: what makes a frame invalid (error 4).
    if revision > Revision.REV2:
        error(f"MPA {name} with unknown revision {revision}")
    if revision >= Revision.REV1 and pd_length > MAX_PRIVATE_DATA:
        error(f"MPA {name} PD_Length {pd_length} exceeds {MAX_PRIVATE_DATA}")
    if mpa.is_enhanced and pd_length < ENHANCED_SIZE:
        error(f"MPA {name} sets S but has {pd_length} octets of private data")
    if is_request and mpa.reject:
        out.append(NoteRecord(index, direction, seq, frame_no, "R bit set in a Request"))
    if flags & RESERVED_FLAGS:
        out.append(
            NoteRecord(index, direction, seq, frame_no, f"reserved flag bits {flags & 0x0F:#x} set")
        )
    record = FrameRecord(index, direction, seq, frame_no, mpa, pd_length)
    return record, end, out


# -- FPDUs -----------------------------------------------------------------------


#: Octets past a lost boundary a streaming walk waits for before looking for
#: the next FPDU (the farthest :func:`find_sync` and :func:`find_start` look,
#: with room for the FPDUs that must vouch for a boundary).
LOOKAHEAD: Final = MARKER_TRIES * MARKER_INTERVAL + 2 * (MAX_ULPDU + 1024)


class FpduWalker:
    """Every FPDU of one direction from ``start`` on, with the errors and notes
    found on the way, as the octets arrive.

    :meth:`advance` walks as far as the window allows and returns; called
    again when more octets came (or the window became final), it goes on.
    Nothing before :attr:`low_water` is read again.
    """

    __slots__ = (
        "bad_in_a_row",
        "done",
        "framing",
        "pos",
        "stream",
        "sync",
        "tally",
        "wait_for",
        "where",
    )

    def __init__(
        self, stream: StreamWindow, start: int, framing: Framing, *, where: tuple[int, str]
    ) -> None:
        self.stream = stream
        self.framing = framing
        self.where = where
        self.pos = start
        self.bad_in_a_row = 0
        #: A lost boundary being looked for: ``(from offset, why)``.
        self.sync: tuple[int, str] | None = None
        self.done = False
        #: The window's end that completes the FPDU at ``pos`` (known once its
        #: header came): nothing to do before.
        self.wait_for = 0
        #: When set, the clean FPDUs the accelerator walks in bulk are not
        #: made into records, nor taken apart: this gets how many there were,
        #: per run of them. A caller that prints nothing counts with it. They
        #: are plain Writes, Sends and Read Responses (never a Terminate: see
        #: PLAIN_OPCODES); every other FPDU, error and note is yielded as a
        #: record still.
        self.tally: Callable[[int], None] | None = None

    @property
    def low_water(self) -> int:
        return self.pos if self.sync is None else min(self.pos, self.sync[0])

    def advance(self) -> Iterator[Record]:
        stream, framing, where = self.stream, self.framing, self.where
        while not self.done:
            if self.sync is not None:
                offset, why = self.sync
                if not stream.final and stream.end - offset < LOOKAHEAD:
                    return
                yield from self._resync(offset, why)
                continue
            pos = self.pos
            end = stream.end
            if pos >= end:
                self.done = stream.final
                return
            if end < self.wait_for and not stream.final:
                return
            # The clean FPDUs from pos on, in one kernel call (the common case):
            # those the steps below record with no error or note.
            found = stream.locate(pos)
            if found is not None:
                chunk, at, run_end = found
                walk = (
                    chunk,
                    at,
                    (pos - framing.origin) % MARKER_INTERVAL,
                    framing.markers,
                    framing.either_fpduptr,
                    framing.ddp,
                    framing.crc,
                    MAX_ULPDU,
                )
                tally = self.tally
                if tally is None:
                    taken, stop, need = kernels.fpdu_walk(*walk, WALK_BATCH)
                    if taken:
                        yield from _clean_records(stream, pos - at, taken, framing, where)
                    count = len(taken)
                else:  # counted only: no object per FPDU, the whole run at once
                    count, stop, need = kernels.fpdu_count(*walk, len(chunk))
                    if count:
                        tally(count)
                if count:
                    self.pos = pos = pos - at + stop
                    self.bad_in_a_row = 0
                if need and run_end >= end and not stream.final:
                    self.wait_for = pos + need
                    return  # the rest of the FPDU has not arrived yet
                if count:
                    continue
            view = inspect_fpdu(stream, pos, framing)
            if not isinstance(view, FpduView):
                stop = pos if view is None else view
                if stop >= end and not stream.final:
                    self.wait_for = _fpdu_end(stream, pos, framing)
                    return  # the rest of the FPDU has not arrived yet
                oversize = _oversize(stream, pos, framing, where)
                if oversize is not None:
                    yield oversize
                stray = _stray_marker(stream, pos, framing)
                if stray is not None:
                    # The FPDU's length reaches past a marker that points elsewhere.
                    yield ErrorRecord(
                        where[0],
                        where[1],
                        stream.seq(stray),
                        stream.frame_at(stray),
                        int(MpaErrorCode.MARKER_MISMATCH),
                        "mpa",
                        f"ULPDU_Length of the FPDU at sequence {stream.seq(pos)} runs past a "
                        "marker that points elsewhere",
                    )
                    self.sync = (pos + MARKER_SIZE, "stray")
                    continue
                resume = _past_gap(stream, stop)
                if resume is None:
                    yield _note(
                        stream,
                        pos,
                        where,
                        f"capture ends inside an FPDU ({stream.end - pos} octets captured)",
                    )
                    self.done = True
                    return
                yield _note(
                    stream,
                    pos,
                    where,
                    f"{resume - pos} octets not captured at or after sequence "
                    f"{stream.seq(pos)}; looking for the next FPDU",
                )
                self.pos = resume
                self.sync = (resume, "gap")
                continue
            if len(view.ulpdu) > MAX_ULPDU:
                oversize = _oversize(stream, pos, framing, where)
                if oversize is not None:
                    yield oversize
            record = _fpdu_record(stream, pos, view, framing, where)
            yield record
            if (
                (framing.crc and view.crc != view.crc_expected)
                or view.markers
                or any(view.pad)
                or record.ulp.get("problems")
            ):  # something to report (the check is per FPDU: kept cheap)
                yield from _fpdu_errors(view, record, framing, where)
            self.bad_in_a_row = 0 if view.valid(framing) else self.bad_in_a_row + 1
            self.pos = pos + view.wire_length
            if self.bad_in_a_row >= 2:
                self.sync = (self.pos, "lost")
                self.bad_in_a_row = 0

    def count_ahead(self, data: Buffer) -> int:
        """Count the clean FPDUs at the start of ``data``, octets that follow
        the window's end but are not in it, and step over them (the window
        skips them): a caller that only counts (:attr:`tally`) need not copy
        a read into the window. Only when the walk is at the window's end
        and the window holds nothing, and with the accelerator; returns the
        octets counted (0: none, or not in step). The rest of ``data`` is
        for the window, as usual."""
        tally, stream = self.tally, self.stream
        if tally is None or self.sync is not None or self.done:
            return 0
        if self.pos != stream.end or stream.held:
            return 0
        framing = self.framing
        count, stop, _ = kernels.fpdu_count(
            data,
            0,
            (self.pos - framing.origin) % MARKER_INTERVAL,
            framing.markers,
            framing.either_fpduptr,
            framing.ddp,
            framing.crc,
            MAX_ULPDU,
            len(data),
        )
        if count:
            tally(count)
            self.pos += stop
            self.bad_in_a_row = 0
            stream.skip(self.pos)
        return int(stop)

    def _resync(self, offset: int, why: str) -> Iterator[Record]:
        stream, framing, where = self.stream, self.framing, self.where
        self.sync = None
        if why == "lost" and offset >= stream.end:
            return  # the stream ended right there: nothing to find
        found = find_sync(stream, offset, framing)
        if found is None:
            prefix = "FPDU boundaries lost; " if why == "lost" else ""
            at = self.pos if why == "stray" else offset
            yield _note(stream, at, where, prefix + _cannot_resync(framing))
            self.done = True
            return
        if why == "gap":
            yield _note(stream, found, where, "FPDU boundaries found again")
        elif why == "lost" and found != offset:
            yield _note(
                stream,
                found,
                where,
                f"FPDU boundaries lost; resynchronized {found - offset} octets further on",
            )
        self.pos = found


def walk_fpdus(
    stream: StreamWindow, start: int, framing: Framing, *, where: tuple[int, str]
) -> Iterator[Record]:
    """Every FPDU of a complete (final) window from ``start`` on."""
    yield from FpduWalker(stream, start, framing, where=where).advance()


def _fpdu_end(stream: StreamWindow, start: int, framing: Framing) -> int:
    """Where the FPDU at ``start`` ends, if its header is there (else ``start``)."""
    phase = (start - framing.origin) % MARKER_INTERVAL
    lead = MARKER_SIZE if framing.markers and phase == 0 else 0
    head = stream.read(start + lead, HEADER_SIZE)
    if head is None:
        return start
    length: int = ULPDU_LENGTH.unpack_from(head)[0]
    return start + fpdu_wire_size(length, phase, markers=framing.markers)


def _oversize(
    stream: StreamWindow, start: int, framing: Framing, where: tuple[int, str]
) -> ErrorRecord | None:
    """Error 3 for a ULPDU_Length above 64768, which no sender may post (RFC
    5044 §5.3) and FpduDecoder refuses as unable to delimit an FPDU."""
    lead = MARKER_SIZE if framing.markers and (start - framing.origin) % MARKER_INTERVAL == 0 else 0
    head = stream.read(start + lead, HEADER_SIZE)
    if head is None:
        return None
    length: int = ULPDU_LENGTH.unpack_from(head)[0]
    if length <= MAX_ULPDU:
        return None
    at = start + lead
    return ErrorRecord(
        where[0],
        where[1],
        stream.seq(at),
        stream.frame_at(at),
        int(MpaErrorCode.MARKER_MISMATCH),
        "mpa",
        f"ULPDU_Length {length} exceeds the {MAX_ULPDU} octets a sender may post",
    )


def _stray_marker(stream: StreamWindow, start: int, framing: Framing) -> int | None:
    """A captured marker inside the incomplete FPDU at ``start`` that does not
    point back to it (RFC 5044 §4.3), or None."""
    if not framing.markers:
        return None
    phase = (start - framing.origin) % MARKER_INTERVAL
    lead = MARKER_SIZE if phase == 0 else 0
    head = stream.read(start + lead, HEADER_SIZE)
    if head is None:
        return None
    wire = fpdu_wire_size(ULPDU_LENGTH.unpack_from(head)[0], phase, markers=True)
    stop = min(stream.run_end(start), start + wire - CRC_SIZE)
    header = start + lead
    for marker in range(start - phase + MARKER_INTERVAL, stop, MARKER_INTERVAL):
        raw = stream.read(marker, MARKER_SIZE)
        if raw is not None and MARKER.unpack_from(raw)[1] & FPDUPTR_MASK != marker - header:
            return marker
    return None


def _cannot_resync(framing: Framing) -> str:
    if framing.markers or framing.crc:
        return "no FPDU boundary found in the rest of the stream"
    return "without markers or CRCs FPDU boundaries cannot be found again"


def _past_gap(stream: StreamWindow, stop: int) -> int | None:
    """The first captured offset after the gap at ``stop``, None at the end."""
    if stop >= stream.end:
        return None
    return stream.next_captured(stop)


def _note(stream: StreamWindow, offset: int, where: tuple[int, str], message: str) -> NoteRecord:
    return NoteRecord(where[0], where[1], stream.seq(offset), stream.frame_at(offset), message)


def _fpdu_record(
    stream: StreamWindow, pos: int, view: FpduView, framing: Framing, where: tuple[int, str]
) -> FpduRecord:
    return FpduRecord(
        where[0],
        where[1],
        stream.seq(pos),
        stream.frame_at(pos),
        wire_length=view.wire_length,
        ulpdu_length=len(view.ulpdu),
        markers=tuple(
            MarkerRecord(stream.seq(pos + at), reserved, pointer, expected)
            for at, reserved, pointer, expected in view.markers
        )
        if view.markers
        else (),
        pad=view.pad,
        crc=view.crc,
        crc_expected=view.crc_expected,
        crc_checked=framing.crc,
        ulp=(view.ulp if view.ulp is not None else describe_ulpdu(view.ulpdu))
        if framing.ddp
        else {},
    )


#: FpduRecord(...) and MarkerRecord(...) for the clean FPDUs' records, made
#: in one call each with the C accelerator.
_new_fpdu = record_maker(FpduRecord)
_new_marker = record_maker(MarkerRecord)


def _clean_records(
    stream: StreamWindow,
    base: int,
    taken: list[
        tuple[
            int,
            int,
            int,
            bytes,
            int,
            int,
            tuple[tuple[int, int, int, int], ...],
            dict[str, object] | None,
        ]
    ],
    framing: Framing,
    where: tuple[int, str],
) -> Iterator[FpduRecord]:
    """The records of the clean FPDUs the C walk took apart (offsets from
    ``base``): what :func:`_fpdu_record` makes of their views."""
    index, direction = where
    checked, ddp = framing.crc, framing.ddp
    frame_at = stream.frame_at
    new_fpdu, new_marker = _new_fpdu, _new_marker
    seq = stream.seq(base)  # of chunk offset 0; an FPDU's: seq + at, mod 2**32
    for at, wire, length, pad, crc, crc_expected, markers, ulp in taken:
        first = seq + at
        yield new_fpdu(
            index,
            direction,
            first & 0xFFFFFFFF,
            frame_at(base + at),
            wire,
            length,
            tuple([new_marker((first + m) & 0xFFFFFFFF, r, p, e) for m, r, p, e in markers])
            if markers
            else (),
            pad,
            crc,
            crc_expected,
            checked,
            ulp if ulp is not None and ddp else {},
        )


def _fpdu_errors(
    view: FpduView,
    record: FpduRecord,
    framing: Framing,
    where: tuple[int, str],
) -> Iterator[ErrorRecord | NoteRecord]:
    index, direction = where

    def error(seq: int, code: MpaErrorCode | None, message: str, layer: str = "mpa") -> ErrorRecord:
        number = None if code is None else int(code)
        return ErrorRecord(index, direction, seq, record.frame, number, layer, message)

    seq = record.seq
    if record.crc_ok is False:
        crc_text = f"CRC field {view.crc:#010x}, computed {view.crc_expected:#010x}"
        yield error(seq, MpaErrorCode.CRC_MISMATCH, crc_text)
    for marker in record.markers:
        pointer = f"marker FPDUPTR {marker.fpduptr:#06x}"
        if marker.fpduptr & FPDUPTR_MASK != marker.expected:
            back = f"{pointer}, the FPDU is {marker.expected:#06x} back"
            yield error(marker.seq, MpaErrorCode.MARKER_MISMATCH, back)
        elif marker.fpduptr != marker.expected:
            # RFC 5044 §4.3: a receiver treats them as zero; worth a note only.
            yield NoteRecord(
                index, direction, marker.seq, record.frame, f"{pointer} has its two low bits set"
            )
        if marker.reserved:
            reserved = f"marker Reserved field {marker.reserved:#06x} is not zero"
            yield error(marker.seq, None, reserved)
    if any(view.pad):
        yield error(seq, None, f"PAD {view.pad.hex()} is not zero")
    problems = record.ulp.get("problems")
    # A ULPDU that fails its CRC is not trusted: its header problems are noise.
    if isinstance(problems, list) and record.crc_ok is not False:
        for problem in problems:
            text = str(problem)
            if framing.rdmac and text in ("DDP version 0", "RDMAP version 0"):
                continue  # RDMAC mode runs version 0 (RFC 5044 Appendix C)
            yield error(seq, None, text, "ddp/rdmap")


# -- finding FPDU boundaries -------------------------------------------------------


def find_sync(stream: StreamWindow, offset: int, framing: Framing) -> int | None:
    """The first FPDU start at or after ``offset`` that can be trusted.

    With markers: a marker whose FPDUPTR leads to a complete, valid FPDU that
    holds it (RFC 5044 §4.3). Without markers but with CRCs: two FPDUs in a
    row with valid CRCs, on the 4-octet grid FPDUs lie on. None otherwise.
    """
    if framing.markers:
        return _sync_by_markers(stream, offset, framing)
    if framing.crc:
        first = offset + (framing.origin - offset) % 4
        for start in range(first, min(stream.end, offset + CRC_SCAN), 4):
            if _trusted(stream, start, framing, count=2):
                return start
    return None


def _sync_by_markers(
    stream: StreamWindow, offset: int, framing: Framing, *, tries: int = MARKER_TRIES
) -> int | None:
    marker = offset + (framing.origin - offset) % MARKER_INTERVAL
    for _ in range(tries):
        if marker + MARKER_SIZE > stream.end:
            return None
        start = _pointed_start(stream, marker, framing)
        if start is not None and start >= offset:
            view = inspect_fpdu(stream, start, framing)
            if isinstance(view, FpduView) and view.valid(framing):
                return start
        marker += MARKER_INTERVAL
    return None


def _pointed_start(stream: StreamWindow, marker: int, framing: Framing) -> int | None:
    """The start of the FPDU the marker at ``marker`` points to, if that FPDU's
    ULPDU_Length makes it hold the marker (a cheap test before the CRC)."""
    raw = stream.read(marker, MARKER_SIZE)
    if raw is None:
        return None
    pointer = MARKER.unpack_from(raw)[1] & FPDUPTR_MASK
    header = marker + MARKER_SIZE if pointer == 0 else marker - pointer
    start = header
    if (header - framing.origin) % MARKER_INTERVAL == MARKER_SIZE:
        start = header - MARKER_SIZE
    head = stream.read(header, HEADER_SIZE)
    if head is None:
        return None
    phase = (start - framing.origin) % MARKER_INTERVAL
    wire = fpdu_wire_size(ULPDU_LENGTH.unpack_from(head)[0], phase, markers=True)
    return start if start <= marker < start + wire else None


def _trusted(stream: StreamWindow, start: int, framing: Framing, *, count: int) -> bool:
    """``count`` valid FPDUs from ``start`` (fewer if the stream ends cleanly).

    Each must hold at least a DDP header. Without CRCs only markers vouch for
    a boundary, and runs of zeros look like markers pointing nowhere, so at
    least one marker inside an FPDU (a non-zero FPDUPTR) must agree too.
    """
    pos = start
    inner_markers = 0
    for _ in range(count):
        view = inspect_fpdu(stream, pos, framing)
        if not isinstance(view, FpduView) or not view.valid(framing):
            return False
        if framing.ddp and len(view.ulpdu) < MIN_DDP_HEADER:
            return False
        inner_markers += sum(1 for m in view.markers if m[2])
        pos += view.wire_length
        if pos >= stream.end:
            break
    if pos > stream.end:
        return False
    return framing.crc or inner_markers > 0


def guess_framing(
    stream: StreamWindow, start: int, *, markers: bool | None, crc: bool | None
) -> Framing | None:
    """Markers and CRC for a stream whose MPA start is known but not its frames."""
    for m in (False, True) if markers is None else (markers,):
        for c in (True, False) if crc is None else (crc,):
            framing = Framing(start, m, c)
            if c and _trusted(stream, start, framing, count=2):
                return framing
            if not c and m and _trusted(stream, start, framing, count=3):
                return framing
    return None


def find_start(
    stream: StreamWindow, *, markers: bool | None, crc: bool | None
) -> tuple[Framing, int] | None:
    """Framing and first FPDU of a stream whose MPA start was not captured.

    Markers: every marker phase (4-octet steps) is tried until one leads to
    valid FPDUs. Without markers, CRCs: every offset is tried until two FPDUs
    in a row have valid CRCs.
    """
    first = stream.next_captured(0)
    if first is None:
        return None
    # CRCs are the stronger evidence: try every way with them first.
    trials = [(m, True) for m in ((True, False) if markers is None else (markers,))]
    if markers is not False:
        trials.append((True, False))
    for m, c in trials:
        if crc is not None and c != crc:
            continue
        if m:
            for phase in range(0, MARKER_INTERVAL, 4):
                framing = Framing(first + phase, m, c)
                # Markers are in every stretch of 512 octets: the first few decide.
                found = _sync_by_markers(stream, first, framing, tries=PHASE_TRIES)
                if found is not None and _trusted(stream, found, framing, count=3):
                    return framing, found
            continue
        for start in range(first, min(stream.end, first + CRC_SCAN)):
            framing = Framing(start, m, c)
            if _trusted(stream, start, framing, count=2):
                return framing, start
    return None
