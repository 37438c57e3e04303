"""The accelerator the suite tests is the one its C sources build.

setup.py treats a failed compile as "no accelerator" (users without a
compiler still get the pure path), so a C error shows only as a warning
that ``pip -q`` hides, and a module built earlier stays where it was. CI
sets ``IWARP_REQUIRE_ACCEL=1``: there, a missing module fails the suite;
everywhere, a module older than a C source it is built from does.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

import iwarp


def test_the_accelerator_is_there_when_required() -> None:
    if not os.environ.get("IWARP_REQUIRE_ACCEL"):
        pytest.skip("IWARP_REQUIRE_ACCEL is not set (CI sets it)")
    try:
        importlib.import_module("iwarp._speedups")
    except ImportError as exc:  # pragma: no cover - the failure itself
        pytest.fail(f"the C accelerator was not built: {exc} (pip install -e . -v shows why)")


def test_the_accelerator_is_not_older_than_its_sources() -> None:
    try:
        speedups = importlib.import_module("iwarp._speedups")
    except ImportError:
        pytest.skip("no C accelerator built here")
    built = Path(str(speedups.__file__))
    package = Path(iwarp.__file__).parent
    sources = [*package.glob("_*.c"), *package.glob("_*.h")]
    if not sources:
        pytest.skip("an installed package: no C sources beside it")
    newest = max(sources, key=lambda p: p.stat().st_mtime)
    assert built.stat().st_mtime >= newest.stat().st_mtime, (
        f"{built.name} is older than {newest.name}: its last build failed or did not run "
        "(pip install -e . -v shows the compiler's errors)"
    )
