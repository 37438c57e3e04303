"""The stream's fast paths do exactly what the full path does. Receiving
(RDMA Write segments, in-order segments of a plain Send, the last one
completing it): same placement, same events, same Terminate, for valid
messages and with any field changed. Sending (a small Send posted on an
idle stream): the same ULPDU and completion as posting it and pulling it."""

from __future__ import annotations

import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from iwarp.errors import LocalProtocolError
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)

MULPDU = 200
SIZE = 600


#: A region at the top of the 64-bit TO space: Writes may end exactly at 2**64.
TOP = 2**64 - (SIZE + 64)


def receiver(
    fast: bool, address: int = 0x1000, receive_into: int | None = None
) -> tuple[RdmapStream, bytearray, int]:
    """A stream with a region (the Write target, or with ``receive_into``
    octets of it the first receive buffer) and a small receive buffer."""
    pd = MemoryRegistry().alloc_pd()
    memory = bytearray(SIZE + 64)
    region = pd.register(memory, Access.LOCAL_WRITE | Access.REMOTE_WRITE, address=address)
    stream = RdmapStream(pd, initiator=True, mulpdu=MULPDU)
    if receive_into is not None:
        stream.post_recv(RecvWR(Sge(region, 0, receive_into), wr_id=6))
    stream.post_recv(RecvWR(Sge(pd.register(bytearray(64))), wr_id=7))
    stream.take_events()
    if not fast:
        stream._place_write = lambda view: False  # type: ignore[method-assign]
        stream._place_send = lambda view: False  # type: ignore[method-assign]
    return stream, memory, region.stag


def write_segments(stag: int, length: int, to: int, send: bool = False) -> list[bytearray]:
    pd = MemoryRegistry().alloc_pd()
    sender = RdmapStream(pd, initiator=True, mulpdu=MULPDU)
    payload = (bytes(range(1, 256)) * (length // 255 + 1))[:length]  # no zero octets
    if send:
        sender.post_send(SendWR(payload, wr_id=1))
        sender.post_send(SendWR(b"x", wr_id=2))
    else:
        sender.post_send(WriteWR(payload, stag, to, wr_id=1))
        sender.post_send(WriteWR(b"", stag, to, wr_id=2))
    return sender.ulpdus_to_send()


mutation = st.tuples(
    st.integers(0, 20),  # which segment
    st.sampled_from(["none", "control", "rdmap", "stag", "to", "cut", "to_end", "mo"]),
    st.integers(0, 255),
)


@settings(max_examples=150, deadline=None)
@example(length=SIZE, offset=64, mutations=[], interleave=False, address=TOP, send=False, room=1)
@example(length=SIZE, offset=0, mutations=[], interleave=False, address=0, send=True, room=545)
@given(
    length=st.integers(1, SIZE),
    offset=st.integers(0, 80),
    mutations=st.lists(mutation, max_size=3),
    interleave=st.booleans(),
    address=st.sampled_from([0x1000, TOP]),
    send=st.booleans(),
    room=st.integers(1, SIZE + 64),
)
def test_fast_path_equals_full_path(
    length: int,
    offset: int,
    mutations: list[tuple[int, str, int]],
    interleave: bool,
    address: int,
    send: bool,
    room: int,
) -> None:
    results: list[tuple[list[str], bytes, object, bool]] = []
    length = min(length, SIZE + 64 - offset)  # inside the region (the sender checks the wrap)
    for fast in (True, False):
        stream, memory, stag = receiver(fast, address, receive_into=room if send else None)
        segments = [bytearray(s) for s in write_segments(stag, length, address + offset, send)]
        for index, kind, value in mutations:
            if index >= len(segments):
                continue
            seg = segments[index]
            if len(seg) < 18 and kind != "cut":
                continue  # too short for the field (or already cut short)
            if kind == "control":
                seg[0] = value
            elif kind == "rdmap":
                seg[1] = value
            elif kind == "stag":
                struct.pack_into(">I", seg, 2, value * 0x01010101)
            elif kind == "to":
                struct.pack_into(">Q", seg, 6, (address + value * 8) & 0xFFFFFFFFFFFFFFFF)
            elif kind == "to_end":
                struct.pack_into(">Q", seg, 6, 0xFFFFFFFFFFFFFFFF - value)
            elif kind == "mo":
                struct.pack_into(">I", seg, 14, value * 4)
            elif kind == "cut":
                del seg[value % (len(seg) + 1) :]
        if interleave and len(segments) > 1 and len(segments[0]) >= 14:
            # Another Write begins inside the first one.
            other = bytearray(segments[0])
            other[1] = rdmap_control(RdmapOpcode.RDMA_WRITE, 1)
            segments.insert(1, other)
        events: list[str] = []
        for seg in segments:
            events.extend(repr(e) for e in stream.handle_ulpdu(memoryview(bytes(seg))))
        results.append((events, bytes(memory), stream.state, stream._ddp.tagged_in_progress))
    assert results[0] == results[1]


def test_valid_writes_take_the_fast_path() -> None:
    stream, memory, stag = receiver(fast=True)
    placed = []
    fast = stream._place_write

    def counting(view: memoryview) -> bool:
        placed.append(fast(view))
        return placed[-1]

    stream._place_write = counting  # type: ignore[method-assign]
    segments = write_segments(stag, SIZE, 0x1000)
    for seg in segments:
        assert stream.handle_ulpdu(memoryview(bytes(seg))) == []
    assert placed == [True] * (len(segments) - 1) + [False]  # the zero-length Write: full path
    assert memory[:SIZE] == (bytes(range(1, 256)) * 3)[:SIZE]


def counted(stream: RdmapStream) -> list[bool]:
    """What the stream's Send fast path answers from now on, call by call."""
    placed: list[bool] = []
    fast = stream._place_send

    def counting(view: memoryview) -> bool:
        placed.append(fast(view))
        return placed[-1]

    stream._place_send = counting  # type: ignore[method-assign]
    return placed


def test_send_segments_take_the_fast_path() -> None:
    stream, memory, _ = receiver(fast=True, receive_into=SIZE)
    placed = counted(stream)
    segments = write_segments(0, SIZE, 0, send=True)
    events = [e for seg in segments for e in stream.handle_ulpdu(memoryview(bytes(seg)))]
    assert placed == [True] * len(segments)  # the last segments complete the receives
    assert [e.wr_id for e in events] == [6, 7]  # type: ignore[union-attr]
    assert memory[:SIZE] == (bytes(range(1, 256)) * 3)[:SIZE]


def test_a_send_with_invalidate_takes_the_full_path() -> None:
    stream, _, stag = receiver(fast=True, receive_into=SIZE)
    placed = counted(stream)
    sender = RdmapStream(MemoryRegistry().alloc_pd(), initiator=True, mulpdu=MULPDU)
    sender.post_send(SendWR(b"abc", wr_id=1, invalidate_stag=stag))
    (segment,) = sender.ulpdus_to_send()
    (completion,) = stream.handle_ulpdu(memoryview(bytes(segment)))
    assert placed == [False]
    assert completion.invalidated_stag == stag  # type: ignore[union-attr]


def _sent(stream: RdmapStream) -> tuple[list[bytes], list[str]]:
    ulpdus = [bytes(u) for run in stream.runs_to_send() for u in run.ulpdus()]
    return ulpdus, [repr(e) for e in stream.take_events()]


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(0, MULPDU),
    solicited=st.booleans(),
    invalidate=st.booleans(),
    busy=st.sampled_from(["idle", "queued", "read"]),
    version=st.sampled_from([0, 1]),
)
def test_claim_send_equals_post_and_pull(
    size: int, solicited: bool, invalidate: bool, busy: str, version: int
) -> None:
    """The same ULPDUs, in the same order, and the same events but the
    claimed Send's own completion (the lane makes none), whether a Send is
    claimed for the small-message lane or goes through the send queue;
    refused (None, nothing changed) whenever something is queued or in
    flight before it or it needs more than one segment."""
    outputs = []
    for at_once in (True, False):
        pd = MemoryRegistry().alloc_pd()
        stream = RdmapStream(pd, initiator=True, mulpdu=MULPDU, version=version)
        stream.take_events()
        if busy == "queued":
            stream.post_send(SendWR(b"first", wr_id=10))
        elif busy == "read":
            sink = pd.register(bytearray(8))
            stream.post_send(ReadWR(Sge(sink), 0x1234, 0, wr_id=11))
            _sent(stream)
        invalidate_stag = 0x55 if invalidate else None
        wr = SendWR(
            bytes(range(size)),  # size <= MULPDU < 256
            wr_id=1,
            solicited=solicited,
            invalidate_stag=invalidate_stag,
        )
        if at_once:
            ulpdu = stream.claim_send(wr.data, solicited, invalidate_stag)
            fits = size + 18 <= MULPDU
            assert (ulpdu is not None) == (fits and busy == "idle")
            if ulpdu is None:
                stream.post_send(wr)
                outputs.append(_sent(stream))
            else:
                header, payload = ulpdu
                later, events = _sent(stream)
                outputs.append(([header + bytes(payload), *later], events))
        else:
            stream.post_send(wr)
            ulpdus, events = _sent(stream)
            if size + 18 <= MULPDU and busy == "idle":
                (done,) = events
                assert done.startswith("Completion(wr_id=1,")
                events = []
            outputs.append((ulpdus, events))
    assert outputs[0] == outputs[1]


@settings(max_examples=40, deadline=None)
@given(
    solicited=st.booleans(),
    invalidate=st.booleans(),
    length=st.integers(0, SIZE),
    room=st.integers(0, SIZE + 64),
)
def test_fast_path_equals_full_path_for_each_send_variant(
    solicited: bool, invalidate: bool, length: int, room: int
) -> None:
    """Send, Send with Solicited Event, and either with Invalidate (which
    the full path takes): the same completions (solicited flag, invalidated
    STag, lengths) and placement, in and over the receive buffer's size."""
    results = []
    for fast in (True, False):
        stream, memory, stag = receiver(fast, receive_into=room)
        sender = RdmapStream(MemoryRegistry().alloc_pd(), initiator=True, mulpdu=MULPDU)
        payload = (bytes(range(1, 256)) * 3)[:length]
        invalidate_stag = stag if invalidate else None
        sender.post_send(SendWR(payload, 1, solicited=solicited, invalidate_stag=invalidate_stag))
        sender.post_send(SendWR(b"x", 2, solicited=solicited))
        events = [
            repr(e) for u in sender.ulpdus_to_send() for e in stream.handle_ulpdu(memoryview(u))
        ]
        results.append((events, bytes(memory), stream.state))
    assert results[0] == results[1]


def test_claim_send_completes_only_work_requests_and_checks_the_stag() -> None:
    stream = RdmapStream(MemoryRegistry().alloc_pd(), initiator=True, mulpdu=MULPDU)
    stream.take_events()
    parts = stream.claim_send(b"ping", solicited=True)
    assert parts is not None
    header, payload = parts
    assert len(header) == 18 and bytes(payload) == b"ping"
    assert header[1] == rdmap_control(RdmapOpcode.SEND_WITH_SE, 1)
    assert stream.take_events() == []
    assert stream.claim_send(b"x" * MULPDU) is None  # two segments: post it
    parts = stream.claim_send(b"", invalidate_stag=0xABCD)
    assert parts is not None
    assert parts[0][1] == rdmap_control(RdmapOpcode.SEND_WITH_INVALIDATE, 1)
    assert struct.unpack_from(">I", parts[0], 2)[0] == 0xABCD
    with pytest.raises(LocalProtocolError, match="not 32-bit"):
        stream.claim_send(b"", invalidate_stag=1 << 32)
    # With a work request id (a posted SendWR), the completion post-and-pull makes.
    assert stream.claim_send(b"pong", wr_id=7) is not None
    assert stream.take_events() == [Completion(7, WorkOpcode.SEND, CompletionStatus.SUCCESS, 4)]
