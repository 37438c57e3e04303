"""VI/TCP in a reassembled byte stream (draft-dicecco-vitcp-01 §3).

A direction is VI/TCP when it opens with a ConnectRequest segment header
(§3.2, version 1). Segments are decoded by :func:`iwarp.vitcp.wire.decode_segment`;
this module only walks the stream and reports.
"""

from __future__ import annotations

from collections.abc import Iterator

from iwarp.analyze.records import ErrorRecord, NoteRecord, Record, ViSegmentRecord
from iwarp.analyze.tcp import StreamWindow
from iwarp.vitcp.errors import MalformedSegmentError
from iwarp.vitcp.wire import (
    CE_FIXED_SIZE,
    HEADER_SIZE,
    SEGMENT_HEADER,
    TYPE_MASK,
    VERSION,
    DecodedSegment,
    SegmentType,
    decode_segment,
)

__all__ = ["ViWalker", "agreed_crc", "looks_like_vitcp", "walk_segments"]


def looks_like_vitcp(stream: StreamWindow) -> bool:
    """Whether the stream opens with a VI/TCP ConnectRequest (§3.2, §3.3)."""
    head = stream.read(0, HEADER_SIZE)
    if head is None:
        return False
    version: int
    type_flags: int
    length: int
    version, type_flags, length = SEGMENT_HEADER.unpack_from(head)[:3]
    return (
        version == VERSION
        and type_flags & TYPE_MASK == SegmentType.CONNECT_REQUEST
        and length >= HEADER_SIZE + CE_FIXED_SIZE
    )


def agreed_crc(passive: StreamWindow) -> bool | None:
    """Whether the segments after the CE exchange carry the CRC trailer:
    the ConnectAccept's CRC option, which the passive end sets only if the
    ConnectRequest had it (§3.6). None if ``passive`` opens with no Accept."""
    try:
        segment = decode_segment(
            passive.captured(0, passive.run_end(0)), 0, length_includes_trailer=None
        )
    except MalformedSegmentError:
        return None
    if segment is None or segment.ce is None:
        return None
    return segment.ce.crc if segment.header.type is SegmentType.CONNECT_ACCEPT else None


class ViWalker:
    """Every VI segment of one direction, with the errors found, as octets arrive.

    ``trailer`` says whether the segments after the first (a CE segment,
    which says so itself) carry the CRC; None guesses segment by segment.
    """

    __slots__ = ("done", "includes", "pos", "stream", "trailer", "where")

    def __init__(
        self, stream: StreamWindow, *, where: tuple[int, str], trailer: bool | None = None
    ) -> None:
        self.stream = stream
        self.where = where
        self.trailer = trailer
        self.pos = 0
        #: Segment Length reading, learnt from the first segment.
        self.includes: bool | None = None
        self.done = False

    @property
    def low_water(self) -> int:
        return self.pos

    def advance(self) -> Iterator[Record]:
        stream = self.stream
        index, direction = self.where
        while not self.done and self.pos < stream.end:
            pos = self.pos
            stop = stream.run_end(pos)
            complete = stream.final and stop >= stream.end  # nothing follows
            seq, frame = stream.seq(pos), stream.frame_at(pos)
            try:
                segment = decode_segment(
                    stream.captured(pos, stop),
                    0,
                    trailer=self.trailer if pos else None,
                    length_includes_trailer=self.includes,
                    complete=complete,
                )
            except MalformedSegmentError as exc:
                yield ErrorRecord(index, direction, seq, frame, None, "vitcp", str(exc))
                self.done = True
                return
            if segment is None:
                if stop >= stream.end and not stream.final:
                    return  # the rest of the segment has not arrived yet
                what = "capture ends" if stop >= stream.end else "a gap in the capture falls"
                yield NoteRecord(index, direction, seq, frame, f"{what} inside a VI segment")
                self.done = True
                return
            if self.includes is None:
                self.includes = segment.length_includes_trailer
            yield ViSegmentRecord(index, direction, seq, frame, _fields(segment))
            if segment.crc_ok is False:
                yield ErrorRecord(
                    index, direction, seq, frame, None, "vitcp", "trailer CRC mismatch"
                )
            self.pos = pos + segment.size


def walk_segments(
    stream: StreamWindow, *, where: tuple[int, str], trailer: bool | None = None
) -> Iterator[Record]:
    """Every VI segment of a complete (final) window."""
    yield from ViWalker(stream, where=where, trailer=trailer).advance()


def _fields(segment: DecodedSegment) -> dict[str, object]:
    header = segment.header
    out: dict[str, object] = {
        "segment_type": header.type.name,
        "eom": header.eom,
        "flags": int(header.flags),
        "length": header.length,
        "data_offset": header.data_offset,
        "immediate_data": header.immediate_data,
        "message_number": header.message_number,
        "message_ack": header.message_ack,
        "rx_descriptors_posted": header.rx_descriptors_posted,
        "remote_error_code": header.remote_error_code,
        "payload_length": len(segment.payload),
        "crc_ok": segment.crc_ok,
    }
    if segment.rdma is not None:
        out["rdma"] = {
            "address": segment.rdma.address,
            "memory_handle": segment.rdma.memory_handle,
            "length": segment.rdma.length,
        }
    if segment.ce is not None:
        ce = segment.ce
        out["ce"] = {
            "attributes": int(ce.attributes),
            "mtu": ce.mtu,
            "read_window": ce.read_window,
            "crc": ce.crc,
            "urgent_marker": ce.urgent_marker,
        }
    return out
