"""The analyzer: from TCP segments to records and per-connection reports, streaming.

Segments go in one at a time, in capture order (:class:`StreamAnalyzer`);
records come out as soon as the octets they describe have arrived, and a
:class:`ConnectionReport` when a connection closes (or the capture ends).
Memory follows what is outstanding, never the file: open connections,
octets waiting past a hole, and the FPDU being assembled; every holding
has a limit (:class:`~iwarp.analyze.tcp.Limits`), and a note record says
what was given up past it.

Per connection: both directions are reassembled; while the protocol is
not known, each direction is held (up to ``Limits.probe``) until MPA is
found by its Request/Reply keys (RFC 5044 §7.1), or VI/TCP by its
ConnectRequest, or neither. Then the negotiated markers and CRC are
applied to each direction: markers in FPDUs sent *to* the side that set
M, CRC in both directions if either side set C. Streams whose start was
not captured are framed from ``--mpa-start`` or found by markers and CRCs.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Final, TypeAlias

from iwarp.analyze.atomics import AtomicMatcher, Mismatch
from iwarp.analyze.capture import TCP_FIN, TCP_RST, TCP_SYN, CaptureStats, TcpPacket
from iwarp.analyze.mpa import (
    FRAME_SEARCH,
    LOOKAHEAD,
    FpduWalker,
    Framing,
    find_start,
    guess_framing,
    read_frame,
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
from iwarp.analyze.replay import ReceiverReplay, ReplayFeed
from iwarp.analyze.stats import DirectionStats, Terminate
from iwarp.analyze.tcp import Limits, Reassembler, StreamWindow, signed
from iwarp.analyze.vitcp import ViWalker, agreed_crc, looks_like_vitcp
from iwarp.mpa.wire import FRAME_HEADER_SIZE, REPLY_KEY, REQUEST_KEY, MpaFrame, Revision
from iwarp.rdmap.wire import RdmapOpcode
from iwarp.vitcp.wire import HEADER_SIZE as VI_HEADER_SIZE

__all__ = [
    "Analysis",
    "ConnectionReport",
    "DirectionSummary",
    "Options",
    "Output",
    "StreamAnalyzer",
    "analyze_file",
    "analyze_packets",
    "analyze_stream",
]

INITIATOR = "initiator"
RESPONDER = "responder"
_TCP_ACK: Final = 0x10
_SYN_FIN_RST: Final = TCP_SYN | TCP_FIN | TCP_RST
#: Errors and notes a report keeps for the readable summary (all are counted).
KEPT_RECORDS: Final = 50
#: Connections remembered after they closed, so that their last segments
#: (the final ACK, late retransmissions) are not taken for new connections.
CLOSED_REMEMBERED: Final = 65536
#: Capture seconds a connection whose both FINs arrived stays open for late
#: retransmissions before it is reported.
LINGER: Final = 1.0


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
    #: Replay each MPA direction through the out-of-order receiver too.
    receiver: bool = True


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
    gap_octets: int = 0
    retransmissions: int = 0
    out_of_order: int = 0
    #: Retransmitted octets no longer held when they came (not compared).
    unchecked_octets: int = 0
    #: The out-of-order receiver's view of this direction (MPA start known).
    receiver: ReceiverReplay | None = None
    stats: DirectionStats | None = None


@dataclass
class ConnectionReport:
    """Everything found in one TCP connection."""

    index: int
    client: str
    server: str
    protocol: str | None
    request: MpaFrame | None
    reply: MpaFrame | None
    directions: list[DirectionSummary]
    error_count: int = 0
    note_count: int = 0
    #: The first errors and notes (all of them in :attr:`records` when collected).
    kept_errors: list[ErrorRecord] = field(default_factory=list)
    kept_notes: list[NoteRecord] = field(default_factory=list)
    #: Every record, in frame order; only when the analysis collects them.
    records: list[Record] = field(default_factory=list)
    #: Capture time of the first segment, the SYN, MPA full operation and the last segment.
    first_time: float = 0.0
    syn_time: float | None = None
    mpa_time: float | None = None
    last_time: float = 0.0

    @property
    def errors(self) -> list[ErrorRecord]:
        if self.records:
            return [r for r in self.records if isinstance(r, ErrorRecord)]
        return self.kept_errors

    @property
    def setup_seconds(self) -> float | None:
        """Time from the TCP SYN to MPA full operation (the Reply captured)."""
        if self.syn_time is None or self.mpa_time is None:
            return None
        return self.mpa_time - self.syn_time


Output: TypeAlias = Record | ConnectionReport


@dataclass
class Analysis:
    """The analysis of one capture, every record collected (small captures, tests)."""

    connections: list[ConnectionReport]
    stats: CaptureStats

    def records(self) -> Iterator[Record]:
        for connection in self.connections:
            yield from connection.records

    @property
    def error_count(self) -> int:
        return sum(c.error_count for c in self.connections)


def analyze_file(path: str, options: Options | None = None) -> Analysis:
    """Read and analyze a capture (pcap or pcapng, possibly compressed; ``-``
    for standard input), every record collected."""
    from iwarp.analyze.source import open_capture

    stats = CaptureStats()
    with open_capture(path) as f:
        from iwarp.analyze.capture import read_tcp_packets

        reports = analyze_packets(read_tcp_packets(f, stats), options or Options())
    return Analysis(reports, stats)


def analyze_packets(
    packets: Iterable[TcpPacket], options: Options, limits: Limits | None = None
) -> list[ConnectionReport]:
    """Analyze TCP segments (in capture order), one report per connection,
    every record collected in it."""
    reports = [
        out
        for out in analyze_stream(packets, options, limits, collect=True)
        if isinstance(out, ConnectionReport)
    ]
    return sorted(reports, key=lambda r: r.index)


def analyze_stream(
    packets: Iterable[TcpPacket],
    options: Options,
    limits: Limits | None = None,
    *,
    collect: bool = False,
) -> Iterator[Output]:
    """Records and connection reports as the segments go by."""
    analyzer = StreamAnalyzer(options, limits, collect=collect)
    out = analyzer.out
    for packet in packets:
        analyzer.feed(packet)
        if out:
            yield from out
            out.clear()
    analyzer.finish()
    yield from out
    out.clear()


# -- the analyzer -------------------------------------------------------------------

_Key: TypeAlias = tuple[str, int, str, int]


class StreamAnalyzer:
    """Takes TCP segments in capture order; appends records and reports to :attr:`out`."""

    def __init__(
        self, options: Options, limits: Limits | None = None, *, collect: bool = False
    ) -> None:
        self.options = options
        self.limits = limits or Limits()
        self.collect = collect
        self.out: list[Output] = []
        #: Connections so far (the next one's ``tcp.stream`` number).
        self.count = 0
        self._live: dict[_Key, tuple[_Connection, int]] = {}
        self._closed: OrderedDict[_Key, int] = OrderedDict()
        self._open = 0
        #: Connections closed by FIN both ways, waiting out LINGER: ``(time,
        #: position, connection)``.
        self._lingering: deque[tuple[float, int, _Connection]] = deque()
        #: Segments of the capture so far (:meth:`feed` and :meth:`tick`).
        self.position = 0
        #: Segments of connections already reported (late ACKs, retransmissions).
        self.late_segments = 0
        self.evicted = 0
        self._segments = 0

    def feed(self, packet: TcpPacket) -> None:
        """The next segment of the capture."""
        self.position += 1
        key = (packet.src, packet.sport, packet.dst, packet.dport)
        found = self._live.get(key)
        flags = packet.flags
        if found is not None and not packet.payload and not flags & _SYN_FIN_RST:
            # A pure ACK of a connection already open (a third of a bulk
            # transfer's segments): nothing to start, decode or close.
            connection = found[0]
            connection.now = connection.last_time = packet.time
        else:
            is_open = flags & TCP_SYN and not flags & _TCP_ACK
            if found is not None and is_open:
                connection, side = found
                half = connection.dirs[side]
                # A new SYN from the client of a closed (or closing) connection,
                # or a SYN from its server, starts a new connection (port reuse).
                if side != 0 or (half.isn != packet.seq and half.fin is not None):
                    self._close(connection)
                    found = None
            if found is None:
                if not is_open and key in self._closed:
                    # Of a connection already reported: only the clock moves.
                    self.late_segments += 1
                    if self._lingering:
                        self.expire(packet.time)
                    return
                found = self._start(packet, key)
            connection, side = found
            connection.on_segment(connection.dirs[side], packet)
        self._segments += 1
        if not self._segments & 4095:
            self._check_total()
        if connection.reset:
            self._close(connection)
        elif connection.closing and not connection.lingering:
            connection.lingering = True
            self._lingering.append((packet.time, self.position, connection))
        if self._lingering:
            self.expire(packet.time)

    def tick(self, time: float) -> None:
        """The next segment of the capture belongs to a connection another
        analyzer decodes (``iwarp decode --jobs N``, split by connection):
        only the clock moves, closing connections whose linger ran out as
        :meth:`feed` would."""
        self.position += 1
        if self._lingering:
            self.expire(time)

    def expire(self, time: float) -> None:
        """Report the connections closed both ways whose linger ran out at capture time ``time``."""
        lingering = self._lingering
        while lingering and (lingering[0][2].closed or time - lingering[0][0] > LINGER):
            _, position, connection = lingering.popleft()
            self._close_lingered(position, connection)

    def _close_lingered(self, position: int, connection: _Connection) -> None:
        """Report a connection whose linger ran out; ``position``: the
        segment that closed its second half (the order they expire in)."""
        self._close(connection)

    def _check_total(self) -> None:
        """Past ``Limits.total`` octets held in all connections together, the
        largest holders give up their holes or decide at once."""
        connections = {c for c, _ in self._live.values()}
        held = sorted(((c.held(), c) for c in connections), key=lambda pair: pair[0], reverse=True)
        total = sum(h for h, _ in held)
        for amount, connection in held:
            if total <= self.limits.total * 3 // 4:
                break
            connection.shed(f"more than {self.limits.total} octets held in all connections")
            total -= amount - connection.held()

    def finish(self) -> None:
        """The end of the capture: every open connection is reported."""
        for connection in sorted({c for c, _ in self._live.values()}, key=lambda c: c.index):
            self._close_at_end(connection)

    def _close_at_end(self, connection: _Connection) -> None:
        """Report a connection still open at the end of the capture."""
        self._close(connection)

    def _start(self, packet: TcpPacket, key: _Key) -> tuple[_Connection, int]:
        if self._open >= self.limits.open_connections:
            self._evict()
        back = (packet.dst, packet.dport, packet.src, packet.sport)
        connection = _Connection(self, self.count, packet)
        self.count += 1
        self._open += 1
        self._closed.pop(key, None)
        self._closed.pop(back, None)
        self._live[key] = (connection, 0)
        self._live[back] = (connection, 1)
        return connection, 0

    def _evict(self) -> None:
        """Close the least recently active tenth of the open connections."""
        connections = sorted({c for c, _ in self._live.values()}, key=lambda c: c.last_time)
        for connection in connections[: max(1, len(connections) // 10)]:
            self.evicted += 1
            connection.note(
                connection.dirs[0],
                f"more than {self.limits.open_connections} connections open at once: this "
                "one, the least recently active, is reported now; its later segments, if "
                "any, start a new connection",
            )
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if connection.closed:
            return
        connection.close()
        self._open -= 1
        for d in connection.dirs:
            key = (d.src, d.sport, d.dst, d.dport)
            if self._live.get(key, (None,))[0] is connection:
                del self._live[key]
                self._closed[key] = connection.index
        while len(self._closed) > CLOSED_REMEMBERED:
            self._closed.popitem(last=False)

    def emit(self, output: Output) -> None:
        self.out.append(output)


# -- one connection -----------------------------------------------------------------

_PROBE, _FRAMING, _WALK, _SKIP = range(4)
_UNDECIDED: Final = -1


class _Direction:
    """One direction of a connection: what its sender sent."""

    def __init__(self, src: str, sport: int, dst: str, dport: int, origin: float) -> None:
        self.src, self.sport, self.dst, self.dport = src, sport, dst, dport
        self.isn: int | None = None
        self.fin: int | None = None
        self.window: StreamWindow | None = None
        self.reasm: Reassembler | None = None
        self.role = ""
        self.mode = _PROBE
        self.walker: FpduWalker | ViWalker | None = None
        #: Offset just past this side's MPA frame, or an --mpa-start.
        self.start: int | None = None
        self.framing_args: tuple[MpaFrame | None, MpaFrame | None, MpaFrame | None] = (
            None,
            None,
            None,
        )
        #: Segments kept for the receiver replay until the framing is known.
        self.retained: list[tuple[int, bytes]] | None = []
        self.replay: ReplayFeed | None = None
        self.summary = DirectionSummary("", _host_port(src, sport), 0)
        self.stats = DirectionStats(origin)
        self.records: list[Record] = []

    @property
    def sender(self) -> str:
        return _host_port(self.src, self.sport)

    @property
    def final(self) -> bool:
        return self.window is not None and self.window.final


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class _Connection:
    def __init__(self, owner: StreamAnalyzer, index: int, first: TcpPacket) -> None:
        self.owner = owner
        self.options = owner.options
        self.limits = owner.limits
        self.index = index
        self.dirs = (
            _Direction(first.src, first.sport, first.dst, first.dport, first.time),
            _Direction(first.dst, first.dport, first.src, first.sport, first.time),
        )
        self.dirs[0].role, self.dirs[1].role = INITIATOR, RESPONDER
        self.phase = _PROBE
        self.protocol: str | None = None
        self.request: MpaFrame | None = None
        self.reply: MpaFrame | None = None
        #: The Reply whose RTR rules the Initiator's first FPDU must follow.
        self.rtr_reply: MpaFrame | None = None
        self.vi_trailer: bool | None = None
        self.first_time = self.last_time = first.time
        self.syn_time: float | None = None
        self.mpa_time: float | None = None
        self.now = first.time
        self.closing = False
        self.lingering = False
        self.closed = False
        self.reset = False
        self.error_count = self.note_count = 0
        self.kept_errors: list[ErrorRecord] = []
        self.kept_notes: list[NoteRecord] = []
        #: RFC 7306 Atomic Responses paired with their Requests.
        self.atomics: AtomicMatcher[_Direction] = AtomicMatcher()

    def __hash__(self) -> int:
        return self.index

    # -- segments --------------------------------------------------------------

    def on_segment(self, d: _Direction, packet: TcpPacket) -> None:
        self.now = self.last_time = packet.time
        flags = packet.flags
        payload = packet.payload
        if not payload and not flags & (TCP_SYN | TCP_FIN | TCP_RST):
            return  # a pure ACK: nothing to decode
        if flags & (TCP_SYN | TCP_FIN | TCP_RST):
            if flags & TCP_SYN:
                d.isn = packet.seq
                if self.syn_time is None:
                    self.syn_time = packet.time
            if flags & TCP_RST:
                self.reset = True
        window = d.window
        if window is None:
            if not payload and not flags & (TCP_SYN | TCP_FIN):
                return
            base = (d.isn + 1) & 0xFFFFFFFF if d.isn is not None else packet.seq
            window = d.window = StreamWindow(base, self.limits.history)
            d.reasm = Reassembler(window, self.limits)
        reasm = d.reasm
        assert reasm is not None
        offset = signed(packet.seq - window.base) + (1 if flags & TCP_SYN else 0)
        if flags & TCP_FIN:
            reasm.fin = offset + len(payload)
            d.fin = reasm.fin
        if payload:
            if offset < 0:
                payload = payload[-offset:]
                offset = 0
            if payload:
                before = reasm.delivered
                reasm.add(offset, payload, packet.frame)
                if reasm.delivered > before:
                    d.stats.timeline.add(packet.time, reasm.delivered - before)
                if reasm.conflicts:
                    self._conflicts(d)
                if reasm.given_up:
                    self._given_up(d)
            if d.retained is not None:
                d.retained.append((packet.seq, packet.payload))
            elif d.replay is not None:
                d.replay.feed(packet.seq, packet.payload)
        if self.phase == _PROBE:
            self._advance()
        else:  # only this direction got anything new
            self._advance_direction(d)
        if (self.dirs[0].fin is not None or self.dirs[1].fin is not None) and all(
            x.fin is not None and x.reasm is not None and x.reasm.delivered >= x.fin
            for x in self.dirs
        ):
            self.closing = True

    def held(self) -> int:
        """Octets this connection holds (waiting past holes, or not decoded yet)."""
        return sum(
            d.reasm.pending_octets + d.window.held
            for d in self.dirs
            if d.reasm is not None and d.window is not None
        ) + sum(d.replay.held for d in self.dirs if d.replay is not None)

    def shed(self, why: str) -> None:
        """Hold less: give up holes, decide the protocol now, decode what can be."""
        for d in self.dirs:
            if d.replay is not None:
                d.replay.hand_over()  # the segments the replay gathered
            reasm = d.reasm
            if reasm is not None and reasm.pending:
                lo = reasm.delivered
                skipped = reasm.give_up()
                reasm.given_up.clear()  # noted here, once (not again by _given_up)
                self.note(
                    d,
                    f"{why}: gave up waiting for {skipped} octets from sequence "
                    f"{reasm.window.seq(lo)} (taken as not captured)",
                    offset=lo,
                )
        if self.phase == _PROBE:
            self.note(self.dirs[0], f"{why}: deciding what the connection carries now")
        self._advance(force=self.phase == _PROBE)
        for d in self.dirs:
            if d.retained is not None and len(d.retained) > 64:
                d.retained = None  # no receiver replay for this direction

    def _conflicts(self, d: _Direction) -> None:
        reasm = d.reasm
        window = d.window
        assert reasm is not None and window is not None
        for frame, offset, length in reasm.conflicts:
            self.emit(
                d,
                ErrorRecord(
                    self.index,
                    d.role,
                    window.seq(offset),
                    frame,
                    None,
                    "tcp",
                    f"{length} retransmitted octets differ from the first copy",
                ),
            )
        reasm.conflicts.clear()

    def _given_up(self, d: _Direction) -> None:
        reasm = d.reasm
        window = d.window
        assert reasm is not None and window is not None
        for lo, hi in reasm.given_up:
            self.note(
                d,
                f"reassembly limit: more than {self.limits.reassembly} octets waited past a "
                f"hole; gave up waiting for the {hi - lo} octets from sequence "
                f"{window.seq(lo)} (taken as not captured)",
                offset=lo,
            )
        reasm.given_up.clear()

    # -- deciding what the connection carries ----------------------------------

    def _advance(self, *, force: bool = False) -> None:
        if self.phase == _PROBE and not self._decide(force):
            if not force and any(
                d.window is not None and d.window.held > self.limits.probe for d in self.dirs
            ):
                self._decide(True)
            if self.phase == _PROBE:
                return
        for d in self.dirs:
            self._advance_direction(d)

    def _vi_verdict(self, d: _Direction, force: bool) -> bool | None:
        window = d.window
        if window is None:
            return False if force else None
        if window.read(0, VI_HEADER_SIZE) is not None:
            return looks_like_vitcp(window)
        if window.end >= VI_HEADER_SIZE or window.final or force:
            return False
        return None

    def _key_verdict(self, d: _Direction, key: bytes, force: bool) -> int | None:
        """Offset of the frame with ``key``; None if there is none; -1 while undecided."""
        window = d.window
        if window is None:
            return None if force else _UNDECIDED
        done = window.final or force
        at = window.find(key, FRAME_SEARCH)
        if at >= 0:
            header = window.read(at, FRAME_HEADER_SIZE)
            if header is None:
                return at if done or window.run_end(at) < window.end else _UNDECIDED
            pd_length = int.from_bytes(header[18:20], "big")
            if window.end < at + FRAME_HEADER_SIZE + pd_length and not done:
                return _UNDECIDED
            return at
        if done or window.end >= FRAME_SEARCH:
            return None
        return _UNDECIDED

    def _decide(self, force: bool) -> bool:
        """Find what the connection carries, once enough of it arrived."""
        client, server = self.dirs
        options = self.options
        vitcp = False
        if not options.mpa_start:
            verdicts = [self._vi_verdict(d, force) for d in self.dirs]
            if any(verdicts):
                vitcp = True
            elif None in verdicts:
                return False
        if vitcp:
            initiator = client if self._vi_verdict(client, True) else server
            responder = server if initiator is client else client
            passive = responder.window
            trailer = agreed_crc(passive) if passive is not None else None
            # The segments after the CE exchange carry a trailer if the
            # passive side's ConnectAccept says so: wait for it a little.
            waiting = passive is None or (not passive.final and passive.end < FRAME_SEARCH)
            if trailer is None and not force and waiting:
                return False
            self._assign(initiator, responder)
            self.protocol = "vitcp"
            self.vi_trailer = trailer
            for d in self.dirs:
                d.summary.protocol = "vitcp"
                d.retained = None
                if d.window is not None:
                    d.mode = _WALK
                    d.walker = ViWalker(d.window, where=(self.index, d.role), trailer=trailer)
                else:
                    d.mode = _SKIP
            self._decided()
            return True
        requests = [self._key_verdict(d, REQUEST_KEY, force) for d in self.dirs]
        if requests[0] == _UNDECIDED or (requests[0] is None and requests[1] == _UNDECIDED):
            return False
        # The Initiator sends the Request; without one, the TCP client is named so.
        request_at: int | None
        if requests[0] is None and requests[1] is not None:
            initiator, responder, request_at = server, client, requests[1]
        else:
            initiator, responder, request_at = client, server, requests[0]
        reply_at = self._key_verdict(responder, REPLY_KEY, force)
        if reply_at == _UNDECIDED:
            return False
        self._assign(initiator, responder)
        request_record = self._read_frame(initiator, request_at)
        reply_record = self._read_frame(responder, reply_at)
        request = self.request = request_record.mpa if request_record is not None else None
        reply = self.reply = reply_record.mpa if reply_record is not None else None
        protocol = "mpa" if request is not None or reply is not None else None
        if reply is not None:
            self.mpa_time = self.now
        for seq in options.mpa_start:
            for d in (initiator, responder):
                if d.window is None:
                    continue
                offset = d.window.offset_of(seq)
                if 0 <= offset <= d.window.end:
                    d.start = offset
                    protocol = "mpa"
        self.protocol = protocol
        if request_record is not None and reply_record is not None:
            for code, message in check_reply(request_record.mpa, reply_record.mpa):
                self.emit(
                    responder,
                    ErrorRecord(
                        self.index,
                        RESPONDER,
                        reply_record.seq,
                        reply_record.frame,
                        code,
                        "mpa",
                        message,
                    ),
                )
            if options.ddp:  # an RTR is a DDP message
                self.rtr_reply = reply_record.mpa
        decode = (protocol is not None or options.resync) and not (
            reply is not None and reply.reject
        )
        for d, peer_frame in ((initiator, reply), (responder, request)):
            if decode and d.window is not None:
                d.mode = _FRAMING
                d.framing_args = (request, reply, peer_frame)
            else:
                d.mode = _SKIP
                d.retained = None
        self._decided()
        return True

    def _decided(self) -> None:
        """The roles are known: records held until now go out, Initiator's first."""
        self.phase = _WALK
        if self.owner.collect:
            return
        for d in sorted(self.dirs, key=lambda d: d.role != INITIATOR):
            for record in d.records:
                self.owner.emit(record)
            d.records.clear()

    def _assign(self, initiator: _Direction, responder: _Direction) -> None:
        initiator.role, responder.role = INITIATOR, RESPONDER
        for d in self.dirs:
            for record in d.records:  # records made before the roles were known
                object.__setattr__(record, "direction", d.role)

    def _read_frame(self, d: _Direction, at: int | None) -> FrameRecord | None:
        if at is None or d.window is None:
            return None
        record, d.start, extra = read_frame(d.window, at, where=(self.index, d.role))
        for r in (record, *extra):
            if r is not None:
                self.emit(d, r)
        return record

    # -- decoding each direction -------------------------------------------------

    def _advance_direction(self, d: _Direction) -> None:
        window = d.window
        if window is None:
            return
        if d.mode == _FRAMING:
            self._frame(d)
        if d.mode == _WALK:
            walker = d.walker
            assert walker is not None
            if (
                type(walker) is FpduWalker
                and walker.wait_for > window.end
                and walker.sync is None
                and not window.final
            ):
                return  # inside an FPDU whose end has not come: nothing to walk or drop
            emit = self.emit
            for record in walker.advance():
                emit(d, record)
            window.discard(walker.low_water)
            if walker.done:
                d.mode = _SKIP
        if d.mode == _SKIP:
            window.discard(window.end)

    def _frame(self, d: _Direction) -> None:
        """Markers and CRC of one direction and its first FPDU; start its walk."""
        window = d.window
        assert window is not None
        request, reply, peer_frame = d.framing_args
        options = self.options
        # RFC 5044 §7.1.1: M asks for markers in FPDUs sent *to* the frame's
        # sender; C=1 on either side means CRCs both ways.
        markers = peer_frame.markers if peer_frame is not None else options.markers
        crc: bool | None = options.crc
        if request is not None and reply is not None:
            crc = request.crc or reply.crc
        elif (request is not None and request.crc) or (reply is not None and reply.crc):
            crc = True
        rdmac = any(f is not None and f.revision == Revision.REV0 for f in (request, reply))
        if d.start is not None and d.start >= window.end and not window.final:
            return  # no FPDU yet
        if d.start is None or markers is None or crc is None:
            # To be found out from the FPDUs themselves: wait for enough of them.
            first = d.start if d.start is not None else window.start
            if not window.final and window.end - first < LOOKAHEAD:
                return
        found = self._framing(d, markers, crc, rdmac)
        if found is None:
            d.mode = _SKIP
            d.retained = None
            return
        framing, first = found
        # Rev 0 frames (seed 000), or none at all (culley-02, seed 002).
        legacy = rdmac or (request is None and reply is None)
        framing = replace(framing, ddp=options.ddp, either_fpduptr=legacy)
        self.protocol = "mpa"
        d.summary.protocol = "mpa"
        d.summary.framing = framing
        d.summary.start_seq = window.seq(first)
        d.walker = FpduWalker(window, first, framing, where=(self.index, d.role))
        d.mode = _WALK
        if first == framing.origin and options.receiver:  # the MPA start is known
            d.replay = ReplayFeed(
                window.seq(first),
                markers=framing.markers,
                crc=framing.crc,
                either_fpduptr=framing.either_fpduptr,
            )
            for seq, payload in d.retained or ():
                d.replay.feed(seq, payload)
        d.retained = None

    def _framing(
        self, d: _Direction, markers: bool | None, crc: bool | None, rdmac: bool
    ) -> tuple[Framing, int] | None:
        window = d.window
        assert window is not None
        start = d.start
        if start is not None:
            if start >= window.end:
                return None
            if markers is not None and crc is not None:
                return Framing(start, markers, crc, rdmac), start
            guessed = guess_framing(window, start, markers=markers, crc=crc)
            if guessed is None:
                self.note(
                    d,
                    "cannot tell whether markers and CRCs are used; give --markers/--crc",
                    offset=start,
                )
                return None
            return Framing(start, guessed.markers, guessed.crc, rdmac), start
        found = find_start(window, markers=markers, crc=crc)
        if found is None:
            return None
        framing, first = found
        self.note(
            d,
            "MPA start not captured; first FPDU found by "
            + ("markers" if framing.markers else "CRCs"),
            offset=first,
        )
        return Framing(framing.origin, framing.markers, framing.crc, rdmac), first

    # -- records -------------------------------------------------------------------

    def note(self, d: _Direction, message: str, *, offset: int | None = None) -> None:
        window = d.window
        if window is None:
            seq, frame = 0, None
        else:
            at = window.end if offset is None else offset
            seq, frame = window.seq(at), window.frame_at(at)
        self.emit(d, NoteRecord(self.index, d.role, seq, frame, message))

    def emit(self, d: _Direction, record: Record) -> None:
        kind = type(record)
        if kind is FpduRecord:  # most records: one branch
            assert isinstance(record, FpduRecord)
            self._fpdu(d, record)
            if self.owner.collect or self.phase == _PROBE:
                d.records.append(record)
            else:
                self.owner.out.append(record)
            if record.ulp.get("opcode") in _ATOMIC_OPCODES:
                self._atomic(d, record)
            if self.rtr_reply is not None and d.role == INITIATOR:
                self._rtr(d, record)
            return
        summary = d.summary
        if kind is ErrorRecord:
            assert isinstance(record, ErrorRecord)
            summary.errors += 1
            self.error_count += 1
            if len(self.kept_errors) < KEPT_RECORDS:
                self.kept_errors.append(record)
            if len(d.stats.error_times) < KEPT_RECORDS:
                d.stats.error_times.append((self.now, record.message))
        elif kind is NoteRecord:
            assert isinstance(record, NoteRecord)
            self.note_count += 1
            if len(self.kept_notes) < KEPT_RECORDS:
                self.kept_notes.append(record)
        elif kind is ViSegmentRecord:
            assert isinstance(record, ViSegmentRecord)
            summary.segments += 1
            summary.messages[str(record.fields.get("segment_type", "?"))] += 1
        if self.owner.collect:
            d.records.append(record)
        elif self.phase != _PROBE:
            self.owner.emit(record)
        else:
            d.records.append(record)  # until the roles are known

    def _rtr(self, d: _Direction, record: FpduRecord) -> None:
        """The Initiator's first FPDU against the RTR its Reply asked for."""
        reply = self.rtr_reply
        assert reply is not None
        self.rtr_reply = None
        problem = check_rtr(reply, record)
        if problem is not None:
            code, message = problem
            self.emit(
                d,
                ErrorRecord(self.index, INITIATOR, record.seq, record.frame, code, "mpa", message),
            )

    def _fpdu(self, d: _Direction, record: FpduRecord) -> None:
        summary = d.summary
        summary.fpdus += 1
        summary.ulpdu_octets += record.ulpdu_length
        ulp = record.ulp
        name = str(ulp.get("opcode_name", "ULPDU"))
        summary.messages[name] += 1
        stats = d.stats
        stats.fpdu_sizes.add(record.wire_length)
        payload = ulp.get("payload_length", record.ulpdu_length)
        last = bool(ulp.get("last", True))
        stats.opcode(name, payload if isinstance(payload, int) else 0, last)
        opcode = ulp.get("opcode")
        if opcode == _READ_REQUEST:
            stats.read_requested(self.now)
        elif opcode == _READ_RESPONSE and last:
            peer = self.dirs[1] if d is self.dirs[0] else self.dirs[0]
            peer.stats.read_answered(self.now)
        elif opcode == _TERMINATE:
            term = ulp.get("terminate")
            if isinstance(term, dict):
                stats.terminated(
                    Terminate(
                        self.now,
                        record.seq,
                        record.frame,
                        int(term["layer"]),
                        int(term["etype"]),
                        int(term["code"]),
                    )
                )

    def _atomic(self, d: _Direction, record: FpduRecord) -> None:
        """Pair an Atomic Request or Response with its other half (RFC 7306 §5.2.2)."""
        if record.crc_ok is False:
            return  # not trusted
        ulp = record.ulp
        if ulp.get("opcode") == RdmapOpcode.ATOMIC_REQUEST:
            fields = ulp.get("atomic_request")
            if not isinstance(fields, dict):
                return
            found = self.atomics.request(d, int(fields["request_id"]), record.seq, record.frame)
        else:
            fields = ulp.get("atomic_response")
            if not isinstance(fields, dict):
                return
            requester = self.dirs[1] if d is self.dirs[0] else self.dirs[0]
            found = self.atomics.response(
                d, requester, int(fields["request_id"]), record.seq, record.frame
            )
        if found is not None:
            self._mismatch(found)

    def _mismatch(self, found: Mismatch[_Direction]) -> None:
        sender = found.sender
        self.emit(
            sender,
            ErrorRecord(
                self.index, sender.role, found.seq, found.frame, None, "ddp/rdmap", found.message
            ),
        )

    # -- the end ---------------------------------------------------------------------

    def close(self) -> None:
        """Report the connection: no more segments will come."""
        self.closed = True
        for d in self.dirs:
            if d.reasm is not None:
                d.reasm.finish()
        self._advance(force=True)
        if self.phase == _PROBE:  # nothing at all was captured
            self._decided()
        for found in self.atomics.unanswered():
            self._mismatch(found)
        report = self._report()
        owner = self.owner
        if not owner.collect:
            for d in self.dirs:
                for record in d.records:
                    owner.emit(record)
        owner.emit(report)

    def _report(self) -> ConnectionReport:
        initiator = next(d for d in self.dirs if d.role == INITIATOR)
        responder = next(d for d in self.dirs if d.role == RESPONDER)
        summaries = []
        for d in (initiator, responder):
            summary = d.summary
            summary.direction = d.role
            summary.sender = d.sender
            summary.stats = d.stats
            reasm = d.reasm
            if reasm is not None:
                summary.octets = reasm.captured
                summary.gaps = reasm.gaps
                summary.gap_octets = reasm.gap_octets
                summary.retransmissions = reasm.retransmissions
                summary.out_of_order = reasm.out_of_order
                summary.unchecked_octets = reasm.unchecked
            if d.replay is not None:
                summary.receiver = d.replay.result()
            summaries.append(summary)
        records: list[Record] = []
        if self.owner.collect:
            # Each direction stays in stream order; the two are interleaved by frame.
            records = list(heapq.merge(initiator.records, responder.records, key=_frame_order))
        client, server = self.dirs
        return ConnectionReport(
            self.index,
            client.sender,
            server.sender,
            self.protocol,
            self.request,
            self.reply,
            summaries,
            error_count=self.error_count,
            note_count=self.note_count,
            kept_errors=self.kept_errors,
            kept_notes=self.kept_notes,
            records=records,
            first_time=self.first_time,
            syn_time=self.syn_time,
            mpa_time=self.mpa_time,
            last_time=self.last_time,
        )


_ATOMIC_OPCODES: Final = (RdmapOpcode.ATOMIC_REQUEST, RdmapOpcode.ATOMIC_RESPONSE)
# The opcodes each FPDU is compared with, as plain ints (an enum member is
# an attribute lookup each time it is named).
_READ_REQUEST: Final = int(RdmapOpcode.RDMA_READ_REQUEST)
_READ_RESPONSE: Final = int(RdmapOpcode.RDMA_READ_RESPONSE)
_TERMINATE: Final = int(RdmapOpcode.TERMINATE)


def _frame_order(record: Record) -> int:
    return record.frame if record.frame is not None else 1 << 62
