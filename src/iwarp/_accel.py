"""Which kernels run, decided once, here, for every family: the C
accelerator or pure Python.

``iwarp._speedups`` (src/iwarp/*.c, one extension) is built at install
time when a C compiler is there; its functions are declared, with types, in
``_speedups.pyi`` alone. They come in four families:

=====================  ==================  ===================================
family                 C                   without it
=====================  ==================  ===================================
FPDU kernels           ``_speedups.c``     :mod:`iwarp._kernels` (:data:`kernels`)
small-message lane     ``_small.c``        :mod:`iwarp._small` (:func:`choose_small`)
whole-message lanes    ``_lanes.c``        none: the drivers read and write
                                           through the cores (:data:`lanes`)
capture decoding       ``_decode.c``       :mod:`iwarp._decode` (:func:`choose_decode`)
=====================  ==================  ===================================

A pure twin has the same functions, signatures, results and errors (its
docstrings are the contract of both; tests compare the two function by
function), so the call sites call what is chosen here without a branch of
their own and the accelerator changes speed only. The twins that lie above
this module (``iwarp._small`` and ``iwarp._decode`` need MPA's and DDP's
declarations) are handed in (:func:`choose_small`, :func:`choose_decode`):
the answer is this module's all the same.

Set ``IWARP_NO_ACCEL=1`` to run the pure-Python paths although the
extension is built (the test suite runs both ways); ``IWARP_NO_LANES=1``
turns the whole-message lanes off alone (the accelerator's framing path, to
compare), ``IWARP_NO_RECEIVE_LANE=1`` the receive lane alone.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

import iwarp._kernels as _kernels

if TYPE_CHECKING:
    from iwarp._speedups import DecodeKernels, Extension, Kernels, LaneKernels, SmallKernels

__all__ = [
    "ACTIVE",
    "LANES",
    "RECEIVE_LANE",
    "choose_decode",
    "choose_small",
    "describe",
    "kernels",
    "lanes",
    "speedups",
]


def _off(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _load() -> tuple[Extension | None, str]:
    if _off("IWARP_NO_ACCEL"):
        return None, "pure Python (IWARP_NO_ACCEL is set)"
    try:
        import iwarp._speedups as _speedups
    except ImportError:
        return None, "pure Python (the C accelerator is not built)"
    return _speedups, f"C accelerator ({_speedups.describe()})"


_C, _DESCRIPTION = _load()

#: Whether the C accelerator runs.
ACTIVE: Final = _C is not None
#: Whether the whole-message lanes run (:mod:`iwarp.rdma.lanes`): the
#: accelerator, unless ``IWARP_NO_LANES=1``.
LANES: Final = ACTIVE and not _off("IWARP_NO_LANES")
#: Whether the drivers take the receive lane: :data:`LANES`, unless
#: ``IWARP_NO_RECEIVE_LANE=1`` turns it off alone (to compare with the send
#: lanes still on).
RECEIVE_LANE: Final = LANES and not _off("IWARP_NO_RECEIVE_LANE")

#: The extension module when the C accelerator runs, else None.
speedups: Final[Extension | None] = _C
#: The FPDU kernels that run: ``iwarp._speedups`` or :mod:`iwarp._kernels`
#: (mypy checks the twin against the family's protocol here).
kernels: Final[Kernels] = _C if _C is not None else _kernels
#: The whole-message lanes' kernels when :data:`LANES`, else None.
lanes: Final[LaneKernels | None] = _C if LANES else None


def choose_small(pure: SmallKernels) -> SmallKernels:
    """The small-message lane's kernels: the extension's when the
    accelerator runs, else ``pure`` (:mod:`iwarp._small`, which lies above
    this module and is handed in by :mod:`iwarp.rdma.small`)."""
    return _C if _C is not None else pure


def choose_decode(pure: DecodeKernels) -> DecodeKernels:
    """The capture decoding kernels: the extension's when the accelerator
    runs, else ``pure`` (:mod:`iwarp._decode`, which lies above this module
    and is handed in by :mod:`iwarp.analyze.kernels`)."""
    return _C if _C is not None else pure


def describe() -> str:
    """One line saying which path runs, e.g. for ``iwarp --version``."""
    return _DESCRIPTION
