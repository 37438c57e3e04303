"""The case catalogue: ids, quotes, selection; the CLI's listing."""

from __future__ import annotations

import re

from iwarp.cli import main
from iwarp.conformance import all_cases
from iwarp.conformance.model import Level, select
from iwarp.conformance.terms import TargetRole

ID = re.compile(r"^(rfc5044|rfc6581|rfc5041|rfc5040|rfc7306|draft-culley)/[0-9A-Z.]+/\d+$")


def test_ids_are_spec_section_number() -> None:
    cases = all_cases()
    assert len({c.id for c in cases}) == len(cases)
    for item in cases:
        assert ID.match(item.id), item.id
        assert "§" in item.quote or "RFC" in item.quote, item.id
        assert '"' in item.quote, f"{item.id} quotes no text"


def test_prefix_and_strict_select() -> None:
    cases = all_cases()
    must = select(cases, ["rfc6581/"])
    assert must and all(c.id.startswith("rfc6581/") for c in must)
    assert all(c.level is Level.MUST for c in must)
    strict = select(cases, ["rfc6581/"], strict=True)
    assert len(strict) > len(must)
    only_i = select(cases, role=TargetRole.INITIATOR)
    assert all(TargetRole.INITIATOR in c.roles for c in only_i)


def test_list_prints_cases(capsys: object) -> None:
    assert main(["conformance", "--list", "rfc5044/7.1.1/1"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "rfc5044/7.1.1/1 " in out and "MPA ID Rep Frame" in out


def test_bad_usage_is_exit_2(capsys: object) -> None:
    assert main(["conformance", "127.0.0.1"]) == 2
    assert main(["conformance", "--list", "nothing/"]) == 2


def test_docs_list_every_case() -> None:
    """docs/conformance.md has a row for every case (with siw's result)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    missing = [c.id for c in all_cases() if f"| `{c.id}` |" not in doc]
    assert not missing, missing
