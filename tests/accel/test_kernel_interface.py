"""One kernel interface: the C module and its pure-Python twin, function by function.

``iwarp._speedups`` and ``iwarp._kernels`` must be interchangeable: the
same names, the same results for the same arguments, the same writes into
the buffers they are given and the same refusals (ValueError with the same
message; OverflowError, TypeError, BufferError of the same class). Each
test draws arguments, valid and hostile (values at the edges of the C
types, misaligned and torn records, outputs over their inputs), runs both
modules on fresh copies and compares everything observable.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from iwarp import _accel, _kernels
from iwarp.mpa.framing import FpduEncoder

pytestmark = pytest.mark.skipif(not _accel.ACTIVE, reason="the C accelerator is not active")

if _accel.ACTIVE:
    from iwarp import _speedups

EDGES = [
    *(0, 1, 3, 4, 8, 14, 18, 32, 511, 512, 0xFFFF, 0x10000),
    *(2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, -(2**63), -(2**63) - 1),
]


def ints(low: int, high: int) -> st.SearchStrategy[int]:
    """Mostly ``low..high``; sometimes an edge of the C types."""
    return st.one_of(st.integers(low, high), st.integers(low, high), st.sampled_from(EDGES))


def picker(draw: st.DrawFn) -> Callable[[int, int], int]:
    """Draws integers in ``low..high``, or (one case in three) with edges
    of the C types among them."""
    hostile = draw(st.integers(0, 2)) == 0
    return lambda low, high: draw(ints(low, high) if hostile else st.integers(low, high))


Outcome = tuple[Any, ...]


def outcome(func: Callable[..., Any], *args: Any) -> Outcome:
    """The result, or the error (with its message when it is a ValueError)."""
    try:
        return ("ok", func(*args))
    except ValueError as exc:
        return ("ValueError", str(exc))
    except (OverflowError, TypeError, BufferError) as exc:
        return (type(exc).__name__,)


def both(name: str, make: Callable[[], tuple[Any, ...]], *watched: int) -> Outcome:
    """Run kernel ``name`` of both modules on fresh arguments from ``make``;
    assert equal outcomes and equal contents of the argument buffers at the
    positions ``watched``. Returns the outcome."""
    runs = []
    for module in (_speedups, _kernels):
        args = make()
        result = outcome(getattr(module, name), *args)
        runs.append((result, [bytes(args[i]) for i in watched if args[i] is not None]))
    assert runs[0] == runs[1]
    event(f"{name}: {runs[0][0][0]} {runs[0][0][1] if runs[0][0][0] == 'ValueError' else ''}")
    return runs[0][0]


def test_the_same_functions() -> None:
    assert set(_kernels.__all__) <= set(dir(_speedups))
    for name in _kernels.__all__:
        c, pure = getattr(_speedups, name), getattr(_kernels, name)
        assert callable(c) and callable(pure)
        # Arity: both refuse a call with too many arguments the same way.
        assert outcome(c, *range(20)) == outcome(pure, *range(20)) == ("TypeError",)
    assert _kernels.SCAN_CRC == 2 and _kernels.SCAN_MARKER == 3 and _kernels.SCAN_LENGTH == 4


@given(data=st.binary(max_size=5000), value=ints(0, 2**32 - 1), at=st.integers(0, 7))
@settings(max_examples=200)
def test_crc32c(data: bytes, value: int, at: int) -> None:
    both("crc32c", lambda: (memoryview(data)[at:], value))


@st.composite
def frame_args(draw: st.DrawFn) -> tuple[Callable[[], tuple[Any, ...]], bool]:
    pick = picker(draw)
    field_size = pick(1, 8)
    header = draw(st.binary(min_size=min(max(field_size, 1), 32), max_size=40))
    payload = draw(st.binary(max_size=3000))
    start = pick(0, len(payload))
    stop = pick(start, len(payload)) if 0 <= start <= len(payload) else pick(0, len(payload))
    args = (
        pick(1, 1600),  # room
        pick(0, max(0, len(header) - field_size)),  # field_at
        field_size,
        pick(0, 2**64 - 1),  # base
        pick(0, 255),  # last_mask
        draw(st.booleans()),
        draw(st.booleans()),
        4 * pick(0, 127),  # phase
    )
    kind = draw(st.sampled_from(["none", "big", "small", "over"]))
    size = 4 * len(payload) + 200 * (len(payload) + 1) if kind == "big" else draw(ints(0, 300))

    def make() -> tuple[Any, ...]:
        source = bytearray(payload)
        out: Any
        if kind == "none":
            out = None
        elif kind == "over":
            out = memoryview(source)[: max(0, min(size, len(source)))]
        else:
            out = bytearray(max(0, min(size, 1 << 20)))
        return (out, header, source, start, stop, *args)

    return make, kind in ("big", "small")


@given(case=frame_args())
@settings(max_examples=400)
def test_frame_run(case: tuple[Callable[[], tuple[Any, ...]], bool]) -> None:
    make, fresh_out = case
    both("frame_run", make, *((0,) if fresh_out else ()))


@st.composite
def scan_args(draw: st.DrawFn) -> Callable[[], tuple[Any, ...]]:
    markers = draw(st.booleans())
    crc = draw(st.booleans())
    phase = 4 * draw(st.integers(0, 127))
    if draw(st.booleans()):
        encoder = FpduEncoder(markers=markers, crc=crc, origin=0, position=phase)
        sizes = draw(st.lists(st.integers(0, 1500), max_size=5))
        stream = bytearray(
            b"".join(encoder.encode_bytes(bytes([k]) * n) for k, n in enumerate(sizes))
        )
        for _ in range(draw(st.integers(0, 2))):
            if stream:
                stream[draw(st.integers(0, len(stream) - 1))] ^= draw(st.integers(1, 255))
    else:
        stream = bytearray(draw(st.binary(max_size=2000)))
    pick = picker(draw)
    start = 4 * pick(0, 2)
    end = draw(st.one_of(st.just(len(stream)), st.just(pick(0, len(stream)))))
    args = (
        draw(st.booleans()) and markers,
        crc,
        draw(st.one_of(st.just((phase + start) % 512), st.just(4 * pick(0, 127)))),
        draw(st.one_of(st.just(0xFFFF), st.just(pick(0, 2000)))),
        draw(st.booleans()),
    )
    readonly = draw(st.integers(0, 9)) == 0

    def make() -> tuple[Any, ...]:
        buffer: Any = bytes(stream) if readonly else bytearray(stream)
        return (buffer, start, end, *args)

    return make


@given(make=scan_args())
@settings(max_examples=400)
def test_scan(make: Callable[[], tuple[Any, ...]]) -> None:
    both("scan", make, 0)


def records(draw: st.DrawFn, size: int) -> tuple[bytes, int, int]:
    """Records (some inside ``size``, some anywhere), a misalignment and a torn tail."""
    pairs = draw(
        st.lists(
            st.tuples(
                st.one_of(st.integers(0, size), st.sampled_from([2**32 - 16, 2**32 - 1])),
                st.one_of(st.integers(0, size), st.sampled_from([2**31, 2**32 - 1])),
            ),
            max_size=6,
        )
    )
    raw = b"".join(struct.pack("=II", at, n) for at, n in pairs)
    return raw + bytes(draw(st.integers(0, 7))), draw(st.integers(0, 7)), len(pairs)


def misaligned(raw: bytes, shift: int) -> memoryview:
    return memoryview(bytearray(shift) + raw)[shift:]


@st.composite
def segment_args(draw: st.DrawFn) -> Callable[[], tuple[Any, ...]]:
    tagged = draw(st.booleans())
    # Segments that continue one message, so that runs are found.
    key, msn, offset = draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 4000))
    buffer = bytearray()
    pairs = []
    to = offset
    for k in range(draw(st.integers(0, 6))):
        n = draw(st.integers(0, 60))
        control = draw(st.sampled_from([0x81, 0xC1, 0x01, 0x41, 0x80]))
        if tagged:
            head = struct.pack(">BBIQ", control, 0x40, key, to)
        else:
            head = struct.pack(">BBIIII", control & ~0x80, 0x40, 0, key, msn, to)
        pairs.append((len(buffer), len(head) + n))
        buffer += head + bytes([k]) * n
        to += n
    raw = b"".join(struct.pack("=II", at, n) for at, n in pairs)
    if draw(st.booleans()):
        raw, _, _ = records(draw, len(buffer))
    shift = draw(st.integers(0, 7))
    args = (
        draw(ints(0, 6)),
        tagged,
        draw(st.one_of(st.just(0xC3), ints(0, 255))),
        draw(st.one_of(st.just(0x81 if tagged else 0x01), ints(0, 255))),
        draw(st.one_of(st.just(0x40), ints(0, 255))),
        draw(st.one_of(st.just(key), ints(0, 3))),
        draw(st.one_of(st.just(msn), ints(0, 3))),
        draw(st.one_of(st.just(offset), ints(0, 4000))),
    )
    return lambda: (bytes(buffer), misaligned(raw, shift), *args)


@given(make=segment_args())
@settings(max_examples=400)
def test_segment_run(make: Callable[[], tuple[Any, ...]]) -> None:
    both("segment_run", make)


@st.composite
def place_args(draw: st.DrawFn) -> Callable[[], tuple[Any, ...]]:
    pick = picker(draw)
    data = draw(st.binary(max_size=400))
    raw, shift, count = records(draw, len(data))
    index = pick(0, count)
    run = pick(0, count - index) if 0 <= index <= count else pick(0, count)
    hsize = pick(0, 20)
    # Mostly the run's exact length, so that copies happen.
    exact = 0
    if 0 <= index <= count and 0 <= run <= count - index and 0 <= hsize <= 20:
        for k in range(index, index + run):
            n = struct.unpack_from("=I", raw, 8 * k + 4)[0]
            exact += max(0, n - hsize)
    size = draw(st.one_of(st.just(exact), st.just(exact), st.just(pick(0, 500))))
    kind = draw(st.sampled_from(["fresh"] * 4 + ["over data", "over records", "readonly"]))

    def make() -> tuple[Any, ...]:
        buffer = bytearray(data)
        recs = misaligned(raw, shift)
        length = max(0, min(size, 1 << 20))
        target: Any
        if kind == "over data":
            target = memoryview(buffer)[:length]
        elif kind == "over records":
            target = recs[:length]
        elif kind == "readonly":
            target = bytes(length)
        else:
            target = bytearray(length)
        return (buffer, recs, index, run, hsize, target)

    return make


@given(make=place_args())
@settings(max_examples=400)
def test_place_run(make: Callable[[], tuple[Any, ...]]) -> None:
    both("place_run", make, 0, 1, 5)


def test_place_run_copies_a_run() -> None:
    """The common case on both: every payload, in order, nothing else."""
    data = bytes(range(256)) * 2
    recs = b"".join(struct.pack("=II", at, 30) for at in (0, 100, 200))
    for module in (_speedups, _kernels):
        target = bytearray(3 * 16)
        assert module.place_run(data, recs, 0, 3, 14, target) is None
        assert target == data[14:30] + data[114:130] + data[214:230]


def test_overflow_of_the_c_types() -> None:
    big = sys.maxsize + 1
    for module in (_speedups, _kernels):
        with pytest.raises(OverflowError):
            module.place_run(b"", b"", big, 0, 0, bytearray())
        with pytest.raises(OverflowError):
            module.segment_run(b"", b"", 0, True, 0, 0, 0, 0, 0, -1)
        with pytest.raises(OverflowError):
            module.frame_run(None, bytes(14), b"", 0, 0, 1, 6, 8, 2**64, 0, False, True, 0)
