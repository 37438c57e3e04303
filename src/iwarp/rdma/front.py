"""A queue pair's front: what it offers and decides whatever drives it.

:class:`QueuePairFront` runs one sans-IO
:class:`~iwarp.rdma.endpoint.QueuePairEndpoint` through a driver it holds
(:class:`~iwarp.contract.FrontDriver`): it makes the endpoint once TCP is
up, hands each of the endpoint's events to its handler (a table), keeps the
startup outcome, the completion queues and the receive high-water mark,
offers the verbs that never wait (``post_send``, ``post_recv``,
``register``) and the simple calls' bookkeeping (which work request is
theirs, when it failed, why a receive cannot wait). The asyncio and the
blocking ``QueuePair`` derive from it and add only the calls that wait.

:class:`~iwarp.rdma.cqfront.CompletionQueueFront` (imported here) is the
one semantics of a completion queue in every adapter.

When a call completes and what it raises once the connection ended (one
error, :meth:`QueuePairFront.ended_error`, on both adapters): docs/errors.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Final

from iwarp._typing import Buffer
from iwarp.contract import FrontDriver
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import MpaParams
from iwarp.rdma.cqfront import CompletionQueueFront
from iwarp.rdma.data_args import ReadInto, ReadTarget, WriteData, read_target, write_source
from iwarp.rdma.endpoint import QueuePairEndpoint, QueuePairOptions
from iwarp.rdma.errors import (
    AtomicsNotSupportedError,
    ConnectionTerminatedError,
    RdmaError,
    connection_ended,
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
from iwarp.rdmap.stream import RTR_STAG, RdmapStream
from iwarp.rdmap.wire import NO_MASK, TerminateHeader
from iwarp.rdmap.work import (
    CompareSwapWR,
    Completion,
    CompletionStatus,
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

__all__ = ["ALL_BITS", "RECEIVE_HIGH_WATER", "CompletionQueueFront", "QueuePairFront", "Setup"]

#: Completions of RFC 7306 Atomic Operations.
_ATOMIC_OPCODES: Final = frozenset({WorkOpcode.ATOMIC_FETCH_ADD, WorkOpcode.ATOMIC_CMP_SWAP})
#: Compare and swap every bit (RFC 7306 §5.1.2 without masks).
ALL_BITS: Final = NO_MASK
#: Octets received into the receive pool and not taken above which the
#: driver stops reading from TCP; it reads again below a quarter of it.
RECEIVE_HIGH_WATER: Final = 4 << 20

#: What ``setup`` gets: the queue pair, to post its receives on.
Setup = Callable[[Any], None]


#: Which method of a queue pair takes each of its endpoint's events
#: (MessageQueued: :meth:`QueuePairFront.dispatch` itself, one wake per call).
_HANDLERS: Final = {
    Established: "_on_established",
    CompletionQueued: "_on_completion",
    WorkFinished: "_on_work",
    Ended: "_on_ended",
}


class QueuePairFront:
    """The adapter-independent half of a queue pair, on the driver it holds.

    :param role: MPA Initiator or Responder.
    :param pd: the protection domain of the queue pair.
    :param options: connect's or serve/listen's settings (:mod:`iwarp.rdma.options`).
    :param setup: called with the queue pair once in full operation.
    :param send_cq: where Send, Write, Read and atomic completions go
        (default: a queue of its own).
    :param recv_cq: where receive completions go (default: ``send_cq``
        with ``options.shared_cq``, else a queue of its own).

    Both queues may be shared with other queue pairs.

    The adapter sets ``_driver`` before TCP is up; the driver calls
    :meth:`open`, :meth:`dispatch` and :meth:`lost`.
    """

    #: RDMAP closes both halves at once (a FIN ends the stream).
    keep_open_after_eof = True
    fin_on_clean_close = False
    #: What :meth:`_take_message`'s error names to get a receive pool.
    _opened_by = "connect/serve"
    #: The adapter's completion queue class, for the queues made by default.
    _cq_type: ClassVar[type[CompletionQueueFront]] = CompletionQueueFront
    _endpoint: QueuePairEndpoint | None = None
    #: The receive high-water mark paused the driver's reading (its
    #: ``resume_reading`` is called only then, not per message taken).
    _reading_paused = False
    #: The driver that moves the endpoint's octets.
    _driver: FrontDriver
    #: The peer's address as ``host:port`` (the adapter sets it), for errors.
    peer_address: str | None = None
    #: A call raised :meth:`ended_error` (close() then does not repeat it).
    _end_told = False
    #: The sink of flush()'s zero-length RDMA Reads, registered on first use.
    _flush_sink: Sge | None = None

    def __init__(
        self,
        role: Role,
        pd: ProtectionDomain,
        options: QueuePairOptions,
        setup: Setup | None = None,
        send_cq: CompletionQueueFront | None = None,
        recv_cq: CompletionQueueFront | None = None,
    ) -> None:
        self.role = role
        self.pd = pd
        self.config: MpaConfig = options.config
        self._options = options
        self._setup = setup
        self._established = False
        #: Completions of posted Sends, RDMA Writes and Reads.
        self.send_cq = self._cq_type() if send_cq is None else send_cq
        if recv_cq is None:
            recv_cq = self.send_cq if options.shared_cq else self._cq_type()
        #: Completions of posted receives.
        self.recv_cq = recv_cq
        self.send_cq._attach(self)
        recv_cq._attach(self)

    # -- for the driver ------------------------------------------------------------

    def open(self, now: float, emss: int) -> QueuePairEndpoint:
        """TCP is up: make the endpoint (MPA startup begins)."""
        setup, self._setup = self._setup, None
        # The endpoint drops its setup once called: no cycle through self.
        call = None if setup is None else lambda: setup(self)
        self._endpoint = self._options.endpoint(self.role, self.pd, now, emss, call)
        return self._endpoint

    def dispatch(self, events: list[Any]) -> None:
        """Hand each of the endpoint's events to its handler; pause reading
        while the receive pool holds more than :data:`RECEIVE_HIGH_WATER`."""
        queued = False
        for event in events:
            if type(event) is MessageQueued:
                queued = True  # (per received message: no handler call)
            else:
                _TABLE[type(event)](self, event)
        if queued:  # the receive calls waiting check the pool again: one wake
            self._driver.wake()
        endpoint = self._endpoint
        if endpoint is not None and endpoint.message_octets > RECEIVE_HIGH_WATER:
            self._reading_paused = True
            self._driver.pause_reading()

    def lost(self) -> None:
        """TCP is gone: the completion queues' waiting calls check again."""
        self.send_cq._detach(self)
        self.recv_cq._detach(self)

    def _on_established(self, event: Established) -> None:
        self._established = True
        self._driver.started()
        self._driver.wake()

    def _on_completion(self, event: CompletionQueued) -> None:
        endpoint = self._endpoint
        assert endpoint is not None
        cq = self.send_cq if event.queue is endpoint.send_cq else self.recv_cq
        cq._push(event.queue.poll())

    def _on_work(self, event: WorkFinished) -> None:
        self._driver.wake(event.wr_id)

    def _on_ended(self, event: Ended) -> None:
        self._driver.wake()

    # -- startup ---------------------------------------------------------------------

    def _startup_over(self) -> bool:
        """MPA startup ended: in full operation, failed, or TCP is gone."""
        endpoint = self._endpoint
        return (
            self._established
            or self._driver.gone
            or (endpoint is not None and endpoint.ended is not None)
        )

    def _opened(self) -> None:
        """After startup: nothing, in full operation; else TCP closes (after
        what is queued: a Terminate, a reject's Reply) and the startup error
        is raised.

        :raises IwarpError: why startup did not complete.
        """
        endpoint = self._endpoint
        if self._established and endpoint is not None and endpoint.ended is None:
            return
        self._driver.flush()
        self._driver.close()
        self.lost()
        ended = None if endpoint is None else endpoint.ended
        raise self._startup_error(
            "connection closed during MPA startup" if ended is None else ended.reason
        )

    # -- state ------------------------------------------------------------------------

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
        """The Terminate that ended the stream (sent or received), if any.
        An application that read it was told: close() does not raise it."""
        terminate = None if self._endpoint is None else self._endpoint.terminate
        if terminate is not None:
            self._end_told = True
        return terminate

    @property
    def terminate_received(self) -> bool:
        """The peer's Terminate ended the stream."""
        return self._endpoint is not None and self._endpoint.terminate_received

    @property
    def end_reason(self) -> str:
        """Why the connection ended (Terminate fields, error), for messages."""
        return "connection closed" if self._endpoint is None else self._endpoint.end_reason

    def ended_error(self, call: str | None = None) -> ConnectionTerminatedError:
        """The error every call raises once the connection ended: the same
        cause and fields each time, naming the peer and the Terminate
        (layer, type, code, the RFC's name) or the close that ended it;
        ``call`` (the verb's name) comes first (``rdma_read failed: ...``)."""
        self._end_told = True
        endpoint = self._endpoint
        if endpoint is None:
            return connection_ended(self.peer_address, None, False, False, self.end_reason, call)
        return connection_ended(
            self.peer_address,
            endpoint.terminate,
            endpoint.terminate_received,
            endpoint.closed_by_peer,
            endpoint.end_reason,
            call,
        )

    def register(
        self, buffer: Buffer, access: Access = Access.LOCAL_WRITE, *, address: int = 0
    ) -> MemoryRegion:
        """Register memory in this queue pair's protection domain."""
        return self.pd.register(buffer, access, address=address)

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer; its completion goes to ``recv_cq``.

        :raises ConnectionTerminatedError: the connection has ended.
        """
        try:
            self.endpoint.post_recv(wr)
        except ConnectionTerminatedError:
            raise self.ended_error("post_recv") from None

    def post_send(self, wr: SendQueueWR) -> None:
        """Post a Send, RDMA Write, RDMA Read, or an RFC 7306 FetchAdd,
        CmpSwap or Immediate Data; its completion goes to ``send_cq``. What
        TCP takes now is written before this returns.

        :raises ConnectionTerminatedError: the connection has ended.
        """
        self._post(wr, "post_send")

    def _post(self, wr: SendQueueWR, call: str) -> None:
        """:meth:`post_send` for ``call`` (the verb its error names)."""
        try:
            self.endpoint.post_send(wr)
        except ConnectionTerminatedError:
            raise self.ended_error(call) from None
        self._driver.flush()

    def post_send_list(self, wrs: Iterable[SendQueueWR]) -> None:
        """Post several work requests, in order, as verbs' ``ibv_post_send``
        takes a list of them: what TCP takes of all of them is written once,
        after the last (small messages kept in flight go out in one
        ``sendmsg`` instead of one ``send`` each). Each completes as if
        posted alone. A bad request raises as :meth:`post_send` would: the
        ones before it stay posted (and are written), the rest are not
        posted.

        :raises ConnectionTerminatedError: the connection has ended.
        """
        endpoint = self.endpoint
        try:
            for wr in wrs:
                endpoint.post_send(wr)
        except ConnectionTerminatedError:
            raise self.ended_error("post_send_list") from None
        finally:
            self._driver.flush()

    # -- for the adapters' calls ----------------------------------------------------

    def _handler_failed(self) -> None:
        """The application's handler raised: unless the connection ended
        already, the stream ends with a Terminate (RDMAP local catastrophic
        error), which the adapter then writes before it closes TCP."""
        endpoint = self.endpoint
        if endpoint.ended is None:
            endpoint.abort(IwarpError("the handler failed"))
            self.dispatch(endpoint.take_events())

    def _startup_error(self, reason: str = "connection closed during MPA startup") -> IwarpError:
        """Why MPA startup did not complete: the endpoint's error, else TCP
        closed with ``reason``."""
        error = None if self._endpoint is None else self._endpoint.error
        if error is None:
            error = MpaError(MpaErrorCode.TCP_CLOSED, reason)
        peer = self.peer_address
        if peer is not None and isinstance(error, MpaError) and peer not in error.message:
            error.args = (f"{error.message} (peer {peer})", *error.args[1:])  # say where
        return error

    def _take_message(self) -> bytes | None:
        """The next message of the receive pool; None while a wait may bring
        one. Reading resumes once the pool holds less than a quarter of
        :data:`RECEIVE_HIGH_WATER`.

        :raises LocalProtocolError: the queue pair has no receive pool.
        :raises ConnectionTerminatedError: the connection ended (or TCP is
            gone) and no message is left.
        """
        endpoint = self._endpoint  # (per message: not the checking property)
        if endpoint is None:
            raise LocalProtocolError("the queue pair is not connected")
        data = endpoint.take_message()
        if data is None:
            if not endpoint.receive_buffers:
                raise LocalProtocolError(
                    f"no receive pool: pass receive_buffers to {self._opened_by}"
                )
            if endpoint.ended is not None or self._driver.gone:
                raise self.ended_error("receive")
        elif self._reading_paused and endpoint.message_octets < RECEIVE_HIGH_WATER // 4:
            self._reading_paused = False
            self._driver.resume_reading()
        return data

    def _taker(self) -> Callable[[], bytes | None]:
        """What a receive asks first for the next message: the endpoint's
        own ``take_message`` (a C call on the fast path) while reading runs
        and nothing needs checking on a message, else :meth:`_take_message`.
        Only a message counts: on None the receive asks
        :meth:`_take_message`, which says why none can come."""
        endpoint = self._endpoint
        if endpoint is None or self._reading_paused:
            return self._take_message
        return endpoint.take_message

    # -- the simple calls' work requests (the adapters post them and wait) --

    def _sent_at_once(
        self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None
    ) -> bool:
        """The simple ``send`` on an idle queue pair: a small Send is framed
        and complete at once by the small-message lane, with no work request
        (:meth:`~iwarp.rdma.endpoint.QueuePairEndpoint.send_now`), and
        written as far as TCP takes it. False: post it as a work request."""
        endpoint = self._endpoint  # (per message: not the checking property)
        if endpoint is None:
            raise LocalProtocolError("the queue pair is not connected")
        try:
            frame = endpoint.send_now(data, solicited=solicited, invalidate_stag=invalidate_stag)
        except ConnectionTerminatedError:
            raise self.ended_error("send") from None
        if frame is None:
            return False
        self._driver.write(frame)
        return True

    def _post_tracked(self, wr: SendQueueWR, call: str) -> Completion | None:
        """Post a simple call's work request, tracked (its completion does
        not go to ``send_cq``). Returns the completion when it finished while
        posted (a Send or Write that TCP took at once), else None: the
        adapter waits for its :class:`WorkFinished`. ``call``: the verb's
        name, for its errors."""
        endpoint = self.endpoint
        endpoint.track(wr.wr_id)
        try:
            self._post(wr, call)
        except BaseException:
            endpoint.untrack(wr.wr_id)
            raise
        return endpoint.result(wr.wr_id)

    def _finished(self, wr_id: int, call: str) -> Completion | None:
        """A tracked work request's completion once it finished; None while
        a wait may bring it.

        :raises ConnectionTerminatedError: TCP is gone without it (naming ``call``).
        """
        completion = self.endpoint.result(wr_id)
        if completion is None and self._driver.gone:
            raise self.ended_error(call)
        return completion

    def _abandon(self, wr_id: int) -> None:
        """A simple call stopped waiting (timed out, cancelled): its
        completion goes to ``send_cq``."""
        if self._endpoint is not None:
            self._endpoint.untrack(wr_id)

    def _close_endpoint(self) -> None:
        """Close the queue pair: outstanding work is flushed (status FLUSHED)."""
        if self._endpoint is not None:
            self.dispatch(self._endpoint.close())

    def _untold_end(self) -> ConnectionTerminatedError | None:
        """What close() reports: the error of a Terminate (sent or received)
        that ended the connection before it and that no call raised yet."""
        endpoint = self._endpoint
        if endpoint is None or endpoint.terminate is None or self._end_told:
            return None
        return self.ended_error()

    def _flush_wr(self) -> ReadWR:
        """flush()'s proof: a zero-length RDMA Read, which RFC 5040 §5.5 rule
        12 orders behind every earlier Send and Write at the peer, so its
        response says they were placed. The peer must not check its STag
        (§5.2.1); it is nonzero all the same, as for RTRs (some hardware
        fails STag 0)."""
        sink = self._flush_sink
        if sink is None:
            sink = self._flush_sink = Sge(self.pd.register(bytearray(0), Access.LOCAL_WRITE))
        return ReadWR(sink, RTR_STAG, 0, self.endpoint.next_wr_id())

    def _checked(self, completion: Completion, call: str) -> Completion:
        """A simple call's completion; ``call`` is the verb its error names
        (never the internal work request id).

        :raises ConnectionTerminatedError: it never executed (status
            FLUSHED): what ended the connection.
        :raises AtomicsNotSupportedError: an Atomic Operation failed because
            the peer answered as one without RFC 7306 does.
        :raises RdmaError: the peer refused it otherwise.
        """
        if not completion.ok:
            terminate = self.terminate
            atomics_refused = completion.opcode in _ATOMIC_OPCODES and refuses_extensions(terminate)
            if completion.status is CompletionStatus.FLUSHED and not atomics_refused:
                raise self.ended_error(call)
            endpoint = self._endpoint
            # The Terminate that refused it ended the connection: name it as the end's error does.
            ended = None
            if endpoint is not None and endpoint.ended is not None:
                ended = self.ended_error()
            self._end_told = terminate is not None  # this error names the Terminate
            if atomics_refused:
                raise AtomicsNotSupportedError(completion, terminate, call=call, ended=ended)
            raise RdmaError(completion, terminate, call=call, ended=ended)
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


#: Each event type's handler (:meth:`QueuePairFront.dispatch`).
_TABLE: Final[dict[type, Callable[[QueuePairFront, Any], None]]] = {
    kind: getattr(QueuePairFront, name) for kind, name in _HANDLERS.items()
}
