"""Throughput of FPDU encode + decode, next to the cost floor of CRC + one copy.

Run: python bench/mpa_framing.py [--seconds S]

For each ULPDU size, markers on/off and CRC on/off it frames a batch of
ULPDUs (FpduEncoder.encode, then one join, as one sendmsg would), cuts the
stream into 64 KiB reads (as a socket delivers it) and decodes it
(FpduDecoder.feed). The floor is one CRC32C pass plus one copy of the same
octets, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from iwarp._crc32c import crc32c
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU, mulpdu

# asyncio reads a socket 256 KiB at a time (selector transport max_size).
READ_SIZE = 256 * 1024


def rate(func: Callable[[], int], seconds: float) -> float:
    """Octets per second that ``func`` (returning octets handled) sustains."""
    func()  # warm up
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        done += func()
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def codec_round(size: int, markers: bool, crc: bool, count: int) -> Callable[[], int]:
    ulpdus = [os.urandom(size) for _ in range(4)]
    # The receive side gets the stream in socket-sized reads; cutting it is
    # the kernel's copy, not the codec's, so it is done once, untimed.
    encoder = FpduEncoder(markers=markers, crc=crc)
    stream = b"".join(b"".join(encoder.encode(ulpdus[i & 3])) for i in range(count))
    reads = [stream[pos : pos + READ_SIZE] for pos in range(0, len(stream), READ_SIZE)]

    def run() -> int:
        encoder = FpduEncoder(markers=markers, crc=crc)
        pieces = []
        for i in range(count):
            pieces.extend(encoder.encode(ulpdus[i & 3]))
        b"".join(pieces)  # what one sendmsg/writelines copies into the kernel
        decoder = FpduDecoder(markers=markers, crc=crc)
        got = 0
        for chunk in reads:
            for ulpdu in decoder.feed(chunk):
                got += len(ulpdu)
        assert decoder.error is None and got == size * count
        return got

    return run


def floor_round(size: int, count: int) -> Callable[[], int]:
    block = os.urandom(size * count)

    def run() -> int:
        view = memoryview(block)
        for pos in range(0, len(block), size):
            crc32c(view[pos : pos + size])
        bytearray(block)  # one copy of every octet
        return len(block)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args()
    sizes = [
        ("128", 128),
        ("MULPDU(1460)", mulpdu(1460, markers=True)),
        ("16 KiB", 16384),
        ("64768", MAX_ULPDU),
    ]
    print(
        f"{'ULPDU':>13} {'markers':>7} {'crc':>4} {'encode+decode':>14} {'floor':>10} {'ratio':>6}"
    )
    for label, size in sizes:
        count = max(8, (1 << 20) // size)
        floor = rate(floor_round(size, count), args.seconds)
        for markers in (False, True):
            for crc in (False, True):
                codec = rate(codec_round(size, markers, crc, count), args.seconds)
                print(
                    f"{label:>13} {'on' if markers else 'off':>7} {'on' if crc else 'off':>4} "
                    f"{codec / 1e6:>10.0f} MB/s {floor / 1e6:>6.0f} MB/s {floor / codec:>5.2f}x"
                )


if __name__ == "__main__":
    main()
