"""The small-message lane: a one-segment Send framed, or received and
placed, in one kernel call, beside the full path of the cores.

In MPA full operation, with nothing queued or waiting, a
:class:`SmallLane`, which the endpoint holds once the RDMAP stream exists:

- :meth:`SmallLane.send` frames a Send (with or without Solicited Event or
  Invalidate) whose payload fits one DDP segment into its FPDU, markers and
  CRC as negotiated, in one call (``small_send``);
- :meth:`SmallLane.receive` takes a receive that is exactly one whole FPDU
  carrying a one-segment Send (or Send with Solicited Event) for the head
  posted receive buffer: the length field, markers, CRC, DDP/RDMAP header,
  MSN and buffer size are checked and the payload placed in one call
  (``small_receive``), which returns a compact completion record.

Anything else goes the full path, unchanged: the kernels decline (and
write nothing) whenever the full path could decide otherwise, so the wire
octets, events, completions, errors and memory are the full path's. The
state the lane touches stays owned by its cores and is advanced through one
narrow call each: the RDMAP stream's MSNs (:meth:`RdmapStream.claim_send
<iwarp.rdmap.stream.RdmapStream.claim_send>`,
:meth:`~iwarp.rdmap.stream.RdmapStream.send_taken`), the MPA stream position
and marker phase (:meth:`FpduEncoder.advance
<iwarp.mpa.framing.FpduEncoder.advance>`, :meth:`FpduDecoder.advance
<iwarp.mpa.framing.FpduDecoder.advance>`).

The kernels are the C accelerator's (``src/iwarp/_small.c``) or their
pure-Python twin (:mod:`iwarp._small`), chosen once, at import, as
:data:`kernels` by :mod:`iwarp._accel` (``IWARP_NO_ACCEL=1``: the pure ones).
"""

from __future__ import annotations

import iwarp._accel as _accel
import iwarp._small as _small
from iwarp._typing import Buffer
from iwarp.mpa.connection import MpaConnection
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import RecvWR, Sge

__all__ = ["SmallLane", "kernels"]

#: The lane's kernels: ``iwarp._speedups`` when the C accelerator runs,
#: else :mod:`iwarp._small` (the choice is :func:`iwarp._accel.choose_small`'s).
kernels = _accel.choose_small(_small)


class SmallLane:
    """The small-message lane of one connection in full operation: held by
    its :class:`~iwarp.rdma.endpoint.QueuePairEndpoint` from the moment the
    RDMAP stream exists, one call per message each way.

    It caches only what does not change for the connection (the cores it
    serves and the kernels); the state it touches stays the cores': each
    message asks MPA once whether the lane may run now (its framer, or None)
    and the stream once (:meth:`RdmapStream.claim_send
    <iwarp.rdmap.stream.RdmapStream.claim_send>` on send;
    :meth:`~iwarp.rdmap.stream.RdmapStream.send_target` and
    :meth:`~iwarp.rdmap.stream.RdmapStream.send_taken` on receive), and the
    framer's position and marker phase move by one ``advance``.
    """

    __slots__ = ("_mpa", "_small_receive", "_small_send", "_stream")

    def __init__(self, mpa: MpaConnection, stream: RdmapStream) -> None:
        self._mpa = mpa
        self._stream = stream
        self._small_send = kernels.small_send
        self._small_receive = kernels.small_receive

    def send(
        self,
        data: Buffer | Sge,
        solicited: bool = False,
        invalidate_stag: int | None = None,
        wr_id: int | None = None,
    ) -> bytes | None:
        """The FPDU of a Send that is complete once framed (nothing can fail
        it later: with a ``wr_id`` the stream queues its completion at once,
        without one none is made), when MPA is in full operation with
        nothing queued and the stream idle (:meth:`RdmapStream.claim_send
        <iwarp.rdmap.stream.RdmapStream.claim_send>`). The caller writes it
        before anything MPA gives later (a posted Send's:
        :meth:`MpaConnection.send_lane_fpdus
        <iwarp.mpa.connection.MpaConnection.send_lane_fpdus>`). None: nothing
        was done; post a :class:`~iwarp.rdmap.work.SendWR`.

        :raises LocalProtocolError: bad data or a bad Invalidate STag, as
            posting it would.
        """
        encoder = self._mpa.lane_encoder()
        stream = self._stream
        if encoder is None or encoder.max_ulpdu < stream.mulpdu:
            return None
        claimed = stream.claim_send(data, solicited, invalidate_stag, wr_id)
        if claimed is None:
            return None
        markers = encoder.markers
        # Without markers the phase is not used (nor kept: advance).
        frame, phase = self._small_send(
            claimed[0], claimed[1], markers, encoder.crc, encoder.phase if markers else 0
        )
        encoder.advance(len(frame), phase)
        return frame

    def receive(self, data: Buffer) -> tuple[RecvWR, int, bool] | None:
        """A receive that is one whole FPDU carrying a one-segment Send for
        the head posted receive buffer: checked, placed and its receive
        completed in one kernel call. Returns (work request, length,
        solicited) for the buffer's owner; no event is made. None: nothing
        was done (also while events wait, which come first, and for octets
        that are not a buffer of unsigned bytes); the full path takes
        ``data``."""
        decoder = self._mpa.lane_decoder()
        if decoder is None:
            return None
        stream = self._stream
        target = stream.send_target()
        if target is None:
            return None
        if type(data) is not bytes:
            if type(data) is not memoryview:  # (the drivers' reads are views already)
                data = memoryview(data)
            if data.format != "B":
                return None
        version, msn, send, send_se, head = target
        markers = decoder.markers
        record = self._small_receive(
            data,
            markers,
            decoder.crc,
            decoder.phase if markers else 0,
            decoder.max_ulpdu,
            version,
            msn,
            send,
            send_se,
            head,
        )
        if record is None:
            return None
        decoder.advance(len(data), record[2])
        return stream.send_taken(), record[0], record[1] == send_se
