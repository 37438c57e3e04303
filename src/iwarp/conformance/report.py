"""Reports: coloured text (colour only on a terminal), JSON, JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final, TextIO

from iwarp.conformance.model import Case, Result, Status

__all__ = [
    "counts",
    "format_case",
    "format_result",
    "group_header",
    "group_of",
    "junit",
    "list_json",
    "recap",
    "summary_line",
    "to_json",
    "write_text",
]

_COLOURS: Final = {Status.PASSED: "\033[32m", Status.FAILED: "\033[31m", Status.SKIPPED: "\033[33m"}
_MARKS: Final = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.SKIPPED: "SKIP"}
_RESET: Final = "\033[0m"


def counts(results: Iterable[Result]) -> Counter[Status]:
    return Counter(r.status for r in results)


def summary_line(results: Sequence[Result]) -> str:
    c = counts(results)
    return f"{c[Status.PASSED]} passed, {c[Status.FAILED]} failed, {c[Status.SKIPPED]} skipped"


def format_case(item: Case) -> str:
    level = "" if item.level == "MUST" else f" [{item.level}]"
    roles = "/".join(sorted(r.value for r in item.roles))
    return f"{item.id:22} {item.title}{level} (target: {roles})\n{'':22} {item.quote}"


def format_result(result: Result, *, colour: bool, verbose: bool = False) -> str:
    mark = _MARKS[result.status]
    if colour:
        mark = f"{_COLOURS[result.status]}{mark}{_RESET}"
    lines = [f"{mark} {result.case.id:22} {result.case.title} ({result.seconds:.2f}s)"]
    if result.status is not Status.PASSED or verbose:
        lines.append(f"       checks: {result.case.quote}")
    if result.reason:
        label = "failed" if result.status is Status.FAILED else "skipped"
        lines.append(f"       {label}: {result.reason}")
    if result.status is Status.FAILED or verbose:
        lines += [f"       | {line}" for line in result.observed]
    return "\n".join(lines)


def group_of(item: Case) -> str:
    """The section a case belongs to, for grouping: ``rfc5044 §7.1.1``."""
    parts = item.id.split("/")
    return f"{parts[0]} §{parts[1]}" if len(parts) > 2 else parts[0]


def group_header(item: Case, previous: Case | None) -> str | None:
    """A heading line when ``item`` starts a new section (None within one)."""
    if previous is not None and group_of(previous) == group_of(item):
        return None
    return f"== {group_of(item)}"


def recap(results: Sequence[Result]) -> list[str]:
    """One line per failed case (id, title, reason), for the end of a text report."""
    failed = [r for r in results if r.status is Status.FAILED]
    if not failed:
        return []
    lines = [f"{len(failed)} failed:"]
    for r in failed:
        reason = r.reason if len(r.reason) <= 160 else r.reason[:157] + "..."
        lines.append(f"  {r.case.id:22} {reason}")
    return lines


def list_json(cases: Sequence[Case]) -> str:
    """The selected cases as a JSON array (``--list --json``)."""
    return json.dumps([item.as_dict() for item in cases], indent=1)


def write_text(results: Sequence[Result], out: TextIO, *, colour: bool) -> None:
    """The end of a text report: the recap of failures, then the counts."""
    for line in recap(results):
        out.write(line + "\n")
    line = summary_line(results)
    if colour:
        failed = counts(results)[Status.FAILED]
        line = f"{_COLOURS[Status.FAILED if failed else Status.PASSED]}{line}{_RESET}"
    out.write(line + "\n")


def to_json(results: Sequence[Result], target: str) -> str:
    c = counts(results)
    return json.dumps(
        {
            "target": target,
            "passed": c[Status.PASSED],
            "failed": c[Status.FAILED],
            "skipped": c[Status.SKIPPED],
            "results": [r.as_dict() for r in results],
        }
    )


def junit(results: Sequence[Result], target: str) -> bytes:
    """A JUnit XML report: one testsuite, one testcase per case."""
    c = counts(results)
    suite = ET.Element(
        "testsuite",
        name="iwarp conformance",
        tests=str(len(results)),
        failures=str(c[Status.FAILED]),
        skipped=str(c[Status.SKIPPED]),
        errors="0",
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="target", value=target)
    for r in results:
        spec = r.case.id.rsplit("/", 1)[0]
        tc = ET.SubElement(
            suite, "testcase", classname=spec, name=r.case.id, time=f"{r.seconds:.3f}"
        )
        if r.status is Status.FAILED:
            node = ET.SubElement(tc, "failure", message=r.reason)
            node.text = "\n".join([r.case.quote, *r.observed])
        elif r.status is Status.SKIPPED:
            ET.SubElement(tc, "skipped", message=r.reason)
        out = ET.SubElement(tc, "system-out")
        out.text = f"{r.case.title}\n{r.case.quote}"
    data: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    return data
