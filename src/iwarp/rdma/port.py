"""A queue pair's lanes as one port: what a driver may ask of them
(:class:`iwarp.contract.Lanes`), and their core half, in one place.

The lanes (:mod:`iwarp.rdma.lanes`) move a message's octets below the
per-FPDU Python: a send lane writes a large message's FPDUs from the
caller's buffer, a receive ring checks and places what arrives. What they
need of the cores is small, and it is all here, asked of the state's owners
directly (no layer forwards it): MPA's encoder and decoder and their
position (:meth:`MpaConnection.lane_encoder
<iwarp.mpa.connection.MpaConnection.lane_encoder>`,
:meth:`~iwarp.mpa.connection.MpaConnection.lane_decoder`,
:meth:`~iwarp.mpa.connection.MpaConnection.lane_resync`), the RDMAP
stream's messages and windows (:meth:`RdmapStream.take_message
<iwarp.rdmap.stream.RdmapStream.take_message>`,
:meth:`~iwarp.rdmap.stream.RdmapStream.message_sent`,
:meth:`~iwarp.rdmap.stream.RdmapStream.lane_windows`,
:meth:`~iwarp.rdmap.stream.RdmapStream.lane_write_window`,
:meth:`~iwarp.rdmap.stream.RdmapStream.lane_placed`), and of the queue pair
that holds the port (:class:`LaneOwner`) whether its output is held back
and where its events go.

A :class:`~iwarp.rdma.endpoint.QueuePairEndpoint` gives a
:class:`LanePort` as its ``lanes`` while the lanes run (the C accelerator,
``IWARP_NO_LANES`` unset: :data:`iwarp._accel.LANES`); a driver reads that
attribute once and keeps the port.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import iwarp._accel as _accel
from iwarp._typing import Buffer
from iwarp.mpa.framing import FpduDecoder
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.lanes import LANE_MIN, LANE_MIN_SEGMENT, RING_SIZE, ReceiveLane, SendLane
from iwarp.rdmap.memory import MemoryRegion
from iwarp.rdmap.stream import LaneWindows

__all__ = ["LaneOwner", "LanePort"]


class LaneOwner(Protocol):
    """What the port asks of the queue pair that holds it
    (:class:`~iwarp.rdma.endpoint.QueuePairEndpoint`)."""

    @property
    def output_held(self) -> bool:
        """The stream's output is held back (no lane may start now)."""
        ...

    def lane_begin(self) -> None:
        """Before a lane uses MPA's or the stream's state: the queue pair's
        cores take back what its fast path holds (:mod:`iwarp.rdma.fastpath`)."""
        ...

    def lane_events(self, events: list[Any], now: float | None) -> None:
        """Route events the lanes caused (``now``: the input's time, if any)."""
        ...

    def take_events(self) -> list[Any]:
        """The queue pair's events, for the driver."""
        ...


class LanePort:
    """The lanes of one queue pair (:class:`iwarp.contract.Lanes`).

    :param conn: the queue pair's MPA + DDP + RDMAP core.
    :param owner: the queue pair, held weakly (it holds the port).
    """

    __slots__ = ("_conn", "_owner", "_sending")

    def __init__(self, conn: RdmaConnection, owner: LaneOwner) -> None:
        self._conn = conn
        self._owner = weakref.ref(owner)
        #: The lane take_send gave, until send_done.
        self._sending: SendLane | None = None

    def _begin(self) -> None:
        """The cores own every state a lane reads or moves (the fast path's
        MSNs and MPA positions handed back first)."""
        owner = self._owner()
        if owner is not None:
            owner.lane_begin()

    # -- the port (iwarp.contract.Lanes) -------------------------------------------

    def take_send(
        self, min_octets: int = LANE_MIN, min_segment: int = LANE_MIN_SEGMENT
    ) -> SendLane | None:
        """The next message as a send lane, when the queue pair's output is
        not held back, MPA is in full operation with nothing queued and the
        stream's next message is a Send, RDMA Write or Read Response of at
        least ``min_octets`` octets (or the rest of one begun). None: use
        ``data_to_send``.

        Without markers and with a MULPDU of at least ``min_segment``
        octets the lane points iovecs into the message (few of them);
        otherwise it frames into one contiguous buffer per batch, the
        payload copied once (``min_segment`` 0: iovecs at any framing).

        MPA's stream position moves past the whole message at once: whatever
        is framed next goes after it, and the caller writes the lane's
        octets before anything ``data_to_send`` gives later. Its completion
        waits for :meth:`send_done`.
        """
        stream = self._conn.stream
        if stream is None or not stream.has_data_to_send:
            return None  # (the common case, asked at every flush: cheapest first)
        owner = self._owner()
        if owner is None or owner.output_held:
            return None
        owner.lane_begin()
        encoder = self._conn.mpa.lane_encoder()
        if encoder is None or stream.mulpdu > encoder.max_ulpdu:
            return None
        contiguous = bool(min_segment) and (encoder.markers or stream.mulpdu < min_segment)
        taken = stream.take_message(min_octets)
        if taken is None:
            return None
        run, token = taken
        lane = SendLane(
            run,
            markers=encoder.markers,
            crc=encoder.crc,
            phase=encoder.phase,
            token=token,
            contiguous=contiguous,
        )
        encoder.advance(lane.total, lane.end_phase)
        self._sending = lane
        return lane

    def send_done(self) -> list[Any]:
        """Every octet of the lane :meth:`take_send` gave is with TCP: its
        work request completes; returns the queue pair's events."""
        self._begin()
        lane, self._sending = self._sending, None
        owner = self._owner()
        if lane is None or owner is None:
            return []
        conn = self._conn
        stream = conn.stream
        if stream is not None:
            stream.message_sent(lane.token)
        events = conn.take_events()
        if stream is not None:
            events += stream.take_events()
        if events:
            owner.lane_events(events, None)
        return owner.take_events()

    def receive_ring(self, size: int = RING_SIZE) -> ReceiveLane | None:
        """A receive ring of ``size`` octets serving this port, or None when
        the receive lane does not run (``IWARP_NO_RECEIVE_LANE=1``)."""
        return ReceiveLane(self, size) if _accel.RECEIVE_LANE else None

    # -- the core half (iwarp.rdma.lanes.RingOwner: what a ring asks) -----------------

    def lane_target(self) -> tuple[FpduDecoder | None, LaneWindows | None]:
        """What a receive ring may do now: MPA's decoder when it may walk the
        next FPDUs (full operation, no event waiting, nothing held back, no
        error; else None: the octets go to :meth:`lane_feed` whole), and
        where it may place (the stream's windows, or None)."""
        self._begin()
        decoder = self._conn.mpa.lane_decoder()
        if decoder is None:
            return None, None
        stream = self._conn.stream
        return decoder, (stream.lane_windows() if stream is not None else None)

    def lane_write_window(self, stag: int) -> MemoryRegion | None:
        """The region RDMA Writes to ``stag`` may be placed in, or None."""
        self._begin()
        stream = self._conn.stream
        return stream.lane_write_window(stag) if stream is not None else None

    def lane_placed(
        self, records: list[tuple[int, int, int, int, int]], octets: int, phase: int, now: float
    ) -> None:
        """The ring took the next ``octets`` octets of the stream (whole
        FPDUs, checked; the marker phase after them ``phase``) and placed
        what ``records`` say: MPA's position moves past them, the stream
        does its bookkeeping, and the events are routed."""
        self._begin()
        conn = self._conn
        decoder = conn.mpa.lane_decoder()
        assert decoder is not None
        decoder.advance(octets, phase)
        stream = conn.stream
        if stream is not None and records:
            stream.lane_placed(records)
        events = conn.take_events()
        if stream is not None and records:
            events += stream.take_events()
        owner = self._owner()
        if owner is not None:  # (also with no events: the input's time is its now)
            owner.lane_events(events, now)

    def lane_resync(self) -> int:
        """Octets that complete the FPDU MPA holds back (0: none), which the
        ring hands to :meth:`lane_feed` before it walks again."""
        self._begin()
        return self._conn.mpa.lane_resync()

    def lane_feed(self, data: Buffer, now: float) -> None:
        """Octets the ring leaves to the usual path, in stream order (the
        first FPDU it is not sure of and all after it); consumed before
        returning."""
        self._begin()
        events = self._conn.receive_data(data, now)
        owner = self._owner()
        if owner is not None:
            owner.lane_events(events, now)

    def take_events(self) -> list[Any]:
        """The queue pair's events."""
        owner = self._owner()
        return owner.take_events() if owner is not None else []
