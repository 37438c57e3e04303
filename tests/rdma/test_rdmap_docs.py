"""docs/rdmap.md's complete program must run and print what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "rdmap.md"


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_complete_program_runs_and_prints_what_the_page_says() -> None:
    part = section(DOC.read_text(), "A complete program")
    match = re.search(r"```python\n(.*?)```", part, re.DOTALL)
    assert match is not None, "the section has no python block"
    code = match.group(1)
    # What the section promises to show: serve + connect, the STag/TO
    # exchange, and each of Send, RDMA Write and RDMA Read.
    for call in ("serve(", "connect(", "region.stag", ".send(", ".rdma_write(", ".rdma_read("):
        assert call in code, call
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    promised = re.search(r"It prints:\n\n((?:    .*\n)+)", part)
    assert promised is not None
    expected = [line[4:] for line in promised.group(1).splitlines()]
    assert result.stdout.splitlines() == expected


def test_the_atomics_program_runs_and_prints_what_the_page_says() -> None:
    part = section(DOC.read_text(), "Atomics and Immediate Data with the queue pairs")
    match = re.search(r"```python\n(.*?)```", part, re.DOTALL)
    assert match is not None, "the section has no python block"
    code = match.group(1)
    for call in ("serve(", "connect(", ".fetch_add(", ".compare_swap(", ".supports_atomics("):
        assert call in code, call
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    promised = re.search(r"It prints:\n\n((?:    .*\n)+)", part)
    assert promised is not None
    expected = [line[4:] for line in promised.group(1).splitlines()]
    assert result.stdout.splitlines() == expected
