"""CRC32C (Castagnoli), as iSCSI (RFC 3385) and MPA (RFC 5044 §6) use it.

The ``crc32c`` of the kernels :mod:`iwarp._accel` chose: the C
accelerator's (carry-less multiply folding, the crc32 instruction or
tables, the fastest the CPU allows) or, on the pure-Python path, the
``crc32c`` package's (a C extension using the CPU's CRC instructions). It
takes any buffer (bytes, bytearray, memoryview slices), so FPDUs are
checked where they lie, and continues a running value, so pieces of one
FPDU can be summed without joining them.
"""

from __future__ import annotations

from iwarp._accel import kernels

__all__ = ["crc32c"]

#: Standard CRC-32C of ``data``, continuing from ``value``: ``crc32c(data, value=0, /)``.
crc32c = kernels.crc32c
