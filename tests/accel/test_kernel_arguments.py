"""The C kernels check their own arguments: hostile offsets, lengths and
indexes are refused with ValueError before any octet is read or written.

Each case is one of the defects the kernels had (bounds that added two
caller-given values and wrapped, records read as aligned words, copies
between overlapping buffers); before the fixes each either read or wrote
outside a buffer (a crash, or a sanitizer report) or returned without an
error.
"""

from __future__ import annotations

import struct

import pytest

from iwarp import _accel

pytestmark = pytest.mark.skipif(not _accel.ACTIVE, reason="the C accelerator is not active")

if _accel.ACTIVE:
    from iwarp import _speedups as kernels


def records(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack("=II", at, n) for at, n in pairs)


def test_place_run_record_bounds_do_not_wrap() -> None:
    # 0xFFFFFFF0 + 0x20 wraps to 0x10 in 32 bits: inside a 64-octet buffer.
    with pytest.raises(ValueError, match="outside the buffer"):
        kernels.place_run(bytes(64), records((0xFFFFFFF0, 0x20)), 0, 1, 0, bytearray(0x20))


def test_place_run_index_plus_count_does_not_overflow() -> None:
    recs = records((0, 20), (20, 20))
    for index, count in (((1 << 63) - 1, 2), (1, (1 << 63) - 1), (2, 1), (3, 0)):
        with pytest.raises(ValueError, match="records out of range"):
            kernels.place_run(bytes(40), recs, index, count, 0, bytearray(0))


def test_place_run_refuses_overlapping_buffers() -> None:
    data = bytearray(range(64))
    recs = records((0, 16))
    with pytest.raises(ValueError, match="overlaps"):
        kernels.place_run(data, recs, 0, 1, 0, memoryview(data)[8:24])
    # the records buffer may not be written either (it is read while copying)
    both = bytearray(records((8, 8)) + bytes(8))
    with pytest.raises(ValueError, match="overlaps"):
        kernels.place_run(bytes(16), both, 0, 1, 0, memoryview(both)[8:16])
    assert data == bytearray(range(64))


def test_place_run_reads_misaligned_records() -> None:
    data = bytes(range(100))
    for shift in range(1, 8):
        holder = bytearray(shift) + records((10, 20), (50, 30))
        recs = memoryview(holder)[shift:]
        target = bytearray(42)
        kernels.place_run(data, recs, 0, 2, 4, target)
        assert target == data[14:30] + data[54:80]


def test_frame_run_field_bounds_do_not_overflow() -> None:
    payload = bytes(10)
    for field_at, field_size in (((1 << 63) - 4, 8), ((1 << 63) - 1, 1), (7, 8), (-1, 4)):
        with pytest.raises(ValueError, match="inconsistent"):
            kernels.frame_run(
                None, bytes(14), payload, 0, 10, 10, field_at, field_size, 0, 0x40, False, True, 0
            )


def test_frame_run_room_does_not_overflow() -> None:
    for room in ((1 << 63) - 1, 0xFFFF, 0):
        with pytest.raises(ValueError, match="inconsistent"):
            kernels.frame_run(
                None, bytes(14), bytes(10), 0, 10, room, 6, 8, 0, 0x40, False, True, 0
            )


def test_frame_run_refuses_an_output_over_its_input() -> None:
    buffer = bytearray(4096)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.frame_run(
            buffer, bytes(14), memoryview(buffer)[:100], 0, 100, 50, 6, 8, 0, 0x40, True, True, 0
        )


def test_segment_run_reads_misaligned_records() -> None:
    segment = bytes([0x81, 0x40]) + struct.pack(">IQ", 7, 0) + bytes(20)
    data = segment + bytes(4)
    for shift in range(8):
        holder = bytearray(shift) + records((0, len(segment)), (1 << 31, 50))
        got = kernels.segment_run(
            data, memoryview(holder)[shift:], 0, True, 0xC3, 0x81, 0x40, 7, 0, 0
        )
        assert got == (1, 20, False)
