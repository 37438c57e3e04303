"""``iwarp connect --op mpa`` asks for a receipt only of a listener that offers
one in its Reply; otherwise (a foreign MPA peer, ``--no-receipt``) success
means the peer's TCP acknowledged every octet, and the summary says so."""

from __future__ import annotations

import hashlib
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from clitools import IWARP, by_type, connect, listen
from iwarp.cli._mpa_options import message
from iwarp.cli._receipt import RECEIPT_OFFER, RECEIPT_REQUEST, offer_receipts, split_offer
from iwarp.sync.mpa import listen as mpa_listen


@given(st.binary(max_size=40), st.integers(0, 80))
def test_an_offer_is_added_where_it_fits_and_split_off_again(data: bytes, room: int) -> None:
    sent = offer_receipts(data, room)
    fits = len(data) + len(RECEIPT_OFFER) <= room
    assert sent == (data + RECEIPT_OFFER if fits else data)
    if not data.endswith(RECEIPT_OFFER):
        assert split_offer(sent) == (data, fits)


@contextmanager
def foreign_mpa_peer(received: list[bytes]) -> Iterator[int]:
    """An MPA Responder that is not iwarp listen: it offers no receipt and
    answers nothing, it reads every ULPDU until the connector closes."""
    listener = mpa_listen("127.0.0.1", 0)

    def serve() -> None:
        with listener:
            sock = listener.accept(timeout=30)
            received.extend(sock)
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.port
    finally:
        thread.join(30)


def test_a_foreign_mpa_peer_that_took_every_octet_is_a_success() -> None:
    received: list[bytes] = []
    with foreign_mpa_peer(received) as port:
        rc, out = connect(port, "--op", "mpa", "--count", "20", "--size", "1000")
    assert rc == 0, out
    (established,) = by_type(out, "established")
    assert established["receipts"] is False
    (summary,) = by_type(out, "summary")
    assert summary["delivery"] == "tcp"
    assert summary["delivery_note"] == (
        "the peer's TCP acknowledged every octet, it closed after us; "
        "no receipt (the peer offers no receipts)"
    )
    assert received == [message(i, 1000) for i in range(20)]  # no receipt request either
    assert RECEIPT_REQUEST not in received
    assert summary["sha256"] == hashlib.sha256(b"".join(received)).hexdigest()


def test_iwarp_listen_offers_receipts_and_connect_asks_for_one() -> None:
    with listen("--op", "mpa", "--count", "3", "--private-data", "0102") as listener:
        rc, out = connect(listener.port, "--op", "mpa", "--count", "3")
        lrc, lines = listener.finish()
    assert (rc, lrc) == (0, 0), out
    (established,) = by_type(out, "established")
    # The offer is told apart from the listener's own private data.
    assert established["receipts"] is True and established["peer_private_data"] == "0102"
    (summary,) = by_type(out, "summary")
    assert summary["delivery"] == "receipt"
    assert summary["sha256"] == by_type(lines, "summary")[0]["sha256"]


def test_no_receipt_on_either_side_is_a_tcp_success_that_says_why() -> None:
    for listen_options, connect_options, why in [
        (["--no-receipt"], [], "the peer offers no receipts"),
        ([], ["--no-receipt"], "--no-receipt"),
    ]:
        with listen("--op", "mpa", "--count", "2", *listen_options) as listener:
            argv = ["connect", "127.0.0.1", str(listener.port), "--op", "mpa", "--count", "2"]
            proc = subprocess.run(
                [*IWARP, *argv, *connect_options],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            lrc, lines = listener.finish()
        assert (proc.returncode, lrc) == (0, 0), proc.stderr
        summary = proc.stdout.splitlines()[-1]
        assert summary.startswith("summary: messages=2 octets=128 ")
        assert " delivery=tcp " in summary
        assert f'no receipt ({why})"' in summary
        assert by_type(lines, "summary")[0]["messages"] == 2
