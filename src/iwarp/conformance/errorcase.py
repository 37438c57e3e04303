"""One way to write "send this broken segment, expect that Terminate" cases.

:func:`error_cases` registers two cases per error: the MUST case checks the
Terminate's layer, type and code (RFC 5040 §4.8 Figure 9, RFC 5041 §7.2);
the SHOULD case checks the header copies Figure 10 asks for (the DDP header
and segment length, and the RDMA header of a Read Request).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from iwarp.conformance.craft import Segment
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import Answer, Region, Session
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need

__all__ = ["Broken", "apart", "error_cases", "foreign_region", "judge_foreign", "unknown_stag"]


@dataclass(frozen=True, slots=True)
class Broken:
    """A broken segment and the headers the Terminate should copy back."""

    segment: Segment
    what: str
    rdma_header: bytes | None = None


def unknown_stag(s: Session) -> int:
    """An STag the target did not advertise (and is unlikely to have)."""
    region = s.cooperation.region
    stag = 0x7E57_0000 | 0x5A
    if region is not None and region.stag == stag:
        stag ^= 0x0100_0000
    return stag


def error_cases(
    must_id: str,
    copies_id: str,
    title: str,
    quote: str,
    *,
    layer: int,
    etype: int,
    codes: int | tuple[int, ...] | None,
    build: Callable[[Session], Broken],
    needs: Iterable[Need] = (),
    copy_ddp: bool = True,
    also: Sequence[Answer] = (),
    skip: Mapping[tuple[int, int, int], str] | None = None,
    covers: Iterable[str] = (),
    wait: Iterable[Need] | None = None,
) -> None:
    """Register the MUST case (Terminate fields) and the SHOULD case (header copies).

    ``also``: other answers the RFC allows for the same fault; ``skip``:
    Terminates that show the target cannot be judged by this case (see
    :meth:`Session.expect_terminate`); ``covers``: the rule the broken field
    breaks (both cases fail against a target that does not check it);
    ``wait``: cooperation to wait for in the data phase beyond ``needs`` (used
    when the target offers it, not needed).
    """
    needs = tuple(needs)
    rules = ("terminate", *covers)
    waits = None if wait is None else (*needs, *wait)

    def provoke(s: Session) -> tuple[Broken, object]:
        s.data_phase(waits)
        for need in needs:
            s.need(need)
        broken = build(s)
        s.send_ulpdu(broken.segment.octets, broken.what)
        s.send_fence()
        got = s.expect_terminate(layer, etype, codes, also=also, skip=skip)
        return broken, got

    def fields(s: Session) -> None:
        provoke(s)

    def copies(s: Session) -> None:
        broken, got = provoke(s)
        s.check_copies(
            got,  # type: ignore[arg-type]
            ddp_header=broken.segment.header if copy_ddp else None,
            segment_length=len(broken.segment),
            rdma_header=broken.rdma_header,
        )

    case(must_id, title, quote, needs=needs, covers=rules)(fields)
    copy_quote = (
        'RFC 5040 §4.8 Figure 10: the Terminate "Includes DDP Header and DDP Segment Length"'
        + '; RFC 5041 §7.1: "The DDP layer SHOULD include in the error report the DDP Header"'
    )
    case(
        copies_id,
        f"{title}: the Terminate copies the headers back",
        copy_quote,
        level=Level.SHOULD,
        needs=needs,
        covers=rules,
    )(copies)


def foreign_region(s: Session) -> tuple[Session, Region]:
    """A second connection, and the buffer the target advertised on the first.

    The case then uses the first connection's STag on the second one. Skipped
    when the target advertised no buffer, or the same STag on both (nothing
    tells the two streams' STags apart).
    """
    s.data_phase((Need.REGION,))
    region = s.region()
    return apart(s, region), region


def apart(s: Session, region: Region) -> Session:
    """A second connection to the target, which advertised another STag than ``region``'s
    there (see :func:`foreign_region`)."""
    other = s.another()
    other.data_phase((Need.REGION,))
    theirs = other.cooperation.region
    if theirs is not None and theirs.stag == region.stag:
        raise CaseSkipped(
            f"the target advertised STag {region.stag:#x} on both connections: it is not "
            "limited to one stream; a target with an STag per connection enables the case"
        )
    return other


def judge_foreign(
    other: Session, answers: Sequence[Answer], skip: Mapping[tuple[int, int, int], str]
) -> None:
    """The other connection must answer with a Terminate in ``answers``; an access that
    goes through (no Terminate within 1 s) means the target's STags are not limited to
    one stream (RFC 5040 §8.1.1 item 2 leaves that to the implementation): skipped."""
    (layer, etype, codes), *also = answers
    try:
        other.expect_terminate(layer, etype, codes, also=also, skip=skip, within=1.0)
    except CaseFailed:
        if other.link.ended is None and not any(got.is_terminate for got in other.received):
            raise CaseSkipped(
                "the access on the second connection went through: this target's STags are "
                "not limited to one stream (RFC 5040 §8.1.1 item 2: a matter of the "
                "implementation); a target with an STag per stream enables the case"
            ) from None
        raise
