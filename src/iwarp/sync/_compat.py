"""The connection contract over cores that do not keep it yet.

Temporary: each wrapper maps one core's current method names onto the
contract :class:`~iwarp.sync._driver.Core` describes. It adds no protocol
behaviour; it goes away as the cores adopt the contract themselves.
"""

from __future__ import annotations

from iwarp._typing import Buffer
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import Event as MpaEvent
from iwarp.rdma.connection import Event as RdmaEvent
from iwarp.rdma.connection import RdmaConnection
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.events import ConnectionClosed as VitcpClosed
from iwarp.vitcp.events import Event as VitcpEvent

__all__ = ["MpaCore", "RdmaCore", "VitcpCore"]


class MpaCore:
    def __init__(self, conn: MpaConnection) -> None:
        self.conn = conn

    def receive_data(self, data: Buffer, now: float) -> list[MpaEvent]:
        return self.conn.receive_data(data, now)

    def data_to_send(self) -> list[Buffer]:
        return self.conn.data_to_send()

    @property
    def has_data_to_send(self) -> bool:
        return False

    def take_events(self) -> list[MpaEvent]:
        return self.conn.take_events()

    def get_timer(self) -> float | None:
        return self.conn.get_timer()

    def handle_timer(self, now: float) -> list[MpaEvent]:
        return self.conn.handle_timer(now)

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[MpaEvent]:
        return self.conn.connection_lost(now, reason)

    @property
    def must_close(self) -> bool:
        return self.conn.must_close


class RdmaCore:
    def __init__(self, conn: RdmaConnection) -> None:
        self.conn = conn

    def receive_data(self, data: Buffer, now: float) -> list[RdmaEvent]:
        return self.conn.receive_data(data, now)

    def data_to_send(self) -> list[Buffer]:
        return self.conn.data_to_send(64 << 10)

    @property
    def has_data_to_send(self) -> bool:
        return self.conn.has_data_to_send

    def take_events(self) -> list[RdmaEvent]:
        return self.conn.take_events()

    def get_timer(self) -> float | None:
        return self.conn.get_timer()

    def handle_timer(self, now: float) -> list[RdmaEvent]:
        return self.conn.handle_timer(now)

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[RdmaEvent]:
        return self.conn.connection_lost(now, reason)

    @property
    def must_close(self) -> bool:
        return self.conn.must_close


class VitcpCore:
    def __init__(self, conn: VitcpConnection) -> None:
        self.conn = conn
        self._over = False

    def _seen(self, events: list[VitcpEvent]) -> list[VitcpEvent]:
        if any(isinstance(e, VitcpClosed) for e in events):
            self._over = True
        return events

    def receive_data(self, data: Buffer, now: float) -> list[VitcpEvent]:
        if not data:
            return self.connection_lost(now, "peer closed the connection")
        return self._seen(self.conn.receive_data(data) + self.conn.take_events())

    def data_to_send(self) -> list[Buffer]:
        return [part for segment in self.conn.segments_to_send() for part in segment.parts]

    @property
    def has_data_to_send(self) -> bool:
        return False

    def take_events(self) -> list[VitcpEvent]:
        return self._seen(self.conn.take_events())

    def get_timer(self) -> float | None:
        return self.conn.get_timer()

    def handle_timer(self, now: float) -> list[VitcpEvent]:
        self.conn.handle_timer(now)
        return self.take_events()

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[VitcpEvent]:
        self.conn.connection_lost(now)
        return self.take_events()

    @property
    def must_close(self) -> bool:
        return self._over
