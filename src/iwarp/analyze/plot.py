"""``iwarp decode --plot FILE.svg|png``: pictures of a capture, with matplotlib.

matplotlib is an optional extra (``pip install 'iwarp[plot]'``); without it
:func:`check_available` says how to get it. Three panels: throughput over
time per direction (Initiator and Responder summed over connections) with
Terminates and errors marked, the FPDU size histogram, and the Read
latency distribution.
"""

from __future__ import annotations

import os
from typing import Any, Final

from iwarp.analyze.stats import CaptureTotals

__all__ = ["PLOT_FORMATS", "PlotUnavailableError", "check_available", "write_plot"]

PLOT_FORMATS: Final = (".svg", ".png", ".pdf")
_COLOURS: Final = {"initiator": "tab:blue", "responder": "tab:green"}


class PlotUnavailableError(Exception):
    """matplotlib is not installed, or the file type is not one it writes here."""


def check_available(path: str) -> None:
    """Raise :class:`PlotUnavailableError` with what to do, before any decoding starts."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in PLOT_FORMATS:
        raise PlotUnavailableError(
            f"--plot {path}: the file name must end in {', '.join(PLOT_FORMATS)}"
        )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailableError(
            "--plot needs matplotlib, an optional extra: pip install 'iwarp[plot]' "
            "(or pip install matplotlib)"
        ) from None


def write_plot(totals: CaptureTotals, path: str, title: str) -> None:
    """Draw the three panels of ``totals`` into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (flow, sizes, latency) = plt.subplots(
        3, 1, figsize=(10, 11), gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    figure.suptitle(title)
    _throughput(flow, totals)
    _sizes(sizes, totals)
    _latency(latency, totals)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _throughput(ax: Any, totals: CaptureTotals) -> None:
    origin = totals.origin or 0.0
    drawn = False
    for role, timeline in sorted(totals.timelines.items()):
        if not timeline.buckets:
            continue
        start = timeline.origin - origin
        times = [start + (k + 0.5) * timeline.width for k in range(len(timeline.buckets))]
        rates = [octets / timeline.width / (1 << 20) for octets in timeline.buckets]
        ax.step(times, rates, where="mid", label=f"{role} → peer", color=_COLOURS.get(role))
        drawn = True
    for marks, colour, label in (
        (totals.terminate_marks, "tab:red", "Terminate"),
        (totals.error_marks, "tab:orange", "protocol error"),
    ):
        for i, (time, _, _) in enumerate(marks):
            ax.axvline(
                time - origin,
                color=colour,
                linestyle="--",
                linewidth=0.9,
                label=label if i == 0 else None,
            )
    ax.set_title("Throughput over time (TCP payload octets, all connections)")
    ax.set_xlabel("seconds since the first segment")
    ax.set_ylabel("MiB/s")
    ax.set_ylim(bottom=0)
    if drawn or totals.terminate_marks or totals.error_marks:
        ax.legend(loc="upper right")
    ax.grid(True, alpha=0.3)


def _buckets(counts: list[int]) -> tuple[list[str], list[int]]:
    used = [k for k, c in enumerate(counts) if c]
    if not used:
        return [], []
    ks = range(used[0], used[-1] + 1)
    return [_pow2_label(k) for k in ks], [counts[k] for k in ks]


def _pow2_label(k: int) -> str:
    value = 1 << k
    return f"{value >> 10}K" if value >= 1024 else str(value)


def _sizes(ax: Any, totals: CaptureTotals) -> None:
    labels, values = _buckets(totals.fpdu_sizes.counts)
    ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(values)), labels)
    ax.set_title(f"FPDU sizes ({totals.fpdu_sizes.count} FPDUs, octets on the wire)")
    ax.set_xlabel("size at least (octets, powers of two)")
    ax.set_ylabel("FPDUs")
    if values and max(values) > 100 * max(1, min(v for v in values if v)):
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)


def _latency(ax: Any, totals: CaptureTotals) -> None:
    latency = totals.read_latency
    labels, values = _buckets(latency.counts)
    ax.bar(range(len(values)), values, color="tab:purple")
    ax.set_xticks(range(len(values)), [f"{label}" for label in labels])
    ax.set_title(
        f"RDMA Read latency, Read Request to last Read Response ({latency.count} Reads)"
        if latency.count
        else "RDMA Read latency: no Read answered in the capture"
    )
    ax.set_xlabel("latency at least (µs, powers of two)")
    ax.set_ylabel("Reads")
    ax.grid(True, axis="y", alpha=0.3)
