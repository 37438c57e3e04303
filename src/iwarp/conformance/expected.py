"""Expected results of a target: the committed record a later run is compared with.

A file maps each case id to ``passed``, ``failed`` or ``skipped``, with the
reason for every case that did not pass. The interop suite runs
``iwarp conformance`` against Linux siw and fails when any case's verdict
(passed or failed) differs from the record (a fix or a regression: both are
worth a look); a case skipped for lack of the target's cooperation in one run
is listed, not failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

__all__ = ["compare", "load", "record", "unjudged"]


def load(name: str) -> dict[str, dict[str, str]]:
    """The record ``expected/NAME.json`` shipped with the package."""
    text = resources.files("iwarp.conformance").joinpath("expected", f"{name}.json").read_text()
    data: dict[str, dict[str, str]] = json.loads(text)["cases"]
    return data


def record(results: Sequence[Mapping[str, Any]], target: str) -> str:
    """A record (JSON text) of results as ``iwarp conformance --json`` prints them."""
    cases = {}
    for r in results:
        entry = {"status": str(r["status"])}
        if r["status"] != "passed":
            entry["reason"] = str(r["reason"])
        cases[str(r["id"])] = entry
    return json.dumps({"target": target, "cases": cases}, indent=1, sort_keys=False) + "\n"


def compare(
    expected: Mapping[str, Mapping[str, str]], results: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Differences between a record and a run, one line each; empty when they agree.

    Only verdicts are compared: a case that passed where the record says failed, or
    the reverse, or a recorded verdict whose case did not run at all. A case skipped
    in either (the target did not offer what it needs this time, e.g. no FPDU before
    the case's deadline) was not judged, so it cannot contradict the record; see
    :func:`unjudged` for those.
    """
    seen = {str(r["id"]): r for r in results}
    out = []
    for case_id, want in expected.items():
        got = seen.get(case_id)
        if got is None:
            out.append(f"{case_id}: expected {want['status']}, not run")
        elif {got["status"], want["status"]} <= _VERDICTS and got["status"] != want["status"]:
            out.append(
                f"{case_id}: expected {want['status']}, got {got['status']} "
                f"({got.get('reason') or 'no reason'})"
            )
    for case_id, got in seen.items():
        if case_id not in expected and got["status"] in _VERDICTS:
            out.append(f"{case_id}: new case, {got['status']} ({got.get('reason', '')})")
    return out


def unjudged(
    expected: Mapping[str, Mapping[str, str]], results: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Cases whose status differs from the record only by a skip on one side."""
    seen = {str(r["id"]): r for r in results}
    return [
        case_id
        for case_id, want in expected.items()
        if (got := seen.get(case_id)) is not None
        and got["status"] != want["status"]
        and "skipped" in {got["status"], want["status"]}
    ]


#: Statuses that are a verdict on the target (a skip is not).
_VERDICTS = frozenset({"passed", "failed"})
