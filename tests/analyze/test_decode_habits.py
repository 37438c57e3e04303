"""``iwarp decode`` as an analyst uses it from a shell: rates in MiB/s, a
reader that goes away (``| head``), captures iwarp wrote itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from analyze_traffic import Conversation, payload, send, standard
from hypothesis import given
from hypothesis import strategies as st

from clitools import IWARP, connect, listen, run_in_process
from iwarp.analyze.origin import RAW_ULP_TAG, application_name, shb_application
from iwarp.analyze.pcapng import PcapngWriter
from iwarp.cli._args import format_octets


def decode(*argv: str) -> subprocess.CompletedProcess[str]:
    """``iwarp decode ARGV`` on one capture, in this process."""
    return run_in_process("decode", *argv)


def many_sends(tmp_path: Path, count: int = 400) -> Path:
    """A clean capture with enough records to fill a pipe several times."""
    conv: Conversation = standard(False, False)
    conv.i2r = [send(i + 1, payload(300, i)) for i in range(count)]
    conv.r2i = [send(1, payload(10, 1))]
    cap, _ = conv.capture()
    path = tmp_path / "many.pcap"
    cap.write(str(path))
    return path


# -- rates ----------------------------------------------------------------------------


@pytest.mark.slow
def test_rates_are_mib_per_second(tmp_path: Path) -> None:
    path = many_sends(tmp_path, 20)
    text = decode(str(path))
    assert text.returncode == 0, text.stderr
    assert "MB/s" not in text.stdout and "MB " not in text.stdout
    closing = [line for line in text.stdout.splitlines() if line.startswith(str(path))]
    size = path.stat().st_size
    assert len(closing) == 1 and closing[0].endswith("MiB/s)")
    assert f"({format_octets(size)} in " in closing[0]
    assert "throughput: " in text.stdout and " MiB/s mean over " in text.stdout
    summary = json.loads(decode(str(path), "--json").stdout.splitlines()[-1])
    assert summary["type"] == "capture_summary"
    assert summary["octets_read"] == size
    assert "mib_per_s" in summary and "mb_per_s" not in summary


# -- a reader that goes away ---------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [["--json"], ["-V"], ["SECOND", "--json", "--jobs", "2"]],
    ids=["json", "verbose", "parallel"],
)
def test_head_closing_the_pipe_is_quiet(tmp_path: Path, options: list[str]) -> None:
    path = many_sends(tmp_path)
    argv = [str(path) if o == "SECOND" else o for o in options]
    shell = " ".join([*IWARP, "decode", str(path), *argv]) + " | head -n 2"
    done = subprocess.run(
        ["bash", "-c", shell + '; echo "status=${PIPESTATUS[0]}"'],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    assert lines[-1] == "status=141"  # as tshark and coreutils: ended by SIGPIPE
    assert done.stderr == ""  # no "Broken pipe", no traceback


# -- captures iwarp writes itself -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("op", ["mpa", "send"])
def test_own_capture_decodes_clean_without_flags(tmp_path: Path, op: str) -> None:
    listener_pcap, connector_pcap = tmp_path / "listen.pcapng", tmp_path / "connect.pcapng"
    with listen("--count", "3", "--op", op, "--pcap", str(listener_pcap)) as listener:
        rc, out = connect(listener.port, "--count", "3", "--op", op, "--pcap", str(connector_pcap))
        lrc, _ = listener.finish()
    assert (rc, lrc) == (0, 0), out
    for path in (connector_pcap, listener_pcap):
        text = decode(str(path))
        assert text.returncode == 0, text.stdout
        assert "0 protocol errors" in text.stdout
        said = "bare MPA ULPDUs, DDP/RDMAP headers not decoded" in text.stdout
        assert said is (op == "mpa")
        lines = [json.loads(line) for line in decode(str(path), "--json").stdout.splitlines()]
        assert lines[-1]["raw_ulp"] is (op == "mpa")
        assert lines[-1]["errors"] == 0
        fpdus = [line for line in lines if line["type"] == "fpdu"]
        assert fpdus and all(bool(f["rdmap"]) is (op != "mpa") for f in fpdus)


def test_the_mark_is_the_writers_application_option(tmp_path: Path) -> None:
    for raw in (False, True):
        path = tmp_path / f"{raw}.pcapng"
        with open(path, "wb") as out:
            PcapngWriter(out, application=application_name(raw_ulp=raw)).close()
        found = shb_application(path.read_bytes())
        assert found == application_name(raw_ulp=raw)
        assert (RAW_ULP_TAG in (found or "")) is raw


@given(st.binary(max_size=200))
def test_reading_the_mark_from_any_octets_never_fails(data: bytes) -> None:
    found = shb_application(data)
    assert found is None or isinstance(found, str)


@given(st.binary(max_size=64), st.sampled_from([b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"]))
def test_reading_the_mark_from_a_mangled_header_never_fails(options: bytes, bom: bytes) -> None:
    size = 24 + len(options) + 4
    length = size.to_bytes(4, "little") if bom[0] == 0x4D else size.to_bytes(4, "big")
    head = b"\x0a\x0d\x0d\x0a" + length + bom + bytes(12)
    found = shb_application(head + options + length)
    assert found is None or isinstance(found, str)
