"""Verdicts proven: a mutant target per MUST rule fails exactly that rule's cases, and
check-order variants of a conforming target pass every case.

The target is ``iwarp listen`` with one switch of ``broken_target.py`` on. A
mutant breaks one MUST rule (``RULES``): every case whose ``covers`` names the
rule must fail against it. A variant (``VARIANTS``) changes only what the RFCs
leave open (the order of the DDP and RDMAP checks, which of two allowed error
types is reported): every case must pass against it.

The default suite runs a fixed sample (a few covered cases per mutant, the
error cases per variant); the whole matrix (every MUST case against every
mutant, every case against every variant) is the ``slow`` tests
``test_the_whole_matrix_*``, one per mutant and per variant and buffer (left
out by ``tools/test --quick``).
"""

from __future__ import annotations

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Case, Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import ResponderTarget, Runner
from iwarp.conformance.terms import TargetRole

from .broken_target import RULES, VARIANTS
from .conftest import TARGET_TIMEOUT, switched

# Each mutant is an iwarp listen with one rule broken, run through its cases: seconds each.
pytestmark = pytest.mark.slow

#: Rules the older test (test_against_iwarp) proves in both roles, strict included.
BOTH_ROLES = {"crc", "pd-length", "terminate"}
#: The buffer a mutant's listener advertises: Read cases need a readable one.
OP = {"read-bounds": "read"}
#: Tags that name no rule of the RFCs (how a case learns a buffer's rights).
NOT_RULES = {"rights-by-terminate"}


def _must(role: TargetRole = TargetRole.RESPONDER) -> list[Case]:
    return select(all_cases(), role=role)


def _run(switch: str, cases: list[Case], op: str = "write") -> list[Result]:
    with switched(switch, ["--op", op, "--timeout", TARGET_TIMEOUT]) as port:
        return Runner(ResponderTarget("127.0.0.1", port), timeout=2.0).run(cases)


def _sample(cases: list[Case]) -> list[Case]:
    """The first, middle and last of ``cases`` (a fixed sample: the same every run)."""
    picks = {0, len(cases) // 2, len(cases) - 1}
    return [cases[i] for i in sorted(picks)]


def _show(results: list[Result]) -> str:
    return "\n".join(format_result(r, colour=False) for r in results)


def test_every_rule_a_case_covers_has_a_mutant() -> None:
    tags = {tag for item in all_cases() for tag in item.covers} - NOT_RULES
    assert tags == set(RULES), tags ^ set(RULES)


@pytest.mark.parametrize("rule", sorted(set(RULES) - BOTH_ROLES))
def test_a_mutant_fails_the_cases_of_its_rule(rule: str) -> None:
    covered = [c for c in _must() if rule in c.covers]
    assert covered, f"no MUST case covers {rule}"
    results = _run(rule, _sample(covered), OP.get(rule, "write"))
    not_failed = [r for r in results if r.status is not Status.FAILED]
    assert not not_failed, _show(not_failed)


ERROR_CASES = ["rfc5041/7.2/", "rfc5040/7.2/"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_check_order_variant_passes_the_error_cases(variant: str) -> None:
    cases = select(all_cases(), ERROR_CASES, role=TargetRole.RESPONDER)
    results = _run(variant, cases)
    failed = [r for r in results if r.status is Status.FAILED]
    assert not failed, _show(failed)
    passed = {r.case.id for r in results if r.status is Status.PASSED}
    assert {"rfc5041/7.2/4", "rfc5040/7.2/4", "rfc5040/7.2/15"} <= passed


def test_stags_of_another_connection_are_refused() -> None:
    """With STags numbered apart per connection, another connection's STag is judged."""
    cases = select(all_cases(), ["rfc5041/7.2/18", "rfc5040/7.2/17"])
    for op in ("write", "read"):
        results = _run("distinct-stags", cases, op)
        passed = {r.case.id for r in results if r.status is Status.PASSED}
        assert passed == {c.id for c in cases}, _show(results)


def test_the_operation_variant_answers_remote_operation() -> None:
    """The variant is no no-op: its Terminate for an Invalidate is type 2, and it passes."""
    (result,) = _run("invalidate-operation", select(all_cases(), ["rfc5040/7.2/15"]))
    assert result.status is Status.PASSED, _show([result])
    result_text = format_result(result, colour=False, verbose=True)
    assert "Terminate layer 0 type 2 code 0x09" in result_text


@pytest.mark.slow
@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_whole_matrix_mutant(rule: str) -> None:
    """Every MUST Responder case against the mutant: exactly its rule's cases fail, and
    none of them is skipped (the rules proven in both roles elsewhere may skip some)."""
    must = _must()
    results = _run(rule, must, OP.get(rule, "write"))
    failed = {r.case.id for r in results if r.status is Status.FAILED}
    covered = {c.id for c in must if rule in c.covers}
    skipped = {r.case.id for r in results if r.status is Status.SKIPPED} & covered
    if rule == "terminate":
        covered |= {
            r.case.id
            for r in results
            if "rights-by-terminate" in r.case.covers and r.status is not Status.SKIPPED
        }
    assert failed == covered - skipped, _show(
        [r for r in results if r.case.id in failed ^ (covered - skipped)]
    )
    assert rule in BOTH_ROLES or not skipped, sorted(skipped)


@pytest.mark.slow
@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_whole_matrix_variant(variant: str, op: str) -> None:
    """Every Responder case, SHOULD included, against the variant (with a writable and
    a readable buffer): none fails."""
    cases = select(all_cases(), strict=True, role=TargetRole.RESPONDER)
    results = _run(variant, cases, op)
    failed = [r for r in results if r.status is Status.FAILED]
    assert not failed, _show(failed)
    assert sum(r.status is Status.PASSED for r in results) > len(cases) // 2
