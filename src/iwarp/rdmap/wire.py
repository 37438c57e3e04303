"""RDMAP wire formats (RFC 5040 §4), declared once for sender, receiver and analyzer.

RDMAP rides in DDP's reserved-for-ULP fields: the first RsvdULP octet is
the RDMAP control field ``RV(2) Rsv(2) Opcode(4)`` (RFC 5040 §4.1 Figure
3); for Send with Invalidate the next four untagged RsvdULP octets carry
the Invalidate STag. Two messages add a header after the DDP header: the
RDMA Read Request (§4.4, 28 octets) and the Terminate (§4.8). RFC 7306
adds four messages: Immediate Data (with or without Solicited Event, an
8-octet header on queue 0), the Atomic Request (a 52-octet header on queue
1) and the Atomic Response (a 12-octet header on queue 3).

:func:`describe_ulpdu` decodes any ULPDU into a plain dict without checking
state or raising, for the capture analyzer and for debugging.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Final

from iwarp._typing import Buffer
from iwarp.ddp.wire import (
    LAST_FLAG,
    RESERVED_MASK,
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
)

__all__ = [
    "ATOMIC_REQUEST",
    "ATOMIC_REQUEST_SIZE",
    "ATOMIC_RESPONSE",
    "ATOMIC_RESPONSE_SIZE",
    "IMMEDIATE_DATA_SIZE",
    "NO_MASK",
    "OPCODE_QUEUE",
    "OPCODE_TAGGED",
    "RDMAP_VERSION",
    "READ_REQUEST",
    "READ_REQUEST_SIZE",
    "TERMINATE_CONTROL",
    "AtomicOpcode",
    "AtomicRequest",
    "AtomicResponse",
    "HeaderControl",
    "RdmapOpcode",
    "ReadRequest",
    "TerminateHeader",
    "describe_ulpdu",
    "rdmap_control",
    "split_control",
]

# --- RDMAP control field (RFC 5040 §4.1) -------------------------------------

#: RV: 01b for RFC 5040; 00b is the RDMA Consortium's version (also valid).
RDMAP_VERSION: Final = 1
RDMAP_VERSION_RDMAC: Final = 0
_RV_SHIFT: Final = 6
_RSV_MASK: Final = 0x30
_OPCODE_MASK: Final = 0x0F


class RdmapOpcode(IntEnum):
    """RDMA message opcodes: RFC 5040 §4.1 Figure 4 (0-7), RFC 7306 (8-11).

    8-11 are the RFC 7306 extensions (§4.1 Figure 2, §10).
    """

    RDMA_WRITE = 0x0
    RDMA_READ_REQUEST = 0x1
    RDMA_READ_RESPONSE = 0x2
    SEND = 0x3
    SEND_WITH_INVALIDATE = 0x4
    SEND_WITH_SE = 0x5
    SEND_WITH_SE_AND_INVALIDATE = 0x6
    TERMINATE = 0x7
    #: RFC 7306 §6.
    IMMEDIATE_DATA = 0x8
    IMMEDIATE_DATA_WITH_SE = 0x9
    #: RFC 7306 §5.2.
    ATOMIC_REQUEST = 0xA
    ATOMIC_RESPONSE = 0xB


#: RFC 5040 Figure 4 / RFC 7306: the Tagged flag each opcode uses.
OPCODE_TAGGED: Final[dict[int, bool]] = {
    RdmapOpcode.RDMA_WRITE: True,
    RdmapOpcode.RDMA_READ_REQUEST: False,
    RdmapOpcode.RDMA_READ_RESPONSE: True,
    RdmapOpcode.SEND: False,
    RdmapOpcode.SEND_WITH_INVALIDATE: False,
    RdmapOpcode.SEND_WITH_SE: False,
    RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE: False,
    RdmapOpcode.TERMINATE: False,
    RdmapOpcode.IMMEDIATE_DATA: False,
    RdmapOpcode.IMMEDIATE_DATA_WITH_SE: False,
    RdmapOpcode.ATOMIC_REQUEST: False,
    RdmapOpcode.ATOMIC_RESPONSE: False,
}

#: RFC 5040 Figure 4 / RFC 7306: the untagged queue number of each opcode.
OPCODE_QUEUE: Final[dict[int, int]] = {
    RdmapOpcode.RDMA_READ_REQUEST: 1,
    RdmapOpcode.SEND: 0,
    RdmapOpcode.SEND_WITH_INVALIDATE: 0,
    RdmapOpcode.SEND_WITH_SE: 0,
    RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE: 0,
    RdmapOpcode.TERMINATE: 2,
    RdmapOpcode.IMMEDIATE_DATA: 0,
    RdmapOpcode.IMMEDIATE_DATA_WITH_SE: 0,
    RdmapOpcode.ATOMIC_REQUEST: 1,
    RdmapOpcode.ATOMIC_RESPONSE: 3,
}

#: Opcodes whose untagged RsvdULP[8:39] is an Invalidate STag (RFC 5040 §4.1).
INVALIDATE_OPCODES: Final = frozenset(
    {RdmapOpcode.SEND_WITH_INVALIDATE, RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE}
)
#: Opcodes asking for a Solicited Event at the data sink (RFC 5040 §5.3).
SOLICITED_OPCODES: Final = frozenset(
    {
        RdmapOpcode.SEND_WITH_SE,
        RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE,
        RdmapOpcode.IMMEDIATE_DATA_WITH_SE,
    }
)
#: Immediate Data messages (RFC 7306 §6): Send-like, exactly 8 octets.
IMMEDIATE_OPCODES: Final = frozenset(
    {RdmapOpcode.IMMEDIATE_DATA, RdmapOpcode.IMMEDIATE_DATA_WITH_SE}
)


def rdmap_control(opcode: int, version: int = RDMAP_VERSION) -> int:
    """The RDMAP control octet: RV in the top two bits, reserved zero, opcode."""
    return ((version & 0x3) << _RV_SHIFT) | (opcode & _OPCODE_MASK)


def split_control(octet: int) -> tuple[int, int]:
    """``(version, opcode)`` of an RDMAP control octet (reserved bits ignored)."""
    return octet >> _RV_SHIFT, octet & _OPCODE_MASK


# --- RDMA Read Request header (RFC 5040 §4.4, Figure 6) ----------------------

#: SinkSTag(32) SinkTO(64) RDMARDSZ(32) SrcSTag(32) SrcTO(64).
READ_REQUEST: Final = struct.Struct(">IQIIQ")
READ_REQUEST_SIZE: Final = READ_REQUEST.size  # 28


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """The RDMA Read Request header: where to read from and where to put it."""

    sink_stag: int
    sink_to: int
    size: int
    src_stag: int
    src_to: int

    def pack(self) -> bytes:
        return READ_REQUEST.pack(
            self.sink_stag, self.sink_to, self.size, self.src_stag, self.src_to
        )

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> ReadRequest:
        return cls(*READ_REQUEST.unpack_from(data, offset))

    def advanced(self, done: int) -> ReadRequest:
        """The header after ``done`` octets were sent (RFC 5040 §4.8, R field)."""
        return ReadRequest(
            self.sink_stag,
            self.sink_to + done,
            self.size - done,
            self.src_stag,
            self.src_to + done,
        )


# --- RFC 7306 extensions: Atomic Request / Response, Immediate Data ---------


class AtomicOpcode(IntEnum):
    """AOpCode, the Atomic Operation Code (RFC 7306 §5.2.1 Figure 5, §10.1).

    0x1 is reserved; all others are unassigned.
    """

    FETCH_ADD = 0x0
    CMP_SWAP = 0x2


#: A mask of all ones: what FetchAdd sends as Compare Mask (RFC 7306 §5.2.1).
NO_MASK: Final = 0xFFFFFFFFFFFFFFFF
_AOPCODE_MASK: Final = 0xF
_ATOMIC_CODES: Final = frozenset(int(code) for code in AtomicOpcode)

#: Reserved(28) AOpCode(4) | Request Identifier(32) | Remote STag(32) |
#: Remote TO(64) | Add or Swap Data(64) | Add or Swap Mask(64) |
#: Compare Data(64) | Compare Mask(64): RFC 7306 §5.2.1 Figure 4.
ATOMIC_REQUEST: Final = struct.Struct(">IIIQQQQQ")
ATOMIC_REQUEST_SIZE: Final = ATOMIC_REQUEST.size  # 52

#: Original Request Identifier(32) | Original Remote Data Value(64): RFC 7306
#: §5.2.2 Figure 6. (§4 calls this header 32 octets long; its figure, and
#: Appendix A.2, show these 12.)
ATOMIC_RESPONSE: Final = struct.Struct(">IQ")
ATOMIC_RESPONSE_SIZE: Final = ATOMIC_RESPONSE.size  # 12

#: The Immediate Data header: 8 octets of data (RFC 7306 §6.2 Figure 7).
IMMEDIATE_DATA_SIZE: Final = 8


@dataclass(frozen=True, slots=True)
class AtomicRequest:
    """The Atomic Operation Request header (RFC 7306 §5.2.1).

    ``aopcode`` is kept as received (an unsupported one is the Responder's
    error, RFC 7306 §5.2.1 rule 4); ``reserved`` is the 28-bit field, sent
    as zero and ignored on receipt.
    """

    aopcode: int
    request_id: int
    stag: int
    to: int
    data: int
    mask: int
    compare: int = 0
    compare_mask: int = NO_MASK
    reserved: int = 0

    def pack(self) -> bytes:
        return ATOMIC_REQUEST.pack(
            ((self.reserved << 4) | (self.aopcode & _AOPCODE_MASK)) & 0xFFFFFFFF,
            self.request_id,
            self.stag,
            self.to,
            self.data,
            self.mask,
            self.compare,
            self.compare_mask,
        )

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> AtomicRequest:
        first, rid, stag, to, value, mask, compare, compare_mask = ATOMIC_REQUEST.unpack_from(
            data, offset
        )
        return cls(
            first & _AOPCODE_MASK, rid, stag, to, value, mask, compare, compare_mask, first >> 4
        )

    @classmethod
    def fetch_add(
        cls, request_id: int, stag: int, to: int, add: int, mask: int = 0
    ) -> AtomicRequest:
        """A FetchAdd: Compare Data 0 and Compare Mask all ones, as §5.2.1 asks."""
        return cls(AtomicOpcode.FETCH_ADD, request_id, stag, to, add, mask, 0, NO_MASK)

    @classmethod
    def cmp_swap(
        cls,
        request_id: int,
        stag: int,
        to: int,
        compare: int,
        swap: int,
        *,
        compare_mask: int = NO_MASK,
        swap_mask: int = NO_MASK,
    ) -> AtomicRequest:
        """A CmpSwap of the bits of ``swap_mask`` when the bits of
        ``compare_mask`` equal ``compare``."""
        return cls(
            AtomicOpcode.CMP_SWAP, request_id, stag, to, swap, swap_mask, compare, compare_mask
        )


@dataclass(frozen=True, slots=True)
class AtomicResponse:
    """The Atomic Operation Response header (RFC 7306 §5.2.2)."""

    request_id: int
    original: int

    def pack(self) -> bytes:
        return ATOMIC_RESPONSE.pack(self.request_id, self.original)

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> AtomicResponse:
        return cls(*ATOMIC_RESPONSE.unpack_from(data, offset))


# --- Terminate header (RFC 5040 §4.8, Figures 7 and 8) -----------------------

#: Layer(4) EType(4) | ErrorCode(8) | M D R Reserved(13).
TERMINATE_CONTROL: Final = struct.Struct(">BBH")
TERMINATE_CONTROL_SIZE: Final = TERMINATE_CONTROL.size
#: The DDP Segment Length field.
SEGMENT_LENGTH: Final = struct.Struct(">H")


class HeaderControl(IntFlag):
    """HdrCt of the Terminate control field, as bits of its low 16-bit word."""

    #: M: the DDP Segment Length is valid.
    SEGMENT_LENGTH = 0x8000
    #: D: the Terminated DDP Header is included.
    DDP_HEADER = 0x4000
    #: R: the Terminated RDMA Header (a Read Request header) is included.
    RDMA_HEADER = 0x2000


_HDRCT_MASK: Final = 0xE000
_NO_HDRCT: Final = HeaderControl(0)


@dataclass(frozen=True, slots=True)
class TerminateHeader:
    """The Terminate header: who failed, why, and copies of what failed.

    ``ddp_header`` is the terminated DDP header (14 or 18 octets; the D bit
    is set when present); ``segment_length`` is the DDP segment length (M
    bit); ``rdma_header`` the 28-octet Read Request header (R bit).
    """

    layer: int
    etype: int
    code: int
    segment_length: int | None = None
    ddp_header: bytes | None = None
    rdma_header: bytes | None = None
    #: HdrCt as received (pack derives it from the fields above).
    hdrct: HeaderControl = _NO_HDRCT
    #: The 13 reserved bits as received (siw puts its M/D/R bits there).
    reserved: int = 0

    @property
    def flags(self) -> HeaderControl:
        flags = HeaderControl(0)
        if self.segment_length is not None:
            flags |= HeaderControl.SEGMENT_LENGTH
        if self.ddp_header is not None:
            flags |= HeaderControl.DDP_HEADER
        if self.rdma_header is not None:
            flags |= HeaderControl.RDMA_HEADER
        return flags

    def pack(self) -> bytes:
        flags = self.flags
        parts = [
            TERMINATE_CONTROL.pack(
                ((self.layer & 0xF) << 4) | (self.etype & 0xF), self.code & 0xFF, int(flags)
            )
        ]
        if flags & (HeaderControl.SEGMENT_LENGTH | HeaderControl.DDP_HEADER):
            parts.append(SEGMENT_LENGTH.pack((self.segment_length or 0) & 0xFFFF))
        if self.ddp_header is not None:
            parts.append(self.ddp_header)
        if self.rdma_header is not None:
            parts.append(self.rdma_header)
        return b"".join(parts)

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int = 0) -> TerminateHeader:
        """Decode a Terminate header; copied headers are taken when complete.

        Raises :class:`ValueError` only when the 4-octet control word itself
        is missing; a truncated copy is left out rather than refused (siw
        sends Terminates without copies, see docs/rdmap.md).
        """
        if len(data) - offset < TERMINATE_CONTROL_SIZE:
            raise ValueError("Terminate header shorter than its control field")
        first, code, word = TERMINATE_CONTROL.unpack_from(data, offset)
        hdrct = HeaderControl(word & _HDRCT_MASK)
        pos = offset + TERMINATE_CONTROL_SIZE
        end = len(data)
        segment_length = ddp_header = rdma_header = None
        if hdrct & (HeaderControl.SEGMENT_LENGTH | HeaderControl.DDP_HEADER) and pos + 2 <= end:
            (length,) = SEGMENT_LENGTH.unpack_from(data, pos)
            pos += 2
            if hdrct & HeaderControl.SEGMENT_LENGTH:
                segment_length = length
            if hdrct & HeaderControl.DDP_HEADER and pos < end:
                size = TAGGED_HEADER_SIZE if data[pos] & TAGGED_FLAG else UNTAGGED_HEADER_SIZE
                if pos + size <= end:
                    ddp_header = bytes(data[pos : pos + size])
                    pos += size
        if hdrct & HeaderControl.RDMA_HEADER and pos + READ_REQUEST_SIZE <= end:
            rdma_header = bytes(data[pos : pos + READ_REQUEST_SIZE])
        return cls(
            layer=first >> 4,
            etype=first & 0xF,
            code=code,
            segment_length=segment_length,
            ddp_header=ddp_header,
            rdma_header=rdma_header,
            hdrct=hdrct,
            reserved=word & ~_HDRCT_MASK & 0xFFFF,
        )

    def siw_view(self) -> tuple[int, int, int]:
        """``(layer, etype, code)`` as Linux siw meant them.

        siw builds the control word with little-endian C bitfields, so on
        x86 its Layer and EType nibbles arrive swapped (siw-vm evidence:
        "layer 2, type 0, code 7" goes out as ``02 07``).
        """
        return self.etype, self.layer, self.code


# --- Tolerant decoding (for analyzers) --------------------------------------


def describe_ulpdu(ulpdu: Buffer) -> dict[str, object]:
    """Decode any ULPDU's DDP and RDMAP headers into a plain dict.

    Never raises and enforces no state: fields that are present are
    reported, and problems (short header, unknown opcode, version) are
    listed under ``"problems"``. ``"payload_offset"`` is where ULP payload
    (or the RDMAP header) starts.
    """
    data = memoryview(ulpdu).cast("B") if not isinstance(ulpdu, bytes) else ulpdu
    out: dict[str, object] = {"length": len(data)}
    problems: list[str] = []
    out["problems"] = problems
    if len(data) < 2:
        problems.append("shorter than the DDP control and RDMAP control fields")
        return out
    control, rdmap = data[0], data[1]
    tagged = bool(control & TAGGED_FLAG)
    version, opcode = split_control(rdmap)
    out.update(
        tagged=tagged,
        last=bool(control & LAST_FLAG),
        ddp_version=control & VERSION_MASK,
        ddp_reserved=(control & RESERVED_MASK) >> 2,
        rdmap_version=version,
        rdmap_reserved=(rdmap & _RSV_MASK) >> 4,
        opcode=opcode,
    )
    try:
        out["opcode_name"] = RdmapOpcode(opcode).name
    except ValueError:
        out["opcode_name"] = f"reserved({opcode:#x})"
        problems.append(f"reserved RDMAP opcode {opcode:#x}")
    if control & VERSION_MASK != 1:
        problems.append(f"DDP version {control & VERSION_MASK}")
    if version not in (RDMAP_VERSION, RDMAP_VERSION_RDMAC):
        problems.append(f"RDMAP version {version}")
    expected = OPCODE_TAGGED.get(opcode)
    if expected is not None and expected != tagged:
        problems.append(f"opcode {opcode} with T={int(tagged)}")
    if tagged:
        if len(data) < TAGGED_HEADER_SIZE:
            problems.append("truncated tagged DDP header")
            return out
        _, _, stag, to = TAGGED_HEADER.unpack_from(data, 0)
        out.update(stag=stag, to=to, payload_offset=TAGGED_HEADER_SIZE)
        out["payload_length"] = len(data) - TAGGED_HEADER_SIZE
        return out
    if len(data) < UNTAGGED_HEADER_SIZE:
        problems.append("truncated untagged DDP header")
        return out
    _, _, inv_stag, qn, msn, mo = UNTAGGED_HEADER.unpack_from(data, 0)
    out.update(inv_stag=inv_stag, qn=qn, msn=msn, mo=mo, payload_offset=UNTAGGED_HEADER_SIZE)
    out["payload_length"] = len(data) - UNTAGGED_HEADER_SIZE
    queue = OPCODE_QUEUE.get(opcode)
    if queue is not None and queue != qn:
        problems.append(f"opcode {opcode} on queue {qn}")
    body = UNTAGGED_HEADER_SIZE
    if opcode == RdmapOpcode.RDMA_READ_REQUEST and mo == 0:
        if len(data) >= body + READ_REQUEST_SIZE:
            req = ReadRequest.unpack_from(data, body)
            out["read_request"] = {
                "sink_stag": req.sink_stag,
                "sink_to": req.sink_to,
                "size": req.size,
                "src_stag": req.src_stag,
                "src_to": req.src_to,
            }
        else:
            problems.append("truncated RDMA Read Request header")
    elif opcode == RdmapOpcode.ATOMIC_REQUEST and mo == 0:
        if len(data) >= body + ATOMIC_REQUEST_SIZE:
            atomic = AtomicRequest.unpack_from(data, body)
            out["atomic_request"] = {
                "aopcode": atomic.aopcode,
                "request_id": atomic.request_id,
                "stag": atomic.stag,
                "to": atomic.to,
                "data": atomic.data,
                "mask": atomic.mask,
                "compare": atomic.compare,
                "compare_mask": atomic.compare_mask,
            }
            if atomic.aopcode not in _ATOMIC_CODES:
                problems.append(f"unsupported atomic operation code {atomic.aopcode:#x}")
            if atomic.to % 8:
                problems.append(f"atomic target TO {atomic.to:#x} is not 64-bit aligned")
        else:
            problems.append("truncated Atomic Request header")
    elif opcode == RdmapOpcode.ATOMIC_RESPONSE and mo == 0:
        if len(data) >= body + ATOMIC_RESPONSE_SIZE:
            response = AtomicResponse.unpack_from(data, body)
            out["atomic_response"] = {
                "request_id": response.request_id,
                "original": response.original,
            }
        else:
            problems.append("truncated Atomic Response header")
    elif opcode in IMMEDIATE_OPCODES and mo == 0:
        if len(data) - body != IMMEDIATE_DATA_SIZE:
            problems.append(f"Immediate Data of {len(data) - body} octets, not 8")
        if len(data) >= body + IMMEDIATE_DATA_SIZE:
            out["immediate_data"] = bytes(data[body : body + IMMEDIATE_DATA_SIZE]).hex()
    elif opcode == RdmapOpcode.TERMINATE and mo == 0:
        if len(data) >= body + TERMINATE_CONTROL_SIZE:
            term = TerminateHeader.unpack_from(data, body)
            siw_layer, siw_etype, _ = term.siw_view()
            out["terminate"] = {
                "layer": term.layer,
                "etype": term.etype,
                "code": term.code,
                "hdrct": int(term.hdrct) >> 13,
                "reserved": term.reserved,
                "segment_length": term.segment_length,
                "ddp_header": term.ddp_header.hex() if term.ddp_header else None,
                "rdma_header": term.rdma_header.hex() if term.rdma_header else None,
                "siw_layer": siw_layer,
                "siw_etype": siw_etype,
            }
        else:
            problems.append("truncated Terminate header")
    return out
