"""CRC-32C throughput of each implementation the C accelerator can run.

Run: python bench/crc32c_bench.py [--seconds S]

Each of the accelerator's CRC codes (VPCLMULQDQ folding on AVX-512,
PCLMULQDQ folding, three streams of the SSE4.2 crc32 instruction,
slicing-by-8 tables; each forced with IWARP_ACCEL_CRC in a process of its
own) and the ``crc32c`` package (the pure-Python path's CRC) sums
buffers of several sizes, the sizes FPDUs have; GB/s is buffer octets per
second of the fastest of several timed batches (wall clock, one core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

SIZES = (64, 512, 1460, 4096, 16384, 65536, 1 << 20)
KINDS = ("fold512", "fold", "hw", "table", "package")
#: What describe() says for each kind, and the IWARP_ACCEL_CRC value forcing it.
NAMES = {"fold512": "VPCLMULQDQ", "fold": "PCLMULQDQ", "hw": "SSE4.2", "table": "tables"}
FORCE = {"fold512": "", "fold": "fold", "hw": "hw", "table": "table", "package": ""}


def measure(kind: str, seconds: float) -> dict[str, float]:
    """GB/s per size for ``kind``, in this process."""
    func: Callable[[bytes], int]
    if kind == "package":
        import crc32c

        func = crc32c.crc32c
    else:
        from iwarp import _speedups

        if NAMES[kind] not in _speedups.describe():
            return {}  # the CPU lacks it
        func = _speedups.crc32c
    rates = {}
    for size in SIZES:
        data = os.urandom(size)
        count = max(1, (4 << 20) // size)
        best = float("inf")
        deadline = time.perf_counter() + seconds
        for _ in range(50):  # bounded: at most 50 batches
            start = time.perf_counter()
            for _ in range(count):
                func(data)
            best = min(best, time.perf_counter() - start)
            if time.perf_counter() >= deadline:
                break
        rates[str(size)] = size * count / best / 1e9
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="time per size and kind")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.seconds)))
        return
    results = {}
    for kind in KINDS:
        env = dict(os.environ, IWARP_ACCEL_CRC=FORCE[kind])
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--seconds", str(args.seconds)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
        results[kind] = json.loads(out)
    print(f"{'octets':>8} " + " ".join(f"{k:>9}" for k in KINDS) + "   (GB/s)")
    for size in SIZES:
        cells = [results[k].get(str(size)) for k in KINDS]
        print(f"{size:>8} " + " ".join(f"{c:>9.2f}" if c else f"{'-':>9}" for c in cells))


if __name__ == "__main__":
    main()
