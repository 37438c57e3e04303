"""A Responder that speaks RFC 5044 only (Rev 1; it closes on Rev 2 Requests): every case
that builds a Request builds it for Rev 1 or declares that it needs Rev 2 and skips, so
a conforming Rev 1 target fails no MUST case, and a Rev 1 target with one rule broken
still fails the cases of that rule that it runs.
"""

from __future__ import annotations

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Case, Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import ResponderTarget, Runner
from iwarp.conformance.terms import Need, TargetRole

from .conftest import TARGET_TIMEOUT, listening, switched
from .test_mutants import BOTH_ROLES, EVERY_REPLY, OPTIONS, RESPONDER_RULES, matrix_cases

REV1 = ["--mpa-rev", "1"]
#: Mutants whose rule a Rev 1 target cannot break, or not visibly: the RFC 6581 startup and
#: the IRD (a Rev 1 Responder closes Rev 2 Requests and states no IRD), unknown revisions
#: (taken as Rev 2, they are closed all the same), and those that need options that change
#: the revision.
NOT_REV1 = {
    "ird",
    "rev",
    "enhanced-reply",
    "unenhanced-reply",
    "rev1",
    "short-enhanced",
    "ord",
    "ird-ord-none",
    "peer-to-peer",
    "rtr-bits",
    "write-rtr",
    "rev0",
    "markers",
    "crc-sent-marked",
}


def _must() -> list[Case]:
    return [c for c in select(all_cases(), role=TargetRole.RESPONDER) if Need.CULLEY not in c.needs]


def _run(switch: str | None, options: list[str], cases: list[Case] | None = None) -> list[Result]:
    """``cases`` (every MUST Responder case by default) against a Rev 1 ``iwarp listen``,
    ``switch``'s mutant or the real one."""
    opts = [*options, *REV1, "--timeout", TARGET_TIMEOUT]
    with listening(opts) if switch is None else switched(switch, opts) as port:
        runner = Runner(ResponderTarget("127.0.0.1", port), timeout=2.0)
        results = runner.run(_must() if cases is None else cases, jobs=4)
    # The probe found a Rev 1 target (unless every Reply is broken: none is accepted).
    assert runner.style.revision == 1 or switch in EVERY_REPLY
    return results


def _show(results: list[Result]) -> str:
    return "\n".join(format_result(r, colour=False) for r in results)


@pytest.mark.parametrize("op", ["write", "read"])
def test_a_rev1_responder_fails_no_must_case(op: str) -> None:
    results = _run(None, ["--op", op])
    failed = [r for r in results if r.status is Status.FAILED]
    assert not failed, _show(failed)
    assert sum(r.status is Status.PASSED for r in results) > 60
    # The RFC 6581 cases and the one Rev 2 private-data case skip, saying why.
    skipped = {r.case.id: r.reason for r in results if r.status is Status.SKIPPED}
    assert "closes on Rev 2 Requests and takes Rev 1" in skipped["rfc5044/7.1.1/29"]


#: The rules a Rev 1 target breaks visibly, each a mutant run as a Rev 1 Responder.
REV1_RULES = sorted(set(RESPONDER_RULES) - NOT_REV1)


@pytest.mark.slow
@pytest.mark.parametrize("rule", REV1_RULES)
def test_a_rev1_mutant_fails_exactly_the_cases_of_its_rule_it_runs(rule: str) -> None:
    """Each mutant, as a Rev 1 Responder: the cases of its rule that run (not skipped for
    Rev 2) fail, and no other case does (its bystanders of :func:`matrix_cases`; every
    case with ``IWARP_WHOLE_MATRIX=1``)."""
    cases = matrix_cases(rule, _must(), REV1_RULES)
    results = _run(rule, OPTIONS.get(rule, ["--op", "write"]), cases)
    failed = {r.case.id for r in results if r.status is Status.FAILED}
    ran = {r.case.id for r in results if r.status is not Status.SKIPPED}
    covered = {r.case.id for r in results if rule in r.case.covers} & ran
    if rule in EVERY_REPLY:
        assert covered <= failed, sorted(covered - failed)
        return
    if rule == "terminate":
        covered |= {r.case.id for r in results if "rights-by-terminate" in r.case.covers} & ran
    assert covered or rule in BOTH_ROLES, f"no case of {rule} runs against a Rev 1 target"
    assert failed == covered, _show([r for r in results if r.case.id in failed ^ covered])
