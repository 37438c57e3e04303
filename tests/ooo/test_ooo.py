"""Out-of-order MPA reception (seed 000 §3.1.2, §5.4, §5.4.1; RFC 5044 §4.3, §8)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iwarp.errors import MpaErrorCode
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.ooo import (
    OutOfOrderReceiver,
    ReceiveEvent,
    ReceiveFailed,
    UlpduDelivered,
    UlpduPassed,
)

MASK = 0xFFFFFFFF


@dataclass
class Stream:
    """An encoded MPA half connection and where its FPDUs lie."""

    start: int
    data: bytes
    ulpdus: list[bytes]
    offsets: list[int]  # FPDU starts, from the MPA start
    markers: bool
    crc: bool

    def fpdu_at(self, position: int) -> int:
        """Index of the FPDU holding stream offset ``position``."""
        index = 0
        while index + 1 < len(self.offsets) and self.offsets[index + 1] <= position:
            index += 1
        return index

    def end_of(self, index: int) -> int:
        return self.offsets[index + 1] if index + 1 < len(self.offsets) else len(self.data)


def build(ulpdus: list[bytes], *, start: int, markers: bool, crc: bool) -> Stream:
    encoder = FpduEncoder(markers=markers, crc=crc, origin=start)
    parts: list[bytes] = []
    offsets: list[int] = []
    size = 0
    for ulpdu in ulpdus:
        offsets.append(size)
        fpdu = encoder.encode_bytes(ulpdu)
        parts.append(fpdu)
        size += len(fpdu)
    return Stream(start, b"".join(parts), ulpdus, offsets, markers, crc)


def cut(data: bytes, sizes: list[int]) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    pos = 0
    turn = 0
    while pos < len(data):
        step = sizes[turn % len(sizes)] if sizes else len(data)
        out.append((pos, data[pos : pos + step]))
        pos += step
        turn += 1
    return out


def feed(
    receiver: OutOfOrderReceiver, stream: Stream, segments: list[tuple[int, bytes]]
) -> list[ReceiveEvent]:
    events: list[ReceiveEvent] = []
    for offset, payload in segments:
        events += receiver.receive((stream.start + offset) & MASK, payload)
    return events


def check_clean(stream: Stream, receiver: OutOfOrderReceiver, events: list[ReceiveEvent]) -> None:
    passed = [e for e in events if isinstance(e, UlpduPassed)]
    delivered = [e for e in events if isinstance(e, UlpduDelivered)]
    assert receiver.error is None
    assert not any(isinstance(e, ReceiveFailed) for e in events)
    # Every ULPDU passed exactly once, with its content and its position...
    assert sorted(e.offset for e in passed) == stream.offsets
    for e in passed:
        index = stream.offsets.index(e.offset)
        assert bytes(e.ulpdu) == stream.ulpdus[index]
        assert e.seq == (stream.start + e.offset) & MASK
        assert e.offset + e.wire_length == stream.end_of(index)
    # ...and delivered in the order sent, each after it was passed.
    assert [e.offset for e in delivered] == stream.offsets
    assert [e.ulpdu_length for e in delivered] == [len(u) for u in stream.ulpdus]
    seen: set[int] = set()
    for event in events:
        if isinstance(event, UlpduPassed):
            seen.add(event.offset)
        elif isinstance(event, UlpduDelivered):
            assert event.offset in seen
    assert receiver.buffered == 0
    assert receiver.delivered_offset == len(stream.data)


def scramble(
    segments: list[tuple[int, bytes]], data: bytes, rnd: random.Random, extra: int
) -> list[tuple[int, bytes]]:
    """Shuffle segments and add duplicates and overlapping retransmissions."""
    out = list(segments)
    for _ in range(extra):
        lo = rnd.randrange(len(data))
        hi = min(len(data), lo + rnd.randrange(1, 700))
        out.append((lo, data[lo:hi]))
    out += rnd.sample(segments, min(len(segments), extra))
    rnd.shuffle(out)
    return out


ulpdu_lists = st.lists(
    st.integers(0, 1400).map(lambda n: bytes((i * 7 + n) & 0xFF for i in range(n))),
    min_size=1,
    max_size=12,
)
starts = st.one_of(st.integers(0, MASK), st.integers(MASK - 3000, MASK))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=ulpdu_lists,
    start=starts,
    markers=st.booleans(),
    crc=st.booleans(),
    sizes=st.lists(st.integers(1, 1600), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_any_order_passes_once_and_delivers_in_order(
    ulpdus: list[bytes], start: int, markers: bool, crc: bool, sizes: list[int], seed: int
) -> None:
    stream = build(ulpdus, start=start, markers=markers, crc=crc)
    rnd = random.Random(seed)
    segments = scramble(cut(stream.data, sizes), stream.data, rnd, rnd.randrange(4))
    receiver = OutOfOrderReceiver(start=start, markers=markers, crc=crc)
    check_clean(stream, receiver, feed(receiver, stream, segments))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=ulpdu_lists,
    start=starts,
    markers=st.booleans(),
    sizes=st.lists(st.integers(1, 1600), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    where=st.floats(0, 1, exclude_max=True),
    flip=st.integers(1, 255),
)
def test_corruption_is_reported_where_it_is(
    ulpdus: list[bytes],
    start: int,
    markers: bool,
    sizes: list[int],
    seed: int,
    where: float,
    flip: int,
) -> None:
    stream = build(ulpdus, start=start, markers=markers, crc=True)
    position = int(where * len(stream.data))
    bad = bytearray(stream.data)
    bad[position] ^= flip
    corrupted = bytes(bad)
    k = stream.fpdu_at(position)
    rnd = random.Random(seed)
    segments = scramble(cut(corrupted, sizes), corrupted, rnd, rnd.randrange(3))
    receiver = OutOfOrderReceiver(start=start, markers=markers, crc=True)
    events = feed(receiver, stream, segments)

    delivered = [e.offset for e in events if isinstance(e, UlpduDelivered)]
    assert delivered == stream.offsets[:k]
    for e in events:
        if isinstance(e, UlpduPassed):  # only genuine ULPDUs, never the damaged one
            index = stream.offsets.index(e.offset)
            assert index != k
            assert bytes(e.ulpdu) == stream.ulpdus[index]
    failures = [i for i, e in enumerate(events) if isinstance(e, ReceiveFailed)]
    if receiver.error is None:
        # A damaged length that reaches past the end of the stream: still waiting.
        assert not failures
        assert receiver.buffered > 0
        return
    assert failures == [len(events) - 1]  # nothing after the error
    assert receiver.error.mpa_code in (MpaErrorCode.CRC_MISMATCH, MpaErrorCode.MARKER_MISMATCH)
    assert receiver.error.stream_offset is not None
    at = (receiver.error.stream_offset - start) & MASK
    assert stream.offsets[k] <= at < stream.end_of(k)
    assert receiver.receive(start, stream.data) == []


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.integers(0, 6000), st.binary(max_size=700)), max_size=12),
    markers=st.booleans(),
    crc=st.booleans(),
)
def test_arbitrary_bytes_give_only_protocol_errors(
    chunks: list[tuple[int, bytes]], markers: bool, crc: bool
) -> None:
    receiver = OutOfOrderReceiver(start=1000, markers=markers, crc=crc, max_ulpdu=2000)
    events: list[ReceiveEvent] = []
    for offset, payload in chunks:
        events += receiver.receive(1000 + offset, payload)
    failures = [i for i, e in enumerate(events) if isinstance(e, ReceiveFailed)]
    assert failures in ([], [len(events) - 1])  # nothing follows a failure
    if failures:
        # Octets alone can only break CRCs or markers/lengths (RFC 5044 §8).
        assert receiver.error is not None
        assert receiver.error.mpa_code in (MpaErrorCode.CRC_MISMATCH, MpaErrorCode.MARKER_MISMATCH)


# -- the receiver cases of seed 000 §5.4.1, one by one ------------------------


def ulpdu(n: int, tag: int) -> bytes:
    return bytes((tag + i) & 0xFF for i in range(n))


def kinds(events: list[ReceiveEvent]) -> list[tuple[str, int]]:
    return [
        ("pass" if isinstance(e, UlpduPassed) else "deliver", e.offset)
        for e in events
        if not isinstance(e, ReceiveFailed)
    ]


def test_aligned_complete_fpdus_out_of_order_are_passed_at_once() -> None:
    stream = build([ulpdu(1000, i) for i in range(4)], start=7, markers=True, crc=True)
    segments = cut(stream.data, [stream.end_of(i) - stream.offsets[i] for i in range(4)])
    assert [s[0] for s in segments] == stream.offsets
    receiver = OutOfOrderReceiver(start=7, markers=True, crc=True)
    o = stream.offsets
    assert kinds(feed(receiver, stream, [segments[2]])) == [("pass", o[2])]
    assert receiver.buffered == 0
    assert kinds(feed(receiver, stream, [segments[3]])) == [("pass", o[3])]
    assert kinds(feed(receiver, stream, [segments[1]])) == [("pass", o[1])]
    assert receiver.buffered == 0
    assert kinds(feed(receiver, stream, [segments[0]])) == [
        ("pass", o[0]),
        ("deliver", o[0]),
        ("deliver", o[1]),
        ("deliver", o[2]),
        ("deliver", o[3]),
    ]


def test_several_fpdus_per_segment_out_of_order() -> None:
    # Six FPDUs (204, then 200 octets each; FPDU 0 leads with a marker); the
    # second segment holds FPDUs 3-5. The marker at 1024 lies in FPDU 5; FPDUs
    # 3 and 4 hold no marker and can only be found by the lengths before them.
    stream = build([ulpdu(194, i) for i in range(6)], start=0, markers=True, crc=True)
    o = stream.offsets
    assert o == [0, 204, 404, 608, 808, 1008]
    receiver = OutOfOrderReceiver(start=0, markers=True, crc=True)
    events = feed(receiver, stream, [(o[3], stream.data[o[3] :])])
    assert kinds(events) == [("pass", o[5])]
    assert receiver.buffered == o[5] - o[3]
    events = feed(receiver, stream, [(0, stream.data[: o[3]])])
    # The marker at 512 finds FPDU 2, whose length leads to 3 and 4 (§5.4
    # item 3); the chain from the start then passes 0 and 1 and delivers all.
    assert [e.offset for e in events if isinstance(e, UlpduPassed)] == [o[2], o[3], o[4], 0, o[1]]
    assert [e.offset for e in events if isinstance(e, UlpduDelivered)] == o
    assert receiver.buffered == 0


def test_incomplete_fpdu_waits_for_its_remainder() -> None:
    stream = build([ulpdu(1400, 1), ulpdu(1400, 2)], start=5, markers=True, crc=True)
    o = stream.offsets
    receiver = OutOfOrderReceiver(start=5, markers=True, crc=True)
    middle = o[1] + 700
    assert feed(receiver, stream, [(o[1], stream.data[o[1] : middle])]) == []
    assert receiver.buffered == middle - o[1]
    assert kinds(feed(receiver, stream, [(middle, stream.data[middle:])])) == [("pass", o[1])]
    assert receiver.buffered == 0
    events = feed(receiver, stream, [(0, stream.data[: o[1]])])
    assert kinds(events) == [("pass", 0), ("deliver", 0), ("deliver", o[1])]


def test_unaligned_start_is_combined_with_what_came_before() -> None:
    stream = build([ulpdu(700, i) for i in range(5)], start=0, markers=True, crc=True)
    o = stream.offsets
    # FPDU 2 holds a marker more than 100 octets past its start.
    assert any(o[2] + 100 < m < stream.end_of(2) for m in range(0, len(stream.data), 512))
    receiver = OutOfOrderReceiver(start=0, markers=True, crc=True)
    # A re-segmenting middle box cut 100 octets into FPDU 2; the tail comes
    # first: its marker finds FPDU 2, which waits for its head.
    tail_at = o[2] + 100
    events = feed(receiver, stream, [(tail_at, stream.data[tail_at:])])
    assert ("pass", o[2]) not in kinds(events)
    assert ("pass", o[3]) in kinds(events)
    events = feed(receiver, stream, [(o[2], stream.data[o[2] : tail_at])])
    assert kinds(events) == [("pass", o[2])]
    events = feed(receiver, stream, [(0, stream.data[: o[2]])])
    assert [e.offset for e in events if isinstance(e, UlpduDelivered)] == o
    assert receiver.buffered == 0


def test_without_markers_everything_waits_for_order() -> None:
    stream = build([ulpdu(600, i) for i in range(3)], start=0, markers=False, crc=True)
    o = stream.offsets
    receiver = OutOfOrderReceiver(start=0, markers=False, crc=True)
    assert feed(receiver, stream, [(o[1], stream.data[o[1] :])]) == []
    assert receiver.buffered == len(stream.data) - o[1]
    events = feed(receiver, stream, [(0, stream.data[: o[1]])])
    assert kinds(events) == [(k, o[i]) for i in range(3) for k in ("pass", "deliver")]


def test_first_copy_is_committed_and_retransmissions_never_replace_it() -> None:
    stream = build([ulpdu(100, 1), ulpdu(100, 2)], start=0, markers=False, crc=True)
    receiver = OutOfOrderReceiver(start=0, markers=False, crc=True)
    events = receiver.receive(0, stream.data[:50])
    forged = bytes(50) + stream.data[50:]
    events += receiver.receive(0, forged)  # overlaps: only octets 50.. are new
    check_clean(stream, receiver, events)
    assert receiver.receive(0, stream.data) == []  # nothing passed twice


def test_sequence_wrap_and_data_before_the_start() -> None:
    start = MASK - 600
    stream = build([ulpdu(500, i) for i in range(4)], start=start, markers=True, crc=True)
    receiver = OutOfOrderReceiver(start=start, markers=True, crc=True)
    segments = cut(stream.data, [333])
    events = receiver.receive((start - 20) & MASK, b"MPA ID Rep Frame" + bytes(4))
    for offset, payload in reversed(segments):
        events += receiver.receive((start + offset) & MASK, payload)
    check_clean(stream, receiver, events)
    assert receiver.delivered_seq == (start + len(stream.data)) & MASK


def test_marker_and_length_disagree_when_the_gap_closes() -> None:
    # CRC off: only markers can catch a damaged ULPDU_Length (RFC 5044 §8 code 3).
    stream = build([ulpdu(700, i) for i in range(4)], start=0, markers=True, crc=False)
    o = stream.offsets
    bad = bytearray(stream.data)
    lead = 4 if o[1] % 512 == 0 else 0
    bad[o[1] + lead + 1] += 4  # FPDU 1 claims 4 more octets
    receiver = OutOfOrderReceiver(start=0, markers=True, crc=False)
    events = feed(receiver, stream, [(o[2], bytes(bad[o[2] :]))])
    assert kinds(events) == [("pass", o[2]), ("pass", o[3])]
    events = feed(receiver, stream, [(0, bytes(bad[: o[2]]))])
    assert kinds(events) == [("pass", 0), ("deliver", 0)]
    assert isinstance(events[-1], ReceiveFailed)
    assert events[-1].error.mpa_code is MpaErrorCode.MARKER_MISMATCH
    assert events[-1].error.stream_offset == o[1]


def test_length_beyond_the_receive_limit_is_code_3() -> None:
    receiver = OutOfOrderReceiver(start=0, markers=False, crc=True, max_ulpdu=1000)
    events = receiver.receive(0, b"\x10\x00" + bytes(100))
    assert isinstance(events[-1], ReceiveFailed)
    assert events[-1].error.mpa_code is MpaErrorCode.MARKER_MISMATCH


def test_window_bounds_what_is_held() -> None:
    stream = build([ulpdu(600, i) for i in range(8)], start=0, markers=False, crc=True)
    receiver = OutOfOrderReceiver(start=0, markers=False, crc=True, window=2000)
    feed(receiver, stream, [(100, stream.data[100:])])
    assert receiver.buffered == 1900


def test_aligned_fpdus_with_markers_hold_nothing_whatever_is_in_flight() -> None:
    # Seed 000 Appendix 11.1.2: BufferSizeAF does not grow with the window.
    size = 1400
    stream = build([ulpdu(size, i) for i in range(200)], start=99, markers=True, crc=True)
    segments = [(o, stream.data[o : stream.end_of(i)]) for i, o in enumerate(stream.offsets)]
    receiver = OutOfOrderReceiver(start=99, markers=True, crc=True)
    events: list[ReceiveEvent] = []
    for offset, payload in reversed(segments):
        events += receiver.receive(99 + offset, payload)
        assert receiver.buffered == 0
    check_clean(stream, receiver, events)


@pytest.mark.parametrize("bad", [-1, MASK + 1])
def test_start_must_be_a_sequence_number(bad: int) -> None:
    with pytest.raises(ValueError, match="start"):
        OutOfOrderReceiver(start=bad, markers=True, crc=True)


# -- receive_count: receive() without the events -----------------------------
#
# Two receivers take the same segments, one through receive() (its events
# counted here), the other through receive_count(); after every segment they
# agree on the counts and on everything the receiver shows (octets held,
# bookkeeping, next delivery, error). The segments come mostly in order (the
# path that builds no event), with local swaps, duplicates, overlapping
# retransmissions and corruption, so the receiver goes from the in-order
# decoder to its octet store and back.


def counted(events: list[ReceiveEvent]) -> tuple[int, int, int]:
    """(passed, passed and not delivered by the same segment, delivered)."""
    passed = [e.offset for e in events if isinstance(e, UlpduPassed)]
    delivered = [e.offset for e in events if isinstance(e, UlpduDelivered)]
    return len(passed), len(set(passed) - set(delivered)), len(delivered)


def shown(receiver: OutOfOrderReceiver) -> tuple[object, ...]:
    error = receiver.error
    return (
        receiver.buffered,
        receiver.bookkeeping,
        receiver.delivered_offset,
        receiver.delivered_seq,
        None if error is None else (error.mpa_code, error.stream_offset),
    )


def disturb(
    segments: list[tuple[int, bytes]], data: bytes, rnd: random.Random, swaps: int, extra: int
) -> list[tuple[int, bytes]]:
    """Swap a few neighbours; add duplicates and overlapping retransmissions in place."""
    out = list(segments)
    for _ in range(swaps if len(out) > 1 else 0):
        i = rnd.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    for _ in range(extra):
        lo = rnd.randrange(len(data))
        hi = min(len(data), lo + rnd.randrange(1, 3000))
        out.insert(rnd.randrange(len(out) + 1), (lo, data[lo:hi]))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=ulpdu_lists,
    start=starts,
    markers=st.booleans(),
    crc=st.booleans(),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    swaps=st.integers(0, 3),
    extra=st.integers(0, 3),
    flip=st.one_of(st.none(), st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255))),
)
def test_counts_and_state_equal_receive(
    ulpdus: list[bytes],
    start: int,
    markers: bool,
    crc: bool,
    sizes: list[int],
    seed: int,
    swaps: int,
    extra: int,
    flip: tuple[float, int] | None,
) -> None:
    stream = build(ulpdus, start=start, markers=markers, crc=crc)
    data = bytearray(stream.data)
    if flip is not None:
        data[int(flip[0] * len(data))] ^= flip[1]
    rnd = random.Random(seed)
    segments = disturb(cut(bytes(data), sizes), bytes(data), rnd, swaps, extra)
    by_events = OutOfOrderReceiver(start=start, markers=markers, crc=crc, max_ulpdu=2000)
    by_count = OutOfOrderReceiver(start=start, markers=markers, crc=crc, max_ulpdu=2000)
    total = [0, 0, 0]
    for offset, payload in segments:
        seq = (start + offset) & MASK
        expected = counted(by_events.receive(seq, payload))
        got = by_count.receive_count(seq, payload)
        assert got == expected
        assert shown(by_count) == shown(by_events)
        total = [a + b for a, b in zip(total, got, strict=True)]
    if flip is None and not (swaps or extra):
        # In order and intact: every ULPDU passed and delivered in its turn.
        assert total == [len(ulpdus), 0, len(ulpdus)]
        assert by_count.buffered == 0


# -- receive_run: several segments in one call -------------------------------
#
# One receiver takes each segment with receive_count() (stopping at an
# error, as the capture analyzer's replay does), another takes the same
# segments gathered into runs of segments that continue each other, with
# receive_run(); after every run they agree on the summed counts, on the
# most octets held after any segment of the run, and on everything the
# receiver shows. Corruption and a low ULPDU limit make a run fail midway
# (receive_run then puts the receiver back and goes segment by segment).


def one_by_one(
    receiver: OutOfOrderReceiver, start: int, group: list[tuple[int, bytes]]
) -> tuple[int, int, int, int]:
    passed = ahead = delivered = peak = 0
    for offset, payload in group:
        if receiver.error is not None:
            break
        p, a, d = receiver.receive_count((start + offset) & MASK, payload)
        passed, ahead, delivered = passed + p, ahead + a, delivered + d
        peak = max(peak, receiver.buffered)
    return passed, ahead, delivered, peak


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=ulpdu_lists,
    start=starts,
    markers=st.booleans(),
    crc=st.booleans(),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    swaps=st.integers(0, 2),
    extra=st.integers(0, 2),
    flip=st.one_of(st.none(), st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255))),
    groups=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    limits=st.sampled_from([(2000, 1 << 30), (1400, 1 << 30), (2000, 2500)]),
)
def test_a_run_gives_what_one_call_per_segment_gives(
    ulpdus: list[bytes],
    start: int,
    markers: bool,
    crc: bool,
    sizes: list[int],
    seed: int,
    swaps: int,
    extra: int,
    flip: tuple[float, int] | None,
    groups: list[int],
    limits: tuple[int, int],
) -> None:
    stream = build(ulpdus, start=start, markers=markers, crc=crc)
    data = bytearray(stream.data)
    if flip is not None:
        data[int(flip[0] * len(data))] ^= flip[1]
    segments = disturb(cut(bytes(data), sizes), bytes(data), random.Random(seed), swaps, extra)
    max_ulpdu, window = limits
    one = OutOfOrderReceiver(
        start=start, markers=markers, crc=crc, max_ulpdu=max_ulpdu, window=window
    )
    run = OutOfOrderReceiver(
        start=start, markers=markers, crc=crc, max_ulpdu=max_ulpdu, window=window
    )
    i = turn = 0
    while i < len(segments):
        group = [segments[i]]
        while len(group) < groups[turn % len(groups)] and i + len(group) < len(segments):
            offset, payload = segments[i + len(group)]
            if offset != group[-1][0] + len(group[-1][1]):
                break
            group.append((offset, payload))
        i += len(group)
        turn += 1
        expected = one_by_one(one, start, group)
        got = run.receive_run((start + group[0][0]) & MASK, [p for _, p in group])
        assert got == expected
        assert shown(run) == shown(one)
    if flip is None and not (swaps or extra) and window == 1 << 30:
        assert run.error is None and run.delivered_offset == len(data)


def test_window_is_kept_on_the_counting_path() -> None:
    stream = build([bytes(1000)] * 4, start=7, markers=False, crc=True)
    receiver = OutOfOrderReceiver(start=7, markers=False, crc=True, window=1500)
    twin = OutOfOrderReceiver(start=7, markers=False, crc=True, window=1500)
    for offset, payload in cut(stream.data, [600, 2400, 1300]):
        seq = 7 + offset
        assert receiver.receive_count(seq, payload) == counted(twin.receive(seq, payload))
        assert shown(receiver) == shown(twin)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=ulpdu_lists,
    markers=st.booleans(),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=6),
    counting=st.booleans(),
)
def test_a_reused_buffer_does_not_change_what_is_held(
    ulpdus: list[bytes], markers: bool, sizes: list[int], counting: bool
) -> None:
    # Segments handed over in one bytearray, overwritten after each call.
    stream = build(ulpdus, start=5, markers=markers, crc=True)
    receiver = OutOfOrderReceiver(start=5, markers=markers, crc=True)
    buffer = bytearray(3000)
    passed: list[bytes] = []
    total = 0
    for offset, payload in cut(stream.data, sizes):
        buffer[: len(payload)] = payload
        view = memoryview(buffer)[: len(payload)]
        if counting:
            total += receiver.receive_count(5 + offset, view)[0]
        else:
            events = receiver.receive(5 + offset, view)
            passed += [bytes(e.ulpdu) for e in events if isinstance(e, UlpduPassed)]
        buffer[:] = bytes(len(buffer))
    assert receiver.error is None
    assert receiver.delivered_offset == len(stream.data)
    if counting:
        assert total == len(ulpdus)
    else:
        assert passed == ulpdus
