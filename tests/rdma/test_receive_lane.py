"""The small-message lane (iwarp.rdma.small) at the endpoint: a receive that
is one whole FPDU carrying a one-segment Send is checked and placed in one
kernel call, and the simple API's Send is framed in one; each must do exactly
what the full path does (wire octets, events, completions, errors, memory),
with markers and CRC on or off, on the C and the pure kernels (the suite
runs both ways, IWARP_NO_ACCEL=1)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.rdma import fastpath, small
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.events import CompletionQueued
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR

from .test_endpoint import pair

BUFFER = 32  # the receiver's receive buffers: larger Sends are an error

# -- the endpoint: one FPDU per receive against the full path ------------------------------

Op = tuple[str, int, bool]

ops = st.tuples(
    # "answer": the receiver also posts a Send of its own just before the
    # messages arrive (its completion is queued, not yet taken).
    st.sampled_from(["send", "send", "invalidate", "write", "read", "answer"]),
    st.integers(0, BUFFER + 8),  # over BUFFER: the Send does not fit (a Terminate)
    st.booleans(),  # solicited
)


def _fpdus(data: bytes, markers: bool, phase: int) -> list[bytes]:
    """Cut a stream of FPDUs that starts at marker phase ``phase`` at their
    boundaries."""
    out = []
    while data:
        lead = 4 if markers and phase == 0 else 0
        size = fpdu_wire_size(int.from_bytes(data[lead : lead + 2], "big"), phase, markers=markers)
        out.append(data[:size])
        data = data[size:]
        phase = (phase + size) % 512
    return out


def _run(
    script: list[Op],
    whole: bool,
    pool: bool,
    config: MpaConfig | None = None,
    lane_send: bool = False,
) -> list[Any]:
    """What the receiver does with the script's messages, given to it FPDU
    by FPDU (``whole``) or each FPDU in two pieces (never a whole one); the
    sender's Sends framed by the lane (``send_now``, ``lane_send``) or
    posted."""
    w = pair(
        initiator=config,
        responder=config,
        a={"receive_buffers": 8, "receive_size": BUFFER},
        b={"receive_buffers": 2 if pool else 0, "receive_size": BUFFER},
    )
    w.pump()
    a, b = w.a, w.b
    markers = config is not None and config.markers
    posted = []  # the posted receive buffers, compared octet by octet
    if not pool:
        for k in range(len(script) + 1):
            region = b.pd.register(bytearray(BUFFER), Access.LOCAL_WRITE)
            b.post_recv(RecvWR(Sge(region), wr_id=100 + k))
            posted.append(region)
    target = b.pd.register(bytearray(64), Access.REMOTE_WRITE | Access.REMOTE_READ)
    sink = a.pd.register(bytearray(64), Access.LOCAL_WRITE)

    def seen(events: list[Any]) -> list[str]:
        return [
            f"CompletionQueued({'send' if e.queue is b.send_cq else 'recv'})"
            if isinstance(e, CompletionQueued)
            else repr(e)
            for e in events
        ]

    log: list[Any] = []
    for number, (op, size, solicited) in enumerate(script):
        data = bytes([number]) * size
        encoder = a.conn.mpa.lane_encoder()
        phase = 0 if encoder is None else encoder.phase
        framed = b""
        try:
            stag = target.stag if op == "invalidate" else None
            if op in ("send", "answer", "invalidate") and lane_send:
                framed = a.send_now(data, solicited=solicited, invalidate_stag=stag) or b""
            if framed:
                pass
            elif op in ("send", "answer", "invalidate"):
                a.post_send(SendWR(data, wr_id=number, solicited=solicited, invalidate_stag=stag))
            elif op == "write":
                a.post_send(WriteWR(data, target.stag, 0, wr_id=number))
            else:
                a.post_send(ReadWR(Sge(sink, 0, min(size, 64)), target.stag, 0, wr_id=number))
        except IwarpError as exc:
            log.append(repr(exc))
        sent = framed + b"".join(bytes(c) for c in a.data_to_send())
        log.append(sent)
        a.take_events()
        if op == "answer":
            try:
                b.post_send(SendWR(b"answer", wr_id=1000 + number))
            except IwarpError as exc:
                log.append(repr(exc))
        for fpdu in _fpdus(sent, markers, phase):
            for piece in [fpdu] if whole else [fpdu[:1], fpdu[1:]]:
                log += seen(b.receive_data(piece, 0.0))
        answer = b"".join(bytes(c) for c in b.data_to_send())
        log += seen(b.take_events())
        log.append(answer)
        if answer:
            a.receive_data(answer, 0.0)
        while (message := b.take_message()) is not None:
            log.append(message)
        log.append([repr(c) for c in b.recv_cq.poll()])
        log.append(bytes(target.view))
        log.append([bytes(region.view) for region in posted])
    log.append((repr(b.error), b.end_reason, b.message_octets))
    return log


configs = st.sampled_from(
    [
        None,
        MpaConfig(markers=True),
        MpaConfig(crc=False),
        MpaConfig(markers=True, crc=False),
    ]
)


@settings(max_examples=120, deadline=None)
@given(
    script=st.lists(ops, min_size=1, max_size=8),
    pool=st.booleans(),
    config=configs,
    lane_send=st.booleans(),
)
def test_the_lane_equals_the_full_path(
    script: list[Op], pool: bool, config: MpaConfig | None, lane_send: bool
) -> None:
    """Sends with and without Solicited Event or Invalidate, into a receive
    pool or posted receives, of sizes around and over the receive buffer's,
    RDMA Writes and Reads, a Send of the receiver's own waiting to
    complete, with markers and CRC on or off: the same wire octets, events,
    messages, completions, answers, placement, errors and end, whether each
    FPDU arrives whole (the lane takes the Sends it can) or in pieces (the
    full path), and whether the sender's Sends are framed by the lane or
    posted."""
    assert _run(script, whole=True, pool=pool, config=config, lane_send=lane_send) == _run(
        script, whole=False, pool=pool, config=config
    )


def test_a_whole_send_takes_the_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equivalence above is not vacuous: a Send that arrives as one FPDU
    is taken by the lane (markers on or off), one in pieces is not; and the
    sender's lane frames what it is given."""
    taken: list[bool] = []
    receive = small.SmallLane.receive

    def spy(lane: small.SmallLane, data: Any) -> Any:
        result = receive(lane, data)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(small.SmallLane, "receive", spy)
    # The lane's own test: the fast path, which takes a receive pool's
    # Sends before the lane would (tests/rdma/test_fastpath.py), stays off.
    monkeypatch.setattr(fastpath, "engage", lambda *args: None)
    # The Responder's first FPDU ends MPA's wait for it (the full path).
    script: list[Op] = [("send", 5, False), ("send", 7, True), ("invalidate", 3, False)]
    for config in (None, MpaConfig(markers=True, crc=False)):
        for pool in (True, False):
            log = _run(script, whole=True, pool=pool, config=config, lane_send=True)
            assert taken == [False, True, False], (config, pool)  # Invalidate: full path
            assert b"\x01" * 7 in log if pool else "recv" in repr(log)
            taken.clear()
            _run(script, whole=False, pool=pool, config=config)
            assert not any(taken)
            taken.clear()


def _posted_sends(config: MpaConfig | None) -> tuple[bytes, list[int], list[bytes]]:
    """Two Sends posted on an idle queue pair, then pulled: the wire octets,
    the send completions, the messages received."""
    w = pair(initiator=config, responder=config, b={"receive_buffers": 4, "receive_size": 64})
    w.pump()
    a, b = w.a, w.b
    a.post_send(SendWR(b"one", wr_id=1, solicited=True))
    a.post_send(SendWR(b"two" * 5, wr_id=2))
    wire = b"".join(bytes(c) for c in a.data_to_send())
    done = [c.wr_id for c in a.send_cq.poll() if c.ok]
    b.receive_data(wire, 0.0)
    messages = []
    while (message := b.take_message()) is not None:
        messages.append(message)
    return wire, done, messages


@pytest.mark.parametrize("config", [None, MpaConfig(markers=True, crc=False)])
def test_a_posted_send_on_an_idle_queue_pair_takes_the_lane(
    config: MpaConfig | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A posted one-segment Send on an idle queue pair is framed by the
    small-message lane; one posted behind it goes the send queue's way.
    The wire octets, completions and messages are those of the send
    queue's way for both."""
    taken: list[bool] = []
    send = small.SmallLane.send

    def spy(lane: small.SmallLane, *args: Any) -> Any:
        frame = send(lane, *args)
        taken.append(frame is not None)
        return frame

    monkeypatch.setattr(small.SmallLane, "send", spy)
    lane = _posted_sends(config)
    assert taken == [True, False]
    assert lane[1:] == ([1, 2], [b"one", b"two" * 5])
    monkeypatch.setattr(small.SmallLane, "send", lambda *args: None)
    assert _posted_sends(config) == lane


def test_octets_in_any_buffer_format_are_received() -> None:
    """Octets given as a memoryview of signed bytes take the full path
    (which casts them) and arrive like any others."""
    w = pair(b={"receive_buffers": 2, "receive_size": BUFFER})
    w.pump()
    for payload in (b"first", b"second"):  # the second would take the lane
        frame = w.a.send_now(payload)
        assert frame is not None
        w.b.receive_data(memoryview(bytearray(frame)).cast("b"), 0.0)
        assert w.b.take_message() == payload


# -- the sender: a framed Send handed out ----------------------------------------------


@pytest.mark.parametrize("markers", [False, True])
def test_send_now_keeps_the_stream_in_order_with_queued_work(markers: bool) -> None:
    """A Send handed out by send_now, then posted work: the receiver gets
    both, in order, with the CRC and markers right."""
    config = MpaConfig(markers=markers)
    w = pair(initiator=config, responder=config, b={"receive_buffers": 4})
    w.pump()
    a, b = w.a, w.b
    assert isinstance(a, QueuePairEndpoint)
    frame = a.send_now(b"first")
    assert frame is not None
    a.post_send(SendWR(b"second", wr_id=1))
    assert a.send_now(b"third") is None  # the queue pair is busy now
    stream = frame + b"".join(bytes(c) for c in a.data_to_send())
    b.receive_data(stream, 0.0)
    assert [b.take_message(), b.take_message(), b.take_message()] == [b"first", b"second", None]
    assert b.error is None
