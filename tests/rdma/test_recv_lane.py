"""The receive lane (iwarp.rdma.lanes.ReceiveLane, the C kernel recv_lane)
against the usual receive path: the same stream, given to one receiver by
``receive_data`` in chunks and to an identical one through a socket and
``ReceiveLane.pump`` in the same chunks, must give the same events,
completions, messages, Terminates, answers on the wire and memory
contents, and nothing may be written outside a region (each sits between
guard octets that must stay zero).

Random mixes of RDMA Writes (in and out of their region, to unknown STags,
to regions without the right, to regions invalidated meanwhile), Sends
(plain, with Solicited Event or Invalidate, too long for the buffer) and
RDMA Reads, at random MTUs, with markers and CRC on or off, chunkings and
corrupted octets. The lane needs the C accelerator: on the pure path
(``IWARP_NO_ACCEL=1``) or with ``IWARP_NO_LANES=1`` there is none and
these tests are skipped (the drivers then read as before).
"""

from __future__ import annotations

import itertools
import socket
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.rdma import lanes
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.events import CompletionQueued, Ended
from iwarp.rdma.lanes import RING_MIN, ReceiveLane, RingOwner
from iwarp.rdma.port import LanePort
from iwarp.rdmap.memory import Access, MemoryRegion, MemoryRegistry
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR

pytestmark = pytest.mark.skipif(not lanes.ACTIVE, reason="the receive lane needs the C kernels")

GUARD = 16
REGION = 3000
BUFFER = 2500
POSTED = 6

Op = tuple[str, int, int, bool]

ops = st.tuples(
    st.sampled_from(
        ["write", "write", "write", "send", "send", "read", "invalidate", "unknown", "readonly"]
    ),
    # size: over the region or buffer is an error; the edges most of all
    st.one_of(
        st.integers(0, REGION + 200),
        st.sampled_from([1, BUFFER - 1, BUFFER, BUFFER + 1, BUFFER + 4, REGION, REGION + 1]),
    ),
    st.integers(0, 3),  # which region (and edge); 3: a Send with Invalidate
    st.booleans(),  # solicited; a Write at an edge
)


class World:
    """A receiver R (the initiator, which may send at once: its Read
    Requests) and a sender S; R's memory: regions between guards and
    posted receive buffers."""

    def __init__(self, config: MpaConfig | None, emss: int) -> None:
        registry = MemoryRegistry()
        self.r = QueuePairEndpoint(Role.INITIATOR, registry.alloc_pd(), config)
        self.s = QueuePairEndpoint(Role.RESPONDER, registry.alloc_pd(), config)
        self.r.set_emss(emss)
        self.s.set_emss(emss)
        self.events: list[Any] = []
        self._pump()
        self.memory = bytearray(4 * (REGION + GUARD) + GUARD)
        self.regions: list[MemoryRegion] = []
        for k in range(3):
            at = GUARD + k * (REGION + GUARD)
            self.regions.append(
                self.r.pd.register(
                    memoryview(self.memory)[at : at + REGION],
                    Access.LOCAL_WRITE | Access.REMOTE_WRITE,
                    address=0x1000 * k,
                )
            )
        at = GUARD + 3 * (REGION + GUARD)
        self.readonly = self.r.pd.register(
            memoryview(self.memory)[at : at + REGION], Access.LOCAL_WRITE | Access.REMOTE_READ
        )
        self.buffers = bytearray(POSTED * (BUFFER + GUARD) + GUARD)
        for k in range(POSTED):
            at = GUARD + k * (BUFFER + GUARD)
            region = self.r.pd.register(memoryview(self.buffers)[at : at + BUFFER])
            self.r.post_recv(RecvWR(Sge(region), wr_id=100 + k))
        self.source = self.s.pd.register(bytes(range(256)) * 16, Access.REMOTE_READ)

    def _pump(self) -> None:
        for _ in range(100):
            moved = False
            for src, dst in ((self.r, self.s), (self.s, self.r)):
                src.take_events()
                data = b"".join(bytes(c) for c in src.data_to_send(None))
                if data:
                    moved = True
                    dst.receive_data(data, 0.0)
            if not moved:
                return
        raise AssertionError("did not settle")

    def script(self, script: list[Op]) -> tuple[bytes, list[tuple[int, Any]]]:
        """Post the script: R's Reads (and a first Send that ends S's hold),
        S's Writes and Sends. Returns S's wire octets and R's local
        actions, each with the wire offset before which it happens."""
        r, s = self.r, self.s
        actions: list[tuple[int, Any]] = []
        r.post_send(SendWR(b"go", wr_id=1))
        for number, (op, size, which, _) in enumerate(script):
            if op == "read":
                sink = self.regions[which % 3]
                r.post_send(
                    ReadWR(Sge(sink, 0, min(size, REGION)), self.source.stag, 0, wr_id=10 + number)
                )
        s.post_recv(RecvWR(Sge(s.pd.register(bytearray(8))), wr_id=1))
        s.receive_data(b"".join(bytes(c) for c in r.data_to_send(None)), 0.0)
        s.take_events()
        wire = bytearray()
        for number, (op, size, which, flag) in enumerate(script):
            data = bytes([number + 1]) * size
            try:
                if op == "write":
                    # in the region; with flag at its end, one octet over it, or half over
                    region = self.regions[which % 3]
                    edge = [REGION - size, REGION - size + 1, REGION - size // 2][which % 3]
                    to = region.address + max(0, edge if flag else (size * 16) % 64)
                    s.post_send(WriteWR(data, region.stag, to, wr_id=number))
                elif op == "unknown":
                    s.post_send(WriteWR(data, 0xDEAD00, 0, wr_id=number))
                elif op == "readonly":
                    s.post_send(WriteWR(data, self.readonly.stag, 0, wr_id=number))
                elif op == "send":
                    invalidate = self.regions[which % 3].stag if which == 3 else None
                    s.post_send(
                        SendWR(
                            data,
                            wr_id=number,
                            solicited=flag,
                            invalidate_stag=invalidate,
                        )
                    )
                elif op == "invalidate":
                    actions.append((len(wire) + size, which % 3))
            except IwarpError as exc:
                actions.append((len(wire), repr(exc)))
            wire += b"".join(bytes(c) for c in s.data_to_send(None))
            s.take_events()
        wire += b"".join(bytes(c) for c in s.data_to_send(None))
        return bytes(wire), actions

    #: Leave the cause out of the end: with a corrupted octet two errors
    #: may meet, and which one an end reports depends on the reads (below).
    vague_end = False

    def seen(self, events: list[Any]) -> list[str]:
        r = self.r
        return [
            f"CompletionQueued({'send' if e.queue is r.send_cq else 'recv'})"
            if isinstance(e, CompletionQueued)
            else "Ended"
            if isinstance(e, Ended) and self.vague_end
            else repr(e)
            for e in events
        ]

    def outcome(self) -> list[Any]:
        r = self.r
        out: list[Any] = [b"".join(bytes(c) for c in r.data_to_send(None))]
        out += self.seen(r.take_events())
        out.append([repr(c) for c in r.recv_cq.poll()])
        out.append([repr(c) for c in r.send_cq.poll()])
        if not self.vague_end:
            out.append((repr(r.error), r.end_reason))
        out.append(bytes(self.memory))
        out.append(bytes(self.buffers))
        out.append([region.valid for region in self.regions])
        for k in range(5):
            at = k * (REGION + GUARD)
            assert self.memory[at : at + GUARD] == bytes(GUARD), "written outside a region"
        for k in range(POSTED + 1):
            at = k * (BUFFER + GUARD)
            assert self.buffers[at : at + GUARD] == bytes(GUARD), "written outside a buffer"
        return out


def _flipped(wire: bytes, flip: int | None) -> bytes:
    """``wire`` with one octet changed (None: as it is)."""
    if flip is None or not wire:
        return wire
    changed = bytearray(wire)
    changed[flip % len(wire)] ^= 0x5A
    return bytes(changed)


def _port(endpoint: QueuePairEndpoint) -> LanePort:
    """The endpoint's lanes' port (the core half a ring serves)."""
    assert isinstance(endpoint.lanes, LanePort)
    return endpoint.lanes


class CountingLane(ReceiveLane):
    """Counts the octets the lane took itself (checked and placed)."""

    __slots__ = ("placed",)

    def __init__(self, owner: RingOwner, size: int) -> None:
        super().__init__(owner, size)
        self.placed = 0

    def walk(self, *args: Any) -> Any:
        result = super().walk(*args)
        self.placed += result[1]
        return result


def _cuts(wire: bytes, sizes: list[int], actions: list[tuple[int, Any]]) -> list[tuple[int, int]]:
    """The chunks: ``sizes`` over and over (none: the whole), also cut
    where a local action happens."""
    points = {at for at, _ in actions if 0 < at < len(wire)}
    at = k = 0
    while at < len(wire):
        at += sizes[k % len(sizes)] if sizes else len(wire)
        points.add(min(at, len(wire)))
        k += 1
    bounds = [0, *sorted(points)]
    return list(itertools.pairwise(bounds))


def _apply(world: World, actions: list[tuple[int, Any]], upto: int, done: set[int]) -> list[Any]:
    log: list[Any] = []
    for index, (at, what) in enumerate(actions):
        if index in done or at > upto:
            continue
        done.add(index)
        if isinstance(what, int):
            world.regions[what].invalidate()
        else:
            log.append(what)
    return log


def _usual(
    config: MpaConfig | None, emss: int, script: list[Op], sizes: list[int], flip: int | None
) -> list[Any]:
    world = World(config, emss)
    world.vague_end = flip is not None
    wire, actions = world.script(script)
    wire = _flipped(wire, flip)
    log: list[Any] = []
    done: set[int] = set()
    for start, stop in _cuts(wire, sizes, actions):
        log += _apply(world, actions, start, done)
        log += world.seen(world.r.receive_data(wire[start:stop], 0.0))
    return [log, *world.outcome()]


def _lane(
    config: MpaConfig | None,
    emss: int,
    script: list[Op],
    sizes: list[int],
    flip: int | None,
    ring: int = RING_MIN,
) -> tuple[list[Any], int]:
    """The same through a socket pair and the receive lane; also how many
    octets the lane placed itself (records)."""
    world = World(config, emss)
    world.vague_end = flip is not None
    wire, actions = world.script(script)
    wire = _flipped(wire, flip)
    lane = CountingLane(_port(world.r), ring)
    tx, rx = socket.socketpair()
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    rx.setblocking(False)
    log: list[Any] = []
    done: set[int] = set()
    try:
        for start, stop in _cuts(wire, sizes, actions):
            log += _apply(world, actions, start, done)
            tx.sendall(wire[start:stop])
            got = 0
            while got < stop - start:
                log += world.seen(lane.pump(rx.fileno(), 0.0))
                got += lane.got
            assert lane.got == 0 or not lane.eof
    finally:
        tx.close()
        rx.close()
    return [log, *world.outcome()], lane.placed


configs = st.sampled_from(
    [None, None, MpaConfig(crc=False), MpaConfig(markers=True), MpaConfig(markers=True, crc=False)]
)
emsses = st.sampled_from([120, 536, 1448, 9000, 65483])


@settings(max_examples=150, deadline=None)
@given(
    script=st.lists(ops, min_size=1, max_size=8),
    config=configs,
    emss=emsses,
    sizes=st.lists(st.integers(1, 9000), max_size=5),
    flip=st.one_of(st.none(), st.none(), st.integers(0, 1 << 20)),
)
def test_the_lane_equals_the_usual_path(
    script: list[Op], config: MpaConfig | None, emss: int, sizes: list[int], flip: int | None
) -> None:
    """Same events, completions, Terminates, answers and memory, nothing
    outside a region, whatever the mix, MTU, markers, CRC, chunking and
    corruption.

    With a corrupted octet the cause an ``Ended`` event names is left out:
    when an FPDU that the RDMAP stream refuses (its Terminate is decided)
    and the corrupted one after it arrive in one read, the usual path
    itself names the MPA error as the end's cause, and the stream's error
    when they arrive in two reads (the Terminate on the wire is the same);
    the lane hands FPDUs over at other points than the reads."""
    lane, _ = _lane(config, emss, script, sizes, flip)
    assert lane == _usual(config, emss, script, sizes, flip)


def test_the_lane_places_writes_sends_and_reads() -> None:
    """Not vacuous: the lane itself takes the stream of Writes, Sends and
    Read Responses, markers on or off, in any chunking, into a 64 KiB
    ring."""
    script: list[Op] = [
        ("read", 2000, 0, False),
        ("write", 2900, 1, False),
        ("send", 2400, 0, True),
        ("write", 1000, 2, False),
        ("send", 100, 1, False),
    ]
    for config in (None, MpaConfig(markers=True)):
        for sizes in ([], [1], [3, 700], [5000]):
            lane, placed = _lane(config, 536, script, sizes, None)
            assert lane == _usual(config, 536, script, sizes, None)
            world = World(config, 536)
            wire, _ = world.script(script)
            assert placed > len(wire) * 0.9, (config, sizes)


def test_a_ring_smaller_than_the_stream_reads_again() -> None:
    """More octets in the socket than the ring holds: each call reads what
    fits (``filled``), the next one goes on."""
    script: list[Op] = [("write", 2900, k % 3, False) for k in range(40)]
    lane, placed = _lane(None, 9000, script, [], None)
    assert lane == _usual(None, 9000, script, [], None)
    assert placed > 100_000


def test_an_invalidated_region_is_not_placed_into() -> None:
    """A region invalidated after the lane published its window: the next
    Write to it is refused as the usual path refuses it (a Terminate), and
    the region keeps what it had."""
    script: list[Op] = [
        ("write", 1000, 0, False),
        ("invalidate", 0, 0, False),
        ("write", 1000, 0, False),
    ]
    lane, _ = _lane(None, 1448, script, [], None)
    usual = _usual(None, 1448, script, [], None)
    assert lane == usual
    assert "Terminate" in repr(usual) or "INVALID_STAG" in repr(usual)


def test_the_ring_is_at_least_one_fpdu() -> None:
    with pytest.raises(ValueError, match="at least"):
        ReceiveLane(_port(World(None, 1448).r), RING_MIN - 1)


@pytest.mark.parametrize("emss", [536, 1448, 9000])
@pytest.mark.parametrize(
    "op",
    [("send", n, 0, False) for n in (BUFFER - 1, BUFFER, BUFFER + 1, BUFFER + 8)]
    + [("write", n, which, True) for n in (1, 1000, REGION) for which in (0, 1, 2)],
)
def test_the_edges_of_a_window(emss: int, op: Op) -> None:
    """A Send that fills its buffer exactly or overruns it by an octet or
    a few; Writes that end at their region's end, one octet over it, or
    half over: placed, or refused with the usual path's Terminate, and
    nothing written outside (the guards)."""
    script: list[Op] = [("write", 10, 0, False), op, ("send", 10, 0, False)]
    lane, _ = _lane(None, emss, script, [], None)
    assert lane == _usual(None, emss, script, [], None)


@pytest.mark.parametrize("cut", [1, 7, 100, 1500])
def test_the_peer_closes_inside_an_fpdu(cut: int) -> None:
    """The stream ends inside an FPDU: the lane reports the end only after
    the usual path has every octet before it (the partial FPDU too), so
    the FIN that follows gives the usual path's events."""
    script: list[Op] = [("write", 1000, 0, False), ("send", 2000, 0, False)]
    usual = World(None, 1448)
    wire, _ = usual.script(script)
    wire = wire[: len(wire) - cut]
    events = usual.seen(usual.r.receive_data(wire, 0.0))
    events += usual.seen(usual.r.receive_data(b"", 0.0))
    world = World(None, 1448)
    world.script(script)
    lane = ReceiveLane(_port(world.r), RING_MIN)
    tx, rx = socket.socketpair()
    rx.setblocking(False)
    tx.sendall(wire)
    tx.close()
    seen: list[Any] = []
    try:
        while not lane.eof:
            seen += world.seen(lane.pump(rx.fileno(), 0.0))
        assert lane.held == 0
        seen += world.seen(world.r.receive_data(b"", 0.0))
    finally:
        rx.close()
    assert seen == events
    assert world.outcome() == usual.outcome()


def test_memory_of_atomic_operations_is_left_to_the_usual_path() -> None:
    """RFC 7306 §5: placements into a region with REMOTE_ATOMIC hold the
    Atomic Operations' lock, which the usual path takes: the lane places
    no Write, Read Response or Send into such memory (and gives the same
    outcome)."""

    def run(by_lane: bool) -> tuple[list[Any], int]:
        world = World(None, 1448)
        r, s = world.r, world.s
        atomic = r.pd.register(bytearray(4096), Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
        inbox = r.pd.register(bytearray(4096), Access.LOCAL_WRITE | Access.REMOTE_ATOMIC)
        for _ in range(POSTED):  # the other buffers are taken first: drain them
            r.conn.stream._recv.buffers.popleft()  # type: ignore[union-attr]
        r.post_recv(RecvWR(Sge(inbox), wr_id=7))
        wire, _ = world.script([])
        s.post_send(WriteWR(b"w" * 3000, atomic.stag, 0, wr_id=1))
        s.post_send(SendWR(b"s" * 2000, wr_id=2))
        wire += b"".join(bytes(c) for c in s.data_to_send(None))
        lane = CountingLane(_port(r), RING_MIN)
        events: list[Any] = []
        if by_lane:
            tx, rx = socket.socketpair()
            rx.setblocking(False)
            tx.sendall(wire)
            events += world.seen(lane.pump(rx.fileno(), 0.0))
            tx.close()
            rx.close()
        else:
            events += world.seen(r.receive_data(wire, 0.0))
        return [events, bytes(atomic.view), bytes(inbox.view), *world.outcome()], lane.placed

    lane, placed = run(True)
    assert lane == run(False)[0]
    assert placed < 100  # "go"'s answer at most: not the 5000 octets
    assert lane[1] == b"w" * 3000 + bytes(1096) and lane[2][:2000] == b"s" * 2000
