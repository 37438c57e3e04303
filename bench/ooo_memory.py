"""Octets an out-of-order MPA receiver holds, against the data in flight.

Seed 000 Appendix 11.1.2: with FPDU-aligned segments and markers the receive
buffer should not grow with the bandwidth-delay product (BufferSizeAF); when
alignment is lost, or markers are off, it does (BufferSizeNAF, TCP).

For each window of W segments in flight, the first segment of every window
is "lost" and arrives last, after the W-1 that follow it: the worst case for
a receiver that waits for order (W = 1: the stream in order). Printed: the
peak of octets held between segments (``OutOfOrderReceiver.buffered``), the
peak of bookkeeping entries, and the receive throughput.

Run: ``python3 bench/ooo_memory.py``
"""

from __future__ import annotations

import random
import time

from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.ooo import OutOfOrderReceiver, ReceiveFailed, UlpduDelivered
from iwarp.mpa.wire import mulpdu

EMSS = 1460
START = 0xFFFF0000  # wraps during the run


def stream(count: int, *, markers: bool) -> tuple[bytes, list[int]]:
    """``count`` FPDUs of MULPDU octets; returns the stream and FPDU lengths."""
    size = mulpdu(EMSS, markers=markers)
    encoder = FpduEncoder(markers=markers, crc=True, origin=START)
    fpdus = [encoder.encode_bytes(bytes([i & 0xFF]) * size) for i in range(count)]
    return b"".join(fpdus), [len(f) for f in fpdus]


def segments_aligned(lengths: list[int]) -> list[tuple[int, int]]:
    out = []
    pos = 0
    for n in lengths:
        out.append((pos, pos + n))
        pos += n
    return out


def segments_resegmented(total: int, rnd: random.Random) -> list[tuple[int, int]]:
    out = []
    pos = 0
    while pos < total:
        step = rnd.randrange(200, EMSS + 1)
        out.append((pos, min(total, pos + step)))
        pos += step
    return out


def reorder(segments: list[tuple[int, int]], window: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in range(0, len(segments), window):
        group = segments[i : i + window]
        out += group[1:] + group[:1]
    return out


def run(data: bytes, order: list[tuple[int, int]], *, markers: bool) -> tuple[int, int, float]:
    receiver = OutOfOrderReceiver(start=START, markers=markers, crc=True)
    peak = peak_meta = delivered = 0
    t0 = time.perf_counter()
    for lo, hi in order:
        for event in receiver.receive((START + lo) & 0xFFFFFFFF, data[lo:hi]):
            if isinstance(event, UlpduDelivered):
                delivered += 1
            elif isinstance(event, ReceiveFailed):
                raise SystemExit(f"unexpected error: {event.error}")
        peak = max(peak, receiver.buffered)
        peak_meta = max(peak_meta, receiver.bookkeeping)
    elapsed = time.perf_counter() - t0
    assert receiver.delivered_offset == len(data), "not everything was delivered"
    return peak, peak_meta, len(data) / elapsed / 1e6


def main() -> None:
    print(f"EMSS {EMSS}, FPDUs of MULPDU octets, CRC on; the first segment of each window last")
    header = (
        f"{'scenario':<28}{'in flight':>11}{'peak held':>11}{'held/EMSS':>10}"
        f"{'bookkeeping':>12}{'MB/s':>8}"
    )
    print(header)
    print("-" * len(header))
    rnd = random.Random(1)
    for window in (1, 16, 64, 256, 1024):
        count = max(window * 4, 1000)  # window 1: in order
        for name, markers, aligned in (
            ("markers, aligned", True, True),
            ("markers, resegmented", True, False),
            ("no markers, aligned", False, True),
        ):
            data, lengths = stream(count, markers=markers)
            segs = segments_aligned(lengths) if aligned else segments_resegmented(len(data), rnd)
            in_flight = sum(hi - lo for lo, hi in segs[:window])
            peak, meta, speed = run(data, reorder(segs, window), markers=markers)
            print(f"{name:<28}{in_flight:>11}{peak:>11}{peak / EMSS:>10.1f}{meta:>12}{speed:>8.1f}")


if __name__ == "__main__":
    main()
