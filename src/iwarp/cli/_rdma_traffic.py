"""The traffic of ``iwarp listen`` / ``iwarp connect --op send|write|read``.

Over the composed stack (:mod:`iwarp.asyncio.rdma`: MPA + DDP + RDMAP) the
two commands hold a small conversation. Every control message is an RDMAP
Send of 16 octets laid out as rping's buffer advertisement
(:data:`iwarp.apps.rping.ADVERT`: BE64 tagged offset, BE32 STag, BE32
length):

1. ``connect`` → ``listen``, *hello*: (OP << 48 | N, 0, S), "N messages of
   S octets follow with this op" (N in the low 48 bits of the offset field,
   the op as :data:`OP_TAGS` in its top 16 bits, 0 from older connectors:
   not checked; the STag stays 0, so peers that read 16-octet Sends as
   rping advertisements see none). It is also the first FPDU, which lifts
   the Responder's fence (RFC 5044 §7.1.2 rule 4) so the listener may speak.
   A listener running another op refuses it (below), so both ends name the
   two ops.
2. ``listen`` → ``connect``, one *advertisement* per credit, W of them at
   first (W = 8, fewer for large S, at most 8 MiB of buffers; never more
   than N in total, so nothing is in flight towards ``connect`` when it
   closes and its close is never answered by a reset):

   * ``send``: (0, 0, S): one receive buffer of S octets is posted;
   * ``write``: (TO, STag, S) of a region with remote write access;
   * ``read``: (TO, STag, S) of a region with remote read access that
     holds the next message.

3. ``connect``, for each message, spends one advertisement: ``send`` sends
   the message; ``write`` RDMA-Writes it to (STag, TO) and then Sends a
   *notice* (TO, STag, S); ``read`` RDMA-Reads S octets from (STag, TO),
   and Sends the notice once the Read Response has arrived.
4. ``listen`` takes each message (the Send's payload, or what the region
   holds when its notice arrives: RDMAP delivers the notice after the
   Write's data is placed, RFC 5040 §5.5), counts and hashes it, reposts
   the buffer (refilling a read region) and advertises it again.
5. ``listen`` → ``connect``, *receipt* (N, 0, 0) once the N-th message
   is in. ``connect`` closes gracefully only after it: a Send or RDMA
   Write completes when handed to TCP, so without the receipt ``connect``
   could report success for data the listener refused (its Terminate would
   arrive after the close). Nothing else travels towards ``connect`` then,
   so its close is never answered by a reset.

The advertisements are credits: the listener never has more messages in
flight than buffers posted, and it allocates buffers only for the credits
it grants (at most :data:`MAX_WINDOW`, :data:`WINDOW_OCTETS`, and what the
listener-wide :class:`MemoryBudget` has left; never for the N messages the
hello announces); a hello whose one buffer does not fit the budget is
refused with a :class:`SessionError`. The listener never has more messages in
flight than buffers posted, so an untagged Send never finds its queue empty
(RFC 5041 §7.2 would terminate the stream). Messages are
:func:`iwarp.cli._mpa_options.message` ``(i, S)`` for every op, so the listener's
and the connector's ``sha256`` agree, and agree across ops.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from iwarp.apps.rping import ADVERT
from iwarp.asyncio.rdma import Access, ConnectionTerminatedError, QueuePair
from iwarp.cli._args import parse_size  # the one size parser, re-exported
from iwarp.cli._mpa_options import Digest, message
from iwarp.ddp.wire import (
    LAST_FLAG,
    TAGGED_FLAG,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    QueueNumber,
    pack_control,
)
from iwarp.errors import IwarpError, MpaError, MpaErrorCode
from iwarp.rdmap.memory import MemoryRegion
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control, split_control
from iwarp.rdmap.work import Completion, CompletionStatus, RecvWR, SendWR, Sge

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "ListenSession",
    "MemoryBudget",
    "MAX_COUNT",
    "OP_TAGS",
    "REFUSAL_STAG",
    "RefusedError",
    "SessionError",
    "check_stack",
    "connect_traffic",
    "error_fields",
    "hello_in",
    "op_named",
    "op_refusal",
    "parse_size",
    "qp_emss",
    "reset",
]

#: Most credits (buffers) a listener offers per connection ...
MAX_WINDOW = 8
#: ... and most octets of buffers it registers for them.
WINDOW_OCTETS = 8 << 20
#: Receive buffers each side keeps for 16-octet control messages.
CONTROL_BUFFERS = MAX_WINDOW + 1
#: Base address of the listener's regions in the TO space (any value works).
_BASE_TO = 0x1000_0000
#: wr_id of the Sends that carry control messages (completions are polled).
_CONTROL_ID = 0x7FFF_FFFF
#: The STag of a *refusal* (TO = the listener's limit, length = the reason):
#: instead of credits, the listener tells the connector why it will not
#: take the messages announced, then closes gracefully, so the connector
#: reports the listener's reason, not a reset. (No region has this STag:
#: the listener's are allocated from the bottom.)
REFUSAL_STAG = 0xFFFF_FFFF
#: Refusal reasons (the length field of a refusal).
REFUSED_MAX_SIZE = 1
REFUSED_MEMORY = 2
#: ... the peer runs another ``--op`` (TO = the listener's, as :data:`OP_TAGS`).
REFUSED_OP = 3

#: Each ``--op`` as the hello's offset field (above the count) and a
#: refusal's TO carry it.
OP_TAGS = {"send": 1, "write": 2, "read": 3, "mpa": 4}
_OP_OF_TAG = {tag: op for op, tag in OP_TAGS.items()}
#: Where the op sits in the hello's offset field; the count is below it.
HELLO_OP_SHIFT = 48
#: Most messages one hello can announce.
MAX_COUNT = (1 << HELLO_OP_SHIFT) - 1


def op_named(tag: int) -> str:
    """The ``--op`` that ``tag`` names (or says it is unknown)."""
    return _OP_OF_TAG.get(tag, f"unknown ({tag:#x})")


#: Default of ``iwarp listen --memory-budget``.
DEFAULT_MEMORY_BUDGET = 256 << 20

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class SessionError(IwarpError):
    """The session cannot go on: the peer ran a different ``--op`` or broke
    the conversation, the stack ended the connection, or the listener refused
    the peer (memory budget). Not API misuse, so not a LocalProtocolError;
    the message says which."""


class RefusedError(SessionError):
    """The listener refused the peer's announced messages and told it so
    (a refusal): end the connection gracefully, so the refusal arrives."""


def hello_in(ulpdu: bytes) -> str | None:
    """The op of an ``iwarp connect --op send|write|read`` whose hello is the
    bare ULPDU ``ulpdu`` (what an ``--op mpa`` listener receives from it):
    an untagged RDMAP Send on queue 0, MSN 1, carrying a 16-octet hello.
    None if ``ulpdu`` is not such a hello."""
    if len(ulpdu) != UNTAGGED_HEADER_SIZE + ADVERT.size:
        return None
    control, rdmap, _, qn, msn, mo = UNTAGGED_HEADER.unpack_from(ulpdu, 0)
    if control & TAGGED_FLAG or not control & LAST_FLAG or (qn, msn, mo) != (0, 1, 0):
        return None
    if split_control(rdmap)[1] != RdmapOpcode.SEND:
        return None
    to, stag, _ = ADVERT.unpack_from(ulpdu, UNTAGGED_HEADER_SIZE)
    if stag != 0:
        return None  # an advertisement, not a hello
    named = to >> HELLO_OP_SHIFT
    return "send, write or read" if named == 0 else op_named(named)


def op_refusal(op: str) -> bytes:
    """The ULPDU an ``--op mpa`` listener answers such a hello with: the
    refusal (REFUSED_OP) as the RDMAP Send the connector's stack takes into
    its first control buffer (untagged, queue 0, MSN 1)."""
    header = UNTAGGED_HEADER.pack(
        pack_control(tagged=False, last=True),
        rdmap_control(RdmapOpcode.SEND),
        0,
        QueueNumber.SEND,
        1,
        0,
    )
    return header + ADVERT.pack(OP_TAGS[op], REFUSAL_STAG, REFUSED_OP)


def _refusal_text(limit: int, reason: int, size: int, op: str) -> str:
    if reason == REFUSED_OP:
        return f"the listener runs --op {op_named(limit)}, we run --op {op}"
    if reason == REFUSED_MAX_SIZE:
        return (
            f"the listener refused: messages of {size} octets exceed its --max-size {limit} "
            f"({format_size(limit)})"
        )
    if reason == REFUSED_MEMORY:
        return (
            f"the listener refused: no room for a buffer of {size} octets in its "
            f"--memory-budget ({limit} octets free)"
        )
    return f"the listener refused the messages (reason {reason})"


def format_size(octets: int) -> str:
    """``268435456`` -> ``256 MiB``: the largest binary unit that divides."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIXES[suffix]
        if octets >= unit and octets % unit == 0:
            return f"{octets // unit} {suffix}iB"
    return f"{octets} octets"


class MemoryBudget:
    """Octets a listener may allocate on its peers' behalf, over all connections.

    Every buffer whose size a peer chooses (by the message size in its
    hello) is reserved here first and released when its connection ends,
    so no number of peers can make the listener allocate more than the
    budget.
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def available(self) -> int:
        return max(0, self.limit - self.used)

    def grant(self, length: int, wanted: int) -> int:
        """Reserve up to ``wanted`` buffers of ``length`` octets; how many fit."""
        count = min(wanted, self.available // max(length, 1))
        self.used += count * length
        return count

    def release(self, octets: int) -> None:
        self.used -= octets


def window_for(size: int) -> int:
    """How many buffers of ``size`` octets a listener offers at once."""
    return max(1, min(MAX_WINDOW, WINDOW_OCTETS // max(size, 1)))


def qp_emss(qp: QueuePair) -> int | None:
    """The TCP EMSS of the queue pair's socket (TCP_MAXSEG), if readable."""
    sock = qp.get_extra_info("socket")
    try:
        return None if sock is None else int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
    except OSError:
        return None


def reset(qp: QueuePair) -> None:
    """Abort with a TCP reset (SO_LINGER 0), so the peer learns of the
    failure (MPA error 1) rather than seeing a clean close."""
    sock = qp.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    qp.abort()


def error_fields(qp: QueuePair, error: IwarpError | None = None) -> dict[str, object] | None:
    """The ``error`` record for how ``qp`` ended, or None if it ended cleanly.

    ``code`` is the MPA error code (RFC 5044 §8) for MPA errors, else the
    Terminate's error code, with its ``layer`` and ``etype`` (RFC 5040 §8);
    null for local errors. ``error`` is what the application caught; the
    connection's own failure (``qp.error``, ``qp.terminate``) explains it
    better when there is one.
    """
    terminate = qp.terminate
    cause = qp.error
    if isinstance(cause, MpaError) and not (
        terminate is not None and cause.mpa_code is MpaErrorCode.TCP_CLOSED
    ):
        error = cause  # e.g. a CRC error: the Terminate we sent reports it
    elif error is None:
        error = cause
    if error is None and terminate is None:
        return None
    code: int | None = None
    if isinstance(error, MpaError) and (terminate is None or error.code != MpaErrorCode.TCP_CLOSED):
        code = error.code
    elif terminate is not None:
        code = terminate.code
    record: dict[str, object] = {"type": "error", "code": code}
    if terminate is not None:
        record["terminate"] = "received" if qp.terminate_received else "sent"
        record["layer"] = int(terminate.layer)
        record["etype"] = terminate.etype
        record["terminate_name"] = terminate_name(terminate.layer, terminate.etype, terminate.code)
    informative = isinstance(error, SessionError) or (
        isinstance(error, MpaError) and error.code == code
    )
    if error is not None and (terminate is None or informative):
        record["message"] = str(error)
    else:
        record["message"] = qp.end_reason
    return record


def check_stack(qp: QueuePair) -> None:
    """Raise if the stack ended the connection as soon as MPA was up.

    :raises SessionError: e.g. the negotiation gave DDP/RDMAP version 0
        (RFC 5044 Appendix C RDMAC mode, Rev 0 peers) and the stack does not
        implement it: it answered with a Terminate (local catastrophic error).
    """
    if qp.terminate is None:
        return
    if qp.params.ddp_version != 1:
        raise SessionError(
            f"DDP/RDMAP version {qp.params.ddp_version} (RDMAC mode with a Rev 0 peer) is not "
            "implemented: use --op mpa"
        )
    raise SessionError(qp.end_reason)


def _check_completion(completion: Completion) -> None:
    if not completion.ok and completion.status is not CompletionStatus.FLUSHED:
        raise SessionError(
            f"{completion.opcode.value} work request completed with {completion.status.value}"
        )


def _drain_control_sends(qp: QueuePair) -> None:
    """Take the completions of our control Sends (they only report errors)."""
    for completion in qp.send_cq.poll():
        _check_completion(completion)


# -- the listener ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Received:
    """One receive completion: a control message (TO, STag, length) or,
    with ``send``, a payload in buffer ``wr_id``."""

    wr_id: int
    control: bool
    to: int = 0
    stag: int = 0
    length: int = 0


@dataclass
class ListenSession:
    """One accepted connection of ``iwarp listen --op send|write|read``.

    :meth:`setup` runs as soon as MPA is in full operation (it posts the
    buffers for control messages, so the hello finds one); :meth:`run`
    serves until the peer closes.
    """

    op: str
    max_size: int
    #: Shared by the listener's connections (None: no limit).
    budget: MemoryBudget | None = None
    #: Messages and octets of this connection.
    digest: Digest = field(default_factory=Digest)
    _qp: QueuePair | None = None
    _control: dict[int, MemoryRegion] = field(default_factory=dict)
    _buffers: dict[int, MemoryRegion] = field(default_factory=dict)
    _regions: dict[int, MemoryRegion] = field(default_factory=dict)
    #: Whether the peer's hello arrived (without it, the peer is no
    #: ``iwarp connect --op send|write|read``).
    hello_seen: bool = False
    _filled: int = 0
    _total: int = 0
    _advertised: int = 0
    _reserved: int = 0

    def setup(self, qp: QueuePair) -> None:
        self._qp = qp
        self._post_control(qp, 0)  # for the hello

    def _post_control(self, qp: QueuePair, wr_id: int) -> None:
        region = self._control.get(wr_id)
        if region is None:
            region = self._control[wr_id] = qp.register(bytearray(ADVERT.size))
        qp.post_recv(RecvWR(Sge(region), wr_id=wr_id))

    async def run(self, on_message: Callable[[bytes], None]) -> None:
        """Serve the peer's messages until it closes; ``on_message`` sees each.

        :raises SessionError: the peer broke the conversation.
        """
        qp = self._qp
        assert qp is not None
        try:
            hello = await self._next(qp)
            if hello is None:
                return
            if not hello.control:
                raise SessionError("the first message was not a hello")
            self.hello_seen = True
            size, self._total = hello.length, hello.to & MAX_COUNT
            named = hello.to >> HELLO_OP_SHIFT
            if named and named != OP_TAGS[self.op]:
                self._refuse(qp, OP_TAGS[self.op], REFUSED_OP)
                raise RefusedError(
                    f"the peer runs --op {op_named(named)}, this listener --op {self.op}"
                )
            if size > self.max_size:
                self._refuse(qp, self.max_size, REFUSED_MAX_SIZE)
                raise RefusedError(
                    f"the peer's messages of {size} octets exceed --max-size {self.max_size}"
                )
            try:
                granted = self._grant(size, min(window_for(size), self._total))
            except SessionError:
                assert self.budget is not None
                self._refuse(qp, self.budget.available, REFUSED_MEMORY)
                raise
            self._offer(qp, size, granted)
            if self._total == 0:
                self._receipt(qp)
            while (received := await self._next(qp)) is not None:
                if self.digest.messages >= self._total:
                    raise SessionError(f"more than the {self._total} messages announced")
                payload = self._take(received, size)
                self.digest.add(payload)
                on_message(payload)
                self._readvertise(qp, received, size)
                if self.digest.messages == self._total:
                    self._receipt(qp)
                _drain_control_sends(qp)
        except ConnectionTerminatedError:
            # Not an error of the conversation: the caller reports how the
            # queue pair ended (qp.error, qp.terminate) with error_fields().
            return
        finally:
            self._release()

    def _grant(self, size: int, wanted: int) -> int:
        """How many buffers of ``size`` octets this connection may have (>= 1
        when ``wanted`` is), reserved in the listener's budget.

        :raises SessionError: not even one buffer fits the budget.
        """
        if self.budget is None or wanted == 0:
            return wanted
        length = max(size, 1)
        granted = self.budget.grant(length, wanted)
        if granted == 0:
            raise RefusedError(
                f"refused: a buffer for the peer's messages of {size} octets exceeds what is "
                f"left of --memory-budget {format_size(self.budget.limit)} "
                f"({self.budget.available} octets free)"
            )
        self._reserved += granted * length
        return granted

    def _release(self) -> None:
        """Drop this connection's buffers and give their octets back to the budget."""
        for region in (*self._buffers.values(), *self._regions.values()):
            with contextlib.suppress(BufferError):
                region.deregister()
        self._buffers.clear()
        self._regions.clear()
        if self.budget is not None and self._reserved:
            self.budget.release(self._reserved)
        self._reserved = 0

    async def _next(self, qp: QueuePair) -> _Received | None:
        """The next receive completion, or None once the peer closed."""
        completion = await qp.recv_cq.wait()
        if completion.status is CompletionStatus.FLUSHED:
            return None
        _check_completion(completion)
        wr_id = completion.wr_id
        control = self._control.get(wr_id)
        if control is None:
            return _Received(wr_id, control=False, length=completion.byte_len)
        if completion.byte_len != ADVERT.size:
            raise SessionError(
                f"expected a {ADVERT.size}-octet control message, got {completion.byte_len} "
                f"octets (does the peer run iwarp connect --op {self.op}?)"
            )
        to, stag, length = ADVERT.unpack_from(control.view)
        if wr_id == 0:
            del self._control[0]  # the hello's buffer is not reposted
        else:
            self._post_control(qp, wr_id)
        return _Received(wr_id, control=True, to=to, stag=stag, length=length)

    def _offer(self, qp: QueuePair, size: int, window: int) -> None:
        # Receive buffers are consumed in the order posted (RFC 5041 §5.3):
        # with send, every buffer after the hello is a payload buffer; with
        # write and read, a 16-octet one for each notice.
        length = max(size, 1)
        try:
            self._allocate(qp, size, length, window)
        except MemoryError:
            # The budget is larger than what this process may map: refuse the
            # peer like an over-budget one, never with a traceback.
            raise SessionError(
                f"refused: no memory for {window} buffers of {size} octets"
            ) from None

    def _allocate(self, qp: QueuePair, size: int, length: int, window: int) -> None:
        for k in range(window):
            wr_id = 1 + k
            if self.op == "send":
                region = qp.register(bytearray(length))
                self._buffers[wr_id] = region
                qp.post_recv(RecvWR(Sge(region, 0, size), wr_id=wr_id))
                self._advertise(qp, 0, 0, size)
            else:
                # Write buffers also take RFC 7306 Atomic Operations (8-octet words).
                access = (
                    Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
                    if self.op == "write"
                    else Access.REMOTE_READ
                )
                region = qp.register(
                    bytearray(length), Access.LOCAL_WRITE | access, address=_BASE_TO + k * length
                )
                self._regions[region.stag] = region
                self._post_control(qp, wr_id)
                self._fill(region, size)
                self._advertise(qp, region.address, region.stag, size)

    def _refuse(self, qp: QueuePair, limit: int, reason: int) -> None:
        qp.post_send(SendWR(ADVERT.pack(limit, REFUSAL_STAG, reason), wr_id=_CONTROL_ID))

    def _receipt(self, qp: QueuePair) -> None:
        qp.post_send(SendWR(ADVERT.pack(self._total, 0, 0), wr_id=_CONTROL_ID))

    def _fill(self, region: MemoryRegion, size: int) -> None:
        if self.op == "read":
            region.view[:size] = message(self._filled, size)
            self._filled += 1

    def _advertise(self, qp: QueuePair, to: int, stag: int, length: int) -> None:
        if self._advertised >= self._total:
            return  # every announced message has its credit
        self._advertised += 1
        qp.post_send(SendWR(ADVERT.pack(to, stag, length), wr_id=_CONTROL_ID))

    def _take(self, received: _Received, size: int) -> bytes:
        if self.op == "send":
            return bytes(self._buffers[received.wr_id].view[: received.length])
        if not received.control:
            raise SessionError("a payload Send arrived: the peer runs --op send")
        region = self._regions.get(received.stag)
        if region is None or received.to != region.address or received.length > size:
            raise SessionError(
                f"the notice (TO {received.to:#x}, STag {received.stag:#x}, "
                f"{received.length} octets) names no buffer we advertised"
            )
        return bytes(region.view[: received.length])

    def _readvertise(self, qp: QueuePair, received: _Received, size: int) -> None:
        if self.op == "send":
            region = self._buffers[received.wr_id]
            qp.post_recv(RecvWR(Sge(region, 0, size), wr_id=received.wr_id))
            self._advertise(qp, 0, 0, size)
            return
        region = self._regions[received.stag]
        self._fill(region, size)
        self._advertise(qp, region.address, region.stag, size)


# -- the connecting side ------------------------------------------------------------


async def connect_traffic(qp: QueuePair, op: str, count: int, size: int, digest: Digest) -> None:
    """Run ``--count`` messages of ``--size`` octets with ``op`` on ``qp``.

    ``qp`` must have a receive pool of :data:`CONTROL_BUFFERS` buffers of 16
    octets (``connect(..., receive_buffers=, receive_size=)``). The digest
    gets each message sent (``send``, ``write``) or read (``read``).

    :raises SessionError: the listener runs another op or advertised too
        little.
    :raises IwarpError: the connection failed.
    """
    await qp.send(ADVERT.pack(OP_TAGS[op] << HELLO_OP_SHIFT | count, 0, size))  # hello
    credits: deque[tuple[int, int, int]] = deque()
    sink = qp.register(bytearray(max(size, 1))) if op == "read" else None
    for i in range(count):
        while not credits:
            advert = await qp.receive()
            if len(advert) != ADVERT.size:
                raise SessionError(f"expected a {ADVERT.size}-octet advertisement")
            to, stag, length = ADVERT.unpack(advert)
            if stag == REFUSAL_STAG:
                raise SessionError(_refusal_text(to, length, size, op))
            credits.append((to, stag, length))
        to, stag, length = credits.popleft()
        if (stag == 0) != (op == "send"):
            theirs = "send" if stag == 0 else "write or read"
            raise SessionError(f"the listener runs --op {theirs}, we run --op {op}")
        if length < size:
            raise SessionError(f"the listener offers {length} octets per message, not {size}")
        if op == "send":
            payload = message(i, size)
            await qp.send(payload)
        elif op == "write":
            payload = message(i, size)
            await qp.rdma_write(payload, stag, to)
            await qp.send(ADVERT.pack(to, stag, size))
        else:
            assert sink is not None
            await qp.rdma_read(Sge(sink, 0, size), stag, to)
            payload = bytes(sink.view[:size])
            await qp.send(ADVERT.pack(to, stag, size))
        digest.add(payload)
    receipt = await qp.receive()
    if len(receipt) != ADVERT.size or ADVERT.unpack(receipt) != (count, 0, 0):
        raise SessionError(f"expected the listener's receipt for {count} messages")
