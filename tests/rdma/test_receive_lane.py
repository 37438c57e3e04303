"""The short ways of a small message: a receive that is one whole FPDU
(FpduDecoder.take_whole, MpaConnection.receive_whole, RdmapStream.receive_send,
the endpoint's pool) and a Send framed as it is posted (encode_parts,
frame_parts, send_now). Each must do exactly what the full path does."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.rdma.endpoint import CompletionQueued, QueuePairEndpoint
from iwarp.rdmap.memory import Access
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR

from .test_endpoint import pair

BUFFER = 32  # the receiver's receive buffers: larger Sends are an error

# -- MPA: one whole FPDU --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6), crc=st.booleans())
def test_take_whole_gives_what_feed_gives(sizes: list[int], crc: bool) -> None:
    """FPDU by FPDU, the same ULPDUs and stream position as feed_batch."""
    encoder = FpduEncoder(crc=crc)
    fpdus = [encoder.encode_bytes(os.urandom(n)) for n in sizes]
    whole, fed = FpduDecoder(crc=crc), FpduDecoder(crc=crc)
    for fpdu in fpdus:
        ulpdu = whole.take_whole(memoryview(fpdu))
        assert ulpdu is not None and ulpdu.readonly
        assert [bytes(ulpdu)] == [bytes(u) for u in fed.feed_batch(fpdu)]
        assert (whole._position, whole._phase) == (fed._position, fed._phase)


def test_take_whole_declines_anything_but_one_whole_valid_fpdu() -> None:
    encoder = FpduEncoder()
    one = encoder.encode_bytes(b"x" * 10)
    two = one + encoder.encode_bytes(b"y")
    bad_crc = bytearray(one)
    bad_crc[-1] ^= 1
    decoder = FpduDecoder(max_ulpdu=64)
    for data in (one[:-1], two, bytes(bad_crc), b"", FpduEncoder().encode_bytes(bytes(65))):
        assert decoder.take_whole(memoryview(data)) is None
        assert (decoder._position, decoder.error) == (0, None)  # nothing changed
    decoder.feed_batch(one[:3])  # held back: the next octets complete it, not take_whole
    assert decoder.take_whole(memoryview(one)) is None
    marked = FpduDecoder(markers=True)
    assert marked.take_whole(memoryview(FpduEncoder(markers=True).encode_bytes(b"m"))) is None


@settings(max_examples=60, deadline=None)
@given(
    header=st.binary(min_size=0, max_size=30),
    payload=st.binary(max_size=1200),
    crc=st.booleans(),
    markers=st.booleans(),
    lead=st.integers(0, 700),
)
def test_encode_parts_equals_encode_bytes(
    header: bytes, payload: bytes, crc: bool, markers: bool, lead: int
) -> None:
    """The same octets and position, from any stream position (markers too)."""
    a, b = FpduEncoder(crc=crc, markers=markers), FpduEncoder(crc=crc, markers=markers)
    a.encode_bytes(bytes(lead))
    b.encode_bytes(bytes(lead))
    assert a.encode_parts(header, memoryview(payload)) == b.encode_bytes(header + payload)
    assert (a._position, a.position) == (b._position, b.position)


# -- the endpoint: one FPDU per receive against the full path ------------------------------

Op = tuple[str, int, bool]

ops = st.tuples(
    # "answer": the receiver also posts a Send of its own just before the
    # messages arrive (its completion is queued, not yet taken).
    st.sampled_from(["send", "send", "invalidate", "write", "read", "answer"]),
    st.integers(0, BUFFER + 8),  # over BUFFER: the Send does not fit (a Terminate)
    st.booleans(),  # solicited
)


def _fpdus(data: bytes) -> list[bytes]:
    """Cut a stream of FPDUs (no markers) at their boundaries."""
    out = []
    while data:
        size = (int.from_bytes(data[:2], "big") + 9) & ~3
        out.append(data[:size])
        data = data[size:]
    return out


def _run(script: list[Op], whole: bool, pool: bool) -> list[Any]:
    """What the receiver does with the script's messages, given to it FPDU
    by FPDU (``whole``) or each FPDU in two pieces (never a whole one)."""
    w = pair(
        a={"receive_buffers": 8, "receive_size": BUFFER},
        b={"receive_buffers": 2 if pool else 0, "receive_size": BUFFER},
    )
    w.pump()
    a, b = w.a, w.b
    if not pool:
        for k in range(len(script) + 1):
            region = b.pd.register(bytearray(BUFFER), Access.LOCAL_WRITE)
            b.post_recv(RecvWR(Sge(region), wr_id=100 + k))
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
        try:
            if op in ("send", "answer"):
                a.post_send(SendWR(data, wr_id=number, solicited=solicited))
            elif op == "invalidate":
                a.post_send(SendWR(data, wr_id=number, invalidate_stag=target.stag))
            elif op == "write":
                a.post_send(WriteWR(data, target.stag, 0, wr_id=number))
            else:
                a.post_send(ReadWR(Sge(sink, 0, min(size, 64)), target.stag, 0, wr_id=number))
        except IwarpError as exc:
            log.append(repr(exc))
        sent = b"".join(bytes(c) for c in a.data_to_send())
        a.take_events()
        if op == "answer":
            try:
                b.post_send(SendWR(b"answer", wr_id=1000 + number))
            except IwarpError as exc:
                log.append(repr(exc))
        for fpdu in _fpdus(sent):
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
    log.append((repr(b.error), b.end_reason, b.message_octets))
    return log


@settings(max_examples=80, deadline=None)
@given(script=st.lists(ops, min_size=1, max_size=8), pool=st.booleans())
def test_one_fpdu_per_receive_equals_the_full_path(script: list[Op], pool: bool) -> None:
    """Sends with and without Solicited Event or Invalidate, into a receive
    pool or posted receives, too large for their buffer, RDMA Writes and
    Reads: the same events, messages, completions, answers, placement and
    end, whether each FPDU arrives whole (the short way when it is a Send)
    or in pieces (the full path)."""
    assert _run(script, whole=True, pool=pool) == _run(script, whole=False, pool=pool)


def test_a_whole_send_takes_the_short_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equivalence above is not vacuous: a pool's Send that arrives as
    one FPDU is completed by receive_send, and one in pieces is not."""
    taken: list[bool] = []
    receive_send = RdmapStream.receive_send

    def spy(stream: RdmapStream, view: memoryview) -> Any:
        result = receive_send(stream, view)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(RdmapStream, "receive_send", spy)
    # The Responder's first FPDU ends MPA's wait for it (the full path).
    script: list[Op] = [("send", 5, False), ("send", 7, True)]
    assert _run(script, whole=True, pool=True)
    assert taken == [True]
    taken.clear()
    _run(script, whole=False, pool=True)
    assert taken == []


def test_octets_in_any_buffer_format_are_received() -> None:
    """Octets given as a memoryview of signed bytes take the full path
    (which casts them) and arrive like any others."""
    w = pair(b={"receive_buffers": 2, "receive_size": BUFFER})
    w.pump()
    for payload in (b"first", b"second"):  # the second would take the short way
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
