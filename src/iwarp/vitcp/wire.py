"""VI/TCP wire formats (draft-dicecco-vitcp-01 §3), declared once.

Shared by the connection core, the capture analyzer and the tests. All
multi-octet fields are big-endian (§3). A VI segment is::

    VI Segment Header (24) [RDMA Header (16) | CE Header (140 + options)]
    [payload] [trailer CRC (4)]

Segment Length counts the header through the payload and not the trailer
(§3.2: "the total length exceeds the value contained in the Segment Length
by the length of the trailer"); :func:`decode_segment` can also read the
other interpretation (see docs/vitcp.md).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum, IntEnum, IntFlag
from typing import ClassVar, Final

from iwarp._typing import Buffer
from iwarp.vitcp import crc as _crc
from iwarp.vitcp.crc import CrcOrder
from iwarp.vitcp.errors import MalformedSegmentError, ViErrorType

#: ViErrorType (a §3.2 field) and CrcOrder are re-exported for the analyzer.
__all__ = [
    "ATTRIBUTES_MASK",
    "Attributes",
    "CE_FIXED",
    "CE_FIXED_SIZE",
    "CE_TYPES",
    "CONNECT_TYPES",
    "CeHeader",
    "CrcOrder",
    "DESCRIPTORS_MODULUS",
    "DISCRIMINATOR_SIZE",
    "DecodedSegment",
    "HEADER_SIZE",
    "IMMEDIATE_TYPES",
    "MAX_SEGMENT_LENGTH",
    "MESSAGE_NUMBER_MODULUS",
    "OPTION",
    "OPTION_HEADER_SIZE",
    "OptionType",
    "PAYLOAD_TYPES",
    "RDMA_HEADER",
    "RDMA_HEADER_SIZE",
    "RDMA_TYPES",
    "RELIABILITY_MASK",
    "RdmaHeader",
    "Reliability",
    "SEGMENT_HEADER",
    "SegmentFlags",
    "SegmentHeader",
    "SegmentType",
    "TRAILER_SIZE",
    "TYPE_MASK",
    "VERSION",
    "VI_ERROR_MASK",
    "ViErrorType",
    "decode_segment",
    "encode_segment",
    "minimum_length",
]

# --- VI Segment Header (§3.2) -------------------------------------------------

#: §3.2 Version: "This document describes version one".
VERSION: Final = 1
#: Version, Type/Flags, Segment Length, Data Offset, Immediate Data, Message
#: Number, Message ACK, Rx Descriptors Posted, Remote Error Code.
SEGMENT_HEADER: Final = struct.Struct(">BBHIIIIHH")
HEADER_SIZE: Final = SEGMENT_HEADER.size  # 24
TRAILER_SIZE: Final = 4
#: Segment Length is 16 bits.
MAX_SEGMENT_LENGTH: Final = 0xFFFF
#: §3.2 Type/Flags: the low five bits are the type.
TYPE_MASK: Final = 0x1F
MESSAGE_NUMBER_MODULUS: Final = 1 << 32
#: §3.2 Rx Descriptors Posted counts "modulo 2^16".
DESCRIPTORS_MODULUS: Final = 1 << 16


class SegmentType(IntEnum):
    """§3.2 Type/Flags: the defined segment types."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ_REQUEST = 2
    RDMA_READ_RESPONSE = 3
    NOP = 4
    CONNECT_REQUEST = 5
    CONNECT_ACCEPT = 6
    CONNECT_REJECT = 7
    CONNECT_NO_MATCH = 8


class SegmentFlags(IntFlag):
    """§3.2 Type/Flags: the three flag bits above the type."""

    #: End of Message: the last segment of a message.
    EOM = 0x80
    #: Immediate Data Valid.
    IDV = 0x40
    #: Transmit Error: the whole message is in error (§2.2.2.2.5).
    TRE = 0x20


#: Remote Error Code: IS error code in bits 15-8, reserved 7-3, VI Error Type.
VI_ERROR_MASK: Final = 0x07

#: §3.1: which segment types carry which parts.
RDMA_TYPES: Final = frozenset(
    {SegmentType.RDMA_WRITE, SegmentType.RDMA_READ_REQUEST, SegmentType.RDMA_READ_RESPONSE}
)
CE_TYPES: Final = frozenset({SegmentType.CONNECT_REQUEST, SegmentType.CONNECT_ACCEPT})
PAYLOAD_TYPES: Final = frozenset(
    {SegmentType.SEND, SegmentType.RDMA_WRITE, SegmentType.RDMA_READ_RESPONSE}
)
#: Types that support immediate data (VI Architecture: Send, RDMA Write).
IMMEDIATE_TYPES: Final = frozenset({SegmentType.SEND, SegmentType.RDMA_WRITE})
#: §3.2 Data Offset: "All other VI messages MUST consist of a single segment".
CONNECT_TYPES: Final = frozenset(
    {
        SegmentType.CONNECT_REQUEST,
        SegmentType.CONNECT_ACCEPT,
        SegmentType.CONNECT_REJECT,
        SegmentType.CONNECT_NO_MATCH,
    }
)


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """§3.2 VI Segment Header."""

    type: SegmentType
    flags: SegmentFlags = SegmentFlags.EOM
    #: Header + RDMA/CE header + payload; the trailer is not counted.
    length: int = HEADER_SIZE
    data_offset: int = 0
    immediate_data: int = 0
    message_number: int = 0
    message_ack: int = 0
    rx_descriptors_posted: int = 0
    vi_error: ViErrorType = ViErrorType.NONE
    is_error_code: int = 0
    version: int = VERSION

    SIZE: ClassVar[int] = HEADER_SIZE

    @property
    def eom(self) -> bool:
        return bool(self.flags & SegmentFlags.EOM)

    @property
    def remote_error_code(self) -> int:
        """The 16-bit Remote Error Code field."""
        return (self.is_error_code & 0xFF) << 8 | (self.vi_error & VI_ERROR_MASK)

    def pack(self) -> bytes:
        return SEGMENT_HEADER.pack(
            self.version,
            int(self.flags) | int(self.type),
            self.length,
            self.data_offset,
            self.immediate_data,
            self.message_number,
            self.message_ack,
            self.rx_descriptors_posted,
            self.remote_error_code,
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> SegmentHeader:
        """Decode and check version, type and a length no shorter than the
        parts the type requires. The caller ensures 24 octets are there."""
        (version, type_flags, length, data_offset, immediate, number, ack, posted, rec) = (
            SEGMENT_HEADER.unpack_from(buf, offset)
        )
        if version != VERSION:
            raise MalformedSegmentError(f"VI/TCP version {version}, expected {VERSION}")
        seg_type = _TYPES[type_flags & TYPE_MASK]
        if seg_type is None:
            raise MalformedSegmentError(f"unknown VI segment type {type_flags & TYPE_MASK}")
        minimum = _MINIMUM[seg_type]
        if length < minimum:
            raise MalformedSegmentError(
                f"{seg_type.name} segment length {length} below its minimum {minimum}"
            )
        return cls(
            seg_type,
            _FLAGS[type_flags >> 5],
            length,
            data_offset,
            immediate,
            number,
            ack,
            posted,
            _VI_ERRORS[rec & VI_ERROR_MASK],
            rec >> 8,
            version,
        )


def minimum_length(seg_type: SegmentType) -> int:
    """The smallest Segment Length a segment of ``seg_type`` can have."""
    if seg_type in RDMA_TYPES:
        return HEADER_SIZE + RDMA_HEADER_SIZE
    if seg_type in CE_TYPES:
        return HEADER_SIZE + CE_FIXED_SIZE
    return HEADER_SIZE


# --- RDMA Header (§3.4) --------------------------------------------------------

#: RDMA Address (64), Registered Memory Handle (32), RDMA Length (32).
RDMA_HEADER: Final = struct.Struct(">QII")
RDMA_HEADER_SIZE: Final = RDMA_HEADER.size  # 16


@dataclass(frozen=True, slots=True)
class RdmaHeader:
    """§3.4 VI/TCP RDMA Header: the same in every segment of a message."""

    address: int
    memory_handle: int
    length: int

    SIZE: ClassVar[int] = RDMA_HEADER_SIZE

    def pack(self) -> bytes:
        return RDMA_HEADER.pack(self.address, self.memory_handle, self.length)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> RdmaHeader:
        return cls(*RDMA_HEADER.unpack_from(buf, offset))


# --- CE Header (§3.3) ----------------------------------------------------------


class Attributes(IntFlag):
    """§3.3 Calling Attributes (bits 7-15 reserved)."""

    NONE = 0
    UNRELIABLE = 0x01
    RELIABLE_DELIVERY = 0x02
    RELIABLE_RECEPTION = 0x04
    RDMA_WRITE = 0x08
    RDMA_READ = 0x10
    FLOW_CONTROL = 0x20
    PEER_TO_PEER = 0x40


#: The three reliability bits; exactly one is set in a valid CE header.
RELIABILITY_MASK: Final = 0x07
ATTRIBUTES_MASK: Final = 0x7F


class Reliability(Enum):
    """VI reliability levels [VIAR], with their Calling Attributes bit."""

    UNRELIABLE = Attributes.UNRELIABLE
    DELIVERY = Attributes.RELIABLE_DELIVERY
    RECEPTION = Attributes.RELIABLE_RECEPTION


#: Attributes, Calling Discriminator Length, MTU Size, Calling Discriminator,
#: Calling RDMA Read Window, Called Discriminator Length, Called Discriminator.
CE_FIXED: Final = struct.Struct(">HHI64sHH64s")
CE_FIXED_SIZE: Final = CE_FIXED.size  # 140
DISCRIMINATOR_SIZE: Final = 64


class OptionType(IntEnum):
    """§3.3 Options: the types defined by this revision."""

    END = 0
    CRC = 1
    URGENT_MARKER = 2


#: Option Type (16), Length (16; counts type and length), Data.
OPTION: Final = struct.Struct(">HH")
OPTION_HEADER_SIZE: Final = OPTION.size


@dataclass(frozen=True, slots=True)
class CeHeader:
    """§3.3 Connection Establishment header and its options."""

    attributes: Attributes
    mtu: int
    read_window: int = 0
    calling_discriminator: bytes = b""
    called_discriminator: bytes = b""
    #: The CRC option (§3.6): this end wants trailer CRCs.
    crc: bool = False
    #: The Urgent Marker option (§3.7): urgent bytes may be sent to this end.
    urgent_marker: bool = False
    #: Unknown options as (type, data); a receiver ignores them (§3.3).
    other_options: tuple[tuple[int, bytes], ...] = ()
    #: Whether the End of Option List was present.
    end_option: bool = True
    #: Octets after the End option, inside Segment Length: none from a peer
    #: that leaves the trailer out of the length, the CRC from one that
    #: counts it (see ``decode_segment``). Not part of equality.
    extra: bytes = field(default=b"", compare=False)

    @property
    def reliability(self) -> Reliability | None:
        """The single reliability level, or None if zero or several are set."""
        bits = self.attributes & RELIABILITY_MASK
        for level in Reliability:
            if bits == level.value:
                return level
        return None

    def pack(self) -> bytes:
        """The CE header with its options; End of Option List always closes
        them, as §3.3 requires when the CRC option is present."""
        if len(self.calling_discriminator) > DISCRIMINATOR_SIZE or (
            len(self.called_discriminator) > DISCRIMINATOR_SIZE
        ):
            raise ValueError("a discriminator has at most 64 octets")
        parts = [
            CE_FIXED.pack(
                int(self.attributes) & ATTRIBUTES_MASK,
                len(self.calling_discriminator),
                self.mtu,
                self.calling_discriminator,
                self.read_window,
                len(self.called_discriminator),
                self.called_discriminator,
            )
        ]
        if self.crc:
            parts.append(OPTION.pack(OptionType.CRC, OPTION_HEADER_SIZE))
        if self.urgent_marker:
            parts.append(OPTION.pack(OptionType.URGENT_MARKER, OPTION_HEADER_SIZE))
        for opt_type, data in self.other_options:
            parts.append(OPTION.pack(opt_type, OPTION_HEADER_SIZE + len(data)) + data)
        parts.append(struct.pack(">H", OptionType.END))
        return b"".join(parts)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int, end: int) -> CeHeader:
        """Decode the CE header in ``buf[offset:end]`` (end = end of segment
        as Segment Length says)."""
        if end - offset < CE_FIXED_SIZE:
            raise MalformedSegmentError("CE header truncated")
        (attrs, calling_len, mtu, calling, window, called_len, called) = CE_FIXED.unpack_from(
            buf, offset
        )
        if calling_len > DISCRIMINATOR_SIZE or called_len > DISCRIMINATOR_SIZE:
            raise MalformedSegmentError("discriminator length above 64")
        crc_opt = urgent = ended = False
        others: list[tuple[int, bytes]] = []
        pos = offset + CE_FIXED_SIZE
        view = memoryview(buf)
        # §3.3: options run to the End option or to the end of the segment.
        while pos < end:
            if end - pos < 2:
                raise MalformedSegmentError("truncated option")
            (opt_type,) = struct.unpack_from(">H", buf, pos)
            if opt_type == OptionType.END:
                ended = True
                pos += 2
                break
            if end - pos < OPTION_HEADER_SIZE:
                raise MalformedSegmentError("truncated option")
            _, opt_len = OPTION.unpack_from(buf, pos)
            if opt_len < OPTION_HEADER_SIZE or pos + opt_len > end:
                raise MalformedSegmentError(f"option {opt_type} has bad length {opt_len}")
            if opt_type == OptionType.CRC:
                crc_opt = True
            elif opt_type == OptionType.URGENT_MARKER:
                urgent = True
            else:
                others.append((opt_type, bytes(view[pos + OPTION_HEADER_SIZE : pos + opt_len])))
            pos += opt_len
        return cls(
            Attributes(attrs & ATTRIBUTES_MASK),
            mtu,
            window,
            calling[:calling_len],
            called[:called_len],
            crc_opt,
            urgent,
            tuple(others),
            ended,
            extra=bytes(view[pos:end]),
        )


# Lookup tables for the header decoder's hot path (enum calls are slow).
_TYPES: Final[tuple[SegmentType | None, ...]] = tuple(
    {int(t): t for t in SegmentType}.get(i) for i in range(TYPE_MASK + 1)
)
_FLAGS: Final = tuple(SegmentFlags(i << 5) for i in range(8))
_VI_ERRORS: Final = tuple(ViErrorType(i) for i in range(VI_ERROR_MASK + 1))
_MINIMUM: Final = {t: minimum_length(t) for t in SegmentType}


# --- Whole segments --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """One segment as :func:`decode_segment` found it, without judging it
    against any connection state."""

    header: SegmentHeader
    rdma: RdmaHeader | None
    ce: CeHeader | None
    payload: memoryview
    #: The trailer octets, or None when the segment has none.
    trailer: bytes | None
    #: The reading under which the trailer matched; None if no trailer or
    #: a mismatch.
    crc_order: CrcOrder | None
    #: Whether Segment Length was found to count the trailer (§3.2 reading).
    length_includes_trailer: bool
    #: Octets this segment occupies in the stream.
    size: int

    @property
    def crc_ok(self) -> bool | None:
        """None without a trailer, else whether the CRC matched."""
        return None if self.trailer is None else self.crc_order is not None


def _check(view: memoryview, start: int, body_end: int, trailer_at: int) -> CrcOrder | None:
    return _crc.matches(view[start:body_end], view[trailer_at : trailer_at + TRAILER_SIZE])


def decode_segment(
    buf: Buffer,
    offset: int = 0,
    *,
    trailer: bool | None = None,
    length_includes_trailer: bool | None = False,
    complete: bool = False,
) -> DecodedSegment | None:
    """Decode the segment at ``buf[offset:]``; None if more octets are needed.

    ``trailer``: whether the segment ends with a CRC (known from the CE
    segments); None decides per segment as §3.5/§3.6 allow: CE segments iff
    they carry the CRC option, ConnectReject/NoMatch by their length (or a
    valid CRC following them), other segments iff a valid CRC ends or follows
    them. ``length_includes_trailer``: the reading of Segment Length; None
    detects it from the CRC. ``complete``: ``buf`` holds all there will ever
    be (a capture), so a segment that ends the data has no trailer rather than
    one still to come. Raises :class:`~iwarp.vitcp.errors.MalformedSegmentError`
    only; a wrong CRC is reported in the result, not raised.
    """
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    available = len(view) - offset
    if available < HEADER_SIZE:
        return None
    header = SegmentHeader.unpack_from(view, offset)
    length = header.length
    seg_type = header.type
    if available < length:
        return None
    end = offset + length
    ce = None
    if seg_type in CE_TYPES:
        ce = CeHeader.unpack_from(view, offset + HEADER_SIZE, end)
        has_trailer = ce.crc if trailer is None else trailer
        # The CRC may be inside Segment Length, after the End option.
        if has_trailer and (
            length_includes_trailer is True
            or (
                length_includes_trailer is None
                and ce.end_option
                and len(ce.extra) >= TRAILER_SIZE
                and _check(view, offset, end - 4, end - 4) is not None
            )
        ):
            ce = CeHeader.unpack_from(view, offset + HEADER_SIZE, end - 4)
            return _finish(view, offset, header, ce, end - 4, trailer_at=end - 4, includes=True)
    elif seg_type in (SegmentType.CONNECT_REJECT, SegmentType.CONNECT_NO_MATCH):
        if length == HEADER_SIZE + TRAILER_SIZE:
            # No payload in these types: four more octets can only be a CRC.
            return _finish(view, offset, header, None, end - 4, trailer_at=end - 4, includes=True)
        if length != HEADER_SIZE:
            raise MalformedSegmentError(f"{seg_type.name} segment with length {length}")
        has_trailer = (
            trailer
            if trailer is not None
            else available >= length + TRAILER_SIZE and _check(view, offset, end, end) is not None
        )
    else:
        if seg_type is SegmentType.NOP or seg_type is SegmentType.RDMA_READ_REQUEST:
            # No payload: a longer length can only mean a counted trailer.
            if length not in (minimum_length(seg_type), minimum_length(seg_type) + TRAILER_SIZE):
                raise MalformedSegmentError(f"{seg_type.name} segment with length {length}")
            if length > minimum_length(seg_type):
                if trailer is False:
                    raise MalformedSegmentError(f"{seg_type.name} segment with length {length}")
                return _finish(
                    view, offset, header, None, end - 4, trailer_at=end - 4, includes=True
                )
        if trailer is None:
            if (
                length_includes_trailer is not False
                and length - TRAILER_SIZE >= minimum_length(seg_type)
                and _check(view, offset, end - 4, end - 4) is not None
            ):
                return _finish(
                    view, offset, header, None, end - 4, trailer_at=end - 4, includes=True
                )
            if available < length + TRAILER_SIZE and not complete:
                return None
            has_trailer = (
                available >= length + TRAILER_SIZE and _check(view, offset, end, end) is not None
            )
        else:
            has_trailer = trailer
        if has_trailer and length_includes_trailer:
            if length - TRAILER_SIZE < minimum_length(seg_type):
                raise MalformedSegmentError(f"segment length {length} leaves no room for the CRC")
            return _finish(view, offset, header, None, end - 4, trailer_at=end - 4, includes=True)
    if not has_trailer:
        return _finish(view, offset, header, ce, end, trailer_at=None, includes=False)
    if available < length + TRAILER_SIZE:
        return None
    return _finish(view, offset, header, ce, end, trailer_at=end, includes=False)


def _finish(
    view: memoryview,
    offset: int,
    header: SegmentHeader,
    ce: CeHeader | None,
    body_end: int,
    *,
    trailer_at: int | None,
    includes: bool,
) -> DecodedSegment:
    seg_type = header.type
    payload_start = offset + HEADER_SIZE
    rdma = None
    if seg_type in RDMA_TYPES:
        if body_end - offset < HEADER_SIZE + RDMA_HEADER_SIZE:
            raise MalformedSegmentError("RDMA header truncated")
        rdma = RdmaHeader.unpack_from(view, payload_start)
        payload_start += RDMA_HEADER_SIZE
    elif seg_type in CE_TYPES:
        payload_start = body_end
    if seg_type not in PAYLOAD_TYPES and seg_type not in CE_TYPES and body_end != payload_start:
        raise MalformedSegmentError(
            f"{seg_type.name} segment carries {body_end - payload_start} octets"
        )
    trailer_octets = None
    order = None
    size = body_end - offset
    if trailer_at is not None:
        trailer_octets = bytes(view[trailer_at : trailer_at + TRAILER_SIZE])
        order = _crc.matches(view[offset:body_end], trailer_octets)
        size = trailer_at + TRAILER_SIZE - offset
    return DecodedSegment(
        header,
        rdma,
        ce,
        view[payload_start:body_end],
        trailer_octets,
        order,
        includes,
        size,
    )


def encode_segment(
    header: SegmentHeader,
    *,
    rdma: RdmaHeader | None = None,
    ce: CeHeader | None = None,
    payload: Buffer = b"",
    trailer: bool = False,
    crc_order: CrcOrder = CrcOrder.MSB_FIRST,
    length_includes_trailer: bool = False,
) -> list[Buffer]:
    """The buffers of one segment; Segment Length is filled in here.

    ``payload`` is passed through uncopied (the list is for
    ``writelines``-style output).
    """
    middle = rdma.pack() if rdma is not None else ce.pack() if ce is not None else b""
    body = HEADER_SIZE + len(middle) + len(payload)
    length = body + (TRAILER_SIZE if trailer and length_includes_trailer else 0)
    if length > MAX_SEGMENT_LENGTH:
        raise ValueError(f"segment of {length} octets exceeds the 16-bit Segment Length")
    head = SEGMENT_HEADER.pack(
        header.version,
        int(header.flags) | int(header.type),
        length,
        header.data_offset,
        header.immediate_data,
        header.message_number,
        header.message_ack,
        header.rx_descriptors_posted,
        header.remote_error_code,
    )
    parts: list[Buffer] = [head + middle]
    if len(payload):
        parts.append(payload)
    if trailer:
        parts.append(_crc.crc(parts, crc_order))
    return parts
