"""The receive lane's kernel (``recv_lane``, src/iwarp/_lanes.c) called
directly: what it places and records for hand-made FPDUs, where it stops,
and its refusals; bounds at the edges of the TO space and of a window,
compared without an addition that could wrap (no octet outside a window:
each sits between guard octets)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from iwarp.mpa.framing import FpduEncoder
from iwarp.rdma import lanes

pytestmark = pytest.mark.skipif(not lanes.ACTIVE, reason="the receive lane needs the C kernels")

WRITE, READ, SEND, SEND_SE = 0x40, 0x41, 0x43, 0x45
GUARD = 8


class Posted:
    def __init__(self, view: Any) -> None:
        self.view = view


def tagged(stag: int, to: int, payload: bytes, last: bool = True, ctl: int = WRITE) -> bytes:
    return struct.pack(">BBIQ", 0x81 | (0x40 if last else 0), ctl, stag, to) + payload


def send(msn: int, mo: int, payload: bytes, last: bool = True, ctl: int = SEND) -> bytes:
    return struct.pack(">BBIIII", 0x01 | (0x40 if last else 0), ctl, 0, 0, msn, mo) + payload


def ring_of(*ulpdus: bytes, crc: bool = True) -> bytearray:
    encoder = FpduEncoder(crc=crc)
    return bytearray(b"".join(bytes(p) for u in ulpdus for p in encoder.encode(u)))


def guarded(size: int) -> tuple[bytearray, memoryview]:
    memory = bytearray(size + 2 * GUARD)
    return memory, memoryview(memory)[GUARD : GUARD + size]


def call(ring: bytearray, **kw: Any) -> tuple[int, int, int, int, list[Any], int]:
    """The kernel's first six results (the last two: see test_took_and_got)."""
    args: dict[str, Any] = {
        "start": 0,
        "end": len(ring),
        "crc": True,
        "limit": 0xFFFF,
        "version": 1,
        "tagged": None,
        "write_ctl": WRITE,
        "writes": {},
        "read_ctl": READ,
        "reads": (),
        "send_ok": False,
        "send_ctl": SEND,
        "send_se_ctl": SEND_SE,
        "msn": 1,
        "received": 0,
        "sends": (),
    }
    args.update(kw)
    return lanes.lane_kernels().recv_lane(
        -1, ring, args["start"], args["end"], 0, args["crc"], args["limit"], args["version"],
        args["tagged"], args["write_ctl"], args["writes"], args["read_ctl"], args["reads"],
        args["send_ok"], args["send_ctl"], args["send_se_ctl"], args["msn"], args["received"],
        args["sends"],
    )[:6]  # fmt: skip


def test_writes_reads_and_sends_are_placed_and_recorded() -> None:
    memory, window = guarded(64)
    sink_memory, sink = guarded(16)
    buffers = [guarded(32) for _ in range(2)]
    ring = ring_of(
        tagged(7, 1000, b"a" * 10, last=False),
        tagged(7, 1010, b"b" * 6),
        tagged(9, 500, b"r" * 16, ctl=READ),
        send(3, 0, b"s" * 5, last=False),
        send(3, 5, b"t" * 3, ctl=SEND_SE),
        send(4, 0, b"u" * 2),
    )
    start, end, done, _, records, need = call(
        ring,
        writes={7: (window, 1000)},
        reads=((9, sink, 500, 0),),
        send_ok=True,
        msn=3,
        sends=[Posted(view) for _, view in buffers],
    )
    assert (start, end, done, need) == (len(ring), len(ring), len(ring), -1)
    assert records == [
        (1, 7, 1000, 16, 1),
        (2, 0, 500, 16, 1),
        (3, 0, 8, 1, 1),
        (3, 1, 2, 0, 1),
    ]
    assert bytes(window[:16]) == b"a" * 10 + b"b" * 6
    assert bytes(sink) == b"r" * 16
    assert bytes(buffers[0][1][:8]) == b"sssssttt" and bytes(buffers[1][1][:2]) == b"uu"
    for m in (memory, sink_memory, buffers[0][0], buffers[1][0]):
        assert m[:GUARD] == bytes(GUARD) and m[-GUARD:] == bytes(GUARD)


@pytest.mark.parametrize(
    ("base", "size", "to", "n", "placed"),
    [
        (0, 16, 0, 16, True),
        (0, 16, 1, 16, False),  # one octet over the end
        (100, 16, 99, 4, False),  # before the base
        (2**64 - 16, 16, 2**64 - 16, 16, True),  # the TO space's end
        (2**64 - 16, 16, 2**64 - 8, 16, False),  # would wrap 2**64
        (2**64 - 1, 1, 2**64 - 1, 1, True),
        (0, 16, 2**64 - 1, 2, False),
    ],
)
def test_a_write_lies_wholly_inside_its_window_or_stops_the_lane(
    base: int, size: int, to: int, n: int, placed: bool
) -> None:
    memory, window = guarded(size)
    ring = ring_of(tagged(5, to, b"x" * n))
    start, _, done, _, records, _ = call(ring, writes={5: (window, base)})
    assert (start == len(ring)) is placed
    assert bool(records) is placed
    assert done == len(ring)  # the rest is complete FPDUs: for the usual path
    assert memory[:GUARD] == bytes(GUARD) and memory[-GUARD:] == bytes(GUARD)
    assert bytes(window).count(b"x") == (n if placed else 0)


def test_it_stops_where_it_is_not_sure() -> None:
    _, window = guarded(64)
    good = tagged(5, 0, b"g" * 4)
    for bad, why in [
        (tagged(6, 0, b"x"), "an STag without a window"),
        (tagged(5, 0, b""), "a zero-length segment"),
        (struct.pack(">BBIIII", 0x41, 0x46, 0, 2, 1, 0), "a Terminate"),
        (send(1, 0, b"x", ctl=0x44), "a Send with Invalidate"),
        (bytes([0x82]) + tagged(5, 0, b"x")[1:], "another DDP version"),
    ]:
        ring = ring_of(good, bad, good)
        first = len(ring_of(good))
        start, _, done, _, records, need = call(ring, writes={5: (window, 0)})
        assert start == first and done == len(ring), why
        assert records == [(1, 5, 0, 4, 1)], why
        assert need == (6 if why.startswith("an STag") else -1), why


def test_crc_and_length_are_checked_and_a_partial_fpdu_waits() -> None:
    _, window = guarded(64)
    ring = ring_of(tagged(5, 0, b"a" * 8), tagged(5, 8, b"b" * 8))
    one = len(ring) // 2
    corrupt = bytearray(ring)
    corrupt[one + 20] ^= 1
    start, _, done, _, records, _ = call(corrupt, writes={5: (window, 0)})
    assert (start, done, len(records)) == (one, len(ring), 1)
    start, _, done, _, records, _ = call(ring, writes={5: (window, 0)}, limit=10)
    assert (start, done, records) == (0, len(ring), [])  # too long: all to the usual path
    start, end, done, _, records, _ = call(ring, end=len(ring) - 1, writes={5: (window, 0)})
    assert (start, end, done, len(records)) == (one, len(ring) - 1, one, 1)


def test_the_ring_is_compacted_only_when_room_runs_short() -> None:
    """What is held moves to the front when less room than the largest
    FPDU is left after it: ``took`` counts from the old start either way."""
    _, window = guarded(64)
    fpdu = ring_of(tagged(5, 0, b"z" * 8))
    for room, moved in ((0x10008, False), (0x10007, True)):
        ring = bytearray(b"\xee" * 10) + fpdu + bytearray(room)
        result = lanes.lane_kernels().recv_lane(
            -1, ring, 10, 10 + len(fpdu), 0, True, 0xFFFF, 1, None, WRITE, {5: (window, 0)},
            READ, (), False, SEND, SEND_SE, 1, 0, (),
        )  # fmt: skip
        start, end, done, _, records, need, took, got, phase = result
        shift = 10 if not moved else 0
        assert (start, end, done) == (shift + len(fpdu),) * 3, room
        assert (took, got, need, len(records), phase) == (len(fpdu), 0, -1, 1, 0)
        assert ring[shift : shift + len(fpdu)] == fpdu


@pytest.mark.parametrize(
    "bad",
    [
        {"start": -1},
        {"start": 5, "end": 4},
        {"end": 10**6},
        {"limit": 0x10000},
        {"version": 4},
        {"write_ctl": 256},
        {"send_ctl": -2},
        {"msn": 2**32},
        {"received": -1},
        {"tagged": (2**32, 0, 0)},
        {"tagged": "no"},
        {"writes": [1]},
    ],
)
def test_inconsistent_arguments_are_refused(bad: dict[str, Any]) -> None:
    ring = ring_of(tagged(5, 0, b"a"))
    with pytest.raises((ValueError, OverflowError, TypeError)):
        call(ring, **bad)


def test_windows_it_cannot_use_stop_it_without_an_error() -> None:
    ring = ring_of(tagged(5, 0, b"a" * 4), send(1, 0, b"b"))
    released = memoryview(bytearray(8))
    released.release()
    for writes in ({5: (b"read-only", 0)}, {5: (released, 0)}, {5: ("torn",)}):
        start, _, done, _, records, _ = call(ring, writes=writes)
        assert (start, records) == (0, []) and done == len(ring)
    start, _, _, _, records, _ = call(
        ring_of(send(1, 0, b"b")), send_ok=True, sends=[Posted(b"read-only")]
    )
    assert (start, records) == (0, [])
    start, _, _, _, records, _ = call(ring_of(send(1, 0, b"b")), send_ok=True, sends=[])
    assert (start, records) == (0, [])


def marked(*ulpdus: bytes, phase: int, crc: bool = True) -> tuple[bytearray, int]:
    """FPDUs with markers, the first at ``phase``; and the phase after."""
    encoder = FpduEncoder(crc=crc, markers=True, position=phase)
    ring = bytearray(b"".join(bytes(p) for u in ulpdus for p in encoder.encode(u)))
    return ring, encoder.phase


def call_marked(ring: bytearray, phase: int, either: bool = False, **kw: Any) -> tuple[Any, ...]:
    _, window = kw.pop("window")
    return lanes.lane_kernels().recv_lane(
        -1, ring, 0, len(ring), 0, True, 0xFFFF, 1, None, WRITE, {5: (window, 0)}, READ, (),
        True, SEND, SEND_SE, 1, 0, kw.get("sends", ()), True, phase, either,
    )  # fmt: skip


@pytest.mark.parametrize("phase", [0, 4, 252, 500, 508])
@pytest.mark.parametrize("size", [1, 490, 1000, 3000])
def test_with_markers_headers_and_payloads_are_gathered_around_them(phase: int, size: int) -> None:
    """RFC 5044 §4.3: a marker every 512 octets of the stream, wherever it
    falls (in the DDP header, the payload, before the CRC): the lane checks
    each FPDUPTR, places the payload without the markers and returns the
    phase after the FPDUs."""
    memory, window = guarded(2 * size + 64)
    buffer_memory, buffer = guarded(size + 8)
    first = bytes(range(256)) * (size // 256 + 1)
    ring, after = marked(
        tagged(5, 0, first[:size], last=False),
        tagged(5, size, b"\x77" * size),
        send(1, 0, first[1 : size + 1]),
        phase=phase,
    )
    start, _, done, _, records, need, took, _, got_phase = call_marked(
        ring, phase, window=(memory, window), sends=[Posted(buffer)]
    )
    assert (start, done, took, need, got_phase) == (len(ring), len(ring), len(ring), -1, after)
    assert records == [(1, 5, 0, 2 * size, 1), (3, 0, size, 0, 1)]
    assert bytes(window[: 2 * size]) == first[:size] + b"\x77" * size
    assert bytes(buffer[:size]) == first[1 : size + 1]
    for m in (memory, buffer_memory):
        assert m[:GUARD] == bytes(GUARD) and m[-GUARD:] == bytes(GUARD)


@pytest.mark.parametrize("phase", [0, 12])
def test_a_wrong_fpduptr_stops_the_lane_there(phase: int) -> None:
    memory = guarded(4096)
    good, mid = marked(tagged(5, 0, b"a" * 1200), phase=phase)
    bad, _ = marked(tagged(5, 0, b"b" * 1200), phase=mid)
    at = (512 - mid) % 512 or 512  # the first marker of the second FPDU (past a leading one)
    corrupted = bytearray(bad)
    corrupted[at + 3] ^= 0x10  # its FPDUPTR (the CRC is off below, so only it is wrong)
    ring = bytearray(good) + corrupted
    result = lanes.lane_kernels().recv_lane(
        -1, ring, 0, len(ring), 0, False, 0xFFFF, 1, None, WRITE, {5: (memory[1], 0)}, READ, (),
        False, SEND, SEND_SE, 1, 0, (), True, phase, False,
    )  # fmt: skip
    assert result[0] == len(good) and result[2] == len(ring) and result[8] == mid
    assert len(result[4]) == 1


def test_either_fpduptr_reading_of_rev0_peers() -> None:
    """An FPDU that starts on a marker: its inner markers may count back to
    the FPDU's start (4 more), with ``either`` only."""
    memory = guarded(4096)
    ring, _ = marked(tagged(5, 0, b"c" * 1000), phase=0)
    assert ring[514:516] == b"\x01\xfc"  # the first inner marker's FPDUPTR: 508
    ring[514:516] = b"\x02\x00"  # 512: counted from the leading marker
    for either, placed in ((False, False), (True, True)):
        result = lanes.lane_kernels().recv_lane(
            -1, bytearray(ring), 0, len(ring), 0, False, 0xFFFF, 1, None, WRITE,
            {5: (memory[1], 0)}, READ, (), False, SEND, SEND_SE, 1, 0, (), True, 0, either,
        )  # fmt: skip
        assert (result[0] == len(ring)) is placed


def test_a_phase_off_the_grid_is_refused() -> None:
    with pytest.raises(ValueError):
        lanes.lane_kernels().recv_lane(
            -1, bytearray(64), 0, 0, 0, True, 0xFFFF, 1, None, WRITE, {}, READ, (), False,
            SEND, SEND_SE, 1, 0, (), True, 2, False,
        )  # fmt: skip
