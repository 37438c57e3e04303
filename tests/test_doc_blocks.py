"""Every Python block of the README and docs/ runs as it is, or says in its
first line that it is a fragment (and then at least parses, awaits allowed)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "# Fragment"


def blocks() -> list[tuple[str, str]]:
    """(page:line, code) of every ```python block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text[: match.start()].count("\n") + 2  # the block's first line
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


BLOCKS = blocks()
RUNNABLE = [(where, code) for where, code in BLOCKS if not code.startswith(FRAGMENT)]


def test_there_are_blocks_of_both_kinds() -> None:
    assert len(RUNNABLE) >= 5 and len(BLOCKS) - len(RUNNABLE) >= 10


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_every_block_parses(where: str, code: str) -> None:
    # A fragment may await at its top level (it runs inside a coroutine).
    compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | ast.PyCF_ONLY_AST)


@pytest.mark.parametrize(("where", "code"), RUNNABLE, ids=[where for where, _ in RUNNABLE])
def test_a_block_that_is_no_fragment_runs_as_it_is(where: str, code: str, tmp_path: Path) -> None:
    # Bounded: each talks to itself over loopback, if at all.
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"{where}:\n{proc.stderr}"
