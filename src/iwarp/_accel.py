"""Which kernels run the per-FPDU loops: the C accelerator or pure Python.

``iwarp._speedups`` (src/iwarp/_speedups.c) is built at install time when a
C compiler is there; ``iwarp._kernels`` is its pure-Python twin, with the
same functions, signatures, results and errors (its docstrings are the
contract of both; tests compare the two function by function). One of them
is chosen here, once, at import, as :data:`kernels`; the call sites call it
without a branch of their own, so the accelerator changes speed only.

Set ``IWARP_NO_ACCEL=1`` to run the pure-Python kernels although the
extension is built (the test suite runs both ways).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

import iwarp._kernels as _kernels

__all__ = ["ACTIVE", "describe", "kernels", "speedups"]


def _load() -> tuple[object, str]:
    if os.environ.get("IWARP_NO_ACCEL", "") not in ("", "0"):
        return _kernels, "pure Python (IWARP_NO_ACCEL is set)"
    try:
        import iwarp._speedups as _speedups
    except ImportError:
        return _kernels, "pure Python (the C accelerator is not built)"
    return _speedups, f"C accelerator ({_speedups.describe()})"


_CHOSEN, _DESCRIPTION = _load()

if TYPE_CHECKING:
    # Both modules have one signature per function (_speedups.pyi re-exports
    # _kernels'), so the pure module's types are the types of the choice.
    kernels = _kernels
else:
    #: The kernels that run: ``iwarp._speedups`` or ``iwarp._kernels``.
    kernels = _CHOSEN

#: Whether the C accelerator runs.
ACTIVE: bool = _CHOSEN is not _kernels
#: The extension module when the C accelerator runs, else None: for its
#: functions that have no pure-Python twin (the whole-message lanes of
#: ``_lanes.c``, whose callers fall back to the framing path without them).
speedups: ModuleType | None = _CHOSEN if isinstance(_CHOSEN, ModuleType) and ACTIVE else None


def describe() -> str:
    """One line saying which path runs, e.g. for ``iwarp --version``."""
    return _DESCRIPTION
