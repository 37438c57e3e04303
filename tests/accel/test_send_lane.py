"""The C send lane against the pure-Python framing: the same octets on the wire.

``send_lane`` writes a run of DDP segments as FPDUs with ``sendmsg`` from the
caller's buffer (iovecs into it), or framed into one contiguous buffer per
batch (``contiguous``: small FPDUs, markers); whatever the split of the
writes (a call's ``limit``, a full socket), the octets read at the other end
must be exactly those ``FpduEncoder.encode`` gives ULPDU by ULPDU, and the
stream position and marker phase afterwards the same.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import LAST_FLAG
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.runs import SegmentRun
from iwarp.mpa.wire import MAX_ULPDU
from iwarp.rdma import lanes
from iwarp.rdma.lanes import LaneState, SendLane

pytestmark = pytest.mark.skipif(not lanes.ACTIVE, reason="the C accelerator is not active")


def expected(run: SegmentRun, markers: bool, crc: bool, phase: int) -> tuple[bytes, int, int]:
    """The run's FPDUs framed ULPDU by ULPDU (the pure definition), the
    encoder's position and phase afterwards."""
    encoder = FpduEncoder(markers=markers, crc=crc, origin=0, position=phase, max_ulpdu=MAX_ULPDU)
    out = bytearray()
    for ulpdu in run.ulpdus():
        for piece in encoder.encode(ulpdu):
            out += piece
    return bytes(out), encoder.position, encoder.phase


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the peer closed"
        out += chunk
    return bytes(out)


@st.composite
def runs(draw: st.DrawFn) -> SegmentRun:
    tagged = draw(st.booleans())
    hlen, field_at, field_size = (14, 6, 8) if tagged else (18, 14, 4)
    header = draw(st.binary(min_size=hlen, max_size=hlen))
    size = draw(st.integers(0, 12_000))
    payload = memoryview(os.urandom(size))
    room = draw(st.one_of(st.integers(1, 700), st.integers(1, MAX_ULPDU - hlen)))
    start = draw(st.integers(0, size))
    stop = draw(st.integers(start, size))
    base = draw(st.integers(0, (2**64 if tagged else 2**32) - 1 - size))
    return SegmentRun(header, payload, start, stop, room, field_at, field_size, base, LAST_FLAG)


phases = st.integers(0, 127).map(lambda k: 4 * k)


@settings(max_examples=150, deadline=None)
@given(
    run=runs(),
    markers=st.booleans(),
    crc=st.booleans(),
    phase=phases,
    splits=st.lists(st.integers(1, 3000), max_size=6),
    contiguous=st.booleans(),
)
def test_the_wire_octets_are_the_framings_at_any_split(
    run: SegmentRun, markers: bool, crc: bool, phase: int, splits: list[int], contiguous: bool
) -> None:
    wire, position, end_phase = expected(run, markers, crc, phase)
    lane = SendLane(run, markers=markers, crc=crc, phase=phase, contiguous=contiguous)
    assert lane.total == len(wire) == (position - phase) & 0xFFFFFFFF
    if markers:
        assert lane.end_phase == end_phase
    a, b = socket.socketpair()
    with a, b:
        got = bytearray()
        for limit in splits:
            before = lane.sent
            state = lane.pump(a.fileno(), limit=limit)
            got += read_exactly(b, lane.sent - before)
            if lane.done:
                assert state is LaneState.DONE
                break
            assert state is LaneState.FULL
            assert lane.sent - before == limit
        while not lane.done:  # the rest, as far as the socket takes it each time
            before = lane.sent
            state = lane.pump(a.fileno())
            got += read_exactly(b, lane.sent - before)
            assert (state is LaneState.DONE) == lane.done
        assert bytes(got) == wire


def test_every_split_point_of_a_small_message_with_markers() -> None:
    payload = memoryview(os.urandom(1500))
    run = SegmentRun(bytes(range(18)), payload, 0, 1500, 500, 14, 4, 0, LAST_FLAG)
    for markers, contiguous in ((False, False), (True, False), (False, True), (True, True)):
        wire, _, _ = expected(run, markers, True, 504)
        for split in range(1, len(wire)):
            lane = SendLane(run, markers=markers, crc=True, phase=504, contiguous=contiguous)
            a, b = socket.socketpair()
            with a, b:
                assert lane.pump(a.fileno(), limit=split) is LaneState.FULL
                assert lane.pump(a.fileno()) is LaneState.DONE
                assert read_exactly(b, len(wire)) == wire


@pytest.mark.parametrize("contiguous", [False, True])
def test_a_full_socket_is_resumed_where_the_kernel_stopped(contiguous: bool) -> None:
    size = 3 << 20
    payload = memoryview(os.urandom(size))
    run = SegmentRun(bytes(14), payload, 0, size, 1440, 6, 8, 7, LAST_FLAG)
    wire, _, _ = expected(run, True, True, 0)
    lane = SendLane(run, markers=True, crc=True, phase=0, contiguous=contiguous)
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        got = bytearray()
        fulls = 0
        while not lane.done:
            before = lane.sent
            state = lane.pump(a.fileno())
            if state is LaneState.FULL:
                fulls += 1
            got += read_exactly(b, lane.sent - before)
        assert fulls > 1  # the socket filled, and the lane went on where it stopped
        assert bytes(got) == wire


def test_a_blocking_pump_waits_for_room_until_done() -> None:
    size = 8 << 20
    payload = memoryview(os.urandom(size))
    run = SegmentRun(bytes(18), payload, 0, size, 9000, 14, 4, 0, LAST_FLAG)
    lane = SendLane(run, markers=False, crc=True, phase=0)
    a, b = socket.socketpair()
    got = bytearray()

    def reader() -> None:
        got.extend(read_exactly(b, lane.total))

    with a, b:
        thread = threading.Thread(target=reader)
        thread.start()
        assert lane.pump(a.fileno(), wait_ms=-1) is LaneState.DONE
        thread.join()
    assert bytes(got) == expected(run, False, True, 0)[0]


def test_a_waiting_pump_returns_for_input_and_when_its_time_is_up() -> None:
    size = 8 << 20
    run = SegmentRun(bytes(18), memoryview(bytes(size)), 0, size, 9000, 14, 4, 0, LAST_FLAG)
    lane = SendLane(run, markers=False, crc=False, phase=0)
    a, b = socket.socketpair()
    with a, b:
        # Nobody reads: the wait runs out (no input), with some octets taken.
        assert lane.pump(a.fileno(), wait_ms=20, watch_input=True) is LaneState.FULL
        assert 0 < lane.sent < lane.total
        b.send(b"x")
        assert lane.pump(a.fileno(), wait_ms=-1, watch_input=True) is LaneState.INPUT


def test_a_failed_connection_raises_oserror() -> None:
    run = SegmentRun(bytes(18), memoryview(bytes(100_000)), 0, 100_000, 1000, 14, 4, 0, 0x40)
    lane = SendLane(run, markers=False, crc=True, phase=0)
    a, b = socket.socketpair()
    b.close()
    with a, pytest.raises(OSError):
        lane.pump(a.fileno())


@pytest.mark.parametrize(
    "change",
    [
        {"field_at": 15},  # the field reaches past the header
        {"field_at": 2**62},  # field_at + field_size would wrap
        {"field_size": 0},
        {"field_size": 9},
        {"room": 0},
        {"room": 0xFFFF},  # header + room above 65535
        {"start": 5, "stop": 4},
        {"stop": 101},
        {"header": bytes(33)},
        {"last_mask": 256},
    ],
)
def test_inconsistent_runs_are_refused(change: dict[str, Any]) -> None:
    run = SegmentRun(bytes(18), memoryview(bytes(100)), 0, 100, 40, 14, 4, 0, LAST_FLAG)
    with pytest.raises(ValueError, match="inconsistent"):
        SendLane(run._replace(**change), markers=False, crc=True, phase=0)


@pytest.mark.parametrize(
    ("phase", "skip", "limit", "fd"),
    [(2, 0, 0, -1), (512, 0, 0, -1), (0, -1, 0, -1), (0, 0, -2, -1), (0, 0, 5, -1)],
)
def test_inconsistent_cursors_are_refused(phase: int, skip: int, limit: int, fd: int) -> None:
    kernels = lanes.lane_kernels()
    with pytest.raises(ValueError, match="inconsistent"):
        kernels.send_lane(
            fd,
            bytes(18),
            bytes(10),
            0,
            10,
            4,
            14,
            4,
            0,
            0,
            False,
            True,
            phase,
            skip,
            limit,
            0,
            False,
        )


@pytest.mark.parametrize("fd", [2**31, -(2**31) - 1, 2**64])
def test_a_descriptor_beyond_a_c_int_is_refused(fd: int) -> None:
    """The socket number is a C int: beyond it, OverflowError (never a
    truncated descriptor that names another file)."""
    kernels = lanes.lane_kernels()
    with pytest.raises(OverflowError):
        kernels.send_lane(
            fd, bytes(18), bytes(10), 0, 10, 4, 14, 4, 0, 0, False, True, 0, 0, 0, 0, False
        )


def test_a_skip_past_the_end_is_refused() -> None:
    kernels = lanes.lane_kernels()
    with pytest.raises(ValueError, match="past"):
        kernels.send_lane(
            -1, bytes(18), bytes(10), 0, 10, 4, 14, 4, 0, 0, False, True, 0, 10_000, 0, 0, False
        )


@settings(max_examples=60, deadline=None)
@given(
    run=runs(),
    markers=st.booleans(),
    phase=phases,
    sizes=st.lists(st.integers(1, 5000)),
    contiguous=st.booleans(),
)
def test_copied_pieces_are_the_wire_octets(
    run: SegmentRun, markers: bool, phase: int, sizes: list[int], contiguous: bool
) -> None:
    """The copy mode (what the asyncio driver hands its transport when the
    socket is full) gives the same octets, in pieces of any size, and
    resumes where a socket write left off."""
    wire, _, _ = expected(run, markers, True, phase)
    lane = SendLane(run, markers=markers, crc=True, phase=phase, contiguous=contiguous)
    got = bytearray()
    a, b = socket.socketpair()
    with a, b:
        for size in sizes:
            if lane.done:
                break
            out = bytearray(size)
            n = lane.copy(out)
            assert n == min(size, len(wire) - len(got))
            got += out[:n]
            before = lane.sent  # and a little by socket between the copies
            lane.pump(a.fileno(), limit=3)
            got += read_exactly(b, lane.sent - before)
        while not lane.done:
            out = bytearray(4096)
            got += out[: lane.copy(out)]
    assert bytes(got) == wire


def test_a_copy_into_the_message_itself_is_refused() -> None:
    buffer = bytearray(50_000)
    run = SegmentRun(bytes(18), memoryview(buffer)[:40_000], 0, 40_000, 1000, 14, 4, 0, LAST_FLAG)
    lane = SendLane(run, markers=False, crc=True, phase=0)
    with pytest.raises(ValueError, match="overlaps"):
        lane.copy(memoryview(buffer)[39_000:])
    assert lane.sent == 0
    assert lane.copy(bytearray(100)) == 100


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("room", [1, 700, 1440, 9000, MAX_ULPDU - 14])
def test_a_contiguous_lane_frames_the_largest_fpdus_and_many_small_ones(
    markers: bool, room: int
) -> None:
    """Contiguous batches hold one FPDU of the largest size (with markers:
    the scratch's reserve beyond its 64 KiB batch) and thousands of tiny
    ones; every octet as the framing's, in one call or in pieces."""
    size = 200_000 if room > 1 else 3000
    run = SegmentRun(bytes(range(14)), memoryview(os.urandom(size)), 0, size, room, 6, 8, 3, 0x40)
    wire, _, _ = expected(run, markers, True, 8)
    whole = bytearray(len(wire))
    lane = SendLane(run, markers=markers, crc=True, phase=8, contiguous=True)
    assert lane.copy(whole) == len(wire)
    assert whole == wire
    lane = SendLane(run, markers=markers, crc=True, phase=8, contiguous=True)
    got = bytearray()
    while not lane.done:
        out = bytearray(70_001)
        got += out[: lane.copy(out)]
    assert got == wire
