"""How long cases wait for what may not come (iwarp.conformance.pace, the idle cases, fences).

A wait for a close, a Terminate or silence lasts as long as the target showed it takes to
answer; the startup-timer cases wait beside the others; a broken carrier is followed by a
fence, so that a late wrong answer is still seen while a silent drop costs no timeout.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.link import Link
from iwarp.conformance.model import Case, Result, Status, select
from iwarp.conformance.pace import BULK, FACTOR, FLOOR, Pace
from iwarp.conformance.runner import ResponderTarget, Runner
from iwarp.conformance.session import Session
from iwarp.conformance.terms import TargetRole

from .silent_target import SilentTarget


def _show(results: list[Result]) -> str:
    return "\n".join(f"{r.case.id}: {r.status} {r.reason}" for r in results)


def test_a_wait_lasts_four_times_the_slowest_answer_at_least_the_floor() -> None:
    pace = Pace()
    assert pace.wait(cap=3.0) == 3.0  # nothing answered yet: the case's own bound
    pace.saw(0.001)
    assert pace.wait(cap=3.0) == FLOOR
    pace.saw(0.2)
    pace.saw(0.05)
    assert pace.slowest == 0.2
    assert pace.wait(cap=3.0) == pytest.approx(FACTOR * 0.2)
    assert pace.wait(cap=0.5) == 0.5
    assert pace.wait(own=0.01) == FLOOR  # the same message's own answer time, alone
    assert pace.wait(own=0.3) == pytest.approx(FACTOR * 0.3)
    assert "slowest of the 3 answers" in pace.describe()


def test_a_wait_after_bulk_lasts_at_least_the_cooperation_wait() -> None:
    import socket

    with socket.socket() as sock:
        s = Session(Link(sock), TargetRole.RESPONDER, deadline=time.monotonic() + 5.0)
        s.pace.saw(0.001)
        assert s.answer_wait(3.0) == FLOOR
        assert s.answer_wait(3.0, sent=BULK + 1) == s.cooperation_wait
        assert s.answer_wait(0.5, sent=BULK + 1) == 0.5
        assert any("octets just sent" in line for line in s.observed)


def _idle_first(*, overlap: bool) -> tuple[list[Result], list[tuple[str, str]]]:
    """rfc5044/7.1.2/8 (3 s) then three quick cases at -j 1 against a target without a
    startup timer: the results, and when each case started and ended."""
    events: list[tuple[str, str]] = []

    class Recording(Runner):
        def _run_one(self, item: Case) -> Result:
            events.append(("start", item.id))
            result = super()._run_one(item)
            events.append(("end", item.id))
            return result

    (idle,) = select(all_cases(), ["rfc5044/7.1.2/8"], strict=True)
    assert idle.idle
    others = select(all_cases(), ["rfc5044/7.1.1/1", "rfc5044/7.1.1/2", "rfc5044/7.1.1/6"])
    target = SilentTarget()
    try:
        runner = Recording(ResponderTarget("127.0.0.1", target.port))
        cases = [dataclasses.replace(idle, timeout=3.0), *others]
        results = runner.run(cases, jobs=1, overlap_idle=overlap)
    finally:
        target.close()
    assert [r.case.id for r in results] == [c.id for c in cases]  # case order
    assert results[0].status is Status.FAILED and "still open" in results[0].reason
    assert all(r.status is Status.PASSED for r in results[1:]), _show(results)
    return results, events


def test_the_startup_timer_cases_wait_beside_the_others_at_j1() -> None:
    """Against a target without a startup timer, rfc5044/7.1.2/8 holds its connection for
    its whole timeout; at -j 1 the cases after it run meanwhile instead of after it (the
    run took 210 s longer than the rest when they ran one after another)."""
    results, events = _idle_first(overlap=True)
    idle_end = events.index(("end", results[0].case.id))
    assert all(events.index(("end", r.case.id)) < idle_end for r in results[1:]), events


def test_one_at_a_time_runs_the_startup_timer_cases_in_turn() -> None:
    """--one-at-a-time (siw behind rping -s -P stopped answering with the three open beside
    a case): no case starts before the startup-timer case ended."""
    results, events = _idle_first(overlap=False)
    idle_end = events.index(("end", results[0].case.id))
    assert all(events.index(("start", r.case.id)) > idle_end for r in results[1:]), events


def test_only_the_startup_timer_cases_are_idle() -> None:
    idle = sorted(c.id for c in all_cases() if c.idle)
    assert idle == ["rfc5044/7.1.2/10", "rfc5044/7.1.2/8", "rfc5044/7.1.2/9"]


def test_a_late_wrong_answer_to_a_broken_carrier_is_seen() -> None:
    """A target that answers a wrong CRC, or garbage, with a Terminate that reports no CRC
    error 0.5 s later (siw in the qemu guest answered 0.02-0.36 s late) fails the CRC and
    garbage cases: the wait ended 0.3 s after the carrier before, and they passed it by
    silence. The fence behind a broken FPDU, and the longer wait after bulk garbage, see
    the Terminate."""
    ids = ["rfc5044/8/3", "rfc5044/8/4", "rfc5044/8/5", "rfc5044/6/2", "rfc5044/6/3"]
    target = SilentTarget(late_terminate=0.5)
    try:
        results = Runner(ResponderTarget("127.0.0.1", target.port)).run(
            select(all_cases(), ids, strict=True)
        )
    finally:
        target.close()
    assert [r.case.id for r in results] == ids
    wrong = [r for r in results if r.status is not Status.FAILED or "taken" not in r.reason]
    assert not wrong, _show(wrong)


def test_a_silent_drop_of_a_broken_carrier_ends_at_the_fence() -> None:
    """Against a target that drops a wrong CRC silently, the CRC cases pass once the fence
    behind the broken FPDU was answered, and say so."""
    ids = ["rfc5044/8/2", "rfc5044/8/3", "rfc5044/8/4", "rfc5044/8/5", "rfc5044/6/1"]
    target = SilentTarget()
    try:
        results = Runner(ResponderTarget("127.0.0.1", target.port)).run(
            select(all_cases(), ids, strict=True)
        )
    finally:
        target.close()
    assert all(r.status is Status.PASSED for r in results), _show(results)
    for r in results:
        assert any("the fence was answered" in line for line in r.observed), r.observed
