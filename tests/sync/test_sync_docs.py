"""docs/sync.md opens with a complete program: it must run and print what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "sync.md"


def first_python_block(text: str) -> str:
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, "docs/sync.md has no python block"
    return match.group(1)


def test_the_opening_example_runs_and_prints_what_the_page_says() -> None:
    text = DOC.read_text()
    code = first_python_block(text)
    assert text.index("```python") < text.index("## "), "the example must open the page"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    promised = re.search(r"It prints:\n\n((?:    .*\n)+)", text)
    assert promised is not None
    expected = [line[4:] for line in promised.group(1).splitlines()]
    assert result.stdout.splitlines() == expected
