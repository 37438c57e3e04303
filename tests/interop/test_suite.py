"""The interop harness without a guest: case catalogue, selection, judges, report."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from iwarp.conformance import all_cases as all_conformance_cases
from iwarp.conformance.expected import load as load_expected
from iwarp.conformance.model import select as select_cases
from iwarp.conformance.terms import TargetRole
from iwarp.interop.capture import Verdict
from iwarp.interop.cases import ATOMIC_PROBE, all_cases, conformance_matches
from iwarp.interop.guest import VARIANTS, GuestImage
from iwarp.interop.host import HostCommand, ProcResult, missing
from iwarp.interop.report import Report
from iwarp.interop.suite import (
    ACCEPT_RACE,
    NOT_FINITE,
    PERFTEST_CLOCK,
    InteropCase,
    InteropDirection,
    InteropRunner,
    InteropStatus,
    Outcome,
    Run,
    accept_stall,
    both_succeed,
    mpa_established,
    order_for_boot,
    refused,
    select,
    terminate_sent,
    worth_again,
)
from iwarp.interop.vm import JobResult


def _iwarp(rc: int | None, *lines: Mapping[str, object], timed_out: bool = False) -> ProcResult:
    return ProcResult(rc, "\n".join(json.dumps(obj) for obj in lines), 1.0, timed_out)


def test_catalogue_is_well_formed() -> None:
    cases = all_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names are unique"
    for case in cases:
        assert case.variant in VARIANTS
        if case.blocked:
            continue
        assert case.guest_cmd, case.name
        if case.direction is InteropDirection.SIW_TO_SIW:
            assert case.guest_server and not case.iwarp_args
        else:
            assert case.iwarp_args and case.needs, case.name
            assert case.iwarp_args[0] == case.needs[0].command


def test_catalogue_covers_the_issue() -> None:
    names = {c.name for c in all_cases()}
    prefixes = ["mpa/", "p2p/", "profile/", "rping/iwarp-client/", "rping/iwarp-server/"]
    prefixes += ["ucmatose/", "rdma_server/", "rdma_client/", "perftest/ib_read_lat"]
    prefixes += ["proxy/rping/"]
    for prefix in prefixes:
        assert any(n.startswith(prefix) for n in names), prefix
    # both directions of rping, counts 1 and 100, smallest and largest size, CRC off and on
    for side in ("client", "server"):
        for shape in ("c1-min", "c1-max", "c100-min", "c100-max"):
            for crc in ("crc", "nocrc"):
                assert f"rping/iwarp-{side}/{shape}-{crc}" in names


def test_select_by_glob_substring_and_variant() -> None:
    cases = all_cases()
    assert {c.name for c in select(cases, ["rping/*-server/c1-*"], [])} == {
        f"rping/iwarp-server/c1-{s}-{c}" for s in ("min", "max") for c in ("crc", "nocrc")
    }
    by_substring = select(cases, ["markers"], [])
    assert by_substring and all("markers" in c.name for c in by_substring)
    only_p2p = select(cases, [], ["p2p"])
    assert only_p2p and all(c.variant == "p2p" for c in only_p2p)
    assert select(cases, ["no-such-case"], []) == []


def test_order_for_boot_groups_variants_default_first() -> None:
    ordered = order_for_boot(all_cases())
    variants = [c.variant for c in ordered]
    assert variants[0] == "default"
    # each variant appears as one contiguous run
    runs = [v for i, v in enumerate(variants) if i == 0 or variants[i - 1] != v]
    assert len(runs) == len(set(runs))


def test_missing_names_the_exact_gap() -> None:
    commands = {"listen": {"--host", "--port"}}
    assert missing((HostCommand("listen", ("--host",)),), commands) is None
    assert missing((HostCommand("ping", ()),), commands) == "iwarp has no 'ping' command yet"
    assert (
        missing((HostCommand("listen", ("--host", "--echo", "--op")),), commands)
        == "'iwarp listen' has no --echo, --op option yet"
    )
    assert missing((HostCommand("listen"),), None) == "the iwarp CLI does not load"


def test_mpa_established_reads_the_established_line() -> None:
    request = {"type": "request", "rev": 2, "crc": False}
    established = {"type": "established", "rev": 2, "crc": True, "rtr": "write", "p2p": True}
    run = Run(iwarp=_iwarp(0, request, established))
    ok, why = mpa_established(rev=2, crc=True, rtr="write")(run)
    assert ok, why
    ok, why = mpa_established(crc=False)(run)
    assert not ok and "crc=True (expected False)" in why
    ok, why = mpa_established(rev=2)(Run(iwarp=_iwarp(1, request)))
    assert not ok and "no negotiated parameters" in why


def test_refused_needs_an_error_without_a_hang() -> None:
    rejected = {"type": "rejected", "reason": "the Responder rejected"}
    judge = refused(iwarp_words=("reject",))
    assert judge(Run(iwarp=_iwarp(1, rejected)))[0]
    assert not judge(Run(iwarp=_iwarp(0, rejected)))[0]
    assert not judge(Run(iwarp=_iwarp(None, timed_out=True)))[0]
    assert not judge(Run(iwarp=_iwarp(1, {"type": "error", "message": "boom"})))[0]


def test_both_succeed_and_terminate_sent() -> None:
    good = Run(iwarp=_iwarp(0), guest=JobResult(0, "", 1.0))
    assert both_succeed(good)[0]
    bad = Run(iwarp=_iwarp(0), guest=JobResult(None, "waiting", 1.0))
    ok, why = both_succeed(bad)
    assert not ok and "guest timed out" in why
    verdict = Verdict(terminates=[("i>r", 2, 7)])
    assert terminate_sent("i>r", 2, 7)(Run(verdict=verdict))[0]
    assert not terminate_sent("r>i", 2, 7)(Run(verdict=verdict))[0]


def _report() -> Report:
    cases = {c.name: c for c in all_cases()}
    not_run = cases["perftest/ib_send_bw"]
    failed = Outcome(
        cases["mpa/connect/rev0"], InteropStatus.FAIL, "negotiated rev=1 (expected 0)", 2.0
    )
    failed.commands = {"iwarp": "iwarp connect 127.0.0.1 1"}
    return Report(
        [
            Outcome(cases["mpa/connect/rev1"], InteropStatus.PASS, "MPA established: rev=1", 1.25),
            Outcome(not_run, InteropStatus.NOT_RUN, "iwarp has no 'interop' command yet"),
            failed,
        ],
        boots=[8.1],
        total_seconds=42.0,
    )  # fmt: skip


def test_report_text_has_every_case_and_the_reasons() -> None:
    text = _report().to_text()
    header = text.splitlines()[0].split()
    assert header[:4] == ["case", "tool", "direction", "siw"]
    assert "mpa/connect/rev1" in text and "PASS" in text and "1.2s" in text
    assert "NOT RUN (with the reason):" in text and "no 'interop' command yet" in text
    assert "FAILED:" in text and "negotiated rev=1 (expected 0)" in text
    assert "iwarp connect 127.0.0.1 1" in text
    assert "1 passed, 1 failed, 1 not run; guest boots: 8.1s" in text


def test_report_json() -> None:
    report = _report()
    data = json.loads(report.to_json())
    assert data["summary"] == {
        "passed": 1, "failed": 1, "not_run": 1, "boots_seconds": [8.1], "total_seconds": 42.0,
    }  # fmt: skip
    assert [c["status"] for c in data["cases"]] == ["pass", "not run", "fail"]
    assert data["cases"][0]["direction"] == "iwarp→siw"
    assert report.failed


@pytest.mark.parametrize("status", list(InteropStatus))
def test_only_failures_fail_the_report(status: InteropStatus) -> None:
    case = all_cases()[0]
    assert Report([Outcome(case, status, "x")]).failed == (status is InteropStatus.FAIL)


def _conformance_report(record: str, **changes: tuple[str, str]) -> dict[str, object]:
    """``iwarp conformance --json``'s report with every verdict of ``record``
    (a status and reason per case id changed by ``changes``)."""
    results = []
    for case_id, want in load_expected(record).items():
        status, reason = changes.pop(case_id, (want["status"], want.get("reason", "")))
        results.append({"id": case_id, "status": status, "reason": reason})
    results += [{"id": i, "status": st, "reason": why} for i, (st, why) in changes.items()]
    counts = {key: sum(r["status"] == key for r in results) for key in ("passed", "failed")}
    return {"results": results, "skipped": len(results) - sum(counts.values()), **counts}


@pytest.mark.parametrize("record", ["siw-responder", "siw-initiator"])
def test_the_conformance_cases_record_the_atomic_probe(record: str) -> None:
    """The interop conformance cases say what the target answered to RFC 7306's
    FetchAdd probe, whether the verdicts match the record or not."""
    answer = (
        "the target answered Unexpected OpCode: it has no RFC 7306 Atomic Operations "
        "(RDMAP remote operation error, unexpected opcode)"
    )
    judge = conformance_matches(record)
    probe = {ATOMIC_PROBE: ("skipped", answer)}
    ok, why = judge(Run(iwarp=_iwarp(0, _conformance_report(record, **probe))))
    assert ok, why
    assert why.endswith(f"RFC 7306 FetchAdd probe ({ATOMIC_PROBE}): skipped, {answer}")
    first = next(iter(load_expected(record).items()))
    flipped = "failed" if first[1]["status"] == "passed" else "passed"
    report = _conformance_report(record, **{first[0]: (flipped, "x")}, **probe)
    ok, why = judge(Run(iwarp=_iwarp(1, report)))
    assert not ok and f"{first[0]}: expected" in why and answer in why
    report = _conformance_report(record)
    report["results"] = [r for r in report["results"] if r["id"] != ATOMIC_PROBE]  # type: ignore[attr-defined]
    ok, why = judge(Run(iwarp=_iwarp(1, report)))
    assert not ok and f"{ATOMIC_PROBE}: expected" in why  # not run where recorded
    assert "FetchAdd probe" not in why


def test_the_siw_records_hold_its_answer_to_the_probe() -> None:
    """siw 6.1 as Responder answered the FetchAdd probe as a stack without
    RFC 7306 (Unexpected OpCode, its Layer and EType nibbles swapped)."""
    answer = load_expected("siw-responder")[ATOMIC_PROBE]
    assert answer["status"] == "skipped"
    assert "Unexpected OpCode" in answer["reason"] and "code 0x06" in answer["reason"]
    initiator = load_expected("siw-initiator")
    rfc7306 = {
        c.id for c in select_cases(all_conformance_cases(), ["rfc7306"], role=TargetRole.INITIATOR)
    }
    assert {case_id for case_id in initiator if case_id.startswith("rfc7306/")} == rfc7306


# --- siw's accept race: one more attempt, only for its signature --------------------------


def _stalled(case_name: str = "rdma_server/iwarp-client", **tshark: object) -> Outcome:
    case = {c.name: c for c in all_cases()}[case_name]
    out = Outcome(case, InteropStatus.FAIL, "guest program exit 137: Killed")
    out.tshark = {"requests": 1, "replies": 1, "fpdus": {"i>r": 1, "r>i": 0}, "tcp_gaps": {}}
    out.tshark.update(tshark)
    return out


def test_accept_stall_is_recognised_only_by_its_signature() -> None:
    assert accept_stall(_stalled().case, _stalled()) == ACCEPT_RACE
    # siw answered something, a Terminate or data: a verdict, never retried
    answered = _stalled(fpdus={"i>r": 1, "r>i": 1})
    assert accept_stall(answered.case, answered) == ""
    # no FPDU from iwarp, no Reply, a TCP gap: not this race
    for changes in ({"fpdus": {"i>r": 0, "r>i": 0}}, {"replies": 0}, {"tcp_gaps": {"a": 9}}):
        out = _stalled(**changes)
        assert accept_stall(out.case, out) == "", changes
    # iwarp as the Responder (siw connects): siw's accept path is not involved
    siw_connects = _stalled("rdma_client/iwarp-server")
    assert accept_stall(siw_connects.case, siw_connects) == ""
    # a pass, and an outcome already retried once
    passed = _stalled()
    passed.status = InteropStatus.PASS
    assert accept_stall(passed.case, passed) == ""
    twice = _stalled()
    twice.retried = "first attempt: ..."
    assert accept_stall(twice.case, twice) == ""


class _ScriptedRunner(InteropRunner):
    """A runner whose guest and iwarp runs are scripted outcomes (no qemu)."""

    def __init__(self, outcomes: list[Outcome], tmp: Path) -> None:
        self.logged: list[str] = []
        super().__init__(cast(GuestImage, None), tmp, log=self.logged.append)
        self.outcomes = outcomes
        self.calls = 0
        self.tmp = tmp

    def ensure_guest(self, variant: str) -> Any:
        return None

    def _with_iwarp(self, guest: Any, case: InteropCase) -> Outcome:
        out = self.outcomes[self.calls]
        self.calls += 1
        pcap = self.tmp / f"capture{self.calls}.pcapng"
        pcap.write_bytes(b"attempt %d" % self.calls)
        out.capture = str(pcap)
        return out


@pytest.mark.parametrize("second", [InteropStatus.PASS, InteropStatus.FAIL])
def test_a_stalled_case_runs_once_more_and_keeps_both_captures(
    second: InteropStatus, tmp_path: Path
) -> None:
    first = _stalled()
    again = Outcome(first.case, second, "rdma_server answered" if second else "no answer")
    runner = _ScriptedRunner([first, again], tmp_path)
    outcome = InteropRunner.run_case(runner, first.case)
    assert runner.calls == 2 and outcome.status is second
    assert outcome.retried.startswith("first attempt: " + ACCEPT_RACE)
    kept = tmp_path / "capture1.attempt1.pcapng"
    assert kept.read_bytes() == b"attempt 1" and str(kept) in outcome.retried
    assert ("second attempt" in outcome.reason) == (second is InteropStatus.PASS)
    text = Report([outcome]).to_text()
    assert "RUN TWICE" in text and "rdma_server/iwarp-client" in text.split("RUN TWICE")[1]
    assert json.loads(Report([outcome]).to_json())["cases"][0]["retried"] == outcome.retried


def test_any_other_failure_runs_once(tmp_path: Path) -> None:
    other = _stalled(fpdus={"i>r": 1, "r>i": 2})
    runner = _ScriptedRunner([other], tmp_path)
    outcome = InteropRunner.run_case(runner, other.case)
    assert runner.calls == 1 and outcome.status is InteropStatus.FAIL and not outcome.retried


def test_without_a_guest_the_suite_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a table of every case "not run": one line on stderr, exit 3; the
    report (all not run) only where --json or --report asks for it."""
    from iwarp.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no guest built there
    assert main(["interop", "siw"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("iwarp interop siw: the siw guest is not built (run: iwarp interop")
    report = tmp_path / "report.json"
    assert main(["interop", "siw", "--json", "--report", str(report)]) == 3
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1
    assert json.loads(out) == json.loads(report.read_text())


def _clock(case_name: str) -> Outcome:
    case = {c.name: c for c in all_cases()}[case_name]
    why = f"{NOT_FINITE} (99.00% percentile[usec] inf): 4096 B x 100: latency typical 2.00 us"
    return Outcome(case, InteropStatus.FAIL, why)


@pytest.mark.parametrize("case_name", ["perftest/ib_write_lat", "perftest/ib_read_bw/siw-server"])
def test_perftest_clock_is_worth_one_more_attempt(case_name: str, tmp_path: Path) -> None:
    """perftest's clock under TCG printing a figure that is not finite: played once more,
    either direction; any other perftest failure is a verdict."""
    first = _clock(case_name)
    assert worth_again(first.case, first) == PERFTEST_CLOCK
    for reason in ("perftest exit 0 but printed no result table", "guest program exit 1: x"):
        other = Outcome(first.case, InteropStatus.FAIL, reason)
        assert worth_again(other.case, other) == ""
    passed = _clock(case_name)
    passed.status = InteropStatus.PASS
    assert worth_again(passed.case, passed) == ""
    again = Outcome(first.case, InteropStatus.PASS, "4096 B x 100: latency typical 2.00 us")
    runner = _ScriptedRunner([first, again], tmp_path)
    outcome = InteropRunner.run_case(runner, first.case)
    assert runner.calls == 2 and outcome.status is InteropStatus.PASS
    assert outcome.retried.startswith("first attempt: " + PERFTEST_CLOCK)
    assert "second attempt" in outcome.reason
    # a second failure of the same kind stands: one more attempt, not a loop
    runner = _ScriptedRunner([_clock(case_name), _clock(case_name)], tmp_path)
    outcome = InteropRunner.run_case(runner, first.case)
    assert runner.calls == 2 and outcome.status is InteropStatus.FAIL
