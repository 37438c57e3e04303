"""The RDMAP core: one RDMAP stream over DDP over any ULPDU transport, sans-IO.

Feed received ULPDUs to :meth:`RdmapStream.handle_ulpdu`, post work with
:meth:`~RdmapStream.post_send` / :meth:`~RdmapStream.post_recv`, take the
ULPDUs to send with :meth:`~RdmapStream.ulpdus_to_send` and hand them to
MPA; events (completions, Terminates, readiness) come back from
``handle_ulpdu`` and from :meth:`~RdmapStream.take_events`.

What it enforces:

* Sends into posted receive buffers, in order; RDMA Writes and Read
  Responses into registered memory; every remote access checked against
  the STag's region (valid, same protection domain, rights, bounds, TO wrap)
  *before* any octet moves (RFC 5041 §7.1, RFC 5040 §7.2, RFC 5042).
* ORD: at most ``ord`` Read Requests outstanding; later work waits behind
  them, in order (RFC 5040 §6.1). IRD: the peer may have at most ``ird``
  Read Requests being answered; one more finds no buffer on queue 1.
* Completions in submission order (RFC 5040 §5.5 rule 15).
* The first error in received data is answered by one Terminate carrying
  the RFC's layer, type, code and header copies (RFC 5040 §4.8, §7.1);
  later segments are dropped, work is flushed (RFC 5041 §7.1).
* RFC 7306: FetchAdd and CmpSwap (at most ``atomic_ord`` outstanding, on
  queue 1 with the Read Requests; the answers on queue 3), answered in
  order with the Read Responses, each executed when its turn to be answered
  comes (so after every earlier Read Response was generated, §5.4, §7);
  Immediate Data (exactly 8 octets into a posted receive buffer).
* RFC 6581: an initiator sends the negotiated RTR first (zero-length Send,
  or RDMA Write / Read with STag 1); a responder sends nothing until the
  initiator's first message, swallows an RTR, and answers a first message
  that is not an RTR it offered with Terminate LLP/MPA code 7.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from iwarp._accel import kernels
from iwarp._typing import Buffer
from iwarp.ddp.errors import (
    DdpError,
    DdpTaggedCode,
    DdpTaggedError,
    DdpUntaggedCode,
    DdpUntaggedError,
)
from iwarp.ddp.placement import (
    DdpReceiver,
    PlacedRuns,
    PostedBuffer,
    TaggedSegment,
    UntaggedQueue,
    UntaggedSegment,
)
from iwarp.ddp.segmentation import MAX_MESSAGE, OutgoingMessage
from iwarp.ddp.wire import (
    LAST_FLAG,
    MAX_MSN,
    MAX_TO,
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
    QueueNumber,
    fits_to_space,
)
from iwarp.errors import (
    LocalProtocolError,
    MpaError,
    MpaErrorCode,
    RemoteProtocolError,
)
from iwarp.mpa.runs import SegmentRun, UlpduBatch
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.atomics import ATOMIC_DEPTH, check_target, execute
from iwarp.rdmap.errors import (
    LocalCatastrophicError,
    RemoteOperationCode,
    RemoteOperationError,
    RemoteProtectionCode,
    RemoteProtectionError,
)
from iwarp.rdmap.events import (
    Event,
    StreamReady,
    TerminateReceived,
    TerminateSent,
)
from iwarp.rdmap.memory import Access, AccessFault, MemoryRegion, ProtectionDomain
from iwarp.rdmap.state import StreamInput, StreamState, transition
from iwarp.rdmap.terminate import (
    READ_FAULTS,
    TAGGED_FAULTS,
    about_read,
    remote_status,
    terminate_header,
)
from iwarp.rdmap.wire import (
    ATOMIC_REQUEST_SIZE,
    ATOMIC_RESPONSE_SIZE,
    IMMEDIATE_DATA_SIZE,
    INVALIDATE_OPCODES,
    OPCODE_QUEUE,
    OPCODE_TAGGED,
    RDMAP_VERSION,
    READ_REQUEST_SIZE,
    SOLICITED_OPCODES,
    TERMINATE_CONTROL_SIZE,
    AtomicRequest,
    AtomicResponse,
    RdmapOpcode,
    ReadRequest,
    TerminateHeader,
    rdmap_control,
    split_control,
)
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

__all__ = ["RTR_STAG", "RdmapStream"]

#: The STag of RFC 6581 zero-length RDMA Write / Read RTRs: nonzero, because
#: some hardware fails tagged segments with STag 0 (siw uses 1 as well).
RTR_STAG = 1
_NO_RTR = RtrFlags(0)
#: The longest Terminate header: control, segment length, untagged DDP header,
#: Read Request header (RFC 5040 §4.8).
_TERMINATE_MAX = TERMINATE_CONTROL_SIZE + 2 + UNTAGGED_HEADER_SIZE + READ_REQUEST_SIZE
#: Room for the Terminate we receive (a little more, for peers that pad).
_TERMINATE_BUFFER = 128


def _check_remote(stag: int, to: int) -> None:
    if not 0 <= stag <= 0xFFFFFFFF or not 0 <= to <= MAX_TO:
        raise LocalProtocolError(f"remote STag {stag} / TO {to} out of range (32 / 64 bits)")


def _check_word(name: str, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFFFFFFFFFF:
        raise LocalProtocolError(f"{name} {value} is not a 64-bit unsigned value")


_LOCAL_WRITE = int(Access.LOCAL_WRITE)
_REMOTE_WRITE = int(Access.REMOTE_WRITE)
_REMOTE_READ = int(Access.REMOTE_READ)
#: The small-message lane's Send header (RFC 5041 §4.3): queue 0, as an int.
_SEND_QUEUE: Final = int(QueueNumber.SEND)
#: Looked up once: an enum member's attribute lookup costs more than the
#: rest of a per-message check (the small-message lane's).
_OPERATIONAL: Final = StreamState.OPERATIONAL
_pack_untagged = UNTAGGED_HEADER.pack
#: What a spare posted-buffer entry holds instead of memory (send_taken).
_NO_VIEW: Final = memoryview(b"")


@dataclass(eq=False, slots=True)
class _Work:
    """One send-queue entry from posting to completion."""

    opcode: WorkOpcode
    wr_id: int
    #: Internal work (an RTR) completes without a completion event.
    internal: bool = False
    payload: memoryview | None = None
    rdmap: int = 0
    invalidate: int = 0
    remote_stag: int = 0
    remote_to: int = 0
    request: ReadRequest | None = None
    sink: MemoryRegion | None = None
    received: int = 0
    #: A Read Response that arrived out of order: what is placed.
    placed: PlacedRuns | None = None
    #: The Read Response's L segment arrived.
    last_seen: bool = False
    status: CompletionStatus | None = None  # set when done
    #: RFC 7306: the Atomic Request, and the original value its response brought.
    atomic: AtomicRequest | None = None
    original: int | None = None
    #: The queue-1 MSN of a Read or Atomic Request (0: not sent yet).
    msn: int = 0


@dataclass(eq=False, slots=True)
class _Response:
    """A Read Response to send: source octets and the sink to address."""

    source: memoryview
    request: ReadRequest


@dataclass(eq=False, slots=True)
class _AtomicJob:
    """An Atomic Request that passed the Responder's checks, waiting for its
    turn among the responses to execute and be answered (RFC 7306 §5.4)."""

    region: MemoryRegion
    request: AtomicRequest


@dataclass(eq=False, slots=True)
class _Outgoing:
    """The message being segmented, and what finishing it means."""

    message: OutgoingMessage
    work: _Work | None = None
    response: bool = False
    #: An Atomic Response (else a Read Response, when ``response``).
    atomic: bool = False


#: Reads whose sinks a receive lane is given at once (the head first).
_LANE_READS: Final = 4
#: Record kinds of a receive lane (``recv_lane`` in src/iwarp/_lanes.c).
_LANE_WRITE: Final = 1
_LANE_READ: Final = 2


class LaneWindows(NamedTuple):
    """What a receive lane may place (:meth:`RdmapStream.lane_windows`), as
    the ``recv_lane`` kernel takes it."""

    #: DDP DV and RDMAP RV of every segment.
    version: int
    #: The unfinished tagged message: (STag, next TO, RsvdULP), or None.
    tagged: tuple[int, int, int] | None
    #: The RDMAP control octet of an RDMA Write.
    write_ctl: int
    #: That of an RDMA Read Response.
    read_ctl: int
    #: The outstanding Reads' sinks: (STag, sink octets, sink TO, placed).
    reads: tuple[tuple[int, memoryview, int, int], ...]
    #: Plain Sends may be placed into :attr:`sends`.
    send_ok: bool
    #: The control octets of Send and Send with Solicited Event.
    send_ctl: int
    send_se_ctl: int
    #: The head posted buffer's MSN and the octets of its message placed.
    msn: int
    received: int
    #: The posted receive queue (items with a ``view``), head first.
    sends: deque[PostedBuffer[RecvWR | None]]


class StreamLoan(NamedTuple):
    """What a queue pair's fast path (:mod:`iwarp.rdma.fastpath`) owns
    while it runs (:meth:`RdmapStream.lend`)."""

    #: DDP DV and RDMAP RV of every segment.
    version: int
    #: The control octets of Send and Send with Solicited Event.
    send_ctl: int
    send_se_ctl: int
    #: The MSN of the next Send sent, and of the next one received.
    send_msn: int
    recv_msn: int
    #: The posted receive queue, head first (the fast path checks whose).
    posted: deque[PostedBuffer[RecvWR | None]]


def _released(stag: int, to: int, length: int, rsvdulp: int, first: bool) -> memoryview:
    raise LocalProtocolError("the stream was released")


class RdmapStream:
    """One RDMAP stream (the protocol half of a queue pair).

    :param pd: the protection domain of the stream: remote accesses may
        reach only regions of this PD.
    :param initiator: the MPA initiator (sends the RTR, may send at once).
    :param mulpdu: the largest ULPDU MPA accepts (DDP segments fit it).
    :param ird: inbound Read Requests the peer may have outstanding.
    :param ord: outbound Read Requests we may have outstanding.
    :param rtr: RFC 6581 peer-to-peer: for an initiator, the one RTR type
        the Reply selected (``RtrFlags.SEND``/``WRITE``/``READ``); for a
        responder, the types it accepts. Empty for client-server mode.
    :param version: DDP/RDMAP version (MPA's ``params.ddp_version``): 1, or 0
        for RDMA Consortium peers.
    :param atomic_ird: RFC 7306 Atomic Requests the peer may have
        outstanding (queue-1 slots kept besides IRD's); 0 refuses them with
        "Unexpected OpCode", as a stack without Atomic Operations does.
    :param atomic_ord: Atomic Requests we may have outstanding (0: none).
    """

    def __init__(
        self,
        pd: ProtectionDomain,
        *,
        initiator: bool,
        mulpdu: int,
        ird: int = 1,
        ord: int = 1,
        rtr: RtrFlags = _NO_RTR,
        version: int = RDMAP_VERSION,
        atomic_ird: int = ATOMIC_DEPTH,
        atomic_ord: int = ATOMIC_DEPTH,
    ) -> None:
        if atomic_ird < 0 or atomic_ord < 0:
            raise LocalProtocolError("atomic_ird and atomic_ord must not be negative")
        rtr &= RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ
        if version not in (0, 1):
            raise LocalProtocolError(f"DDP/RDMAP version {version} is not 0 or 1")
        if initiator and rtr and rtr not in (RtrFlags.SEND, RtrFlags.WRITE, RtrFlags.READ):
            raise LocalProtocolError("an initiator sends exactly one RTR type")
        if mulpdu < UNTAGGED_HEADER_SIZE + _TERMINATE_MAX:
            raise LocalProtocolError(f"MULPDU {mulpdu} is too small for RDMAP headers")
        if initiator and rtr == RtrFlags.READ and ord < 1:
            raise LocalProtocolError("a Read RTR needs ORD >= 1 (RFC 6581 §9.1)")
        self.pd = pd
        self.initiator = initiator
        self.mulpdu = mulpdu
        self.ird = ird
        self.ord = ord
        self.rtr = rtr
        #: DDP DV and RDMAP RV of every message: 1 (RFC 5040/5041), or 0 with
        #: an RDMAC peer (RFC 5044 Appendix C; RFC 5040 §4.1 "both are valid").
        self.version = version
        self._control = [rdmap_control(op, version) for op in range(16)]
        #: What the first two octets of an RDMA Write segment must be for the
        #: fast path (DDP T and DV under the mask; the RDMAP control octet).
        self._write_ddp = TAGGED_FLAG | version
        self._write_rdmap = self._control[RdmapOpcode.RDMA_WRITE]
        self._send_rdmap = self._control[RdmapOpcode.SEND]
        self._send_se_rdmap = self._control[RdmapOpcode.SEND_WITH_SE]
        #: The control octets of Sends without Invalidate (the fast path's).
        self._plain_sends = (self._send_rdmap, self._send_se_rdmap)
        self.state = StreamState.OPERATIONAL if initiator else StreamState.WAIT_PEER
        self._recv: UntaggedQueue[RecvWR | None] = UntaggedQueue(QueueNumber.SEND)
        #: A posted-buffer entry the small-message lane took (send_taken),
        #: emptied, for repost_recv to fill again instead of making one.
        self._spare: PostedBuffer[RecvWR | None] | None = None
        self._reads: UntaggedQueue[RecvWR | None] = UntaggedQueue(QueueNumber.READ_REQUEST)
        self._terms: UntaggedQueue[RecvWR | None] = UntaggedQueue(QueueNumber.TERMINATE)
        self.atomic_ird = atomic_ird
        self.atomic_ord = atomic_ord
        #: Queue-1 slots hold an Atomic Request header when atomics are on.
        self._slot_size = ATOMIC_REQUEST_SIZE if atomic_ird else READ_REQUEST_SIZE
        # One slot per Read Request that may be outstanding (IRD), and per
        # Atomic Request (RFC 7306 §5.2.2 rule 4): they may arrive out of
        # order, so each MSN has its own.
        for _ in range(ird + atomic_ird):
            self._reads.post(memoryview(bytearray(self._slot_size)), None)
        self._terms.post(memoryview(bytearray(_TERMINATE_BUFFER)), None)
        queues = {0: self._recv, 1: self._reads, 2: self._terms}
        # RFC 7306 §5.2.2 rule 5: one queue-3 buffer per Atomic Request we
        # may have outstanding.
        self._answers: UntaggedQueue[RecvWR | None] = UntaggedQueue(QueueNumber.ATOMIC_RESPONSE)
        if atomic_ord:
            for _ in range(atomic_ord):
                self._answers.post(memoryview(bytearray(ATOMIC_RESPONSE_SIZE)), None)
            queues[QueueNumber.ATOMIC_RESPONSE] = self._answers
        registry = pd.registry
        #: RFC 7306 §5: placements into regions with REMOTE_ATOMIC (these
        #: STags) hold the lock of the Atomic Operations' read-modify-write.
        self._atomic_stags = registry.atomic_stags
        self._atomic_lock = registry.atomic_lock
        self._ddp: DdpReceiver[RecvWR | None] = DdpReceiver(
            queues,
            self._resolve_tagged,
            version=version,
            guarded=registry.atomic_stags,
            guard=registry.atomic_lock,
        )
        #: Opcodes accepted, with the Tagged flag each must have (RFC 7306:
        #: Atomic Requests only when we answer them, Responses when we ask).
        self._opcode_tagged = {
            op: tagged
            for op, tagged in OPCODE_TAGGED.items()
            if (op != RdmapOpcode.ATOMIC_REQUEST or atomic_ird)
            and (op != RdmapOpcode.ATOMIC_RESPONSE or atomic_ord)
        }
        self._msn = [1, 1, 1, 1]  # next MSN we send, per queue
        self._oaq: deque[_Work] = deque()  # Atomic Requests awaiting a response
        self._request_id = 0  # the last Atomic Request Identifier used
        # Read and Atomic Requests delivered, their responses not yet
        # generated: each kind within its own limit (IRD, atomic_ird).
        self._inbound = [0, 0]
        self._sq: deque[_Work] = deque()  # posted, not started
        self._inflight: deque[_Work] = deque()  # started, not completed
        self._orq: deque[_Work] = deque()  # Read Requests awaiting a response
        self._irq: deque[_Response | _AtomicJob] = deque()  # responses to send, in order
        self._current: _Outgoing | None = None
        #: Read Responses a send lane took and is still writing from memory
        #: (an Atomic Operation after them waits: RFC 7306 §7).
        self._lane_responses = 0
        self._terminate: SegmentRun | None = None
        self._rx_tagged_opcode = -1
        self._events: list[Event] = []
        #: Called with each successful receive completion as it happens;
        #: True: it was taken (no event). A receive pool's owner copies the
        #: message out and reposts the buffer here, inside the batch.
        self.on_receive: Callable[[Completion], bool] | None = None
        if initiator:
            self._events.append(StreamReady())
            if rtr:
                self._sq.append(self._rtr_work(rtr))

    # -- posting (local input) ----------------------------------------------

    def post_send(self, wr: SendQueueWR) -> None:
        """Queue a Send, RDMA Write, RDMA Read, or an RFC 7306 FetchAdd,
        CmpSwap or Immediate Data.

        :raises LocalProtocolError: the stream is terminated or closed, the
            local memory is not usable, or (Read) ORD is 0.
        """
        self.state = transition(self.state, StreamInput.POST)
        make_work = _SEND_QUEUE_WORK.get(type(wr))
        if make_work is None:
            raise LocalProtocolError(f"not a send-queue work request: {wr!r}")
        self._sq.append(make_work(self, wr))

    def post_recv(self, wr: RecvWR) -> None:
        """Post a receive buffer for one incoming Send (consumed in order)."""
        if self.state is not StreamState.OPERATIONAL:  # the same state after a POST
            self.state = transition(self.state, StreamInput.POST)
        view = self._local(wr.local, _LOCAL_WRITE)
        self._recv.post(view, wr, guarded=wr.local.region.stag in self._atomic_stags)

    def repost_recv(self, wr: RecvWR, view: memoryview) -> None:
        """:meth:`post_recv` again for a buffer it took and checked before,
        ``view`` being the memory that check gave (a receive pool's buffer,
        after its message was copied out): only the region's validity can
        have changed since, and only that is checked again.

        :raises LocalProtocolError: the region was invalidated or deregistered.
        """
        region = wr.local.region
        if not region.valid:
            raise LocalProtocolError(f"STag {region.stag:#010x} is invalidated or deregistered")
        if self.state is not _OPERATIONAL:
            self.state = transition(self.state, StreamInput.POST)
        # UntaggedQueue.post, inline: it runs per message of a receive pool.
        # The entry the small-message lane took last (send_taken) is no
        # one else's any more: it is refilled instead of a new one made.
        posted = self._spare
        if posted is None:
            posted = PostedBuffer(view, wr, region.stag in self._atomic_stags)
        else:
            self._spare = None
            posted.view = view
            posted.context = wr
            posted.guarded = region.stag in self._atomic_stags
        self._recv.buffers.append(posted)

    def claim_send(
        self,
        data: Sge | Buffer,
        solicited: bool = False,
        invalidate_stag: int | None = None,
        wr_id: int | None = None,
    ) -> tuple[bytes, Buffer] | None:
        """A Send (with Solicited Event and Invalidate as asked) taken as
        sent at once, as its one segment's DDP/RDMAP header and payload, when
        nothing else is queued, being sent or awaiting completion before it
        and the payload fits one segment (the small-message lane,
        :mod:`iwarp.rdma.small`, frames it). Its MSN is used; with a
        ``wr_id`` its completion is queued at once, as :meth:`runs_to_send`
        would make it; without, none is made: the caller takes the Send as
        complete once the segment is framed (nothing after that can fail
        it). None: nothing was done (post it with :meth:`post_send`).

        The segment is the one :meth:`post_send` and :meth:`runs_to_send`
        would make.

        :raises LocalProtocolError: as :meth:`post_send`.
        """
        if (
            self.state is not _OPERATIONAL
            or self._sq
            or self._inflight
            or self._irq
            or self._current is not None
        ):
            return None
        payload = data if type(data) is bytes else self._source(data)
        if len(payload) > self.mulpdu - UNTAGGED_HEADER_SIZE:
            return None
        if invalidate_stag is None:
            rdmap = self._send_se_rdmap if solicited else self._send_rdmap
            stag = 0
        else:
            if not 0 <= invalidate_stag <= 0xFFFFFFFF:
                raise LocalProtocolError(f"invalidate STag {invalidate_stag} is not 32-bit")
            opcode = (
                RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE
                if solicited
                else RdmapOpcode.SEND_WITH_INVALIDATE
            )
            rdmap, stag = self._control[opcode], invalidate_stag
        msns = self._msn
        msn = msns[_SEND_QUEUE]
        msns[_SEND_QUEUE] = (msn + 1) & 0xFFFFFFFF
        # The one segment is the last (L set), at MO 0.
        header = _pack_untagged(self.version | LAST_FLAG, rdmap, stag, _SEND_QUEUE, msn, 0)
        if wr_id is not None:
            self._events.append(
                Completion(wr_id, WorkOpcode.SEND, CompletionStatus.SUCCESS, len(payload))
            )
        return header, payload

    def _write_work(self, wr: WriteWR) -> _Work:
        _check_remote(wr.remote_stag, wr.remote_to)
        payload = self._source(wr.data)
        if not fits_to_space(wr.remote_to, len(payload)):
            raise LocalProtocolError("the RDMA Write would wrap the remote TO")
        work = _Work(WorkOpcode.RDMA_WRITE, wr.wr_id, payload=payload)
        work.remote_stag, work.remote_to = wr.remote_stag, wr.remote_to
        return work

    def _send_work(self, wr: SendWR) -> _Work:
        payload = self._source(wr.data)
        if wr.invalidate_stag is None:
            opcode = RdmapOpcode.SEND_WITH_SE if wr.solicited else RdmapOpcode.SEND
            invalidate = 0
        else:
            if not 0 <= wr.invalidate_stag <= 0xFFFFFFFF:
                raise LocalProtocolError(f"invalidate STag {wr.invalidate_stag} is not 32-bit")
            opcode = (
                RdmapOpcode.SEND_WITH_SE_AND_INVALIDATE
                if wr.solicited
                else RdmapOpcode.SEND_WITH_INVALIDATE
            )
            invalidate = wr.invalidate_stag
        return _Work(
            WorkOpcode.SEND,
            wr.wr_id,
            payload=payload,
            rdmap=self._control[opcode],
            invalidate=invalidate,
        )

    def _read_work(self, wr: ReadWR) -> _Work:
        _check_remote(wr.remote_stag, wr.remote_to)
        if self.ord < 1:
            raise LocalProtocolError("ORD is 0: RDMA Reads are not allowed on this stream")
        sink = self._local(wr.local, _LOCAL_WRITE)
        size = len(sink)
        region = wr.local.region
        request = ReadRequest(
            region.stag, region.address + wr.local.offset, size, wr.remote_stag, wr.remote_to
        )
        return _Work(WorkOpcode.RDMA_READ, wr.wr_id, request=request, sink=region)

    def _rtr_work(self, rtr: RtrFlags) -> _Work:
        empty = memoryview(b"")
        if rtr == RtrFlags.SEND:
            work = _Work(WorkOpcode.SEND, 0, internal=True, payload=empty)
            work.rdmap = self._control[RdmapOpcode.SEND]
            return work
        if rtr == RtrFlags.WRITE:
            work = _Work(WorkOpcode.RDMA_WRITE, 0, internal=True, payload=empty)
            work.remote_stag = RTR_STAG
            return work
        request = ReadRequest(RTR_STAG, 0, 0, RTR_STAG, 0)
        return _Work(WorkOpcode.RDMA_READ, 0, internal=True, request=request)

    def _local(self, sge: Sge, rights: int) -> memoryview:
        region = sge.region
        if not region.valid:
            raise LocalProtocolError(f"STag {region.stag:#010x} is invalidated or deregistered")
        if region.pd is not self.pd:
            raise LocalProtocolError("the region belongs to another protection domain")
        if not region.allows(rights):
            raise LocalProtocolError(f"the region lacks {Access(rights)!r}")
        size = sge.size
        if sge.offset < 0 or size < 0 or sge.offset + size > region.length:
            raise LocalProtocolError("the SGE lies outside its region")
        if size > MAX_MESSAGE:
            raise LocalProtocolError("a message must be shorter than 2**32 octets")
        return region.view[sge.offset : sge.offset + size]

    def _source(self, data: Sge | Buffer) -> memoryview:
        if isinstance(data, Sge):
            return self._local(data, 0)
        view = memoryview(data).cast("B")
        if len(view) > MAX_MESSAGE:
            raise LocalProtocolError("a message must be shorter than 2**32 octets")
        return view

    # -- sending --------------------------------------------------------------

    def set_mulpdu(self, mulpdu: int) -> None:
        """Use a new MULPDU from now on, for the message being segmented
        too (MPA's MULPDU follows the EMSS during full operation, RFC 5044
        §3, §4.5).

        :raises LocalProtocolError: too small for RDMAP's headers.
        """
        if mulpdu < UNTAGGED_HEADER_SIZE + _TERMINATE_MAX:
            raise LocalProtocolError(f"MULPDU {mulpdu} is too small for RDMAP headers")
        self.mulpdu = mulpdu
        if self._current is not None:
            self._current.message.set_mulpdu(mulpdu)

    @property
    def has_data_to_send(self) -> bool:
        """Whether :meth:`ulpdus_to_send` would return something now."""
        state = self.state
        if state is not _OPERATIONAL:  # checked first: it runs per message
            return state is StreamState.TERMINATING
        if self._current is not None:
            return True
        if self._irq:
            # An Atomic Operation waits for a lane writing the Read Responses before it.
            return not (self._lane_responses and self._atomic_next())
        if not self._sq:
            return False
        # ORD (or, for an Atomic Request, atomic_ord) may hold the head back.
        work = self._sq[0]
        if work.opcode is WorkOpcode.RDMA_READ:
            return len(self._orq) < self.ord
        return work.atomic is None or len(self._oaq) < self.atomic_ord

    @property
    def unsent(self) -> bool:
        """Posted work or Read Responses not yet fully handed to MPA (even if
        waiting on ORD or on the responder's first message)."""
        if self.state is StreamState.TERMINATING:
            return True
        if self.state is not StreamState.OPERATIONAL and self.state is not StreamState.WAIT_PEER:
            return False
        return bool(self._sq or self._irq or self._current is not None)

    def ulpdus_to_send(self, limit: int | None = None) -> list[bytearray]:
        """The next ULPDUs for MPA, in order, about ``limit`` octets at most.

        Messages are segmented lazily, so call again (after the transport
        drained) until it returns nothing. Send and Write work completes
        when its last segment is returned here. :meth:`runs_to_send` gives
        the same segments as runs, for framing in batches.
        """
        return [ulpdu for run in self.runs_to_send(limit) for ulpdu in run.ulpdus()]

    def runs_to_send(self, limit: int | None = None) -> list[SegmentRun]:
        """The next segments as runs (:class:`~iwarp.mpa.runs.SegmentRun`),
        about ``limit`` octets of ULPDUs at most (at least one segment; a
        segment that would not fit what is left of ``limit`` waits for the
        next call).

        Send and Write work completes when the run holding its last segment
        is returned.
        """
        out: list[SegmentRun] = []
        if self.state is StreamState.TERMINATING:
            assert self._terminate is not None
            out.append(self._terminate)
            self._terminate = None
            self.state = transition(self.state, StreamInput.TERMINATE_SENT)
            return out
        if self.state is not StreamState.OPERATIONAL:
            return out
        size = 0
        while limit is None or size < limit:
            current = self._current
            if current is None:
                if (out or self._lane_responses) and self._atomic_next():
                    # RFC 7306 §7: the responses before an Atomic Operation
                    # are framed, or written by a lane (their octets read),
                    # before it executes.
                    break
                current = self._current = self._next_message()
                if current is None:
                    break
            message = current.message
            segment = message.next_segment
            if out and limit is not None and limit - size < segment and 2 * segment <= limit:
                # What is left of the budget does not hold the next segment:
                # the next call frames it in a full run, rather than one
                # segment now (measured: half the runs at MTU 1500 held one
                # FPDU, each paying a whole run's Python). Segments larger
                # than half the budget (MTU 65536) still take one more, so a
                # call frames two of them rather than one.
                break
            run = message.next_run(None if limit is None else limit - size)
            if run is not None:
                out.append(run)
                size += run.stop - run.start + run.segments * len(run.header)
            if message.done:
                self._finish(current)
        return out

    def _next_message(self) -> _Outgoing | None:
        # Read Responses first: the peer's reads wait on them (RFC 5040 §5.5).
        if self._irq:
            response = self._irq.popleft()
            if isinstance(response, _AtomicJob):
                return self._atomic_answer(response)
            req = response.request
            message = OutgoingMessage.tagged(
                response.source,
                stag=req.sink_stag,
                to=req.sink_to,
                rsvdulp=self._control[RdmapOpcode.RDMA_READ_RESPONSE],
                version=self.version,
                mulpdu=self.mulpdu,
            )
            return _Outgoing(message, response=True)
        if not self._sq:
            return None
        work = self._sq[0]
        if work.atomic is not None or work.opcode is WorkOpcode.IMMEDIATE_DATA:
            extension = self._extension_message(work)
            if extension is None:
                return None
            message = extension
        elif work.opcode is WorkOpcode.RDMA_READ:
            if len(self._orq) >= self.ord:
                return None  # ORD reached: the queue waits (RFC 5040 §6.1)
            assert work.request is not None
            work.msn = self._next_msn(QueueNumber.READ_REQUEST)
            message = OutgoingMessage.untagged(
                work.request.pack(),
                qn=QueueNumber.READ_REQUEST,
                msn=work.msn,
                rsvdulp=self._control[RdmapOpcode.RDMA_READ_REQUEST],
                version=self.version,
                mulpdu=self.mulpdu,
            )
            self._orq.append(work)
        elif work.opcode is WorkOpcode.SEND:
            assert work.payload is not None
            message = OutgoingMessage.untagged(
                work.payload,
                qn=QueueNumber.SEND,
                msn=self._next_msn(QueueNumber.SEND),
                rsvdulp=work.rdmap,
                rsvdulp2=work.invalidate,
                mulpdu=self.mulpdu,
                version=self.version,
            )
        else:
            assert work.payload is not None
            message = OutgoingMessage.tagged(
                work.payload,
                stag=work.remote_stag,
                to=work.remote_to,
                rsvdulp=self._control[RdmapOpcode.RDMA_WRITE],
                version=self.version,
                mulpdu=self.mulpdu,
            )
        self._sq.popleft()
        self._inflight.append(work)
        return _Outgoing(message, work=work)

    # -- the send lane (iwarp.rdma.lanes) ---------------------------------------

    def take_message(self, min_octets: int) -> tuple[SegmentRun, object] | None:
        """Hand out the rest of the next message as one run, for a send lane
        that writes it whole: the message being segmented, or else the next
        Read Response, Send or RDMA Write when it carries at least
        ``min_octets`` octets (Read Requests and small messages keep
        :meth:`runs_to_send`). None: nothing was taken.

        The message counts as handed to MPA, as if :meth:`runs_to_send` had
        returned its runs, but its completion waits for
        :meth:`message_sent` with the returned token (the lane calls it once
        the kernel took every octet: until then the payload is still read).
        """
        if self.state is not StreamState.OPERATIONAL:
            return None
        current = self._current
        if current is None:
            if self._irq:
                head = self._irq[0]
                if isinstance(head, _AtomicJob):
                    return None  # an Atomic Response is 12 octets: the runs' way
                size = len(head.source)
            elif self._sq and self._sq[0].opcode is not WorkOpcode.RDMA_READ:
                payload = self._sq[0].payload
                size = -1 if payload is None else len(payload)
            else:
                return None
            if size < min_octets:
                return None
            current = self._next_message()
            if current is None:
                return None
        run = current.message.rest()
        if run is None:
            return None
        self._current = None
        if current.response:
            self._lane_responses += 1
        return run, current

    def message_sent(self, token: object) -> None:
        """Every octet of a message :meth:`take_message` handed out is with
        TCP: complete it as :meth:`runs_to_send` would have (nothing if the
        work was flushed meanwhile)."""
        assert isinstance(token, _Outgoing)
        if token.response:
            self._lane_responses -= 1
        work = token.work
        if work is not None and work.status is not None:
            return
        self._complete(token)

    def _next_msn(self, qn: int) -> int:
        msn = self._msn[qn]
        self._msn[qn] = (msn + 1) & 0xFFFFFFFF
        return msn

    def _finish(self, current: _Outgoing) -> None:
        self._current = None
        self._complete(current)

    def _complete(self, current: _Outgoing) -> None:
        if current.response:
            # The Read (or Atomic) Request's slot on queue 1 is free again (IRD).
            self._reads.post(memoryview(bytearray(self._slot_size)), None)
            self._inbound[current.atomic] -= 1
            return
        work = current.work
        if work is not None and work.opcode is not WorkOpcode.RDMA_READ and work.atomic is None:
            assert work.payload is not None
            self._done(work, CompletionStatus.SUCCESS, len(work.payload))

    def _done(self, work: _Work, status: CompletionStatus, byte_len: int = 0) -> None:
        work.status = status
        work.received = byte_len
        inflight = self._inflight
        while inflight and inflight[0].status is not None:
            head = inflight.popleft()
            if not head.internal:
                assert head.status is not None
                if head.original is None:
                    self._events.append(
                        Completion(head.wr_id, head.opcode, head.status, head.received)
                    )
                else:
                    self._events.append(
                        Completion(
                            head.wr_id,
                            head.opcode,
                            head.status,
                            head.received,
                            original=head.original,
                        )
                    )

    # -- receiving ------------------------------------------------------------

    def take_events(self) -> list[Event]:
        """Events that happened outside :meth:`handle_ulpdu` (e.g. completions)."""
        events, self._events = self._events, []
        return events

    def handle_ulpdu(self, ulpdu: Buffer) -> list[Event]:
        """Process one received ULPDU (one DDP segment); return the events."""
        view = memoryview(ulpdu).cast("B") if not isinstance(ulpdu, memoryview) else ulpdu
        self._handle(view)
        return self.take_events()

    def handle_batch(self, batch: UlpduBatch) -> list[Event]:
        """Process the ULPDUs of one receive, in order; return the events.

        The same as :meth:`handle_ulpdu` for each ULPDU of ``batch``. Runs
        of segments that continue one RDMA Write (or one Send) are
        validated once for the whole run (STag, rights, bounds: the union
        of in-bounds ranges is in bounds) and copied in one kernel call
        (``segment_run``, ``place_run``); anything else, and any run whose
        check fails, goes segment by segment, so errors are found and
        reported exactly as there.
        """
        for view in batch.views:
            self._handle(view)
        buffer, records = batch.buffer, batch.records
        if buffer is not None and records is not None:
            count = len(records) // 2
            index = 0
            while index < count:
                # A run needs two segments; a lone one (most small messages)
                # goes straight to the per-segment path.
                if index + 1 < count and self.state is StreamState.OPERATIONAL:
                    placed = self._place_run(buffer, records, index)
                    if placed:
                        index += placed
                        continue
                at = records[2 * index]
                view = buffer[at : at + records[2 * index + 1]]
                # A Send segment whose checks all pass (most small messages)
                # is placed here, without _handle's and _receive's dispatch.
                if not (
                    self.state is StreamState.OPERATIONAL
                    and view
                    and not view[0] & TAGGED_FLAG
                    and self._place_send(view)
                ):
                    self._handle(view)
                index += 1
        return self.take_events()

    def _handle(self, view: memoryview) -> None:
        state = self.state
        if state is not StreamState.OPERATIONAL and state is not StreamState.WAIT_PEER:
            # RFC 5041 §7.1: after an error, drop every later segment.
            self.state = transition(state, StreamInput.RECEIVE)
            return
        try:
            if state is StreamState.WAIT_PEER:
                self._first_message(view)
            else:
                self._receive(view)
        except RemoteProtocolError as exc:
            self._fail(exc, view)

    def _place_run(self, buffer: memoryview, records: memoryview, index: int) -> int:
        """Place the run of RDMA Write or Send segments starting at record
        ``index`` with one decision; returns the segments placed (0: none,
        the caller goes segment by segment)."""
        at = records[2 * index]
        n = records[2 * index + 1]
        if n <= TAGGED_HEADER_SIZE:
            return 0
        control = buffer[at]
        ddp = self._ddp
        if control & TAGGED_FLAG:
            if buffer[at + 1] != self._write_rdmap:
                return 0
            first = not ddp.tagged_in_progress
            _, _, stag, to = TAGGED_HEADER.unpack_from(buffer, at)
            if not first and (
                self._rx_tagged_opcode != RdmapOpcode.RDMA_WRITE or not ddp.continues(stag, to)
            ):
                return 0
            count, octets, last = kernels.segment_run(
                buffer,
                records,
                index,
                True,
                TAGGED_FLAG | VERSION_MASK,
                self._write_ddp,
                self._write_rdmap,
                stag,
                0,
                to,
            )
            if count < 2 or not fits_to_space(to, octets):
                return 0
            target = self.pd.registry.access(stag, self.pd, to, octets, _REMOTE_WRITE)
            if isinstance(target, AccessFault):
                return 0  # segment by segment: the failing one is reported
            if stag in self._atomic_stags:
                with self._atomic_lock:
                    kernels.place_run(buffer, records, index, count, TAGGED_HEADER_SIZE, target)
            else:
                kernels.place_run(buffer, records, index, count, TAGGED_HEADER_SIZE, target)
            if first:
                self._rx_tagged_opcode = RdmapOpcode.RDMA_WRITE
            ddp.tagged_placed(stag, to, octets, self._write_rdmap, last)
            return count
        # Send segments before the message's last (the last completes the
        # receive, segment by segment).
        queue = self._recv
        # A guarded buffer (shared with Atomic Operations) goes segment by
        # segment, through DDP, which places under the lock.
        if (
            n <= UNTAGGED_HEADER_SIZE
            or not queue.buffers
            or queue.out_of_order
            or queue.buffers[0].guarded
        ):
            return 0
        count, octets, _ = kernels.segment_run(
            buffer,
            records,
            index,
            False,
            TAGGED_FLAG | LAST_FLAG | VERSION_MASK,
            self.version,
            self._send_rdmap,
            QueueNumber.SEND,
            queue.next_msn,
            queue.received,
        )
        if count < 2:
            return 0
        target = queue.buffers[0].view
        end = queue.received + octets
        if end > len(target):
            return 0  # segment by segment: DDP reports the message too long
        kernels.place_run(
            buffer, records, index, count, UNTAGGED_HEADER_SIZE, target[queue.received : end]
        )
        queue.received = end
        return count

    def _first_message(self, view: memoryview) -> None:
        if self.rtr and not self._is_terminate(view):
            if self._is_send_rtr(view):
                self._recv.skip_message()  # RFC 6581: swallowed, consumes no buffer
            elif self._is_tagged_rtr(view) or self._is_read_rtr(view):
                self._receive(view)
            else:
                raise MpaError(
                    MpaErrorCode.NO_MATCHING_RTR,
                    "the first message is not an RTR this responder offered (RFC 6581 §9.2)",
                )
        else:
            self._receive(view)
        if self.state is StreamState.WAIT_PEER:
            self.state = transition(self.state, StreamInput.RECEIVE)
            self._events.append(StreamReady())

    @staticmethod
    def _is_terminate(view: memoryview) -> bool:
        """A Terminate is always processed, even in place of the RTR."""
        return (
            len(view) >= 2
            and not view[0] & TAGGED_FLAG
            and split_control(view[1])[1] == RdmapOpcode.TERMINATE
        )

    def _is_send_rtr(self, view: memoryview) -> bool:
        if RtrFlags.SEND not in self.rtr or len(view) != UNTAGGED_HEADER_SIZE:
            return False
        control, rdmap, _, qn, msn, mo = UNTAGGED_HEADER.unpack_from(view, 0)
        return (
            control & (TAGGED_FLAG | LAST_FLAG) == LAST_FLAG
            and split_control(rdmap)[1] == RdmapOpcode.SEND
            and (qn, msn, mo) == (QueueNumber.SEND, self._recv.next_msn, 0)
        )

    def _is_tagged_rtr(self, view: memoryview) -> bool:
        return (
            RtrFlags.WRITE in self.rtr
            and len(view) == TAGGED_HEADER_SIZE
            and view[0] & (TAGGED_FLAG | LAST_FLAG) == TAGGED_FLAG | LAST_FLAG
            and split_control(view[1])[1] == RdmapOpcode.RDMA_WRITE
        )

    def _is_read_rtr(self, view: memoryview) -> bool:
        if RtrFlags.READ not in self.rtr:
            return False
        if len(view) != UNTAGGED_HEADER_SIZE + READ_REQUEST_SIZE or view[0] & TAGGED_FLAG:
            return False
        if split_control(view[1])[1] != RdmapOpcode.RDMA_READ_REQUEST:
            return False
        return ReadRequest.unpack_from(view, UNTAGGED_HEADER_SIZE).size == 0

    def _place_write(self, view: memoryview) -> bool:
        """RDMA Write segments whose checks all pass, placed with fewer steps
        (most of a bulk transfer); False: anything else, for :meth:`_receive`,
        which makes the same checks in RFC order and reports the error."""
        n = len(view)
        if n <= TAGGED_HEADER_SIZE:
            return False
        control, rdmap, stag, to = TAGGED_HEADER.unpack_from(view, 0)
        if control & (TAGGED_FLAG | VERSION_MASK) != self._write_ddp or rdmap != self._write_rdmap:
            return False
        ddp = self._ddp
        first = not ddp.tagged_in_progress
        if not first and (
            self._rx_tagged_opcode != RdmapOpcode.RDMA_WRITE or not ddp.continues(stag, to)
        ):
            return False
        length = n - TAGGED_HEADER_SIZE
        if not fits_to_space(to, length):
            return False  # DDP reports the wrap (RFC 5041 §7.1)
        target = self.pd.registry.access(stag, self.pd, to, length, _REMOTE_WRITE)
        if isinstance(target, AccessFault):
            return False
        if stag in self._atomic_stags:
            with self._atomic_lock:
                target[:] = view[TAGGED_HEADER_SIZE:]
        else:
            target[:] = view[TAGGED_HEADER_SIZE:]
        if first:
            self._rx_tagged_opcode = RdmapOpcode.RDMA_WRITE
        ddp.tagged_placed(stag, to, length, rdmap, bool(control & LAST_FLAG))
        return True

    def _place_send(self, view: memoryview) -> bool:
        """A segment of a plain Send (or Send with Solicited Event) that
        continues the message in progress in order and fits its buffer,
        placed with fewer steps; the last one completes the receive here.
        False: anything else (out of order, Invalidate, any failed check),
        for :meth:`_receive`, which makes the same checks in RFC order and
        reports the error. Most small messages are one such segment."""
        placed = self._take_send(view)
        if placed is True or placed is False:
            return placed
        wr, end, solicited = placed
        self._received(
            Completion(
                wr.wr_id, WorkOpcode.RECV, CompletionStatus.SUCCESS, end, solicited=solicited
            )
        )
        return True

    def send_target(self) -> tuple[int, int, int, int, memoryview] | None:
        """Where the next whole plain Send (or Send with Solicited Event)
        would be placed, for the small-message lane (:mod:`iwarp.rdma.small`):
        (DDP version, its MSN, the RDMAP control octets of Send and Send with
        Solicited Event, the head receive buffer). None while the lane must
        not take one: not in full operation, events waiting (they come
        first), no buffer posted, a message in progress or out of order, or
        a head buffer shared with Atomic Operations (placed under their
        lock, by :meth:`handle_ulpdu`)."""
        queue = self._recv
        if (
            self.state is not _OPERATIONAL
            or self._events
            or not queue.buffers
            or queue.received
            or queue.out_of_order
            or queue.buffers[0].guarded
        ):
            return None
        return (
            self.version,
            queue.next_msn,
            self._send_rdmap,
            self._send_se_rdmap,
            queue.buffers[0].view,
        )

    def lend(self) -> StreamLoan | None:
        """The state a queue pair's fast path takes over (:mod:`iwarp.rdma.fastpath`),
        when the stream is operational and idle both ways: nothing queued,
        being sent, awaiting completion or to answer, no event waiting, and
        the receive queue holds buffers, with no message in progress or out
        of order. None otherwise. Until :meth:`take_back`, the fast path
        alone sends and takes one-segment Sends, and nothing else may use
        this stream."""
        queue = self._recv
        if (
            self.state is not _OPERATIONAL
            or self._sq
            or self._inflight
            or self._irq
            or self._current is not None
            or self._lane_responses
            or self._events
            or not queue.buffers
            or queue.received
            or queue.out_of_order
        ):
            return None
        return StreamLoan(
            self.version,
            self._send_rdmap,
            self._send_se_rdmap,
            self._msn[_SEND_QUEUE],
            queue.next_msn,
            queue.buffers,
        )

    def take_back(self, send_msn: int, recv_msn: int, taken: int) -> None:
        """The fast path hands back what :meth:`lend` lent: the MSNs it
        reached, and how many messages it took. Each went to the head
        posted buffer, which was reposted at once (a receive pool's), so
        the posted queue turned by that many."""
        self._msn[_SEND_QUEUE] = send_msn & 0xFFFFFFFF
        queue = self._recv
        queue.next_msn = recv_msn & MAX_MSN
        buffers = queue.buffers
        if taken and buffers:
            buffers.rotate(-(taken % len(buffers)))

    def lane_windows(self) -> LaneWindows | None:
        """What a receive lane (:mod:`iwarp.rdma.lanes`) may place now,
        after this stream's own checks: the unfinished tagged message, the
        sinks of the outstanding Reads (in order, each in order, while
        nothing of it arrived out of order) and the posted receive queue
        for plain Sends in order. None while it may place nothing (not in
        full operation). The windows are the stream's live objects; RDMA
        Write windows are asked for by STag (:meth:`lane_write_window`)."""
        if self.state is not StreamState.OPERATIONAL:
            return None
        reads: list[tuple[int, memoryview, int, int]] = []
        for work in self._orq:
            req, sink = work.request, work.sink
            if (
                req is None
                or sink is None
                or not sink.valid
                or sink.stag in self._atomic_stags  # placed under the atomics' lock
                or work.placed is not None
                or work.last_seen
                or req.size == 0
                or len(reads) == _LANE_READS
            ):
                break
            reads.append(
                (req.sink_stag, sink.slice(req.sink_to, req.size), req.sink_to, work.received)
            )
        queue = self._recv
        return LaneWindows(
            self.version,
            self._ddp.open_tagged,
            self._write_rdmap,
            self._control[RdmapOpcode.RDMA_READ_RESPONSE],
            tuple(reads),
            bool(queue.buffers) and not queue.out_of_order,
            self._send_rdmap,
            self._send_se_rdmap,
            queue.next_msn,
            queue.received,
            queue.buffers,
        )

    def lane_write_window(self, stag: int) -> MemoryRegion | None:
        """The region an RDMA Write to ``stag`` may be placed in by a
        receive lane: valid, of this stream's PD, with REMOTE_WRITE (bounds
        are checked per segment). None: the lane leaves such segments to
        the usual path, which reports the fault. Nor regions with
        REMOTE_ATOMIC: placements into them hold the Atomic Operations'
        lock, which the usual path takes."""
        region = self.pd.registry.lookup(stag)
        if (
            region is None
            or not region.valid
            or region.pd is not self.pd
            or not region.allows(_REMOTE_WRITE)
            or stag in self._atomic_stags  # placed under the atomics' lock (RFC 7306 §5)
        ):
            return None
        return region

    def lane_placed(self, records: list[tuple[int, int, int, int, int]]) -> None:
        """A receive lane placed what ``records`` say, in order (windows
        from :meth:`lane_windows`): what DDP and RDMAP do after placing
        those segments themselves. Write runs: (1, STag, TO, octets, last);
        Read Response runs of the head Read: (2, index, TO, octets, last);
        Sends into the head posted buffer: (3, index, MO end, solicited,
        last). Completions are made here, in order, as the usual path
        makes them."""
        ddp = self._ddp
        for kind, a, b, c, last in records:
            if kind == _LANE_WRITE:
                if not ddp.tagged_in_progress:
                    self._rx_tagged_opcode = RdmapOpcode.RDMA_WRITE
                ddp.tagged_placed(a, b, c, self._write_rdmap, bool(last))
            elif kind == _LANE_READ:
                work = self._orq[0]
                req = work.request
                assert req is not None
                if not ddp.tagged_in_progress:
                    self._rx_tagged_opcode = RdmapOpcode.RDMA_READ_RESPONSE
                ddp.tagged_placed(
                    req.sink_stag, b, c, self._control[RdmapOpcode.RDMA_READ_RESPONSE], bool(last)
                )
                work.received += c
                if last:
                    work.last_seen = True
                    self._orq.popleft()
                    self._done(work, CompletionStatus.SUCCESS, work.received)
            else:
                queue = self._recv
                if not last:
                    queue.received = b
                    continue
                head = queue.buffers.popleft()
                queue.next_msn = (queue.next_msn + 1) & MAX_MSN
                queue.received = 0
                wr = head.context
                assert wr is not None
                self._received(
                    Completion(
                        wr.wr_id, WorkOpcode.RECV, CompletionStatus.SUCCESS, b, solicited=bool(c)
                    )
                )

    def send_taken(self) -> RecvWR:
        """The lane placed a whole Send into the buffer :meth:`send_target`
        gave: its receive is complete (what DDP's delivery and
        :meth:`handle_ulpdu` do for it). Returns the buffer's work request;
        the caller completes it (no event is made here)."""
        queue = self._recv
        head = queue.buffers.popleft()
        queue.next_msn = (queue.next_msn + 1) & MAX_MSN
        wr = head.context
        assert wr is not None
        # Kept for repost_recv (nothing else refers to it now), holding no
        # memory: a region deregistered meanwhile must not stay exported.
        head.view = _NO_VIEW
        head.context = None
        self._spare = head
        return wr

    def _take_send(self, view: memoryview) -> tuple[RecvWR, int, bool] | bool:
        """:meth:`_place_send`'s checks and placement. Returns False (not
        placed), True (placed, the message goes on) or, when the segment
        completed the message, (work request, length, solicited)."""
        n = len(view)
        if n < UNTAGGED_HEADER_SIZE:
            return False
        control, rdmap, _, qn, msn, mo = UNTAGGED_HEADER.unpack_from(view, 0)
        if (
            control & (TAGGED_FLAG | VERSION_MASK) != self.version
            or qn != QueueNumber.SEND
            or rdmap not in self._plain_sends
        ):
            return False
        queue = self._recv
        buffers = queue.buffers
        if not buffers or msn != queue.next_msn or mo != queue.received or queue.out_of_order:
            return False
        end = mo + n - UNTAGGED_HEADER_SIZE
        head = buffers[0]
        if end > len(head.view) or head.guarded:
            # DDP reports the message too long (RFC 5041 §7.1), or places
            # into a buffer shared with Atomic Operations under their lock.
            return False
        if end > mo:
            head.view[mo:end] = view[UNTAGGED_HEADER_SIZE:]
        if not control & LAST_FLAG:
            queue.received = end
            return True
        # The message is complete: what DDP's delivery and _send_received
        # do for a Send without Invalidate, in one step.
        buffers.popleft()
        queue.next_msn = (msn + 1) & MAX_MSN
        queue.received = 0
        wr = head.context
        assert wr is not None
        return wr, end, rdmap == self._send_se_rdmap

    def _receive(self, view: memoryview) -> None:
        if view and (self._place_write(view) if view[0] & TAGGED_FLAG else self._place_send(view)):
            return
        opcode = self._check_rdmap(view)
        segment = self._ddp.receive(view)
        if isinstance(segment, TaggedSegment):
            if opcode == RdmapOpcode.RDMA_READ_RESPONSE:
                self._read_response_placed(segment)
            return
        if segment.message_length is not None:
            self._deliver(segment, opcode)
        for message in segment.delivered:  # completed out of order, in MSN order
            self._deliver(message, split_control(message.rsvdulp)[1])

    def _deliver(self, segment: UntaggedSegment[RecvWR | None], opcode: int) -> None:
        if opcode > RdmapOpcode.TERMINATE:
            self._deliver_extension(segment, opcode)
        elif opcode == RdmapOpcode.RDMA_READ_REQUEST:
            self._count_inbound(segment, 0, self.ird)
            self._read_request(segment)
        elif opcode == RdmapOpcode.TERMINATE:
            self._terminate_received(segment)
        else:
            self._send_received(segment, opcode)

    def _check_rdmap(self, view: memoryview) -> int:
        """RFC 5040 §7.2 checks 2 and 3, before DDP places anything."""
        self._ddp.check_header(view)
        version, opcode = split_control(view[1])
        if version != self.version:
            raise RemoteOperationError(
                RemoteOperationCode.INVALID_VERSION, f"RDMAP version {version}"
            )
        tagged = bool(view[0] & TAGGED_FLAG)
        if self._opcode_tagged.get(opcode) is not tagged:
            raise RemoteOperationError(
                RemoteOperationCode.UNEXPECTED_OPCODE,
                f"opcode {opcode:#x} in a {'tagged' if tagged else 'untagged'} segment",
            )
        if not tagged:
            qn = UNTAGGED_HEADER.unpack_from(view, 0)[3]
            if qn <= QueueNumber.TERMINATE and qn != OPCODE_QUEUE[opcode]:
                raise RemoteOperationError(
                    RemoteOperationCode.UNEXPECTED_OPCODE, f"opcode {opcode} on queue {qn}"
                )
            if qn == QueueNumber.ATOMIC_RESPONSE and opcode != RdmapOpcode.ATOMIC_RESPONSE:
                # Queue 3 exists for Atomic Responses only (RFC 7306 §5.2.2 rule 3).
                raise DdpUntaggedError(DdpUntaggedCode.INVALID_QN, f"opcode {opcode} on queue 3")
        return opcode

    def _resolve_tagged(
        self, stag: int, to: int, length: int, rsvdulp: int, first: bool
    ) -> memoryview:
        opcode = rsvdulp & 0x0F
        if first:
            self._rx_tagged_opcode = opcode
        elif opcode != self._rx_tagged_opcode:
            # siw's "packet intersection" rule: a tagged message cannot
            # interleave another one (RFC 5041 §4.2: same RsvdULP in each segment).
            raise RemoteOperationError(
                RemoteOperationCode.UNEXPECTED_OPCODE,
                f"opcode {opcode} inside an unfinished opcode {self._rx_tagged_opcode} message",
            )
        if opcode == RdmapOpcode.RDMA_WRITE:
            target = self.pd.registry.access(stag, self.pd, to, length, _REMOTE_WRITE)
            if isinstance(target, AccessFault):
                raise DdpTaggedError(
                    TAGGED_FAULTS[target],
                    f"RDMA Write to STag {stag:#010x} TO {to:#x} length {length}: {target.name}",
                )
            return target
        work = self._orq[0] if self._orq else None
        if work is None or work.request is None or work.sink is None:
            raise RemoteOperationError(
                RemoteOperationCode.UNEXPECTED_OPCODE, "RDMA Read Response without a Read Request"
            )
        req = work.request
        if stag != req.sink_stag or not work.sink.valid:
            raise DdpTaggedError(
                DdpTaggedCode.INVALID_STAG,
                f"Read Response to STag {stag:#010x}, the Read asked for {req.sink_stag:#010x}",
            )
        offset = to - req.sink_to
        if offset < 0 or offset + length > req.size:
            raise DdpTaggedError(
                DdpTaggedCode.BASE_OR_BOUNDS,
                f"Read Response at TO {to:#x} (+{length}) outside the {req.size}-octet sink",
            )
        placed = work.placed
        if placed is None and offset == work.received:
            work.received += length  # in order: one counter
        else:  # any order (RFC 5041 §5.3): merged runs
            if placed is None:
                placed = work.placed = PlacedRuns()
                placed.add(0, work.received)
            placed.add(offset, offset + length)
            work.received = placed.prefix
        return work.sink.slice(to, length)

    def _read_response_placed(self, segment: TaggedSegment) -> None:
        """The Read completes once its L segment arrived and every octet of
        the sink is placed, whatever the order (RFC 5041 §5.4)."""
        work = self._orq[0] if self._orq else None
        if work is None or work.request is None:
            raise RemoteOperationError(
                RemoteOperationCode.UNEXPECTED_OPCODE, "RDMA Read Response without a Read Request"
            )
        if segment.last:
            if work.last_seen:
                raise DdpTaggedError(
                    DdpTaggedCode.BASE_OR_BOUNDS,
                    "a second last segment in one Read Response",
                )
            work.last_seen = True
        if not work.last_seen or work.received != work.request.size:
            return
        self._orq.popleft()
        self._done(work, CompletionStatus.SUCCESS, work.received)

    def _read_request(self, segment: UntaggedSegment[RecvWR | None]) -> None:
        if segment.message_length != READ_REQUEST_SIZE:
            raise RemoteOperationError(
                RemoteOperationCode.CATASTROPHIC_STREAM,
                f"RDMA Read Request of {segment.message_length} octets, not {READ_REQUEST_SIZE}",
            )
        raw = bytes(segment.buffer.view[:READ_REQUEST_SIZE])  # slots may be longer (atomics)
        req = ReadRequest.unpack_from(raw)
        if req.size == 0:
            # RFC 5040 §5.2.1: no STag check, a zero-length response.
            source = memoryview(b"")
        else:
            found = self.pd.registry.access(
                req.src_stag, self.pd, req.src_to, req.size, _REMOTE_READ
            )
            if isinstance(found, AccessFault):
                raise RemoteProtectionError(
                    READ_FAULTS[found],
                    f"RDMA Read of STag {req.src_stag:#010x} TO {req.src_to:#x} "
                    f"size {req.size}: {found.name}",
                    rdmap_header=raw,
                )
            source = found
        self._irq.append(_Response(source, req))

    def _send_received(self, segment: UntaggedSegment[RecvWR | None], opcode: int) -> None:
        wr = segment.buffer.context
        assert wr is not None and segment.message_length is not None
        invalidated = None
        if opcode in INVALIDATE_OPCODES:
            stag = segment.rsvdulp2
            region = self.pd.registry.lookup(stag)
            if region is None or not region.valid or region.pd is not self.pd:
                self._events.append(
                    Completion(
                        wr.wr_id,
                        WorkOpcode.RECV,
                        CompletionStatus.LOCAL_PROTECTION_ERROR,
                        segment.message_length,
                    )
                )
                raise RemoteProtectionError(
                    RemoteProtectionCode.CANNOT_INVALIDATE,
                    f"Send with Invalidate of STag {stag:#010x}, not valid on this stream",
                )
            region.invalidate()
            invalidated = stag
        self._received(
            Completion(
                wr.wr_id,
                WorkOpcode.RECV,
                CompletionStatus.SUCCESS,
                segment.message_length,
                invalidated_stag=invalidated,
                solicited=opcode in SOLICITED_OPCODES,
            )
        )

    def _received(self, completion: Completion) -> None:
        """A receive completed successfully: to :attr:`on_receive` at once
        (a receive pool reposts its buffer before the next message of the
        same batch needs it), else as an event."""
        hook = self.on_receive
        if hook is None or not hook(completion):
            self._events.append(completion)

    def _terminate_received(self, segment: UntaggedSegment[RecvWR | None]) -> None:
        assert segment.message_length is not None
        raw = bytes(segment.buffer.view[: segment.message_length])
        if len(raw) < TERMINATE_CONTROL_SIZE:
            raw = raw.ljust(TERMINATE_CONTROL_SIZE, b"\0")  # surfaced as received, padded
        header = TerminateHeader.unpack_from(raw)
        self.state = transition(self.state, StreamInput.TERMINATE)
        self._events.append(TerminateReceived(header))
        status = remote_status(header) if about_read(header) else CompletionStatus.FLUSHED
        self._flush(status, culprit=self._reported(header))

    # -- RFC 7306: Atomic Operations and Immediate Data ------------------------

    def _atomic_work(self, wr: FetchAddWR | CompareSwapWR) -> _Work:
        _check_remote(wr.remote_stag, wr.remote_to)
        if self.atomic_ord < 1:
            raise LocalProtocolError("atomic_ord is 0: Atomic Operations are off on this stream")
        self._request_id = (self._request_id + 1) & 0xFFFFFFFF
        if isinstance(wr, FetchAddWR):
            for name, value in (("add", wr.add), ("mask", wr.mask)):
                _check_word(name, value)
            request = AtomicRequest.fetch_add(
                self._request_id, wr.remote_stag, wr.remote_to, wr.add, wr.mask
            )
            opcode = WorkOpcode.ATOMIC_FETCH_ADD
        else:
            for name, value in (
                ("compare", wr.compare),
                ("swap", wr.swap),
                ("compare_mask", wr.compare_mask),
                ("swap_mask", wr.swap_mask),
            ):
                _check_word(name, value)
            request = AtomicRequest.cmp_swap(
                self._request_id,
                wr.remote_stag,
                wr.remote_to,
                wr.compare,
                wr.swap,
                compare_mask=wr.compare_mask,
                swap_mask=wr.swap_mask,
            )
            opcode = WorkOpcode.ATOMIC_CMP_SWAP
        work = _Work(opcode, wr.wr_id, atomic=request)
        work.remote_stag, work.remote_to = wr.remote_stag, wr.remote_to
        return work

    def _immediate_work(self, wr: ImmediateWR) -> _Work:
        payload = memoryview(bytes(wr.data))
        if len(payload) != IMMEDIATE_DATA_SIZE:
            raise LocalProtocolError(
                f"Immediate Data is exactly 8 octets, not {len(payload)} (RFC 7306 §6.3)"
            )
        opcode = RdmapOpcode.IMMEDIATE_DATA_WITH_SE if wr.solicited else RdmapOpcode.IMMEDIATE_DATA
        return _Work(
            WorkOpcode.IMMEDIATE_DATA, wr.wr_id, payload=payload, rdmap=self._control[opcode]
        )

    def _extension_message(self, work: _Work) -> OutgoingMessage | None:
        """The message of RFC 7306 send-queue work; None while ``atomic_ord``
        Atomic Requests are outstanding (the queue waits, in order)."""
        if work.atomic is None:
            assert work.payload is not None
            return OutgoingMessage.untagged(
                work.payload,
                qn=QueueNumber.SEND,
                msn=self._next_msn(QueueNumber.SEND),
                rsvdulp=work.rdmap,
                mulpdu=self.mulpdu,
                version=self.version,
            )
        if len(self._oaq) >= self.atomic_ord:
            return None
        self._oaq.append(work)
        work.msn = self._next_msn(QueueNumber.READ_REQUEST)
        return OutgoingMessage.untagged(
            work.atomic.pack(),
            qn=QueueNumber.READ_REQUEST,  # RFC 7306 §5.2.1 rule 5
            msn=work.msn,
            rsvdulp=self._control[RdmapOpcode.ATOMIC_REQUEST],
            mulpdu=self.mulpdu,
            version=self.version,
        )

    def _atomic_answer(self, job: _AtomicJob) -> _Outgoing | None:
        """Execute an Atomic Request whose turn came (every earlier response
        was generated: RFC 7306 §5.4 rule 8, §7) and build its response."""
        try:
            original = execute(job.region, job.request)
        except LocalCatastrophicError as exc:
            self._fail(exc, memoryview(b""))
            return None
        message = OutgoingMessage.untagged(
            AtomicResponse(job.request.request_id, original).pack(),
            qn=QueueNumber.ATOMIC_RESPONSE,  # RFC 7306 §5.2.2 rule 3
            msn=self._next_msn(QueueNumber.ATOMIC_RESPONSE),
            rsvdulp=self._control[RdmapOpcode.ATOMIC_RESPONSE],
            version=self.version,
            mulpdu=self.mulpdu,
        )
        return _Outgoing(message, response=True, atomic=True)

    def _atomic_next(self) -> bool:
        """An Atomic Operation is the next response (it executes only after
        the Read Responses before it were framed or written, RFC 7306 §7)."""
        return bool(self._irq) and type(self._irq[0]) is _AtomicJob

    def _reported(self, header: TerminateHeader) -> _Work | None:
        """The Atomic Request a received Terminate names by the queue-1 MSN
        of the DDP header it copies back, if it copies one. (A Read the
        Terminate names is left to the default, the oldest outstanding.)"""
        ddp = header.ddp_header
        if not self._oaq or ddp is None or len(ddp) != UNTAGGED_HEADER_SIZE:
            return None
        qn, msn = UNTAGGED_HEADER.unpack_from(ddp, 0)[3:5]
        if qn != QueueNumber.READ_REQUEST:
            return None
        for work in self._oaq:
            if work.msn == msn:
                return work
        return None

    def _oldest_answered(self) -> _Work | None:
        """The oldest Read or Atomic Request awaiting its answer: the one a
        received Terminate about queue 1 reports (the peer answers queue 1 in
        order, so every older request was answered before it)."""
        read = self._orq[0] if self._orq else None
        atomic = self._oaq[0] if self._oaq else None
        if read is None or atomic is None:
            return read or atomic
        for work in self._inflight:
            if work is read or work is atomic:
                return work
        return read

    def _count_inbound(
        self, segment: UntaggedSegment[RecvWR | None], kind: int, limit: int
    ) -> None:
        """One more Read (``kind`` 0) or Atomic (1) Request delivered: beyond
        its limit, queue 1 has no buffer for it (as when the slots are IRD's
        only, RFC 5041 §7.1 check 2)."""
        self._inbound[kind] += 1
        if self._inbound[kind] > limit:
            raise DdpUntaggedError(
                DdpUntaggedCode.NO_BUFFER,
                f"no buffer on queue 1 for MSN {segment.msn}: "
                f"{self._inbound[kind]} {'Atomic' if kind else 'Read'} Requests outstanding",
            )

    def _deliver_extension(self, segment: UntaggedSegment[RecvWR | None], opcode: int) -> None:
        length = segment.message_length
        assert length is not None
        if opcode == RdmapOpcode.ATOMIC_REQUEST:
            self._count_inbound(segment, 1, self.atomic_ird)
            if length != ATOMIC_REQUEST_SIZE:
                raise RemoteOperationError(
                    RemoteOperationCode.CATASTROPHIC_STREAM,
                    f"Atomic Request of {length} octets, not {ATOMIC_REQUEST_SIZE}",
                )
            request = AtomicRequest.unpack_from(segment.buffer.view)
            # RFC 7306 §5.4 rule 3: checked now it is Delivered; executed
            # when its response's turn comes.
            self._irq.append(_AtomicJob(check_target(self.pd, request), request))
        elif opcode == RdmapOpcode.ATOMIC_RESPONSE:
            self._answers.post(memoryview(bytearray(ATOMIC_RESPONSE_SIZE)), None)
            if length != ATOMIC_RESPONSE_SIZE:
                raise RemoteOperationError(
                    RemoteOperationCode.CATASTROPHIC_STREAM,
                    f"Atomic Response of {length} octets, not {ATOMIC_RESPONSE_SIZE}",
                )
            response = AtomicResponse.unpack_from(segment.buffer.view)
            work = self._oaq[0] if self._oaq else None
            if work is None or work.atomic is None:
                raise RemoteOperationError(
                    RemoteOperationCode.UNEXPECTED_OPCODE,
                    "Atomic Response without an Atomic Request",
                )
            if response.request_id != work.atomic.request_id:
                raise RemoteOperationError(
                    RemoteOperationCode.CATASTROPHIC_STREAM,
                    f"Atomic Response to request {response.request_id:#x}, "
                    f"the oldest outstanding is {work.atomic.request_id:#x}",
                )
            self._oaq.popleft()
            work.original = response.original
            self._done(work, CompletionStatus.SUCCESS, IMMEDIATE_DATA_SIZE)
        else:
            self._immediate_received(segment, opcode)

    def _immediate_received(self, segment: UntaggedSegment[RecvWR | None], opcode: int) -> None:
        """Immediate Data in a receive buffer: exactly 8 octets (RFC 7306 §6.3)."""
        wr = segment.buffer.context
        length = segment.message_length
        assert wr is not None and length is not None
        if length != IMMEDIATE_DATA_SIZE:
            self._events.append(
                Completion(wr.wr_id, WorkOpcode.RECV, CompletionStatus.LOCAL_LENGTH_ERROR, length)
            )
            raise RemoteOperationError(
                RemoteOperationCode.CATASTROPHIC_STREAM,
                f"Immediate Data of {length} octets, not {IMMEDIATE_DATA_SIZE} (RFC 7306 §6.3)",
            )
        self._received(
            Completion(
                wr.wr_id,
                WorkOpcode.RECV,
                CompletionStatus.SUCCESS,
                length,
                solicited=opcode in SOLICITED_OPCODES,
                immediate=bytes(segment.buffer.view[:IMMEDIATE_DATA_SIZE]),
            )
        )

    # -- errors ---------------------------------------------------------------

    def _fail(self, exc: RemoteProtocolError, view: memoryview) -> None:
        """Answer the first error with a Terminate; flush all work (RFC 5040 §7.1)."""
        header = terminate_header(exc, view)
        self.state = transition(self.state, StreamInput.PROTOCOL_ERROR)
        self._current = None
        payload = header.pack()
        self._terminate = OutgoingMessage.untagged(
            payload,
            qn=QueueNumber.TERMINATE,
            msn=self._next_msn(QueueNumber.TERMINATE),
            rsvdulp=self._control[RdmapOpcode.TERMINATE],
            version=self.version,
            mulpdu=self.mulpdu,
        ).next_run()
        self._events.append(TerminateSent(exc, header))
        send_status = recv_status = CompletionStatus.FLUSHED
        if view[:1] and view[0] & TAGGED_FLAG:
            if len(view) > 1 and view[1] & 0x0F == RdmapOpcode.RDMA_READ_RESPONSE:
                send_status = CompletionStatus.LOCAL_QP_OPERATION_ERROR  # our Read failed
        elif (
            isinstance(exc, DdpError)
            and len(view) >= UNTAGGED_HEADER_SIZE
            and UNTAGGED_HEADER.unpack_from(view, 0)[3] == QueueNumber.SEND
        ):
            if exc.code == DdpUntaggedCode.MESSAGE_TOO_LONG:
                recv_status = CompletionStatus.LOCAL_LENGTH_ERROR
            elif exc.code == DdpUntaggedCode.INVALID_MO:
                recv_status = CompletionStatus.LOCAL_QP_OPERATION_ERROR
        self._flush(send_status, recv_status)

    def _flush(
        self,
        send_status: CompletionStatus,
        recv_status: CompletionStatus = CompletionStatus.FLUSHED,
        *,
        culprit: _Work | None = None,
    ) -> None:
        """Complete all outstanding work.

        ``send_status`` goes to ``culprit``, by default the oldest
        outstanding RDMA Read or Atomic Request (the only send work a
        Terminate can be about once Sends and Writes went out),
        ``recv_status`` to the oldest receive; the rest is ``FLUSHED``.
        """
        if culprit is None:
            culprit = self._oldest_answered()
        for work in list(self._inflight):
            if work.status is None:
                status = send_status if work is culprit else CompletionStatus.FLUSHED
                self._done(work, status, work.received)
        while self._sq:
            work = self._sq.popleft()
            if not work.internal:
                self._events.append(Completion(work.wr_id, work.opcode, CompletionStatus.FLUSHED))
        self._orq.clear()
        self._oaq.clear()
        self._irq.clear()
        status = recv_status
        while self._recv.buffers:
            wr = self._recv.buffers.popleft().context
            if wr is not None:
                self._events.append(Completion(wr.wr_id, WorkOpcode.RECV, status))
                status = CompletionStatus.FLUSHED

    # -- teardown -------------------------------------------------------------

    def release(self) -> None:
        """The connection is gone: let go of the DDP receiver's way back to
        this stream (its one reference cycle), so the stream and every
        buffer it holds are freed by reference counting alone, without the
        cyclic GC. Nothing can be received after this."""
        self.state = StreamState.CLOSED
        self._ddp.resolver = _released

    def terminate(self, error: RemoteProtocolError) -> list[Event]:
        """Abort with a Terminate for an error found outside the stream.

        For LLP errors (an MPA CRC error, RFC 6581 negotiation failures 6
        and 7) and local catastrophic ones: the Terminate carries no header
        copies (RFC 5040 §4.8 Figure 10).

        :raises LocalProtocolError: a Terminate was already sent or received.
        """
        if self.state not in (StreamState.OPERATIONAL, StreamState.WAIT_PEER):
            raise LocalProtocolError(f"cannot terminate in state {self.state.name}")
        self._fail(error, memoryview(b""))
        return self.take_events()

    def terminate_local(self) -> list[Event]:
        """Abort with a Terminate "RDMAP local catastrophic error"."""
        return self.terminate(LocalCatastrophicError("local catastrophic error"))

    def connection_lost(self) -> list[Event]:
        """The LLP connection closed: flush everything."""
        self.state = transition(self.state, StreamInput.LLP_CLOSED)
        self._flush(CompletionStatus.FLUSHED)
        return self.take_events()

    def close(self) -> list[Event]:
        """Stop the stream locally: flush everything."""
        self.state = transition(self.state, StreamInput.CLOSE)
        self._flush(CompletionStatus.FLUSHED)
        return self.take_events()


#: How each send-queue work request becomes the work the stream sends.
_SEND_QUEUE_WORK: Final[dict[type, Callable[[RdmapStream, Any], _Work]]] = {
    SendWR: RdmapStream._send_work,
    WriteWR: RdmapStream._write_work,
    ReadWR: RdmapStream._read_work,
    FetchAddWR: RdmapStream._atomic_work,
    CompareSwapWR: RdmapStream._atomic_work,
    ImmediateWR: RdmapStream._immediate_work,
}
