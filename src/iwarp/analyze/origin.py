"""Who wrote a capture, and what it says about its traffic.

A pcapng file names the application that wrote it in its Section Header
Block (option ``shb_userappl``, draft-ietf-opsawg-pcapng §4.1). The
captures ``iwarp ... --pcap FILE`` writes name iwarp there, and, when the
MPA connections carry bare ULPDUs rather than DDP segments (``iwarp
connect --op mpa``, ``iwarp listen --op mpa``), say so with the tag
:data:`RAW_ULP_TAG`. ``iwarp decode`` reads it (:func:`peek_origin`) and
does not decode DDP/RDMAP headers in such a capture, as ``--raw-ulp``
would tell it.

Only the first block is looked at, from what the reader already buffered
(``peek``): nothing is consumed, so the capture reader starts at octet 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Final

__all__ = ["RAW_ULP_TAG", "CaptureOrigin", "application_name", "peek_origin"]

#: In the ``shb_userappl`` of a capture whose MPA ULPDUs are not DDP segments.
RAW_ULP_TAG: Final = "ulp=raw"

# draft-ietf-opsawg-pcapng §4.1: block type, block total length, byte-order
# magic, major and minor version, section length; then options; the total
# length again. §3.5: options are code, length, value padded to 32 bits.
_SHB_TYPE: Final = 0x0A0D0D0A
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
_SHB_FIXED: Final = 24  # type, length, magic, versions, section length
_OPT_END: Final = 0
_OPT_SHB_USERAPPL: Final = 4
_LE_HEAD: Final = struct.Struct("<III")
_BE_HEAD: Final = struct.Struct(">III")
_LE_OPTION: Final = struct.Struct("<HH")
_BE_OPTION: Final = struct.Struct(">HH")
#: Octets of the file looked at for the Section Header Block.
PEEK: Final = 4096


def application_name(*, raw_ulp: bool) -> str:
    """The ``shb_userappl`` iwarp writes: its name, and the tag when the
    MPA connections carry bare ULPDUs."""
    if raw_ulp:
        return f"iwarp ({RAW_ULP_TAG}: the MPA ULPDUs are bare octets, not DDP segments)"
    return "iwarp"


@dataclass(frozen=True, slots=True)
class CaptureOrigin:
    """What a capture's first block says about it."""

    #: The writing application (pcapng ``shb_userappl``), if named.
    application: str | None = None

    @property
    def raw_ulp(self) -> bool:
        """The writer says its MPA ULPDUs are not DDP segments."""
        return self.application is not None and RAW_ULP_TAG in self.application


def peek_origin(f: BinaryIO) -> CaptureOrigin:
    """The origin of the capture ``f`` (read through ``peek``, nothing
    consumed); an empty origin for pcap files, unreadable or partly
    buffered headers, and readers that cannot peek."""
    peek = getattr(f, "peek", None)
    if peek is None:
        return CaptureOrigin()
    try:
        head = bytes(peek(PEEK)[:PEEK])
    except (OSError, EOFError, ValueError):
        return CaptureOrigin()
    return CaptureOrigin(shb_application(head))


def shb_application(data: bytes) -> str | None:
    """``shb_userappl`` of the Section Header Block at the start of ``data``."""
    if len(data) < _SHB_FIXED:
        return None
    option = None
    for head, candidate in ((_LE_HEAD, _LE_OPTION), (_BE_HEAD, _BE_OPTION)):
        kind, length, magic = head.unpack_from(data)
        if kind == _SHB_TYPE and magic == _BYTE_ORDER_MAGIC:
            option = candidate
            break
    if option is None:
        return None
    # Options lie between the fixed fields and the trailing length.
    end = min(length, len(data)) - 4
    at = _SHB_FIXED
    while at + option.size <= end:
        code, size = option.unpack_from(data, at)
        at += option.size
        if code == _OPT_END or size > end - at:
            return None
        if code == _OPT_SHB_USERAPPL:
            return data[at : at + size].decode("utf-8", "replace")
        at += size + (-size % 4)
    return None
