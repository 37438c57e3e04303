"""The top of the 64-bit Tagged Offset space: one rule for every check.

A buffer may end on TO 2**64 - 1 (its last octet); one octet more wraps
(RFC 5041 §7.1 "TO wrap"). Registration, posting, the segmenter and the
receiver (its fast path and its full path) all apply
:func:`iwarp.ddp.wire.fits_to_space`.
"""

from __future__ import annotations

import os

import pytest

from iwarp.ddp.errors import DdpTaggedCode, DdpTaggedError
from iwarp.ddp.placement import DdpReceiver
from iwarp.ddp.segmentation import tagged_segments
from iwarp.ddp.wire import MAX_TO, TO_SPACE, fits_to_space
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.memory import Access, AccessFault
from iwarp.rdmap.work import CompletionStatus, ReadWR, Sge, WriteWR
from rdmap.rdmap_harness import make_pair, pump

_REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def test_the_rule() -> None:
    assert TO_SPACE == 1 << 64 and MAX_TO == TO_SPACE - 1
    assert fits_to_space(MAX_TO, 1)
    assert fits_to_space(MAX_TO - 9, 10)
    assert fits_to_space(TO_SPACE, 0)
    assert not fits_to_space(MAX_TO, 2)
    assert not fits_to_space(MAX_TO - 9, 11)
    assert not fits_to_space(-1, 1)


@pytest.mark.parametrize("length", [1, 10, 3000])
def test_write_and_read_ending_on_the_last_to_are_both_accepted(length: int) -> None:
    """A Write whose last octet is at 2**64 - 1 is placed like a Read of
    the same range is served (over several segments, too)."""
    a, b = make_pair(mulpdu=200)
    target = bytearray(length)
    region = b.pd.register(target, _REMOTE, address=TO_SPACE - length)
    assert region.check(b.pd, TO_SPACE - length, length, int(Access.REMOTE_WRITE)) is None
    data = os.urandom(length)
    a.stream.post_send(WriteWR(data, region.stag, TO_SPACE - length, wr_id=1))
    sink = bytearray(length)
    a.stream.post_send(ReadWR(Sge(a.pd.register(sink)), region.stag, TO_SPACE - length, wr_id=2))
    pump(a, b)
    assert a.terminates_received() == [] and b.terminates_sent() == []
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS),
        (2, CompletionStatus.SUCCESS),
    ]
    assert bytes(target) == data and bytes(sink) == data


def test_one_octet_past_the_top_is_refused_everywhere() -> None:
    a, b = make_pair()
    with pytest.raises(LocalProtocolError):
        b.pd.register(bytearray(2), _REMOTE, address=MAX_TO)
    with pytest.raises(LocalProtocolError):
        a.stream.post_send(WriteWR(b"xy", 5, MAX_TO))
    with pytest.raises(LocalProtocolError):
        list(tagged_segments(b"xy", stag=5, to=MAX_TO, rsvdulp=0x40, mulpdu=100))
    region = b.pd.register(bytearray(1), _REMOTE, address=MAX_TO)
    assert region.check(b.pd, MAX_TO, 2, int(Access.REMOTE_WRITE)) is AccessFault.TO_WRAP


def test_receiver_reports_the_wrap_but_not_the_edge() -> None:
    placed: list[tuple[int, int]] = []

    def resolver(stag: int, to: int, length: int, rsvdulp: int, first: bool) -> memoryview:
        placed.append((to, length))
        return memoryview(bytearray(length))

    receiver: DdpReceiver[None] = DdpReceiver({}, resolver)
    [edge] = tagged_segments(b"ab", stag=5, to=MAX_TO - 1, rsvdulp=0x40, mulpdu=100)
    receiver.receive(memoryview(bytes(edge)))
    assert placed == [(MAX_TO - 1, 2)]
    wrapping = bytearray(edge)
    wrapping[6:14] = MAX_TO.to_bytes(8, "big")
    with pytest.raises(DdpTaggedError) as info:
        receiver.receive(memoryview(bytes(wrapping)))
    assert info.value.code == DdpTaggedCode.TO_WRAP
