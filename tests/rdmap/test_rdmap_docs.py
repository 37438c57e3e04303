"""docs/rdmap.md draws the state machine generated from the transition table."""

from __future__ import annotations

from pathlib import Path

from iwarp.rdmap.state import TRANSITIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "rdmap.md"


def test_doc_diagram_matches_the_table() -> None:
    text = DOC.read_text()
    assert f"```mermaid\n{TRANSITIONS.mermaid()}\n```" in text
