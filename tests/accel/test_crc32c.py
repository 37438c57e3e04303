"""The accelerator's CRC-32C, every implementation, against the ``crc32c`` package.

The extension picks its CRC code once, at import, from cpuid: folding with
VPCLMULQDQ on 512-bit registers, else three streams of the SSE4.2 crc32
instruction, else slicing-by-8 tables; PCLMULQDQ folding on 128-bit
registers runs when forced. ``IWARP_ACCEL_CRC=fold|hw|table`` forces one
(``IWARP_ACCEL_NO_SSE42`` means tables), so each is checked in a process of
its own: every length 0..4096 at several alignments, long buffers, running
values, and ``describe()`` naming the code that runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crc32c as package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp import _accel

pytestmark = pytest.mark.skipif(not _accel.ACTIVE, reason="the C accelerator is not active")

if _accel.ACTIVE:
    from iwarp import _speedups

#: Checks one implementation, in the process it runs in (exits 1 on a mismatch).
CHECK = """
import os, random, sys
import crc32c
from iwarp import _speedups as s
print(s.describe())
rng = random.Random(5)
data = rng.randbytes(4096 + 64)
for n in range(4097):
    for at in ALIGNMENTS:
        value = rng.getrandbits(32)
        view = memoryview(data)[at : at + n]
        if s.crc32c(view, value) != crc32c.crc32c(view, value):
            sys.exit(f"length {n} at {at}: {s.crc32c(view, value):#x}")
for n in (4097, 12287, 65536, 65537, 1 << 20, (1 << 20) + 77):
    big = rng.randbytes(n)
    if s.crc32c(big) != crc32c.crc32c(big) or s.crc32c(big, 9) != crc32c.crc32c(big, 9):
        sys.exit(f"length {n}")
"""


def run_forced(env: dict[str, str], alignments: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IWARP_ACCEL")}
    proc = subprocess.run(
        [sys.executable, "-c", CHECK.replace("ALIGNMENTS", alignments)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return ""
    for line in info.read_text().splitlines():
        if line.startswith("flags"):
            return line + " "
    return ""


def test_every_length_and_alignment_of_the_chosen_code() -> None:
    data = os.urandom(4096 + 64)
    for n in range(4097):
        for at in range(64):
            view = memoryview(data)[at : at + n]
            assert _speedups.crc32c(view, n) == package.crc32c(view, n), (n, at)


def test_the_best_code_runs_by_default() -> None:
    name = run_forced({}, "range(0, 64, 9)")
    flags = cpu_flags()
    if " vpclmulqdq" in flags and " avx512f" in flags:
        assert name == "CRC32C with VPCLMULQDQ folding (AVX-512)"
    elif " sse4_2" in flags:
        assert name == "CRC32C with SSE4.2"
    assert name == _speedups.describe()


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"IWARP_ACCEL_CRC": "fold"}, "CRC32C with PCLMULQDQ folding"),
        ({"IWARP_ACCEL_CRC": "hw"}, "CRC32C with SSE4.2"),
        ({"IWARP_ACCEL_CRC": "table"}, "CRC32C with tables"),
        ({"IWARP_ACCEL_NO_SSE42": "1"}, "CRC32C with tables"),
    ],
)
def test_each_fallback_forced(env: dict[str, str], name: str) -> None:
    got = run_forced(env, "range(8)")
    flags = cpu_flags()
    if "tables" not in name and " sse4_2" not in flags:
        pytest.skip("the CPU lacks it")  # the table code ran, and was checked
    if "PCLMULQDQ" in name and " pclmulqdq" not in flags:
        pytest.skip("the CPU lacks PCLMULQDQ")
    assert got == name


@given(data=st.binary(max_size=3000), value=st.integers(0, 0xFFFFFFFF), at=st.integers(0, 63))
@settings(max_examples=300)
def test_arbitrary_data(data: bytes, value: int, at: int) -> None:
    view = memoryview(bytes(at) + data)[at:]
    assert _speedups.crc32c(view, value) == package.crc32c(data, value)


def test_long_buffers_and_running_values() -> None:
    data = os.urandom(300_000)
    for n in (0, 511, 512, 4096, 70_000, 300_000):
        whole = _speedups.crc32c(data[:n])
        assert whole == package.crc32c(data[:n])
        # in two pieces, the second continuing the first
        for cut in (0, min(1, n), n // 3, n):
            assert _speedups.crc32c(data[cut:n], _speedups.crc32c(data[:cut])) == whole
