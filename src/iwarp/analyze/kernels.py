"""The capture decoding kernels that run, chosen once: the C accelerator's
(``src/iwarp/_decode.c``) or their pure twin, :mod:`iwarp._decode` (the
choice is :func:`iwarp._accel.choose_decode`'s). The analyzer's modules call
:data:`kernels` and never ask which one it is.

The tables the kernels read (which opcodes are plain, which record types
and keys a JSON line has) are registered with both, through
:func:`register`: the pure writer of JSON lines also takes the records the C
writer declines, and the tests run either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import iwarp._accel as _accel
import iwarp._decode as _pure

if TYPE_CHECKING:
    from iwarp._speedups import DecodeKernels

__all__ = ["kernels", "pure", "register"]

#: The pure twin (always there).
pure: Final[DecodeKernels] = _pure
#: The kernels that run: the extension when the accelerator runs, else :data:`pure`.
kernels: Final[DecodeKernels] = _accel.choose_decode(_pure)


def register(setup: Callable[[DecodeKernels], None]) -> None:
    """Run ``setup`` (a table's registration) on the kernels that run and on
    the pure twin, once each."""
    setup(kernels)
    if kernels is not pure:
        setup(pure)
