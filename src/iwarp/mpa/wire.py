"""MPA wire formats, declared once for the encoder, the decoder and the analyzer.

Sources: RFC 5044 §4 (FPDU, Marker), §6 (CRC), §7.1 (Request/Reply frames);
RFC 6581 §5-§9 (Rev 2 enhanced connection data); the drafts in the seeds
(draft-ietf-rddp-mpa-01/02 §4-§6 for Rev 0, draft-culley-iwarp-mpa-02).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Final

from iwarp._typing import Buffer

# --- FPDU (RFC 5044 §4.1) ----------------------------------------------------

#: ULPDU_Length, 16 bits, network order.
ULPDU_LENGTH: Final = struct.Struct(">H")
#: The CRC field: the CRC-32C value sent least-significant octet first
#: (RFC 5044 Appendix / §6; the seed's Figures 5 and 6: ``4C 86 B3 84``).
CRC_FIELD: Final = struct.Struct("<I")
CRC_SIZE: Final = 4
HEADER_SIZE: Final = 2
#: The largest ULPDU any sender may post (RFC 5044 §5.3): 65535 minus IP,
#: TCP and MPA overheads, rounded down.
MAX_ULPDU: Final = 64768
#: The smallest MULPDU MPA may offer to DDP (RFC 5044 §5.3).
MIN_MULPDU: Final = 128


def pad_length(ulpdu_length: int) -> int:
    """Octets of zero PAD after a ULPDU so that the FPDU is a multiple of 4."""
    return -(HEADER_SIZE + ulpdu_length) & 3


def fpdu_length(ulpdu_length: int) -> int:
    """Octets of an FPDU without markers: length + ULPDU + PAD + CRC."""
    return HEADER_SIZE + ulpdu_length + pad_length(ulpdu_length) + CRC_SIZE


# --- Markers (RFC 5044 §4.3) -------------------------------------------------

#: A Marker sits at every 512th octet of the stream, counted from the first
#: octet of MPA full operation.
MARKER_INTERVAL: Final = 512
MARKER_SIZE: Final = 4
#: Reserved (16 bits, zero) and FPDUPTR (16 bits): octets back from the
#: marker to the ULPDU Length field of the FPDU containing it.
MARKER: Final = struct.Struct(">HH")
#: "The least significant two bits ... MUST be treated as zero".
FPDUPTR_MASK: Final = 0xFFFC
ZERO_MARKER: Final = bytes(MARKER_SIZE)


# --- MULPDU (RFC 5044 §5.3, seed 000 §5.3.2) --------------------------------


def mulpdu(emss: int, *, markers: bool) -> int:
    """The largest ULPDU that fits one TCP segment of ``emss`` octets.

    With markers the worst case of markers is reserved; the result is clamped
    to the range MPA may offer DDP, 128..64768 (RFC 5044 §5.3: below 128 MPA
    still offers 128 and sends FPDUs that span segments).
    """
    if emss <= 0:
        raise ValueError(f"EMSS must be positive, got {emss}")
    overhead = HEADER_SIZE + CRC_SIZE + emss % 4
    if markers:
        overhead += MARKER_SIZE * -(-emss // MARKER_INTERVAL)
    return max(MIN_MULPDU, min(MAX_ULPDU, emss - overhead))


# --- Request / Reply frames (RFC 5044 §7.1, RFC 6581 §5-§9) ------------------

KEY_SIZE: Final = 16
REQUEST_KEY: Final = b"MPA ID Req Frame"
REPLY_KEY: Final = b"MPA ID Rep Frame"
#: key(16), flags(8), Rev(8), PD_Length(16).
FRAME_HEADER: Final = struct.Struct(">16sBBH")
FRAME_HEADER_SIZE: Final = FRAME_HEADER.size  # 20


class FrameFlags(IntFlag):
    """The flag octet of a Request/Reply frame: ``M C R S Res(4)``."""

    #: Markers are required in FPDUs sent *to* the sender of this frame.
    MARKERS = 0x80
    #: CRC is wanted (it is used in both directions if either side sets it).
    CRC = 0x40
    #: Reply only: the Responder's consumer rejected the connection.
    REJECT = 0x20
    #: RFC 6581: Rev 2 enhanced connection data leads the private data.
    ENHANCED = 0x10


#: Bits reserved by every revision: sent as zero, ignored on receipt.
RESERVED_FLAGS: Final = 0x0F


class Revision(IntEnum):
    """MPA revision numbers."""

    #: draft-ietf-rddp-mpa-01/02 and RDMAC RNICs (RFC 5044 Appendix C).
    REV0 = 0
    #: RFC 5044.
    REV1 = 1
    #: RFC 6581: enhanced connection establishment.
    REV2 = 2


#: RFC 5044 §7.1: PD_Length above 512 makes a frame improperly formatted
#: (Rev 1 and 2). Rev 0 allowed any 16-bit length.
MAX_PRIVATE_DATA: Final = 512
MAX_PRIVATE_DATA_REV0: Final = 0xFFFF

# RFC 6581 §5: enhanced connection data, two big-endian 16-bit words.
ENHANCED: Final = struct.Struct(">HH")
ENHANCED_SIZE: Final = 4
#: 14-bit IRD/ORD; this value means "no automatic negotiation" (§9.1).
IRD_ORD_MASK: Final = 0x3FFF
IRD_ORD_NONE: Final = 0x3FFF


class RtrFlags(IntFlag):
    """RFC 6581 §5 control flags, as one set (our own bit numbering).

    On the wire A and B sit in the IRD word, C and D in the ORD word.
    """

    NONE = 0

    #: A: peer-to-peer mode, an RTR message follows the Reply.
    PEER_TO_PEER = 0x1
    #: B: zero-length Send as RTR.
    SEND = 0x2
    #: C: zero-length RDMA Write as RTR.
    WRITE = 0x4
    #: D: zero-length RDMA Read as RTR.
    READ = 0x8


RTR_TYPES: Final = RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ
_IRD_A: Final = 0x8000
_IRD_B: Final = 0x4000
_ORD_C: Final = 0x8000
_ORD_D: Final = 0x4000


@dataclass(frozen=True, slots=True)
class EnhancedData:
    """RFC 6581 enhanced connection data: IRD, ORD and the A/B/C/D flags."""

    ird: int
    ord: int
    flags: RtrFlags = RtrFlags.NONE

    def __post_init__(self) -> None:
        for name in ("ird", "ord"):
            value = getattr(self, name)
            if not 0 <= value <= IRD_ORD_MASK:
                raise ValueError(f"{name.upper()} must be 0..{IRD_ORD_MASK}, got {value}")

    def pack(self) -> bytes:
        ird_word = self.ird | (_IRD_A if RtrFlags.PEER_TO_PEER in self.flags else 0)
        ird_word |= _IRD_B if RtrFlags.SEND in self.flags else 0
        ord_word = self.ord | (_ORD_C if RtrFlags.WRITE in self.flags else 0)
        ord_word |= _ORD_D if RtrFlags.READ in self.flags else 0
        return ENHANCED.pack(ird_word, ord_word)

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> EnhancedData:
        ird_word, ord_word = ENHANCED.unpack_from(data, offset)
        flags = RtrFlags.NONE
        if ird_word & _IRD_A:
            flags |= RtrFlags.PEER_TO_PEER
        if ird_word & _IRD_B:
            flags |= RtrFlags.SEND
        if ord_word & _ORD_C:
            flags |= RtrFlags.WRITE
        if ord_word & _ORD_D:
            flags |= RtrFlags.READ
        return cls(ird=ird_word & IRD_ORD_MASK, ord=ord_word & IRD_ORD_MASK, flags=flags)


@dataclass(frozen=True, slots=True)
class MpaFrame:
    """An MPA Request or Reply frame (RFC 5044 §7.1), decoded.

    ``private_data`` is the whole private data field, the RFC 6581 enhanced
    data included when ``flags`` has :attr:`FrameFlags.ENHANCED`; use
    :attr:`enhanced` and :attr:`ulp_private_data` for the two parts.
    """

    is_request: bool
    flags: FrameFlags
    revision: int
    private_data: bytes = b""
    #: The raw reserved bits as received (sent as zero; kept for analyzers).
    reserved: int = 0

    @property
    def markers(self) -> bool:
        return FrameFlags.MARKERS in self.flags

    @property
    def crc(self) -> bool:
        return FrameFlags.CRC in self.flags

    @property
    def reject(self) -> bool:
        return FrameFlags.REJECT in self.flags

    @property
    def is_enhanced(self) -> bool:
        """Rev 2 with the S bit: enhanced data leads the private data."""
        return self.revision >= Revision.REV2 and FrameFlags.ENHANCED in self.flags

    @property
    def enhanced(self) -> EnhancedData | None:
        if not self.is_enhanced or len(self.private_data) < ENHANCED_SIZE:
            return None
        return EnhancedData.unpack_from(self.private_data)

    @property
    def ulp_private_data(self) -> bytes:
        """The private data meant for the application (after enhanced data)."""
        if self.is_enhanced:
            return self.private_data[ENHANCED_SIZE:]
        return self.private_data

    def pack(self) -> bytes:
        """The frame's octets; reserved bits are sent as zero."""
        key = REQUEST_KEY if self.is_request else REPLY_KEY
        flags = int(self.flags) & ~RESERVED_FLAGS
        header = FRAME_HEADER.pack(key, flags, self.revision, len(self.private_data))
        return header + self.private_data


def parse_frame_header(data: Buffer, offset: int = 0) -> tuple[bool | None, int, int, int]:
    """Decode the 20-octet frame header at ``offset``.

    Returns ``(is_request, flags, revision, pd_length)``; ``is_request`` is
    None when the key matches neither frame (the caller decides the error).
    """
    key, flags, revision, pd_length = FRAME_HEADER.unpack_from(data, offset)
    is_request = True if key == REQUEST_KEY else False if key == REPLY_KEY else None
    return is_request, flags, revision, pd_length
