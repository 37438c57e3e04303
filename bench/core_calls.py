"""The calls one 64-octet Send/Send round trip makes in the sans-IO cores.

Run: python bench/core_calls.py [--rounds N] [--size S] [--posted]

Drives ``bench/sync_rtt.py``'s ``core_cost`` (the two queue-pair endpoints
wired in memory: the ``core`` mode of ``bench/rtt_instructions.py``) under
``sys.settrace`` and ``sys.setprofile`` and prints, per round trip (two
messages, one each way), for every Python function: its calls and the
bytecodes it ran (``f_trace_opcodes``), grouped by layer, and the C
functions called (builtins, methods of built-in types, the kernels).
Counts, not times: they do not move with the machine's load, and the
tracer's own cost is not in them. Two runs, of N/4 and N + N/4 round
trips, are counted and their difference divided by N, so the endpoints'
setup cancels out (as in ``bench/rtt_instructions.py``). With the C accelerator the kernels are
C calls; with ``IWARP_NO_ACCEL=1`` their pure twins are Python functions.

Bytecodes are not instructions (``bench/rtt_instructions.py`` counts
those), but on this path they are near proportional: see
docs/performance.md, "Where a round trip's instructions go".
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import iwarp

sys.path.insert(0, str(Path(__file__).parent))
from sync_rtt import core_cost

#: Where a function's file lies, the layer it is counted under (first match).
_LAYERS = (
    ("iwarp/mpa/", "MPA"),
    ("iwarp/ddp/", "DDP"),
    ("iwarp/rdmap/", "RDMAP"),
    ("iwarp/rdma/endpoint", "queue-pair endpoint"),
    ("iwarp/rdma/small", "small-message lane"),
    ("iwarp/rdma/fastpath", "fast path (pure twin)"),
    ("iwarp/rdma/", "RDMA connection"),
    ("iwarp/_small", "kernels (pure twin)"),
    ("iwarp/_kernels", "kernels (pure twin)"),
    ("iwarp/", "iwarp, other"),
)
#: Where the package and this bench lie: a frame's layer comes from where its
#: file is, not from a name in its path (a clone may well be named "iwarp").
_PACKAGE = Path(iwarp.__file__).resolve().parent
_BENCH = Path(__file__).resolve().parent
#: Round trips run before counting (the first messages make the pool's objects).
_WARM = 20


def _layer(filename: str) -> str:
    path = Path(filename).resolve()
    if path.is_relative_to(_BENCH):
        return "the bench's loop"
    if path.is_relative_to(_PACKAGE):
        name = "iwarp/" + path.relative_to(_PACKAGE).as_posix()
        for part, layer in _LAYERS:
            if name.startswith(part):
                return layer
    return "Python's library"


def _key(frame: FrameType) -> str:
    code = frame.f_code
    name = code.co_filename.replace("\\", "/")
    short = name.rsplit("/iwarp/", 1)[-1] if "/iwarp/" in name else Path(name).name
    return f"{short}:{code.co_firstlineno} {code.co_qualname}"


def _run(rounds: int, size: int, posted: bool) -> None:
    core_cost(rounds, size, crc=True, posted=posted)  # (rounds + 100 round trips)


def count(
    rounds: int, size: int, posted: bool, detail: bool = True
) -> tuple[Counter[str], Counter[str], dict[str, str], Counter[str]]:
    """(Python calls, bytecodes, layer of each function, C calls), summed
    over ``rounds + 100`` round trips, the endpoints' setup included.
    Without ``detail`` only the Python calls are counted (the rest empty)."""
    calls: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    layers: dict[str, str] = {}
    c_calls: Counter[str] = Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        key = _key(frame)
        if key not in layers:
            layers[key] = _layer(frame.f_code.co_filename)
        if event == "call":
            calls[key] += 1
        if not detail:
            return None
        frame.f_trace_opcodes = True

        def local(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            where = type(owner).__name__ if owner is not None else arg.__module__
            if isinstance(owner, type(sys)):
                where = owner.__name__
            c_calls[f"{where}.{arg.__name__}"] += 1

    _run(_WARM, size, posted)
    sys.settrace(trace)
    try:
        _run(rounds, size, posted)
    finally:
        sys.settrace(None)
    if not detail:
        return calls, ops, layers, c_calls
    sys.setprofile(profile)
    try:
        _run(rounds, size, posted)
    finally:
        sys.setprofile(None)
    return calls, ops, layers, c_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="round trips counted (1000)")
    parser.add_argument("--size", type=int, default=64, help="message octets (64)")
    parser.add_argument(
        "--posted", action="store_true", help="each Send a posted SendWR, not send_now"
    )
    args = parser.parse_args()
    if not 1 <= args.rounds <= 100_000:
        parser.error("--rounds must be 1 .. 100000")
    if not 1 <= args.size <= 8192:
        parser.error("--size must be 1 .. 8192")
    low = args.rounds // 4
    calls, ops, layers, c_calls = count(low + args.rounds, args.size, args.posted)
    calls0, ops0, _, c_calls0 = count(low, args.size, args.posted)
    calls.subtract(calls0)
    ops.subtract(ops0)
    c_calls.subtract(c_calls0)
    n = args.rounds
    print(f"per {args.size}-octet Send/Send round trip (two messages), {n} counted")
    by_layer: dict[str, list[str]] = {}
    for key in sorted(ops, key=lambda k: -ops[k]):
        if ops[key] / n >= 0.5:
            by_layer.setdefault(layers[key], []).append(key)
    total_calls = total_ops = 0.0
    for layer, keys in sorted(by_layer.items(), key=lambda kv: -sum(ops[k] for k in kv[1])):
        layer_calls = sum(calls[k] for k in keys) / n
        layer_ops = sum(ops[k] for k in keys) / n
        total_calls += layer_calls
        total_ops += layer_ops
        print(f"  {layer}: {layer_calls:.1f} calls, {layer_ops:.0f} bytecodes")
        for key in keys:
            print(f"    {calls[key] / n:5.1f} {ops[key] / n:6.0f}  {key}")
    print(f"  Python: {total_calls:.1f} calls, {total_ops:.0f} bytecodes")
    shown = {k: v / n for k, v in c_calls.items() if v / n >= 0.5}
    print(f"  C calls: {sum(shown.values()):.1f}")
    for key, per in sorted(shown.items(), key=lambda kv: -kv[1]):
        print(f"    {per:5.1f}  {key}")


if __name__ == "__main__":
    main()
