"""Two sans-IO RdmaConnections joined by an in-memory byte pipe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import RequestReceived
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.events import StackEvent as Event
from iwarp.rdmap.memory import MemoryRegistry, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import Completion


@dataclass
class End:
    conn: RdmaConnection
    pd: ProtectionDomain
    events: list[Event] = field(default_factory=list)
    wire: list[bytes] = field(default_factory=list)

    def completions(self) -> list[Completion]:
        return [e for e in self.events if isinstance(e, Completion)]


def make_ends(
    initiator: MpaConfig | None = None,
    responder: MpaConfig | None = None,
    *,
    emss: int = 1460,
    on_stream: Callable[[RdmapStream], None] | None = None,
) -> tuple[End, End]:
    registry = MemoryRegistry()
    pd_a, pd_b = registry.alloc_pd(), registry.alloc_pd()
    a = RdmaConnection(Role.INITIATOR, pd_a, initiator, emss=emss)
    b = RdmaConnection(Role.RESPONDER, pd_b, responder, emss=emss, on_stream=on_stream)
    return End(a, pd_a), End(b, pd_b)


def pump(a: End, b: End, *, rounds: int = 100_000, chunk: int = 1 << 20) -> None:
    """Exchange octets until both ends are quiet; accept Requests on the way."""
    for _ in range(rounds):
        moved = False
        for src, dst in ((a, b), (b, a)):
            src.events.extend(src.conn.take_events())
            data = b"".join(bytes(x) for x in src.conn.data_to_send())
            src.events.extend(src.conn.take_events())
            if not data:
                continue
            moved = True
            src.wire.append(data)
            for i in range(0, len(data), chunk):
                events = dst.conn.receive_data(data[i : i + chunk], 0.0)
                dst.events.extend(events)
                for event in events:
                    if isinstance(event, RequestReceived):
                        dst.conn.accept()
                        dst.events.extend(dst.conn.take_events())
        if not moved:
            return
    raise AssertionError("pump did not settle")
