"""The adapter-independent MPA socket state (iwarp.mpa.session), without I/O:
two sessions wired to each other in memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import StreamDataReceived
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Decider, Reject
from iwarp.mpa.session import IncompleteReadError, MpaFace, MpaSession


def octets(session: MpaSession) -> bytes:
    return b"".join(bytes(b) for b in session.core.data_to_send())


def deliver(src: MpaSession, dst: MpaSession, now: float = 0.0) -> bool:
    """What ``src`` queued, into ``dst``; True when ``dst`` must close TCP."""
    return dst.handle(dst.core.receive_data(octets(src), now))


def started(decide: Decider | None = None) -> tuple[MpaSession, MpaSession]:
    init, resp = MpaSession(MpaConfig()), MpaSession(MpaConfig(), decide=decide)
    init.start(Role.INITIATOR, now=0.0, private_data=b"hi")
    resp.start(Role.RESPONDER, now=0.0)
    return init, resp


def test_startup_then_ulpdus_in_order_then_the_end() -> None:
    init, resp = started(decide=lambda r: Accept(b"ok"))
    assert not deliver(init, resp)  # the Request; decided at once
    assert resp.established and resp.params is not None
    assert not deliver(resp, init)  # the Reply
    assert init.established and init.params is not None
    assert init.params.peer_private_data == b"ok"
    for ulpdu in (b"one", b"", b"three"):
        init.core.send_ulpdu(ulpdu)
    deliver(init, resp)
    assert resp.readable and resp.backlog == 8
    assert [resp.take_ulpdu() for _ in range(3)] == [b"one", b"", b"three"]
    assert not resp.readable and resp.take_ulpdu() is None and resp.backlog == 0
    resp.handle(resp.core.receive_data(b"", 0.0))  # FIN
    assert resp.readable and resp.eof and resp.take_ulpdu() is None


def test_ulpdus_before_an_error_come_first() -> None:
    init, resp = started()
    deliver(init, resp)
    deliver(resp, init)
    init.core.send_ulpdu(b"good")
    good = octets(init)
    init.core.send_ulpdu(b"bad")
    bad = bytearray(octets(init))
    bad[-1] ^= 0xFF  # the CRC
    assert not resp.handle(resp.core.receive_data(good + bad, 0.0))  # code 2: may still send
    assert resp.take_ulpdu() == b"good"
    with pytest.raises(MpaError) as info:
        resp.take_ulpdu()
    assert info.value.mpa_code is MpaErrorCode.CRC_MISMATCH


def test_a_reject_asks_to_close_and_is_not_a_receive_error() -> None:
    init, resp = started(decide=lambda r: Reject(b"busy"))
    assert deliver(init, resp)
    assert isinstance(resp.error, ConnectionRejectedError)
    assert deliver(resp, init)
    assert isinstance(init.error, ConnectionRejectedError)
    assert init.error.private_data == b"busy"
    assert not init.established and init.startup_error() is init.error
    assert not init.readable and init.take_ulpdu() is None


def test_a_decision_with_bad_private_data_closes() -> None:
    _, resp = started(decide=lambda r: Accept(bytes(600)))
    init = MpaSession(MpaConfig())
    init.start(Role.INITIATOR, now=0.0)
    assert deliver(init, resp)
    assert isinstance(resp.error, LocalProtocolError)
    assert not resp.established


def test_startup_error_without_a_cause_is_tcp_closed() -> None:
    session = MpaSession(MpaConfig())
    error = session.startup_error()
    assert isinstance(error, MpaError) and error.mpa_code is MpaErrorCode.TCP_CLOSED


def test_unread_octets_are_mpa_input_at_the_switch() -> None:
    init, resp = MpaSession(MpaConfig()), MpaSession(MpaConfig())
    init.send_stream(b"HELLO\n")
    init.start(Role.INITIATOR, now=0.0)
    deliver(init, resp)  # streaming hello and the Request in one read
    assert resp.stream_until(b"\n") == b"HELLO\n"
    assert resp.unread  # the Request, read ahead
    resp.start(Role.RESPONDER, now=0.0)
    assert not resp.unread
    assert resp.handle(resp.core.take_events()) is False
    assert resp.established


@given(
    chunks=st.lists(st.binary(max_size=12), max_size=12),
    separator=st.sampled_from([b"\n", b"\r\n", b"END"]),
)
def test_stream_readers_at_every_split(chunks: list[bytes], separator: bytes) -> None:
    """Streaming octets in any chunking read as the whole would."""
    whole = b"".join(chunks)
    session = MpaSession(MpaConfig())
    lines: list[bytes] = []
    for chunk in chunks:
        if chunk:
            session.handle([StreamDataReceived(data=chunk)])
        while (line := session.stream_until(separator)) is not None:
            lines.append(line)
    rest = session.stream_read(-1) or b""
    end = whole.rfind(separator) + len(separator) if separator in whole else 0
    assert b"".join(lines) == whole[:end] and rest == whole[end:]
    assert all(line.endswith(separator) and line.count(separator) == 1 for line in lines)


def test_stream_end_cuts_reads_short() -> None:
    session = MpaSession(MpaConfig())
    session.handle([StreamDataReceived(data=b"abc")])
    assert session.stream_exactly(4) is None and session.stream_until(b"\n") is None
    session.give_back(b">")
    session.eof = True
    with pytest.raises(IncompleteReadError) as info:
        session.stream_exactly(5)
    assert (info.value.partial, info.value.expected) == (b">abc", 5)
    assert isinstance(info.value, EOFError)
    assert session.stream_read(-1) == b""
    session.give_back(b"x")
    with pytest.raises(IncompleteReadError) as info:
        session.stream_until(b"\n")
    assert (info.value.partial, info.value.expected) == (b"x", None)


class Link:
    """What a driver gives an MpaFace, without a driver: no clock, no output."""

    def __init__(self, session: MpaSession, emss: int) -> None:
        self.session = session
        self.emss = emss
        self.applied_calls = 0

    def now(self) -> float:
        return 0.0

    def applied(self) -> None:
        self.applied_calls += 1


def test_face_reports_emss_and_gives_back_octets_before_the_unread_ones() -> None:
    link = Link(MpaSession(MpaConfig()), emss=1234)
    face = MpaFace(link)
    assert face.emss == 1234
    link.session.handle([StreamDataReceived(data=b"world")])
    face.unread(b"hello ")
    assert link.session.stream_read(-1) == b"hello world"
    face._start_mpa(Role.INITIATOR, b"", b"", None)
    assert link.applied_calls == 1 and link.session.core.params is None
