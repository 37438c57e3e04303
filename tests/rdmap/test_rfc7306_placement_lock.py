"""RFC 7306 §5: every placement into a region with REMOTE_ATOMIC happens
inside the lock of the Atomic Operations' read-modify-write
(``MemoryRegistry.atomic_lock``), on every receive path of the core: RDMA
Write segments one by one (fast path and DDP's), runs of them in one batch,
Read Response segments into a sink, Sends into a receive buffer of such a
region. A placement into any other region never takes the lock.

The lock is replaced by a recorder that snapshots the memory when it is
taken and released: every change of the memory must lie inside a window
(snapshots unchanged from one release to the next take)."""

from __future__ import annotations

from array import array
from types import TracebackType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.mpa.runs import UlpduBatch
from iwarp.rdmap.memory import Access, MemoryRegistry, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import Completion, CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WriteWR

MULPDU = 120
SIZE = 512
ATOMIC = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
PLAIN = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


class Recorder:
    """Stands in for the registry's lock: the memory at each take and release."""

    def __init__(self, memory: bytearray) -> None:
        self.memory = memory
        self.windows: list[tuple[bytes, bytes]] = []
        self._taken: bytes | None = None

    def __enter__(self) -> None:
        assert self._taken is None, "the lock was taken twice"
        self._taken = bytes(self.memory)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._taken is not None
        self.windows.append((self._taken, bytes(self.memory)))
        self._taken = None

    def check(self, initial: bytes) -> None:
        """Every change of the memory since ``initial`` was made inside a window."""
        assert self._taken is None
        before = initial
        for taken, released in self.windows:
            assert taken == before, "the memory changed outside the lock"
            before = released
        assert bytes(self.memory) == before, "the memory changed outside the lock"


def payload(length: int, seed: int) -> bytes:
    return bytes((seed + 7 * i) % 255 + 1 for i in range(length))  # no zero octets


def receiver(access: Access) -> tuple[RdmapStream, ProtectionDomain, bytearray, int, Recorder]:
    registry = MemoryRegistry()
    memory = bytearray(SIZE)
    recorder = Recorder(memory)
    registry.atomic_lock = recorder  # type: ignore[assignment]
    pd = registry.alloc_pd()
    region = pd.register(memory, access, address=0x4000)
    stream = RdmapStream(pd, initiator=True, mulpdu=MULPDU)
    stream.take_events()
    return stream, pd, memory, region.stag, recorder


def sender_ulpdus(*wrs: WriteWR | SendWR) -> list[bytes]:
    sender = RdmapStream(MemoryRegistry().alloc_pd(), initiator=True, mulpdu=MULPDU)
    for wr in wrs:
        sender.post_send(wr)
    return [bytes(u) for u in sender.ulpdus_to_send()]


def as_batch(ulpdus: list[bytes]) -> UlpduBatch:
    """The ULPDUs in one buffer with their records, as the ``scan`` kernel gives them."""
    records = array("I")
    for ulpdu in ulpdus:
        records.extend((sum(len(u) for u in ulpdus[: len(records) // 2]), len(ulpdu)))
    return UlpduBatch([], memoryview(b"".join(ulpdus)), memoryview(records))


def deliver(stream: RdmapStream, ulpdus: list[bytes], how: str) -> list[object]:
    """Hand the ULPDUs to the stream: one by one, the fast paths off, or batched."""
    if how == "full":
        stream._place_write = lambda view: False  # type: ignore[method-assign]
        stream._place_send = lambda view: False  # type: ignore[method-assign]
    if how == "batch":
        return list(stream.handle_batch(as_batch(ulpdus)))
    return [e for u in ulpdus for e in stream.handle_ulpdu(memoryview(u))]


HOW = st.sampled_from(["single", "full", "batch"])


@settings(max_examples=60, deadline=None)
@given(
    how=HOW,
    atomic=st.booleans(),
    writes=st.lists(st.tuples(st.integers(0, SIZE - 1), st.integers(1, SIZE)), max_size=4),
)
def test_writes_into_an_atomic_region_are_placed_under_the_lock(
    how: str, atomic: bool, writes: list[tuple[int, int]]
) -> None:
    stream, _, memory, stag, recorder = receiver(ATOMIC if atomic else PLAIN)
    expected = bytearray(SIZE)
    wrs = []
    for seed, (offset, asked) in enumerate(writes):
        length = min(asked, SIZE - offset)
        data = payload(length, seed)
        expected[offset : offset + length] = data
        wrs.append(WriteWR(data, stag, 0x4000 + offset))
    events = deliver(stream, sender_ulpdus(*wrs), how)
    assert events == []
    assert memory == expected
    if atomic:
        recorder.check(bytes(SIZE))
        assert bool(recorder.windows) is bool(writes)
    else:
        assert recorder.windows == []


@pytest.mark.parametrize("how", ["single", "full", "batch"])
@pytest.mark.parametrize("atomic", [True, False])
def test_sends_into_a_receive_buffer_of_an_atomic_region_are_placed_under_the_lock(
    how: str, atomic: bool
) -> None:
    stream, pd, memory, _, recorder = receiver(ATOMIC if atomic else PLAIN)
    region = pd.registry.lookup(next(iter(pd.registry._regions)))
    assert region is not None
    stream.post_recv(RecvWR(Sge(region, 8, 300), wr_id=1))
    stream.post_recv(RecvWR(Sge(region, 320, 100), wr_id=2))
    first, second = payload(300, 1), payload(40, 2)
    events = deliver(stream, sender_ulpdus(SendWR(first), SendWR(second)), how)
    assert [(e.wr_id, e.status, e.byte_len) for e in events if isinstance(e, Completion)] == [
        (1, CompletionStatus.SUCCESS, 300),
        (2, CompletionStatus.SUCCESS, 40),
    ]
    assert memory[8:308] == first and memory[320:360] == second
    if atomic:
        recorder.check(bytes(SIZE))
    assert bool(recorder.windows) is atomic
    # The small-message lane does not take a guarded head buffer.
    stream.post_recv(RecvWR(Sge(region, 400, 100), wr_id=3))
    assert (stream.send_target() is None) is atomic


@pytest.mark.parametrize("atomic", [True, False])
def test_read_responses_into_an_atomic_sink_are_placed_under_the_lock(atomic: bool) -> None:
    requester, pd, memory, _, recorder = receiver(ATOMIC if atomic else PLAIN)
    sink = pd.registry.lookup(next(iter(pd.registry._regions)))
    assert sink is not None
    responder_pd = MemoryRegistry().alloc_pd()
    data = payload(400, 3)
    source = responder_pd.register(bytearray(data), Access.REMOTE_READ)
    responder = RdmapStream(responder_pd, initiator=False, mulpdu=MULPDU, ird=4, ord=4)
    requester.post_send(ReadWR(Sge(sink, 100, 400), source.stag, 0, wr_id=9))
    events: list[object] = []
    for _ in range(10):  # a Read Request, then its Read Response segments
        for u in requester.ulpdus_to_send():
            responder.handle_ulpdu(bytes(u))
        for u in responder.ulpdus_to_send():
            events.extend(requester.handle_ulpdu(bytes(u)))
    done = [e for e in events if isinstance(e, Completion)]
    assert [(e.wr_id, e.status) for e in done] == [(9, CompletionStatus.SUCCESS)]
    assert memory[100:500] == data
    if atomic:
        recorder.check(bytes(SIZE))
    assert len(recorder.windows) == (4 if atomic else 0)  # 400 octets, 106 a segment


def test_a_deregistered_atomic_region_leaves_the_set() -> None:
    registry = MemoryRegistry()
    pd = registry.alloc_pd()
    plain = pd.register(bytearray(8), PLAIN)
    atomic = pd.register(bytearray(8), ATOMIC)
    assert registry.atomic_stags == {atomic.stag}
    assert plain.stag not in registry.atomic_stags
    atomic.deregister()
    assert registry.atomic_stags == set()
