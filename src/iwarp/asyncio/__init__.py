"""asyncio adapters: thin shells that run the sans-IO cores on real sockets.

One module per protocol: :mod:`iwarp.asyncio.rdma` (queue pairs over MPA,
DDP and RDMAP: ``connect``/``serve``, ``QueuePair``, ``CompletionQueue``),
:mod:`iwarp.asyncio.mpa` (MPA sockets and streams, no DDP/RDMAP) and
:mod:`iwarp.asyncio.vitcp` (VI/TCP endpoints and listeners).

This face re-exports the RDMA names, the same ones :mod:`iwarp.sync`
exports (``tests/test_faces.py`` compares them), except each adapter's own
way of waiting: ``serve`` here (an asyncio server), ``listen``/``Listener``,
``BUSY_POLL`` and ``WaitTimeoutError`` there. They are imported on first
use.
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
    "Completion": "iwarp.rdmap.work",
    "CompletionQueue": "iwarp.asyncio.rdma",
    "CompletionStatus": "iwarp.rdmap.work",
    "ConnectionRejectedError": "iwarp.mpa.policy",
    "ConnectionTerminatedError": "iwarp.rdma.errors",
    "MemoryRegion": "iwarp.rdmap.memory",
    "MpaConfig": "iwarp.mpa.config",
    "ProtectionDomain": "iwarp.rdmap.memory",
    "QueuePair": "iwarp.asyncio.rdma",
    "RdmaError": "iwarp.rdma.errors",
    "ReadWR": "iwarp.rdmap.work",
    "RecvWR": "iwarp.rdmap.work",
    "Reject": "iwarp.mpa.policy",
    "SendWR": "iwarp.rdmap.work",
    "Sge": "iwarp.rdmap.work",
    "WorkOpcode": "iwarp.rdmap.work",
    "WriteWR": "iwarp.rdmap.work",
    "connect": "iwarp.asyncio.rdma",
    "serve": "iwarp.asyncio.rdma",
}

__all__ = [
    "Accept",
    "Access",
    "AtomicsNotSupportedError",
    "Completion",
    "CompletionQueue",
    "CompletionStatus",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
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
    "WorkOpcode",
    "WriteWR",
    "connect",
    "serve",
]

if TYPE_CHECKING:
    from iwarp.asyncio.rdma import CompletionQueue, QueuePair, connect, serve
    from iwarp.mpa.config import MpaConfig
    from iwarp.mpa.policy import Accept, ConnectionRejectedError, Reject
    from iwarp.rdma.errors import AtomicsNotSupportedError, ConnectionTerminatedError, RdmaError
    from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
    from iwarp.rdmap.work import (
        Completion,
        CompletionStatus,
        ReadWR,
        RecvWR,
        SendWR,
        Sge,
        WorkOpcode,
        WriteWR,
    )

__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, globals())
