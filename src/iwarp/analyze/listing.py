"""The one-line listing of ``iwarp decode`` (tshark's default view), its
hex/ASCII dump (``-x``), and the frame index both need.

One line per record: each MPA Request/Reply, FPDU, VI/TCP segment, error
and note, in the order the analyzer gives them (a record comes out when
its last octet has arrived). Columns: the capture frame that brought the
record's first octet, that frame's time (seconds since the first TCP
segment), sender → receiver, protocol, and what the record is: opcode and
key fields (STag/TO or QN/MSN/MO, payload length, L), the FPDU's length,
CRC verdict and markers.

Records carry a frame number, not the frame's time or addresses; a
:class:`FrameIndex` watches the segments go into the analyzer and keeps,
for the last :data:`RING` frames, their time and flow (and, for ``-x``,
the recent payload octets of each flow), in memory bounded whatever the
capture holds.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from typing import Final

from iwarp.analyze.capture import TcpPacket
from iwarp.analyze.fields import Row, Where, record_row
from iwarp.analyze.records import FpduRecord, FrameRecord, Record
from iwarp.mpa.wire import FRAME_HEADER_SIZE

__all__ = ["RING", "FrameIndex", "hex_dump", "list_line"]

#: Frames whose time and flow are remembered (records refer to recent ones).
RING: Final = 1 << 18
#: Payload octets kept per flow for ``-x`` (an FPDU is at most 64 KiB plus markers),
#: each segment counted :data:`SEGMENT_COST` octets more for what holding it costs.
OCTETS_PER_FLOW: Final = 256 << 10
#: Octets a held segment is counted beyond its payload (its tuple, bytes
#: object and sequence number), so that tiny segments cannot hold far more
#: memory than ``OCTETS_PER_FLOW`` (or make a dump walk millions of them).
SEGMENT_COST: Final = 128
#: Flows whose octets are kept for ``-x`` (the least recently active go first).
OCTET_FLOWS: Final = 256
#: Distinct flows interned at once (then the table starts again).
_FLOW_TABLE: Final = 1 << 16
_MASK32: Final = 0xFFFFFFFF

_Flow = tuple[str, int, str, int]


class _Octets:
    """The latest payload octets of one flow, by TCP sequence number."""

    __slots__ = ("held", "segments")

    def __init__(self) -> None:
        self.segments: deque[tuple[int, bytes]] = deque()
        self.held = 0

    def add(self, seq: int, payload: bytes) -> None:
        self.segments.append((seq, payload))
        self.held += len(payload) + SEGMENT_COST
        while self.held > OCTETS_PER_FLOW and len(self.segments) > 1:
            self.held -= len(self.segments.popleft()[1]) + SEGMENT_COST

    def get(self, seq: int, size: int) -> bytes | None:
        """``size`` octets from ``seq`` (of each octet, the first copy
        captured), or None when some are no longer (or never were) held.

        One pass over the held segments, latest first, each writing the
        octets it has over those of later copies: the cost follows what is
        held, not ``size`` times the number of segments."""
        out = bytearray(size)
        have = bytearray(size)
        for start, data in reversed(self.segments):
            ahead = (start - seq) & _MASK32
            if ahead < size:  # the segment starts inside the window
                piece = data[: size - ahead]
                at = ahead
            else:
                behind = (seq - start) & _MASK32
                if behind >= len(data):
                    continue  # no octet of the window
                piece = data[behind : behind + size]
                at = 0
            out[at : at + len(piece)] = piece
            have[at : at + len(piece)] = b"\x01" * len(piece)
        if have.count(0):
            return None
        return bytes(out)


class FrameIndex:
    """Time and addresses of recent frames, and (``keep_octets``) their
    payload octets, for the records that name them."""

    def __init__(self, *, keep_octets: bool = False) -> None:
        self._frames = array("q", bytes(8 * RING))
        self._times = array("d", bytes(8 * RING))
        self._flows: list[_Flow | None] = [None] * RING
        self._interned: dict[_Flow, _Flow] = {}
        self._origin: float | None = None
        #: The last place known per (stream, direction), for records
        #: without a frame or whose frame left the ring.
        self._last: dict[tuple[int, str], Where] = {}
        self._keep = keep_octets
        self._octets: OrderedDict[_Flow, _Octets] = OrderedDict()

    def wrap(self, packets: Iterable[TcpPacket]) -> Iterator[TcpPacket]:
        """The segments, unchanged, each noted on the way."""
        for packet in packets:
            self.add(packet)
            yield packet

    def add(self, packet: TcpPacket) -> None:
        if self._origin is None:
            self._origin = packet.time
        key = (packet.src, packet.sport, packet.dst, packet.dport)
        flow = self._interned.get(key)
        if flow is None:
            if len(self._interned) >= _FLOW_TABLE:
                self._interned.clear()
            flow = self._interned[key] = key
        slot = packet.frame % RING
        self._frames[slot] = packet.frame
        self._times[slot] = packet.time
        self._flows[slot] = flow
        if self._keep and packet.payload:
            octets = self._octets.get(flow)
            if octets is None:
                if len(self._octets) >= OCTET_FLOWS:
                    self._octets.popitem(last=False)
                octets = self._octets[flow] = _Octets()
            else:
                self._octets.move_to_end(flow)
            octets.add(packet.seq, packet.payload)

    def _flow(self, frame: int | None) -> tuple[float, _Flow] | None:
        if frame is None:
            return None
        slot = frame % RING
        flow = self._flows[slot]
        if self._frames[slot] != frame or flow is None:
            return None
        return self._times[slot], flow

    def where(self, record: Record) -> Where | None:
        """Time and addresses of the frame that brought the record's first octet."""
        found = self._flow(record.frame)
        key = (record.stream, record.direction)
        if found is None:
            return self._last.get(key)
        time, (src, sport, dst, dport) = found
        origin = self._origin if self._origin is not None else time
        place = Where(time - origin, time, src, sport, dst, dport)
        if len(self._last) >= _FLOW_TABLE:
            self._last.clear()
        self._last[key] = place
        return place

    def forget(self, stream: int) -> None:
        """The connection was reported: its records are all out."""
        for direction in ("initiator", "responder"):
            self._last.pop((stream, direction), None)

    def row(self, record: Record) -> Row:
        """The record's fields, with where it was captured."""
        return record_row(record, self.where(record))

    def octets(self, record: Record) -> bytes | None:
        """The octets of an FPDU or MPA frame as captured (markers, PAD and
        CRC included), or None: another kind of record, octets not kept
        (``keep_octets`` off, or long gone), or not all captured."""
        if isinstance(record, FpduRecord):
            size = record.wire_length
        elif isinstance(record, FrameRecord):
            size = FRAME_HEADER_SIZE + record.pd_length
        else:
            return None
        found = self._flow(record.frame)
        if found is None:
            return None
        held = self._octets.get(found[1])
        return None if held is None else held.get(record.seq, size)


# -- the line ------------------------------------------------------------------------


def _host_port(address: object, port: object) -> str:
    text = str(address)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def _hex(value: object) -> str:
    return f"{value:#x}" if isinstance(value, int) else "?"


def list_line(row: Row) -> str:
    """One record as a line of the listing: frame, time, sender → receiver,
    protocol, what it is."""
    frame = row.get("frame")
    time = row.get("time")
    number = f"{frame:>7}" if isinstance(frame, int) else "      -"
    when = f"{time:11.6f}" if isinstance(time, float) else "          ?"
    if "src" in row:
        path = f"{_host_port(row['src'], row['sport'])} → {_host_port(row['dst'], row['dport'])}"
    else:
        path = f"stream {row['stream']} {row['direction']}"
    protocol, info = _info(row)
    return f"{number} {when} {path} {protocol:<6} {info}"


def _info(row: Row) -> tuple[str, str]:
    kind = row.get("type")
    if kind in ("mpa_request", "mpa_reply"):
        text = "Request" if kind == "mpa_request" else "Reply"
        text += (
            f" Rev {row['rev']} M={int(bool(row['m']))} C={int(bool(row['c']))} "
            f"R={int(bool(row['r']))} S={int(bool(row['s']))}"
        )
        if "ird" in row:
            text += f" IRD {row['ird']} ORD {row['ord']}"
        return "MPA", text + f" PD_Length {row['pd_length']}"
    if kind == "fpdu":
        return _fpdu_info(row)
    if kind == "vitcp_segment":
        text = str(row.get("segment_type", "?"))
        if "message_number" in row:
            text += f" msg {row['message_number']}"
        text += f" len {row.get('payload_length', 0)}"
        if row.get("eom"):
            text += " EOM"
        if row.get("crc_ok") is False:
            text += " CRC BAD"
        return "VI/TCP", text
    if kind == "error":
        code = f" {row['code']}" if "code" in row else ""
        return "ERROR", f"[{row.get('layer')}{code}] {row.get('error')}"
    return "NOTE", str(row.get("note", ""))


def _fpdu_info(row: Row) -> tuple[str, str]:
    parts: list[str] = []
    protocol = "MPA"
    if "opcode_name" in row:
        protocol = "RDMAP"
        parts.append(str(row["opcode_name"]))
        if row.get("tagged"):
            parts.append(f"STag {_hex(row.get('stag'))} TO {_hex(row.get('to'))}")
        elif "qn" in row:
            parts.append(f"QN {row['qn']} MSN {row['msn']} MO {row['mo']}")
        if row.get("inv_stag"):
            parts.append(f"Inv {_hex(row['inv_stag'])}")
        if "read_size" in row:
            parts.append(
                f"sink {_hex(row['sink_stag'])}/{_hex(row['sink_to'])} "
                f"size {row['read_size']} src {_hex(row['src_stag'])}/{_hex(row['src_to'])}"
            )
        if "aopcode" in row:
            parts.append(
                f"AOpCode {row['aopcode']} ReqID {_hex(row['request_id'])} "
                f"STag {_hex(row['atomic_stag'])} TO {_hex(row['atomic_to'])}"
            )
        elif "original" in row:
            parts.append(f"ReqID {_hex(row['request_id'])} original {_hex(row['original'])}")
        if "immediate_data" in row:
            parts.append(f"data {row['immediate_data']}")
        if "term_layer" in row:
            parts.append(
                f"layer {row['term_layer']} type {row['term_etype']} code {_hex(row['term_code'])}"
            )
        parts.append(f"len {row.get('payload_length', '?')}" + (" L" if row.get("last") else ""))
    else:
        parts.append(f"ULPDU len {row['ulpdu_length']}")
    tail = f"FPDU {row['wire_length']}"
    if "crc_ok" in row:
        tail += " CRC ok" if row["crc_ok"] else " CRC BAD"
    if row.get("markers"):
        tail += f" markers {row['markers']}" + ("" if row.get("markers_ok") else " BAD")
    parts.append(f"[{tail}]")
    return protocol, " ".join(parts)


#: Octet -> itself if printable ASCII, else ".".
_PRINTABLE: Final = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


def hex_dump(data: bytes) -> list[str]:
    """Octets as ``tshark -x`` shows them: offset, 16 octets in hex, ASCII."""
    lines = []
    printable = data.translate(_PRINTABLE).decode("ascii")
    for at in range(0, len(data), 16):
        left = data[at : at + 8].hex(" ")
        right = data[at + 8 : at + 16].hex(" ")
        lines.append(f"{at:04x}  {left:<23}  {right:<23}  {printable[at : at + 16]}")
    return lines
