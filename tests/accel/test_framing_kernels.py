"""The C framing kernels against the pure-Python codec: same octets, same errors.

Each test runs one input through both paths in the same process (the pure
path by switching the module's ``kernels`` to the pure twins) and compares everything
observable: FPDU octets, stream position and marker phase afterwards,
ULPDUs delivered, the error's code, message and stream offset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp import _accel, _kernels
from iwarp.errors import LocalProtocolError
from iwarp.mpa import framing
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.runs import SegmentRun

pytestmark = pytest.mark.skipif(not _accel.ACTIVE, reason="the C accelerator is not active")

SEQ = 0xFFFFFFFF


@contextmanager
def pure() -> Iterator[None]:
    """Run the enclosed code on the pure-Python path."""
    saved = getattr(framing, "kernels")  # noqa: B009 (not part of the module's API)
    setattr(framing, "kernels", _kernels)  # noqa: B010
    try:
        yield
    finally:
        setattr(framing, "kernels", saved)  # noqa: B010


def runs() -> st.SearchStrategy[tuple[SegmentRun, bool]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[SegmentRun, bool]:
        tagged = draw(st.booleans())
        size = 14 if tagged else 18
        header = bytearray(draw(st.binary(min_size=size, max_size=size)))
        header[0] &= ~0x40
        total = draw(st.integers(0, 6000))
        payload = memoryview(os.urandom(total))
        start = draw(st.integers(0, total))
        stop = draw(st.integers(start, total))
        room = draw(st.integers(1, 3000))
        field_at, field_size = (6, 8) if tagged else (14, 4)
        base = draw(st.integers(0, (1 << (8 * field_size)) - 1 - total))
        run = SegmentRun(
            bytes(header), payload, start, stop, room, field_at, field_size, base, 0x40
        )
        return run, draw(st.booleans())

    return build()


@given(
    case=runs(),
    markers=st.booleans(),
    crc=st.booleans(),
    origin=st.integers(0, SEQ),
    offset=st.integers(0, 1000),
)
@settings(max_examples=300)
def test_frame_run_matches_pure(
    case: tuple[SegmentRun, bool], markers: bool, crc: bool, origin: int, offset: int
) -> None:
    run, _ = case
    position = (origin + 4 * offset) & SEQ  # any marker phase, wrapping near 2**32

    def frame() -> tuple[bytes, int]:
        encoder = FpduEncoder(markers=markers, crc=crc, origin=origin, position=position)
        octets = b"".join(encoder.encode_run(run))
        # the phase must be right for the next FPDU too
        octets += encoder.encode_bytes(b"tail")
        return octets, encoder.position

    fast = frame()
    with pure():
        slow = frame()
    assert fast == slow


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("room", [1, 2, 3, 4])
def test_frame_run_fits_the_framers_bound(room: int, markers: bool) -> None:
    """Many segments whose ULPDUs need PAD: the output buffer MPA sizes for
    the run (the most PAD per FPDU, not each one's) is large enough."""
    run = SegmentRun(bytes(18), memoryview(bytes(2287)), 0, 2287, room, 14, 4, 0, 0x40)
    encoder = FpduEncoder(markers=markers)
    fast = b"".join(encoder.encode_run(run))
    with pure():
        slow = b"".join(FpduEncoder(markers=markers).encode_run(run))
    assert fast == slow


def test_frame_run_refuses_too_large() -> None:
    run = SegmentRun(bytes(14), memoryview(bytes(100)), 0, 100, 100, 6, 8, 0, 0x40)
    for path in (nullcontext, pure):
        encoder = FpduEncoder(max_ulpdu=113)
        with path(), pytest.raises(LocalProtocolError):
            encoder.encode_run(run)
        assert encoder.position == 0


Decoded = tuple[list[bytes], tuple[int, str, int | None] | None, int, int]


def decode(
    stream: bytes, cuts: list[int], markers: bool, crc: bool, origin: int, position: int, limit: int
) -> Decoded:
    decoder = FpduDecoder(
        markers=markers, crc=crc, origin=origin, position=position, max_ulpdu=limit
    )
    out: list[bytes] = []
    last = 0
    for cut in [*sorted(cuts), len(stream)]:
        out.extend(bytes(u) for u in decoder.feed_batch(stream[last:cut]))
        last = max(last, cut)
    error = decoder.error
    summary = None if error is None else (error.mpa_code, str(error), error.stream_offset)
    return out, summary, decoder.position, decoder.buffered


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, bool, bool, int, int, list[int], int]:
    markers = draw(st.booleans())
    crc = draw(st.booleans())
    origin = draw(st.integers(0, SEQ))
    position = (origin + 4 * draw(st.integers(0, 300))) & SEQ
    encoder = FpduEncoder(markers=markers, crc=crc, origin=origin, position=position)
    sizes = draw(st.lists(st.integers(0, 2000), max_size=8))
    stream = bytearray(b"".join(encoder.encode_bytes(os.urandom(n)) for n in sizes))
    # corrupt some octets (CRC, markers, lengths), or append garbage
    for _ in range(draw(st.integers(0, 2))):
        if stream:
            at = draw(st.integers(0, len(stream) - 1))
            stream[at] ^= draw(st.integers(1, 255))
    stream += draw(st.binary(max_size=40))
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=5))
    limit = draw(st.sampled_from([0xFFFF, 2000, 64]))
    return bytes(stream), markers, crc, origin, position, cuts, limit


@given(case=streams())
@settings(max_examples=400)
def test_scan_matches_pure(case: tuple[bytes, bool, bool, int, int, list[int], int]) -> None:
    stream, markers, crc, origin, position, cuts, limit = case
    fast = decode(stream, cuts, markers, crc, origin, position, limit)
    with pure():
        slow = decode(stream, cuts, markers, crc, origin, position, limit)
    assert fast == slow


@given(data=st.binary(max_size=3000), markers=st.booleans(), crc=st.booleans())
@settings(max_examples=200)
def test_scan_arbitrary_bytes(data: bytes, markers: bool, crc: bool) -> None:
    fast = decode(data, [], markers, crc, 0, 0, 0xFFFF)
    with pure():
        slow = decode(data, [], markers, crc, 0, 0, 0xFFFF)
    assert fast == slow


@pytest.mark.parametrize("markers", [False, True])
def test_scan_every_split_point(markers: bool) -> None:
    encoder = FpduEncoder(markers=markers, crc=True, origin=SEQ - 700)
    stream = b"".join(encoder.encode_bytes(os.urandom(n)) for n in (0, 1, 600, 1442, 3))
    for cut in range(len(stream) + 1):
        fast = decode(stream, [cut], markers, True, SEQ - 700, SEQ - 700, 0xFFFF)
        with pure():
            slow = decode(stream, [cut], markers, True, SEQ - 700, SEQ - 700, 0xFFFF)
        assert fast == slow
        assert fast[1] is None and len(fast[0]) == 5


def test_marker_pointer_above_16_bits_is_an_error_on_both_paths() -> None:
    """A ULPDU_Length of 65535 puts its last markers where a 16-bit FPDUPTR
    cannot point: they hold the low 16 bits (as a careless sender would
    write them) and must still be refused."""
    n = 0xFFFF
    content = 6 + n + 3
    at = 508  # the FPDU starts 4 octets past a marker position
    count = (content - at + 507) // 508
    wire = bytearray(content + 4 * count)
    wire[0:2] = n.to_bytes(2, "big")
    for k in range(count):
        marker = at + 512 * k
        wire[marker + 2 : marker + 4] = (marker & 0xFFFF).to_bytes(2, "big")
    assert at + 512 * (count - 1) > 0xFFFF
    fast = decode(bytes(wire), [], True, False, 0, 4, 0xFFFF)
    with pure():
        slow = decode(bytes(wire), [], True, False, 0, 4, 0xFFFF)
    assert fast == slow
    assert fast[1] is not None and fast[1][0] == 3


def test_version_names_the_path() -> None:
    for env, expected in (({}, "C accelerator"), ({"IWARP_NO_ACCEL": "1"}, "pure Python")):
        out = subprocess.run(
            [sys.executable, "-m", "iwarp", "--version"],
            check=True,
            capture_output=True,
            text=True,
            env=dict(os.environ, **env),
        ).stdout
        assert expected in out, out
