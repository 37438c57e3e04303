"""What a queue pair offers whatever drives it.

The asyncio and the blocking ``QueuePair`` differ only in how they wait;
what they report, the verbs that never wait, the table that hands the
endpoint's events to them and the bookkeeping of the simple calls (which
work request is theirs, when it failed, why a receive cannot wait) are
here, once, on top of the sans-IO
:class:`~iwarp.rdma.endpoint.QueuePairEndpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final

from iwarp._typing import Buffer
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.events import MpaParams
from iwarp.rdma.data_args import ReadInto, ReadTarget, WriteData, read_target, write_source
from iwarp.rdma.endpoint import (
    QueuePairEndpoint,
)
from iwarp.rdma.errors import (
    AtomicsNotSupportedError,
    ConnectionTerminatedError,
    RdmaError,
    refuses_extensions,
)
from iwarp.rdma.events import (
    CompletionQueued,
    Ended,
    Established,
    MessageQueued,
    WorkFinished,
)
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import NO_MASK, TerminateHeader
from iwarp.rdmap.work import (
    CompareSwapWR,
    Completion,
    FetchAddWR,
    ImmediateWR,
    ReadWR,
    RecvWR,
    SendQueueWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)

__all__ = ["QueuePairFront"]

#: Completions of RFC 7306 Atomic Operations.
_ATOMIC_OPCODES: Final = frozenset({WorkOpcode.ATOMIC_FETCH_ADD, WorkOpcode.ATOMIC_CMP_SWAP})
#: Compare and swap every bit (RFC 7306 §5.1.2 without masks).
ALL_BITS: Final = NO_MASK

#: Which method of a queue pair takes each of its endpoint's events.
_HANDLERS: Final = {
    Established: "_on_established",
    CompletionQueued: "_on_completion",
    WorkFinished: "_on_work",
    MessageQueued: "_on_message",
    Ended: "_on_ended",
}


class QueuePairFront:
    """The adapter-independent half of a queue pair.

    An adapter sets ``pd`` and, once the TCP connection exists, ``_endpoint``
    (before that the state reads as "not connected"); it implements
    :meth:`_output` and overrides the ``_on_*`` handlers of the events it
    waits for.
    """

    pd: ProtectionDomain
    _endpoint: QueuePairEndpoint | None = None
    #: What :meth:`_take_message`'s error names to get a receive pool.
    _opened_by = "connect/serve"
    #: Each event type's handler, resolved per class (:meth:`_dispatch`).
    _handlers: ClassVar[dict[type, Callable[[Any, Any], None]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._handlers = {kind: getattr(cls, name) for kind, name in _HANDLERS.items()}

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

    def post_send(self, wr: SendQueueWR) -> None:
        """Post a Send, RDMA Write, RDMA Read, or an RFC 7306 FetchAdd,
        CmpSwap or Immediate Data; its completion goes to ``send_cq``. What
        TCP takes now is written before this returns.

        :raises ConnectionTerminatedError: the connection has ended.
        """
        self.endpoint.post_send(wr)
        self._output()

    # -- for the adapters --------------------------------------------------------

    def _output(self) -> None:
        """Write what the endpoint queued, as far as TCP takes it now."""
        raise NotImplementedError

    def _write(self, frame: bytes) -> None:
        """Write octets the endpoint handed out directly, ahead of its next
        ``data_to_send``, as far as TCP takes them now (the rest waits, in order)."""
        raise NotImplementedError

    def _dispatch(self, events: list[Any]) -> None:
        """Hand each of the endpoint's events to its ``_on_*`` handler."""
        handlers = self._handlers
        for event in events:
            handlers[type(event)](self, event)

    # The handlers an adapter overrides for what it waits on; by default an
    # event needs nothing (the endpoint keeps the state: results, ended...).

    def _on_established(self, event: Established) -> None:
        """MPA is in full operation."""

    def _on_completion(self, event: CompletionQueued) -> None:
        """A completion was queued on ``event.queue``."""

    def _on_work(self, event: WorkFinished) -> None:
        """A tracked work request (a simple call's) finished."""

    def _on_message(self, event: MessageQueued) -> None:
        """A message arrived in the receive pool."""

    def _on_ended(self, event: Ended) -> None:
        """The connection ended (before or after full operation)."""

    def _handler_failed(self) -> None:
        """The application's handler raised: unless the connection ended
        already, the stream ends with a Terminate (RDMAP local catastrophic
        error), which the adapter then writes before it closes TCP."""
        endpoint = self.endpoint
        if endpoint.ended is None:
            endpoint.abort(IwarpError("the handler failed"))
            self._dispatch(endpoint.take_events())

    def _startup_error(self, reason: str = "connection closed during MPA startup") -> IwarpError:
        """Why MPA startup did not complete: the endpoint's error, else TCP
        closed with ``reason``."""
        return self.endpoint.error or MpaError(MpaErrorCode.TCP_CLOSED, reason)

    def _take_message(self, closed: bool) -> bytes | None:
        """The next message of the receive pool; None while a wait may bring one.

        :raises LocalProtocolError: the queue pair has no receive pool.
        :raises ConnectionTerminatedError: the connection ended (or TCP is
            gone: ``closed``) and no message is left.
        """
        endpoint = self.endpoint
        data = endpoint.take_message()
        if data is None:
            if not endpoint.receive_buffers:
                raise LocalProtocolError(
                    f"no receive pool: pass receive_buffers to {self._opened_by}"
                )
            if closed or endpoint.ended is not None:
                raise ConnectionTerminatedError(self.end_reason)
        return data

    # -- the simple calls' work requests (the adapters post them and wait) --

    def _sent_at_once(
        self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None
    ) -> bool:
        """The simple ``send`` on an idle queue pair: a small Send is framed
        and complete at once by the small-message lane, with no work request
        (:meth:`~iwarp.rdma.endpoint.QueuePairEndpoint.send_now`), and
        written as far as TCP takes it. False: post it as a work request."""
        frame = self.endpoint.send_now(data, solicited=solicited, invalidate_stag=invalidate_stag)
        if frame is None:
            return False
        self._write(frame)
        return True

    def _post_tracked(self, wr: SendQueueWR) -> Completion | None:
        """Post a simple call's work request, tracked (its completion does
        not go to ``send_cq``). Returns the completion when it finished while
        posted (a Send or Write that TCP took at once), else None: the
        adapter waits for its :class:`WorkFinished`."""
        endpoint = self.endpoint
        endpoint.track(wr.wr_id)
        try:
            self.post_send(wr)
        except BaseException:
            endpoint.untrack(wr.wr_id)
            raise
        return endpoint.result(wr.wr_id)

    def _checked(self, completion: Completion) -> Completion:
        """A simple call's completion.

        :raises AtomicsNotSupportedError: an Atomic Operation failed because
            the peer answered as one without RFC 7306 does.
        :raises RdmaError: it failed otherwise.
        """
        if not completion.ok:
            terminate = self.terminate
            if completion.opcode in _ATOMIC_OPCODES and refuses_extensions(terminate):
                raise AtomicsNotSupportedError(completion, terminate)
            raise RdmaError(completion, terminate)
        return completion

    def _send_wr(self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None) -> SendWR:
        wr_id = self.endpoint.next_wr_id()
        return SendWR(data, wr_id, solicited=solicited, invalidate_stag=invalidate_stag)

    def _write_wr(
        self, data: WriteData, remote_stag: int, remote_to: int, offset: int, length: int | None
    ) -> WriteWR:
        source = write_source(data, offset, length)
        return WriteWR(source, remote_stag, remote_to, self.endpoint.next_wr_id())

    def _fetch_add_wr(self, stag: int, to: int, add: int, mask: int) -> FetchAddWR:
        return FetchAddWR(stag, to, add, mask, self.endpoint.next_wr_id())

    def _compare_swap_wr(
        self, stag: int, to: int, compare: int, swap: int, compare_mask: int, swap_mask: int
    ) -> CompareSwapWR:
        wr_id = self.endpoint.next_wr_id()
        return CompareSwapWR(stag, to, compare, swap, compare_mask, swap_mask, wr_id)

    def _immediate_wr(self, data: bytes, solicited: bool) -> ImmediateWR:
        return ImmediateWR(bytes(data), self.endpoint.next_wr_id(), solicited=solicited)

    @staticmethod
    def _original(completion: Completion) -> int:
        """The original remote word an Atomic Operation's completion carries."""
        assert completion.original is not None
        return completion.original

    def _read_wr(
        self, local: ReadInto, remote_stag: int, remote_to: int, offset: int, length: int | None
    ) -> tuple[ReadTarget, ReadWR]:
        target = read_target(self.pd, local, offset, length)
        return target, ReadWR(target.sge, remote_stag, remote_to, self.endpoint.next_wr_id())
