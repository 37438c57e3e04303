"""DDP wire formats (RFC 5041 §4), declared once for sender, receiver and analyzer.

A DDP segment is a header followed by ULP payload. The header starts with
the DDP control octet (``T L Rsvd(4) DV(2)``) and the first RsvdULP octet
(RDMAP puts its control field there); then either the tagged fields (STag,
TO) or four more RsvdULP octets and the untagged fields (QN, MSN, MO)::

    tagged   (14): ctrl  rsvdulp  STag(32)  TO(64)
    untagged (18): ctrl  rsvdulp  rsvdulp2(32)  QN(32)  MSN(32)  MO(32)

Offsets here are relative to the start of the ULPDU (the octet after the
MPA ULPDU_Length field).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from iwarp._typing import Buffer

__all__ = [
    "DDP_VERSION",
    "LAST_FLAG",
    "MAX_MSN",
    "MAX_TO",
    "TO_SPACE",
    "TAGGED_FLAG",
    "TAGGED_HEADER",
    "TAGGED_HEADER_SIZE",
    "UNTAGGED_HEADER",
    "UNTAGGED_HEADER_SIZE",
    "QueueNumber",
    "TaggedHeader",
    "UntaggedHeader",
    "header_size",
    "is_tagged",
    "fits_to_space",
    "pack_control",
]

# --- DDP control field (RFC 5041 §4.1) --------------------------------------

#: T: the payload goes to a tagged buffer.
TAGGED_FLAG: Final = 0x80
#: L: last segment of a DDP message.
LAST_FLAG: Final = 0x40
#: Rsvd: sent as zero, not checked on receive.
RESERVED_MASK: Final = 0x3C
#: DV: the DDP version, two bits.
VERSION_MASK: Final = 0x03
#: The version this document describes (RFC 5041 §4.1: "MUST be set to one").
DDP_VERSION: Final = 1

#: Largest Message Sequence Number; it wraps to 0 after this (RFC 5041 §4.3).
MAX_MSN: Final = 0xFFFFFFFF
#: Largest Tagged Offset (64-bit, RFC 5041 §4.2).
MAX_TO: Final = 0xFFFFFFFFFFFFFFFF
#: Octets in the Tagged Offset space: a buffer may end on its last octet,
#: MAX_TO, and never wraps to 0 (RFC 5041 §7.1 "Base or Bounds", "TO wrap").
TO_SPACE: Final = MAX_TO + 1


def fits_to_space(to: int, length: int) -> bool:
    """Whether ``length`` octets at TO ``to`` lie inside the 64-bit TO space.

    The one rule for every check of the TO limit (registration, posting a
    Write or Read, receiving a tagged segment): the last octet, at
    ``to + length - 1``, may be :data:`MAX_TO` itself.
    """
    return to >= 0 and length >= 0 and to + length <= TO_SPACE


def pack_control(*, tagged: bool, last: bool, version: int = DDP_VERSION) -> int:
    """The DDP control octet for these flags (reserved bits zero)."""
    return (TAGGED_FLAG if tagged else 0) | (LAST_FLAG if last else 0) | (version & VERSION_MASK)


def is_tagged(control: int) -> bool:
    return bool(control & TAGGED_FLAG)


class QueueNumber(IntEnum):
    """Untagged queues RDMAP uses (RFC 5040 §4.1 Figure 4, RFC 7306 §10.2)."""

    #: Send, Send with Invalidate, Send with SE (and Invalidate).
    SEND = 0
    #: RDMA Read Request.
    READ_REQUEST = 1
    #: Terminate.
    TERMINATE = 2
    #: Atomic Response (RFC 7306 §4.1 Figure 2, §10.2): tracks outstanding
    #: Atomic Requests at the Requester.
    ATOMIC_RESPONSE = 3


# --- Tagged buffer model header (RFC 5041 §4.2, Figure 4) --------------------

#: ctrl(8) RsvdULP(8) STag(32) TO(64).
TAGGED_HEADER: Final = struct.Struct(">BBIQ")
TAGGED_HEADER_SIZE: Final = TAGGED_HEADER.size  # 14


@dataclass(frozen=True, slots=True)
class TaggedHeader:
    """The header of a segment placed into a tagged buffer (STag, TO)."""

    stag: int
    to: int
    last: bool = True
    #: RsvdULP: RDMAP's control octet.
    rsvdulp: int = 0
    version: int = DDP_VERSION
    #: Reserved control bits as received (kept for analyzers; sent as zero).
    reserved: int = 0

    size = TAGGED_HEADER_SIZE

    @property
    def control(self) -> int:
        return pack_control(tagged=True, last=self.last, version=self.version)

    def pack(self) -> bytes:
        return TAGGED_HEADER.pack(self.control, self.rsvdulp, self.stag, self.to)

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> TaggedHeader:
        """Decode the 14 octets at ``offset``; the caller checks the length."""
        control, rsvdulp, stag, to = TAGGED_HEADER.unpack_from(data, offset)
        return cls(
            stag=stag,
            to=to,
            last=bool(control & LAST_FLAG),
            rsvdulp=rsvdulp,
            version=control & VERSION_MASK,
            reserved=(control & RESERVED_MASK) >> 2,
        )


# --- Untagged buffer model header (RFC 5041 §4.3, Figure 5) -------------------

#: ctrl(8) RsvdULP[0:7](8) RsvdULP[8:39](32) QN(32) MSN(32) MO(32).
UNTAGGED_HEADER: Final = struct.Struct(">BBIIII")
UNTAGGED_HEADER_SIZE: Final = UNTAGGED_HEADER.size  # 18


@dataclass(frozen=True, slots=True)
class UntaggedHeader:
    """The header of a segment placed into an untagged buffer (QN, MSN, MO)."""

    qn: int
    msn: int
    mo: int = 0
    last: bool = True
    #: RsvdULP[0:7]: RDMAP's control octet.
    rsvdulp: int = 0
    #: RsvdULP[8:39]: RDMAP's Invalidate STag (Send with Invalidate).
    rsvdulp2: int = 0
    version: int = DDP_VERSION
    reserved: int = 0

    size = UNTAGGED_HEADER_SIZE

    @property
    def control(self) -> int:
        return pack_control(tagged=False, last=self.last, version=self.version)

    def pack(self) -> bytes:
        return UNTAGGED_HEADER.pack(
            self.control, self.rsvdulp, self.rsvdulp2, self.qn, self.msn, self.mo
        )

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> UntaggedHeader:
        """Decode the 18 octets at ``offset``; the caller checks the length."""
        control, rsvdulp, rsvdulp2, qn, msn, mo = UNTAGGED_HEADER.unpack_from(data, offset)
        return cls(
            qn=qn,
            msn=msn,
            mo=mo,
            last=bool(control & LAST_FLAG),
            rsvdulp=rsvdulp,
            rsvdulp2=rsvdulp2,
            version=control & VERSION_MASK,
            reserved=(control & RESERVED_MASK) >> 2,
        )


def header_size(control: int) -> int:
    """Octets of the DDP header announced by a control octet."""
    return TAGGED_HEADER_SIZE if control & TAGGED_FLAG else UNTAGGED_HEADER_SIZE
