"""Blocking adapters: the sans-IO cores on plain sockets, no event loop, no threads.

The caller's thread moves the octets while it is inside a call (posting
work, polling or waiting for completions, receiving); every call that can
block takes ``timeout`` in seconds and raises :class:`WaitTimeoutError`
(a :class:`TimeoutError`) when it runs out. See docs/sync.md.

* :mod:`iwarp.sync.rdma`: queue pairs with verbs names,
  ``connect``/``listen``, ``ProtectionDomain``, ``CompletionQueue``,
  ``post_send``/``post_recv``/``poll``/``wait`` and the simple ``send``,
  ``receive``, ``rdma_write``, ``rdma_read``.
* :mod:`iwarp.sync.mpa`: a blocking MPA socket (FPDUs, no DDP/RDMAP), and
  delayed startup or culley-02 on a live connection (``open_stream``).
* :mod:`iwarp.sync.vitcp`: a blocking VI/TCP endpoint and listener.

This face re-exports the RDMA names, the same ones :mod:`iwarp.asyncio`
exports (``tests/test_faces.py`` compares them), except each adapter's own
way of waiting: ``listen``/``Listener`` and :data:`BUSY_POLL` here, ``serve`` there
(both raise the same :class:`WaitTimeoutError` for ``timeout=``). They
are imported on first use.
"""

from __future__ import annotations

from iwarp._face import lazy_face

# Not imported from typing: the face stays cheap. Type checkers read it as true.
TYPE_CHECKING = False

#: Public name -> module that defines it.
_EXPORTS = {
    "Accept": "iwarp.mpa.policy",
    "Access": "iwarp.rdmap.memory",
    "AtomicsNotSupportedError": "iwarp.rdma.errors",
    "BUSY_POLL": "iwarp.sync._driver",
    "CompareSwapWR": "iwarp.rdmap.work",
    "Completion": "iwarp.rdmap.work",
    "CompletionQueue": "iwarp.sync.rdma",
    "CompletionStatus": "iwarp.rdmap.work",
    "ConnectionRejectedError": "iwarp.mpa.policy",
    "ConnectionTerminatedError": "iwarp.rdma.errors",
    "FetchAddWR": "iwarp.rdmap.work",
    "ImmediateData": "iwarp.rdmap.work",
    "ImmediateWR": "iwarp.rdmap.work",
    "Listener": "iwarp.sync.rdma",
    "MemoryRegion": "iwarp.rdmap.memory",
    "MpaConfig": "iwarp.mpa.config",
    "ProtectionDomain": "iwarp.rdmap.memory",
    "QueuePair": "iwarp.sync.rdma",
    "RdmaError": "iwarp.rdma.errors",
    "ReadWR": "iwarp.rdmap.work",
    "RecvWR": "iwarp.rdmap.work",
    "Reject": "iwarp.mpa.policy",
    "SendWR": "iwarp.rdmap.work",
    "Sge": "iwarp.rdmap.work",
    "WaitTimeoutError": "iwarp.errors",
    "WorkOpcode": "iwarp.rdmap.work",
    "WriteWR": "iwarp.rdmap.work",
    "connect": "iwarp.sync.rdma",
    "listen": "iwarp.sync.rdma",
}

__all__ = [
    "BUSY_POLL",
    "Accept",
    "Access",
    "AtomicsNotSupportedError",
    "CompareSwapWR",
    "Completion",
    "CompletionQueue",
    "CompletionStatus",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
    "FetchAddWR",
    "ImmediateData",
    "ImmediateWR",
    "Listener",
    "MemoryRegion",
    "MpaConfig",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "ReadWR",
    "RecvWR",
    "Reject",
    "SendWR",
    "Sge",
    "WaitTimeoutError",
    "WorkOpcode",
    "WriteWR",
    "connect",
    "listen",
]

if TYPE_CHECKING:
    from iwarp.errors import WaitTimeoutError
    from iwarp.mpa.config import MpaConfig
    from iwarp.mpa.policy import Accept, ConnectionRejectedError, Reject
    from iwarp.rdma.errors import AtomicsNotSupportedError, ConnectionTerminatedError, RdmaError
    from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
    from iwarp.rdmap.work import (
        CompareSwapWR,
        Completion,
        CompletionStatus,
        FetchAddWR,
        ImmediateData,
        ImmediateWR,
        ReadWR,
        RecvWR,
        SendWR,
        Sge,
        WorkOpcode,
        WriteWR,
    )
    from iwarp.sync._driver import BUSY_POLL
    from iwarp.sync.rdma import CompletionQueue, Listener, QueuePair, connect, listen

__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, globals())
