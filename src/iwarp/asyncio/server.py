"""The asyncio adapters' servers: a task per accepted connection, its
handler run and its failures reported.

:func:`start_server` listens (on a descriptor-shedding socket when the
host names one address) and runs a task per connection;
:func:`open_or_report` waits for an accepted connection to open;
:func:`run_handler` runs the application's handler. What is reported
where, and when a collection runs after a burst, is
:mod:`iwarp.serving`'s.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from iwarp.asyncio.driver import CoreDriver
from iwarp.errors import IwarpError
from iwarp.serving import BurstRelease, FailureHook, handler_failed, report
from iwarp.sockets import LISTEN_BACKLOG, listening_socket_for

__all__ = ["FailureHook", "open_or_report", "run_handler", "start_server"]

T = TypeVar("T")


async def run_handler(
    handler: Callable[[Any], Awaitable[None]],
    face: Any,
    peer: object,
    on_failure: FailureHook | None,
) -> bool:
    """Run an application's handler for one connection.

    Its exception is reported once, with the peer's address
    (:func:`~iwarp.serving.handler_failed`; never left for "Task exception
    was never retrieved"). Returns False when the handler raised;
    cancellation goes on.
    """
    try:
        await handler(face)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        handler_failed(on_failure, exc, peer)
        return False
    return True


async def open_or_report(
    driver: CoreDriver, opening: Awaitable[T], on_failure: FailureHook | None
) -> T | None:
    """Wait for an accepted connection to open (``opening``: MPA in full
    operation, or TCP up). None when it ended before (bad frames, timeouts,
    rejects): TCP is closed and the error reported (:func:`~iwarp.serving.report`)."""
    try:
        return await opening
    except IwarpError as exc:
        exc.__traceback__ = None  # kept by the connection: no cycle through this frame
        driver.close()  # after a reject, MPA leaves TCP open
        report(on_failure, exc, driver.peer())
        return None


async def _listening_socket(host: str | None, port: int, backlog: int) -> socket.socket | None:
    """One listening :class:`~iwarp.sockets.SheddingSocket` when ``host`` names exactly
    one address; None when it names several (asyncio then binds them all)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )
    return listening_socket_for(infos, backlog)


async def start_server(
    accept: Callable[[], tuple[CoreDriver, Coroutine[Any, Any, None]]],
    host: str | None,
    port: int,
    *,
    backlog: int = LISTEN_BACKLOG,
) -> asyncio.Server:
    """Listen on TCP; for each connection ``accept()`` gives its driver and
    the coroutine that serves it, run as a task the server keeps (so it is
    not collected while it runs).

    When ``host`` names one address, the listening socket closes
    connections it has no file descriptor for at once instead of leaving
    them in the backlog (:class:`~iwarp.sockets.SheddingSocket`); each accepted
    connection's startup timeout runs from its accept.

    After a burst of connections, a few full collections run as they end
    (:class:`~iwarp.serving.BurstRelease`, :data:`~iwarp.serving.RELEASE_AFTER`).
    """
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    release = BurstRelease()

    def ended(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        release.ended(len(tasks))

    def factory() -> CoreDriver:
        driver, job = accept()
        task = loop.create_task(job)
        tasks.add(task)
        task.add_done_callback(ended)
        release.opened(len(tasks))
        return driver

    sock = await _listening_socket(host, port, backlog)
    if sock is None:
        return await loop.create_server(factory, host, port, backlog=backlog)
    try:
        return await loop.create_server(factory, sock=sock, backlog=backlog)
    except BaseException:
        sock.close()
        raise
