"""TCP reassembly of one direction against a model that keeps one octet per offset."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.analyze.capture import TCP_SYN, TcpPacket
from iwarp.analyze.tcp import MAX_STREAM, ByteStream

ISN = 0xFFFFFF00  # the stream wraps the 32-bit sequence space early on


def packet(frame: int, offset: int, payload: bytes, flags: int = 0) -> TcpPacket:
    seq = (ISN + 1 + offset) & 0xFFFFFFFF
    return TcpPacket(frame, 0.0, "10.0.0.1", 1, "10.0.0.2", 2, seq, 0, flags, payload, len(payload))


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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 300), st.binary(min_size=1, max_size=60)), min_size=1, max_size=12
    )
)
def test_layout_matches_the_model(segments: list[tuple[int, bytes]]) -> None:
    syn = packet(1, -1, b"", TCP_SYN)
    packets = [syn] + [packet(f, o, p) for f, (o, p) in enumerate(segments, start=2)]
    stream = ByteStream.from_packets(packets, ISN)
    octets, conflicting, nothing_new, out_of_order = model(segments)
    # The runs are exactly the captured offsets, sorted, disjoint, not touching.
    covered = [i for lo, hi in stream.runs for i in range(lo, hi)]
    assert covered == sorted(octets)
    assert all(a[1] < b[0] for a, b in zip(stream.runs, stream.runs[1:], strict=False))
    for lo, hi in stream.runs:
        assert stream.read(lo, hi - lo) == bytes(octets[i] for i in range(lo, hi))
        assert stream.read(lo, hi - lo + 1) is None  # one octet past the run
        assert stream.captured(lo, hi + 5) == stream.read(lo, hi - lo)
    assert {frame for frame, _, _ in stream.conflicts} == conflicting
    assert stream.retransmissions == nothing_new
    assert stream.out_of_order == out_of_order
    hole = next((i for i in range(max(octets) + 1) if i not in octets), None)
    if hole is not None:
        assert stream.captured(hole, hole + 1) == b""
        assert stream.run_end(hole) == hole


def test_find_looks_inside_runs_only() -> None:
    packets = [packet(1, 0, b"xxMPA"), packet(2, 100, b"..MPA ID Rep Frame")]
    stream = ByteStream.from_packets(packets, ISN)
    assert stream.find(b"MPA ID Rep Frame", 200) == 102
    assert stream.find(b"MPA ID Rep Frame", 117) == -1  # the key must end before stop
    assert stream.find(b"MPA", 10) == 2


def test_a_far_sequence_jump_costs_no_memory() -> None:
    # Two octets a gigabyte apart: a capture this small must stay small.
    packets = [packet(1, 0, b"a"), packet(2, MAX_STREAM - 10, b"b")]
    tracemalloc.start()
    try:
        stream = ByteStream.from_packets(packets, ISN)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stream.runs == [(0, 1), (MAX_STREAM - 10, MAX_STREAM - 9)]
    assert stream.read(MAX_STREAM - 10, 1) == b"b"
    assert peak < 1 << 20
