"""What the blocking adapters' calls share besides the driver.

Their clock (:data:`clock`), deadlines from ``timeout`` arguments and the
error when one passes (:class:`WaitTimeoutError`); opening and accepting
TCP connections with deadlines (:func:`open_tcp`, :class:`TcpListener`);
``with`` closing a connection (:class:`CloseOnExit`); the ``busy_poll``
setting (:class:`BusyPolled`) and the polls (:func:`spin`, :func:`wait_any`
on several connections); and the hook a
capture taps new connections with (:class:`Tap`, :func:`tapping`).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, Protocol, Self

from iwarp._typing import Buffer
from iwarp.contract import Connection
from iwarp.errors import WaitTimeoutError
from iwarp.sockets import (
    LISTEN_BACKLOG,
    address_text,
    listening_socket,
    named_connect_error,
    tcp_setup,
)

__all__ = [
    "BusyPolled",
    "CloseOnExit",
    "Tap",
    "TcpListener",
    "Waitable",
    "WaitTimeoutError",
    "clock",
    "deadline_after",
    "open_tcp",
    "poll_timeout",
    "sleep_until",
    "spin",
    "spin_read",
    "tap_factory",
    "tap_sent",
    "tapping",
    "wait_any",
]

#: The clock every blocking adapter passes to its core as ``now``.
clock: Final = time.monotonic


class CloseOnExit:
    """``with`` for a blocking connection: :meth:`close` (graceful) when the
    block ends normally, :meth:`abort` (RST) when an exception leaves it."""

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.abort()


class Tap(Protocol):
    """Sees one connection's octets (``iwarp ping --sync --pcap`` records
    them; :class:`iwarp.analyze.pcapng.TcpFlow` is one)."""

    def sent(self, data: Buffer) -> None:
        """Octets the kernel took, in stream order."""

    def received(self, data: Buffer) -> None:
        """Octets read, in stream order."""

    def close(self) -> None:
        """The socket was closed."""


#: While one is set (:func:`tapping`), every new :class:`Driver` asks it for a tap
#: on its socket. One process-wide hook: the blocking adapters have no loop
#: to hang it on, and a capture wants every connection of the run.
_tap_factories: list[Callable[[socket.socket], Tap | None]] = []


@contextlib.contextmanager
def tapping(factory: Callable[[socket.socket], Tap | None]) -> Iterator[None]:
    """Connections whose driver starts inside the block get ``factory(sock)``
    as their tap (None: not tapped)."""
    _tap_factories.append(factory)
    try:
        yield
    finally:
        _tap_factories.remove(factory)


class _Polled(Protocol):
    busy_poll: float


class BusyPolled:
    """The ``busy_poll`` setting of a blocking connection
    (:data:`iwarp.sync._driver.BUSY_POLL`)."""

    def _polled(self) -> _Polled:
        raise NotImplementedError

    @property
    def busy_poll(self) -> float:
        """Seconds each blocking wait polls before it sleeps (0: sleeps at once)."""
        return self._polled().busy_poll

    @busy_poll.setter
    def busy_poll(self, seconds: float) -> None:
        if not seconds >= 0:  # also NaN
            raise ValueError(f"busy_poll must be >= 0 seconds, not {seconds}")
        self._polled().busy_poll = seconds


class Waitable(Protocol):
    """What :func:`wait_any` needs of each blocking driver it waits on."""

    core: Connection[Any]
    busy_poll: float

    def wait(self, deadline: float | None) -> bool: ...

    def interest(self) -> int: ...

    def fileno(self) -> int: ...

    def service(self, revents: int) -> None: ...

    def run_timer(self) -> None: ...


def tap_factory(sock: socket.socket) -> Tap | None:
    """The tap of a new connection's socket while :func:`tapping` (else None)."""
    return _tap_factories[-1](sock) if _tap_factories else None


def tap_sent(tap: Tap, batch: list[Buffer], sent: int) -> None:
    """The first ``sent`` octets of ``batch`` to ``tap``."""
    for chunk in batch:
        if sent <= 0:
            return
        view = memoryview(chunk).cast("B")
        tap.sent(view[:sent])
        sent -= len(view)


def deadline_after(timeout: float | None) -> float | None:
    """The clock value ``timeout`` seconds from now (None: wait forever)."""
    if timeout is None:
        return None
    if timeout < 0 or math.isnan(timeout):
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout}")
    return clock() + timeout


def open_tcp(
    host: str,
    port: int,
    deadline: float | None,
    local_address: tuple[str, int] | None = None,
) -> socket.socket:
    """A connected TCP socket, non-blocking, with TCP_NODELAY.

    :raises WaitTimeoutError: the connection was not set up in time.
    :raises OSError: it was refused or failed (the message names the
        address and the reason; the same class and errno as the socket's).
    """
    remaining = None if deadline is None else max(deadline - clock(), 0.0)
    try:
        sock = socket.create_connection((host, port), remaining, source_address=local_address)
    except TimeoutError as exc:  # socket.timeout: the deadline, not a protocol timer
        where = address_text((host, port))
        raise WaitTimeoutError(f"TCP connection to {where} timed out") from exc
    except OSError as exc:
        raise named_connect_error(exc, host, port) from exc
    sock.setblocking(False)
    tcp_setup(sock)
    return sock


def sleep_until(wake: float | None) -> list[tuple[int, int]]:
    """Sleep until ``wake`` (None: not at all); nothing became ready."""
    if wake is not None:
        time.sleep(max(wake - clock(), 0.0))
    return []


def poll_timeout(wake: float | None) -> float | None:
    """``poll``'s timeout in milliseconds (it rounds up) until ``wake``."""
    if wake is None:
        return None
    return max((wake - clock()) * 1000.0, 0.0)


class TcpListener:
    """A listening TCP socket whose :meth:`accept` waits no longer than asked.

    Out of file descriptors, it closes waiting connections at once instead
    of leaving them in the backlog (:class:`~iwarp.sockets.SheddingSocket`).
    """

    def __init__(self, host: str | None, port: int, backlog: int = LISTEN_BACKLOG) -> None:
        family = socket.AF_INET6 if host is not None and ":" in host else socket.AF_INET
        self.sock = listening_socket(family, (host or "", port), backlog)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    def accept(self, deadline: float | None) -> socket.socket:
        """The next TCP connection: non-blocking, TCP_NODELAY.

        :raises WaitTimeoutError: none arrived before the deadline.
        """
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                if deadline is not None and clock() >= deadline:
                    raise WaitTimeoutError("timed out waiting for a connection") from None
                poller.poll(poll_timeout(deadline))
                continue
            conn.setblocking(False)
            tcp_setup(conn)
            return conn

    def close(self) -> None:
        self.sock.close()


def wait_any(drivers: Sequence[Waitable], deadline: float | None) -> bool:
    """Wait once on several connections (a completion queue shared by queue
    pairs); False when none of them can make progress any more."""
    if len(drivers) == 1:
        return drivers[0].wait(deadline)
    poller = select.poll()
    by_fd: dict[int, Waitable] = {}
    wake = deadline
    for driver in drivers:
        mask = driver.interest()
        if mask:
            poller.register(driver.fileno(), mask)
            by_fd[driver.fileno()] = driver
        timer = driver.core.get_timer()
        if timer is not None and (wake is None or timer < wake):
            wake = timer
    if not by_fd and wake is deadline and all(d.core.get_timer() is None for d in drivers):
        return False
    if by_fd:
        busy = min(driver.busy_poll for driver in drivers)
        ready = spin(poller, wake, busy) or poller.poll(poll_timeout(wake))
    else:
        ready = sleep_until(wake)
    for fd, revents in ready:
        by_fd[fd].service(revents)
    for driver in drivers:
        driver.run_timer()
    return True


def spin(poller: Any, wake: float | None, busy_poll: float) -> list[tuple[int, int]]:
    """Poll without sleeping for up to ``busy_poll`` seconds (not past
    ``wake``); what became ready, or nothing."""
    if busy_poll <= 0:
        return []  # sleep at once: not even a first look
    poll = poller.poll
    ready: list[tuple[int, int]] = poll(0)
    if ready:
        return ready
    end = clock() + busy_poll
    if wake is not None and wake < end:
        end = wake
    while not ready and clock() < end:
        # A runnable process (the peer, on a busy machine) gets the CPU
        # first: spinning must not delay what it waits for.
        os.sched_yield()
        ready = poll(0)
    return ready


def spin_read(
    read: Callable[[], bool], wake: float | None, busy_poll: float, *, looked: bool = False
) -> bool:
    """Busy polling when only input is awaited: ``read()`` (one system call
    per look; True once something was read, then handled) without sleeping,
    for up to ``busy_poll`` seconds (not past ``wake``): the message is in as
    soon as it is seen. False when nothing came. ``looked``: the caller's
    own ``read()`` just found nothing (the first look is not repeated)."""
    if not looked and read():
        return True  # (the clock is read only when the first look found nothing)
    end = clock() + busy_poll
    if wake is not None and wake < end:
        end = wake
    while True:
        if clock() >= end:
            return False
        # A runnable process (the peer, on a busy machine) gets the CPU
        # first: spinning must not delay what it waits for.
        os.sched_yield()
        if read():
            return True
