"""iwarp itself as the target: every peer profile passes, broken configurations fail exactly.

``iwarp listen`` (Responder) and ``iwarp connect`` (Initiator, reconnecting
once per case) run in subprocesses with each profile of
:mod:`iwarp.interop.profiles`; all cases run, SHOULD ones included. A profile
that deviates on purpose lists the cases it fails, with the reason.
Then iwarp with one rule broken (tests/conformance/broken_target.py) must
fail exactly the cases tagged with that rule.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Result, Status, select
from iwarp.conformance.report import format_result
from iwarp.conformance.runner import InitiatorTarget, ResponderTarget, Runner
from iwarp.conformance.terms import TargetRole
from iwarp.interop.profiles import PROFILES, cli_options

from .conftest import HERE, TARGET_TIMEOUT, connecting, listening

# Every case of the catalogue against iwarp's own targets: minutes, not seconds.
pytestmark = pytest.mark.slow

#: Cases each profile fails on purpose, and why (docs/conformance.md repeats them).
EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    "rfc": {},
    # Linux RDMA CM limits private data to 256 octets (RDMA_MAX_PRIVATE_DATA).
    "siw": {"rfc5044/7.1.1/32": "private data limit 256"},
    "cxgb4": {"rfc5044/7.1.1/32": "private data limit 256"},
    "irdma": {
        # irdma takes only peer-to-peer frames offering Write or Read (-EOPNOTSUPP):
        "rfc6581/10/2": "closes on an unenhanced Rev 2 Request",
        "rfc6581/9.2/4": "closes on A=1 offering only a Send RTR",
        "rfc6581/9.2/13": "closes on a Reply choosing Send instead of sending TERM 7",
    },
}


#: Cases at once against a Responder target (an Initiator target runs one at a time): see
#: test_mutants.JOBS.
JOBS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(target: ResponderTarget | InitiatorTarget) -> list[Result]:
    cases = select(all_cases(), strict=True, role=target.role)
    return Runner(target, timeout=5.0).run(cases, jobs=JOBS)


def _expected(profile: str, role: TargetRole) -> set[str]:
    ids = {c.id for c in select(all_cases(), strict=True, role=role)}
    return set(EXPECTED_FAILURES[profile]) & ids


def _failed(results: list[Result]) -> dict[str, str]:
    return {r.case.id: format_result(r, colour=False) for r in results if r.status is Status.FAILED}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_listen_passes_in_each_profile(profile: str) -> None:
    options = [*cli_options(PROFILES[profile]()), "--timeout", TARGET_TIMEOUT]
    with listening(["--op", "write", *options]) as port:
        results = _run(ResponderTarget("127.0.0.1", port))
    failed = _failed(results)
    assert set(failed) == _expected(profile, TargetRole.RESPONDER), "\n".join(failed.values())
    passed = sum(r.status is Status.PASSED for r in results)
    assert passed > 130  # the data phase ran: iwarp listen advertised its buffers


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_connect_passes_in_each_profile(profile: str) -> None:
    port = _free_port()
    options = ["--count", "1", *cli_options(PROFILES[profile]()), "--timeout", TARGET_TIMEOUT]
    with connecting(port, options):
        results = _run(InitiatorTarget(port))
    failed = _failed(results)
    assert set(failed) == _expected(profile, TargetRole.INITIATOR), "\n".join(failed.values())
    assert sum(r.status is Status.PASSED for r in results) > 85


def test_reads_pass_against_a_readable_buffer() -> None:
    """``iwarp listen --op read`` advertises buffers open to remote Read."""
    with listening(["--op", "read", "--timeout", TARGET_TIMEOUT]) as port:
        cases = [c for c in all_cases() if c.id.startswith(("rfc5040/5.", "rfc5040/6."))]
        results = Runner(ResponderTarget("127.0.0.1", port)).run(cases)
    assert not _failed(results), "\n".join(_failed(results).values())
    assert {r.case.id for r in results if r.status is Status.PASSED} >= {
        "rfc5040/5.2.2/1",
        "rfc5040/5.5/1",
    }


@contextmanager
def _broken(rule: str, role: TargetRole) -> Iterator[ResponderTarget | InitiatorTarget]:
    script = [sys.executable, str(HERE / "broken_target.py"), rule]
    proc: subprocess.Popen[str]
    if role is TargetRole.RESPONDER:
        proc = subprocess.Popen(
            [*script, "listen", "--port", "0", "--json", "--op", "write", "--timeout", "2"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        port = json.loads(proc.stdout.readline())["port"]
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        target: ResponderTarget | InitiatorTarget = ResponderTarget("127.0.0.1", port)
    else:
        port = _free_port()
        proc = subprocess.Popen(
            [*script, "connect", "127.0.0.1", str(port), "--count", "1", "--timeout", "2"],
            text=True,
        )
        target = InitiatorTarget(port)
    try:
        yield target
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.parametrize("role", list(TargetRole))
@pytest.mark.parametrize("rule", ["crc", "pd-length", "terminate"])
def test_broken_rule_fails_exactly_its_cases(rule: str, role: TargetRole) -> None:
    with _broken(rule, role) as target:
        cases = select(all_cases(), strict=True, role=role)
        results = Runner(target, timeout=3.0).run(cases, jobs=JOBS)
    failed = {r.case.id for r in results if r.status is Status.FAILED}
    covering = {r.case.id for r in results if rule in r.case.covers and r.status != "skipped"}
    if rule == "terminate":
        # iwarp listen --op write advertises a buffer without remote Read: these
        # cases learn that from the access-rights Terminate a broken target never sends.
        covering |= {
            r.case.id
            for r in results
            if "rights-by-terminate" in r.case.covers and r.status != "skipped"
        }
    assert covering, f"no case covers {rule}"
    assert failed == covering, {
        r.case.id: r.reason for r in results if r.case.id in failed ^ covering
    }


@pytest.mark.parametrize("role", list(TargetRole))
def test_rfc7306_cases_skip_on_a_target_without_it(role: TargetRole) -> None:
    """Each RFC 7306 case skips, saying why, where iwarp without RFC 7306 is the target."""
    cases = select(all_cases(), ["rfc7306/"], strict=True, role=role)
    assert len(cases) >= 6
    with _broken("no-rfc7306", role) as target:
        results = Runner(target, timeout=3.0).run(cases)
    reasons = {r.case.id: (r.status, r.reason) for r in results}
    assert all(status == "skipped" for status, _ in reasons.values()), reasons
    why = [reason for _, reason in reasons.values()]
    # iwarp connect advertises no buffer: the Atomic cases that need one skip for that.
    assert all("no RFC 7306" in r or "advertised no buffer" in r for r in why), reasons
    assert sum("no RFC 7306" in r for r in why) >= (2 if role is TargetRole.INITIATOR else 6)
