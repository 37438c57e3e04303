"""MPA: Marker PDU Aligned framing for TCP (RFC 5044, RFC 6581, and drafts).

Sans-IO: nothing here touches sockets, clocks or event loops.
"""

from __future__ import annotations

from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU, MIN_MULPDU, mulpdu

__all__ = ["MAX_ULPDU", "MIN_MULPDU", "FpduDecoder", "FpduEncoder", "mulpdu"]
