"""DDP segmentation and reassembly (RFC 5041 §5.2, §7.1), without RDMAP."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.errors import (
    DdpCatastrophicError,
    DdpTaggedCode,
    DdpTaggedError,
    DdpUntaggedCode,
    DdpUntaggedError,
)
from iwarp.ddp.placement import DdpReceiver, TaggedSegment, UntaggedQueue, UntaggedSegment
from iwarp.ddp.segmentation import tagged_segments, untagged_segments
from iwarp.ddp.wire import TAGGED_HEADER_SIZE, UNTAGGED_HEADER_SIZE, TaggedHeader, UntaggedHeader
from iwarp.errors import LocalProtocolError


class Memory:
    """One tagged buffer (STag 7, TO 1000..) for the resolver."""

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)

    def resolve(self, stag: int, to: int, length: int, rsvdulp: int, first: bool) -> memoryview:
        if stag != 7:
            raise DdpTaggedError(DdpTaggedCode.INVALID_STAG, "unknown")
        if to < 1000 or to + length > 1000 + len(self.data):
            raise DdpTaggedError(DdpTaggedCode.BASE_OR_BOUNDS, "bounds")
        return memoryview(self.data)[to - 1000 : to - 1000 + length]


def receiver(memory: Memory | None = None) -> tuple[DdpReceiver[int], UntaggedQueue[int]]:
    queue: UntaggedQueue[int] = UntaggedQueue(0)
    mem = memory or Memory(0)
    return DdpReceiver({0: queue}, mem.resolve), queue


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=3000), mulpdu=st.integers(19, 700))
def test_untagged_round_trip(payload: bytes, mulpdu: int) -> None:
    rx, queue = receiver()
    buf = bytearray(len(payload) + 5)
    queue.post(memoryview(buf), 42)
    segments = list(untagged_segments(payload, qn=0, msn=1, rsvdulp=0x43, mulpdu=mulpdu))
    assert all(len(s) <= mulpdu for s in segments)
    assert sum(len(s) - UNTAGGED_HEADER_SIZE for s in segments) == len(payload)
    results = [rx.receive(memoryview(bytes(s))) for s in segments]
    assert all(isinstance(r, UntaggedSegment) for r in results)
    last = results[-1]
    assert isinstance(last, UntaggedSegment) and last.last
    assert last.message_length == len(payload) and last.buffer.context == 42
    assert bytes(buf[: len(payload)]) == payload and buf[len(payload) :] == bytes(5)
    assert queue.next_msn == 2 and not queue.buffers


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=3000), mulpdu=st.integers(15, 700), to=st.integers(0, 40))
def test_tagged_round_trip(payload: bytes, mulpdu: int, to: int) -> None:
    memory = Memory(len(payload) + 50)
    rx, _ = receiver(memory)
    segments = list(tagged_segments(payload, stag=7, to=1000 + to, rsvdulp=0x40, mulpdu=mulpdu))
    assert all(len(s) <= mulpdu for s in segments)
    for i, s in enumerate(segments):
        result = rx.receive(memoryview(bytes(s)))
        assert isinstance(result, TaggedSegment)
        assert result.first == (i == 0) and result.last == (i == len(segments) - 1)
    assert bytes(memory.data[to : to + len(payload)]) == payload
    assert memory.data[:to] == bytes(to) and not any(memory.data[to + len(payload) :])
    assert not rx.tagged_in_progress


def test_rfc_example_segment_sizes() -> None:
    # RFC 5041 §5.2: 2048 octets, MULPDU 1500 -> 1482 + 566 untagged, 1486 + 562 tagged.
    untagged = list(untagged_segments(bytes(2048), qn=0, msn=1, rsvdulp=0, mulpdu=1500))
    assert [len(s) - UNTAGGED_HEADER_SIZE for s in untagged] == [1482, 566]
    assert [UntaggedHeader.unpack_from(s).mo for s in untagged] == [0, 1482]
    tagged = list(tagged_segments(bytes(2048), stag=1, to=16384, rsvdulp=0, mulpdu=1500))
    assert [len(s) - TAGGED_HEADER_SIZE for s in tagged] == [1486, 562]
    assert [TaggedHeader.unpack_from(s).to for s in tagged] == [16384, 17870]
    assert [TaggedHeader.unpack_from(s).last for s in tagged] == [False, True]


def test_zero_length_message_is_one_segment() -> None:
    (segment,) = untagged_segments(b"", qn=0, msn=9, rsvdulp=0, mulpdu=128)
    assert UntaggedHeader.unpack_from(segment).last and len(segment) == UNTAGGED_HEADER_SIZE
    (tagged,) = tagged_segments(b"", stag=0, to=0, rsvdulp=0, mulpdu=128)
    assert len(tagged) == TAGGED_HEADER_SIZE


def test_zero_length_tagged_is_not_checked() -> None:
    rx, _ = receiver(Memory(0))
    (segment,) = tagged_segments(b"", stag=12345, to=2**64 - 1, rsvdulp=0, mulpdu=128)
    result = rx.receive(memoryview(segment))
    assert isinstance(result, TaggedSegment) and result.length == 0


def test_segmentation_refuses_tiny_mulpdu_and_to_wrap() -> None:
    with pytest.raises(LocalProtocolError):
        untagged_segments(b"x", qn=0, msn=1, rsvdulp=0, mulpdu=18)
    with pytest.raises(LocalProtocolError):
        tagged_segments(b"xy", stag=1, to=2**64 - 1, rsvdulp=0, mulpdu=128)


def untagged(payload: bytes, *, qn: int = 0, msn: int = 1, mo: int = 0, last: bool = True) -> bytes:
    return UntaggedHeader(qn, msn, mo, last, rsvdulp=0x43).pack() + payload


@pytest.mark.parametrize(
    ("segment", "posted", "code"),
    [
        (untagged(b"a", qn=5), 1, DdpUntaggedCode.INVALID_QN),
        (untagged(b"a"), 0, DdpUntaggedCode.NO_BUFFER),
        (untagged(b"a", mo=11), 1, DdpUntaggedCode.INVALID_MO),
        (untagged(b"a" * 11), 1, DdpUntaggedCode.MESSAGE_TOO_LONG),
        (untagged(b"a", msn=2), 1, DdpUntaggedCode.MSN_RANGE),
        (untagged(b"a", msn=0), 1, DdpUntaggedCode.MSN_RANGE),
        (bytes([0x42]) + untagged(b"a")[1:], 1, DdpUntaggedCode.INVALID_VERSION),
    ],
)
def test_untagged_errors(segment: bytes, posted: int, code: DdpUntaggedCode) -> None:
    rx, queue = receiver()
    buf = bytearray(b"\xee" * 10)
    for _ in range(posted):
        queue.post(memoryview(buf), 1)
    with pytest.raises(DdpUntaggedError) as info:
        rx.receive(memoryview(segment))
    assert info.value.code == code and info.value.etype == 2 and info.value.layer == 1
    assert info.value.header == segment[:UNTAGGED_HEADER_SIZE]
    assert info.value.segment_length == len(segment)
    assert buf == b"\xee" * 10  # nothing placed


def test_tagged_segments_are_judged_by_the_section_7_1_checks_only() -> None:
    """Inside an unfinished message a segment may carry any TO (RFC 5041
    §5.3); what its STag and bounds allow decides (§7.1)."""
    memory = Memory(100)
    rx, _ = receiver(memory)
    rx.receive(memoryview(TaggedHeader(7, 1000, last=False).pack() + b"abcd"))
    rx.receive(memoryview(TaggedHeader(7, 1010, last=False).pack() + b"e"))  # a jump ahead
    with pytest.raises(DdpTaggedError) as info:
        rx.receive(memoryview(TaggedHeader(8, 1004).pack() + b"e"))
    assert info.value.code == DdpTaggedCode.INVALID_STAG
    with pytest.raises(DdpTaggedError) as info:
        rx.receive(memoryview(TaggedHeader(7, 2**64 - 1, last=True).pack() + b"ef"))
    assert info.value.code == DdpTaggedCode.TO_WRAP
    assert bytes(memory.data[:11]) == b"abcd\0\0\0\0\0\0e"


def test_short_segments_are_catastrophic() -> None:
    rx, _ = receiver()
    for raw in (b"", b"\xc1", b"\x41" + bytes(10)):
        with pytest.raises(DdpCatastrophicError):
            rx.receive(memoryview(raw))


@settings(max_examples=300)
@given(st.binary(max_size=60))
def test_arbitrary_segments_raise_only_protocol_errors(data: bytes) -> None:
    rx, queue = receiver(Memory(64))
    queue.post(memoryview(bytearray(16)), 0)
    with contextlib.suppress(DdpUntaggedError, DdpTaggedError, DdpCatastrophicError):
        rx.receive(memoryview(data))
