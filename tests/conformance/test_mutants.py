"""Verdicts proven: a mutant target per MUST rule fails exactly that rule's cases, and
check-order variants of a conforming target pass every case.

The target is ``iwarp listen`` with one switch of ``broken_target.py`` on. A
mutant breaks one MUST rule (``RULES``): every case whose ``covers`` names the
rule must fail against it. A variant (``VARIANTS``) changes only what the RFCs
leave open (the order of the DDP and RDMAP checks, which of two allowed error
types is reported): every case must pass against it.

The default suite runs a fixed sample (the error cases per variant);
the ``slow`` tests (left out by ``tools/test --quick``) run the matrix: each
mutant against every case of its rule and a slice of the others
(:func:`matrix_cases`: each case is one mutant's bystander, so a tag missing
from any case can still show), every case against every variant.
``IWARP_WHOLE_MATRIX=1`` runs every MUST case against every mutant (for a
change to the cases' tags or to broken_target.py: minutes).
"""

from __future__ import annotations

import os

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Case, Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import ResponderTarget, Runner
from iwarp.conformance.terms import Need, TargetRole

from .broken_target import RULES, VARIANTS
from .conftest import TARGET_TIMEOUT, listening, switched

# Each mutant is an iwarp listen with one rule broken, run through its cases: seconds each.
pytestmark = pytest.mark.slow

#: Rules the older test (test_against_iwarp) proves in both roles, strict included.
BOTH_ROLES = {"crc", "pd-length", "terminate"}
#: The listener's options for a mutant whose cases need more than a writable buffer: a
#: readable one (Read cases; a 1-octet Read brings the padded FPDU of rfc5044/4.1/1), CRC
#: off (rfc5044/4.1/3).
OPTIONS = {
    "read-bounds": ["--op", "read"],
    "read-sink": ["--op", "read"],
    "read-order": ["--op", "read"],
    "read-source-to": ["--op", "read"],
    "read-last": ["--op", "read"],
    "pad-sent": ["--op", "read"],
    "crc-always": ["--op", "write", "--no-crc"],
    "markers": ["--op", "write", "--permissive"],
    "crc-sent-marked": ["--op", "write", "--permissive"],
    "marker-ptr": ["--op", "read"],
    "ird": ["--op", "read"],
}
#: Mutants that break every Reply built for a Request the target takes: every case that reads
#: one fails, each for the Reply; a case that passes never read a Reply (it only needed a
#: close). A skip (a Rev 1 Reply to a Rev 0 Request, built apart) judges nothing.
EVERY_REPLY = {"reply-key", "reply-pd"}
#: Tags that name no rule of the RFCs (how a case learns a buffer's rights).
NOT_RULES = {"rights-by-terminate"}
#: Rules that only draft-culley/ cases cover: test_culley.py proves them, in a culley run.
CULLEY_ONLY = {"marker-checked"}


def _must(role: TargetRole = TargetRole.RESPONDER) -> list[Case]:
    """The MUST cases of ``role`` that an RFC 5044 run judges (the draft-culley/ ones are
    proven in test_culley.py, in a culley run)."""
    return [c for c in select(all_cases(), role=role) if Need.CULLEY not in c.needs]


#: The rules some Responder MUST case covers (the others are the Initiator's own, proven in
#: test_initiator_mutants.py).
RESPONDER_RULES = sorted({tag for c in _must() for tag in c.covers} - NOT_RULES)


def _options(rule: str) -> list[str]:
    return OPTIONS.get(rule, ["--op", "write"])


#: Cases run at once against a mutant: each has its own connection, most of a case's time is
#: waiting for the target, and the matrix is most of the suite's time (``iwarp conformance
#: -j 4`` does the same for users; the verdicts are the same as one at a time).
JOBS = 4


def _run(switch: str, cases: list[Case], options: list[str] | None = None) -> list[Result]:
    options = ["--op", "write"] if options is None else options
    with switched(switch, [*options, "--timeout", TARGET_TIMEOUT]) as port:
        return Runner(ResponderTarget("127.0.0.1", port), timeout=2.0).run(cases, jobs=JOBS)


#: Every MUST case against every mutant, instead of each mutant's own cases and a slice.
WHOLE_MATRIX = os.environ.get("IWARP_WHOLE_MATRIX") == "1"


def matrix_cases(rule: str, cases: list[Case], rules: list[str]) -> list[Case]:
    """The cases of ``cases`` to run against ``rule``'s mutant: those that cover it (each
    must fail; for ``terminate`` also those that learn a buffer's rights from its
    Terminate) and, as bystanders that must not fail, every ``len(rules)``-th other
    case, starting at the rule's place in ``rules``.

    Over all the mutants each case is some mutant's bystander, so a tag missing from a
    case, or a mutant that breaks more than its rule, still fails a run; the pairs are
    fixed (the same every run). A mutant's run costs its own cases and two or three
    more, not the whole catalogue (which ``WHOLE_MATRIX`` runs)."""
    if WHOLE_MATRIX:
        return cases
    own = {rule, "rights-by-terminate"} if rule == "terminate" else {rule}
    at = rules.index(rule)
    return [c for i, c in enumerate(cases) if own & c.covers or i % len(rules) == at]


def _show(results: list[Result]) -> str:
    return "\n".join(format_result(r, colour=False) for r in results)


def test_every_rule_a_case_covers_has_a_mutant() -> None:
    tags = {tag for item in all_cases() for tag in item.covers} - NOT_RULES
    assert tags == set(RULES), tags ^ set(RULES)


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
        results = _run("distinct-stags", cases, ["--op", op])
        passed = {r.case.id for r in results if r.status is Status.PASSED}
        assert passed == {c.id for c in cases}, _show(results)


def test_the_operation_variant_answers_remote_operation() -> None:
    """The variant is no no-op: its Terminate for an Invalidate is type 2, and it passes."""
    (result,) = _run("invalidate-operation", select(all_cases(), ["rfc5040/7.2/15"]))
    assert result.status is Status.PASSED, _show([result])
    result_text = format_result(result, colour=False, verbose=True)
    assert "Terminate layer 0 type 2 code 0x09" in result_text


@pytest.mark.slow
@pytest.mark.parametrize("rule", RESPONDER_RULES)
def test_a_mutant_fails_exactly_its_cases(rule: str) -> None:
    """The mutant against its rule's MUST Responder cases and its bystanders
    (:func:`matrix_cases`): exactly its rule's cases fail, and none of them is skipped
    (the rules proven in both roles elsewhere may skip some)."""
    must = _must()
    # A broken Reply fails every case that reads one: those mutants judge every case.
    picked = must if rule in EVERY_REPLY else matrix_cases(rule, must, RESPONDER_RULES)
    results = _run(rule, picked, _options(rule))
    failed = {r.case.id for r in results if r.status is Status.FAILED}
    covered = {c.id for c in must if rule in c.covers}
    if rule in EVERY_REPLY:
        assert covered <= failed, sorted(covered - failed)
        for r in results:
            got_reply = any("got MPA Reply" in line for line in r.observed)
            if r.status is Status.FAILED:
                assert "MPA Reply" in r.reason, _show([r])
            elif r.status is Status.PASSED:
                assert not got_reply, _show([r])
        return
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
    results = _run(variant, cases, ["--op", op])
    failed = [r for r in results if r.status is Status.FAILED]
    assert not failed, _show(failed)
    assert sum(r.status is Status.PASSED for r in results) > len(cases) // 2


REV0 = ["rfc5044/C/4", "rfc5044/C/5"]


@pytest.mark.parametrize("options", [["--permissive"], ["--mpa-rev", "0"]])
def test_rev0_data_transfer_passes_a_target_that_runs_rev0(options: list[str]) -> None:
    """A permissive RFC 5044 Responder (RDMAC mode) and a Rev 0 one pass the Rev 0 data
    cases; the CRC is checked over the markers both ways."""
    results = _run("read-write", select(all_cases(), REV0), ["--op", "write", *options])
    assert [r.status for r in results] == [Status.PASSED] * len(REV0), _show(results)


@pytest.mark.parametrize(
    ("options", "why"),
    [(["--permissive"], "RDMAC mode (permissive)"), (["--mpa-rev", "0"], "Rev 0 (draft) peer")],
)
def test_a_rev0_reply_is_not_judged_by_the_non_permissive_case(
    options: list[str], why: str
) -> None:
    """rfc5044/C/1 judges a Non-permissive Responder; a Rev 0 Reply (RDMAC mode with M=1,
    or the Rev 0 draft's M=0, which only the informational Appendix C rules out) skips."""
    (result,) = _run(
        "read-write", select(all_cases(), ["rfc5044/C/1"]), ["--op", "write", *options]
    )
    assert result.status is Status.SKIPPED and why in result.reason, _show([result])


def test_rev0_data_transfer_skips_a_non_permissive_target() -> None:
    (first, second) = _run("read-write", select(all_cases(), REV0), ["--op", "write"])
    for result in (first, second):
        assert result.status is Status.SKIPPED, _show([result])
        assert "iwarp listen --permissive" in result.reason


def test_rev0_data_transfer_fails_a_target_without_a_crc_check() -> None:
    (result,) = _run("crc", select(all_cases(), ["rfc5044/C/5"]), ["--op", "write", "--permissive"])
    assert result.status is Status.FAILED, _show([result])


#: The cases that pass a target which drops a broken carrier silently (RFC 5044 §8 allows it).
SILENCE_CASES = ["rfc5044/8/", "rfc5044/7.1.2/16"]


def test_silence_passes_no_case_of_a_target_that_answers_nothing() -> None:
    """A Responder that sends no FPDU at all (not even the answer to a valid zero-length Read
    Request) passes no case that accepts silence: each skips, saying the carrier was not
    answered when valid."""
    cases = [c for c in select(all_cases(), SILENCE_CASES, strict=True) if "crc" in c.covers]
    results = _run("mute", cases)
    assert len(results) >= 6
    not_skipped = [r for r in results if r.status is not Status.SKIPPED]
    assert not not_skipped, _show(not_skipped)
    assert all("did not answer the carrier" in r.reason for r in results), _show(results)


def test_garbage_cases_prove_the_carrier_before_silence_passes() -> None:
    """rfc5044/6/1-/4 (garbage after startup) accept a close or silence: against a Responder
    that answers nothing they skip, saying the carrier was not answered when valid (they
    passed it before); against iwarp, which answers the carrier, they are judged and pass."""
    cases = select(all_cases(), ["rfc5044/6/"], strict=True)
    assert len(cases) == 4
    mute = _run("mute", cases)
    assert all(r.status is Status.SKIPPED for r in mute), _show(mute)
    assert all("did not answer the carrier" in r.reason for r in mute), _show(mute)
    with listening(["--op", "write", "--timeout", TARGET_TIMEOUT]) as port:
        healthy = Runner(ResponderTarget("127.0.0.1", port), timeout=2.0).run(cases, jobs=JOBS)
    assert all(r.status is Status.PASSED for r in healthy), _show(healthy)
    assert all(any("the carrier, valid" in line for line in r.observed) for r in healthy), _show(
        healthy
    )


def test_a_target_that_drops_faults_silently_fails_each_error_case_after_the_fence() -> None:
    """Against a Responder that drops every fault without a word (silent_target.py, written
    apart from iwarp), each DDP and RDMAP error case fails once the fence behind the broken
    message was answered, saying so, rather than after the case's whole timeout."""
    from .silent_target import SilentTarget

    target = SilentTarget()
    try:
        cases = select(all_cases(), ERROR_CASES, strict=True, role=TargetRole.RESPONDER)
        results = Runner(ResponderTarget("127.0.0.1", target.port)).run(cases, jobs=JOBS)
    finally:
        target.close()
    judged = [r for r in results if r.status is not Status.SKIPPED]
    assert len(judged) > 25
    unfenced = [
        r
        for r in judged
        if r.status is not Status.FAILED or "sent after the broken message" not in r.reason
    ]
    assert not unfenced, _show(unfenced)
