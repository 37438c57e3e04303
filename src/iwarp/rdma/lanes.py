"""The whole-message data lanes: a message's octets moved by one C call.

As on an RNIC, the protocol's decisions stay in the sans-IO cores and the
loop that moves octets runs below them. For a message whose work request is
validated, the RDMA core hands out one :class:`SendLane`: the message's
segments as one :class:`~iwarp.mpa.framing.SegmentRun` (header template,
payload buffer and range, room per segment, TO or MO base) and the MPA send
state it starts from (marker phase, markers and CRC on or off). The C
accelerator's ``send_lane`` builds each FPDU's head (marker, ULPDU_Length,
DDP/RDMAP header) and tail (PAD, marker, CRC) in scratch memory and
``sendmsg`` s iovecs that point into the caller's buffer, without the GIL,
until the socket is full, input arrives or every octet is out. The octets
are exactly those :meth:`FpduEncoder.encode_run
<iwarp.mpa.framing.FpduEncoder.encode_run>` gives for the same run.

What the lane keeps is a count of the octets the kernel took
(:attr:`SendLane.sent`): that is the whole cursor, and a later call resumes
from it. The cores learn one thing back: that the message is all out
(:meth:`RdmaConnection.lane_sent
<iwarp.rdma.connection.RdmaConnection.lane_sent>`), which completes its work
request; the MSN, the stream position and the completions stay theirs.

Without the accelerator (or with ``IWARP_NO_ACCEL=1``) there are no lanes
and the drivers write what ``data_to_send`` gives, as before;
``IWARP_NO_LANES=1`` turns the lanes off alone (the accelerator's framing
path, for comparison).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final, Protocol, cast

from iwarp import _accel
from iwarp._typing import Buffer
from iwarp.mpa.framing import SegmentRun

__all__ = ["ACTIVE", "LANE_MIN", "LANE_MIN_SEGMENT", "LaneState", "SendLane", "lane_kernels"]

#: Messages of at least this many payload octets take the send lane; smaller
#: ones are framed by MPA as before (one buffer, one ``send``), which costs
#: less than a lane's setup for them.
LANE_MIN: Final = 64 * 1024
#: The send lane runs only where its iovecs are few: without markers, and
#: with segments of at least this many octets (MULPDU). With MTU-sized
#: FPDUs (two iovecs per 1.4 KB) or markers (two more per 508 octets) the
#: kernel's cost per iovec ate the copy the lane saves: measured, the
#: framing path's sender took less CPU per MiB there (docs/performance.md).
LANE_MIN_SEGMENT: Final = 8 * 1024


class _LaneKernels(Protocol):
    """The lane functions of ``iwarp._speedups`` (src/iwarp/_lanes.c)."""

    def send_lane(
        self,
        fd: int | Buffer,
        header: Buffer,
        payload: Buffer,
        start: int,
        stop: int,
        room: int,
        field_at: int,
        field_size: int,
        base: int,
        last_mask: int,
        markers: bool,
        crc: bool,
        phase: int,
        skip: int,
        limit: int,
        wait_ms: int,
        watch_input: bool,
        /,
    ) -> tuple[int, int, int, int]: ...


def _load() -> _LaneKernels | None:
    kernels = _accel.speedups
    if kernels is None or not hasattr(kernels, "send_lane"):
        return None
    if os.environ.get("IWARP_NO_LANES", "") not in ("", "0"):
        return None  # the accelerator's framing path only (to compare)
    return cast(_LaneKernels, kernels)


_KERNELS = _load()
#: Whether the lanes run (the C accelerator is active and has them).
ACTIVE: Final = _KERNELS is not None


def lane_taker(core: object) -> Callable[[], SendLane | None] | None:
    """What a driver calls for the core's next lane: the core's
    ``take_lane``, or None when lanes do not run (no accelerator) or the
    core has none (everything then goes through ``data_to_send``)."""
    take: Callable[[], SendLane | None] | None = getattr(core, "take_lane", None)
    return take if ACTIVE else None


def lane_finished(core: Any, lane: SendLane) -> list[Any]:
    """A lane's message is all out: the core completes it (``lane_sent``);
    returns the events that caused (the work request's completion)."""
    core.lane_sent(lane)
    events: list[Any] = core.take_events()
    return events


def lane_kernels() -> _LaneKernels:
    """The C lane functions.

    :raises RuntimeError: the accelerator is not active (see :data:`ACTIVE`).
    """
    if _KERNELS is None:
        raise RuntimeError("the send lane needs the C accelerator (iwarp._speedups)")
    return _KERNELS


class LaneState(IntEnum):
    """How a :meth:`SendLane.pump` call ended."""

    #: Every octet of the message is with the kernel.
    DONE = 0
    #: The socket is full (or the wait ran out, or the call's limit was reached).
    FULL = 1
    #: Input arrived while waiting for room: read it, then pump again.
    INPUT = 2


class SendLane:
    """One message's FPDUs on their way to a socket.

    :param run: the message's segments (all not handed out before).
    :param markers: MPA markers on (RFC 5044 §4.3).
    :param crc: MPA CRC on (RFC 5044 §4.2); off sends zeros.
    :param phase: marker phase (mod 512 from the marker origin) of the
        message's first octet.
    :param token: what the core needs back when the message is out.
    """

    __slots__ = ("crc", "end_phase", "markers", "phase", "run", "sent", "token", "total")

    def __init__(
        self, run: SegmentRun, *, markers: bool, crc: bool, phase: int, token: object = None
    ) -> None:
        self.run = run
        self.markers = markers
        self.crc = crc
        self.phase = phase
        self.token = token
        #: Octets the kernel took so far (the cursor).
        self.sent = 0
        _, total, end_phase, _ = self._call(-1, 0, 0, False)
        #: Octets of the message's FPDUs on the wire.
        self.total: int = total
        #: Marker phase after the message (with markers on).
        self.end_phase: int = end_phase

    @property
    def done(self) -> bool:
        """Every octet is with the kernel."""
        return self.sent >= self.total

    def pump(
        self, fd: int, *, wait_ms: int = 0, watch_input: bool = False, limit: int = -1
    ) -> LaneState:
        """Write on: non-blocking ``sendmsg`` until the socket is full, then
        wait for room in ``poll`` without the GIL: ``wait_ms`` -1 until done,
        0 not at all, else at most that long. With ``watch_input`` the wait
        also ends when the socket is readable. ``limit`` caps the octets of
        this call (-1: none).

        :raises OSError: the connection failed.
        """
        sent, _, _, state = self._call(fd, limit, wait_ms, watch_input)
        self.sent += sent
        return LaneState(state)

    def copy(self, out: bytearray | memoryview) -> int:
        """Copy the next octets (as many as ``out`` holds) into ``out`` and
        count them as taken: for an event loop's transport to write when the
        socket is full (it then says when it drained). Returns how many."""
        copied, _, _, _ = self._call(out, -1, 0, False)
        self.sent += copied
        return copied

    def _call(
        self, fd: int | Buffer, limit: int, wait_ms: int, watch_input: bool
    ) -> tuple[int, int, int, int]:
        run = self.run
        return lane_kernels().send_lane(
            fd,
            run.header,
            run.payload,
            run.start,
            run.stop,
            run.room,
            run.field_at,
            run.field_size,
            run.base,
            run.last_mask,
            self.markers,
            self.crc,
            self.phase,
            self.sent,
            limit,
            wait_ms,
            watch_input,
        )
