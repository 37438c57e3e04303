"""The suite's report: a table for people, JSON for tools."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from iwarp.interop.suite import InteropStatus, Outcome

_COLUMNS = ("case", "tool", "direction", "siw", "result", "time", "options / reason")


@dataclass(slots=True)
class Report:
    outcomes: list[Outcome]
    boots: list[float] = field(default_factory=list)
    total_seconds: float = 0.0
    guest: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> Counter[InteropStatus]:
        return Counter(o.status for o in self.outcomes)

    @property
    def failed(self) -> bool:
        return self.counts()[InteropStatus.FAIL] > 0

    def as_dict(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "summary": {
                "passed": counts[InteropStatus.PASS],
                "failed": counts[InteropStatus.FAIL],
                "not_run": counts[InteropStatus.NOT_RUN],
                "boots_seconds": [round(b, 2) for b in self.boots],
                "total_seconds": round(self.total_seconds, 1),
            },
            "guest": self.guest,
            "cases": [o.as_dict() for o in self.outcomes],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, ensure_ascii=False) + "\n"

    def to_text(self, *, width: int = 60) -> str:
        rows = [_COLUMNS]
        for o in self.outcomes:
            c = o.case
            note = o.shown_options if o.status is InteropStatus.PASS else o.reason
            seconds = f"{o.seconds:.1f}s" if o.status is not InteropStatus.NOT_RUN else "-"
            rows.append(
                (c.name, c.tool, str(c.direction), c.variant, _mark(o.status), seconds, note)
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 1)]
        lines = []
        for i, row in enumerate(rows):
            cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, _clip(row[-1], width)]).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in [*widths, min(width, 20)]))
        counts = self.counts()
        boots = ", ".join(f"{b:.1f}s" for b in self.boots) or "none"
        lines.append("")
        lines.append(
            f"{counts[InteropStatus.PASS]} passed, {counts[InteropStatus.FAIL]} failed, "
            f"{counts[InteropStatus.NOT_RUN]} not run; guest boots: {boots}; "
            f"total {self.total_seconds:.0f}s"
        )
        not_run = [o for o in self.outcomes if o.status is InteropStatus.NOT_RUN]
        if not_run:
            lines.append("")
            lines.append("NOT RUN (with the reason):")
            lines.extend(f"  {o.case.name}: {o.reason}" for o in not_run)
        retried = [o for o in self.outcomes if o.retried]
        if retried:
            lines.append("")
            lines.append("RUN TWICE (the first attempt met a known siw race; both kept):")
            lines.extend(f"  {o.case.name}: {_mark(o.status)}; {o.retried}" for o in retried)
        failed = [o for o in self.outcomes if o.status is InteropStatus.FAIL]
        if failed:
            lines.append("")
            lines.append("FAILED:")
            for o in failed:
                lines.append(f"  {o.case.name}: {o.reason}")
                for label, cmd in o.commands.items():
                    lines.append(f"    {label}: {cmd}")
                if o.capture:
                    lines.append(f"    capture: {o.capture}")
        return "\n".join(lines) + "\n"


def _mark(status: InteropStatus) -> str:
    return {
        InteropStatus.PASS: "PASS",
        InteropStatus.FAIL: "FAIL",
        InteropStatus.NOT_RUN: "not run",
    }[status]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_line(outcomes: Sequence[Outcome]) -> str:
    counts = Counter(o.status for o in outcomes)
    return (
        f"{counts[InteropStatus.PASS]} passed, {counts[InteropStatus.FAIL]} failed, "
        f"{counts[InteropStatus.NOT_RUN]} not run"
    )
