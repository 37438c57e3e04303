"""The receiving stream's fast paths (RDMA Write segments, Send segments
before the last) do exactly what the full path does: same placement, same
events, same Terminate, for valid messages and with any field changed."""

from __future__ import annotations

import struct

from hypothesis import example, given, settings
from hypothesis import strategies as st

from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control
from iwarp.rdmap.work import RecvWR, SendWR, Sge, WriteWR

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
        stream._place_send_middle = lambda view: False  # type: ignore[method-assign]
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


def test_send_segments_before_the_last_take_the_fast_path() -> None:
    stream, memory, _ = receiver(fast=True, receive_into=SIZE)
    placed = []
    fast = stream._place_send_middle

    def counting(view: memoryview) -> bool:
        placed.append(fast(view))
        return placed[-1]

    stream._place_send_middle = counting  # type: ignore[method-assign]
    segments = write_segments(0, SIZE, 0, send=True)
    events = [e for seg in segments for e in stream.handle_ulpdu(memoryview(bytes(seg)))]
    assert placed == [True] * (len(segments) - 2) + [False, False]  # the last ones complete
    assert [e.wr_id for e in events] == [6, 7]  # type: ignore[union-attr]
    assert memory[:SIZE] == (bytes(range(1, 256)) * 3)[:SIZE]
