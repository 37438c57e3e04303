"""draft-culley-iwarp-mpa-02 framing: the draft-culley/ cases against ``iwarp listen --mpa-mode
culley --op mpa`` and ``iwarp connect --mpa-mode culley --op mpa`` (they pass) and against
mutants of them (each fails exactly its cases)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from iwarp.cli._mpa_options import CULLEY_SWITCH
from iwarp.conformance import all_cases
from iwarp.conformance.model import Level, Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import InitiatorTarget, ResponderTarget, Runner
from iwarp.conformance.terms import Need

from .conftest import HERE, TARGET_TIMEOUT, switched

pytestmark = pytest.mark.slow

CULLEY = ["--op", "mpa", "--mpa-mode", "culley", "--timeout", TARGET_TIMEOUT]
#: An Initiator target's options: two messages of 600 octets frame past the marker at 1024.
CONNECT = [*CULLEY, "--count", "2", "--size", "600"]
#: The cases that read how the target receives: an Initiator (iwarp connect) answers no
#: receipt request, so they skip against it.
RECEIVING = {"draft-culley/7.2/2", "draft-culley/9/1"}


def _cases() -> list[str]:
    return [c.id for c in all_cases() if Need.CULLEY in c.needs]


def _run(switch: str, *, line: bytes = CULLEY_SWITCH) -> dict[str, Result]:
    cases = select(all_cases(), ["draft-culley/"], strict=True)
    with switched(switch, CULLEY) as port:
        runner = Runner(
            ResponderTarget("127.0.0.1", port), timeout=2.0, mpa_mode="culley", culley_line=line
        )
        return {r.case.id: r for r in runner.run(cases)}


@contextmanager
def _connecting(switch: str, port: int) -> Iterator[None]:
    """``iwarp connect CONNECT`` to ``port``, again and again, with one switch of
    broken_target.py on."""
    script = [sys.executable, str(HERE / "broken_target.py"), switch, "connect"]
    proc = subprocess.Popen(
        [*script, "127.0.0.1", str(port), *CONNECT],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def _run_initiator(switch: str) -> dict[str, Result]:
    cases = select(all_cases(), ["draft-culley/"], strict=True)
    runner = Runner(InitiatorTarget(0), timeout=2.0, mpa_mode="culley", culley_line=CULLEY_SWITCH)
    runner.listener()  # binds a free port: the target connects to it
    with _connecting(switch, runner.target.port):
        return {r.case.id: r for r in runner.run(cases)}


def _show(results: dict[str, Result]) -> str:
    return "\n".join(format_result(r, colour=False, verbose=True) for r in results.values())


def test_the_culley_cases_are_the_ones_needing_culley() -> None:
    assert _cases() == [c.id for c in select(all_cases(), ["draft-culley/"], strict=True)]
    assert len(_cases()) == 5


def test_iwarp_listen_culley_passes_every_case() -> None:
    results = _run("read-write")  # a variant that leaves bare MPA as it is
    assert {r.status for r in results.values()} == {Status.PASSED}, _show(results)
    markers = results["draft-culley/7.1/1"].observed
    assert any("3 markers checked" in line for line in markers), markers


def test_iwarp_connect_culley_passes_every_case_it_can_be_judged_by() -> None:
    results = _run_initiator("read-write")
    passed = {i for i, r in results.items() if r.status is Status.PASSED}
    assert passed == set(_cases()) - RECEIVING, _show(results)
    for i in RECEIVING:
        assert "answered no receipt request" in results[i].reason, _show(results)


# Each mutant: the cases that must fail; every other case passes, except those listed as
# unable to judge it (they skip, saying why).
MUTANTS = {
    "crc": ({"draft-culley/7.2/2"}, set()),
    "crc-sent-marked": ({"draft-culley/7.2/1"}, set()),
    # Markers 4 octets early: the target's FPDUs cannot be read, so 7.2/2 and 9/1 cannot judge.
    "markers": (
        {"draft-culley/8.1/1", "draft-culley/7.1/1", "draft-culley/7.2/1"},
        {"draft-culley/7.2/2", "draft-culley/9/1"},
    ),
    "marker-ptr": ({"draft-culley/7.1/1"}, set()),
    "marker-checked": ({"draft-culley/9/1"}, set()),
}


@pytest.mark.parametrize("rule", sorted(MUTANTS))
def test_a_mutant_fails_exactly_its_culley_cases(rule: str) -> None:
    must_fail, may_skip = MUTANTS[rule]
    results = _run(rule)
    failed = {i for i, r in results.items() if r.status is Status.FAILED}
    skipped = {i for i, r in results.items() if r.status is Status.SKIPPED}
    assert failed == must_fail, _show(results)
    assert skipped == may_skip, _show(results)
    covered = {i for i in _cases() for c in all_cases() if c.id == i and rule in c.covers}
    assert covered == must_fail


#: The sending rules, broken in iwarp connect: the Initiator fails exactly their cases.
SENDING = ["crc-sent-marked", "markers", "marker-ptr"]


@pytest.mark.parametrize("rule", SENDING)
def test_an_initiator_mutant_fails_exactly_its_culley_cases(rule: str) -> None:
    must_fail, _ = MUTANTS[rule]
    results = _run_initiator(rule)
    failed = {i for i, r in results.items() if r.status is Status.FAILED}
    passed = {i for i, r in results.items() if r.status is Status.PASSED}
    assert failed == must_fail, _show(results)
    assert passed == set(_cases()) - RECEIVING - must_fail, _show(results)


def test_the_receiving_marker_case_is_a_should() -> None:
    """§9 makes the marker check OPTIONAL for segments received in order (all a TCP socket
    gives): the case runs with --strict only."""
    (item,) = select(all_cases(), ["draft-culley/9/1"], strict=True)
    assert item.level is Level.SHOULD
    assert select(all_cases(), ["draft-culley/9/1"]) == []


def test_a_wrong_streaming_line_fails_the_cases() -> None:
    # As long as the listener's own line: it reads that many octets, then refuses them.
    line = b"not the line the listener wants\n"
    assert len(line) == len(CULLEY_SWITCH)
    results = _run("read-write", line=line)
    assert all(r.status is not Status.PASSED for r in results.values()), _show(results)


def test_the_rfc_cases_skip_in_a_culley_run_and_culley_cases_in_an_rfc_run() -> None:
    rfc = select(all_cases(), ["rfc5044/7.1.1/1"])
    with switched("read-write", CULLEY) as port:
        runner = Runner(ResponderTarget("127.0.0.1", port), timeout=2.0, mpa_mode="culley")
        (result,) = runner.run(rfc)
    assert result.status is Status.SKIPPED and "--mpa-mode culley" in result.reason
    with switched("read-write", ["--op", "write", "--timeout", TARGET_TIMEOUT]) as port:
        runner = Runner(ResponderTarget("127.0.0.1", port), timeout=2.0)
        results = runner.run(select(all_cases(), ["draft-culley/"]))
    for result in results:
        assert result.status is Status.SKIPPED, format_result(result, colour=False)
        assert "run with --mpa-mode culley" in result.reason


def test_the_cli_options(capsys: pytest.CaptureFixture[str]) -> None:
    from iwarp.cli import main

    assert main(["conformance", "127.0.0.1", "1", "--culley-line", "x"]) == 2
    assert "--culley-line needs --mpa-mode culley" in capsys.readouterr().err
    for strict in ([], ["--strict"]):
        assert main(["conformance", "--list", "--mpa-mode", "culley", *strict]) == 0
        out = capsys.readouterr().out.splitlines()
        listed = [line.split()[0] for line in out if line.startswith("draft-culley/")]
        ids = [
            c.id
            for c in all_cases()
            if Need.CULLEY in c.needs and (strict or c.level is Level.MUST)
        ]
        assert listed == ids, out
        assert out[-1] == f"{len(ids)} cases"
