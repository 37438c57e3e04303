"""What a queue pair offers whatever drives it.

The asyncio and the blocking ``QueuePair`` differ only in how they wait;
what they report and the verbs that never wait are here, once, on top of
the sans-IO :class:`~iwarp.rdma.endpoint.QueuePairEndpoint`.
"""

from __future__ import annotations

from iwarp._typing import Buffer
from iwarp.errors import IwarpError, LocalProtocolError
from iwarp.mpa.events import MpaParams
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.simple import ReadInto, ReadTarget, WriteData, read_target, write_source
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import ReadWR, RecvWR, SendWR, Sge, WriteWR

__all__ = ["QueuePairFront"]


class QueuePairFront:
    """The adapter-independent half of a queue pair.

    An adapter sets ``pd`` and, once the TCP connection exists, ``_endpoint``;
    before that the state reads as "not connected".
    """

    pd: ProtectionDomain
    _endpoint: QueuePairEndpoint | None = None

    @property
    def endpoint(self) -> QueuePairEndpoint:
        """The sans-IO queue pair (for inspection; drive it through this object)."""
        if self._endpoint is None:
            raise LocalProtocolError("the queue pair is not connected")
        return self._endpoint

    @property
    def params(self) -> MpaParams:
        """The negotiated MPA parameters (CRC, markers, IRD/ORD, MULPDU, RTR...)."""
        params = self.endpoint.params
        if params is None:
            raise LocalProtocolError("the queue pair is not connected")
        return params

    @property
    def stream(self) -> RdmapStream:
        """The RDMAP core (for inspection)."""
        stream = self.endpoint.stream
        if stream is None:
            raise LocalProtocolError("the queue pair is not connected")
        return stream

    @property
    def error(self) -> IwarpError | None:
        """The error that ended the connection, if any."""
        return None if self._endpoint is None else self._endpoint.error

    @property
    def terminate(self) -> TerminateHeader | None:
        """The Terminate that ended the stream (sent or received), if any."""
        return None if self._endpoint is None else self._endpoint.terminate

    @property
    def terminate_received(self) -> bool:
        """The peer's Terminate ended the stream."""
        return self._endpoint is not None and self._endpoint.terminate_received

    @property
    def end_reason(self) -> str:
        """Why the connection ended (Terminate fields, error), for messages."""
        return "connection closed" if self._endpoint is None else self._endpoint.end_reason

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        """Register memory in this queue pair's protection domain."""
        return self.pd.register(buffer, access, address=address)

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer; its completion goes to ``recv_cq``."""
        self.endpoint.post_recv(wr)

    # -- the simple calls' work requests (the adapters post them and wait) --

    def _send_wr(self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None) -> SendWR:
        wr_id = self.endpoint.next_wr_id()
        return SendWR(data, wr_id, solicited=solicited, invalidate_stag=invalidate_stag)

    def _write_wr(
        self, data: WriteData, remote_stag: int, remote_to: int, offset: int, length: int | None
    ) -> WriteWR:
        source = write_source(data, offset, length)
        return WriteWR(source, remote_stag, remote_to, self.endpoint.next_wr_id())

    def _read_wr(
        self, local: ReadInto, remote_stag: int, remote_to: int, offset: int, length: int | None
    ) -> tuple[ReadTarget, ReadWR]:
        target = read_target(self.pd, local, offset, length)
        return target, ReadWR(target.sge, remote_stag, remote_to, self.endpoint.next_wr_id())
