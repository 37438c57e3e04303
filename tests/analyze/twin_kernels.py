"""The decode kernels for tests: which run, the pure twin, and a context
that runs the analyzer on the pure twin although the C accelerator is built
(as ``IWARP_NO_ACCEL=1`` does for a whole process)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import iwarp.cli.decode
from iwarp.analyze import capture, mpa, records
from iwarp.analyze import kernels as chosen

#: The kernels that run (the extension, or the pure twin without it).
KERNELS: Any = chosen.kernels
#: The pure twin, iwarp._decode.
PURE: Any = chosen.pure
#: Whether the C kernels run (else both names are the pure twin).
HAVE_C = KERNELS is not PURE
needs_c = pytest.mark.skipif(
    not HAVE_C, reason="the C accelerator is not built or IWARP_NO_ACCEL is set"
)
#: The modules that call the kernels, each through its own name ``kernels``.
USERS = (capture, mpa, records, iwarp.cli.decode)


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """The analyzer's modules call the pure twin until the block ends."""
    saved = [getattr(m, "kernels") for m in USERS]  # noqa: B009
    for module in USERS:
        setattr(module, "kernels", PURE)  # noqa: B010
    try:
        yield
    finally:
        for module, kernel in zip(USERS, saved, strict=True):
            setattr(module, "kernels", kernel)  # noqa: B010
