"""The tool's own behaviour: broken first answers, Rev 1 targets, selection, output shape."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from iwarp.cli import main
from iwarp.conformance import all_cases, craft
from iwarp.conformance.model import Status, matches, select
from iwarp.conformance.runner import ResponderTarget, Runner
from iwarp.conformance.terms import Need
from iwarp.mpa.wire import FRAME_HEADER, FRAME_HEADER_SIZE, REPLY_KEY, FrameFlags

from .conftest import TARGET_TIMEOUT, listening

#: Connections a fake target serves at most, and seconds it lives at most (bounded loops).
MAX_CONNECTIONS = 64
LIFETIME = 60.0


def _read_frame(conn: socket.socket) -> bytes | None:
    """One startup frame from the tool, or None when it sent something else or closed."""
    data = b""
    while len(data) < FRAME_HEADER_SIZE:
        chunk = conn.recv(FRAME_HEADER_SIZE - len(data))
        if not chunk:
            return None
        data += chunk
    _, _, _, pd_length = FRAME_HEADER.unpack(data)
    want = FRAME_HEADER_SIZE + min(pd_length, 512)
    while len(data) < want:
        chunk = conn.recv(want - len(data))
        if not chunk:
            return None
        data += chunk
    return data


@contextmanager
def fake_responder(answer: Callable[[bytes], bytes | None]) -> Iterator[int]:
    """A Responder on loopback: ``answer(request)`` gives the octets to send (None: close).

    After answering it keeps the connection until the tool closes it.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(LIFETIME)
            try:
                request = _read_frame(conn)
                reply = answer(request) if request is not None else None
                if reply is None:
                    return
                conn.sendall(reply)
                while conn.recv(65536):
                    pass
            except OSError:
                return

    def loop() -> None:
        served = 0
        while not stop.is_set() and served < MAX_CONNECTIONS:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            served += 1
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(2.0)
        listener.close()


def _bad_key(request: bytes) -> bytes:
    return b"MPA ID Rep Frxme" + craft.reply()[16:]


def _rev7(request: bytes) -> bytes:
    return craft.reply(revision=7)


@pytest.mark.parametrize(
    ("answer", "decoded"),
    [
        (_bad_key, "key b'MPA ID Rep Frxme' (neither the Request nor the Reply key)"),
        (_rev7, "the Reply key, flags -C-S (octet 0x50), Rev 7, PD_Length 4"),
    ],
)
def test_a_malformed_first_answer_fails_the_cases_with_the_frame_decoded(
    answer: Callable[[bytes], bytes], decoded: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_responder(answer) as port:
        status = main(["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/1", "rfc5044/7.1.1/2"])
    captured = capsys.readouterr()
    assert status == 1, captured.err
    assert "FAIL rfc5044/7.1.1/1" in captured.out and "FAIL rfc5044/7.1.1/2" in captured.out
    assert decoded in captured.out
    assert "start-up: no start-up style was accepted" in captured.out


def test_a_target_that_only_closes_is_judged_not_unreachable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No answer at all: the cases that need a Reply fail, the closing ones pass; exit 1."""
    with fake_responder(lambda request: None) as port:
        status = main(
            ["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/1", "rfc5044/7.1.1/24"]
        )
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL rfc5044/7.1.1/1" in out and "no MPA Reply from the target" in out
    assert "PASS rfc5044/7.1.1/24" in out


def _rev1_only(request: bytes) -> bytes | None:
    """RFC 5044 without RFC 6581: Rev 1 Requests get a Rev 1 Reply, others a close."""
    if request[17] != 1 or request[:16] != b"MPA ID Req Frame":
        return None
    return FRAME_HEADER.pack(REPLY_KEY, int(FrameFlags.CRC), 1, 0)


def test_a_rev1_only_target_gets_the_rev1_cases(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_responder(_rev1_only) as port:
        status = main(
            [
                "conformance",
                "127.0.0.1",
                str(port),
                "rfc5044/7.1.1/1",
                "rfc5044/7.1.1/8",
                "rfc6581/10/3",
                "rfc6581/10/1",
                "--json",
            ]
        )
    report = json.loads(capsys.readouterr().out)
    got = {r["id"]: r for r in report["results"]}
    assert status == 0, got
    assert got["rfc5044/7.1.1/1"]["status"] == "passed"
    assert got["rfc5044/7.1.1/8"]["status"] == "passed"  # the key is the Request's only fault
    assert got["rfc6581/10/3"]["status"] == "passed"
    assert got["rfc6581/10/1"]["status"] == "skipped"
    assert "takes Rev 1" in got["rfc6581/10/1"]["reason"]


def test_an_exact_id_selects_one_case_and_a_section_a_group() -> None:
    cases = all_cases()
    assert [c.id for c in select(cases, ["rfc5044/7.1.1/1"])] == ["rfc5044/7.1.1/1"]
    section = select(cases, ["rfc5044/7.1.1"])
    assert len(section) > 11 and all(c.id.startswith("rfc5044/7.1.1/") for c in section)
    assert select(cases, ["rfc5044/7.1.1/"]) == section
    assert not matches("rfc5044/7.1.1/10", "rfc5044/7.1.1/1")
    assert not matches("rfc5044/7.1.10/1", "rfc5044/7.1.1")


def test_list_json_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list", "--json", "rfc5044/7.1.1/1"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in listed] == ["rfc5044/7.1.1/1"]
    assert listed[0]["level"] == "MUST" and "MPA ID Rep Frame" in listed[0]["quote"]


def test_list_groups_by_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list", "rfc6581/9.1", "rfc6581/9.2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if line.startswith("== ")]
    assert heads == ["== rfc6581 §9.1", "== rfc6581 §9.2"]


def test_a_pattern_that_matches_nothing_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list", "rfc5044/7.1.1/99"]) == 2
    assert "no case matches rfc5044/7.1.1/99" in capsys.readouterr().err


def test_text_output_is_grouped_with_a_recap_of_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with listening(["--timeout", TARGET_TIMEOUT, "--pd-limit", "256"]) as port:
        status = main(
            ["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/32", "rfc6581/10/1", "--strict"]
        )
    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    assert "== rfc5044 §7.1.1" in lines and "== rfc6581 §10" in lines
    recap = lines.index("1 failed:")
    assert lines[recap + 1].split()[0] == "rfc5044/7.1.1/32"
    assert lines[-1].startswith("1 passed, 1 failed")


def test_jobs_keep_the_verdicts_and_the_order(capsys: pytest.CaptureFixture[str]) -> None:
    """-j 4 runs cases at once: the same statuses as one at a time, reported in case order."""
    reports = []
    with listening(["--op", "write", "--timeout", TARGET_TIMEOUT]) as port:
        for jobs in ("1", "4"):
            args = ["conformance", "127.0.0.1", str(port), "rfc5041/7.2", "rfc5040/7.2"]
            assert main([*args, "--json", "-j", jobs]) == 0
            reports.append(json.loads(capsys.readouterr().out)["results"])
    one, four = ([(r["id"], r["status"]) for r in report] for report in reports)
    assert one == four
    assert sum(status == "passed" for _, status in four) > 20


def test_html_report_has_an_index_and_a_page_per_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    with listening(["--timeout", TARGET_TIMEOUT, "--pd-limit", "256"]) as port:
        args = ["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/1", "rfc5044/7.1.1/32"]
        assert main([*args, "--strict", "--html", str(out)]) == 1
    capsys.readouterr()
    index = (out / "index.html").read_text()
    assert 'href="rfc5044_7.1.1_1.html"' in index and 'href="rfc5044_7.1.1_32.html"' in index
    assert "1 passed, 1 failed, 0 skipped" in index
    failed = (out / "rfc5044_7.1.1_32.html").read_text()
    assert "FAIL" in failed and "between 0 and 512 octets" in failed  # verdict and quote
    assert "got MPA Reply" in failed or "Request" in failed  # the wire log, decoded
    passed = (out / "rfc5044_7.1.1_1.html").read_text()
    assert "PASS" in passed and "got MPA Reply flags" in passed


def test_cooperation_missing_twice_is_no_longer_waited_for() -> None:
    """A target without an advertised buffer: after two whole waits in vain the data
    phase stops waiting for one; every case that needs it is skipped, saying why."""
    cases = [c for c in select(all_cases(), ["rfc5041/7.2"]) if Need.REGION in c.needs]
    assert len(cases) >= 4
    with listening(["--timeout", TARGET_TIMEOUT]) as port:  # --op send: no buffer advertised
        runner = Runner(ResponderTarget("127.0.0.1", port), cooperation_wait=0.5)
        results = runner.run(cases)
    assert all(r.status is Status.SKIPPED for r in results), [r.reason for r in results]
    assert all("advertised no buffer" in r.reason for r in results)
    assert Need.REGION in runner.style.unoffered
    assert runner.style.answers_hello  # it did answer the hello
