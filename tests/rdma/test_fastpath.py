"""The fast path of a queue pair (iwarp.rdma.fastpath): the C object and its
pure twin give the same results for the same calls, and a queue pair with
the fast path does exactly what its cores do without it (wire octets,
events, messages, errors, Terminates), whatever the octets and wherever
TCP splits them. The suite runs both ways (``IWARP_NO_ACCEL=1``): with
the accelerator the endpoint runs the C object, without it the twin."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iwarp._accel as _accel
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import fastpath
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.events import CompletionQueued, MessageQueued
from iwarp.rdmap.work import SendWR

from .test_endpoint import pair

CFastPath: Any
try:  # built, whether it runs (IWARP_NO_ACCEL) or not
    import iwarp._speedups as _speedups

    CFastPath = _speedups.FastPath
except ImportError:  # not built: the twin is compared with the cores only
    CFastPath = None

needs_c = pytest.mark.skipif(CFastPath is None, reason="the C accelerator is not built")

SEND, SEND_SE = 0x43, 0x45  # RDMAP control octets of Send, Send with SE (RV 1)

# -- the object: C == pure twin --------------------------------------------------------


def _make(kind: Any, settings_: tuple[Any, ...]) -> tuple[Any, deque[bytes]]:
    send, receive = settings_
    messages: deque[bytes] = deque()
    made: dict[int, MessageQueued] = {}
    return kind(send, receive, messages, made, MessageQueued), messages


framings = st.tuples(
    st.booleans(),  # markers
    st.booleans(),  # crc
    st.integers(0, 127).map(lambda k: 4 * k),  # marker phase
    st.sampled_from([1, 2, 0xFFFFFFFE, 0xFFFFFFFF]),  # the MSN, wrapping too
)


@st.composite
def object_settings(draw: st.DrawFn) -> tuple[Any, ...]:
    markers, crc, phase, msn = draw(framings)
    max_payload = draw(st.sampled_from([0, 1, 40, 200, 1100]))
    limit = draw(st.sampled_from([18, 60, 300, 0xFFFF]))
    size = draw(st.sampled_from([0, 8, 64, 2000]))
    send = (1, SEND, SEND_SE, msn, markers, crc, phase, max_payload)
    receive = (1, SEND, SEND_SE, msn, markers, crc, phase, limit, size)
    return send, receive


# Each step: a Send (payload size, solicited) or octets of the sender's
# stream handed on, with a flipped octet now and then; or raw octets.
steps = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 1200), st.booleans()),
    st.tuples(st.just("deliver"), st.integers(0, 3000), st.integers(-1, 3000)),
    st.tuples(st.just("raw"), st.binary(max_size=64), st.just(0)),
)


def _drive(kind: Any, config: tuple[Any, ...], script: list[Any]) -> list[Any]:
    sender, _ = _make(kind, config)
    receiver, messages = _make(kind, config)
    log: list[Any] = []
    stream = bytearray()
    for step in script:
        if step[0] == "send":
            frame = sender.send(bytes([len(log) & 0xFF]) * step[1], step[2])
            log.append(frame)
            if frame is not None:
                stream += frame
            continue
        if step[0] == "raw":
            data = step[1]
        else:
            data = bytearray(stream[: step[1]])
            del stream[: step[1]]
            if 0 <= step[2] < len(data):
                data[step[2]] ^= 0x5A
        taken = receiver.receive(bytes(data))
        log.append(taken)
        if taken is not None:
            log.append((receiver.octets, receiver.rest))
            # What it left comes back first, as the cores would read it on.
            stream[:0] = data[len(data) - receiver.rest :]
        log.append(list(messages))
        messages.clear()
    log.append(sender.state())
    log.append(receiver.state())
    return log


@needs_c
@settings(max_examples=300, deadline=None)
@given(config=object_settings(), script=st.lists(steps, max_size=14))
def test_the_c_object_equals_its_twin(config: tuple[Any, ...], script: list[Any]) -> None:
    """FPDUs, events, messages, what is left, and the state handed back."""
    assert _drive(CFastPath, config, script) == _drive(fastpath.PyFastPath, config, script)


@needs_c
@settings(max_examples=300, deadline=None)
@given(config=object_settings(), data=st.binary(max_size=300))
def test_arbitrary_octets_are_declined_alike(config: tuple[Any, ...], data: bytes) -> None:
    results = []
    for kind in (CFastPath, fastpath.PyFastPath):
        receiver, messages = _make(kind, config)
        taken = receiver.receive(data)
        results.append((taken, receiver.rest if taken else None, list(messages), receiver.state()))
    assert results[0] == results[1]


def test_it_frames_what_the_cores_frame() -> None:
    """A Send with and without Solicited Event, with markers and CRC: the
    FPDU is the small-message lane's, octet for octet."""
    for config in (MpaConfig(markers=True), MpaConfig(crc=False)):
        w = pair(initiator=config, responder=config, a={"receive_buffers": 2})
        w.pump()
        lane = w.a._lane
        assert lane is not None
        expected = [lane.send(b"x" * n, n % 2 == 1) for n in range(0, 600, 37)]
        w2 = pair(initiator=config, responder=config, a={"receive_buffers": 2})
        w2.pump()
        w2.a._engage()
        fast = w2.a._fast
        assert fast is not None
        assert [fast.send(b"x" * n, n % 2 == 1) for n in range(0, 600, 37)] == expected


bad_settings = [
    ((1, SEND, SEND_SE, 1, False, True, 2, 40), "phase"),
    ((4, SEND, SEND_SE, 1, False, True, 0, 40), "version"),
    ((1, 256, SEND_SE, 1, False, True, 0, 40), "send"),
    ((1, SEND, SEND_SE, 2**32, False, True, 0, 40), "msn"),
    ((1, SEND, SEND_SE, 1, False, True, 0, 0x10000), "max_payload"),
]


@pytest.mark.parametrize(("send", "word"), bad_settings)
def test_bad_settings_are_value_errors(send: tuple[Any, ...], word: str) -> None:
    receive = (1, SEND, SEND_SE, 1, False, True, 0, 100, 64)
    kinds = [fastpath.PyFastPath] + ([CFastPath] if CFastPath is not None else [])
    for kind in kinds:
        with pytest.raises(ValueError, match=word):
            kind(send, receive, deque(), {}, MessageQueued)


def test_what_is_not_a_buffer_is_declined() -> None:
    kinds = [fastpath.PyFastPath] + ([CFastPath] if CFastPath is not None else [])
    for kind in kinds:
        fast, _ = _make(
            kind,
            (
                (1, SEND, SEND_SE, 1, False, True, 0, 40),
                (1, SEND, SEND_SE, 1, False, True, 0, 100, 64),
            ),
        )
        assert fast.send(object()) is None
        assert fast.send(memoryview(bytes(8))[::2]) is None  # not contiguous
        assert fast.receive(object()) is None
        assert fast.receive(memoryview(bytes(40)).cast("I")) is None
        assert fast.receive(b"") is None
        assert fast.state() == (1, 0, 0, 1, 0, 0, 0)


# -- the queue pair: with the fast path == its cores alone -----------------------------

BUFFER = 48  # the receiver's pool buffers: a larger Send is a Terminate

configs = st.sampled_from(
    [None, MpaConfig(markers=True), MpaConfig(crc=False), MpaConfig(markers=True, crc=False)]
)
sends = st.tuples(st.just("send"), st.integers(0, BUFFER + 8) | st.just(3000), st.booleans())
whole: st.SearchStrategy[tuple[str, list[int], int]] = st.tuples(
    st.just("deliver"), st.just([]), st.just(-1)
)
qp_steps = st.one_of(
    # A Send by the simple call (send_now, else posted), sizes around the
    # pool buffer's and over one segment's; most steps are these and whole
    # deliveries, the common case, with the unusual ones between.
    sends,
    sends,
    whole,
    whole,
    st.tuples(st.just("posted"), st.integers(0, BUFFER), st.booleans()),
    # The receiver answers (its MSNs and output must come back right).
    st.tuples(st.just("answer"), st.integers(0, BUFFER), st.booleans()),
    # Hand what the sender wrote so far to the receiver, in pieces cut at
    # these points, an octet flipped at the second number (-1: none).
    st.tuples(st.just("deliver"), st.lists(st.integers(1, 200), max_size=4), st.integers(-1, 400)),
    st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=40), st.booleans()),
)


def _seen(end: QueuePairEndpoint, events: list[Any]) -> list[str]:
    """Events as text, a completion queue by its name (not its address)."""
    return [
        f"CompletionQueued({'send' if e.queue is end.send_cq else 'recv'})"
        if isinstance(e, CompletionQueued)
        else repr(e)
        for e in events
    ]


def _qp_run(script: list[Any], config: MpaConfig | None) -> list[Any]:
    w = pair(
        initiator=config,
        responder=config,
        a={"receive_buffers": 3, "receive_size": BUFFER},
        b={"receive_buffers": 3, "receive_size": BUFFER},
    )
    w.pump()
    a, b = w.a, w.b
    log: list[Any] = []
    wire = bytearray()

    def sent(end: QueuePairEndpoint, frame: bytes | None) -> bytes:
        return (frame or b"") + b"".join(bytes(c) for c in end.data_to_send())

    for number, step in enumerate(script):
        kind = step[0]
        try:
            if kind == "send":
                data = bytes([number]) * step[1]
                frame = a.send_now(data, solicited=step[2])
                if frame is None:
                    a.post_send(SendWR(data, wr_id=number, solicited=step[2]))
                wire += sent(a, frame)
            elif kind == "posted":
                a.post_send(SendWR(bytes([number]) * step[1], wr_id=number, solicited=step[2]))
                wire += sent(a, None)
            elif kind == "answer":
                frame = b.send_now(bytes([number]) * step[1], solicited=step[2])
                answer = sent(b, frame)
                log.append(answer)
                log.append(_seen(a, a.receive_data(answer, 0.0)))
            elif kind == "garbage":
                wire[len(wire) if step[2] else 0 : 0] = step[1]
            else:
                data = bytearray(wire)
                wire.clear()
                if 0 <= step[2] < len(data):
                    data[step[2]] ^= 0xA5
                at = 0
                for cut in [*step[1], len(data)]:
                    piece = bytes(data[at : at + cut]) if cut < len(data) else bytes(data[at:])
                    at += len(piece)
                    if piece:
                        log.append(_seen(b, b.receive_data(piece, 0.0)))
                    if at >= len(data):
                        break
                log.append(sent(b, None))  # a Terminate, say
        except IwarpError as exc:
            log.append(repr(exc))
        log.append(_seen(a, a.take_events()))
        log.append(_seen(b, b.take_events()))
        while (message := b.take_message()) is not None:
            log.append(message)
        while (message := a.take_message()) is not None:
            log.append(message)
        log.append([repr(c) for c in a.send_cq.poll()])
        log.append((b.message_octets, a.message_octets, a.settled(), b.settled()))
    log.append((repr(b.error), b.end_reason, repr(b.terminate), b.terminate_received))
    log.append((repr(a.error), a.end_reason))
    # The state the cores hold once they have it back.
    for end in (a, b):
        stream = end.stream
        if stream is not None:
            loan = stream.lend()
            log.append(None if loan is None else loan[:5])
    return log


@settings(max_examples=200, deadline=None)
@given(config=configs, script=st.lists(qp_steps, max_size=16))
def test_the_queue_pair_does_what_its_cores_do(config: MpaConfig | None, script: list[Any]) -> None:
    """Sends whole, cut anywhere, corrupted, mixed with garbage and with the
    receiver's own Sends: the same octets, events, messages, errors and
    Terminates as the cores without the fast path."""
    with_fast = _qp_run(script, config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fastpath, "engage", lambda *args: None)
        assert _qp_run(script, config) == with_fast


def test_the_fast_path_runs_in_the_common_case() -> None:
    """The equivalence above is not vacuous: whole Sends into a receive
    pool are taken by the fast path, both ways, with markers and CRC."""
    for config in (None, MpaConfig(markers=True)):
        w = pair(
            initiator=config,
            responder=config,
            a={"receive_buffers": 2, "receive_size": 64},
            b={"receive_buffers": 2, "receive_size": 64},
        )
        w.pump()
        a, b = w.a, w.b
        for n in range(6):
            frame = a.send_now(b"p" * n)
            assert frame is not None
            assert b.receive_data(frame, 0.0) == [MessageQueued(n)]
            assert b.take_message() == b"p" * n
            back = b.send_now(b"q" * n, solicited=True)
            assert back is not None
            a.receive_data(back, 0.0)
            assert a.take_message() == b"q" * n
        assert a._fast is not None and b._fast is not None
        # Handed back, the cores go on where it stopped.
        stream = b.stream
        assert b._fast is None and stream is not None
        loan = stream.lend()
        assert loan is not None and (loan.send_msn, loan.recv_msn) == (7, 7)


def test_a_declined_fpdu_goes_to_the_cores_after_the_ones_taken() -> None:
    """Two whole Sends and the first octets of a third in one receive: the
    fast path takes two, the cores the rest (which they keep until it is
    whole)."""
    w = pair(a={"receive_buffers": 2}, b={"receive_buffers": 4, "receive_size": 64})
    w.pump()
    a, b = w.a, w.b
    b.receive_data(a.send_now(b"warm") or b"", 0.0)
    assert b.take_message() == b"warm" and b._fast is not None
    frames = [a.send_now(bytes([k]) * 10) or b"" for k in range(3)]
    events = b.receive_data(frames[0] + frames[1] + frames[2][:5], 0.0)
    assert events == [MessageQueued(10), MessageQueued(10)] and b._fast is None
    assert b.receive_data(frames[2][5:], 0.0) == [MessageQueued(10)]
    assert [b.take_message() for _ in range(3)] == [bytes([k]) * 10 for k in range(3)]
    assert b.message_octets == 0


def test_the_path_in_use_is_the_accelerators() -> None:
    expected = CFastPath if _accel.speedups is not None else fastpath.PyFastPath
    assert fastpath.FastPath is expected
