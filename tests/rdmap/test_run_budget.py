"""Segment runs fill the send budget: no one-segment run from its remainder.

``RdmapStream.runs_to_send(limit)`` hands MPA runs of segments, about
``limit`` octets of ULPDUs per call. A run costs the same Python whatever
its length, so what is left of the budget after whole runs must not become
a run of one segment (it did: half the runs of a bulk transfer at MTU 1500
held one FPDU). A segment that does not fit the rest of the budget waits
for the next call; smaller messages still fill it.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import TAGGED_HEADER_SIZE, UNTAGGED_HEADER_SIZE
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import SendWR, WriteWR
from rdmap.rdmap_harness import make_pair

BUDGET = 64 * 1024


def drain(mulpdu: int, ops: list[tuple[str, int]], budget: int = BUDGET) -> list[list[list[int]]]:
    """ULPDU sizes per run, per call of runs_to_send, until the stream is drained."""
    a, b = make_pair(mulpdu=mulpdu)
    region = b.pd.register(bytearray(1 << 21), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    for i, (kind, size) in enumerate(ops):
        data = bytes(size)
        a.stream.post_send(
            WriteWR(data, region.stag, 0, wr_id=i) if kind == "write" else SendWR(data, wr_id=i)
        )
    out: list[list[list[int]]] = []
    for _ in range(10_000):
        runs = a.stream.runs_to_send(budget)
        if not runs:
            return out
        out.append([[len(u) for u in run.ulpdus()] for run in runs])
    raise AssertionError("the stream did not drain")


def calls(mulpdu: int, ops: list[tuple[str, int]], budget: int = BUDGET) -> list[list[int]]:
    """Segments per run, per call."""
    return [[len(run) for run in call] for call in drain(mulpdu, ops, budget)]


@pytest.mark.parametrize("mulpdu", [1448, 1024, 8960, 16384])
def test_a_bulk_write_goes_in_full_runs(mulpdu: int) -> None:
    full = BUDGET // mulpdu
    got = calls(mulpdu, [("write", 1 << 20)])
    segments = [n for call in got for n in call]
    assert sum(segments) == -(-(1 << 20) // (mulpdu - TAGGED_HEADER_SIZE))
    # one run per call, each full but the message's last
    assert all(len(call) == 1 for call in got)
    assert all(n == full for n in segments[:-1]), segments
    assert 1 <= segments[-1] <= full


@pytest.mark.parametrize("mulpdu", [40000, 65000])
def test_segments_over_half_the_budget_go_two_a_call(mulpdu: int) -> None:
    """At MTU 65536 a segment is nearly the whole budget: a call takes two
    (as before the remainder rule), not one, which would double the calls."""
    got = calls(mulpdu, [("write", 1 << 20)])
    segments = [n for call in got for n in call]
    assert sum(segments) == -(-(1 << 20) // (mulpdu - TAGGED_HEADER_SIZE))
    assert all(sum(call) == 2 for call in got[:-1]), got


def test_small_messages_still_fill_the_rest_of_the_budget() -> None:
    mulpdu = 1448
    room = mulpdu - TAGGED_HEADER_SIZE
    # A Write ending 100 octets into a run, then Sends of one small segment.
    write = room * (BUDGET // mulpdu) * 2 + 100
    got = calls(mulpdu, [("write", write)] + [("send", 64)] * 3)
    assert got[0] == [BUDGET // mulpdu]
    # the Write's last segment and the three Sends share one call
    assert got[-1] == [BUDGET // mulpdu, 1, 1, 1, 1] or got[-1] == [1, 1, 1, 1], got


@given(
    mulpdu=st.integers(200, 20000),
    ops=st.lists(
        st.tuples(st.sampled_from(["write", "send"]), st.integers(0, 200_000)),
        min_size=1,
        max_size=5,
    ),
    budget=st.integers(1, 3 * BUDGET),
)
@settings(max_examples=100)
def test_each_call_fills_the_budget_with_whole_segments(
    mulpdu: int, ops: list[tuple[str, int]], budget: int
) -> None:
    """A call takes at least one segment and then only segments that fit
    the budget, and it stops only when the next segment would not fit."""
    got = drain(mulpdu, ops, budget)
    sizes = [UNTAGGED_HEADER_SIZE if kind == "send" else TAGGED_HEADER_SIZE for kind, _ in ops]
    total = sum(
        max(1, -(-size // (mulpdu - header))) for (_, size), header in zip(ops, sizes, strict=True)
    )
    assert sum(len(run) for call in got for run in call) == total
    for call, following in itertools.pairwise(got):
        segments = [n for run in call for n in run]
        taken = sum(segments)
        # Over the budget only by one segment larger than half of it.
        assert taken <= budget or len(segments) == 1 or 2 * segments[-1] > budget
        if taken > budget and len(segments) > 1:
            assert taken - segments[-1] < budget
        assert budget - taken < following[0][0]
