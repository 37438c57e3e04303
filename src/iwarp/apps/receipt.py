"""The receipt exchange of iwarp's own tools, on the wire.

``iwarp connect --op mpa`` ends with a *receipt request* and ``iwarp listen``
answers with a *receipt* (the counts and SHA-256 of what it delivered);
``iwarp conformance`` asks the same question of a draft-culley target to
make it frame something. The octets are declared here, once, below both
tools; the conversation itself is :mod:`iwarp.cli._receipt`.

Both start with 0x80 so that decoders that read every ULPDU as DDP (as
Wireshark does) see a tagged segment, not last, with an unknown RDMAP
opcode (9), like the test messages: not a malformed Terminate.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["COUNTS", "RECEIPT_KEY", "RECEIPT_OFFER", "RECEIPT_REQUEST", "RECEIPT_SIZE"]

#: ``connect`` -> ``listen``: "tell me what you received".
RECEIPT_REQUEST: Final = b"\x80iwarp receipt?\n"
#: ``listen`` -> ``connect``: the first 16 octets of the receipt.
RECEIPT_KEY: Final = b"\x80iwarp receipt.\n"
#: The end of ``listen --op mpa``'s Reply private data: "ask me for receipts".
RECEIPT_OFFER: Final = b"\x80iwarp receipts\n"
#: After the key: BE64 messages, BE64 octets, SHA-256 of the payloads in order.
COUNTS: Final = struct.Struct(">QQ32s")
#: The whole receipt.
RECEIPT_SIZE: Final = len(RECEIPT_KEY) + COUNTS.size
