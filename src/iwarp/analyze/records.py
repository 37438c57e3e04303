"""What the analyzer reports: one record per frame, FPDU, segment, error or note.

Every record knows its connection (``stream``, numbered as Wireshark's
``tcp.stream``), the ``direction`` of the side that sent it ("initiator" or
"responder"), its TCP sequence number and the capture frame that carried
its first octet, and turns itself into the JSON object of ``iwarp decode
--json`` with :meth:`to_json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from iwarp.analyze.kernels import kernels, pure, register
from iwarp.mpa.wire import MpaFrame, RtrFlags

__all__ = [
    "ErrorRecord",
    "FpduRecord",
    "FrameRecord",
    "MarkerRecord",
    "NoteRecord",
    "Record",
    "ViSegmentRecord",
    "json_line",
    "record_maker",
]

Json: TypeAlias = dict[str, Any]

#: The keys of the ULPDU view (describe_ulpdu) under "ddp" and "rdmap", in order.
_DDP_KEYS = (
    *("tagged", "last", "ddp_version", "ddp_reserved", "stag", "to"),
    *("qn", "msn", "mo", "payload_length"),
)
_RDMAP_KEYS = (
    *("rdmap_version", "rdmap_reserved", "opcode", "opcode_name", "inv_stag"),
    *("read_request", "atomic_request", "atomic_response", "immediate_data", "terminate"),
)

if TYPE_CHECKING:
    from iwarp._speedups import DecodeKernels

_R = TypeVar("_R")

#: RTR types as ``iwarp decode --json`` names them.
_RTR_NAMES = ((RtrFlags.SEND, "send"), (RtrFlags.WRITE, "write"), (RtrFlags.READ, "read"))


@dataclass(frozen=True, slots=True)
class _Where:
    stream: int
    direction: str
    seq: int
    frame: int | None

    def _base(self, kind: str) -> Json:
        return {
            "type": kind,
            "stream": self.stream,
            "direction": self.direction,
            "seq": self.seq,
            "frame": self.frame,
        }


@dataclass(frozen=True, slots=True)
class FrameRecord(_Where):
    """An MPA Request or Reply frame (RFC 5044 §7.1, RFC 6581 §5)."""

    mpa: MpaFrame
    #: The PD_Length field as sent (private data may be cut short by the capture).
    pd_length: int

    def to_json(self) -> Json:
        mpa = self.mpa
        enhanced = mpa.enhanced
        out = self._base("mpa_request" if mpa.is_request else "mpa_reply")
        out.update(
            m=int(mpa.markers),
            c=int(mpa.crc),
            r=int(mpa.reject),
            s=int(mpa.is_enhanced),
            res=mpa.reserved,
            rev=mpa.revision,
            pd_length=self.pd_length,
            ird=None if enhanced is None else enhanced.ird,
            ord=None if enhanced is None else enhanced.ord,
            p2p=None if enhanced is None else RtrFlags.PEER_TO_PEER in enhanced.flags,
            rtr=None
            if enhanced is None
            else [name for flag, name in _RTR_NAMES if flag in enhanced.flags],
            private_data=mpa.ulp_private_data.hex(),
        )
        return out


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """A marker inside an FPDU (RFC 5044 §4.3), checked."""

    seq: int
    reserved: int
    fpduptr: int
    expected: int

    @property
    def ok(self) -> bool:
        # RFC 5044 §4.3: the two low bits of FPDUPTR are treated as zero.
        return self.reserved == 0 and self.fpduptr & 0xFFFC == self.expected

    def to_json(self) -> Json:
        return {
            "seq": self.seq,
            "reserved": self.reserved,
            "fpduptr": self.fpduptr,
            "expected": self.expected,
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class FpduRecord(_Where):
    """One FPDU (RFC 5044 §4) with its DDP/RDMAP headers decoded."""

    wire_length: int
    ulpdu_length: int
    markers: tuple[MarkerRecord, ...]
    pad: bytes
    #: The CRC field as a number (sent least significant octet first).
    crc: int
    crc_expected: int
    #: Whether CRCs are in use on this connection.
    crc_checked: bool
    #: The :func:`iwarp.rdmap.wire.describe_ulpdu` view of the ULPDU.
    ulp: dict[str, object] = field(default_factory=dict)

    @property
    def crc_ok(self) -> bool | None:
        return self.crc == self.crc_expected if self.crc_checked else None

    def to_json(self) -> Json:
        out = self._base("fpdu")
        ulp = self.ulp
        ddp = {k: ulp[k] for k in _DDP_KEYS if k in ulp}
        rdmap = {k: ulp[k] for k in _RDMAP_KEYS if k in ulp}
        out.update(
            wire_length=self.wire_length,
            ulpdu_length=self.ulpdu_length,
            crc_ok=self.crc_ok,
            crc=f"{self.crc:#010x}",
            crc_expected=f"{self.crc_expected:#010x}",
            pad=self.pad.hex(),
            markers=[m.to_json() for m in self.markers],
            ddp=ddp,
            rdmap=rdmap,
        )
        return out


@dataclass(frozen=True, slots=True)
class ViSegmentRecord(_Where):
    """A VI/TCP segment (draft-dicecco-vitcp-01 §3)."""

    fields: dict[str, object]

    def to_json(self) -> Json:
        out = self._base("vitcp_segment")
        out.update(self.fields)
        return out


@dataclass(frozen=True, slots=True)
class ErrorRecord(_Where):
    """A protocol error: the capture shows a peer breaking a rule."""

    #: The MPA error code (RFC 5044 §8, RFC 6581) where one applies.
    code: int | None
    layer: str
    message: str

    def to_json(self) -> Json:
        out = self._base("error")
        out.update(code=self.code, layer=self.layer, message=self.message)
        return out


@dataclass(frozen=True, slots=True)
class NoteRecord(_Where):
    """Something worth knowing that is not a protocol error (gaps, resync)."""

    message: str

    def to_json(self) -> Json:
        out = self._base("note")
        out.update(message=self.message)
        return out


Record: TypeAlias = FrameRecord | FpduRecord | ViSegmentRecord | ErrorRecord | NoteRecord


# -- JSON lines and records made in one call ------------------------------------
#
# ``iwarp --json`` writes one record per line, as json.dumps(record.to_json())
# would. An FPDU record's line is written by the decode kernels (fpdu_json:
# the pure writer of iwarp._decode takes every record, the C writer those
# whose values are of the usual kinds).


def _tables(k: DecodeKernels) -> None:
    k.json_table(FpduRecord, MarkerRecord, _DDP_KEYS, _RDMAP_KEYS)


register(_tables)


def record_maker(cls: type[_R]) -> Callable[..., _R]:
    """How the decoder's loops make many records of ``cls`` (a frozen slots
    dataclass): called with every field's value, in order, positionally, it
    gives what ``cls(*values)`` gives: the kernels' ``new_record``, which
    sets the slots in one call (a frozen dataclass's ``__init__`` makes a
    Python call per field). A class that runs code of its own when made
    (``__post_init__``, fields outside ``__init__``) or has no slots is made
    by ``cls`` itself."""
    members = fields(cast("Any", cls))
    if (
        hasattr(cls, "__post_init__")
        or not all(f.init for f in members)
        or "__slots__" not in vars(cls)
    ):
        return cls
    return partial(kernels.new_record, cls, tuple(getattr(cls, f.name) for f in members))


def json_line(record: Record) -> str:
    """The record's JSON object as one line of text: ``json.dumps(record.to_json())``."""
    if type(record) is FpduRecord:
        line = kernels.fpdu_json(record)
        if line is None:  # the C writer declines unusual values; the pure one writes every line
            line = pure.fpdu_json(record)
            assert line is not None
        return line
    return json.dumps(record.to_json())
