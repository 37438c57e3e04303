"""asyncio adapters: thin shells that run the sans-IO cores on real sockets.

One module per protocol: :mod:`iwarp.asyncio.rdma` (queue pairs over MPA,
DDP and RDMAP: ``connect``/``serve``, ``QueuePair``, ``CompletionQueue``),
:mod:`iwarp.asyncio.mpa` (MPA sockets and streams, no DDP/RDMAP) and
:mod:`iwarp.asyncio.vitcp` (VI/TCP endpoints and listeners).

This face re-exports the RDMA names, the same ones :mod:`iwarp.sync`
exports (``tests/test_faces.py`` compares them), except each adapter's own
way of waiting: ``serve`` here (an asyncio server), ``listen``/``Listener`` and
``BUSY_POLL`` there (both raise the same ``WaitTimeoutError`` for
``timeout=``). They are imported on first use.
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
    "CompareSwapWR": "iwarp.rdmap.work",
    "Completion": "iwarp.rdmap.work",
    "CompletionQueue": "iwarp.asyncio.rdma",
    "CompletionStatus": "iwarp.rdmap.work",
    "ConnectionRejectedError": "iwarp.mpa.policy",
    "ConnectionTerminatedError": "iwarp.rdma.errors",
    "FetchAddWR": "iwarp.rdmap.work",
    "ImmediateData": "iwarp.rdmap.work",
    "ImmediateWR": "iwarp.rdmap.work",
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
    "WaitTimeoutError": "iwarp.errors",
    "WorkOpcode": "iwarp.rdmap.work",
    "WriteWR": "iwarp.rdmap.work",
    "connect": "iwarp.asyncio.rdma",
    "serve": "iwarp.asyncio.rdma",
}

__all__ = [
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
    "serve",
]

if TYPE_CHECKING:
    from iwarp.asyncio.rdma import CompletionQueue, QueuePair, connect, serve
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

__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, globals())
