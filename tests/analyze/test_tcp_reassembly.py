"""Streaming TCP reassembly of one direction against a model that keeps one octet per offset."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.analyze.tcp import Limits, Reassembler, StreamWindow

BASE = 0xFFFFFF00  # the stream wraps the 32-bit sequence space early on


def model(segments: list[tuple[int, bytes]]) -> tuple[dict[int, int], set[int], int, int]:
    """Octets by offset (the first copy wins, seed 000 §3.1.2), the frames
    whose copy disagreed with it, how many segments brought nothing new, and
    how many brought something new below the highest offset seen before."""
    octets: dict[int, int] = {}
    conflicting: set[int] = set()
    nothing_new = out_of_order = highest = 0
    for frame, (offset, payload) in enumerate(segments, start=2):
        span = range(offset, offset + len(payload))
        if any(octets.get(i, octet) != octet for i, octet in zip(span, payload, strict=True)):
            conflicting.add(frame)
        if all(i in octets for i in span):
            nothing_new += 1
        elif offset < highest:
            out_of_order += 1
        highest = max(highest, span.stop)
        for i, octet in zip(span, payload, strict=True):
            octets.setdefault(i, octet)
    return octets, conflicting, nothing_new, out_of_order


def reassemble(segments: list[tuple[int, bytes]], limits: Limits) -> Reassembler:
    window = StreamWindow(BASE, limits.history)
    reasm = Reassembler(window, limits)
    for frame, (offset, payload) in enumerate(segments, start=2):
        reasm.add(offset, payload, frame)
    return reasm


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 300), st.binary(min_size=1, max_size=60)), min_size=1, max_size=12
    )
)
def test_streaming_layout_matches_the_model(segments: list[tuple[int, bytes]]) -> None:
    reasm = reassemble(segments, Limits())
    octets, conflicting, nothing_new, out_of_order = model(segments)
    # In order: octets from 0 up to the first hole are in the window, the rest wait.
    hole = next(i for i in range(max(octets) + 2) if i not in octets)
    assert reasm.delivered == hole
    assert (reasm.window.read(0, hole) if hole else b"") == bytes(octets[i] for i in range(hole))
    assert {frame for frame, _, _ in reasm.conflicts} == conflicting
    assert reasm.retransmissions == nothing_new
    assert reasm.out_of_order == out_of_order
    # The end of the capture: holes become gaps, runs are exactly the captured offsets.
    reasm.finish()
    window = reasm.window
    covered = [i for lo, hi in window.runs for i in range(lo, hi)]
    assert covered == sorted(octets)
    assert reasm.captured == len(octets)
    for lo, hi in window.runs:
        assert window.read(lo, hi - lo) == bytes(octets[i] for i in range(lo, hi))
        assert window.read(lo, hi - lo + 1) is None  # one octet past the run
        assert window.captured(lo, hi + 5) == window.read(lo, hi - lo)
    assert reasm.gaps == len(window.runs) - 1 + (0 if window.runs[0][0] == 0 else 1)


def test_a_hole_is_given_up_past_the_limit() -> None:
    limits = Limits(reassembly=1000)
    segments = [(0, b"a" * 100)] + [(200 + 100 * i, b"b" * 100) for i in range(12)]
    reasm = reassemble(segments, limits)
    # Past 1000 octets waiting, the hole [100, 200) was taken as not captured.
    assert reasm.given_up == [(100, 200)]
    assert reasm.gaps == 1
    assert reasm.pending_octets <= limits.reassembly
    assert reasm.window.runs == [[0, 100], [200, 200 + 100 * 12]] or reasm.delivered > 200


def test_an_empty_window_skips_octets_it_never_held() -> None:
    window = StreamWindow(100, history=0, compact=0)
    window.append(0, b"abcd", 1)
    with pytest.raises(ValueError, match="holds octets"):
        window.skip(10)
    window.discard(4)
    window.skip(1000)  # counted elsewhere: the window's end moves on
    assert window.end == 1000 and window.held == 0
    window.append(1000, b"ef", 2)
    assert window.read(1000, 2) == b"ef" and window.seq(1000) == 1100
    window.discard(1002)
    window.skip(900)  # never backwards
    assert window.end == 1002


def test_discard_keeps_only_the_history() -> None:
    limits = Limits(history=1000)
    reasm = reassemble([(i * 1000, bytes([i]) * 1000) for i in range(100)], limits)
    window = reasm.window
    window.discard(50_000)
    assert sum(hi - lo for lo, hi in window.runs) == 100_000 - 49_000
    # The 49 000 octets dropped stay in the buffer, counted, until they
    # outweigh the live ones and 64 KiB; then they are cut off.
    assert window.held == 100_000
    assert window.read(49_000, 10) == bytes([49]) * 10
    assert window.read(48_999, 2) is None
    # A retransmission of discarded octets is counted, not compared.
    reasm.add(10_000, b"x" * 10, 999)
    assert reasm.unchecked == 10 and reasm.conflicts == []
    reasm.add(49_500, b"x" * 10, 1000)  # still held: compared
    assert [c[0] for c in reasm.conflicts] == [1000]
    window.discard(80_000)
    assert window.held == 100_000 - 79_000
    assert window.read(79_000, 10) == bytes([79]) * 10


def test_find_looks_inside_runs_only() -> None:
    reasm = reassemble([(0, b"xxMPA"), (100, b"..MPA ID Rep Frame")], Limits())
    reasm.finish()
    window = reasm.window
    assert window.find(b"MPA ID Rep Frame", 200) == 102
    assert window.find(b"MPA ID Rep Frame", 117) == -1  # the key must end before stop
    assert window.find(b"MPA", 10) == 2


def test_a_far_sequence_jump_costs_no_memory() -> None:
    # Two octets a gigabyte apart: a capture this small must stay small.
    tracemalloc.start()
    try:
        reasm = reassemble([(0, b"a"), ((1 << 30) - 10, b"b")], Limits())
        reasm.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    window = reasm.window
    assert window.runs == [[0, 1], [(1 << 30) - 10, (1 << 30) - 9]]
    assert window.read((1 << 30) - 10, 1) == b"b"
    assert peak < 1 << 20


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 40), st.binary(min_size=1, max_size=50)),
            st.tuples(st.just("discard"), st.integers(0, 120), st.just(b"")),
        ),
        max_size=40,
    ),
    st.integers(0, 30),
    st.integers(0, 64),
)
def test_window_queries_after_discards_match_the_model(
    steps: list[tuple[str, int, bytes]], history: int, compact: int
) -> None:
    # Appends (some past a gap) and discards in any order; whatever the
    # window cut off its buffers' fronts, every query answers from the model
    # and no buffer outgrows twice its live octets plus the compaction slack.
    window = StreamWindow(BASE, history, compact)
    octets: dict[int, int] = {}
    for action, amount, data in steps:
        if action == "append":
            at = window.end + (amount if amount > 30 else 0)
            window.append(at, data, 2)
            octets.update(zip(range(at, at + len(data)), data, strict=True))
        else:
            window.discard(window.start + amount)
            octets = {i: v for i, v in octets.items() if i >= window.start}
        dead = window.runs[0][0] - window.origin if window.runs else 0
        assert window.held == len(octets) + dead
        assert dead <= max(len(octets), compact)
        for (lo, hi), chunk in zip(window.runs, window.chunks, strict=True):
            assert len(chunk) <= 2 * (hi - lo) + compact
    assert [i for lo, hi in window.runs for i in range(lo, hi)] == sorted(octets)
    for lo, hi in window.runs:
        expected = bytes(octets[i] for i in range(lo, hi))
        for at in range(lo, hi):
            assert window.read(at, hi - at) == expected[at - lo :]
            assert bytes(window.view(at, hi - at) or b"x") == expected[at - lo :]
            found = window.locate(at)
            assert found is not None
            chunk, pos, end = found
            assert end == hi and bytes(chunk[pos : pos + hi - at]) == expected[at - lo :]
            assert window.captured(at, hi + 3) == expected[at - lo :]
            assert window.run_end(at) == hi and window.next_captured(at) == at
        assert window.read(lo, hi - lo + 1) is None
        if hi - lo >= 2:
            key = expected[-2:]
            earlier = [
                run_lo + at
                for run_lo, run_hi in window.runs
                if run_lo <= lo
                and (at := bytes(octets[i] for i in range(run_lo, run_hi)).find(key)) >= 0
            ]
            assert window.find(key, hi) == earlier[0]
