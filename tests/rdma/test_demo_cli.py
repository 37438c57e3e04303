"""``iwarp demo``: responder and initiator on loopback, every byte verified."""

from __future__ import annotations

import json

import pytest

from iwarp.cli import main


@pytest.mark.parametrize(
    "flags",
    [[], ["--markers"], ["--no-crc"], ["--p2p", "write"], ["--p2p", "send", "--size", "0"]],
)
def test_demo_json_lines(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--size", "70000", "--count", "3", *flags]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    connection, *ops, summary = lines
    assert connection["type"] == "connection" and connection["revision"] == 2
    assert connection["crc"] == ("--no-crc" not in flags)
    assert connection["markers_send"] == ("--markers" in flags)
    assert [op["op"] for op in ops] == ["send", "rdma_write", "rdma_read"]
    size = 0 if "0" in flags else 70000
    for op in ops:
        assert op["verified"] is True and op["messages"] == 3 and op["octets"] == 3 * size
    assert summary == {**summary, "type": "summary", "verified": True, "octets": 9 * size}


def test_demo_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--size", "4096", "--count", "2"]) == 0
    out = capsys.readouterr().out
    assert "negotiated: MPA Rev 2, CRC32C on" in out
    assert out.count("verified: yes") == 4
