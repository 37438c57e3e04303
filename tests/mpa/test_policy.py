"""The MPA decisions every driver shares: the Responder's answer and the
Initiator's Rev 1 fallback."""

from __future__ import annotations

import pytest

from helpers import out
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import ConnectionEstablished, ConnectionRejected, RequestReceived
from iwarp.mpa.policy import Accept, Attempts, Reject, answer_request, rev1_fallback
from iwarp.mpa.wire import Revision


def request_at_responder() -> tuple[MpaConnection, MpaConnection, RequestReceived]:
    init = MpaConnection(Role.INITIATOR, MpaConfig(), private_data=b"hi")
    resp = MpaConnection(Role.RESPONDER, MpaConfig())
    (request,) = resp.receive_data(out(init), 0.0)
    assert isinstance(request, RequestReceived)
    return init, resp, request


def test_default_is_accept() -> None:
    _, resp, request = request_at_responder()
    assert answer_request(resp, request, None) == Accept()
    assert isinstance(resp.take_events()[0], ConnectionEstablished)


def test_reject_with_ird_ord_reaches_the_initiator() -> None:
    init, resp, request = request_at_responder()
    answer_request(resp, request, lambda r: Reject(b"busy", ird=1, ord=9))
    (rejected,) = init.receive_data(out(resp), 0.0)
    assert isinstance(rejected, ConnectionRejected) and rejected.by_peer
    assert rejected.private_data == b"busy"
    assert rejected.frame is not None and rejected.frame.enhanced is not None
    assert (rejected.frame.enhanced.ird, rejected.frame.enhanced.ord) == (1, 9)


@pytest.mark.parametrize(
    ("revision", "code", "requested", "retried"),
    [
        (Revision.REV2, MpaErrorCode.TCP_CLOSED, True, True),
        (Revision.REV2, MpaErrorCode.TCP_CLOSED, False, False),
        (Revision.REV2, MpaErrorCode.INVALID_FRAME, True, False),
        (Revision.REV1, MpaErrorCode.TCP_CLOSED, True, False),
    ],
)
def test_rev1_fallback(
    revision: Revision, code: MpaErrorCode, requested: bool, retried: bool
) -> None:
    config = MpaConfig(revision=revision)
    retry = rev1_fallback(config, MpaError(code, "x"), requested=requested)
    assert (retry is not None) is retried
    if retry is not None:
        assert retry.revision == Revision.REV1 and retry.crc == config.crc


def test_rev1_fallback_from_the_config() -> None:
    config = MpaConfig(rev1_fallback=True)
    retry = rev1_fallback(config, MpaError(MpaErrorCode.TCP_CLOSED, "x"), requested=False)
    assert retry is not None and retry.revision == Revision.REV1


def test_attempts_retry_once_as_rev1_then_raise() -> None:
    closed = MpaError(MpaErrorCode.TCP_CLOSED, "closed on our Rev 2 Request")
    attempts = Attempts(MpaConfig(), b"pd", fallback=True)
    assert attempts.config.revision == Revision.REV2
    attempts.failed(closed)  # a retry follows
    assert attempts.config.revision == Revision.REV1
    with pytest.raises(MpaError) as raised:
        attempts.failed(closed)  # once only
    assert raised.value is closed


@pytest.mark.parametrize("fallback", [False, True])
def test_attempts_raise_what_is_not_the_fallback_case(fallback: bool) -> None:
    bad = MpaError(MpaErrorCode.INVALID_FRAME, "a bad Reply")
    attempts = Attempts(MpaConfig(), b"", fallback=fallback)
    with pytest.raises(MpaError) as raised:
        attempts.failed(bad)
    assert raised.value is bad and attempts.config.revision == Revision.REV2


def test_attempts_check_the_private_data_before_any_connection() -> None:
    with pytest.raises(LocalProtocolError):
        Attempts(MpaConfig(), bytes(600), fallback=True)
