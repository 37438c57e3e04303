"""Which path runs the per-FPDU loops: the C accelerator or pure Python.

``iwarp._speedups`` (src/iwarp/_speedups.c) is built at install time when a
C compiler is there; it frames runs of DDP segments into FPDUs, decodes a
whole receive buffer of FPDUs at once and places runs of segments, with
CRC32C on the CPU's crc32 instruction. Every kernel has a pure-Python twin
that defines the behaviour (tests assert both agree octet for octet, error
for error), so the accelerator changes speed only.

Set ``IWARP_NO_ACCEL=1`` to run the pure-Python paths although the
extension is built (the test suite runs both ways).
"""

from __future__ import annotations

import os
from typing import Protocol

from iwarp._typing import Buffer

__all__ = ["ACTIVE", "Kernels", "describe", "speedups"]


class Kernels(Protocol):
    """What the extension offers (see src/iwarp/_speedups.c for each contract)."""

    def crc32c(self, data: Buffer, value: int = 0, /) -> int: ...

    def frame_run(
        self,
        out: Buffer | None,
        header: Buffer,
        payload: Buffer,
        start: int,
        stop: int,
        room: int,
        field_at: int,
        field_size: int,
        base: int,
        last_mask: int,
        markers: bool,
        crc: bool,
        phase: int,
        /,
    ) -> tuple[bytes | int, int]: ...

    def scan(
        self,
        buffer: Buffer,
        start: int,
        end: int,
        markers: bool,
        crc: bool,
        phase: int,
        limit: int,
        /,
    ) -> tuple[bytes, int, int, int, int, int, int]: ...

    def segment_run(
        self,
        buffer: Buffer,
        records: Buffer,
        index: int,
        tagged: bool,
        control_mask: int,
        control: int,
        rdmap: int,
        key: int,
        msn: int,
        offset: int,
        /,
    ) -> tuple[int, int, bool]: ...

    def place_run(
        self,
        buffer: Buffer,
        records: Buffer,
        index: int,
        count: int,
        header_size: int,
        target: Buffer,
        /,
    ) -> None: ...

    def describe(self) -> str: ...


def _load() -> tuple[Kernels | None, str]:
    if os.environ.get("IWARP_NO_ACCEL", "") not in ("", "0"):
        return None, "pure Python (IWARP_NO_ACCEL is set)"
    try:
        from iwarp import _speedups
    except ImportError:
        return None, "pure Python (the C accelerator is not built)"
    return _speedups, f"C accelerator ({_speedups.describe()})"


#: The extension module, or None when the pure-Python paths run.
speedups, _DESCRIPTION = _load()
#: Whether the C accelerator runs.
ACTIVE: bool = speedups is not None


def describe() -> str:
    """One line saying which path runs, e.g. for ``iwarp --version``."""
    return _DESCRIPTION
