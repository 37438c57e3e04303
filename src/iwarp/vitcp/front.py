"""What a connected VI offers whatever drives it.

The asyncio and the blocking ``VitcpEndpoint`` differ only in how they wait
and move octets; the calls that never wait and what they report are here,
once, on top of :class:`~iwarp.vitcp.endpoint.ViEndpointState` (so the two
cannot drift apart).
"""

from __future__ import annotations

from iwarp._typing import Buffer
from iwarp.vitcp.config import Negotiated
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.endpoint import ViEndpointState
from iwarp.vitcp.errors import VitcpClosedError
from iwarp.vitcp.events import Event
from iwarp.vitcp.memory import ViMemoryRegion

__all__ = ["ViEndpointFront"]


class ViEndpointFront:
    """The adapter-independent half of a VI endpoint.

    An adapter sets ``_core`` and ``_state`` and implements :meth:`_output`
    (and :meth:`_read_arrived` if it reads only inside calls).
    """

    _core: VitcpConnection
    _state: ViEndpointState

    # -- for the adapters ---------------------------------------------------------

    def _output(self) -> None:
        """Handle what the core queued (events, segments) after an application call."""
        raise NotImplementedError

    def _read_arrived(self) -> None:
        """Take in what already arrived, without waiting (an adapter that
        reads in the background has nothing to do)."""

    # -- state ----------------------------------------------------------------------

    @property
    def params(self) -> Negotiated:
        """What the CE exchange settled.

        :raises VitcpClosedError: the VI was never connected.
        """
        params = self._core.params
        if params is None:
            raise VitcpClosedError("not connected")
        return params

    @property
    def connection(self) -> VitcpConnection:
        """The sans-IO core (for inspection)."""
        return self._core

    @property
    def keep_posted(self) -> int:
        """Receive descriptors kept posted: each Send received (and each RDMA
        Write with immediate data) posts one more."""
        return self._state.keep_posted

    @keep_posted.setter
    def keep_posted(self, count: int) -> None:
        self._state.keep_posted = count

    @property
    def close_reason(self) -> VitcpClosedError | None:
        """Why the VI ended (with the protocol error, if any); None while open."""
        return self._state.close_reason

    # -- calls that never wait ----------------------------------------------------------

    def register(
        self,
        buffer: Buffer,
        *,
        address: int | None = None,
        remote_write: bool = True,
        remote_read: bool = True,
    ) -> ViMemoryRegion:
        """Register memory for RDMA (see :meth:`VitcpConnection.register`)."""
        return self._core.register(
            buffer, address=address, remote_write=remote_write, remote_read=remote_read
        )

    def post_receive(self, count: int = 1, capacity: int | None = None) -> None:
        """Post receive descriptors."""
        self._core.post_receive(count, capacity)
        self._output()

    def pending_notices(self) -> list[Event]:
        """Other events received so far (RDMA Write received, read served,
        remote error), without waiting."""
        self._read_arrived()
        return self._state.take_notices()
