"""The adapter-independent MPA front (iwarp.mpa.front), without I/O: two
fronts wired to each other in memory, each on a recording driver."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import RecordingDriver
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa import front as front_module
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import StreamDataReceived
from iwarp.mpa.front import IncompleteReadError, MpaFace, MpaFront
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Decider, Reject


def make(config: MpaConfig, *, decide: Decider | None = None, emss: int = 1460) -> MpaFront:
    """A front on a recording driver."""
    front = MpaFront(config, decide=decide, emss=emss)
    front._driver = RecordingDriver()
    return front


def recorder(front: MpaFront) -> RecordingDriver:
    driver = front._driver
    assert isinstance(driver, RecordingDriver)
    return driver


def octets(session: MpaFront) -> bytes:
    return b"".join(bytes(b) for b in session.core.data_to_send())


def deliver(src: MpaFront, dst: MpaFront, now: float = 0.0) -> bool:
    """What ``src`` queued, into ``dst``; True when ``dst`` must close TCP."""
    return dst.handle(dst.core.receive_data(octets(src), now))


def started(decide: Decider | None = None) -> tuple[MpaFront, MpaFront]:
    init, resp = make(MpaConfig()), make(MpaConfig(), decide=decide)
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
    init = make(MpaConfig())
    init.start(Role.INITIATOR, now=0.0)
    assert deliver(init, resp)
    assert isinstance(resp.error, LocalProtocolError)
    assert not resp.established


def test_startup_error_without_a_cause_is_tcp_closed() -> None:
    session = make(MpaConfig())
    error = session.startup_error()
    assert isinstance(error, MpaError) and error.mpa_code is MpaErrorCode.TCP_CLOSED


def test_unread_octets_are_mpa_input_at_the_switch() -> None:
    init, resp = make(MpaConfig()), make(MpaConfig())
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
    session = make(MpaConfig())
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
    session = make(MpaConfig())
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


def test_face_reports_emss_and_gives_back_octets_before_the_unread_ones() -> None:
    front = make(MpaConfig(), emss=1234)
    face = MpaFace(front)
    assert face.emss == 1234
    front.handle([StreamDataReceived(data=b"world")])
    face.unread(b"hello ")
    assert front.stream_read(-1) == b"hello world"
    face._start_mpa(Role.INITIATOR, b"", b"", None)
    assert recorder(front).calls == ["flush"] and front.core.params is None


def test_dispatch_closes_tcp_when_mpa_must_and_tells_the_driver_once_started() -> None:
    init, resp = started(decide=lambda r: Reject(b"no"))
    resp.dispatch(resp.core.receive_data(octets(init), 0.0))
    assert recorder(resp).calls == ["flush", "close"]  # the Reply, then FIN (RFC 5044 §7.1.2)
    init, resp = started()
    resp.dispatch(resp.core.receive_data(octets(init), 0.0))
    init.dispatch(init.core.receive_data(octets(resp), 0.0))
    for front in (init, resp):
        assert recorder(front).calls == ["started"] and recorder(front).woken
        assert front.startup_over()
        front.opened()  # in full operation: nothing happens
        front.dispatch([])
        assert recorder(front).calls == ["started"]  # once


def test_a_failed_startup_closes_tcp_and_raises_why() -> None:
    front = make(MpaConfig())
    assert not front.startup_over()
    recorder(front).gone = True
    assert front.startup_over()
    with pytest.raises(MpaError, match="connection closed during MPA startup"):
        front.opened()
    assert recorder(front).calls == ["close"] and front.error is not None


def test_reading_pauses_above_the_high_water_mark_and_resumes_below_a_quarter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front_module, "RECEIVE_HIGH_WATER", 8)
    front = make(MpaConfig())
    front.dispatch([StreamDataReceived(data=b"0123456789")])
    assert not recorder(front).reading
    assert front.stream_exactly(4) == b"0123"
    front.consumed()
    assert not recorder(front).reading  # 6 left
    assert front.stream_exactly(5) == b"45678"
    front.consumed()
    assert recorder(front).reading


def test_open_sets_emss_and_starts_in_the_role_given() -> None:
    front = MpaFront(MpaConfig(), role=Role.INITIATOR, private_data=b"pd")
    front._driver = RecordingDriver()
    assert front.open(0.0, 1000) is front.core
    assert front.emss == 1000 and front.core.state is not None
    assert b"pd" in octets(front)  # the Request with its private data
    bad = MpaFront(MpaConfig(), role=Role.INITIATOR, private_data=bytes(600))
    bad._driver = RecordingDriver()
    bad.open(0.0, 1000)
    assert isinstance(bad.error, LocalProtocolError)
    bad.dispatch([])
    assert recorder(bad).calls == ["flush", "close"]
