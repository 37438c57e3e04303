"""The decoded fields of a record, by name: what the one-line listing
shows, what a display filter (``-Y``) tests and what a field list
(``-T fields -e NAME``) prints.

One table (:data:`FIELDS`) declares every field once: its name, its kind
(number, text, flag, address), whether it reads best in hex, and what it
is. :func:`record_row` turns a record, with where its first octet was
captured (:class:`Where`: time and addresses of that frame), into a row: a
dict from field name to value holding the fields the record has. A field
a record does not have (``stag`` of an untagged FPDU) is absent, not None.

``addr`` and ``port`` are the two-valued fields of tshark's ``ip.addr``
and ``tcp.port``: a row holds (source, destination).

Field meanings follow the JSON objects of ``iwarp decode --json`` (RFC 5044
§4 FPDU and §7.1 frames, RFC 5041 §4 DDP headers, RFC 5040 §4 RDMAP
headers, draft-dicecco-vitcp-01 §3 segments).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from iwarp.analyze.records import (
    ErrorRecord,
    FpduRecord,
    FrameRecord,
    NoteRecord,
    Record,
    ViSegmentRecord,
)
from iwarp.mpa.wire import RtrFlags

__all__ = [
    "ALIASES",
    "FIELDS",
    "Field",
    "Kind",
    "Row",
    "Where",
    "field_named",
    "format_value",
    "record_row",
]

Row = dict[str, object]


class Kind(Enum):
    """What a field's values are, for comparisons and printing."""

    INT = "integer"
    FLOAT = "number"
    TEXT = "text"
    FLAG = "flag"
    ADDRESS = "address"


@dataclass(frozen=True, slots=True)
class Field:
    """One decoded field."""

    name: str
    kind: Kind
    help: str
    #: Printed in hex (STags, tagged offsets, CRCs).
    hex: bool = False
    #: Two values per row (source and destination): tests match either.
    pair: bool = False


def _fields(*specs: tuple[str, Kind, str] | tuple[str, Kind, str, bool]) -> dict[str, Field]:
    table: dict[str, Field] = {}
    for spec in specs:
        name, kind, text = spec[:3]
        hexed = bool(spec[3]) if len(spec) > 3 else False
        table[name] = Field(name, kind, text, hexed, pair=name in ("addr", "port"))
    return table


_I, _F, _T, _B, _A = Kind.INT, Kind.FLOAT, Kind.TEXT, Kind.FLAG, Kind.ADDRESS

#: Every field, in the order ``iwarp decode --fields`` lists them.
FIELDS: Final[dict[str, Field]] = _fields(
    # where
    ("frame", _I, "capture frame that brought the record's first octet (1 = first)"),
    ("time", _F, "capture time of that frame, seconds since the first TCP segment"),
    ("epoch", _F, "capture time of that frame, seconds since 1970"),
    ("stream", _I, "TCP connection number (Wireshark's tcp.stream)"),
    ("direction", _T, "sender's role: initiator or responder"),
    ("seq", _I, "TCP sequence number of the record's first octet"),
    ("type", _T, "mpa_request, mpa_reply, fpdu, vitcp_segment, error or note"),
    ("src", _A, "sender's IP address"),
    ("dst", _A, "receiver's IP address"),
    ("sport", _I, "sender's TCP port"),
    ("dport", _I, "receiver's TCP port"),
    ("addr", _A, "either IP address (source or destination)"),
    ("port", _I, "either TCP port (source or destination)"),
    # MPA Request/Reply (RFC 5044 §7.1, RFC 6581 §5)
    ("m", _B, "frame: M (markers wanted)"),
    ("c", _B, "frame: C (CRC wanted)"),
    ("r", _B, "frame: R (rejected)"),
    ("s", _B, "frame: S (enhanced, RFC 6581)"),
    ("rev", _I, "frame: Rev"),
    ("pd_length", _I, "frame: PD_Length"),
    ("ird", _I, "frame: IRD (RFC 6581)"),
    ("ord", _I, "frame: ORD (RFC 6581)"),
    ("p2p", _B, "frame: peer-to-peer flag (RFC 6581)"),
    ("private_data", _T, "frame: private data after the enhanced data, hex"),
    # FPDU (RFC 5044 §4)
    ("wire_length", _I, "FPDU octets on the wire (markers, PAD, CRC included)"),
    ("ulpdu_length", _I, "FPDU: ULPDU_Length"),
    ("pad_length", _I, "FPDU: PAD octets"),
    ("crc_ok", _B, "FPDU or VI segment: CRC correct (absent when CRCs are off)"),
    ("crc", _I, "FPDU: the CRC field (absent when CRCs are off)", True),
    ("crc_expected", _I, "FPDU: the CRC computed (absent when CRCs are off)", True),
    ("markers", _I, "FPDU: markers inside it"),
    ("markers_ok", _B, "FPDU: all its markers right (absent without markers)"),
    # DDP (RFC 5041 §4)
    ("tagged", _B, "DDP: T flag"),
    ("last", _B, "DDP: L flag"),
    ("ddp_version", _I, "DDP: version"),
    ("stag", _I, "DDP tagged: STag", True),
    ("to", _I, "DDP tagged: tagged offset", True),
    ("qn", _I, "DDP untagged: queue number"),
    ("msn", _I, "DDP untagged: message sequence number"),
    ("mo", _I, "DDP untagged: message offset"),
    ("payload_length", _I, "ULP payload octets after the headers (DDP or VI/TCP)"),
    # RDMAP (RFC 5040 §4, RFC 7306)
    ("rdmap_version", _I, "RDMAP: version"),
    ("opcode", _I, "RDMAP: opcode (a number, or a name: send, rdma_write, ...)"),
    ("opcode_name", _T, "RDMAP: opcode name (SEND, RDMA_WRITE, ...)"),
    ("inv_stag", _I, "RDMAP: Invalidate STag", True),
    ("sink_stag", _I, "Read Request: data sink STag", True),
    ("sink_to", _I, "Read Request: data sink tagged offset", True),
    ("read_size", _I, "Read Request: RDMA Read message size"),
    ("src_stag", _I, "Read Request: data source STag", True),
    ("src_to", _I, "Read Request: data source tagged offset", True),
    ("term_layer", _I, "Terminate: layer"),
    ("term_etype", _I, "Terminate: error type"),
    ("term_code", _I, "Terminate: error code", True),
    ("aopcode", _I, "Atomic Request: AOpCode (RFC 7306 §5.2.1; 0 FetchAdd, 2 CmpSwap)"),
    ("request_id", _I, "Atomic Request or Response: Request Identifier", True),
    ("atomic_stag", _I, "Atomic Request: remote STag", True),
    ("atomic_to", _I, "Atomic Request: remote tagged offset", True),
    ("atomic_data", _I, "Atomic Request: add or swap data", True),
    ("atomic_compare", _I, "Atomic Request: compare data", True),
    ("original", _I, "Atomic Response: original remote data", True),
    ("immediate_data", _T, "Immediate Data message: the 8 octets, hex (RFC 7306 §5.1)"),
    # VI/TCP (draft-dicecco-vitcp-01 §3)
    ("segment_type", _T, "VI/TCP: segment type"),
    ("eom", _B, "VI/TCP: end of message"),
    ("message_number", _I, "VI/TCP: message number"),
    ("message_ack", _I, "VI/TCP: message acknowledged"),
    # errors and notes
    ("error", _T, "error: what rule the capture shows broken"),
    ("code", _I, "error: MPA error code (RFC 5044 §8), where one applies"),
    ("layer", _T, "error: mpa, ddp/rdmap, tcp or vitcp"),
    ("note", _T, "note: what is worth knowing (gaps, resync, cut FPDUs)"),
)

#: tshark's names for the same fields, accepted everywhere a name is.
ALIASES: Final[dict[str, str]] = {
    "frame.number": "frame",
    "frame.time_relative": "time",
    "frame.time_epoch": "epoch",
    "tcp.stream": "stream",
    "tcp.seq_raw": "seq",
    "ip.src": "src",
    "ip.dst": "dst",
    "ipv6.src": "src",
    "ipv6.dst": "dst",
    "ip.addr": "addr",
    "ipv6.addr": "addr",
    "tcp.srcport": "sport",
    "tcp.dstport": "dport",
    "tcp.port": "port",
    "queue": "qn",
    "len": "payload_length",
    # Wireshark's iWARP dissectors (iwarp_mpa, iwarp_ddp_rdmap), where the
    # field means what ours does; the CRC field alike: the octets as sent.
    "iwarp_mpa.marker_flag": "m",
    "iwarp_mpa.crc_flag": "c",
    "iwarp_mpa.rej_flag": "r",
    "iwarp_mpa.rev": "rev",
    "iwarp_mpa.pdlength": "pd_length",
    "iwarp_mpa.ulpdulength": "ulpdu_length",
    "iwarp_mpa.crc": "crc",
    "iwarp_ddp.tagged_flag": "tagged",
    "iwarp_ddp.last_flag": "last",
    "iwarp_ddp.dv": "ddp_version",
    "iwarp_ddp.stag": "stag",
    "iwarp_ddp.tagged_offset": "to",
    "iwarp_ddp.qn": "qn",
    "iwarp_ddp.msn": "msn",
    "iwarp_ddp.mo": "mo",
    "iwarp_rdma.version": "rdmap_version",
    "iwarp_rdma.opcode": "opcode",
    "iwarp_rdma.inval_stag": "inv_stag",
    "iwarp_rdma.sinkstag": "sink_stag",
    "iwarp_rdma.sinkto": "sink_to",
    "iwarp_rdma.rdmardsz": "read_size",
    "iwarp_rdma.srcstag": "src_stag",
    "iwarp_rdma.srcto": "src_to",
    "iwarp_rdma.term_layer": "term_layer",
    "iwarp_rdma.term_etype": "term_etype",
    "iwarp_rdma.term_errcode": "term_code",
    "iwarp_rdma.atomic.opcode": "aopcode",
    "iwarp_rdma.atomic.request_identifier": "request_id",
    "iwarp_rdma.atomic.original_request_identifier": "request_id",
    "iwarp_rdma.atomic.remote_stag": "atomic_stag",
    "iwarp_rdma.atomic.remote_tagged_offset": "atomic_to",
    "iwarp_rdma.atomic.add_data": "atomic_data",
    "iwarp_rdma.atomic.swap_data": "atomic_data",
    "iwarp_rdma.atomic.compare_data": "atomic_compare",
    "iwarp_rdma.atomic.original_remote_data_value": "original",
}


def field_named(name: str) -> Field | None:
    """The field a name or alias means (None: no such field)."""
    found = FIELDS.get(name)
    if found is None and name in ALIASES:
        found = FIELDS[ALIASES[name]]
    return found


@dataclass(frozen=True, slots=True)
class Where:
    """Where a record's first octet was captured: its frame's time and the
    sender's and receiver's addresses."""

    time: float
    epoch: float
    src: str
    sport: int
    dst: str
    dport: int


def record_row(record: Record, where: Where | None) -> Row:
    """Every field ``record`` has, by name (see :data:`FIELDS`)."""
    row: Row = {
        "stream": record.stream,
        "direction": record.direction,
        "seq": record.seq,
    }
    if record.frame is not None:
        row["frame"] = record.frame
    if where is not None:
        row.update(
            time=where.time,
            epoch=where.epoch,
            src=where.src,
            dst=where.dst,
            sport=where.sport,
            dport=where.dport,
            addr=(where.src, where.dst),
            port=(where.sport, where.dport),
        )
    if isinstance(record, FpduRecord):
        row["type"] = "fpdu"
        _fpdu(record, row)
    elif isinstance(record, FrameRecord):
        mpa = record.mpa
        row["type"] = "mpa_request" if mpa.is_request else "mpa_reply"
        row.update(
            m=mpa.markers,
            c=mpa.crc,
            r=mpa.reject,
            s=mpa.is_enhanced,
            rev=mpa.revision,
            pd_length=record.pd_length,
            private_data=mpa.ulp_private_data.hex(),
        )
        enhanced = mpa.enhanced
        if enhanced is not None:
            row.update(
                ird=enhanced.ird,
                ord=enhanced.ord,
                p2p=RtrFlags.PEER_TO_PEER in enhanced.flags,
            )
    elif isinstance(record, ViSegmentRecord):
        row["type"] = "vitcp_segment"
        vi = record.fields
        for key, name in (
            ("segment_type", "segment_type"),
            ("eom", "eom"),
            ("message_number", "message_number"),
            ("message_ack", "message_ack"),
            ("payload_length", "payload_length"),
            ("crc_ok", "crc_ok"),
        ):
            value = vi.get(key)
            if value is not None:
                row[name] = value
    elif isinstance(record, ErrorRecord):
        row.update(type="error", error=record.message, layer=record.layer)
        if record.code is not None:
            row["code"] = record.code
    elif isinstance(record, NoteRecord):
        row.update(type="note", note=record.message)
    return row


#: FPDU fields that come straight from ``describe_ulpdu``.
_ULP_KEYS: Final = (
    *("tagged", "last", "ddp_version", "stag", "to", "qn", "msn", "mo", "payload_length"),
    *("rdmap_version", "opcode", "opcode_name", "inv_stag"),
)


def _fpdu(record: FpduRecord, row: Row) -> None:
    row.update(
        wire_length=record.wire_length,
        ulpdu_length=record.ulpdu_length,
        pad_length=len(record.pad),
        markers=len(record.markers),
    )
    if record.crc_checked:
        row.update(crc_ok=record.crc_ok, crc=record.crc, crc_expected=record.crc_expected)
    if record.markers:
        row["markers_ok"] = all(m.ok for m in record.markers)
    ulp = record.ulp
    for key in _ULP_KEYS:
        value = ulp.get(key)
        if value is not None:
            row[key] = value
    read = ulp.get("read_request")
    if isinstance(read, dict):
        row.update(
            sink_stag=read["sink_stag"],
            sink_to=read["sink_to"],
            read_size=read["size"],
            src_stag=read["src_stag"],
            src_to=read["src_to"],
        )
    term = ulp.get("terminate")
    if isinstance(term, dict):
        row.update(term_layer=term["layer"], term_etype=term["etype"], term_code=term["code"])
    atomic = ulp.get("atomic_request")
    if isinstance(atomic, dict):
        row.update(
            aopcode=atomic["aopcode"],
            request_id=atomic["request_id"],
            atomic_stag=atomic["stag"],
            atomic_to=atomic["to"],
            atomic_data=atomic["data"],
            atomic_compare=atomic["compare"],
        )
    response = ulp.get("atomic_response")
    if isinstance(response, dict):
        row.update(request_id=response["request_id"], original=response["original"])
    immediate = ulp.get("immediate_data")
    if isinstance(immediate, str):
        row["immediate_data"] = immediate


def format_value(field: Field, value: object) -> str:
    """A value as the listing and field lists print it: numbers in decimal
    (hex for hex fields), flags as 1/0, times to the microsecond, pairs
    joined by a comma."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(format_value(field, v) for v in value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return f"{value:#x}" if field.hex else str(value)
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)
