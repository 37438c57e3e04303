"""DDP at the data sink: validation, placement and reassembly (RFC 5041 §5, §7.1).

:class:`DdpReceiver` takes one ULPDU (a DDP segment) at a time, checks
every field RFC 5041 §7.1 lists, in its order, and only then copies the
payload where it belongs:

* tagged segments into the buffer an upper-layer *resolver* returns for
  (STag, TO, length) -- the resolver does the STag checks, because only the
  ULP knows the memory (RDMAP: protection domains, access rights);
* untagged segments into the buffer posted on their queue for their MSN.

Only the checks of RFC 5041 §7.1 refuse a segment. A data source SHOULD
send a message's segments in increasing MO / TO order, but need not (§5.3),
so segments are placed in any order: an untagged segment may carry any MO
of any MSN that has a posted buffer (check 5: from the head buffer's MSN to
the last posted buffer's), a tagged one any TO its STag allows. Sent in
order (the common case over MPA/TCP) a message costs one counter; a message
that arrives out of order is tracked as merged runs of placed octets
(:class:`PlacedRuns`, at most :data:`MAX_RUNS` separate runs per message, and
at most one tracked message per posted buffer, so a peer cannot make the
tracking grow). An untagged message is delivered (``message_length``) when
its L segment has arrived and every octet up to its end is placed, and only
after every earlier MSN of its queue (§5.3, §5.4).

Placements into memory that another thread may be changing under a lock
(RFC 7306 Atomic Operations' words) hold that lock: tagged segments whose
STag is in the receiver's ``guarded`` set, untagged ones into a buffer
posted with ``guarded=True``, copy their payload inside ``guard``.

On a failed check nothing of the segment is placed and a
:class:`~iwarp.ddp.errors.DdpError` is raised carrying the offending header
and segment length; the caller must then drop every later segment (RFC
5041 §7.1).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Container
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Generic, TypeVar

from iwarp.ddp.errors import (
    DdpCatastrophicError,
    DdpError,
    DdpTaggedCode,
    DdpTaggedError,
    DdpUntaggedCode,
    DdpUntaggedError,
)
from iwarp.ddp.wire import (
    DDP_VERSION,
    LAST_FLAG,
    MAX_MSN,
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
    fits_to_space,
)

__all__ = [
    "MAX_RUNS",
    "DdpReceiver",
    "PlacedRuns",
    "PostedBuffer",
    "TaggedResolver",
    "TaggedSegment",
    "UntaggedQueue",
    "UntaggedSegment",
]

C = TypeVar("C")

#: ``resolver(stag, to, length, rsvdulp, first) -> writable view of length``;
#: it raises :class:`DdpTaggedError` (or another RemoteProtocolError) when
#: the target is not valid. ``first`` says whether the segment starts a message.
TaggedResolver = Callable[[int, int, int, int, bool], memoryview]


@dataclass(slots=True)
class PostedBuffer(Generic[C]):
    """An untagged buffer posted on a queue, with the caller's context."""

    view: memoryview
    context: C
    #: Placements into it hold the receiver's ``guard`` (its memory is
    #: shared with RFC 7306 Atomic Operations).
    guarded: bool = False


# The two results below are made once per received segment: plain slotted
# dataclasses, because a frozen one's __init__ costs about four times more.


@dataclass(slots=True)
class TaggedSegment:
    """A tagged segment that was validated and placed."""

    stag: int
    to: int
    length: int
    last: bool
    rsvdulp: int
    #: It starts a message (no unfinished tagged message before it).
    first: bool


@dataclass(slots=True)
class UntaggedSegment(Generic[C]):
    """An untagged segment that was validated and placed."""

    qn: int
    msn: int
    mo: int
    length: int
    last: bool
    rsvdulp: int
    rsvdulp2: int
    buffer: PostedBuffer[C]
    #: Set when this segment's message is delivered: its length (RFC 5041 §5.4).
    message_length: int | None
    #: Messages of the queue this segment completed besides (out of order,
    #: in MSN order): each with ``last`` set, its L segment's RsvdULP fields,
    #: its buffer and ``message_length``. Empty for segments sent in order.
    delivered: tuple[UntaggedSegment[C], ...] = ()


#: Most separate runs of placed octets tracked for one message received out
#: of order (a local resource limit: more is refused as a local
#: catastrophic error, RFC 5041 §7.2 type 0).
MAX_RUNS = 64


class PlacedRuns:
    """The octet ranges of one message placed so far, merged, in order.

    ``runs`` holds ``[start, end)`` pairs, sorted, neither overlapping nor
    touching. Placing the same octets again (RFC 5041 §5.3 allows it) does
    not count twice.
    """

    __slots__ = ("end", "last", "rsvdulp", "rsvdulp2", "runs")

    def __init__(self) -> None:
        self.runs: list[list[int]] = []
        #: The highest octet offset placed + 1.
        self.end = 0
        #: The L segment arrived (with these RsvdULP fields).
        self.last = False
        self.rsvdulp = 0
        self.rsvdulp2 = 0

    def add(self, start: int, end: int) -> None:
        """Record ``[start, end)`` as placed.

        :raises DdpCatastrophicError: more than :data:`MAX_RUNS` runs.
        """
        self.end = max(self.end, end)
        if start == end:
            return
        runs = self.runs
        i = bisect_left(runs, start, key=_run_end)  # first run ending at or after start
        j = i
        while j < len(runs) and runs[j][0] <= end:
            start = min(start, runs[j][0])
            end = max(end, runs[j][1])
            j += 1
        runs[i:j] = [[start, end]]
        if len(runs) > MAX_RUNS:
            raise DdpCatastrophicError(
                f"a message arrived in more than {MAX_RUNS} separate pieces: "
                "out of resources to track it",
                code=0,
            )

    @property
    def prefix(self) -> int:
        """Octets placed contiguously from offset 0."""
        runs = self.runs
        return runs[0][1] if runs and runs[0][0] == 0 else 0

    @property
    def complete(self) -> bool:
        """The L segment arrived and every octet up to the end is placed."""
        return self.last and self.prefix == self.end


def _run_end(run: list[int]) -> int:
    return run[1]


class UntaggedQueue(Generic[C]):
    """One untagged buffer queue of a DDP stream (RFC 5041 §5.1.2).

    Buffers are consumed one per message, in posting order; the first
    buffer belongs to MSN :attr:`next_msn` (starting at 1, RFC 5041 §4.3).
    """

    __slots__ = ("buffers", "next_msn", "out_of_order", "qn", "received")

    def __init__(self, qn: int) -> None:
        self.qn = qn
        self.buffers: deque[PostedBuffer[C]] = deque()
        #: MSN of the message in progress or of the next one.
        self.next_msn = 1
        #: Octets of the message in progress received so far, in order.
        self.received = 0
        #: Messages that arrived out of order, by MSN (each has a posted
        #: buffer, so no more than ``len(buffers)``). Fast paths that place
        #: in-order segments themselves must leave the queue to
        #: :class:`DdpReceiver` while it is not empty.
        self.out_of_order: dict[int, PlacedRuns] = {}

    def post(self, view: memoryview, context: C, *, guarded: bool = False) -> None:
        """Add a buffer at the tail of the queue (``guarded``: placements
        into it hold the receiver's ``guard``)."""
        self.buffers.append(PostedBuffer(view, context, guarded))

    @property
    def in_progress(self) -> bool:
        """A message has started but its last segment has not arrived."""
        return self.received > 0

    def skip_message(self) -> None:
        """Consume MSN :attr:`next_msn` without a buffer (an RFC 6581 RTR Send)."""
        self.next_msn = (self.next_msn + 1) & MAX_MSN
        self.received = 0

    def _deliver_ready(self) -> tuple[UntaggedSegment[C], ...]:
        """Pop the head messages that are complete, in MSN order."""
        done: list[UntaggedSegment[C]] = []
        pending = self.out_of_order
        while self.buffers and (runs := pending.get(self.next_msn)) is not None and runs.complete:
            del pending[self.next_msn]
            buffer = self.buffers.popleft()
            done.append(
                UntaggedSegment(
                    self.qn,
                    self.next_msn,
                    0,
                    0,
                    True,
                    runs.rsvdulp,
                    runs.rsvdulp2,
                    buffer,
                    runs.end,
                )
            )
            self.next_msn = (self.next_msn + 1) & MAX_MSN
            self.received = 0
        return tuple(done)


class DdpReceiver(Generic[C]):
    """Validates and places incoming DDP segments of one DDP stream.

    :param queues: the untagged queues by QN; any other QN is invalid.
    :param resolver: finds the memory for a tagged segment.
    :param guarded: STags whose tagged segments are copied inside ``guard``.
    :param guard: held while a payload is copied into guarded memory
        (tagged segments of a ``guarded`` STag, untagged ones into a
        buffer posted with ``guarded=True``).
    """

    __slots__ = (
        "_tag_next_to",
        "_tag_rsvdulp",
        "_tag_stag",
        "_tagged_open",
        "guard",
        "guarded",
        "queues",
        "resolver",
        "version",
    )

    def __init__(
        self,
        queues: dict[int, UntaggedQueue[C]],
        resolver: TaggedResolver,
        *,
        version: int = DDP_VERSION,
        guarded: Container[int] = frozenset(),
        guard: AbstractContextManager[object] | None = None,
    ) -> None:
        self.queues = queues
        self.resolver = resolver
        self.guarded = guarded
        self.guard: AbstractContextManager[object] = guard if guard is not None else nullcontext()
        #: The DV every segment must carry (1; 0 in RFC 5044 Appendix C RDMAC mode).
        self.version = version
        self._tagged_open = False  # an unfinished tagged message is in progress
        self._tag_stag = 0
        self._tag_next_to = 0
        self._tag_rsvdulp = 0

    @property
    def tagged_in_progress(self) -> bool:
        return self._tagged_open

    @property
    def open_tagged(self) -> tuple[int, int, int] | None:
        """The unfinished tagged message as (STag, next TO, RsvdULP), or
        None (for a receive lane, :mod:`iwarp.rdma.lanes`, which places its
        continuation only)."""
        if not self._tagged_open:
            return None
        return self._tag_stag, self._tag_next_to, self._tag_rsvdulp

    def continues(self, stag: int, to: int) -> bool:
        """Whether a tagged segment at (``stag``, ``to``) continues the
        unfinished tagged message (RFC 5041 §4.2: same STag, next TO)."""
        return stag == self._tag_stag and to == self._tag_next_to

    def tagged_placed(self, stag: int, to: int, length: int, rsvdulp: int, last: bool) -> None:
        """Record a tagged segment the ULP validated and placed itself.

        For a ULP's fast path: it must have made every check
        :meth:`receive` makes (whole header, DV, :meth:`continues` when a
        message is unfinished, a target of ``length`` octets); anything
        else goes through :meth:`receive`, which reports the error.
        """
        if last:
            self._tagged_open = False
        else:
            self._tagged_open = True
            self._tag_stag = stag
            self._tag_next_to = to + length
            self._tag_rsvdulp = rsvdulp

    def check_header(self, ulpdu: memoryview) -> None:
        """Check that a whole DDP header of our version is there, placing nothing.

        Lets the ULP look at its RsvdULP fields before :meth:`receive`.

        :raises DdpError: the segment is shorter than its header, or DV is wrong.
        """
        n = len(ulpdu)
        if n < 1:
            raise DdpCatastrophicError("empty ULPDU: no DDP header", code=0, segment_length=0)
        control = ulpdu[0]
        tagged = control & TAGGED_FLAG
        size = TAGGED_HEADER_SIZE if tagged else UNTAGGED_HEADER_SIZE
        if n < size:
            raise DdpCatastrophicError(
                f"segment of {n} octets is shorter than its {size}-octet DDP header",
                code=0,
                segment_length=n,
            )
        if control & VERSION_MASK != self.version:
            header = bytes(ulpdu[:size])
            version = control & VERSION_MASK
            if tagged:
                raise DdpTaggedError(
                    DdpTaggedCode.INVALID_VERSION,
                    f"DDP version {version}",
                    header=header,
                    segment_length=n,
                )
            raise DdpUntaggedError(
                DdpUntaggedCode.INVALID_VERSION,
                f"DDP version {version}",
                header=header,
                segment_length=n,
            )

    def receive(self, ulpdu: memoryview) -> TaggedSegment | UntaggedSegment[C]:
        """Validate and place one segment.

        :raises DdpError: a check of RFC 5041 §7.1 failed; nothing was placed.
        :raises RemoteProtocolError: the resolver refused the tagged target.
        """
        n = len(ulpdu)
        if n < 1:
            raise DdpCatastrophicError("empty ULPDU: no DDP header", code=0, segment_length=0)
        control = ulpdu[0]
        try:
            if control & TAGGED_FLAG:
                return self._tagged(ulpdu, control, n)
            return self._untagged(ulpdu, control, n)
        except DdpError as exc:
            size = TAGGED_HEADER_SIZE if control & TAGGED_FLAG else UNTAGGED_HEADER_SIZE
            if exc.header is None and n >= size:
                exc.header = bytes(ulpdu[:size])
            if exc.segment_length is None:
                exc.segment_length = n
            raise

    # -- tagged (RFC 5041 §4.2, §7.1 second list) ----------------------------

    def _tagged(self, ulpdu: memoryview, control: int, n: int) -> TaggedSegment:
        if n < TAGGED_HEADER_SIZE:
            raise DdpCatastrophicError(
                f"segment of {n} octets is shorter than the tagged DDP header", code=0
            )
        _, rsvdulp, stag, to = TAGGED_HEADER.unpack_from(ulpdu, 0)
        if control & VERSION_MASK != self.version:
            raise DdpTaggedError(
                DdpTaggedCode.INVALID_VERSION, f"DDP version {control & VERSION_MASK}"
            )
        length = n - TAGGED_HEADER_SIZE
        last = bool(control & LAST_FLAG)
        # Any TO the STag allows, in any order (RFC 5041 §5.3): only the
        # resolver's checks and the wrap check (§7.1) refuse a segment.
        first = not self._tagged_open
        if length or not (first and last):
            # RFC 5041 §5.2: STag and TO of a zero-length message are not checked.
            if not fits_to_space(to, length):
                raise DdpTaggedError(DdpTaggedCode.TO_WRAP, f"TO {to:#x} + {length} wraps")
            target = self.resolver(stag, to, length, rsvdulp, first)
            if length:
                if stag in self.guarded:
                    with self.guard:
                        target[:] = ulpdu[TAGGED_HEADER_SIZE:]
                else:
                    target[:] = ulpdu[TAGGED_HEADER_SIZE:]
        if last:
            self._tagged_open = False
        else:
            self._tagged_open = True
            self._tag_stag = stag
            self._tag_next_to = to + length
            self._tag_rsvdulp = rsvdulp
        return TaggedSegment(stag, to, length, last, rsvdulp, first)

    # -- untagged (RFC 5041 §4.3, §7.1 first list) ---------------------------

    def _untagged(self, ulpdu: memoryview, control: int, n: int) -> UntaggedSegment[C]:
        if n < UNTAGGED_HEADER_SIZE:
            raise DdpCatastrophicError(
                f"segment of {n} octets is shorter than the untagged DDP header", code=0
            )
        _, rsvdulp, rsvdulp2, qn, msn, mo = UNTAGGED_HEADER.unpack_from(ulpdu, 0)
        if control & VERSION_MASK != self.version:
            raise DdpUntaggedError(
                DdpUntaggedCode.INVALID_VERSION, f"DDP version {control & VERSION_MASK}"
            )
        queue = self.queues.get(qn)
        if queue is None:  # check 1
            raise DdpUntaggedError(DdpUntaggedCode.INVALID_QN, f"no queue number {qn}")
        if not queue.buffers:  # check 2
            raise DdpUntaggedError(
                DdpUntaggedCode.NO_BUFFER, f"no buffer posted on queue {qn} for MSN {msn}"
            )
        # Check 5 (and 2 for this MSN): the MSN of a posted buffer, from
        # the head buffer's to the last one's. Checks 3 and 4 use that
        # buffer (the head buffer when the MSN has none).
        index = (msn - queue.next_msn) & MAX_MSN
        buffer = queue.buffers[index if index < len(queue.buffers) else 0]
        size = len(buffer.view)
        length = n - UNTAGGED_HEADER_SIZE
        if mo > size:  # check 3
            raise DdpUntaggedError(
                DdpUntaggedCode.INVALID_MO, f"MO {mo} beyond the {size}-octet buffer"
            )
        if mo + length > size:  # check 4
            raise DdpUntaggedError(
                DdpUntaggedCode.MESSAGE_TOO_LONG,
                f"message reaches octet {mo + length} of a {size}-octet buffer",
            )
        if index >= len(queue.buffers):  # check 5
            last_msn = (queue.next_msn + len(queue.buffers) - 1) & MAX_MSN
            raise DdpUntaggedError(
                DdpUntaggedCode.MSN_RANGE,
                f"MSN {msn} on queue {qn}, expected {queue.next_msn} to {last_msn}",
            )
        last = bool(control & LAST_FLAG)
        end = mo + length
        pending = queue.out_of_order
        if index == 0 and mo == queue.received and not pending:
            # In order: the common case, one counter.
            if length:
                if buffer.guarded:
                    with self.guard:
                        buffer.view[mo:end] = ulpdu[UNTAGGED_HEADER_SIZE:]
                else:
                    buffer.view[mo:end] = ulpdu[UNTAGGED_HEADER_SIZE:]
            if not last:
                queue.received = end
                return UntaggedSegment(qn, msn, mo, length, False, rsvdulp, rsvdulp2, buffer, None)
            queue.buffers.popleft()
            queue.next_msn = (msn + 1) & MAX_MSN
            queue.received = 0
            return UntaggedSegment(qn, msn, mo, length, True, rsvdulp, rsvdulp2, buffer, end)
        runs = pending.get(msn)
        if runs is None:
            runs = PlacedRuns()
            if index == 0 and queue.received:
                runs.add(0, queue.received)
        runs.add(mo, end)  # may refuse: too many pieces
        pending[msn] = runs
        if length:
            if buffer.guarded:
                with self.guard:
                    buffer.view[mo:end] = ulpdu[UNTAGGED_HEADER_SIZE:]
            else:
                buffer.view[mo:end] = ulpdu[UNTAGGED_HEADER_SIZE:]
        if last:
            runs.last = True
            runs.rsvdulp, runs.rsvdulp2 = rsvdulp, rsvdulp2
        delivered = queue._deliver_ready() if runs.complete else ()
        return UntaggedSegment(
            qn, msn, mo, length, last, rsvdulp, rsvdulp2, buffer, None, delivered
        )
