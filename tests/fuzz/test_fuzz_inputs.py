"""Inputs that once broke a fuzz target's budget stay quick and small.

The ``kernels`` target drew, for this input, a small_receive head buffer of
2**31 + 1300 octets (an edge value for its size), zeroed and copied for
each twin: about 17 s per input under ASan (tools/fuzz checks the time
only between inputs, so the 5 s budget of .ci/sanitize became 22-52 s).
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import fuzz_targets  # noqa: E402

SLOW_KERNELS_INPUT = bytes.fromhex(
    "06eac9f0455381986feb52a970bd926473c097cd527f9a4598f623230b55bc56"
    "f83d3b3b347ad448acfa07bbd1dbd9e892c4"
)


def test_the_kernels_input_that_drew_gigabytes_stays_small() -> None:
    tracemalloc.start()
    try:
        fuzz_targets.kernels(SLOW_KERNELS_INPUT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
