"""What a conformance case is, the registry of all cases, and their outcomes.

A :class:`Case` names the spec text it checks (``spec/section/n``, the level
MUST or SHOULD, a short quote), which end of the connection the target must
play, and what cooperation it needs beyond MPA (a posted receive, an
advertised buffer, markers...). Its ``run`` function drives a
:class:`~iwarp.conformance.session.Session` and returns normally to pass,
raises :class:`~iwarp.conformance.terms.CaseFailed` with what was observed, or
:class:`~iwarp.conformance.terms.CaseSkipped`
when the target lacks something the case needs. Cases are registered once,
at import time of the area modules, by :func:`case`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from iwarp.conformance.terms import BOTH, Need, TargetRole

if TYPE_CHECKING:
    from iwarp.conformance.session import Session

__all__ = [
    "REGISTRY",
    "Case",
    "Level",
    "Result",
    "Status",
    "case",
    "matches",
    "select",
]


class Level(StrEnum):
    """RFC 2119 strength of the text a case checks; SHOULD cases run with --strict."""

    MUST = "MUST"
    SHOULD = "SHOULD"


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Case:
    """One check of one rule."""

    id: str
    #: What the target must do, in one line.
    title: str
    #: The spec text checked: section and a short quote.
    quote: str
    run: Callable[[Session], None] = field(repr=False, compare=False)
    level: Level = Level.MUST
    roles: frozenset[TargetRole] = BOTH
    needs: frozenset[Need] = frozenset()
    #: Seconds this case may take; None means the runner's default.
    timeout: float | None = None
    #: The rules the case enforces, as short tags ("crc", "pd-length", "terminate"):
    #: a target that breaks one of them must fail every case tagged with it.
    covers: frozenset[str] = frozenset()
    #: The case waits for a close from the target's own startup timer (RFC 5044 §7.1.2
    #: rules 8 and 10), which no answer bounds: it waits the run's startup wait
    #: (:class:`~iwarp.conformance.pace.StartupWait`), not ``timeout``.
    timer: bool = False

    @property
    def idle(self) -> bool:
        """The case only holds a connection to a Responder until its timer closes it: it
        puts no load on the target, so the runner starts it beside the other cases, even
        at ``-j 1``, instead of adding its wait to theirs."""
        return self.timer and TargetRole.INITIATOR not in self.roles

    @property
    def spec(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def section(self) -> str:
        parts = self.id.split("/")
        return parts[1] if len(parts) > 2 else ""

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            "quote": self.quote,
            "level": str(self.level),
            "roles": sorted(str(r) for r in self.roles),
            "needs": sorted(str(n) for n in self.needs),
            "covers": sorted(self.covers),
            "timer": self.timer,
            "idle": self.idle,
        }


@dataclass(slots=True)
class Result:
    """The outcome of one case against one target."""

    case: Case
    status: Status
    #: Why it failed or was skipped (empty for a pass).
    reason: str = ""
    #: What was seen on the wire, one line each: frames, bytes, the Terminate, timing.
    observed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            **self.case.as_dict(),
            "status": str(self.status),
            "reason": self.reason,
            "observed": list(self.observed),
            "seconds": round(self.seconds, 3),
        }


#: Every case, by id, in registration (report) order.
REGISTRY: Final[dict[str, Case]] = {}


def case(
    id: str,
    title: str,
    quote: str,
    *,
    level: Level = Level.MUST,
    roles: Iterable[TargetRole] = BOTH,
    needs: Iterable[Need] = (),
    timeout: float | None = None,
    covers: Iterable[str] = (),
    timer: bool = False,
) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    """Register the decorated function as the case ``id``."""

    def register(run: Callable[[Session], None]) -> Callable[[Session], None]:
        add(
            Case(
                id,
                title,
                quote,
                run,
                level,
                frozenset(roles),
                frozenset(needs),
                timeout,
                frozenset(covers),
                timer,
            )
        )
        return run

    return register


def add(item: Case) -> None:
    """Register one case; ids are unique."""
    if item.id in REGISTRY:
        raise ValueError(f"duplicate conformance case id {item.id}")
    REGISTRY[item.id] = item


def matches(case_id: str, pattern: str) -> bool:
    """Whether ``pattern`` selects ``case_id``.

    An exact id selects that case only (``rfc5044/7.1.1/1`` is not
    ``rfc5044/7.1.1/10``); a pattern ending in ``/`` selects the ids under it;
    any other pattern is a spec or a section (``rfc5041``, ``rfc5041/7.2``)
    and selects the ids under it as whole path segments.
    """
    if pattern.endswith("/"):
        return case_id.startswith(pattern)
    return case_id == pattern or case_id.startswith(pattern + "/")


def select(
    cases: Iterable[Case],
    prefixes: Sequence[str] = (),
    *,
    strict: bool = False,
    role: TargetRole | None = None,
) -> list[Case]:
    """Cases that a pattern selects (all without one; see :func:`matches`), MUST only
    unless strict."""
    chosen = []
    for item in cases:
        if prefixes and not any(matches(item.id, p) for p in prefixes):
            continue
        if item.level is Level.SHOULD and not strict:
            continue
        if role is not None and role not in item.roles:
            continue
        chosen.append(item)
    return chosen
