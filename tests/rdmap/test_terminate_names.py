"""Terminate layers, types and codes by name, with the spec that defines them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clitools import by_type, listen
from iwarp.cli import _rdma_traffic, main
from iwarp.ddp.errors import DdpTaggedCode, DdpTaggedError, DdpUntaggedCode, DdpUntaggedError
from iwarp.errors import MpaErrorCode, TerminateLayer
from iwarp.rdmap.errors import (
    RdmapErrorType,
    RemoteOperationCode,
    RemoteOperationError,
    RemoteProtectionCode,
)
from iwarp.rdmap.terminate import terminate_name

EVERY_CODE = [
    *((TerminateLayer.DDP, 1, code, "RFC 5041 §7.2") for code in DdpTaggedCode),
    *((TerminateLayer.DDP, 2, code, "RFC 5041 §7.2") for code in DdpUntaggedCode),
    *((TerminateLayer.RDMAP, 1, code, "RFC 5040 §4.8") for code in RemoteProtectionCode),
    *((TerminateLayer.RDMAP, 2, code, "RFC 5040 §4.8") for code in RemoteOperationCode),
    *(
        (TerminateLayer.LLP, 0, code, "RFC 5044 §8" if code <= 4 else "RFC 6581 §8")
        for code in MpaErrorCode
    ),
]


@pytest.mark.parametrize(("layer", "etype", "code", "spec"), EVERY_CODE)
def test_every_defined_code_has_a_name(layer: int, etype: int, code: int, spec: str) -> None:
    name = terminate_name(layer, etype, code)
    assert "unknown" not in name and f"({spec})" in name
    assert name.startswith({0: "RDMAP ", 1: "DDP ", 2: "MPA "}[layer])


def test_the_example_of_the_issue() -> None:
    assert terminate_name(1, 1, 0) == "DDP tagged buffer error: invalid STag (RFC 5041 §7.2)"
    assert terminate_name(0, 0, 0) == "RDMAP local catastrophic error (RFC 5040 §4.8)"


@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 255))
def test_any_values_get_a_text(layer: int, etype: int, code: int) -> None:
    name = terminate_name(layer, etype, code)
    assert name
    if (layer, etype) not in {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)}:
        assert "unknown error type" in name


def test_errors_read_by_name() -> None:
    error = DdpTaggedError(DdpTaggedCode.BASE_OR_BOUNDS, "TO 0x10 beyond the region")
    assert str(error) == (
        "DDP tagged buffer error: base or bounds violation (RFC 5041 §7.2): "
        "TO 0x10 beyond the region"
    )
    assert str(DdpUntaggedError(DdpUntaggedCode.NO_BUFFER, "queue 0 empty")).startswith(
        "DDP untagged buffer error: invalid MSN, no buffer available"
    )
    error2 = RemoteOperationError(RemoteOperationCode.UNEXPECTED_OPCODE, "opcode 0xd")
    assert error2.etype == RdmapErrorType.REMOTE_OPERATION
    assert str(error2).startswith("RDMAP remote operation error: unexpected opcode")


def test_cli_records_name_the_terminate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A connector whose hello names no op (as older ones), so that its RDMA
    # Writes reach the read listener's buffers and meet their protection.
    monkeypatch.setitem(_rdma_traffic.OP_TAGS, "write", 0)
    with listen("--connections", "1", "--op", "read") as listener:
        argv = ["connect", "127.0.0.1", str(listener.port), "--json", "--op", "write"]
        rc = main([*argv, "--count", "2"])
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        lrc, lines = listener.finish()
    assert (rc, lrc) == (1, 1)
    (sent,) = by_type(lines, "error")
    name = terminate_name(int(str(sent["layer"])), int(str(sent["etype"])), int(str(sent["code"])))
    assert sent["terminate_name"] == name and "unknown" not in name
    (received,) = by_type(out, "error")
    if "terminate" in received:  # else our next write met the close first
        assert received["terminate_name"] == name
        assert received["message"] == f"Terminate received: {name}"
