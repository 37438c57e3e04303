"""Builders of MPA traffic for analyzer tests: frames, ULPDUs and captures.

Everything on the wire is produced by the project's own encoders
(:class:`~iwarp.mpa.framing.FpduEncoder`, the DDP/RDMAP wire formats) and
written by :class:`~iwarp.analyze.synth.TcpCapture`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import EnhancedData, FrameFlags, MpaFrame, Revision
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest, rdmap_control

C2S, S2C = Direction.C2S, Direction.S2C


def send(msn: int, payload: bytes, *, opcode: int = RdmapOpcode.SEND, last: bool = True) -> bytes:
    header = UntaggedHeader(qn=0, msn=msn, mo=0, last=last, rsvdulp=rdmap_control(opcode))
    return header.pack() + payload


def write(stag: int, to: int, payload: bytes, *, last: bool = True) -> bytes:
    header = TaggedHeader(
        stag=stag, to=to, last=last, rsvdulp=rdmap_control(RdmapOpcode.RDMA_WRITE)
    )
    return header.pack() + payload


def read_request(msn: int, size: int) -> bytes:
    header = UntaggedHeader(qn=1, msn=msn, rsvdulp=rdmap_control(RdmapOpcode.RDMA_READ_REQUEST))
    body = ReadRequest(sink_stag=0x1234, sink_to=0x10, size=size, src_stag=0x5678, src_to=0x20)
    return header.pack() + body.pack()


def read_response(stag: int, to: int, payload: bytes) -> bytes:
    header = TaggedHeader(
        stag=stag, to=to, last=True, rsvdulp=rdmap_control(RdmapOpcode.RDMA_READ_RESPONSE)
    )
    return header.pack() + payload


def frame(
    request: bool,
    *,
    markers: bool = False,
    crc: bool = True,
    rev: int = Revision.REV1,
    reject: bool = False,
    enhanced: EnhancedData | None = None,
    private: bytes = b"",
) -> MpaFrame:
    flags = FrameFlags(0)
    if markers:
        flags |= FrameFlags.MARKERS
    if crc:
        flags |= FrameFlags.CRC
    if reject:
        flags |= FrameFlags.REJECT
    data = private
    if enhanced is not None:
        flags |= FrameFlags.ENHANCED
        data = enhanced.pack() + private
    return MpaFrame(is_request=request, flags=flags, revision=rev, private_data=data)


def payload(n: int, tag: int) -> bytes:
    return bytes((tag * 31 + i) & 0xFF for i in range(n))


#: How a direction's FPDU stream is cut into TCP segments.
Cutter = Callable[[list[bytes]], list[bytes]]


def aligned(fpdus: list[bytes]) -> list[bytes]:
    """One FPDU per segment (an MPA-aware sender, seed 000 §5.3)."""
    return fpdus


def coalesced(per: int) -> Cutter:
    """``per`` FPDUs packed into each segment."""
    return lambda fpdus: [b"".join(fpdus[i : i + per]) for i in range(0, len(fpdus), per)]


def resegmented(sizes: list[int]) -> Cutter:
    """The stream cut anywhere, as a re-segmenting middle box does (§5.4.1)."""

    def cut(fpdus: list[bytes]) -> list[bytes]:
        data = b"".join(fpdus)
        out, pos, turn = [], 0, 0
        while pos < len(data):
            step = sizes[turn % len(sizes)]
            out.append(data[pos : pos + step])
            pos += step
            turn += 1
        return out

    return cut


@dataclass
class Conversation:
    """An MPA connection: frames, then ULPDUs each way, as sent."""

    request: MpaFrame
    reply: MpaFrame
    i2r: list[bytes] = field(default_factory=list)
    r2i: list[bytes] = field(default_factory=list)

    @property
    def crc(self) -> bool:
        return self.request.crc or self.reply.crc

    def capture(
        self,
        cut: Cutter = aligned,
        *,
        client: tuple[str, int] = ("127.0.0.1", 50000),
        server: tuple[str, int] = ("127.0.0.1", 4000),
        client_isn: int = 0x1000,
        server_isn: int = 0x8000,
        mutate: Callable[[str, list[bytes]], list[bytes]] | None = None,
    ) -> tuple[TcpCapture, dict[str, list[int]]]:
        """The connection as a capture; also the sequence numbers of each FPDU."""
        cap = TcpCapture(client=client, server=server, client_isn=client_isn, server_isn=server_isn)
        cap.send(C2S, self.request.pack())
        cap.send(S2C, self.reply.pack())
        seqs: dict[str, list[int]] = {}
        streams = {}
        for name, direction, ulpdus, markers in (
            ("initiator", C2S, self.i2r, self.reply.markers),
            ("responder", S2C, self.r2i, self.request.markers),
        ):
            origin = cap.seq(direction)
            encoder = FpduEncoder(markers=markers, crc=self.crc, origin=origin)
            fpdus, positions = [], []
            for ulpdu in ulpdus:
                positions.append(encoder.position)
                fpdus.append(encoder.encode_bytes(ulpdu))
            seqs[name] = positions
            pieces = cut(fpdus)
            if mutate is not None:
                pieces = mutate(name, pieces)
            streams[direction] = pieces
        # Initiator first (its first FPDU is what the Responder waits for).
        for piece in streams[C2S]:
            cap.send(C2S, piece)
        for piece in streams[S2C]:
            cap.send(S2C, piece)
        cap.close()
        return cap, seqs


def standard(markers_i2r: bool, markers_r2i: bool, *, crc: bool = True) -> Conversation:
    """A Request/Reply and a mix of Sends, Writes and a Read each way."""
    conv = Conversation(
        frame(True, markers=markers_r2i, crc=crc, private=b"hello"),
        frame(False, markers=markers_i2r, crc=crc, private=b"welcome"),
    )
    conv.i2r = [
        send(1, payload(100, 1)),
        write(0xABCD, 0x1000, payload(700, 2)),
        send(2, payload(3, 3)),
        read_request(1, 4096),
        send(3, payload(1300, 4)),
        write(0xABCD, 0x2000, payload(0, 5)),
    ]
    conv.r2i = [
        read_response(0x1234, 0x10, payload(900, 6)),
        send(1, payload(51, 7)),
        send(2, payload(2, 8), opcode=RdmapOpcode.SEND_WITH_SE),
    ]
    return conv


def pcap_records(data: bytes) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """Split a classic pcap into its header and (seconds, micros, frame) records."""
    header, pos, out = data[:24], 24, []
    while pos < len(data):
        sec, usec, caplen, _ = struct.unpack_from("<IIII", data, pos)
        out.append((sec, usec, data[pos + 16 : pos + 16 + caplen]))
        pos += 16 + caplen
    return header, out


def drop_segments(classic: bytes, *, port: int, seqs: set[int]) -> bytes:
    """The capture without the data segments sent from ``port`` at ``seqs`` (IPv4)."""
    header, records = pcap_records(classic)
    out = header
    for sec, usec, data in records:
        sport, _, seq = struct.unpack_from("!HHI", data, 34)
        has_payload = len(data) > 54
        if sport == port and seq in seqs and has_payload:
            continue
        out += struct.pack("<IIII", sec, usec, len(data), len(data)) + data
    return out
