"""Verdicts proven in the Initiator role: a mutant ``iwarp connect`` per MUST rule of
the Initiator fails exactly that rule's cases, and the unmutated one passes them.

The target is ``iwarp connect`` (reconnecting once per case, initiator_loop.py)
with one switch of ``broken_target.py`` on. The rules are those that some
Initiator-only MUST case ``covers`` (the rules of test_against_iwarp's
``BOTH_ROLES`` are proven there, in both roles). One connect-loop process
runs all the cases of a run.

The default suite runs a fixed sample (two mutants against their own cases,
the unmutated Initiator against every covered case); the whole matrix (every
Initiator-only MUST case against every Initiator mutant) is the ``slow`` test
``test_the_whole_initiator_matrix``.
"""

from __future__ import annotations

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Case, Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import InitiatorTarget, Runner
from iwarp.conformance.terms import Need, TargetRole

from .broken_target import INITIATOR_VARIANTS, RULES
from .conftest import TARGET_TIMEOUT, connecting, switched_connecting
from .test_against_iwarp import _free_port
from .test_mutants import BOTH_ROLES, CULLEY_ONLY, NOT_RULES, RESPONDER_RULES

#: ``iwarp connect`` options a rule's cases need: a peer-to-peer Request (A=1) for the
#: RTR cases, a Request with C=0 for the CRC-off one. Every other rule runs with none.
OPTIONS: dict[str, list[str]] = {
    "rtr-offer": ["--p2p"],
    "rtr-choice": ["--p2p"],
    "rtr-unmatched": ["--p2p"],
    "crc-always": ["--no-crc"],
}
#: Mutants whose Request is improperly formatted: every case reads the Request first, so
#: every case fails, each for the Request (the covered ones included).
EVERY_REQUEST = {"request-key", "request-rev", "request-pd", "request-enhanced"}


def _initiator_only() -> list[Case]:
    """The MUST cases of the Initiator role alone (the draft-culley/ ones are proven in
    test_culley.py)."""
    return [
        c
        for c in select(all_cases(), role=TargetRole.INITIATOR)
        if c.roles == {TargetRole.INITIATOR} and Need.CULLEY not in c.needs
    ]


def _rules() -> list[str]:
    tags = {tag for c in _initiator_only() for tag in c.covers}
    return sorted(tags - BOTH_ROLES - NOT_RULES)


def _options(rule: str) -> list[str]:
    return ["--count", "1", "--timeout", TARGET_TIMEOUT, *OPTIONS.get(rule, [])]


def _run(rule: str | None, cases: list[Case], options: list[str]) -> list[Result]:
    """Run ``cases`` against ``iwarp connect OPTIONS`` (``rule``'s mutant, or the real one)."""
    port = _free_port()
    target = connecting(port, options) if rule is None else switched_connecting(rule, port, options)
    with target:
        return Runner(InitiatorTarget(port), timeout=2.0).run(cases)


def _show(results: list[Result]) -> str:
    return "\n".join(format_result(r, colour=False) for r in results)


def test_every_initiator_rule_has_a_mutant() -> None:
    assert set(_rules()) <= set(RULES)
    assert len(_rules()) == 19, _rules()


def test_every_mutant_is_proven_in_a_role() -> None:
    """Each mutant runs in the Responder matrix, in this one, in both roles in
    test_against_iwarp, or in a culley run in test_culley."""
    assert set(RULES) == set(RESPONDER_RULES) | set(_rules()) | BOTH_ROLES | CULLEY_ONLY


def test_every_initiator_must_case_has_a_mutant_of_its_own() -> None:
    """Each Initiator-only MUST case is covered by a rule besides ``terminate`` (which
    every Terminate case shares)."""
    uncovered = [c.id for c in _initiator_only() if not set(c.covers) - {"terminate"}]
    assert not uncovered


@pytest.mark.parametrize("rule", ["reply-r", "rtr-choice"])
def test_a_sample_initiator_mutant_fails_its_cases(rule: str) -> None:
    covered = [c for c in _initiator_only() if rule in c.covers]
    results = _run(rule, covered, _options(rule))
    not_failed = [r for r in results if r.status is not Status.FAILED]
    assert not not_failed, _show(not_failed)


@pytest.mark.parametrize("extra", [[], ["--p2p"], ["--no-crc"]])
def test_the_initiator_passes_the_cases_of_its_mutants(extra: list[str]) -> None:
    """The unmutated ``iwarp connect`` passes every case an Initiator mutant run with the
    same options must fail (not one skipped: each case judged it)."""
    rules = [r for r in _rules() if OPTIONS.get(r, []) == extra]
    cases = [c for c in _initiator_only() if set(c.covers) & set(rules)]
    results = _run(None, cases, _options(rules[0]))
    not_passed = [r for r in results if r.status is not Status.PASSED]
    assert not not_passed, _show(not_passed)


#: Responder mutants that break shared code, so that ``iwarp connect`` breaks the rule too,
#: and that some case of both roles covers and judges against it (the others need a
#: buffer the Initiator does not advertise, and skip). Left out: ``crc-sent`` (it rewrites
#: only the Responder's FPDUs) and ``tagged-opcode`` (``rfc5040/7.2/6`` also accepts a
#: tagged buffer error, what a Write to an STag the Initiator never advertised gets).
SHARED = [
    "atomic-stag",
    "crc-sent-marked",
    "ddp-version",
    "immediate-size",
    "invalidate",
    "markers",
    "message-length",
    "mo",
    "msn",
    "opcode",
    "qn",
    "rdmap-version",
    "read-stag",
    "stag",
    "terminate-queue",
    "zero-read",
    "zero-read-stag",
]


@pytest.mark.slow
@pytest.mark.parametrize("rule", SHARED)
def test_a_responder_mutant_fails_its_cases_in_the_initiator_role(rule: str) -> None:
    """The cases of both roles that a Responder rule covers, against ``iwarp connect`` with
    the rule broken: none passes, and the ones the Initiator lets run fail."""
    cases = [
        c
        for c in select(all_cases(), role=TargetRole.INITIATOR)
        if rule in c.covers and Need.CULLEY not in c.needs
    ]
    results = _run(rule, cases, _options(rule))
    passed = [r for r in results if r.status is Status.PASSED]
    assert not passed, _show(passed)
    assert any(r.status is Status.FAILED for r in results), _show(results)


@pytest.mark.slow
@pytest.mark.parametrize("rule", _rules())
def test_the_whole_initiator_matrix(rule: str) -> None:
    """Every Initiator-only MUST case against the mutant: exactly its rule's cases fail
    (none of them skipped); a mutant whose Request is improperly formatted fails every
    case, each for the Request."""
    cases = _initiator_only()
    results = _run(rule, cases, _options(rule))
    failed = {r.case.id for r in results if r.status is Status.FAILED}
    covered = {c.id for c in cases if rule in c.covers}
    assert covered, f"no Initiator-only MUST case covers {rule}"
    if rule in EVERY_REQUEST:
        assert failed == {c.id for c in cases}, _show(
            [r for r in results if r.status is not Status.FAILED]
        )
        wrong = [r for r in results if "MPA Request is improperly formatted" not in r.reason]
        assert not wrong, _show(wrong)
        return
    assert failed == covered, _show([r for r in results if r.case.id in failed ^ covered])


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(INITIATOR_VARIANTS))
@pytest.mark.parametrize("extra", [[], ["--p2p"]])
def test_an_initiator_variant_fails_no_case(variant: str, extra: list[str]) -> None:
    """Every Initiator-only MUST case against a conforming Initiator that differs from
    ``iwarp connect`` only in what the RFCs leave open (one with nothing to say after the
    Reply): none fails."""
    cases = _initiator_only()
    options = ["--count", "1", "--timeout", TARGET_TIMEOUT, *extra]
    results = _run(variant, cases, options)
    failed = [r for r in results if r.status is Status.FAILED]
    assert not failed, _show(failed)
    assert sum(r.status is Status.PASSED for r in results) > len(cases) // 2
