"""Comparing a run with a committed expected-results record: verdicts, not skips."""

from __future__ import annotations

from typing import Any

from iwarp.conformance.expected import compare, record, unjudged

RECORD = {
    "a/1": {"status": "passed"},
    "a/2": {"status": "failed", "reason": "TERM nibbles swapped"},
    "a/3": {"status": "skipped", "reason": "no FPDU"},
    "a/4": {"status": "passed"},
}


def _run(**statuses: str) -> list[dict[str, Any]]:
    return [
        {"id": case.replace("_", "/"), "status": st, "reason": "why"}
        for case, st in statuses.items()
    ]


def test_same_verdicts_agree() -> None:
    run = _run(a_1="passed", a_2="failed", a_3="skipped", a_4="passed")
    assert compare(RECORD, run) == []
    assert unjudged(RECORD, run) == []


def test_a_flipped_verdict_is_a_difference_both_ways() -> None:
    run = _run(a_1="failed", a_2="passed", a_3="skipped", a_4="passed")
    diff = compare(RECORD, run)
    assert [line.split(":")[0] for line in diff] == ["a/1", "a/2"]
    assert "expected passed, got failed" in diff[0]


def test_a_skip_on_either_side_is_listed_not_failed() -> None:
    run = _run(a_1="skipped", a_2="failed", a_3="failed", a_4="passed")
    assert compare(RECORD, run) == []
    assert unjudged(RECORD, run) == ["a/1", "a/3"]


def test_a_case_that_did_not_run_or_a_new_verdict_is_a_difference() -> None:
    run = _run(a_1="passed", a_2="failed", a_3="skipped", a_5="failed", a_6="skipped")
    diff = compare(RECORD, run)
    assert any(line.startswith("a/4: expected passed, not run") for line in diff)
    assert any(line.startswith("a/5: new case, failed") for line in diff)
    assert not any(line.startswith("a/6") for line in diff)


def test_a_record_round_trips_through_compare() -> None:
    import json

    run = _run(a_1="passed", a_2="failed", a_3="skipped")
    cases = json.loads(record(run, "t"))["cases"]
    assert compare(cases, run) == []
