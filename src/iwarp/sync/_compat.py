"""The connection contract over the VI/TCP core, which does not keep it yet.

Temporary: the wrapper maps the core's current method names onto
:class:`iwarp.contract.Connection`. It adds no protocol behaviour; it goes
away when :class:`~iwarp.vitcp.connection.VitcpConnection` keeps the
contract itself.
"""

from __future__ import annotations

from iwarp._typing import Buffer
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.events import ConnectionClosed as VitcpClosed
from iwarp.vitcp.events import Event as VitcpEvent

__all__ = ["VitcpCore"]


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
        return self._seen(self.conn.receive_data(data, now))

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
        return self._seen(self.conn.handle_timer(now))

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[VitcpEvent]:
        return self._seen(self.conn.connection_lost(now, reason))

    @property
    def must_close(self) -> bool:
        return self._over

    def set_emss(self, emss: int) -> None:
        pass  # VI/TCP segments by its negotiated MTU, not the EMSS
