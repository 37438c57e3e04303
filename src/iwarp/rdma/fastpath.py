"""The fast path of one queue pair: its common case in one object, one
call per message each way.

An RNIC's firmware sets a connection up and handles whatever is unusual;
its fast path moves the common case alone. Here the sans-IO cores are the
firmware, and a :data:`FastPath` is the fast path: once the connection is
in MPA full operation with the RDMAP stream operational and idle, and only
the queue pair's receive pool posted, :func:`engage` makes one that owns
the state that case moves:

- the send MSN, and the send direction's MPA position and marker phase:
  :meth:`~PyFastPath.send` frames a one-segment Send (or Send with
  Solicited Event) into its FPDU, markers and CRC as negotiated;
- the receive MSN, the receive direction's MPA position and marker phase,
  and the receive pool (its buffers are interchangeable: each is reposted
  as its message is copied out, so the posted queue only turns):
  :meth:`~PyFastPath.receive` takes the whole FPDUs at the start of its
  input that are one-segment Sends for the next MSN and fit a pool buffer
  (length, markers, CRC, DDP/RDMAP header checked), copies each payload out
  to the queue pair's message queue and returns their
  :class:`~iwarp.rdma.events.MessageQueued` events.

It declines anything else and does nothing with it: the first FPDU it does
not take, a partial one, a Send that needs more than one segment. The
queue pair then takes the state back into the cores (:func:`hand_back`,
one call) and hands them what was declined, so what the cores decide
(completions, errors, Terminate codes) is what they would have decided
without it. Every other call of the queue pair hands the state back first.

:data:`FastPath` is ``iwarp._speedups.FastPath`` (src/iwarp/_fastpath.c)
when the C accelerator runs, else :class:`PyFastPath`, its pure-Python
twin (``IWARP_NO_ACCEL=1``): same methods, results and errors; tests
compare the two and both with the cores alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Mapping
from operator import index
from typing import TYPE_CHECKING, Any

import iwarp._accel as _accel
import iwarp._small as _small
from iwarp._kernels import _ssize
from iwarp.ddp.wire import LAST_FLAG, UNTAGGED_HEADER, UNTAGGED_HEADER_SIZE
from iwarp.mpa.framing import fpdu_wire_size
from iwarp.mpa.wire import ULPDU_LENGTH
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.events import Event, MessageQueued
from iwarp.rdmap.memory import MemoryRegion
from iwarp.rdmap.work import RecvWR

__all__ = ["FastPath", "PyFastPath", "engage", "hand_back"]

#: What FastPath.state() returns: send MSN, octets sent, send phase, receive
#: MSN, octets received, receive phase, messages received.
State = tuple[int, int, int, int, int, int, int]
MakeEvent = Callable[[int], MessageQueued]

_pack_header = UNTAGGED_HEADER.pack
_PHASE_MASK = 511


def _integers(values: tuple[Any, ...], count: int, what: str) -> list[int]:
    """A settings tuple's items as the C object's argument parsing takes
    them: ``count`` of them, markers and CRC (items 4 and 5) by truth, the
    others integers (TypeError) in the C ``Py_ssize_t`` range
    (OverflowError), all converted before any range is checked."""
    if len(values) != count:
        raise TypeError(f"{what} must be a tuple of {count} items")
    out = [bool(v) if k in (4, 5) else index(v) for k, v in enumerate(values)]
    _ssize(*out)
    return out


def _check(value: int, top: int, what: str) -> int:
    if not 0 <= value <= top:
        raise ValueError(f"{what} must be 0 .. {top}")
    return value


def _check_phase(phase: int) -> int:
    if not 0 <= phase <= _PHASE_MASK or phase & 3:
        raise ValueError("phase must be a multiple of 4 below 512")
    return phase


def _octets(data: object, format_b: bool) -> memoryview | None:
    """A contiguous buffer's octets (with ``format_b``: only a
    one-dimensional buffer of unsigned bytes), or None: the cores take it
    and say what is wrong."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        return None
    if format_b:
        return view if view.format == "B" and view.ndim == 1 else None
    if not view.c_contiguous:
        return None
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class PyFastPath:
    """The fast path of one queue pair, in pure Python: the twin of the C
    accelerator's ``FastPath`` (the contract is
    :mod:`iwarp.rdma.fastpath`'s and src/iwarp/_fastpath.c's head comment).

    :param send: (DDP version, Send's and Send with Solicited Event's RDMAP
        control octets, next MSN, markers, CRC, marker phase, the most
        payload octets one segment holds).
    :param receive: (DDP version, the two control octets, next MSN,
        markers, CRC, marker phase, the largest ULPDU_Length taken, octets
        of a pool buffer).
    :param messages: the queue pair's message queue (its ``append``).
    :param events: MessageQueued events by size, shared.
    :param make_event: makes the event of a size ``events`` lacks.
    :raises ValueError: a value out of its range.
    """

    __slots__ = (
        "_append",
        "_events",
        "_limit",
        "_make_event",
        "_rx_crc",
        "_rx_markers",
        "_rx_msn",
        "_rx_octets",
        "_rx_phase",
        "_scratch",
        "_taken",
        "_tx_control",
        "_tx_crc",
        "_tx_markers",
        "_tx_max",
        "_tx_msn",
        "_tx_octets",
        "_tx_phase",
        "_tx_send",
        "_tx_send_se",
        "_want",
        "octets",
        "rest",
    )

    def __init__(
        self,
        send: tuple[int, int, int, int, bool, bool, int, int],
        receive: tuple[int, int, int, int, bool, bool, int, int, int],
        messages: deque[bytes],
        events: dict[int, MessageQueued],
        make_event: MakeEvent,
    ) -> None:
        # Checked in the C object's order: the types, then each tuple.
        settings: tuple[object, ...] = (send, receive)  # (any object, at run time)
        if not all(isinstance(item, tuple) for item in settings):
            raise TypeError("send and receive must be tuples")
        if not isinstance(events, dict):
            raise TypeError("events must be a dict")
        if not callable(make_event):
            raise TypeError("make_event must be callable")
        version, op, op_se, msn, markers, crc, phase, max_payload = _integers(send, 8, "send")
        self._tx_control = _check(version, 3, "version") | LAST_FLAG
        self._tx_send = _check(op, 255, "send")
        self._tx_send_se = _check(op_se, 255, "send_se")
        self._tx_msn = _check(msn, 0xFFFFFFFF, "msn")
        self._tx_markers = bool(markers)
        self._tx_crc = bool(crc)
        self._tx_phase = _check_phase(phase)
        self._tx_max = _check(max_payload, 0xFFFF - UNTAGGED_HEADER_SIZE, "max_payload")
        receive_ = _integers(receive, 9, "receive")
        version, op, op_se, msn, markers, crc, phase, limit, size = receive_
        #: What the next Send received must carry: DDP version, the two
        #: RDMAP control octets.
        self._want = (
            _check(version, 3, "version"),
            _check(op, 255, "send"),
            _check(op_se, 255, "send_se"),
        )
        self._rx_msn = _check(msn, 0xFFFFFFFF, "msn")
        self._rx_markers = bool(markers)
        self._rx_crc = bool(crc)
        self._rx_phase = _check_phase(phase)
        self._limit = _check(limit, 0xFFFF, "limit")
        # A payload is placed here, then copied out (the C object copies
        # straight into the message): no more than a ULPDU holds.
        self._scratch = bytearray(min(_check(size, 2**63 - 1, "size"), 0xFFFF))
        self._append = messages.append
        self._events = events
        self._make_event = make_event
        self._tx_octets = self._rx_octets = self._taken = 0
        #: Message octets the last receive queued.
        self.octets = 0
        #: Octets the last receive left to the cores (from the first it declined).
        self.rest = 0

    def send(self, data: object, solicited: bool = False) -> bytes | None:
        """The FPDU of a Send of ``data`` in one DDP segment (RFC 5041
        §4.3: L set, queue 0, MO 0; RDMAP Send or Send with Solicited Event,
        RFC 5040 §4.2), its MSN used. None (nothing done): ``data`` is not
        a contiguous buffer, or needs more than one segment."""
        op = self._tx_send_se if solicited else self._tx_send
        view = _octets(data, False)
        if view is None or len(view) > self._tx_max:
            return None
        header = _pack_header(self._tx_control, op, 0, 0, self._tx_msn, 0)
        frame, self._tx_phase = _small.small_send(
            header, view, self._tx_markers, self._tx_crc, self._tx_phase
        )
        self._tx_msn = (self._tx_msn + 1) & 0xFFFFFFFF
        self._tx_octets = (self._tx_octets + len(frame)) & 0xFFFFFFFF
        return frame

    def receive(self, data: object) -> list[Event] | None:
        """The events of the pool messages taken from the start of ``data``
        (see the module); :attr:`rest` octets were left, :attr:`octets`
        message octets queued. None: the first FPDU was declined and
        nothing was done."""
        view = _octets(data, True)
        if view is None:
            return None
        out: list[Event] = []
        size = len(view)
        at = 0
        self.octets = 0
        while at < size:
            wire = self._take(view[at:], out)
            if not wire:
                break
            at += wire
        if not at:
            return None
        self.rest = size - at
        return out

    def _take(self, view: memoryview, out: list[Event]) -> int:
        """The octets of the FPDU at the start of ``view`` when it was the
        next pool message (its event in ``out``), else 0 (nothing done)."""
        markers, phase = self._rx_markers, self._rx_phase
        lead = 4 if markers and phase == 0 else 0
        if len(view) < lead + 2:
            return 0
        n: int = ULPDU_LENGTH.unpack_from(view, lead)[0]
        if n > self._limit:
            return 0
        wire = fpdu_wire_size(n, phase, markers=markers)
        if wire > len(view):
            return 0
        version, op, op_se = self._want
        record = _small.small_receive(
            view[:wire], markers, self._rx_crc, phase, self._limit, version, self._rx_msn, op,
            op_se, self._scratch,
        )  # fmt: skip
        if record is None:
            return 0
        length = record[0]
        message = bytes(self._scratch[:length])
        event = self._events.get(length)
        if event is None:
            event = self._make_event(length)
        out.append(event)
        self._append(message)
        self._rx_phase = record[2]
        self._rx_octets = (self._rx_octets + wire) & 0xFFFFFFFF
        self._rx_msn = (self._rx_msn + 1) & 0xFFFFFFFF
        self._taken += 1
        self.octets += length
        return wire

    def state(self) -> State:
        """What the cores take back (:func:`hand_back`)."""
        return (
            self._tx_msn,
            self._tx_octets,
            self._tx_phase,
            self._rx_msn,
            self._rx_octets,
            self._rx_phase,
            self._taken,
        )


if TYPE_CHECKING:
    FastPath = PyFastPath
else:
    #: The fast path's class: the C accelerator's, else :class:`PyFastPath`.
    FastPath = getattr(_accel.speedups, "FastPath", PyFastPath)

#: A queue pair's receive pool, as the endpoint keeps it: by wr_id, the
#: region, the work request and the region's view.
Pool = Mapping[int, tuple[MemoryRegion, RecvWR, memoryview]]


def engage(
    conn: RdmaConnection,
    pool: Pool,
    tracked: Container[int],
    size: int,
    messages: deque[bytes],
    events: dict[int, MessageQueued],
    make_event: MakeEvent,
) -> PyFastPath | None:
    """A fast path that takes over ``conn``'s common case now, or None when
    it may not: not in MPA full operation with nothing queued, held back or
    waiting; the stream not operational and idle (:meth:`RdmapStream.lend
    <iwarp.rdmap.stream.RdmapStream.lend>`); a segment larger than MPA
    frames; or a posted receive that is not one of ``pool``'s (``size``
    octets, untracked, valid, not shared with Atomic Operations). From a
    fast path on, nothing may use ``conn`` until :func:`hand_back`."""
    stream = conn.stream
    if stream is None or conn.events_waiting:
        return None
    mpa = conn.mpa
    encoder = mpa.lane_encoder()
    decoder = mpa.lane_decoder()
    if encoder is None or decoder is None or encoder.max_ulpdu < stream.mulpdu:
        return None
    loan = stream.lend()
    if loan is None:
        return None
    for posted in loan.posted:
        wr = posted.context
        if wr is None or posted.guarded or len(posted.view) != size or wr.wr_id in tracked:
            return None
        entry = pool.get(wr.wr_id)
        if entry is None or entry[1] is not wr or not entry[0].valid:
            return None
    tx_markers, rx_markers = encoder.markers, decoder.markers
    return FastPath(
        (
            loan.version,
            loan.send_ctl,
            loan.send_se_ctl,
            loan.send_msn,
            tx_markers,
            encoder.crc,
            encoder.phase if tx_markers else 0,
            stream.mulpdu - UNTAGGED_HEADER_SIZE,
        ),
        (
            loan.version,
            loan.send_ctl,
            loan.send_se_ctl,
            loan.recv_msn,
            rx_markers,
            decoder.crc,
            decoder.phase if rx_markers else 0,
            decoder.max_ulpdu,
            size,
        ),
        messages,
        events,
        make_event,
    )


def hand_back(conn: RdmaConnection, fast: PyFastPath) -> None:
    """The cores take back what ``fast`` owned (one call each for MPA's two
    framers and the stream), after which ``fast`` must not be used."""
    tx_msn, tx_octets, tx_phase, rx_msn, rx_octets, rx_phase, taken = fast.state()
    stream = conn.stream
    mpa = conn.mpa
    # Nothing reached MPA or the stream while the fast path ran (engage):
    # the framers are still available to a lane.
    encoder = mpa.lane_encoder()
    decoder = mpa.lane_decoder()
    assert stream is not None and encoder is not None and decoder is not None
    encoder.advance(tx_octets, tx_phase)
    decoder.advance(rx_octets, rx_phase)
    stream.take_back(tx_msn, rx_msn, taken)
