"""Octets for the target, well-formed or broken on purpose, built from the wire declarations.

Every field comes from the structs of :mod:`iwarp.mpa.wire`,
:mod:`iwarp.ddp.wire` and :mod:`iwarp.rdmap.wire`; a case breaks exactly one
field by passing an explicit value where the normal builder would compute
it (a key, a PD_Length, a CRC, a PAD octet, a queue number...).
"""

from __future__ import annotations

from dataclasses import dataclass

from iwarp._crc32c import crc32c
from iwarp.ddp.wire import DDP_VERSION, TaggedHeader, UntaggedHeader
from iwarp.mpa.wire import (
    CRC_FIELD,
    FRAME_HEADER,
    REPLY_KEY,
    REQUEST_KEY,
    ULPDU_LENGTH,
    EnhancedData,
    FrameFlags,
    Revision,
    RtrFlags,
    pad_length,
)
from iwarp.rdmap.wire import (
    OPCODE_QUEUE,
    RDMAP_VERSION,
    RdmapOpcode,
    ReadRequest,
    TerminateHeader,
    rdmap_control,
)

__all__ = [
    "Segment",
    "fpdu",
    "frame",
    "read_request",
    "read_response",
    "reply",
    "request",
    "send",
    "terminate",
    "write",
]


def frame(
    *,
    key: bytes = REQUEST_KEY,
    flags: int = FrameFlags.CRC | FrameFlags.ENHANCED,
    revision: int = Revision.REV2,
    private_data: bytes = b"",
    enhanced: EnhancedData | None = None,
    pd_length: int | None = None,
) -> bytes:
    """A startup frame (RFC 5044 §7.1.1): key, flags, Rev, PD_Length, private data.

    ``enhanced`` is put in front of the private data (RFC 6581 §9);
    ``pd_length`` overrides the length field (a lie about the data that follows).
    """
    data = (enhanced.pack() if enhanced is not None else b"") + private_data
    length = len(data) if pd_length is None else pd_length
    return FRAME_HEADER.pack(key, flags & 0xFF, revision & 0xFF, length & 0xFFFF) + data


DEFAULT_ENHANCED = EnhancedData(ird=16, ord=16)


def request(
    *,
    revision: int = Revision.REV2,
    flags: int | None = None,
    enhanced: EnhancedData | None = DEFAULT_ENHANCED,
    private_data: bytes = b"",
    key: bytes = REQUEST_KEY,
    pd_length: int | None = None,
) -> bytes:
    """An MPA Request; Rev 2 frames carry the S bit and ``enhanced`` unless told otherwise."""
    if revision < Revision.REV2:
        enhanced = None
    if flags is None:
        flags = FrameFlags.CRC | (FrameFlags.ENHANCED if enhanced is not None else 0)
    return frame(
        key=key,
        flags=flags,
        revision=revision,
        private_data=private_data,
        enhanced=enhanced,
        pd_length=pd_length,
    )


def reply(
    *,
    revision: int = Revision.REV2,
    flags: int | None = None,
    enhanced: EnhancedData | None = DEFAULT_ENHANCED,
    private_data: bytes = b"",
    key: bytes = REPLY_KEY,
    pd_length: int | None = None,
) -> bytes:
    """An MPA Reply (same fields as :func:`request`, the Reply key)."""
    return request(
        revision=revision,
        flags=flags,
        enhanced=enhanced,
        private_data=private_data,
        key=key,
        pd_length=pd_length,
    )


def fpdu(
    ulpdu: bytes,
    *,
    crc: bool = True,
    corrupt_crc: bool = False,
    pad: bytes | None = None,
    length: int | None = None,
) -> bytes:
    """An FPDU without markers (RFC 5044 §4.1): length, ULPDU, PAD, CRC.

    ``pad`` replaces the zero PAD octets (same count), ``length`` the
    ULPDU_Length field, ``corrupt_crc`` flips one bit of a correct CRC.
    With ``crc`` off the CRC field is zero.
    """
    count = pad_length(len(ulpdu))
    pad_octets = bytes(count) if pad is None else pad[:count].ljust(count, b"\0")
    head = ULPDU_LENGTH.pack((len(ulpdu) if length is None else length) & 0xFFFF)
    body = head + ulpdu + pad_octets
    value = crc32c(body) if crc else 0
    if corrupt_crc:
        value ^= 0x00000100
    return body + CRC_FIELD.pack(value)


@dataclass(frozen=True, slots=True)
class Segment:
    """A DDP segment: its header (what a Terminate copies back) and all its octets."""

    header: bytes
    octets: bytes

    def __len__(self) -> int:
        return len(self.octets)


def send(
    payload: bytes = b"",
    *,
    msn: int = 1,
    qn: int | None = None,
    mo: int = 0,
    last: bool = True,
    opcode: int = RdmapOpcode.SEND,
    rdmap_version: int = RDMAP_VERSION,
    ddp_version: int = DDP_VERSION,
    invalidate: int = 0,
    tagged_flag: bool = False,
) -> Segment:
    """An untagged DDP segment carrying an RDMAP message (Send by default).

    ``qn`` defaults to the opcode's queue (RFC 5040 §4.1); ``tagged_flag``
    sets T on an untagged header (a malformed segment).
    """
    queue = OPCODE_QUEUE.get(opcode, 0) if qn is None else qn
    header = UntaggedHeader(
        qn=queue,
        msn=msn,
        mo=mo,
        last=last,
        rsvdulp=rdmap_control(opcode, rdmap_version),
        rsvdulp2=invalidate,
        version=ddp_version,
    ).pack()
    if tagged_flag:
        header = bytes([header[0] | 0x80]) + header[1:]
    return Segment(header, header + payload)


def write(
    stag: int,
    to: int,
    payload: bytes = b"",
    *,
    last: bool = True,
    opcode: int = RdmapOpcode.RDMA_WRITE,
    rdmap_version: int = RDMAP_VERSION,
    ddp_version: int = DDP_VERSION,
) -> Segment:
    """A tagged DDP segment (RDMA Write by default) placing ``payload`` at (STag, TO)."""
    header = TaggedHeader(
        stag=stag,
        to=to,
        last=last,
        rsvdulp=rdmap_control(opcode, rdmap_version),
        version=ddp_version,
    ).pack()
    return Segment(header, header + payload)


def read_response(stag: int, to: int, payload: bytes = b"", *, last: bool = True) -> Segment:
    return write(stag, to, payload, last=last, opcode=RdmapOpcode.RDMA_READ_RESPONSE)


def read_request(
    request: ReadRequest, *, msn: int = 1, mo: int = 0, rdmap_version: int = RDMAP_VERSION
) -> tuple[Segment, bytes]:
    """An RDMA Read Request (RFC 5040 §4.4); also returns its 28-octet RDMA header."""
    rdma = request.pack()
    seg = send(
        rdma, msn=msn, mo=mo, opcode=RdmapOpcode.RDMA_READ_REQUEST, rdmap_version=rdmap_version
    )
    return seg, rdma


def terminate(header: TerminateHeader, *, msn: int = 1) -> Segment:
    """A Terminate message (RFC 5040 §4.8) on queue 2."""
    return send(header.pack(), msn=msn, opcode=RdmapOpcode.TERMINATE)


RTR_NAMES = {RtrFlags.SEND: "send", RtrFlags.WRITE: "write", RtrFlags.READ: "read"}
