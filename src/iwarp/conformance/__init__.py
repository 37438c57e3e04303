"""``iwarp conformance``: an MPA/DDP/RDMAP conformance suite (an h2spec for iWARP).

Cases are named by spec and section (``rfc5044/7.1.1/3``), quote the text
they check, and run against a live target over TCP, one connection each.
The area modules register them on import; :func:`all_cases` returns them in
report order. See docs/conformance.md.
"""

from __future__ import annotations

from iwarp.conformance.model import REGISTRY, Case

__all__ = ["all_cases"]

_AREAS = (
    "cases_mpa",
    "cases_rfc6581",
    "cases_framing",
    "cases_ddp",
    "cases_rdmap",
    "cases_rfc7306",
    "cases_culley",
)


def all_cases() -> list[Case]:
    """Every registered case, in report order."""
    import importlib

    for name in _AREAS:
        try:
            importlib.import_module(f"iwarp.conformance.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"iwarp.conformance.{name}":
                raise
    return list(REGISTRY.values())
