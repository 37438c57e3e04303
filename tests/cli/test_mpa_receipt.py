"""``iwarp connect --op mpa`` reports success only with the listener's receipt.

A listener that failed (a CRC error after a bit flip, another ``--op``)
makes the connector exit 1 with the listener's error: the Terminate it
sent (layer, type, code), or the receipt that disagrees with what was sent.
"""

from __future__ import annotations

import pytest

from cli.hostile import HostileRelay
from clitools import by_type, connect, listen
from iwarp.cli._receipt import (
    RECEIPT_REQUEST,
    Receipt,
    read_answer,
    receipt,
    terminate_for,
)
from iwarp.errors import MpaError, MpaErrorCode
from iwarp.rdmap.wire import TerminateHeader

FPDU = 2 + 200 + 2 + 4  # --size 200 with CRC: length, ULPDU, pad, CRC
REQUEST = 20  # the Request frame, no private data


def test_answers_round_trip() -> None:
    sha = "ab" * 32
    assert read_answer(receipt(3, 600, sha)) == Receipt(3, 600, sha)
    header = read_answer(terminate_for(MpaError(MpaErrorCode.CRC_MISMATCH, "x")))
    assert isinstance(header, TerminateHeader)
    assert (header.layer, header.etype, header.code) == (2, 0, 2)
    assert read_answer(RECEIPT_REQUEST) is None and read_answer(b"") is None


def payload_flip(message: int) -> list[int]:
    """The C2S offset of an octet in the middle of message ``message``'s payload."""
    return [REQUEST + message * FPDU + 2 + 100]


def test_crc_error_at_the_listener_fails_the_connector() -> None:
    with listen("--op", "mpa", "--connections", "1") as listener:
        flips = lambda i, d: payload_flip(165) if d == "c2s" else []  # noqa: E731
        with HostileRelay(listener.port, flips=flips) as relay:
            rc, out = connect(relay.port, "--op", "mpa", "--count", "300", "--size", "200")
        lrc, lines = listener.finish()
    assert len(relay.made) == 1
    assert rc == 1 and lrc == 1, (out, lines)
    assert not by_type(out, "summary")
    (error,) = by_type(out, "error")
    assert error["code"] == 2 and error.get("terminate") == "received", error
    (theirs,) = by_type(lines, "error")
    assert theirs["code"] == 2
    assert lines[-1]["messages"] == 165  # what arrived before the flip


def test_corruption_without_crc_is_caught_by_the_receipt() -> None:
    with listen("--op", "mpa", "--connections", "1", "--no-crc") as listener:
        flips = lambda i, d: payload_flip(7) if d == "c2s" else []  # noqa: E731
        with HostileRelay(listener.port, flips=flips) as relay:
            rc, out = connect(
                relay.port, "--op", "mpa", "--count", "20", "--size", "200", "--no-crc"
            )
        listener.finish()
    assert len(relay.made) == 1
    assert rc == 1 and not by_type(out, "summary")
    (error,) = by_type(out, "error")
    assert "the listener received 20 messages" in str(error["message"]), error


@pytest.mark.parametrize("theirs", ["send", "write", "read"])
def test_listener_running_another_op(theirs: str) -> None:
    with listen("--op", theirs, "--connections", "1") as listener:
        rc, out = connect(listener.port, "--op", "mpa", "--count", "5")
        _, lines = listener.finish()
    assert rc == 1 and not by_type(out, "summary"), out
    (error,) = by_type(out, "error")
    assert error.get("terminate") == "received", error
    # Both ends name the mismatch: the Terminate came from DDP or RDMAP.
    assert str(error["message"]).startswith("the listener sent a Terminate")
    assert str(error["message"]).endswith("(it runs --op send, write or read, we run --op mpa)")
    (logged,) = by_type(lines, "error")
    assert str(logged["message"]).endswith(
        f"(the peer sent no hello: does it run --op mpa? this listener runs --op {theirs})"
    )


def test_success_with_the_receipt_through_a_resegmenting_relay() -> None:
    with listen("--op", "mpa", "--connections", "1", "--markers") as listener:
        with HostileRelay(listener.port, seed=3) as relay:
            rc, out = connect(
                relay.port, "--op", "mpa", "--count", "50", "--size", "300", "--markers"
            )
        lrc, lines = listener.finish()
    assert rc == 0 and lrc == 0, (out, lines)
    assert out[-1]["sha256"] == lines[-1]["sha256"] and lines[-1]["messages"] == 50
