"""The Python calls of the common case, counted: a 64-octet Send answered by
a Send between two queue-pair endpoints in memory crosses a known number
of Python functions (``bench/core_calls.py``, docs/performance.md "Which
route for the fast path"). Counts, never times: a new call on the path
fails here, with the function named, instead of showing up as a few
percent in a benchmark nobody ran.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import iwarp._accel as _accel

ROOT = Path(__file__).resolve().parents[2]

#: Python calls per round trip (two messages) on each path, as measured
#: with the fast path (iwarp.rdma.fastpath): with the accelerator none, the
#: endpoint's ``send_now``, ``receive_data`` and ``take_message`` being C
#: calls into the C ``FastPath`` (iwarp.rdma.qpbase; 6 when they were
#: Python methods around it, 32 before the fast path); the pure twin: those
#: three, ``PyFastPath``'s methods and the pure kernels they call (42
#: before the fast path).
_BUDGET = {"accelerated": 0, "pure": 28}
_ROUNDS = 40


def _core_calls() -> ModuleType:
    spec = importlib.util.spec_from_file_location("core_calls", ROOT / "bench" / "core_calls.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("core_calls", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def per_round_trip() -> dict[str, float]:
    """Python calls per round trip by function, setup cancelled out."""
    module = _core_calls()
    calls, _, _, _ = module.count(_ROUNDS + 10, 64, False, detail=False)
    calls0, _, _, _ = module.count(10, 64, False, detail=False)
    calls.subtract(calls0)
    return {key: n / _ROUNDS for key, n in calls.items() if n}


def test_the_common_case_stays_within_its_python_calls(per_round_trip: dict[str, float]) -> None:
    path = "accelerated" if _accel.speedups is not None else "pure"
    total = sum(per_round_trip.values())
    listing = "\n".join(
        f"{n:5.1f}  {key}" for key, n in sorted(per_round_trip.items(), key=lambda kv: -kv[1])
    )
    assert total <= _BUDGET[path], f"{total} Python calls per round trip:\n{listing}"


def test_each_message_goes_by_the_fast_path(per_round_trip: dict[str, float]) -> None:
    # One send and one receive per message, two messages per round trip, by
    # the fast path: nothing fell back to the small-message lane or the full
    # path (which would call conn.receive_data).
    called = {key.rsplit(" ", 1)[-1]: n for key, n in per_round_trip.items()}
    assert "SmallLane.send" not in called
    assert "SmallLane.receive" not in called
    assert "RdmaConnection.receive_data" not in called
    if _accel.speedups is None:
        assert called["PyFastPath.send"] == 2
        assert called["PyFastPath.receive"] == 2


def test_the_bench_prints_layers_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    module = _core_calls()
    argv = sys.argv
    sys.argv = ["core_calls.py", "--rounds", "8"]
    try:
        module.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "per 64-octet Send/Send round trip (two messages), 8 counted" in out
    for layer in ("the bench's loop:", "Python:", "C calls:"):
        assert layer in out
