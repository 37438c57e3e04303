"""The whole-message data lanes: a message's octets moved by one C call.

As on an RNIC, the protocol's decisions stay in the sans-IO cores and the
loop that moves octets runs below them. For a message whose work request is
validated, the RDMA core hands out one :class:`SendLane`: the message's
segments as one :class:`~iwarp.mpa.runs.SegmentRun` (header template,
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
(:meth:`LanePort.send_done <iwarp.rdma.port.LanePort.send_done>`), which
completes its work request; the MSN, the stream position and the
completions stay theirs.

These are the lanes' moving parts; the drivers reach them only through a
core's port (:class:`iwarp.contract.Lanes`, made by
:class:`iwarp.rdma.port.LanePort`, which also holds the lanes' core half).

Without the accelerator (or with ``IWARP_NO_ACCEL=1``) there are no lanes
and the drivers write what ``data_to_send`` gives, as before;
``IWARP_NO_LANES=1`` turns the lanes off alone (the accelerator's framing
path, for comparison).
"""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

import iwarp._accel as _accel
from iwarp._typing import Buffer
from iwarp.contract import LaneState
from iwarp.mpa.framing import FpduDecoder
from iwarp.mpa.runs import SegmentRun
from iwarp.rdmap.memory import MemoryRegion
from iwarp.rdmap.stream import LaneWindows

if TYPE_CHECKING:
    from iwarp._speedups import LaneKernels

__all__ = [
    "ACTIVE",
    "RECEIVE_ACTIVE",
    "LANE_MIN",
    "LANE_MIN_SEGMENT",
    "RING_MIN",
    "RingOwner",
    "RING_SIZE",
    "LaneState",
    "ReceiveLane",
    "SendLane",
    "lane_kernels",
]

#: Messages of at least this many payload octets take the send lane; smaller
#: ones are framed by MPA as before (one buffer, one ``send``), which costs
#: less than a lane's setup for them.
LANE_MIN: Final = 64 * 1024
#: The send lane points iovecs into the message only where they are few:
#: without markers, and with segments of at least this many octets (MULPDU).
#: With MTU-sized FPDUs (two iovecs per 1.4 KB) or markers (two more per 508
#: octets) the kernel's cost per iovec ate the copy the iovecs save
#: (measured: docs/performance.md), so there the lane frames each batch
#: into one contiguous buffer instead (``SendLane(contiguous=True)``).
LANE_MIN_SEGMENT: Final = 8 * 1024


#: Whether the lanes run (the C accelerator is active and has them; the
#: choice is :mod:`iwarp._accel`'s).
ACTIVE: Final = _accel.LANES
#: Whether the drivers take the receive lane: :data:`ACTIVE`, unless
#: ``IWARP_NO_RECEIVE_LANE=1`` turns it off alone (to compare with the send
#: lanes still on).
RECEIVE_ACTIVE: Final = _accel.RECEIVE_LANE


def lane_kernels() -> LaneKernels:
    """The C lane functions (``send_lane``, ``recv_lane``; typed in
    ``_speedups.pyi``).

    :raises RuntimeError: the lanes do not run (see :data:`ACTIVE`).
    """
    kernels = _accel.lanes
    if kernels is None:
        raise RuntimeError("the send lane needs the C accelerator (iwarp._speedups)")
    return kernels


class SendLane:
    """One message's FPDUs on their way to a socket.

    :param run: the message's segments (all not handed out before).
    :param markers: MPA markers on (RFC 5044 §4.3).
    :param crc: MPA CRC on (RFC 5044 §4.2); off sends zeros.
    :param phase: marker phase (mod 512 from the marker origin) of the
        message's first octet.
    :param token: what the core needs back when the message is out.
    :param contiguous: frame every octet into one buffer per batch of up to
        64 KiB (the payload copied once, each FPDU's CRC taken right after)
        rather than pointing iovecs into the payload: the same octets, one
        iovec per ``sendmsg`` instead of two or more per FPDU.
    """

    __slots__ = (
        "contiguous",
        "crc",
        "end_phase",
        "markers",
        "phase",
        "run",
        "sent",
        "token",
        "total",
    )

    def __init__(
        self,
        run: SegmentRun,
        *,
        markers: bool,
        crc: bool,
        phase: int,
        token: object = None,
        contiguous: bool = False,
    ) -> None:
        self.run = run
        self.markers = markers
        self.crc = crc
        self.phase = phase
        self.token = token
        self.contiguous = contiguous
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
        this call (-1: none). The caller keeps ``fd`` open until the call
        returns (the blocking driver closes it under a lock; shutting the
        socket down ends the call).

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
            self.contiguous,
        )


#: The receive lane's ring: what one pump reads at most, as much as the
#: drivers' bulk reads without it (sockets.RECEIVE_BULK). Measured against
#: 256 KiB: the same CPU in memory, less between two processes (a quarter
#: of the reads, and of the TCP window updates they make).
RING_SIZE: Final = 1 << 20
#: A read of at least this many octets starts a connection's receive lane
#: (a bulk transfer; an idle or chatty connection keeps no ring).
RING_START: Final = 256 * 1024
#: The smallest ring: the largest FPDU (RFC 5044 §4.1: a 16-bit ULPDU_Length)
#: must fit whole.
RING_MIN: Final = 0x10000 + 8
#: Write windows a receive lane keeps (all are dropped when more are asked for).
_WRITE_WINDOWS: Final = 16
#: Nothing to place: the lane only reads, and finds where FPDUs end.
_NO_WINDOWS: Final = LaneWindows(0, None, -1, -1, (), False, -1, -1, 0, 0, deque())


class RingOwner(Protocol):
    """What a receive ring asks of the core half it serves
    (:class:`iwarp.rdma.port.LanePort`)."""

    def lane_target(self) -> tuple[FpduDecoder | None, LaneWindows | None]:
        """MPA's decoder when the lane may walk the next FPDUs (None: the
        octets go to :meth:`lane_feed` whole), and where it may place."""
        ...

    def lane_write_window(self, stag: int) -> MemoryRegion | None:
        """The region RDMA Writes to ``stag`` may be placed in, or None."""
        ...

    def lane_placed(
        self, records: list[tuple[int, int, int, int, int]], octets: int, phase: int, now: float
    ) -> None:
        """The lane took the next ``octets`` octets (whole FPDUs, checked;
        the marker phase after them ``phase``) and placed what ``records`` say."""
        ...

    def lane_resync(self) -> int:
        """Octets that complete the FPDU MPA holds back (0: none)."""
        ...

    def lane_feed(self, data: Buffer, now: float) -> None:
        """Octets the lane leaves to the usual path, in stream order."""
        ...

    def take_events(self) -> list[Any]:
        """The core's events."""
        ...


class ReceiveLane:
    """One connection's receive ring and the RDMA Write windows published
    to it: the C kernel ``recv_lane`` reads the socket into the ring until
    it is empty or the ring is full, checks every complete FPDU (length,
    CRC) and places each DDP segment that lies wholly inside a window the
    RDMAP core published, in order, and stops at the first FPDU it is not
    sure of; the caller hands that and the FPDUs after it to the usual
    path (:meth:`pump` does it all).

    A partial FPDU stays in the ring for the next read. The lane keeps no
    protocol state: the MSN, completions and the stream position stay the
    cores', which learn what was placed from its records (through
    ``owner``). A driver holds it as its :class:`iwarp.contract.LaneRing`.

    :param owner: the core half it serves (:class:`iwarp.rdma.port.LanePort`).
    :param size: the ring's octets (at least :data:`RING_MIN`).
    """

    __slots__ = (
        "_owner",
        "_regions",
        "_writes",
        "end",
        "eof",
        "error",
        "filled",
        "got",
        "ring",
        "start",
    )

    def __init__(self, owner: RingOwner, size: int = RING_SIZE) -> None:
        if size < RING_MIN:
            raise ValueError(f"a receive ring holds at least {RING_MIN} octets, not {size}")
        lane_kernels()
        self._owner = owner
        self.ring = bytearray(size)
        #: The octets ``ring[start:end]`` arrived and were not taken yet.
        self.start = 0
        self.end = 0
        #: The last read met the end of the stream (the peer's FIN).
        self.eof = False
        #: The last read filled the ring: more may wait in the socket.
        self.filled = False
        #: Octets the last read took from the socket.
        self.got = 0
        #: The errno of a read that failed after it took octets (raised by
        #: the caller once those are processed), else 0.
        self.error = 0
        self._writes: dict[int, tuple[memoryview, int]] = {}
        self._regions: list[MemoryRegion] = []

    @property
    def held(self) -> int:
        """Octets in the ring not taken yet."""
        return self.end - self.start

    def held_view(self, octets: int) -> memoryview:
        """The next ``octets`` octets held (for the usual path), taken."""
        start = self.start
        self.start = start + octets
        return memoryview(self.ring)[start : start + octets]

    def room(self) -> memoryview:
        """The ring's free octets, for a transport that reads into it (an
        event loop's ``get_buffer``): what is held moves to the front first
        when less room than the largest FPDU is left after it. Then
        :meth:`arrived` and :meth:`pump` with no socket."""
        held = self.end - self.start
        if self.start and (len(self.ring) - self.end < RING_MIN or not held):
            self.ring[:held] = self.ring[self.start : self.end]
            self.start, self.end = 0, held
        return memoryview(self.ring)[self.end :]

    def arrived(self, octets: int) -> None:
        """``octets`` were read into :meth:`room`."""
        if not 0 <= octets <= len(self.ring) - self.end:
            raise ValueError(f"{octets} octets do not fit the ring's room")
        self.end += octets
        self.got = octets

    def publish(self, stag: int, region: MemoryRegion | None) -> bool:
        """Publish ``region`` as the window of RDMA Writes to ``stag`` (the
        core's :meth:`RdmapStream.lane_write_window
        <iwarp.rdmap.stream.RdmapStream.lane_write_window>`); False: there
        is none, the usual path takes such segments."""
        if region is None or stag in self._writes:
            return False
        if len(self._writes) >= _WRITE_WINDOWS:
            self.withdraw()
        self._writes[stag] = (region.view, region.address)
        self._regions.append(region)
        return True

    def withdraw(self) -> None:
        """Drop every Write window (one of them was invalidated)."""
        self._writes.clear()
        self._regions.clear()

    def walk(
        self, fd: int, wait_ms: int, decoder: FpduDecoder | None, windows: LaneWindows | None
    ) -> tuple[list[tuple[int, int, int, int, int]], int, int, int, int]:
        """One kernel call: read ``fd`` (-1: do not), then check and place
        what ``windows`` allow (None: nothing; with ``decoder`` None the
        octets are not FPDUs the lane may walk). Returns (records, octets
        the lane took, the STag of a Write without a window or -1, the end
        of the complete FPDUs after those it took, the marker phase after
        them)."""
        for region in self._regions:
            if not region.valid:
                self.withdraw()
                break
        if decoder is None:
            crc, limit, markers, phase, either = False, 0, False, 0, False
        else:
            crc, limit = decoder.crc, decoder.max_ulpdu
            markers, phase, either = decoder.markers, decoder.phase, decoder.either_fpduptr
        if windows is None:
            windows = _NO_WINDOWS
        start, end, done, state, records, need, took, got, after = lane_kernels().recv_lane(
            fd,
            self.ring,
            self.start,
            self.end,
            wait_ms,
            crc,
            limit,
            windows.version,
            windows.tagged,
            windows.write_ctl,
            self._writes if windows is not _NO_WINDOWS else {},
            windows.read_ctl,
            windows.reads,
            windows.send_ok,
            windows.send_ctl,
            windows.send_se_ctl,
            windows.msn,
            windows.received,
            windows.sends,
            markers,
            phase,
            either,
        )
        if fd >= 0:
            self.got = got
            self.eof = bool(state & 1)
            self.filled = bool(state & 2)
            self.error = state >> 8
        self.start, self.end = start, end
        if decoder is None:
            return records, 0, -1, end, 0
        return records, took, need, done, after

    def pump(self, fd: int, now: float, wait_ms: int = 0) -> list[Any]:
        """Read the socket ``fd`` into the ring (until it is empty or the
        ring is full; ``wait_ms`` for the first octet: -1 until one comes,
        0 not at all, else at most that long, without the GIL; ``fd`` -1:
        no read, the octets :meth:`arrived` already) and process what is
        held: the lane checks and places every FPDU it is sure of
        (RDMA Writes, Read Responses and plain Sends inside the windows the
        core publishes), the core's usual path takes the rest, exactly as
        if it had read those octets. A partial FPDU waits in the ring.
        Returns the core's events. After it, :attr:`eof` says the peer
        closed (every octet before it is processed), :attr:`filled` that
        more may wait in the socket, :attr:`got` how much was read.

        :raises OSError: reading the socket failed (what arrived before the
            failure is processed first).
        """
        core = self._owner
        read = fd
        asked: set[int] = set()
        while True:
            decoder, windows = core.lane_target()
            records, took, need, done, phase = self.walk(read, wait_ms, decoder, windows)
            read, wait_ms = -1, 0
            if took:
                core.lane_placed(records, took, phase, now)
            if need >= 0 and windows is not None and need not in asked:
                asked.add(need)
                if self.publish(need, core.lane_write_window(need)):
                    continue  # the window is there: go on from that FPDU
            if decoder is None:
                resync = core.lane_resync()
                if resync:
                    # Complete the FPDU MPA holds back; then the lane may go on.
                    while resync and self.held:
                        core.lane_feed(self.held_view(min(resync, self.held)), now)
                        resync = core.lane_resync()
                    if self.held and core.lane_target()[0] is not None:
                        continue
                if self.held:
                    core.lane_feed(self.held_view(self.held), now)
                break
            if done > self.start:
                # The first FPDU the lane is not sure of, and all after it.
                core.lane_feed(self.held_view(done - self.start), now)
            break
        if (self.eof or self.error) and self.held:
            core.lane_feed(self.held_view(self.held), now)
        if self.error:
            error, self.error = self.error, 0
            raise OSError(error, os.strerror(error))
        return core.take_events()

    def release(self, now: float) -> list[Any]:
        """What the ring holds goes to the core's usual path (the input
        ended); returns the core's events."""
        core = self._owner
        if self.held:
            core.lane_feed(self.held_view(self.held), now)
        return core.take_events()
