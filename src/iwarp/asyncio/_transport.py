"""What the asyncio driver needs around asyncio's transports: the thread's
one receive buffer (:func:`receive_buffer`) and breaking the reference
cycle a closed transport keeps on Python 3.11 (:func:`release_transport`)."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Final

from iwarp.sockets import RECEIVE_BULK

__all__ = ["receive_buffer", "release_transport"]

_local = threading.local()

#: asyncio before 3.12 keeps a closed transport in a reference cycle
#: (:func:`release_transport`).
_CACHES_READ_CALLBACK: Final = sys.version_info < (3, 12)


def receive_buffer() -> memoryview:
    """The thread's one receive buffer, shared by its connections: each read
    is copied out (sized to what arrived) or consumed before the next one."""
    buffer: memoryview | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = memoryview(bytearray(RECEIVE_BULK))
    return buffer


def _no_read() -> None:
    """Stands in for a closed transport's read callback (never called)."""


def release_transport(transport: asyncio.BaseTransport) -> None:
    """Break the reference cycle asyncio 3.11 leaves in a closed transport.

    The selector transport keeps a bound method of itself as its read
    callback (``_read_ready_cb``): transport -> method -> transport. Closed,
    it holds its socket object, address tuples and buffers (about 3 KB per
    connection), which only the cyclic GC would free: 10,000 idle
    connections closed by their startup timeout kept 32 MB for as long as
    no full collection ran. CPython 3.12 drops the callback itself on close
    (gh-100348); asyncio offers no public way to do it, so on older versions
    we do the same once the transport has called ``connection_lost`` and
    reads no more (its reader was removed before). A plain function, not a
    method, stands in, so a stray call could do no harm.
    """
    if not _CACHES_READ_CALLBACK:
        return
    attributes = getattr(transport, "__dict__", None)
    if attributes is not None and "_read_ready_cb" in attributes:
        attributes["_read_ready_cb"] = _no_read
