"""Reports: coloured text (colour only on a terminal), JSON, JUnit XML, HTML pages."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
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
    "write_html",
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


def to_json(results: Sequence[Result], target: str, seed: int | None = None) -> str:
    """The run as one JSON object; ``seed``: the run's seed of the tool's values."""
    c = counts(results)
    return json.dumps(
        {
            "target": target,
            **({} if seed is None else {"seed": seed}),
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


_STYLE: Final = """body{font-family:sans-serif;margin:1.5em;max-width:75em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
.passed{background:#d9f2d9}.failed{background:#f8d0d0}.skipped{background:#f5ecc8}
pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}h2{margin-top:1.2em}"""


def case_page_name(item: Case) -> str:
    """The file name of a case's page: its id with ``/`` as ``_`` (``rfc5044_7.1.1_3.html``)."""
    return item.id.replace("/", "_") + ".html"


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def write_html(results: Sequence[Result], target: str, directory: Path) -> None:
    """An Autobahn-style report: ``index.html`` (a matrix of every case by section, its
    verdict and time) and one page per case (its quote, verdict, reason, timings and the
    conversation as the tool saw it, every frame and FPDU decoded)."""
    directory.mkdir(parents=True, exist_ok=True)
    e = html.escape
    rows: list[str] = []
    previous: Case | None = None
    for r in results:
        if group_header(r.case, previous) is not None:
            rows.append(f'<tr><th colspan="5">{e(group_of(r.case))}</th></tr>')
        previous = r.case
        mark = _MARKS[r.status]
        rows.append(
            f'<tr class="{r.status}"><td><a href="{case_page_name(r.case)}">{e(r.case.id)}</a>'
            f"</td><td>{e(r.case.title)}</td><td>{e(str(r.case.level))}</td>"
            f"<td>{mark}</td><td>{r.seconds:.3f}s</td></tr>"
        )
        log = "\n".join(r.observed) or "(nothing was sent or received)"
        roles = ", ".join(sorted(str(x) for x in r.case.roles))
        needs = ", ".join(sorted(str(x) for x in r.case.needs)) or "nothing"
        reason = f"<p><b>{e(str(r.status))}:</b> {e(r.reason)}</p>" if r.reason else ""
        body = (
            f'<p><a href="index.html">all cases</a></p><h1>{e(r.case.id)}: {mark}</h1>'
            f"<p>{e(r.case.title)}</p><h2>The rule</h2><blockquote>{e(r.case.quote)}"
            f"</blockquote><p>Level {e(str(r.case.level))}; target roles {e(roles)}; needs "
            f"{e(needs)}</p>"
            f'<h2>Verdict</h2><p class="{r.status}">{mark} in {r.seconds:.3f}s</p>{reason}'
            f"<h2>Wire log</h2><p>Seconds from the start of the case; every frame and FPDU "
            f"decoded.</p><pre>{e(log)}</pre>"
        )
        (directory / case_page_name(r.case)).write_text(_page(r.case.id, body))
    index = (
        f"<h1>iwarp conformance</h1><p>Target: {e(target)}</p><p>{e(summary_line(results))}"
        f"</p><table><tr><th>case</th><th>the target must</th><th>level</th><th>verdict</th>"
        f"<th>time</th></tr>{''.join(rows)}</table>"
    )
    (directory / "index.html").write_text(_page("iwarp conformance", index))
