"""The calls a driver makes per message, as the queue pair's own methods.

:class:`~iwarp.rdma.endpoint.QueuePairEndpoint` derives from
:data:`QueuePairBase`: ``iwarp._speedups.QueuePairBase``
(src/iwarp/_qpbase.c) when the C accelerator runs, else
:class:`PyQueuePairBase`, its pure-Python twin here (same methods, results
and errors; the docstrings below are the contract of both).

``send_now``, ``receive_data``, ``take_message`` and ``settled`` run once
or twice per message. While the queue pair's fast path runs (:mod:`iwarp.rdma.fastpath`,
the ``_fast`` attribute) they are the fast path's calls, and in C a driver
reaches it with no Python frame between (a Python method around each cost
about 1,000 instructions a call, as much as the fast path's own work; docs/
performance.md). What the fast path declines, and every call while none
runs, goes to the subclass's ``_send_slow`` and ``_receive_slow``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import iwarp._accel as _accel
from iwarp._typing import Buffer
from iwarp.rdma.events import Event
from iwarp.rdma.fastpath import PyFastPath
from iwarp.rdmap.work import Sge

__all__ = ["PyQueuePairBase", "QueuePairBase"]


class PyQueuePairBase:
    """A queue pair's per-message calls, in pure Python (the twin of the C
    accelerator's ``QueuePairBase``)."""

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_fast",
        "_messages",
        "_settled_fast",
        "message_octets",
    )

    #: The fast path while it owns the common case, else None.
    _fast: PyFastPath | None
    #: Received messages not taken yet (made on the first message), oldest first.
    _messages: deque[bytes] | None
    #: Octets of received messages not taken yet (drivers pause reading above a mark).
    message_octets: int
    #: :meth:`settled` while the fast path runs: the cores were settled when
    #: it began, and nothing but its own calls moves them meanwhile.
    _settled_fast: bool

    def send_now(
        self,
        data: Buffer | Sge,
        *,
        solicited: bool = False,
        invalidate_stag: int | None = None,
    ) -> bytes | None:
        """The simple API's Send on an idle queue pair, framed now and
        complete (no work request, no completion: nothing can fail it
        later): by the fast path while it runs, else by the small-message
        lane (:meth:`SmallLane.send <iwarp.rdma.small.SmallLane.send>`).
        Returns its FPDU, which the caller writes to TCP before anything
        ``data_to_send`` gives later (nothing waits there now). None:
        nothing was done; post a :class:`~iwarp.rdmap.work.SendWR` instead
        (the queue pair is busy, the message needs more than one segment,
        or the first send is held back).

        :raises ConnectionTerminatedError: the connection has ended.
        :raises LocalProtocolError: not connected yet, bad data or a bad
            Invalidate STag.
        """
        fast = self._fast
        if fast is not None and invalidate_stag is None:
            frame = fast.send(data, solicited)
            if frame is not None:
                return frame
        return self._send_slow(data, solicited, invalidate_stag)

    def receive_data(self, data: Buffer, now: float) -> list[Event]:
        """Octets from TCP in, the events they caused out
        (:meth:`iwarp.contract.Connection.receive_data`): the fast path
        takes the whole pool messages it can from the start; the first FPDU
        it declines, and all after it, go to the cores."""
        fast = self._fast
        done = None
        if fast is not None:
            done = fast.receive(data)
            if done is not None:
                self.message_octets += fast.octets
                if not fast.rest:
                    return done
        return self._receive_slow(data, now, done)

    def take_message(self) -> bytes | None:
        """The oldest message from the receive pool, or None."""
        messages = self._messages
        if not messages:
            return None
        data = messages.popleft()
        self.message_octets -= len(data)
        return data

    def settled(self) -> bool:
        """No output, no timer, no close required
        (:meth:`iwarp.contract.Connection.settled`; asked after every
        input): while the fast path runs, what the cores said when it began."""
        if self._fast is not None and self._settled_fast:
            return True
        return self._settled_slow()

    def _settled_slow(self) -> bool:
        """:meth:`settled` of the cores and the subclass (the subclass's)."""
        raise NotImplementedError

    def _send_slow(
        self, data: Buffer | Sge, solicited: bool, invalidate_stag: int | None
    ) -> bytes | None:
        """:meth:`send_now` without the fast path (the subclass's)."""
        raise NotImplementedError

    def _receive_slow(self, data: Buffer, now: float, done: list[Event] | None) -> list[Event]:
        """:meth:`receive_data` past the fast path (the subclass's): ``done``
        None, or the events of the messages it took from the start of
        ``data`` before the first FPDU it declined (``self._fast.rest``
        octets before the end)."""
        raise NotImplementedError


if TYPE_CHECKING:
    QueuePairBase = PyQueuePairBase
else:
    #: The base of the queue pair: the C accelerator's, else :class:`PyQueuePairBase`.
    QueuePairBase = getattr(_accel.speedups, "QueuePairBase", PyQueuePairBase)
