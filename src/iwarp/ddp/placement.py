"""DDP at the data sink: validation, placement and reassembly (RFC 5041 §5, §7.1).

:class:`DdpReceiver` takes one ULPDU (a DDP segment) at a time, checks
every field RFC 5041 §7.1 lists, in its order, and only then copies the
payload where it belongs:

* tagged segments into the buffer an upper-layer *resolver* returns for
  (STag, TO, length) -- the resolver does the STag checks, because only the
  ULP knows the memory (RDMAP: protection domains, access rights);
* untagged segments into the buffer posted on their queue for their MSN.

MPA over TCP delivers segments in order, so each message's segments must
arrive in order too: an untagged MO must continue the message (else
"Invalid MO"), a tagged segment that follows an unfinished tagged message
must continue its STag and TO. On a failed check nothing of the segment is
placed and a :class:`~iwarp.ddp.errors.DdpError` is raised carrying the
offending header and segment length; the caller must then drop every later
segment (RFC 5041 §7.1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
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
    "DdpReceiver",
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
    #: Set on the last segment: the ULP message length (RFC 5041 §5.4).
    message_length: int | None


class UntaggedQueue(Generic[C]):
    """One untagged buffer queue of a DDP stream (RFC 5041 §5.1.2).

    Buffers are consumed one per message, in posting order; the first
    buffer belongs to MSN :attr:`next_msn` (starting at 1, RFC 5041 §4.3).
    """

    __slots__ = ("buffers", "next_msn", "qn", "received")

    def __init__(self, qn: int) -> None:
        self.qn = qn
        self.buffers: deque[PostedBuffer[C]] = deque()
        #: MSN of the message in progress or of the next one.
        self.next_msn = 1
        #: Octets of the message in progress received so far.
        self.received = 0

    def post(self, view: memoryview, context: C) -> None:
        """Add a buffer at the tail of the queue."""
        self.buffers.append(PostedBuffer(view, context))

    @property
    def in_progress(self) -> bool:
        """A message has started but its last segment has not arrived."""
        return self.received > 0

    def skip_message(self) -> None:
        """Consume MSN :attr:`next_msn` without a buffer (an RFC 6581 RTR Send)."""
        self.next_msn = (self.next_msn + 1) & MAX_MSN
        self.received = 0


class DdpReceiver(Generic[C]):
    """Validates and places incoming DDP segments of one DDP stream.

    :param queues: the untagged queues by QN; any other QN is invalid.
    :param resolver: finds the memory for a tagged segment.
    """

    __slots__ = (
        "_tag_next_to",
        "_tag_rsvdulp",
        "_tag_stag",
        "_tagged_open",
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
    ) -> None:
        self.queues = queues
        self.resolver = resolver
        #: The DV every segment must carry (1; 0 in RFC 5044 Appendix C RDMAC mode).
        self.version = version
        self._tagged_open = False  # an unfinished tagged message is in progress
        self._tag_stag = 0
        self._tag_next_to = 0
        self._tag_rsvdulp = 0

    @property
    def tagged_in_progress(self) -> bool:
        return self._tagged_open

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
        first = not self._tagged_open
        if not first:
            # RFC 5041 §4.2: every segment of a message has the same STag;
            # in order, its TO continues where the previous one ended.
            if stag != self._tag_stag:
                raise DdpTaggedError(
                    DdpTaggedCode.INVALID_STAG,
                    f"STag {stag:#010x} inside a message to STag {self._tag_stag:#010x}",
                )
            if to != self._tag_next_to:
                raise DdpTaggedError(
                    DdpTaggedCode.BASE_OR_BOUNDS,
                    f"TO {to:#x} does not continue the message (expected {self._tag_next_to:#x})",
                )
        if length or not (first and last):
            # RFC 5041 §5.2: STag and TO of a zero-length message are not checked.
            if not fits_to_space(to, length):
                raise DdpTaggedError(DdpTaggedCode.TO_WRAP, f"TO {to:#x} + {length} wraps")
            target = self.resolver(stag, to, length, rsvdulp, first)
            if length:
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
        buffer = queue.buffers[0]
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
        if msn != queue.next_msn:  # check 5: in order, only the head buffer is legal
            raise DdpUntaggedError(
                DdpUntaggedCode.MSN_RANGE,
                f"MSN {msn} on queue {qn}, expected {queue.next_msn}",
            )
        if mo != queue.received:
            raise DdpUntaggedError(
                DdpUntaggedCode.INVALID_MO,
                f"MO {mo} does not continue the message (expected {queue.received})",
            )
        if length:
            buffer.view[mo : mo + length] = ulpdu[UNTAGGED_HEADER_SIZE:]
        last = bool(control & LAST_FLAG)
        message_length = None
        if last:
            message_length = mo + length
            queue.buffers.popleft()
            queue.next_msn = (msn + 1) & MAX_MSN
            queue.received = 0
        else:
            queue.received = mo + length
        return UntaggedSegment(qn, msn, mo, length, last, rsvdulp, rsvdulp2, buffer, message_length)
