"""The --fault grammar: what parses, and the item a bad SPEC is told by."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iwarp.proxy.spec import FaultSpecError, parse_fault


def test_the_issue_examples() -> None:
    fault = parse_fault("to=responder; opcode == rdma_read_request; nth=2; corrupt-crc")
    assert (fault.to, fault.action, fault.nth) == ("responder", "corrupt-crc", 2)
    assert fault.where is not None and fault.where.matches({"opcode": 1})
    fault = parse_fault("to=initiator; resegment 1")
    assert (fault.action, fault.size, fault.nth, fault.where) == ("resegment", 1, 1, None)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("to=responder; every; rewrite stag=0x10", ("rewrite", "stag", 0x10, 0)),
        ("to=responder; rewrite opcode=rdma_write", ("rewrite", "opcode", 0, 1)),
        ("to=initiator; rewrite m=1", ("rewrite", "m", 1, 1)),
        ("TO=Initiator;delay 20", ("delay", "", 0, 1)),
        ("to=initiator; terminate ddp/1/0", ("terminate", "", 0, 1)),
    ],
)
def test_parses(spec: str, expected: tuple[str, str, int, int]) -> None:
    fault = parse_fault(spec)
    assert (fault.action, fault.field, fault.value, fault.nth) == expected


def test_units_and_targets() -> None:
    assert parse_fault("to=initiator; delay 250").seconds == 0.25
    assert parse_fault("to=initiator; stall 3").seconds == 3.0
    assert parse_fault("to=initiator; terminate rdmap/2/0x10").terminate == (0, 2, 16)
    assert parse_fault("to=initiator; terminate mpa/0/2").terminate == (2, 0, 2)
    frame = parse_fault("to=responder; rewrite ird=2")
    assert frame.frames and not frame.fpdus
    assert not parse_fault("to=responder; delay 5").frames
    assert parse_fault("to=responder; type == mpa_request; delay 5").frames
    quoted = parse_fault('to=responder; note contains "a;b"; delay 1')
    assert quoted.where is not None


@pytest.mark.parametrize(
    ("spec", "item"),
    [
        ("corrupt-crc", ""),
        ("to=nobody; corrupt-crc", "to=nobody"),
        ("to=responder", ""),
        ("to=responder; corrupt-crc; drop-fpdu", "drop-fpdu"),
        ("to=responder; nth=0; fin", "nth=0"),
        ("to=responder; nth=2; every; fin", "every"),
        ("to=responder; rewrite colour=1", "rewrite colour=1"),
        ("to=responder; rewrite stag=0x100000000", "rewrite stag=0x100000000"),
        ("to=responder; rewrite opcode=bogus", "rewrite opcode=bogus"),
        ("to=responder; delay soon", "delay soon"),
        ("to=responder; delay -1", "delay -1"),
        ("to=responder; stall nan", "stall nan"),
        ("to=responder; resegment 0", "resegment 0"),
        ("to=responder; terminate ddp/1", "terminate ddp/1"),
        ("to=responder; terminate xyz/1/1", "terminate xyz/1/1"),
        ("to=responder; fin now", "fin now"),
        ("to=responder; stag ==; fin", "stag =="),
        ("to=responder; frobnicate; fin", "frobnicate"),
        ("to=responder; stag == 1; msn == 2; fin", "msn == 2"),
    ],
)
def test_errors_name_the_item(spec: str, item: str) -> None:
    with pytest.raises(FaultSpecError) as caught:
        parse_fault(spec)
    assert caught.value.item == item
    if item:
        assert repr(item) in str(caught.value)


def test_cli_usage_error_exits_2_and_names_the_item() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "iwarp",
            "proxy",
            "--listen",
            "0",
            "--to",
            "127.0.0.1:1",
            "--fault",
            "to=responder; resegment zero",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "'resegment zero'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--listen", "x:y", "--to", "h:1"],
        ["--listen", "0", "--to", "nohostport"],
        ["--listen", "0", "--to", "h:1", "--max-connections", "0"],
        ["--listen", "0", "--to", "h:1", "--idle-timeout", "nan"],
        ["--listen", "0", "--to", "h:1", "--idle-timeout", "-1"],
    ],
)
def test_cli_bad_addresses_exit_2(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "iwarp", "proxy", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
