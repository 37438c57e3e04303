"""Segments placed in any order (RFC 5041 §5.3, §5.4, §7.1).

A data source SHOULD send a message's segments in increasing MO / TO
order, but the sink MAY place them in any order and only the §7.1 checks
refuse one. A message is delivered once its L segment has arrived and all
of its octets are placed, in MSN order.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.errors import DdpCatastrophicError, DdpUntaggedCode, DdpUntaggedError
from iwarp.ddp.placement import (
    MAX_RUNS,
    DdpReceiver,
    PlacedRuns,
    TaggedSegment,
    UntaggedQueue,
    UntaggedSegment,
)
from iwarp.ddp.segmentation import untagged_segments
from iwarp.ddp.wire import UntaggedHeader
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WriteWR
from rdmap.rdmap_harness import make_pair

_REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def unreachable(stag: int, to: int, length: int, rsvdulp: int, first: bool) -> memoryview:
    raise AssertionError("no tagged segments here")


def queue_with(*sizes: int) -> tuple[DdpReceiver[int], UntaggedQueue[int], list[bytearray]]:
    queue: UntaggedQueue[int] = UntaggedQueue(0)
    buffers = [bytearray(size) for size in sizes]
    for i, buf in enumerate(buffers):
        queue.post(memoryview(buf), i)
    return DdpReceiver({0: queue}, unreachable), queue, buffers


def segment(msn: int, mo: int, payload: bytes, last: bool = False) -> memoryview:
    return memoryview(UntaggedHeader(0, msn, mo, last, rsvdulp=0x40 | msn).pack() + payload)


def delivered(result: TaggedSegment | UntaggedSegment[int]) -> list[tuple[int, int, int]]:
    """(MSN, length, buffer context) of every message this segment delivered."""
    assert isinstance(result, UntaggedSegment)
    out = []
    if result.message_length is not None:
        out.append((result.msn, result.message_length, result.buffer.context))
    out += [(m.msn, m.message_length or 0, m.buffer.context) for m in result.delivered]
    return out


def test_the_audit_example_mo_16_0_32_last() -> None:
    rx, queue, (buf,) = queue_with(64)
    data = bytes(range(40))
    assert delivered(rx.receive(segment(1, 16, data[16:32]))) == []
    assert delivered(rx.receive(segment(1, 0, data[:16]))) == []
    result = rx.receive(segment(1, 32, data[32:], last=True))
    assert isinstance(result, UntaggedSegment)
    assert delivered(result) == [(1, 40, 0)]
    assert result.delivered[0].rsvdulp == 0x41  # the L segment's RsvdULP
    assert bytes(buf[:40]) == data and queue.next_msn == 2 and not queue.out_of_order


def test_the_last_segment_may_arrive_first() -> None:
    rx, _queue, (buf,) = queue_with(30)
    assert delivered(rx.receive(segment(1, 20, b"c" * 10, last=True))) == []
    assert delivered(rx.receive(segment(1, 0, b"a" * 10))) == []
    result = rx.receive(segment(1, 10, b"b" * 10))
    assert delivered(result) == [(1, 30, 0)]
    assert bytes(buf) == b"a" * 10 + b"b" * 10 + b"c" * 10


def test_later_messages_wait_for_earlier_ones() -> None:
    rx, queue, _bufs = queue_with(8, 8, 8)
    assert delivered(rx.receive(segment(2, 0, b"22", last=True))) == []
    assert delivered(rx.receive(segment(3, 0, b"333", last=True))) == []
    result = rx.receive(segment(1, 0, b"1", last=True))
    assert delivered(result) == [(1, 1, 0), (2, 2, 1), (3, 3, 2)]
    assert queue.next_msn == 4 and not queue.buffers and not queue.out_of_order


def test_placing_twice_counts_once() -> None:
    rx, _, (buf,) = queue_with(20)
    rx.receive(segment(1, 0, b"x" * 10))
    rx.receive(segment(1, 5, b"y" * 10))  # overlaps, RFC 5041 §5.3 allows it
    rx.receive(segment(1, 0, b"z" * 4))  # again, inside what is placed
    assert delivered(rx.receive(segment(1, 18, b"w" * 2, last=True))) == []
    result = rx.receive(segment(1, 15, b"v" * 3))  # the gap: 15 + 3 + 2 = 20 octets
    assert delivered(result) == [(1, 20, 0)]
    assert bytes(buf) == b"z" * 4 + b"x" + b"y" * 10 + b"v" * 3 + b"w" * 2


def test_only_posted_msns_are_legal() -> None:
    rx, _, bufs = queue_with(8, 8)
    with pytest.raises(DdpUntaggedError) as info:
        rx.receive(segment(3, 0, b"x"))
    assert info.value.code == DdpUntaggedCode.MSN_RANGE
    with pytest.raises(DdpUntaggedError) as info:
        rx.receive(segment(2, 5, b"xxxx"))  # check 4 against MSN 2's buffer
    assert info.value.code == DdpUntaggedCode.MESSAGE_TOO_LONG
    assert bufs == [bytearray(8), bytearray(8)]


def test_tracking_is_bounded() -> None:
    """A peer that scatters one-octet pieces cannot grow the tracking
    past MAX_RUNS runs for a message, nor past one message per buffer."""
    rx, queue, (buf,) = queue_with(4 * MAX_RUNS)
    for k in range(MAX_RUNS):
        rx.receive(segment(1, 2 * k + 2, b"x"))
    with pytest.raises(DdpCatastrophicError):
        rx.receive(segment(1, 2 * MAX_RUNS + 2, b"x"))
    assert buf[2 * MAX_RUNS + 2] == 0  # refused before placing
    assert len(queue.out_of_order) <= len(queue.buffers)


@settings(max_examples=200)
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=4),
    st.integers(19, 120),
    st.randoms(use_true_random=False),
)
def test_any_order_of_segments_delivers_every_message(
    payloads: list[bytes], mulpdu: int, rng: random.Random
) -> None:
    """Messages sent in order, each message's segments shuffled."""
    rx, queue, bufs = queue_with(*(len(p) + 3 for p in payloads))
    got: list[tuple[int, int, int]] = []
    for msn, payload in enumerate(payloads, start=1):
        segments = list(untagged_segments(payload, qn=0, msn=msn, rsvdulp=0x40, mulpdu=mulpdu))
        rng.shuffle(segments)
        for raw in segments:
            result = rx.receive(memoryview(bytes(raw)))
            assert isinstance(result, UntaggedSegment)
            got += delivered(result)
    assert got == [(i + 1, len(p), i) for i, p in enumerate(payloads)]
    for buf, payload in zip(bufs, payloads, strict=True):
        assert bytes(buf[: len(payload)]) == payload
    assert not queue.out_of_order and queue.next_msn == len(payloads) + 1


def test_runs_merge() -> None:
    runs = PlacedRuns()
    for start, end in ((10, 20), (30, 40), (0, 5), (5, 10), (20, 30)):
        runs.add(start, end)
    assert runs.runs == [[0, 40]] and runs.prefix == 40 and runs.end == 40


# -- through RDMAP: the audit's cases end to end ---------------------------------


def reorder_first_two(a_sent: list[bytearray]) -> list[bytearray]:
    return [a_sent[1], a_sent[0], *a_sent[2:]]


def test_send_segments_out_of_order_complete_the_receive() -> None:
    a, b = make_pair(mulpdu=18 + 100)
    buf = bytearray(300)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(buf)), wr_id=5))
    data = bytes(range(250))
    a.stream.post_send(SendWR(data, wr_id=1))
    segments = a.stream.ulpdus_to_send()  # MO 0, 100, 200(L)
    assert [UntaggedHeader.unpack_from(s).mo for s in segments] == [0, 100, 200]
    for raw in (segments[1], segments[0], segments[2]):  # MO 100, 0, 200(L)
        b.events.extend(b.stream.handle_ulpdu(bytes(raw)))
    assert b.terminates_sent() == []
    assert [(c.wr_id, c.status, c.byte_len) for c in b.completions()] == [
        (5, CompletionStatus.SUCCESS, 250)
    ]
    assert bytes(buf[:250]) == data


def test_write_sent_as_to_plus_24_then_to_last() -> None:
    a, b = make_pair(mulpdu=14 + 100)
    target = bytearray(200)
    region = b.pd.register(target, _REMOTE, address=0x5000)
    data = bytes(range(200))
    a.stream.post_send(WriteWR(data, region.stag, 0x5000, wr_id=1))
    first, second = a.stream.ulpdus_to_send()
    # The same two segments, sent in the other order, the L flag on the one
    # sent last (at TO).
    second[0] &= ~0x40
    first[0] |= 0x40
    for raw in (second, first):
        b.events.extend(b.stream.handle_ulpdu(bytes(raw)))
    assert b.terminates_sent() == [] and bytes(target) == data


def test_read_response_out_of_order_completes_the_read() -> None:
    a, b = make_pair(mulpdu=14 + 100)
    source = bytearray(range(250))
    region = b.pd.register(source, _REMOTE, address=0x9000)
    sink = bytearray(250)
    a.stream.post_send(ReadWR(Sge(a.pd.register(sink)), region.stag, 0x9000, wr_id=7))
    for raw in a.stream.ulpdus_to_send():
        b.stream.handle_ulpdu(bytes(raw))
    responses = b.stream.ulpdus_to_send()
    assert len(responses) == 3
    for raw in (responses[2], responses[0], responses[1]):  # L first
        a.events.extend(a.stream.handle_ulpdu(bytes(raw)))
    assert [(c.wr_id, c.status, c.byte_len) for c in a.completions()] == [
        (7, CompletionStatus.SUCCESS, 250)
    ]
    assert sink == source
