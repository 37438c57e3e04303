"""VI/TCP in a reassembled byte stream (draft-dicecco-vitcp-01 §3).

A direction is VI/TCP when it opens with a ConnectRequest segment header
(§3.2, version 1). Segments are decoded by :func:`iwarp.vitcp.wire.decode_segment`;
this module only walks the stream and reports.
"""

from __future__ import annotations

from collections.abc import Iterator

from iwarp.analyze.records import ErrorRecord, NoteRecord, Record, ViSegmentRecord
from iwarp.analyze.tcp import ByteStream
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

__all__ = ["agreed_crc", "looks_like_vitcp", "walk_segments"]


def looks_like_vitcp(stream: ByteStream) -> bool:
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


def agreed_crc(passive: ByteStream) -> bool | None:
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


def walk_segments(
    stream: ByteStream, *, where: tuple[int, str], trailer: bool | None = None
) -> Iterator[Record]:
    """Every VI segment of the stream, with the errors found.

    ``trailer`` says whether the segments after the first (a CE segment,
    which says so itself) carry the CRC; None guesses segment by segment.
    """
    index, direction = where
    pos = 0
    includes: bool | None = None  # Segment Length reading, learnt from the first segment
    while pos < stream.end:
        stop = stream.run_end(pos)
        seq, frame = stream.seq(pos), stream.frame_at(pos)
        try:
            segment = decode_segment(
                stream.captured(pos, stop),
                0,
                trailer=trailer if pos else None,
                length_includes_trailer=includes,
                complete=stop >= stream.end,  # nothing follows the last captured octet
            )
        except MalformedSegmentError as exc:
            yield ErrorRecord(index, direction, seq, frame, None, "vitcp", str(exc))
            return
        if segment is None:
            what = "capture ends" if stop >= stream.end else "a gap in the capture falls"
            yield NoteRecord(index, direction, seq, frame, f"{what} inside a VI segment")
            return
        if includes is None:
            includes = segment.length_includes_trailer
        yield ViSegmentRecord(index, direction, seq, frame, _fields(segment))
        if segment.crc_ok is False:
            yield ErrorRecord(index, direction, seq, frame, None, "vitcp", "trailer CRC mismatch")
        pos += segment.size


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
