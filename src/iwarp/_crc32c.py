"""CRC32C (Castagnoli), as iSCSI (RFC 3385) and MPA (RFC 5044 §6) use it.

Backed by the ``crc32c`` package, a C extension using the CPU's CRC
instructions. It takes any buffer (bytes, bytearray, memoryview slices), so
FPDUs are checked where they lie, and continues a running value, so pieces
of one FPDU can be summed without joining them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iwarp._typing import Buffer

    def crc32c(data: Buffer, value: int = 0) -> int:
        """Standard CRC-32C of ``data``, continuing from ``value``."""
        ...

else:
    from crc32c import crc32c

__all__ = ["crc32c"]
