"""Every adapter module stays short: under 500 lines.

An adapter holds only its way of waiting (docs/design.md); a module that
grows past this has taken on a second job, which belongs in a module of its
own (as the drivers' write sides did: iwarp.sync._writer,
iwarp.asyncio._writer).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import iwarp

PACKAGE = Path(iwarp.__file__).parent
#: Lines an adapter module may hold at most.
LIMIT = 499
MODULES = sorted(
    path.relative_to(PACKAGE).as_posix()
    for adapter in ("sync", "asyncio")
    for path in (PACKAGE / adapter).glob("*.py")
)


def test_the_adapters_are_found() -> None:
    assert "sync/_driver.py" in MODULES and "asyncio/driver.py" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_an_adapter_module_is_under_500_lines(module: str) -> None:
    lines = len((PACKAGE / module).read_text(encoding="utf-8").splitlines())
    assert lines <= LIMIT, f"{module} has {lines} lines; split it (at most {LIMIT})"
