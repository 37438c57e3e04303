"""The analyzer: from TCP segments to per-connection reports.

For each TCP connection both directions are reassembled, MPA is found by
its Request/Reply keys (RFC 5044 §7.1) and the negotiated markers and CRC
are applied to each direction: markers in FPDUs sent *to* the side that set
M, CRC in both directions if either side set C. Streams whose start was
not captured are framed from ``--mpa-start`` or found by markers and CRCs.
Connections that open with a VI/TCP ConnectRequest are decoded as VI/TCP.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from iwarp.analyze.capture import CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.mpa import (
    Framing,
    find_frame,
    find_start,
    guess_framing,
    read_frame,
    walk_fpdus,
)
from iwarp.analyze.negotiation import check_reply, check_rtr
from iwarp.analyze.records import (
    ErrorRecord,
    FpduRecord,
    FrameRecord,
    NoteRecord,
    Record,
    ViSegmentRecord,
)
from iwarp.analyze.replay import ReceiverReplay, replay_receiver
from iwarp.analyze.tcp import ByteStream, Connection, HalfConnection, track_connections
from iwarp.analyze.vitcp import agreed_crc, looks_like_vitcp, walk_segments
from iwarp.mpa.wire import REPLY_KEY, REQUEST_KEY, MpaFrame, Revision

__all__ = ["Analysis", "ConnectionReport", "DirectionSummary", "Options", "analyze_file"]

INITIATOR = "initiator"
RESPONDER = "responder"


@dataclass(frozen=True, slots=True)
class Options:
    """What the user tells the analyzer about streams it cannot see the start of."""

    #: TCP sequence numbers where MPA full operation starts; each applies to
    #: the direction whose captured octets it falls in.
    mpa_start: tuple[int, ...] = ()
    #: Markers / CRC when no frame says (None: find out).
    markers: bool | None = None
    crc: bool | None = None
    #: Look for FPDUs by markers and CRCs in connections without MPA frames.
    resync: bool = False
    #: The ULPDUs are DDP segments; False for MPA carrying anything else.
    ddp: bool = True


@dataclass
class DirectionSummary:
    """What one side of a connection sent."""

    direction: str
    sender: str
    octets: int
    protocol: str | None = None
    framing: Framing | None = None
    start_seq: int | None = None
    fpdus: int = 0
    ulpdu_octets: int = 0
    segments: int = 0
    messages: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    gaps: int = 0
    retransmissions: int = 0
    out_of_order: int = 0
    #: The out-of-order receiver's view of this direction (MPA start known).
    receiver: ReceiverReplay | None = None


@dataclass
class ConnectionReport:
    """Everything found in one TCP connection."""

    index: int
    client: str
    server: str
    protocol: str | None
    request: MpaFrame | None
    reply: MpaFrame | None
    records: list[Record]
    directions: list[DirectionSummary]

    @property
    def errors(self) -> list[ErrorRecord]:
        return [r for r in self.records if isinstance(r, ErrorRecord)]


@dataclass
class Analysis:
    """The analysis of one capture file."""

    connections: list[ConnectionReport]
    stats: CaptureStats

    def records(self) -> Iterator[Record]:
        for connection in self.connections:
            yield from connection.records

    @property
    def error_count(self) -> int:
        return sum(len(c.errors) for c in self.connections)


def analyze_file(path: str, options: Options | None = None) -> Analysis:
    """Read and analyze a pcap or pcapng file."""
    stats = CaptureStats()
    with open(path, "rb") as f:
        packets = list(read_tcp_packets(f, stats))
    return Analysis(analyze_packets(packets, options or Options()), stats)


def analyze_packets(packets: Iterable[TcpPacket], options: Options) -> list[ConnectionReport]:
    """Analyze TCP segments (in capture order), one report per connection."""
    return [_analyze(connection, options) for connection in track_connections(packets)]


# -- one connection ----------------------------------------------------------------


@dataclass
class _Side:
    half: HalfConnection
    stream: ByteStream
    direction: str
    summary: DirectionSummary
    summary_index: int
    records: list[Record] = field(default_factory=list)
    #: Offset just past this side's MPA frame: where its FPDUs begin.
    start: int | None = None

    @property
    def where(self) -> tuple[int, str]:
        return self.summary_index, self.direction


def _analyze(connection: Connection, options: Options) -> ConnectionReport:
    halves = (connection.client, connection.server)
    streams = [half.reassemble() for half in halves]
    # A stream that opens with a VI/TCP ConnectRequest is VI/TCP, whatever
    # its payloads say later (an MPA key in a Send must not make it MPA).
    vitcp = not options.mpa_start and any(looks_like_vitcp(s) for s in streams)
    request_at = [None if vitcp else find_frame(s, REQUEST_KEY) for s in streams]
    # The Initiator sends the Request; without one, the TCP client is named so.
    first = 1 if request_at[0] is None and request_at[1] is not None else 0
    sides = []
    for i, direction in ((first, INITIATOR), (1 - first, RESPONDER)):
        half, stream = halves[i], streams[i]
        summary = DirectionSummary(
            direction,
            half.name.split(" -> ")[0],
            octets=sum(hi - lo for lo, hi in stream.runs),
            gaps=len(stream.gaps),
            retransmissions=stream.retransmissions,
            out_of_order=stream.out_of_order,
        )
        sides.append(_Side(half, stream, direction, summary, connection.index))
    initiator, responder = sides
    for side in sides:
        for frame, offset, length in side.stream.conflicts:
            side.records.append(
                ErrorRecord(
                    connection.index,
                    side.direction,
                    side.stream.seq(offset),
                    frame,
                    None,
                    "tcp",
                    f"{length} retransmitted octets differ from the first copy",
                )
            )

    request_record = None if vitcp else _read_frame(initiator, REQUEST_KEY)
    reply_record = None if vitcp else _read_frame(responder, REPLY_KEY)
    request = request_record.mpa if request_record is not None else None
    reply = reply_record.mpa if reply_record is not None else None
    protocol = "mpa" if request_record is not None or reply_record is not None else None
    starts = {side.direction: side.start for side in sides if side.start is not None}
    for seq in options.mpa_start:
        for side in sides:
            offset = side.stream.offset_of(seq)
            if 0 <= offset <= side.stream.end:
                starts[side.direction] = offset
                protocol = "mpa"

    if vitcp:
        protocol = "vitcp"
        if not looks_like_vitcp(initiator.stream):
            initiator, responder = responder, initiator
            initiator.direction, responder.direction = INITIATOR, RESPONDER
            initiator.summary.direction, responder.summary.direction = INITIATOR, RESPONDER
        trailer = agreed_crc(responder.stream)
        for side in (initiator, responder):
            side.summary.protocol = "vitcp"
            side.records += walk_segments(side.stream, where=side.where, trailer=trailer)
    elif (protocol is not None or options.resync) and not (reply is not None and reply.reject):
        for side, peer_frame in ((initiator, reply), (responder, request)):
            found = _framing(side, starts.get(side.direction), request, reply, peer_frame, options)
            if found is not None:
                protocol = "mpa"
                _decode_mpa(side, *found, options)

    if request_record is not None and reply_record is not None:
        _check_negotiation(initiator, responder, request_record, reply_record, options)
    for side in sides:
        _summarize(side)
    # Each direction stays in stream order; the two are interleaved by frame.
    records = list(heapq.merge(*(side.records for side in sides), key=_frame_order))
    return ConnectionReport(
        connection.index,
        connection.client.name.split(" -> ")[0],
        connection.server.name.split(" -> ")[0],
        protocol,
        request,
        reply,
        records,
        [s.summary for s in sides],
    )


def _read_frame(side: _Side, key: bytes) -> FrameRecord | None:
    """Find and decode the Request or Reply a side sent; note where MPA starts."""
    offset = find_frame(side.stream, key)
    if offset is None:
        return None
    record, side.start, extra = read_frame(side.stream, offset, where=side.where)
    side.records += [r for r in (record, *extra) if r is not None]
    return record


def _decode_mpa(side: _Side, framing: Framing, start: int, options: Options) -> None:
    """Walk one direction's FPDUs; replay it through the receiver if its start is known."""
    framing = replace(framing, ddp=options.ddp)
    side.summary.protocol = "mpa"
    side.summary.framing = framing
    side.summary.start_seq = side.stream.seq(start)
    side.records += walk_fpdus(side.stream, start, framing, where=side.where)
    if start == framing.origin:  # the MPA start is known, not guessed
        side.summary.receiver = replay_receiver(
            side.half.packets, side.stream.seq(start), markers=framing.markers, crc=framing.crc
        )


def _framing(
    side: _Side,
    start: int | None,
    request: MpaFrame | None,
    reply: MpaFrame | None,
    peer_frame: MpaFrame | None,
    options: Options,
) -> tuple[Framing, int] | None:
    """The framing of one direction and the offset of its first FPDU."""
    # RFC 5044 §7.1.1: M asks for markers in FPDUs sent *to* the frame's
    # sender; C=1 on either side means CRCs both ways.
    markers = peer_frame.markers if peer_frame is not None else options.markers
    crc: bool | None = options.crc
    if request is not None and reply is not None:
        crc = request.crc or reply.crc
    elif (request is not None and request.crc) or (reply is not None and reply.crc):
        crc = True
    rdmac = any(f is not None and f.revision == Revision.REV0 for f in (request, reply))
    stream = side.stream
    if start is not None:
        if start >= stream.end:
            return None
        if markers is not None and crc is not None:
            return Framing(start, markers, crc, rdmac), start
        guessed = guess_framing(stream, start, markers=markers, crc=crc)
        if guessed is None:
            side.records.append(
                NoteRecord(
                    side.summary_index,
                    side.direction,
                    stream.seq(start),
                    stream.frame_at(start),
                    "cannot tell whether markers and CRCs are used; give --markers/--crc",
                )
            )
            return None
        return Framing(start, guessed.markers, guessed.crc, rdmac), start
    found = find_start(stream, markers=markers, crc=crc)
    if found is None:
        return None
    framing, first = found
    side.records.append(
        NoteRecord(
            side.summary_index,
            side.direction,
            stream.seq(first),
            stream.frame_at(first),
            "MPA start not captured; first FPDU found by "
            + ("markers" if framing.markers else "CRCs"),
        )
    )
    return Framing(framing.origin, framing.markers, framing.crc, rdmac), first


def _check_negotiation(
    initiator: _Side,
    responder: _Side,
    request: FrameRecord,
    reply: FrameRecord,
    options: Options,
) -> None:
    """RFC 6581 rules between the frames, and on the Initiator's first FPDU."""
    for code, message in check_reply(request.mpa, reply.mpa):
        responder.records.append(
            ErrorRecord(reply.stream, RESPONDER, reply.seq, reply.frame, code, "mpa", message)
        )
    first = next((r for r in initiator.records if isinstance(r, FpduRecord)), None)
    if first is None or not options.ddp:  # an RTR is a DDP message
        return
    problem = check_rtr(reply.mpa, first)
    if problem is not None:
        code, message = problem
        initiator.records.insert(
            initiator.records.index(first) + 1,
            ErrorRecord(first.stream, INITIATOR, first.seq, first.frame, code, "mpa", message),
        )


def _frame_order(record: Record) -> int:
    return record.frame if record.frame is not None else 1 << 62


def _summarize(side: _Side) -> None:
    summary = side.summary
    for record in side.records:
        if isinstance(record, FpduRecord):
            summary.fpdus += 1
            summary.ulpdu_octets += record.ulpdu_length
            summary.messages[str(record.ulp.get("opcode_name", "ULPDU"))] += 1
        elif isinstance(record, ViSegmentRecord):
            summary.segments += 1
            summary.messages[str(record.fields.get("segment_type", "?"))] += 1
        elif isinstance(record, ErrorRecord):
            summary.errors += 1
