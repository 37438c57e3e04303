"""``iwarp decode -T fields -e NAME ... [-E ...]``: a field list for scripts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from analyze_traffic import standard
from hypothesis import given
from hypothesis import strategies as st

from clitools import IWARP, run_in_process
from iwarp.analyze.fields import FIELDS, Kind, format_value


def decode(*argv: str) -> subprocess.CompletedProcess[str]:
    """``iwarp decode ARGV`` on one capture, in this process."""
    return run_in_process("decode", *argv)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "c.pcap"
    cap, _ = standard(True, False).capture(client=("10.0.0.1", 50000), server=("10.0.0.2", 4000))
    cap.write(str(path))
    return path


def json_records(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(x) for x in decode(str(path), "--json").stdout.splitlines()]
    return [r for r in lines if r["type"] not in ("stream_summary", "capture_summary")]


def test_values_are_those_of_the_json_records(capture: Path) -> None:
    names = ["frame", "stream", "direction", "seq", "type", "opcode_name", "stag", "msn"]
    names += ["crc_ok", "wire_length", "markers", "last", "tcp.srcport", "ip.dst"]
    argv = [str(capture), "-T", "fields"]
    for name in names:
        argv += ["-e", name]
    done = decode(*argv)
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    records = json_records(capture)
    assert len(lines) == len(records) == 11  # field lines only: no summary, no closing lines
    for line, record in zip(lines, records, strict=True):
        values = dict(zip(names, line.split("\t"), strict=True))
        assert values["frame"] == str(record["frame"])
        assert values["stream"] == "0" and values["direction"] == record["direction"]
        assert values["seq"] == str(record["seq"]) and values["type"] == record["type"]
        sender_is_client = record["direction"] == "initiator"
        assert values["tcp.srcport"] == ("50000" if sender_is_client else "4000")
        assert values["ip.dst"] == ("10.0.0.2" if sender_is_client else "10.0.0.1")
        if record["type"] != "fpdu":
            assert values["opcode_name"] == values["stag"] == values["crc_ok"] == ""
            continue
        ddp, rdmap = record["ddp"], record["rdmap"]
        assert isinstance(ddp, dict) and isinstance(rdmap, dict)
        assert values["opcode_name"] == rdmap["opcode_name"]
        assert values["stag"] == (f"{ddp['stag']:#x}" if ddp["tagged"] else "")
        assert values["msn"] == ("" if ddp["tagged"] else str(ddp["msn"]))
        assert values["crc_ok"] == "1" and values["last"] == str(int(ddp["last"]))
        assert values["wire_length"] == str(record["wire_length"])
        markers = record["markers"]
        assert isinstance(markers, list) and values["markers"] == str(len(markers))


def test_options_header_separator_quote_aggregator(capture: Path) -> None:
    base = [str(capture), "-e", "frame", "-e", "addr", "-e", "opcode_name", "-Y", "stag"]
    plain = decode(*base).stdout.splitlines()
    assert plain[0] == "10\t10.0.0.1,10.0.0.2\tRDMA_WRITE"
    assert len(plain) == 3  # -Y: the tagged FPDUs (two Writes, one Read Response)
    done = decode(
        *base, "-E", "header=y", "-E", "separator=;", "-E", "quote=d", "-E", "aggregator=/s"
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "frame;addr;opcode_name"
    assert lines[1] == '"10";"10.0.0.1 10.0.0.2";"RDMA_WRITE"'
    assert decode(*base, "-E", "separator=/s", "-E", "quote=s").stdout.splitlines()[0] == (
        "'10' '10.0.0.1,10.0.0.2' 'RDMA_WRITE'"
    )
    # -e alone implies -T fields; -c counts the lines.
    assert decode(*base, "-c", "1").stdout.splitlines() == plain[:1]


def test_several_captures_one_header_no_total(capture: Path, tmp_path: Path) -> None:
    second = tmp_path / "d.pcap"
    second.write_bytes(capture.read_bytes())
    for jobs in ("1", "2"):
        # A process of its own: --jobs 2 starts worker processes.
        done = subprocess.run(
            [
                *IWARP,
                "decode",
                str(capture),
                str(second),
                "-e",
                "frame",
                "-E",
                "header=y",
                "-j",
                jobs,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0
        lines = done.stdout.splitlines()
        assert lines[0] == "frame" and lines.count("frame") == 1
        assert len(lines) == 1 + 2 * 11 and "total" not in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-T", "fields"], "-T fields goes with -e"),
        (["-E", "header=y"], "-T fields goes with -e"),
        (["-e", "frame", "--json"], "-T fields goes with -e"),
        (["-e", "nope"], "no field 'nope'"),
        (["-e", "frame", "-E", "header=maybe"], "header is one of y, n"),
        (["-e", "frame", "-E", "separator=ab"], "separator is one character"),
        (["-e", "frame", "-E", "colour=red"], "expected separator=, header="),
    ],
)
def test_usage_errors(capture: Path, argv: list[str], message: str) -> None:
    done = decode(str(capture), *argv)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


@given(st.sampled_from([f for f in FIELDS.values() if f.kind == Kind.INT]), st.integers(0, 2**64))
def test_numbers_read_back(field: object, value: int) -> None:
    from iwarp.analyze.fields import Field

    assert isinstance(field, Field)
    text = format_value(field, value)
    assert int(text, 0) == value
    assert text.startswith("0x") is field.hex


@given(st.booleans(), st.floats(0, 1e9, allow_nan=False))
def test_flags_and_times(flag: bool, seconds: float) -> None:
    assert format_value(FIELDS["crc_ok"], flag) == ("1" if flag else "0")
    assert abs(float(format_value(FIELDS["time"], seconds)) - seconds) <= 1e-6  # 6 decimals
    assert format_value(FIELDS["stag"], None) == ""
