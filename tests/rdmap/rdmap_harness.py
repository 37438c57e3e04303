"""Two RDMAP streams wired back to back (no MPA), for the core's tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.events import Event, TerminateReceived, TerminateSent
from iwarp.rdmap.memory import MemoryRegistry, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import Completion

NO_RTR = RtrFlags(0)


@dataclass
class Side:
    stream: RdmapStream
    pd: ProtectionDomain
    events: list[Event] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)

    def completions(self) -> list[Completion]:
        return [e for e in self.events if isinstance(e, Completion)]

    def terminates_received(self) -> list[TerminateReceived]:
        return [e for e in self.events if isinstance(e, TerminateReceived)]

    def terminates_sent(self) -> list[TerminateSent]:
        return [e for e in self.events if isinstance(e, TerminateSent)]


def make_pair(
    *,
    mulpdu: int = 1024,
    ird: int = 4,
    ord: int = 4,
    peer_ird: int | None = None,
    peer_ord: int | None = None,
    rtr: RtrFlags = NO_RTR,
    accept: RtrFlags | None = None,
) -> tuple[Side, Side]:
    """An initiator and a responder sharing one STag space, separate PDs."""
    registry = MemoryRegistry()
    pd_a, pd_b = registry.alloc_pd(), registry.alloc_pd()
    a = RdmapStream(pd_a, initiator=True, mulpdu=mulpdu, ird=ird, ord=ord, rtr=rtr)
    b = RdmapStream(
        pd_b,
        initiator=False,
        mulpdu=mulpdu,
        ird=ird if peer_ird is None else peer_ird,
        ord=ord if peer_ord is None else peer_ord,
        rtr=rtr if accept is None else accept,
    )
    return Side(a, pd_a, a.take_events()), Side(b, pd_b, b.take_events())


def pump(a: Side, b: Side, *, rounds: int = 10_000) -> None:
    """Move ULPDUs both ways until neither side has anything to send."""
    for _ in range(rounds):
        moved = False
        for src, dst in ((a, b), (b, a)):
            out = src.stream.ulpdus_to_send(limit=1 << 16)
            src.events.extend(src.stream.take_events())
            for ulpdu in out:
                raw = bytes(ulpdu)
                src.sent.append(raw)
                dst.events.extend(dst.stream.handle_ulpdu(raw))
                moved = True
        if not moved:
            return
    raise AssertionError("pump did not settle")
