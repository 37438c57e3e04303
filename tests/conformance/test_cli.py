"""``iwarp conformance`` end to end against ``iwarp listen``: text, JSON, JUnit, records."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from iwarp.cli import main
from iwarp.conformance.pace import StartupWait

from .conftest import TARGET_TIMEOUT, listening

PREFIX = "rfc6581/9.1/"


def test_text_report_ends_with_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with listening(["--timeout", TARGET_TIMEOUT]) as port:
        status = main(["conformance", "127.0.0.1", str(port), PREFIX])
    out = capsys.readouterr().out
    assert status == 0
    lines = out.strip().splitlines()
    assert lines[-1].endswith("0 failed, 0 skipped") and "\033[" not in out  # no colour in a pipe
    assert any(line.startswith("PASS rfc6581/9.1/3") for line in lines)


def test_json_junit_record_and_expect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit, record = tmp_path / "r.xml", tmp_path / "rec.json"
    with listening(["--timeout", TARGET_TIMEOUT]) as port:
        args = ["conformance", "127.0.0.1", str(port), PREFIX, "rfc5044/7.1.1/32", "--strict"]
        # --pd-limit 512 is the default: every case passes.
        assert main([*args, "--json", "--junit", str(junit), "--record", str(record)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["failed"] == 0 and report["passed"] == len(report["results"])
        suite = ET.parse(junit).getroot()
        assert suite.get("tests") == str(len(report["results"])) and suite.get("failures") == "0"
        # A record that says a case failed no longer matches: exit 1, the difference named.
        data = json.loads(record.read_text())
        data["cases"]["rfc5044/7.1.1/32"] = {"status": "failed", "reason": "recorded"}
        record.write_text(json.dumps(data))
        assert main([*args, "--expect", str(record)]) == 1
    assert "rfc5044/7.1.1/32: expected failed, got passed" in capsys.readouterr().err


def test_failing_target_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with listening(["--timeout", TARGET_TIMEOUT, "--pd-limit", "256"]) as port:
        status = main(["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/32", "--strict"])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAIL rfc5044/7.1.1/32" in out and "1 failed" in out and "received" in out


def test_unreachable_target_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "127.0.0.1", "1", PREFIX]) == 2
    assert "cannot reach" in capsys.readouterr().err


class _NotMpa:
    """A TCP server of another protocol: it takes connections and sends ``answer`` (or
    nothing) to each, then keeps it open."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.held.append(conn)
                if self.answer:
                    conn.recv(100)
                    conn.sendall(self.answer)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [(b"", "stayed silent"), (b"HTTP/1.1 400 Bad Request\r\n\r\n", "begin no MPA frame")],
)
def test_not_an_mpa_responder_is_one_line_exit_2(
    answer: bytes, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that never answers a valid Request with an MPA frame ends the run after the
    first probe (one timeout), not after every case's (issue 37)."""
    server = _NotMpa(answer)
    try:
        status = main(["conformance", "127.0.0.1", str(server.port), "--timeout", "1"])
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "is not an MPA Responder" in err and why in err
    # Only the first probe's connection was made: no case ran.
    assert len(server.held) == 1


def test_peer_cmd_runs_once_per_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--peer-cmd: a command that never connects fails each case with its exit status."""
    status = main(
        ["conformance", "--listen", "0", "--peer-cmd", "exit 3", "rfc6581/9.2/10", "--timeout", "2"]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "the peer command ended without connecting (exit 3)" in out


def test_a_target_that_dies_is_not_passed(capsys: pytest.CaptureFixture[str]) -> None:
    """Closing cases would pass against a dead target: a probe after each catches it."""
    with listening(["--timeout", TARGET_TIMEOUT, "--connections", "6"]) as port:
        status = main(["conformance", "127.0.0.1", str(port), "rfc5044/7.1.1/"])
    out = capsys.readouterr().out
    assert status == 1
    assert "stopped answering valid MPA Requests after rfc5044/7.1.1/" in out
    assert "SKIP rfc5044/7.1.1/24" in out  # every later case


def test_cases_may_follow_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    """``iwarp conformance HOST PORT --strict CASE``: the cases after the options are taken
    (argparse alone refuses them as unrecognized arguments); an unknown option still is."""
    assert main(["conformance", "--list", "rfc5044/4.1/1", "--strict", "rfc5044/4.3/"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out if line.startswith("rfc")] == [
        "rfc5044/4.1/1",
        "rfc5044/4.3/1",
    ]
    with listening(["--timeout", TARGET_TIMEOUT]) as port:
        args = ["conformance", "127.0.0.1", str(port), "--strict", "rfc6581/9.1/3", "--json"]
        assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in report["results"]] == ["rfc6581/9.1/3"]
    with pytest.raises(SystemExit) as exited:
        main(["conformance", "--list", "rfc5044/4.1/1", "--strict", "rfc5044/4.3/", "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage: iwarp conformance" in err and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("settle", [0.0, 0.4])
def test_settle_waits_after_the_reply(settle: float, capsys: pytest.CaptureFixture[str]) -> None:
    """--settle: the tool waits that long after a Responder target's Reply before its first
    FPDU (for targets that install their FPDU receive path late, as siw 6.1 does), and the
    report says so."""
    import re

    with listening(["--timeout", TARGET_TIMEOUT, "--op", "write"]) as port:
        args = ["conformance", "127.0.0.1", str(port), "rfc5041/7.2/11", "-v"]
        status = main([*args, "--settle", str(settle)])
    out = capsys.readouterr().out
    assert status == 0 and "PASS rfc5041/7.2/11" in out, out
    reply = re.search(r"([0-9.]+)s got MPA Reply", out)
    first = re.search(r"([0-9.]+)s sent hello Send", out)
    assert reply is not None and first is not None, out
    gap = float(first.group(1)) - float(reply.group(1))
    assert ("(--settle)" in out) == bool(settle)
    assert gap >= settle - 0.01, out


@pytest.mark.parametrize("value", ["-1", "11"])
def test_settle_is_bounded(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "127.0.0.1", "1", "rfc5041/7.2/1", "--settle", value]) == 2
    assert "--settle must be between 0 and 10 seconds" in capsys.readouterr().err


def test_the_seed_is_printed_and_replays_the_tools_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The sink STag and TO of the tool's Read Requests come from the run's seed: printed in
    the report, the same values again with --seed, others with another seed."""
    case = "rfc5040/5.2.2/1"

    def sinks(seed: int) -> tuple[int, list[str]]:
        args = ["conformance", "127.0.0.1", str(port), case, "--json", "-v"]
        assert main([*args, "--seed", str(seed)]) == 0
        report = json.loads(capsys.readouterr().out)
        (result,) = report["results"]
        return report["seed"], [line for line in result["observed"] if "sink STag" in line]

    with listening(["--op", "read", "--timeout", TARGET_TIMEOUT]) as port:
        seed, first = sinks(7)
        _, again = sinks(7)
        _, other = sinks(8)
        assert main(["conformance", "127.0.0.1", str(port), case]) == 0
        heading = capsys.readouterr().out.splitlines()[0]
    assert (
        seed == 7
        and first
        and [x.split("s ", 1)[1] for x in first] == [x.split("s ", 1)[1] for x in again]
    )
    assert [x.split("s ", 1)[1] for x in first] != [x.split("s ", 1)[1] for x in other]
    assert "; seed " in heading and "--seed" in heading


#: Cases that send each of the tool's free values: private data (/33, /28), an MSN on a
#: queue that does not exist (7.2/1) and one far ahead (7.2/3), an RFC 7306 Request
#: Identifier (5.2.1/2), and the sink STag and TO of Read Requests (5.2.2/1).
_SEEDED_CASES = (
    "rfc5044/7.1.1/28",
    "rfc5044/7.1.1/33",
    "rfc5041/7.2/1",
    "rfc5041/7.2/3",
    "rfc7306/5.2.1/2",
    "rfc5040/5.2.2/1",
)


def test_the_seed_replays_the_run_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every octet the tool sends comes from --seed: the same seed sends the same octets on
    every connection, another seed changes each of the free values (private data, MSNs,
    Request Identifiers, sink STag and TO)."""
    from iwarp.conformance.link import Link
    from iwarp.conformance.session import ToolValues

    sent: list[bytes] = []
    real_send = Link.send

    def recording(self: Link, data: bytes) -> bool:
        sent.append(bytes(data))
        return real_send(self, data)

    monkeypatch.setattr(Link, "send", recording)

    def run(seed: int) -> list[bytes]:
        sent.clear()
        args = [
            "conformance",
            "127.0.0.1",
            str(port),
            *_SEEDED_CASES,
            "-j",
            "1",
            "--json",
            "--strict",
        ]
        assert main([*args, "--seed", str(seed)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert [r["status"] for r in report["results"]] == ["passed"] * len(_SEEDED_CASES)
        return list(sent)

    with listening(["--op", "read", "--timeout", TARGET_TIMEOUT]) as port:
        first, again, other = run(11), run(11), run(12)
    assert first == again
    wire, other_wire = b"".join(first), b"".join(other)
    for seed, octets in ((11, wire), (12, other_wire)):
        v = ToolValues.draw(seed)
        for value in (
            v.private_data(17),
            v.private_data(513),
            v.free_msn.to_bytes(4, "big"),
            v.request_id.to_bytes(4, "big"),
            v.sink_stag.to_bytes(4, "big"),
            v.sink_to.to_bytes(8, "big"),
        ):
            assert value in octets, (seed, value.hex())
    assert wire != other_wire


def test_the_values_of_one_seed_are_the_same_and_within_bounds() -> None:
    """ToolValues.draw is a function of the seed alone, and its values keep their bounds."""
    from hypothesis import given
    from hypothesis import strategies as st

    from iwarp.conformance.session import ToolValues

    @given(st.integers(0, (1 << 32) - 1))
    def check(seed: int) -> None:
        v = ToolValues.draw(seed)
        assert v == ToolValues.draw(seed)
        assert 0x100 <= v.sink_stag < 0xFFFF_FF00 and v.sink_to % 4096 == 0
        assert 1 <= v.request_id < (1 << 32) - 0xFF
        assert 1 <= v.free_msn < 1 << 32 and 1 << 16 <= v.msn_ahead < 1 << 24
        assert len(v.private_data(ToolValues.PRIVATE_MAX)) == ToolValues.PRIVATE_MAX

    check()
    with pytest.raises(ValueError, match="1025 octets of private data"):
        ToolValues.draw(0).private_data(1025)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "601"])
def test_startup_wait_is_bounded(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["conformance", "127.0.0.1", "1", "rfc5044/7.1.2/8", "--strict"]
    assert main([*args, "--startup-wait", value]) == 2
    err = capsys.readouterr().err
    assert "--startup-wait: a startup wait is more than 0 and at most 600 s, not" in err, err
    assert "Traceback" not in err


def test_startup_wait_that_is_no_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["conformance", "127.0.0.1", "1", "--strict", "--startup-wait", "soon"])
    assert exited.value.code == 2
    assert "--startup-wait: invalid float value: 'soon'" in capsys.readouterr().err


def test_startup_wait_without_a_timer_case_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --strict no case waits for a startup timer: the option would do nothing."""
    assert main(["conformance", "127.0.0.1", "1", "rfc5044/", "--startup-wait", "75"]) == 2
    err = capsys.readouterr().err
    assert "none of the selected cases waits for the target's startup timer" in err
    assert "--strict" in err


def test_a_longer_timer_is_skipped_then_judged_with_startup_wait(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """iwarp listen --timeout 3 against a default startup wait made 1 s: skipped, the reason
    and the header saying how to wait longer, exit 0; with --startup-wait 5 it passes."""
    import iwarp.cli.conformance

    def short(seconds: float = 1.0, *, chosen: bool = False) -> StartupWait:
        return StartupWait(seconds, chosen=chosen)

    monkeypatch.setattr(iwarp.cli.conformance, "StartupWait", short)
    with listening(["--timeout", "3"]) as port:
        args = ["conformance", "127.0.0.1", str(port), "rfc5044/7.1.2/8", "--strict"]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "judged when it closes within 1 s (--startup-wait S waits longer)" in out
        assert "SKIP rfc5044/7.1.2/8" in out, out
        assert "no close within 1 s; --startup-wait S to judge a longer timer" in out
        assert main([*args, "--startup-wait", "5", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["status"] == "passed" and result["timer"] and result["idle"], result
