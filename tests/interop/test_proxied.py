"""The interop cases through ``iwarp proxy``, played on a scripted guest and proxy (no qemu):
the runner's wiring (which port each end uses) and every case's judge."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from iwarp.interop.capture import Verdict
from iwarp.interop.cases import all_cases
from iwarp.interop.guest import GuestImage
from iwarp.interop.host import ProcResult
from iwarp.interop.proxied import RECORDED, SiwAnswer, transcript
from iwarp.interop.suite import InteropCase, InteropDirection, InteropRunner, InteropStatus
from iwarp.interop.vm import HOST_ALIAS, JobResult
from iwarp.proxy.spec import parse_fault

PROXY_CASES = {c.name: c for c in all_cases() if c.direction is InteropDirection.SIW_VIA_PROXY}


def _data(count: int) -> list[str]:
    return [
        f"rdma-ping-{i}: " + "".join(chr(65 + (i + j) % 26) for j in range(20))
        for i in range(count)
    ]


@dataclass
class _Job:
    result: JobResult

    def wait(self, timeout: float, *, kill: bool = False) -> JobResult:
        return self.result


@dataclass
class _Guest:
    """The guest's side: each command's result scripted by its first word."""

    results: Mapping[str, JobResult]
    hostfwd: list[int] = field(default_factory=lambda: [41001, 41002])
    guestfwd: list[int] = field(default_factory=lambda: [42001, 42002])
    scripts: list[str] = field(default_factory=list)

    def guest_port(self, index: int) -> int:
        return 7471 + index

    def spawn(self, script: str, *, timeout: float | None = None) -> _Job:
        self.scripts.append(script)
        words = shlex.split(script)
        key = " ".join(words[:2]) if words[0] == "rping" else words[0]
        return _Job(self.results.get(key, JobResult(0, "", 0.1)))

    def run(self, script: str, *, timeout: float = 60.0) -> JobResult:
        return self.spawn(script, timeout=timeout).wait(timeout)


@dataclass
class _Proxy:
    result: ProcResult

    def running(self) -> bool:
        return True

    def wait(self, timeout: float) -> ProcResult:
        return self.result


class _Runner(InteropRunner):
    """A runner on a scripted guest, with a scripted ``iwarp proxy``."""

    def __init__(self, guest: _Guest, proxy: ProcResult, tmp: Path) -> None:
        super().__init__(cast(GuestImage, None), tmp, log=lambda _: None)
        self.fake_guest = guest
        self.proxy = proxy
        self.launched: list[list[str]] = []

    def ensure_guest(self, variant: str) -> Any:
        return self.fake_guest

    def _launch(self, args: list[str], log: Path) -> Any:
        self.launched.append(args)
        Path(args[args.index("--pcap") + 1]).write_bytes(b"pcapng")
        return _Proxy(self.proxy)

    def _listening(self, port: int) -> bool:
        return True

    def _check(self, pcap: Path) -> Verdict:
        return Verdict(requests=2, replies=2)


def _summary(**changes: object) -> ProcResult:
    summary: dict[str, object] = {
        "type": "summary",
        "connection": 1,
        "fpdus_to_responder": 9,
        "fpdus_to_initiator": 9,
        "errors": 0,
        "faults": [],
        "initiator_after": "close",
        "responder_after": "close",
    }
    summary.update(changes)
    lines = [{"type": "listening"}, summary]
    return ProcResult(0, "\n".join(json.dumps(line) for line in lines), 2.0)


def _rpings(
    count: int, *, server_rc: int | None = 0, client_rc: int | None = 0
) -> dict[str, JobResult]:
    data = _data(count)
    return {
        "rping -s": JobResult(server_rc, "".join(f"server ping data: {d}\n" for d in data), 3.0),
        "rping -c": JobResult(client_rc, "".join(f"ping data: {d}\n" for d in data), 3.0),
    }


def _play(
    case: InteropCase, rpings: Mapping[str, JobResult], proxy: ProcResult, tmp: Path
) -> tuple[_Runner, _Guest, Any]:
    guest = _Guest(rpings)
    runner = _Runner(guest, proxy, tmp)
    runner.commands = None  # no --help children: the scripted proxy stands in
    outcome = InteropRunner._via_proxy(runner, cast(Any, guest), case)
    return runner, guest, outcome


def test_every_proxy_case_has_faults_that_parse_and_needs_the_proxy() -> None:
    assert {"proxy/rping/clean", "proxy/rping/resegment-1", "proxy/rping/corrupt-crc"} <= set(
        PROXY_CASES
    )
    assert {"proxy/rping/rewrite-stag", "proxy/rping/stall-reply"} <= set(PROXY_CASES)
    for case in PROXY_CASES.values():
        args = case.iwarp_args
        assert args[0] == "proxy" and case.needs[0].command == "proxy"
        for i, arg in enumerate(args):
            if arg == "--fault":
                parse_fault(args[i + 1])
        assert case.guest_server.startswith("rping -s") and case.guest_cmd.startswith("rping -c")


def test_the_runner_routes_the_guest_client_through_the_proxy(tmp_path: Path) -> None:
    case = PROXY_CASES["proxy/rping/clean"]
    runner, guest, outcome = _play(case, _rpings(3), _summary(), tmp_path)
    (args,) = runner.launched
    i = args.index("--listen")
    listen, target = args[i + 1], args[args.index("--to") + 1]
    host_port, serve_port = target.rsplit(":", 1)[1], listen.rsplit(":", 1)[1]
    assert listen.startswith("127.0.0.1:") and target.startswith("127.0.0.1:")
    assert int(host_port) in guest.hostfwd and int(serve_port) in guest.guestfwd
    slot = guest.hostfwd.index(int(host_port))
    server, waited, client = guest.scripts
    assert f"-p {guest.guest_port(slot)}" in server and "-a 0.0.0.0" in server
    assert waited == f"wait-listen {guest.guest_port(slot)} 20"
    assert f"-a {HOST_ALIAS} -p {serve_port}" in client
    assert args[args.index("--connections") + 1] == "1"
    assert outcome.capture == args[args.index("--pcap") + 1]
    assert outcome.commands["iwarp"] == "iwarp " + shlex.join(args)
    assert outcome.status is InteropStatus.PASS, outcome.reason


@pytest.mark.parametrize("name", ["proxy/rping/clean", "proxy/rping/resegment-1"])
def test_clean_forwarding_needs_the_same_data_at_both_ends(name: str, tmp_path: Path) -> None:
    case = PROXY_CASES[name]
    faults = [] if name.endswith("clean") else [{"action": "resegment", "to": "responder"}]
    out = _play(case, _rpings(3), _summary(faults=faults), tmp_path)[2]
    assert out.status is InteropStatus.PASS, out.reason
    assert "3 exchanges with the same data" in out.reason
    rpings = _rpings(3)
    changed = rpings["rping -c"].output.replace("rdma-ping-1: B", "rdma-ping-1: X")
    rpings["rping -c"] = JobResult(0, changed, 3.0)
    out = _play(case, rpings, _summary(faults=faults), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and "data differ" in out.reason
    short = {
        k: JobResult(0, "".join(v.output.splitlines(True)[:2]), 3.0) for k, v in _rpings(3).items()
    }
    out = _play(case, short, _summary(faults=faults), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and "the client printed 2 lines" in out.reason
    out = _play(case, _rpings(3, client_rc=1), _summary(faults=faults), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and "rping -c exit 1" in out.reason
    out = _play(case, _rpings(3), _summary(faults=faults, errors=2), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and "2 protocol errors" in out.reason
    wrong = [{"action": "drop-fpdu"}] if faults == [] else []
    out = _play(case, _rpings(3), _summary(faults=wrong), tmp_path)[2]
    assert out.status is InteropStatus.FAIL


def _applied(case: InteropCase) -> str:
    spec = case.iwarp_args[case.iwarp_args.index("--fault") + 1]
    return parse_fault(spec).action


def _answered(answer: SiwAnswer) -> tuple[dict[str, object], dict[str, JobResult]]:
    ends: dict[str, object] = {
        "initiator_after": answer.initiator_after or "close",
        "responder_after": answer.responder_after or "close",
    }
    rpings = _rpings(
        1,
        client_rc=0 if answer.client_ok in (None, True) else 255,
        server_rc=0 if answer.server_ok in (None, True) else 1,
    )
    for key, says in (("rping -c", answer.client_says), ("rping -s", answer.server_says)):
        if says is not None:
            job = rpings[key]
            rpings[key] = JobResult(job.rc, f"{says}\n{job.output}", job.seconds)
    return ends, rpings


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_fault_case_passes_on_siws_recorded_answer_only(name: str, tmp_path: Path) -> None:
    case = PROXY_CASES[name]
    action = _applied(case)
    answer = RECORDED[name]
    ends, rpings = _answered(answer)
    fault = {"action": action, "to": "responder", "at": "fpdu 2"}
    out = _play(case, rpings, _summary(faults=[fault], **ends), tmp_path)[2]
    assert out.status is InteropStatus.PASS, out.reason
    assert f"{action} at responder fpdu 2" in out.reason
    assert f"initiator_after={ends['initiator_after']}" in out.reason
    # the fault not applied (a filter that matched nothing): no verdict on siw
    out = _play(case, rpings, _summary(**ends), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and f"applied no {action}" in out.reason
    # siw doing otherwise than recorded
    for end in ("initiator_after", "responder_after"):
        if getattr(answer, end) is None:
            continue
        other = {**ends, end: "silence"}
        out = _play(case, rpings, _summary(faults=[fault], **other), tmp_path)[2]
        assert out.status is InteropStatus.FAIL and f"{end}='silence'" in out.reason
    for key, says in (("rping -c", answer.client_says), ("rping -s", answer.server_says)):
        if says is None:
            continue
        quiet = dict(rpings)
        job = quiet[key]
        quiet[key] = JobResult(job.rc, job.output.replace(says, ""), job.seconds)
        out = _play(case, quiet, _summary(faults=[fault], **ends), tmp_path)[2]
        assert out.status is InteropStatus.FAIL and f"{key} did not print" in out.reason
    for key, ok in (("rping -c", answer.client_ok), ("rping -s", answer.server_ok)):
        if ok is None:
            continue
        flipped = dict(rpings)
        job = flipped[key]
        flipped[key] = JobResult(1 if ok else 0, job.output, job.seconds)
        out = _play(case, flipped, _summary(faults=[fault], **ends), tmp_path)[2]
        assert out.status is InteropStatus.FAIL and f"{key} exit" in out.reason


def test_the_records_hold_what_siw_did() -> None:
    """siw 6.1's answers, from the run in docs/interop.md: the MPA CRC error's Terminate
    with its nibbles swapped, the invalid-STag Terminate, the Initiator's startup timeout."""
    assert RECORDED["proxy/rping/corrupt-crc"].responder_after == "terminate 0/2/2"
    assert RECORDED["proxy/rping/rewrite-stag"].initiator_after == "terminate 1/1/0"
    assert RECORDED["proxy/rping/stall-reply"].client_ok is False
    assert all(a.initiator_after and a.responder_after for a in RECORDED.values())


def test_no_summary_and_no_listener_are_failures_that_say_so(tmp_path: Path) -> None:
    case = PROXY_CASES["proxy/rping/corrupt-crc"]
    out = _play(case, _rpings(1), ProcResult(1, "Traceback", 1.0), tmp_path)[2]
    assert out.status is InteropStatus.FAIL and "no summary (exit 1)" in out.reason
    guest = _Guest({**_rpings(1), "wait-listen": JobResult(1, "", 20.0)})
    runner = _Runner(guest, _summary(), tmp_path)
    out = InteropRunner._via_proxy(runner, cast(Any, guest), case)
    assert out.status is InteropStatus.FAIL and "never listened" in out.reason
    assert runner.launched == []


def test_transcript_reads_rpings_verbose_lines() -> None:
    text = "cma_event type ...\nping data: rdma-ping-0: ABC\nping data: rdma-ping-1: BCD\n"
    assert transcript(text, "ping data: ") == ["rdma-ping-0: ABC", "rdma-ping-1: BCD"]
    server = "server ping data: rdma-ping-0: ABC\n"
    assert transcript(server, "server ping data: ") == ["rdma-ping-0: ABC"]


def test_the_real_run_is_selected_by_the_proxy_glob() -> None:
    from iwarp.interop.suite import select

    chosen: Callable[[str], list[str]] = lambda p: [c.name for c in select(all_cases(), [p], [])]  # noqa: E731
    assert set(chosen("proxy*")) == set(PROXY_CASES)
