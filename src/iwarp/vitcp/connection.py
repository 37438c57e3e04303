"""The sans-IO VI/TCP endpoint: connection establishment and data transfer.

One :class:`VitcpConnection` is one VI connected (or connecting) over one
TCP connection (§2.2.2.2.2). It never touches a socket or a clock: feed it
the octets TCP delivered with :meth:`~VitcpConnection.receive_data`, tell it
about TCP with ``tcp_established`` / ``tcp_accepted`` / ``connection_lost``,
take what to send with :meth:`~VitcpConnection.segments_to_send` (or
``data_to_send``) and what happened with :meth:`~VitcpConnection.take_events`,
and drive its timeout with ``get_timer`` / ``handle_timer(now)``.

Data transfer follows §2.2.2.2.3 and §3.2: messages are cut into segments of
at most the agreed MTU; only RDMA Read Response segments may be interleaved
with another message (we never interleave what we send, and accept it from
the peer); message numbers increase by one per message, a read response
carries its request's number, a NOP carries the last number sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from iwarp._typing import Buffer
from iwarp.contract import Lanes
from iwarp.statemachine import Machine
from iwarp.vitcp.config import MAX_MTU, Negotiated, ViRole, VitcpConfig
from iwarp.vitcp.errors import (
    AttributeMismatchError,
    CrcMismatchError,
    DescriptorError,
    MalformedSegmentError,
    MemoryProtectionError,
    UnexpectedSegmentError,
    VitcpError,
    VitcpUsageError,
)
from iwarp.vitcp.events import (
    TCP_CLOSED_UNANSWERED,
    Connected,
    ConnectionRequested,
    Event,
    MessageReceived,
    RdmaReadCompleted,
    RdmaReadServed,
    RdmaWriteReceived,
    ReconnectNeeded,
    RemoteErrorReported,
    SendCompleted,
    ViCompletionStatus,
    ViConnectionClosed,
    ViConnectionRejected,
    status_of,
)
from iwarp.vitcp.handshake import (
    ACTIVE_TRANSITIONS,
    PASSIVE_TRANSITIONS,
    PEER_ACTIVE_TRANSITIONS,
    Input,
    State,
)
from iwarp.vitcp.memory import LocalBuffer, MemoryTable, ViMemoryRegion
from iwarp.vitcp.wire import (
    CONNECT_TYPES,
    DESCRIPTORS_MODULUS,
    HEADER_SIZE,
    MESSAGE_NUMBER_MODULUS,
    TRAILER_SIZE,
    Attributes,
    CeHeader,
    DecodedSegment,
    RdmaHeader,
    Reliability,
    SegmentFlags,
    SegmentHeader,
    SegmentType,
    ViErrorType,
    decode_segment,
    encode_segment,
)

__all__ = ["LocalBuffer", "OutSegment", "ViMemoryRegion", "VitcpConnection"]

_MASK32: Final = MESSAGE_NUMBER_MODULUS - 1
_MASK16: Final = DESCRIPTORS_MODULUS - 1
#: Largest VI message: Data Offset and RDMA Length are 32 bits (§3.2, §3.4).
MAX_MESSAGE: Final = 0xFFFFFFFF
#: The immediate data carried by control messages must fit 32 bits.
_HANDSHAKE_STATES: Final = frozenset(
    {State.INCOMING, State.MATCHING, State.PENDING_ACCEPT, State.CONNECTING}
)


@dataclass(slots=True)
class OutSegment:
    """One VI segment to send: its buffers, and whether its first octet may
    go as TCP urgent data (§3.7; only set when the peer allowed it)."""

    parts: list[Buffer]
    urgent: bool = False


@dataclass(slots=True)
class _Pending:
    """A posted transmit descriptor not yet on the wire."""

    type: SegmentType
    number: int
    payload: Buffer
    immediate: int | None
    rdma: RdmaHeader | None
    transmit_error: bool = False
    urgent: bool = False
    #: Read: local handle, address, and the target octets (taken at post
    #: time, so a later deregistration cannot pull them away).
    local: tuple[int, int, memoryview] | None = None

    @property
    def consumes_descriptor(self) -> bool:
        """Sends, and RDMA Writes with immediate data, take a receive
        descriptor at the peer (§3.3 Descriptor Flow Control)."""
        return self.type is SegmentType.SEND or (
            self.type is SegmentType.RDMA_WRITE and self.immediate is not None
        )


@dataclass(slots=True)
class _Read:
    """An RDMA Read of ours, sent and not yet answered in full."""

    number: int
    local_handle: int
    local_address: int
    view: memoryview
    length: int
    received: int = 0
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


@dataclass(slots=True)
class _Incoming:
    """A peer message (Send, RDMA Write, RDMA Read Request) being received."""

    type: SegmentType
    number: int
    immediate: int | None
    rdma: RdmaHeader | None
    offset: int = 0
    chunks: list[bytes] = field(default_factory=list)
    capacity: int | None = None
    target: memoryview | None = None
    status: ViCompletionStatus = ViCompletionStatus.SUCCESS


def _serial_le(a: int, b: int) -> bool:
    """a <= b in 32-bit serial number arithmetic."""
    return (b - a) & _MASK32 < 1 << 31


class VitcpConnection:
    """A VI/TCP endpoint (see the module docstring for the calling pattern).

    ``role`` ACTIVE sends the ConnectRequest (§4.2); PASSIVE is one incoming
    TCP connection on a listener (§4.3). With ``config.peer_to_peer`` the
    active end retries on ConnectNoMatch (§4).
    """

    def __init__(self, config: VitcpConfig, role: ViRole) -> None:
        self.config = config
        self.role = role
        if role is ViRole.ACTIVE:
            table = PEER_ACTIVE_TRANSITIONS if config.peer_to_peer else ACTIVE_TRANSITIONS
            self._machine = Machine(table)
        else:
            self._machine = Machine(PASSIVE_TRANSITIONS)
        #: What the CE exchange settled; None until connected.
        self.params: Negotiated | None = None
        self._events: list[Event] = []
        self._out: list[OutSegment] = []
        self._inbuf = bytearray()
        self._need = HEADER_SIZE
        self._deadline: float | None = None
        self._remote_discriminator = b""
        self._peer_ce: CeHeader | None = None
        self._peer_includes_trailer = False
        # Message numbering (§3.2): the CE segment carries the first number.
        self._next_number = config.initial_message_number
        self._last_sent = (config.initial_message_number - 1) & _MASK32
        # Receive side.
        self._rx_last: int | None = None
        self._rx: _Incoming | None = None
        self._ack_value = 0
        self._ack_error = ViErrorType.NONE
        self._sent_ack: tuple[int, ViErrorType] | None = None
        self._responses_unsent = 0
        # Descriptors (§3.2 Rx Descriptors Posted, modulo 2^16).
        self._posted = 0
        self._rx_descriptors: deque[int | None] = deque()
        self._advertised = 0
        self._peer_consumed = 0
        self._peer_posted = 0
        self._consumed = 0
        self._peer_error_seen = False
        self._is_reported: tuple[int, int] | None = None
        # Memory.
        self._memory = MemoryTable()
        # Send side.
        self._queue: deque[_Pending] = deque()
        self._unacked: deque[tuple[int, SegmentType]] = deque()
        self._reads: deque[_Read] = deque()

    # --- state -------------------------------------------------------------

    @property
    def state(self) -> State:
        """The connection establishment state (§4.2/§4.3)."""
        return self._machine.state

    @property
    def descriptors_posted(self) -> int:
        """Receive descriptors posted and not yet consumed."""
        return len(self._rx_descriptors)

    def _alive(self) -> bool:
        return self._machine.state is not State.DISCONNECTED

    def take_events(self) -> list[Event]:
        """Events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def segments_to_send(self) -> list[OutSegment]:
        """Segments to write to TCP, in order."""
        out, self._out = self._out, []
        self._responses_unsent = 0
        return out

    def data_to_send(self) -> list[Buffer]:
        """All pending octets as buffers for ``sendmsg`` (urgent marks are
        dropped: allowed, §3.7 MAY; :meth:`segments_to_send` keeps them)."""
        return [part for seg in self.segments_to_send() for part in seg.parts]

    @property
    def has_data_to_send(self) -> bool:
        """Segments are queued (everything is produced at once: one call drains)."""
        return bool(self._out)

    @property
    def must_close(self) -> bool:
        """The VI is over: close TCP once the output is sent (VI/TCP has no
        half close; a reconnect, §4.2, is signalled by ReconnectNeeded)."""
        return self._machine.state is State.DISCONNECTED

    def settled(self) -> bool:
        """Nothing queued, no timer and the VI not over
        (:meth:`iwarp.contract.Connection.settled`)."""
        return not self._out and not self.must_close and self.get_timer() is None

    def set_emss(self, emss: int) -> None:
        """Nothing to do: the CE exchange settles the MTU (§3.3)."""

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` must be called, if at all."""
        if self.state in (State.CONNECTING, State.PENDING_ACCEPT, State.INCOMING):
            return self._deadline
        return None

    def handle_timer(self, now: float) -> list[Event]:
        """The consumer timeout (§4.2) or the Incoming timeout (§4.3); returns the events."""
        deadline = self.get_timer()
        if deadline is not None and now >= deadline and self._machine.can(Input.TIMEOUT):
            self._machine.process(Input.TIMEOUT)
            self._closed("connection establishment timed out")
        return self.take_events()

    # --- establishment (§4) -------------------------------------------------------

    def connect(self, now: float, remote_discriminator: bytes = b"") -> None:
        """VipConnectRequest: the adapter sets up TCP next (§4.2)."""
        if len(remote_discriminator) > 64:
            raise VitcpUsageError("a discriminator has at most 64 octets")
        self._machine.process(Input.CONNECT_REQUEST)
        self._remote_discriminator = bytes(remote_discriminator)
        self._deadline = now + self.config.connect_timeout

    def tcp_established(self, now: float) -> None:
        """TCP is up: send the ConnectRequest (§4.2)."""
        self._machine.process(Input.TCP_ESTABLISHED)
        self._inbuf.clear()
        self._out.clear()  # anything left was for the previous TCP connection
        self._need = HEADER_SIZE
        self._send_ce(SegmentType.CONNECT_REQUEST, self._local_ce(self._remote_discriminator))

    def tcp_failed(self, now: float) -> None:
        """TCP setup failed (§4.2)."""
        self._machine.process(Input.TCP_FAILED)
        self._closed("TCP connection setup failed")

    def tcp_accepted(self, now: float) -> None:
        """Passive: the listener accepted this TCP connection (§4.3)."""
        self._machine.process(Input.TCP_ACCEPTED)
        self._deadline = now + self.config.incoming_timeout

    def match(self, config: VitcpConfig | None = None) -> bool:
        """Passive: the called discriminator matched a waiting VI (§4.3).

        ``config`` is that VI's configuration, when the listener that took
        the TCP connection had another. Checks the attributes that must agree
        (§3.3: reliability level and peer-to-peer); on a mismatch sends
        ConnectReject and returns False.
        """
        self._machine.process(Input.MATCH)
        if config is not None:
            self.config = config
            self._next_number = config.initial_message_number
        peer = self._peer_ce
        assert peer is not None
        mine = self.config
        if peer.reliability is not mine.reliability or bool(
            peer.attributes & Attributes.PEER_TO_PEER
        ) != bool(mine.peer_to_peer):
            self._machine.process(Input.ATTRIBUTE_MISMATCH)
            self._send_control(SegmentType.CONNECT_REJECT)
            self._closed(
                "attributes do not match",
                AttributeMismatchError(
                    f"peer asks {peer.attributes!r}, we have {mine.attributes!r}"
                ),
            )
            return False
        return True

    def no_match(self) -> None:
        """Passive: no VI waits for the called discriminator (§4.3)."""
        self._machine.process(Input.NO_MATCH)
        self._send_control(SegmentType.CONNECT_NO_MATCH)
        self._closed("no matching discriminator")

    def accept(self) -> None:
        """Passive: VipConnectAccept, send ConnectAccept (§4.3)."""
        self._machine.process(Input.ACCEPT)
        peer = self._peer_ce
        assert peer is not None
        mine = self.config
        ce = CeHeader(
            mine.attributes,
            mtu=min(mine.mtu, peer.mtu),  # §3.3: the agreed value is the lesser
            read_window=min(mine.read_window, peer.read_window),
            calling_discriminator=mine.discriminator,
            called_discriminator=peer.calling_discriminator,
            crc=mine.crc and peer.crc,  # §3.6: only if the request had it
            urgent_marker=mine.urgent_marker,
        )
        self._send_ce(SegmentType.CONNECT_ACCEPT, ce)
        self._established(peer, ce.mtu, ce.read_window, ce.crc, peer.calling_discriminator)

    def reject(self) -> None:
        """Passive: VipConnectReject, send ConnectReject (§4.3)."""
        self._machine.process(Input.REJECT)
        self._send_control(SegmentType.CONNECT_REJECT)
        self._closed("connection rejected by the consumer")

    def close(self) -> None:
        """VipDisconnect: the adapter closes TCP after sending what is left."""
        self._machine.process(Input.DISCONNECT)
        self._closed("disconnected by the consumer")

    def connection_lost(self, now: float, reason: str = "TCP connection closed") -> list[Event]:
        """TCP closed or failed under us; returns the events."""
        if self.state is State.DISCONNECTED or not self._machine.can(Input.TCP_CLOSED):
            return self.take_events()
        if self._machine.process(Input.TCP_CLOSED) is State.CONNECTING:
            self._events.append(ReconnectNeeded(TCP_CLOSED_UNANSWERED))
        else:
            self._closed(reason)
        return self.take_events()

    def _local_ce(self, called: bytes) -> CeHeader:
        mine = self.config
        return CeHeader(
            mine.attributes,
            mtu=mine.mtu,
            read_window=mine.read_window,
            calling_discriminator=mine.discriminator,
            called_discriminator=called,
            crc=mine.crc,
            urgent_marker=mine.urgent_marker,
        )

    def _send_ce(self, seg_type: SegmentType, ce: CeHeader) -> None:
        # §3.5: a CE segment has a trailer iff it carries the CRC option.
        header = self._header(seg_type, SegmentFlags.EOM, self.config.initial_message_number)
        self._emit(header, ce=ce, trailer=ce.crc)

    def _send_control(self, seg_type: SegmentType) -> None:
        # ConnectReject/NoMatch go without trailer: every reading parses that.
        header = self._header(seg_type, SegmentFlags.EOM, self.config.initial_message_number)
        self._emit(header, trailer=False)

    def _established(
        self, peer: CeHeader, mtu: int, window: int, crc: bool, remote_disc: bytes
    ) -> None:
        self._deadline = None
        # The CE segment consumed the initial number; data messages follow it.
        self._last_sent = self.config.initial_message_number
        self._next_number = (self.config.initial_message_number + 1) & _MASK32
        self.params = Negotiated(
            reliability=self.config.reliability,
            mtu=max(1, min(mtu, MAX_MTU)),
            read_window=window,
            crc=crc,
            peer_attributes=peer.attributes,
            urgent_allowed=peer.urgent_marker,
            peer_length_includes_trailer=self._peer_includes_trailer,
            remote_discriminator=remote_disc,
            local_discriminator=self.config.discriminator,
        )
        self._events.append(Connected(self.params))
        self._flush()

    def _closed(self, reason: str, error: VitcpError | None = None) -> None:
        """Enter Disconnected: flush every descriptor still outstanding."""
        self._deadline = None
        for pending in self._queue:
            self._complete_local(pending.type, pending.number, ViCompletionStatus.FLUSHED)
        self._queue.clear()
        for number, seg_type in self._unacked:
            self._events.append(SendCompleted(number, seg_type, ViCompletionStatus.FLUSHED))
        self._unacked.clear()
        for read in self._reads:
            self._events.append(
                RdmaReadCompleted(
                    read.number,
                    read.local_address,
                    read.local_handle,
                    read.length,
                    ViCompletionStatus.FLUSHED
                    if read.status is ViCompletionStatus.SUCCESS
                    else read.status,
                )
            )
        self._reads.clear()
        self._rx = None
        self._inbuf.clear()
        self._events.append(ViConnectionClosed(reason, error))

    # --- memory and descriptors ---------------------------------------------------

    def register(
        self,
        buffer: Buffer,
        *,
        address: int | None = None,
        remote_write: bool = True,
        remote_read: bool = True,
    ) -> ViMemoryRegion:
        """Register memory; peers name it by the returned handle and address."""
        return self._memory.register(
            buffer, address=address, remote_write=remote_write, remote_read=remote_read
        )

    def deregister(self, handle: int) -> None:
        """Forget a region; later RDMA naming it is a protection error."""
        self._memory.deregister(handle)

    def post_receive(self, count: int = 1, capacity: int | None = None) -> None:
        """Post ``count`` receive descriptors of ``capacity`` octets (None:
        any size). Each Send, and each RDMA Write with immediate data,
        consumes one."""
        if count < 0:
            raise VitcpUsageError("negative descriptor count")
        self._rx_descriptors.extend([capacity] * count)
        self._posted = (self._posted + count) & _MASK16
        if self.state is State.CONNECTED:
            self._flush()

    # --- data transfer: local side ----------------------------------------------------

    def send(
        self, data: Buffer | LocalBuffer, *, immediate: int | None = None, urgent: bool = False
    ) -> int:
        """Post a Send; returns its message number."""
        payload, error = self._source(data)
        return self._post(
            _Pending(SegmentType.SEND, 0, payload, self._immediate(immediate), None, error, urgent)
        )

    def rdma_write(
        self,
        data: Buffer | LocalBuffer,
        *,
        remote_address: int,
        memory_handle: int,
        immediate: int | None = None,
        urgent: bool = False,
    ) -> int:
        """Post an RDMA Write into the peer's memory; returns its message number."""
        params = self._params()
        if not params.peer_rdma_write:
            raise VitcpUsageError("the peer did not enable RDMA Write")
        payload, error = self._source(data)
        rdma = RdmaHeader(remote_address & (1 << 64) - 1, memory_handle & _MASK32, len(payload))
        pending = _Pending(
            SegmentType.RDMA_WRITE, 0, payload, self._immediate(immediate), rdma, error, urgent
        )
        return self._post(pending)

    def rdma_read(
        self,
        *,
        local_handle: int,
        local_address: int,
        remote_address: int,
        memory_handle: int,
        length: int,
    ) -> int:
        """Post an RDMA Read into our region; returns its message number."""
        params = self._params()
        if not params.peer_rdma_read:
            raise VitcpUsageError("the peer did not enable RDMA Read")
        if params.read_window == 0:
            raise VitcpUsageError("the negotiated RDMA read window is zero")
        if params.reliability is Reliability.UNRELIABLE:
            raise VitcpUsageError("RDMA Read needs a reliable connection [VIAR]")
        target = self._memory.resolve(local_handle, local_address, length)
        if target is None or target.readonly:
            raise VitcpUsageError("the read target is not inside writable registered memory")
        if not 0 <= length <= MAX_MESSAGE:
            raise VitcpUsageError("RDMA length is 32 bits")
        rdma = RdmaHeader(remote_address & (1 << 64) - 1, memory_handle & _MASK32, length)
        pending = _Pending(SegmentType.RDMA_READ_REQUEST, 0, b"", None, rdma)
        pending.local = (local_handle, local_address, target)
        return self._post(pending)

    def _params(self) -> Negotiated:
        if self.state is not State.CONNECTED or self.params is None:
            raise VitcpUsageError(f"not connected (state {self.state.value})")
        return self.params

    @staticmethod
    def _immediate(value: int | None) -> int | None:
        if value is not None and not 0 <= value <= _MASK32:
            raise VitcpUsageError("immediate data is 32 bits")
        return value

    def _source(self, data: Buffer | LocalBuffer) -> tuple[Buffer, bool]:
        """The octets to send, and whether they had to be padded (§2.2.2.2.5)."""
        if isinstance(data, LocalBuffer):
            view = self._memory.resolve(data.memory_handle, data.address, data.length)
            if view is None:
                return bytes(data.length), True
            data = view
        if len(data) > MAX_MESSAGE:
            raise VitcpUsageError("a VI message has at most 2^32 - 1 octets")
        return data, False

    def _post(self, pending: _Pending) -> int:
        self._params()
        pending.number = self._next_number
        self._next_number = (self._next_number + 1) & _MASK32
        self._queue.append(pending)
        self._flush()
        return pending.number

    def _flush(self) -> None:
        """Send queued messages in order while flow control and the read
        window allow, then a NOP if the peer needs news (§3.2 Notes on NOP)."""
        params = self.params
        if params is None or self.state is not State.CONNECTED:
            return
        while self._queue:
            head = self._queue[0]
            if (
                head.consumes_descriptor
                and self.config.flow_control
                and not 0 < (self._peer_posted - self._consumed) & _MASK16 < 1 << 15
            ):
                break  # §3.2: delay until the peer posts a receive descriptor
            if head.type is SegmentType.RDMA_READ_REQUEST and len(self._reads) >= (
                params.read_window
            ):
                break  # §2.2.2.2.6: the negotiated number of outstanding reads
            self._queue.popleft()
            if head.consumes_descriptor:
                self._consumed = (self._consumed + 1) & _MASK16
            self._transmit(head, params)
        if self._nop_needed(params):
            header = self._header(SegmentType.NOP, SegmentFlags.EOM, self._last_sent)
            self._emit(header, trailer=params.crc)

    def _nop_needed(self, params: Negotiated) -> bool:
        if (
            params.reliability is Reliability.RECEPTION
            and self._sent_ack != (self._ack_value, self._ack_error)
            and self._rx_last is not None
        ):
            return True
        if not params.peer_flow_control:
            return False
        # Credits: only when the peer's view falls below half of what we
        # have, so posting one descriptor at a time does not flood NOPs.
        actual = (self._posted - self._peer_consumed) & _MASK16
        seen = (self._advertised - self._peer_consumed) & _MASK16
        return actual != seen and seen * 2 < actual + 1

    def _transmit(self, pending: _Pending, params: Negotiated) -> None:
        payload = memoryview(pending.payload).cast("B") if len(pending.payload) else b""
        total = len(payload)
        flags = SegmentFlags(0)
        if pending.immediate is not None:
            flags |= SegmentFlags.IDV
        if pending.transmit_error:
            flags |= SegmentFlags.TRE
        immediate = pending.immediate or 0
        offset = 0
        first = True
        while True:
            size = min(params.mtu, total - offset)
            last = offset + size >= total
            header = self._header(
                pending.type,
                flags | SegmentFlags.EOM if last else flags,
                pending.number,
                offset,
                immediate,
            )
            self._emit(
                header,
                rdma=pending.rdma,
                payload=payload[offset : offset + size],
                trailer=params.crc,
                urgent=first and pending.urgent and params.urgent_allowed,
            )
            first = False
            offset += size
            if last:
                break
        self._last_sent = pending.number
        if pending.type is SegmentType.RDMA_READ_REQUEST:
            assert pending.local is not None and pending.rdma is not None
            handle, address, view = pending.local
            self._reads.append(_Read(pending.number, handle, address, view, pending.rdma.length))
        elif pending.transmit_error:
            self._complete_local(pending.type, pending.number, ViCompletionStatus.PROTECTION_ERROR)
        elif params.reliability is Reliability.RECEPTION:
            self._unacked.append((pending.number, pending.type))  # done when ACKed
        else:
            self._complete_local(pending.type, pending.number, ViCompletionStatus.SUCCESS)

    def _complete_local(
        self, seg_type: SegmentType, number: int, status: ViCompletionStatus
    ) -> None:
        self._events.append(SendCompleted(number, seg_type, status))

    def _header(
        self,
        seg_type: SegmentType,
        flags: SegmentFlags,
        number: int,
        offset: int = 0,
        immediate: int = 0,
    ) -> SegmentHeader:
        """A header carrying our current Message ACK, error and descriptor count."""
        self._sent_ack = (self._ack_value, self._ack_error)
        self._advertised = self._posted
        return SegmentHeader(
            seg_type,
            flags,
            0,
            offset,
            immediate,
            number,
            self._ack_value,
            self._posted,
            self._ack_error,
        )

    def _emit(
        self,
        header: SegmentHeader,
        *,
        rdma: RdmaHeader | None = None,
        ce: CeHeader | None = None,
        payload: Buffer = b"",
        trailer: bool,
        urgent: bool = False,
    ) -> None:
        parts = encode_segment(
            header,
            rdma=rdma,
            ce=ce,
            payload=payload,
            trailer=trailer,
            crc_order=self.config.crc_order,
            length_includes_trailer=self.config.length_includes_trailer,
        )
        self._out.append(OutSegment(parts, urgent))

    # --- receiving -----------------------------------------------------------

    #: ``receive_data`` keeps the tail of a segment that spans reads (and
    #: hands out message data it copied): the driver passes a copy.
    borrows_input = False
    #: No lanes: everything goes through receive_data and data_to_send.
    lanes: Lanes | None = None

    def receive_data(self, data: Buffer, now: float) -> list[Event]:
        """Octets TCP delivered (``b""``: the peer closed, which ends the VI:
        VI/TCP has no half close); returns the events they caused."""
        if not data:
            return self.connection_lost(now, "the peer closed the TCP connection")
        if self.state in (State.DISCONNECTED, State.LISTENING, State.CONNECTING):
            return self.take_events()  # nothing is expected: a closing stream
        if self._inbuf:
            self._inbuf += data
            if len(self._inbuf) < self._need:
                return self.take_events()
            buf = bytes(self._inbuf)
            self._inbuf.clear()
        else:
            buf = data if isinstance(data, bytes) else bytes(data)
        pos = 0
        try:
            pos = self._parse(buf)
        except VitcpError as exc:
            self._protocol_error(exc)
            return self.take_events()
        if pos < len(buf) and self._alive():
            self._inbuf += memoryview(buf)[pos:]
        if self.state is State.CONNECTED:
            self._flush()
        return self.take_events()

    def _parse(self, buf: bytes) -> int:
        pos = 0
        end = len(buf)
        while end - pos >= HEADER_SIZE:
            state = self.state
            if state is State.CONNECTED:
                params = self.params
                assert params is not None
                seg = decode_segment(
                    buf,
                    pos,
                    trailer=params.crc,
                    length_includes_trailer=params.peer_length_includes_trailer,
                )
            elif state in _HANDSHAKE_STATES:
                self._check_handshake_type(buf, pos)
                seg = decode_segment(buf, pos, trailer=None, length_includes_trailer=None)
            else:
                return end  # Disconnected: drop the rest (e.g. an optional trailer)
            if seg is None:
                length = SegmentHeader.unpack_from(buf, pos).length
                self._need = length if end - pos < length else length + TRAILER_SIZE
                return pos
            pos += seg.size
            if state is State.CONNECTED:
                self._on_data_segment(seg)
            else:
                self._on_handshake_segment(seg)
        self._need = HEADER_SIZE
        return pos

    def _check_handshake_type(self, buf: bytes, pos: int) -> None:
        header = SegmentHeader.unpack_from(buf, pos)
        if self.state is State.INCOMING:
            if header.type is not SegmentType.CONNECT_REQUEST:
                raise UnexpectedSegmentError(f"{header.type.name} before ConnectRequest")
        elif self.state is State.PENDING_ACCEPT and self.role is ViRole.ACTIVE:
            if header.type not in CONNECT_TYPES or header.type is SegmentType.CONNECT_REQUEST:
                raise UnexpectedSegmentError(f"{header.type.name} while awaiting ConnectAccept")
        else:
            raise UnexpectedSegmentError(f"{header.type.name} in state {self.state.value}")

    def _protocol_error(self, exc: VitcpError) -> None:
        """A segment broke framing or state: report (Reliable Reception) and close."""
        if self.state is State.DISCONNECTED:
            return
        if self.state is State.CONNECTED and self.params is not None:
            number = exc.message_number
            if number is None:
                number = self._rx.number if self._rx is not None else self._ack_value
            self._report_and_close(exc, number)
            return
        self._machine.process(Input.PROTOCOL_ERROR)
        self._closed(str(exc), exc)

    def _report_and_close(self, exc: VitcpError, number: int) -> None:
        params = self.params
        assert params is not None
        if params.reliability is Reliability.RECEPTION:
            # §3.2 Message ACK: the number of the message in error, with its
            # VI Error Type; "invalid on subsequent messages", so we stop here.
            self._ack_value = number
            self._ack_error = exc.vi_error
            header = self._header(SegmentType.NOP, SegmentFlags.EOM, self._last_sent)
            self._emit(header, trailer=params.crc)
        self._machine.process(Input.PROTOCOL_ERROR)
        self._closed(str(exc), exc)

    # --- handshake segments ---

    def _on_handshake_segment(self, seg: DecodedSegment) -> None:
        header = seg.header
        if seg.trailer is not None and seg.crc_order is None:
            raise CrcMismatchError(f"bad CRC on {header.type.name}")
        # Only the four connect types get here (others were refused before decoding).
        _HANDSHAKE_HANDLERS[header.type](self, seg)

    def _on_connect_request(self, seg: DecodedSegment) -> None:
        header, ce = seg.header, seg.ce
        assert ce is not None
        self._peer_ce = ce
        self._peer_includes_trailer = seg.length_includes_trailer
        self._peer_posted = header.rx_descriptors_posted
        self._ack_value = header.message_number
        self._machine.process(Input.RECV_CONNECT_REQUEST)
        self._deadline = None
        self._events.append(
            ConnectionRequested(
                ce.called_discriminator,
                ce.calling_discriminator,
                ce.attributes,
                ce.mtu,
                ce.read_window,
                ce.crc,
            )
        )

    def _on_connect_accept(self, seg: DecodedSegment) -> None:
        assert seg.ce is not None
        self._on_accept(seg, seg.ce)

    def _on_connect_reject(self, seg: DecodedSegment) -> None:
        self._machine.process(Input.RECV_CONNECT_REJECT)
        self._events.append(ViConnectionRejected(no_match=False))
        self._closed("connection rejected by the peer")

    def _on_connect_no_match(self, seg: DecodedSegment) -> None:
        if self._machine.process(Input.RECV_CONNECT_NO_MATCH) is State.CONNECTING:
            self._events.append(ReconnectNeeded("peer not waiting yet (ConnectNoMatch)"))
            return
        self._events.append(ViConnectionRejected(no_match=True))
        self._closed("no matching discriminator at the peer")

    def _on_accept(self, seg: DecodedSegment, ce: CeHeader) -> None:
        mine = self.config
        if ce.reliability is not mine.reliability or bool(
            ce.attributes & Attributes.PEER_TO_PEER
        ) != bool(mine.peer_to_peer):
            self._machine.process(Input.ATTRIBUTE_MISMATCH)
            self._closed(
                "attributes do not match",
                AttributeMismatchError(f"peer accepted with {ce.attributes!r}"),
            )
            return
        self._machine.process(Input.RECV_CONNECT_ACCEPT)
        self._peer_ce = ce
        self._peer_includes_trailer = seg.length_includes_trailer
        self._peer_posted = seg.header.rx_descriptors_posted
        self._ack_value = seg.header.message_number
        # Liberal: a larger MTU or window than proposed is cut down, and the
        # CRC is on only if both sides named the option (§3.6).
        self._established(
            ce,
            min(mine.mtu, ce.mtu),
            min(mine.read_window, ce.read_window),
            mine.crc and ce.crc,
            ce.calling_discriminator,
        )

    # --- data segments ---

    def _on_data_segment(self, seg: DecodedSegment) -> None:
        header = seg.header
        params = self.params
        assert params is not None
        if seg.trailer is not None and seg.crc_order is None:
            self._on_crc_error(seg, params)
            return
        self._on_peer_fields(header, params)
        if self.state is not State.CONNECTED:
            return
        seg_type = header.type
        if seg_type is SegmentType.NOP:
            if self._rx_last is not None and header.message_number != self._rx_last:
                raise UnexpectedSegmentError(
                    f"NOP carries message number {header.message_number}, "
                    f"last message was {self._rx_last}"
                )
        elif seg_type is SegmentType.RDMA_READ_RESPONSE:
            self._on_read_response(seg)
        elif seg_type in CONNECT_TYPES:
            raise UnexpectedSegmentError(f"{seg_type.name} on a connected VI")
        else:
            self._on_message_segment(seg, params)

    def _on_peer_fields(self, header: SegmentHeader, params: Negotiated) -> None:
        """Message ACK, Remote Error Code and Rx Descriptors Posted (§3.2)."""
        self._peer_posted = header.rx_descriptors_posted
        if params.reliability is not Reliability.RECEPTION:
            return  # §3.2: undefined and ignored below Reliable Reception
        ack, error = header.message_ack, header.vi_error
        while self._unacked and _serial_le(self._unacked[0][0], ack):
            number, seg_type = self._unacked.popleft()
            status = status_of(error) if error and number == ack else ViCompletionStatus.SUCCESS
            self._events.append(SendCompleted(number, seg_type, status))
        if not error:
            # §3.2 IS Error Code alone: implementation-specific, supplemental
            # status for message ``ack``; reported once, the VI goes on.
            code = header.is_error_code
            if code and (ack, code) != self._is_reported:
                self._is_reported = (ack, code)
                self._events.append(RemoteErrorReported(ack, error, code))
            return
        if self._peer_error_seen:
            return
        self._peer_error_seen = True
        self._events.append(RemoteErrorReported(ack, error, header.is_error_code))
        for read in self._reads:
            if read.number == ack:
                read.status = status_of(error)
        self._machine.process(Input.PROTOCOL_ERROR)
        self._closed(f"peer reported {error!r} for message {ack}")

    def _on_message_segment(
        self, seg: DecodedSegment, params: Negotiated, *, crc_bad: bool = False
    ) -> None:
        header = seg.header
        rx = self._rx
        if rx is None:
            rx = self._start_message(seg, params)
            if self.state is not State.CONNECTED:
                return
        elif header.type is not rx.type or header.message_number != rx.number:
            raise UnexpectedSegmentError(
                f"{header.type.name} #{header.message_number} inside "
                f"{rx.type.name} #{rx.number} (only read responses may interleave)"
            )
        elif header.data_offset != rx.offset:
            raise MalformedSegmentError(
                f"data offset {header.data_offset}, expected {rx.offset}",
                message_number=rx.number,
            )
        elif seg.rdma != rx.rdma:
            raise MalformedSegmentError("RDMA header changed within a message")
        if header.flags & SegmentFlags.TRE and rx.status is ViCompletionStatus.SUCCESS:
            rx.status = ViCompletionStatus.TRANSMIT_ERROR  # §3.2: the whole message
        if crc_bad:
            rx.status = ViCompletionStatus.TRANSPORT_ERROR
        payload = seg.payload
        size = len(payload)
        if rx.type is SegmentType.SEND:
            capacity = self.config.max_receive_size if rx.capacity is None else rx.capacity
            if rx.offset + size > capacity and rx.status is not ViCompletionStatus.DESCRIPTOR_ERROR:
                too_long = DescriptorError(
                    f"Send longer than the {capacity}-octet receive descriptor",
                    message_number=rx.number,
                )
                self._message_error(rx, too_long, params)
                if self.state is not State.CONNECTED:
                    return
            if rx.status is not ViCompletionStatus.DESCRIPTOR_ERROR and size:
                rx.chunks.append(bytes(payload))
        elif rx.type is SegmentType.RDMA_WRITE:
            assert rx.rdma is not None
            if rx.offset + size > rx.rdma.length:
                raise MalformedSegmentError(
                    "RDMA Write data beyond its RDMA Length", message_number=rx.number
                )
            if rx.target is not None:
                rx.target[rx.offset : rx.offset + size] = payload
        rx.offset += size
        if header.eom:
            self._rx = None
            self._finish_message(rx, params)
        else:
            self._rx = rx

    def _start_message(self, seg: DecodedSegment, params: Negotiated) -> _Incoming:
        header = seg.header
        number = header.message_number
        if self._rx_last is not None and number != (self._rx_last + 1) & _MASK32:
            raise UnexpectedSegmentError(
                f"message number {number}, expected {(self._rx_last + 1) & _MASK32}",
                message_number=number,
            )
        if header.data_offset != 0:
            raise MalformedSegmentError(
                f"first segment with data offset {header.data_offset}", message_number=number
            )
        self._rx_last = number
        seg_type = header.type
        immediate = None
        if seg_type in (SegmentType.SEND, SegmentType.RDMA_WRITE) and (
            header.flags & SegmentFlags.IDV
        ):
            immediate = header.immediate_data
        rx = _Incoming(seg_type, number, immediate, seg.rdma)
        if seg_type is SegmentType.RDMA_READ_REQUEST and not header.eom:
            raise MalformedSegmentError(
                "an RDMA Read Request is one segment", message_number=number
            )
        if seg_type is SegmentType.RDMA_WRITE:
            rx.target = self._check_access(seg.rdma, write=True, number=number, params=params)
            if rx.target is None and self.state is not State.CONNECTED:
                return rx
            if rx.target is None:
                rx.status = ViCompletionStatus.PROTECTION_ERROR
        if seg_type is SegmentType.SEND or immediate is not None:
            if not self._rx_descriptors:
                self._message_error(
                    rx,
                    DescriptorError("no receive descriptor posted", message_number=number),
                    params,
                )
            else:
                rx.capacity = self._rx_descriptors.popleft()
                self._peer_consumed = (self._peer_consumed + 1) & _MASK16
        return rx

    def _check_access(
        self, rdma: RdmaHeader | None, *, write: bool, number: int, params: Negotiated
    ) -> memoryview | None:
        """The region octets an RDMA segment names, or a protection error."""
        assert rdma is not None
        region = self._memory.get(rdma.memory_handle)
        enabled = self.config.rdma_write if write else self.config.rdma_read
        allowed = region is not None and (region.remote_write if write else region.remote_read)
        view = region.slice(rdma.address, rdma.length) if region is not None else None
        if enabled and allowed and view is not None:
            return view
        what = "write" if write else "read"
        reason = (
            f"RDMA {what} not enabled"
            if not enabled or not allowed
            else f"RDMA {what} of {rdma.length} at {rdma.address:#x} outside handle "
            f"{rdma.memory_handle}"
        )
        if region is None and enabled:
            reason = f"unknown memory handle {rdma.memory_handle}"
        self._message_error(None, MemoryProtectionError(reason, message_number=number), params)
        return None

    def _message_error(self, rx: _Incoming | None, exc: VitcpError, params: Negotiated) -> None:
        """A message the peer sent cannot be received (protection, descriptor).

        Unreliable: the message is dropped and the VI goes on. Reliable
        levels: the connection breaks; Reliable Reception reports the error
        in Message ACK first (§3.2).
        """
        status = (
            ViCompletionStatus.PROTECTION_ERROR
            if isinstance(exc, MemoryProtectionError)
            else ViCompletionStatus.DESCRIPTOR_ERROR
        )
        if rx is not None:
            rx.status = status
        if params.reliability is Reliability.UNRELIABLE:
            return
        number = exc.message_number if exc.message_number is not None else self._ack_value
        self._report_and_close(exc, number)

    def _finish_message(self, rx: _Incoming, params: Negotiated) -> None:
        if rx.type is SegmentType.SEND:
            data = rx.chunks[0] if len(rx.chunks) == 1 else b"".join(rx.chunks)
            if rx.status is ViCompletionStatus.DESCRIPTOR_ERROR:
                data = b""
            self._events.append(MessageReceived(rx.number, data, rx.immediate, rx.status))
        elif rx.type is SegmentType.RDMA_WRITE:
            assert rx.rdma is not None
            if rx.offset != rx.rdma.length and rx.status is ViCompletionStatus.SUCCESS:
                raise MalformedSegmentError(
                    f"RDMA Write of {rx.offset} octets, RDMA Length {rx.rdma.length}",
                    message_number=rx.number,
                )
            self._events.append(
                RdmaWriteReceived(
                    rx.number,
                    rx.rdma.address,
                    rx.rdma.memory_handle,
                    rx.rdma.length,
                    rx.immediate,
                    rx.status,
                )
            )
        else:
            self._serve_read(rx, params)
        if self.state is State.CONNECTED:
            self._acknowledge(rx.number)

    def _acknowledge(self, number: int) -> None:
        # §3.2 Message ACK: the last message received without error, once
        # its data and completion are written (they are, by now).
        self._ack_value = number

    def _serve_read(self, rx: _Incoming, params: Negotiated) -> None:
        rdma = rx.rdma
        assert rdma is not None
        if self._responses_unsent >= max(1, params.read_window):
            raise DescriptorError(
                "RDMA Read Requests beyond the negotiated window", message_number=rx.number
            )
        view = self._check_access(rdma, write=False, number=rx.number, params=params)
        if view is None:
            return
        self._responses_unsent += 1
        self._events.append(
            RdmaReadServed(rx.number, rdma.address, rdma.memory_handle, rdma.length)
        )
        # Read responses go out at once, ahead of queued messages: they may
        # interleave with anything but another response (§2.2.2.2.3).
        offset = 0
        total = rdma.length
        while True:
            size = min(params.mtu, total - offset)
            last = offset + size >= total
            header = self._header(
                SegmentType.RDMA_READ_RESPONSE,
                SegmentFlags.EOM if last else SegmentFlags(0),
                rx.number,
                offset,
            )
            self._emit(header, rdma=rdma, payload=view[offset : offset + size], trailer=params.crc)
            offset += size
            if last:
                break

    def _on_read_response(self, seg: DecodedSegment) -> None:
        header = seg.header
        if not self._reads:
            raise UnexpectedSegmentError("RDMA Read Response without an outstanding read")
        read = self._reads[0]
        if header.message_number != read.number:
            raise UnexpectedSegmentError(
                f"read response #{header.message_number}, oldest read is #{read.number}"
            )
        if header.data_offset != read.received:
            raise MalformedSegmentError(
                f"read response offset {header.data_offset}, expected {read.received}"
            )
        payload = seg.payload
        end = read.received + len(payload)
        if end > read.length:
            raise MalformedSegmentError("read response longer than the request")
        read.view[read.received : end] = payload
        read.received = end
        if header.flags & SegmentFlags.TRE and read.status is ViCompletionStatus.SUCCESS:
            read.status = ViCompletionStatus.TRANSMIT_ERROR
        if not header.eom:
            return
        if read.received != read.length:
            raise MalformedSegmentError(
                f"read response ended after {read.received} of {read.length} octets"
            )
        self._reads.popleft()
        self._events.append(
            RdmaReadCompleted(
                read.number, read.local_address, read.local_handle, read.length, read.status
            )
        )

    def _on_crc_error(self, seg: DecodedSegment, params: Negotiated) -> None:
        """§3.6 action 2: deliver with transport error status; close unless
        Unreliable; in Reliable Reception report an Unrecoverable Transport
        Error in Message ACK."""
        header = seg.header
        rx = self._rx
        error = CrcMismatchError(
            f"bad CRC on {header.type.name} #{header.message_number}",
            message_number=rx.number if rx is not None else header.message_number,
        )
        if params.reliability is Reliability.UNRELIABLE:
            # The connection may continue (§3.6): deliver the message marked.
            if header.type in (SegmentType.SEND, SegmentType.RDMA_WRITE):
                self._on_message_segment(seg, params, crc_bad=True)
            return
        if rx is not None and rx.type is SegmentType.SEND:
            chunks = [*rx.chunks, bytes(seg.payload)]
            self._events.append(
                MessageReceived(
                    rx.number, b"".join(chunks), rx.immediate, ViCompletionStatus.TRANSPORT_ERROR
                )
            )
        elif rx is None and header.type is SegmentType.SEND:
            self._events.append(
                MessageReceived(
                    header.message_number,
                    bytes(seg.payload),
                    None,
                    ViCompletionStatus.TRANSPORT_ERROR,
                )
            )
        elif rx is not None and rx.type is SegmentType.RDMA_WRITE and rx.rdma is not None:
            # The data placed so far stays placed; the completion says it is bad.
            self._events.append(
                RdmaWriteReceived(
                    rx.number,
                    rx.rdma.address,
                    rx.rdma.memory_handle,
                    rx.rdma.length,
                    rx.immediate,
                    ViCompletionStatus.TRANSPORT_ERROR,
                )
            )
        assert error.message_number is not None
        self._report_and_close(error, error.message_number)


#: §3.3: what each connect segment does to an end that is establishing.
_HANDSHAKE_HANDLERS: Final[dict[SegmentType, Callable[[VitcpConnection, DecodedSegment], None]]] = {
    SegmentType.CONNECT_REQUEST: VitcpConnection._on_connect_request,
    SegmentType.CONNECT_ACCEPT: VitcpConnection._on_connect_accept,
    SegmentType.CONNECT_REJECT: VitcpConnection._on_connect_reject,
    SegmentType.CONNECT_NO_MATCH: VitcpConnection._on_connect_no_match,
}
