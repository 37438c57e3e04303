"""MPA: Marker PDU Aligned framing for TCP (RFC 5044, RFC 6581, and drafts).

Sans-IO: nothing here touches sockets, clocks or event loops.

* :class:`MpaConnection` -- one connection: startup (Request/Reply in every
  revision, RFC 6581 negotiation) then framing; the object adapters drive.
* :class:`FpduEncoder` / :class:`FpduDecoder` -- FPDU framing alone.
* :mod:`iwarp.mpa.wire` -- the wire formats; :mod:`iwarp.mpa.ooo` -- the
  out-of-order receiver.
"""

from __future__ import annotations

from iwarp.mpa.config import MpaConfig, Rev0Profile, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import (
    ConnectionClosed,
    ConnectionEstablished,
    ConnectionFailed,
    ConnectionRejected,
    Event,
    MpaParams,
    NegotiationFailed,
    RequestReceived,
    StreamDataReceived,
    UlpduReceived,
)
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU, MIN_MULPDU, mulpdu

__all__ = [
    "MAX_ULPDU",
    "MIN_MULPDU",
    "ConnectionClosed",
    "ConnectionEstablished",
    "ConnectionFailed",
    "ConnectionRejected",
    "Event",
    "FpduDecoder",
    "FpduEncoder",
    "MpaConfig",
    "MpaConnection",
    "MpaParams",
    "NegotiationFailed",
    "RequestReceived",
    "Rev0Profile",
    "Role",
    "StreamDataReceived",
    "UlpduReceived",
    "mulpdu",
]
