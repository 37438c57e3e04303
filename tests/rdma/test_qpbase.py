"""The queue pair's per-message calls (iwarp.rdma.qpbase): the C base
``QueuePairBase`` and its pure twin ``PyQueuePairBase`` do the same for the
same calls (results, events, messages, errors, Terminates), on the fast
path and off it, and take their arguments as a Python method would."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import iwarp._accel as _accel
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import qpbase
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.events import MessageQueued

from .test_endpoint import pair
from .test_fastpath import _qp_run, configs, qp_steps

CBase: Any
try:  # built, whether it runs (IWARP_NO_ACCEL) or not
    import iwarp._speedups as _speedups

    CBase = _speedups.QueuePairBase
except ImportError:
    CBase = None

runs_c = pytest.mark.skipif(_accel.speedups is None, reason="the C accelerator does not run")

#: The calls the base defines (each the twin's, or the C type's).
CALLS = ("send_now", "receive_data", "take_message", "settled")


def _pure_calls(patch: pytest.MonkeyPatch) -> None:
    """The queue pair's per-message calls become the pure twin's (its
    attributes are the C base's members, which the twin reads by name)."""
    for name in CALLS:
        patch.setattr(QueuePairEndpoint, name, getattr(qpbase.PyQueuePairBase, name), raising=False)


@runs_c
@settings(max_examples=150, deadline=None)
@given(config=configs, script=st.lists(qp_steps, max_size=16))
def test_the_c_calls_do_what_the_twins_do(config: MpaConfig | None, script: list[Any]) -> None:
    with_c = _qp_run(script, config)
    with pytest.MonkeyPatch.context() as patch:
        _pure_calls(patch)
        assert _qp_run(script, config) == with_c


def test_the_base_in_use_is_the_accelerators() -> None:
    expected = CBase if _accel.speedups is not None else qpbase.PyQueuePairBase
    assert qpbase.QueuePairBase is expected
    assert QueuePairEndpoint.__mro__[1] is expected


def _engaged() -> tuple[QueuePairEndpoint, QueuePairEndpoint]:
    w = pair(a={"receive_buffers": 2, "receive_size": 64}, b={"receive_buffers": 2})
    w.pump()
    a, b = w.a, w.b
    b.receive_data(a.send_now(b"warm") or b"", 0.0)
    assert b.take_message() == b"warm"
    return a, b


def _outcome(method: Any, qp: QueuePairEndpoint, args: tuple[Any, ...], kwargs: Any) -> Any:
    try:
        return ("ok", method(qp, *args, **kwargs))
    except TypeError as exc:
        return ("TypeError", "argument" in str(exc))


ARGUMENTS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("send_now", (b"x",), {}),
    ("send_now", (), {"data": b"x"}),
    ("send_now", (b"x",), {"solicited": 1}),
    ("send_now", (b"x",), {"solicited": True, "invalidate_stag": None}),
    ("send_now", (), {}),
    ("send_now", (b"x", True), {}),
    ("send_now", (b"x",), {"nonsense": 1}),
    ("send_now", (b"x",), {"data": b"y"}),
    ("receive_data", (b"", 0.0), {}),
    ("receive_data", (), {"data": b"", "now": 0.0}),
    ("receive_data", (b"",), {"now": 0.0}),
    ("receive_data", (b"",), {}),
    ("receive_data", (b"", 0.0, 1), {}),
    ("receive_data", (b"", 0.0), {"now": 1.0}),
    ("take_message", (), {}),
    ("settled", (), {}),
]


@runs_c  # (the C methods need the C base under the queue pair)
@pytest.mark.parametrize(("name", "args", "kwargs"), ARGUMENTS)
def test_arguments_are_taken_as_the_twin_takes_them(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    outcomes = []
    for calls in (CBase, qpbase.PyQueuePairBase):
        _, b = _engaged()
        outcomes.append(_outcome(getattr(calls, name), b, args, kwargs))
    assert outcomes[0] == outcomes[1]


def test_on_the_fast_path_the_calls_reach_it() -> None:
    """The per-message calls run on the fast path (no fallback) and keep
    the message count as the cores would."""
    a, b = _engaged()
    assert a._fast is not None and b._fast is not None
    assert a.settled() and b.settled()
    frame = a.send_now(b"hello", solicited=True)
    assert frame is not None
    assert b.receive_data(frame, 0.0) == [MessageQueued(5)]
    assert b.message_octets == 5
    assert b.take_message() == b"hello" and b.message_octets == 0
    assert b.take_message() is None
    assert b._fast is not None


def test_what_the_fast_path_declines_goes_to_the_slow_calls() -> None:
    """An Invalidate STag, a message over a pool buffer: the queue pair's
    own Python takes them, and the fast path is handed back."""
    a, b = _engaged()
    assert a.send_now(b"x" * 70_000) is None and a._fast is None
    a, b = _engaged()
    pd_stag = b.pd.register(bytearray(8)).stag
    frame = a.send_now(b"y", invalidate_stag=pd_stag)
    assert frame is not None
    b.receive_data(frame, 0.0)
    assert b.take_message() == b"y"
