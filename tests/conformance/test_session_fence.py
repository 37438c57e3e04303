"""Against an Initiator target the tool is the MPA Responder: its first FPDU waits for the
target's (RFC 5044 §7.1.2 rule 4), and a case whose target sends none is skipped."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from iwarp.conformance import craft
from iwarp.conformance.link import Link
from iwarp.conformance.session import NO_FIRST_FPDU, Session
from iwarp.conformance.terms import CaseSkipped, TargetRole


@contextmanager
def _pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        theirs = socket.create_connection(server.getsockname()[:2])
        ours, _ = server.accept()
    with ours, theirs:
        yield ours, theirs


def _session(sock: socket.socket, role: TargetRole) -> Session:
    return Session(Link(sock), role, deadline=time.monotonic() + 5.0, cooperation_wait=0.3)


def test_the_first_fpdu_waits_for_the_initiators() -> None:
    with _pair() as (ours, theirs):
        theirs.sendall(craft.fpdu(craft.send(b"first", msn=1).octets))
        s = _session(ours, TargetRole.INITIATOR)
        s.send_ulpdu(craft.send(b"ours", msn=1).octets, "our first FPDU")
        assert [got.ulpdu[-5:] for got in s.received] == [b"first"]
        assert s.cooperation.receive  # the target's Send was learnt from
        theirs.settimeout(1.0)
        assert theirs.recv(64)  # ours went out after theirs


def test_no_fpdu_from_the_initiator_skips_and_sends_nothing() -> None:
    with _pair() as (ours, theirs):
        s = _session(ours, TargetRole.INITIATOR)
        with pytest.raises(CaseSkipped) as skipped:
            s.send_ulpdu(craft.send(b"ours", msn=1).octets, "our first FPDU")
        assert str(skipped.value) == NO_FIRST_FPDU
        theirs.settimeout(0.2)
        with pytest.raises(TimeoutError):
            theirs.recv(64)


def test_a_responder_target_is_not_waited_for() -> None:
    with _pair() as (ours, theirs):
        s = _session(ours, TargetRole.RESPONDER)
        s.send_ulpdu(craft.send(b"ours", msn=1).octets, "our first FPDU")
        assert not s.received
        theirs.settimeout(1.0)
        assert theirs.recv(64)


def test_a_reply_to_a_broken_request_fails_at_once_naming_the_reply() -> None:
    """A Responder that answers a Request with a wrong key (RFC 5044 §7.1.1: it MUST close)
    with a Reply fails as soon as the Reply arrives, naming it, not after the case's whole
    timeout as "still open" (silent_target.py answers every startup frame)."""
    from iwarp.conformance import all_cases
    from iwarp.conformance.model import Status, select
    from iwarp.conformance.runner import ResponderTarget, Runner

    from .silent_target import SilentTarget

    target = SilentTarget()
    try:
        cases = select(all_cases(), ["rfc5044/7.1.1/8", "rfc5044/7.1.1/28"], strict=True)
        results = Runner(ResponderTarget("127.0.0.1", target.port), timeout=30.0).run(cases)
    finally:
        target.close()
    assert [r.status for r in results] == [Status.FAILED, Status.FAILED]
    for result in results:
        assert "the target sent an MPA Reply" in result.reason, result.reason
        assert "instead of closing" in result.reason, result.reason
