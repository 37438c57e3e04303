"""iwarp: RDMA over TCP (MPA, DDP, RDMAP) and VI/TCP, in Python.

The protocol logic lives in sans-IO cores (``iwarp.mpa``, ``iwarp.rdma``,
``iwarp.vitcp``...): bytes in with ``now``, events and buffers out, with no
sockets, clocks or event loops inside (the contract: :mod:`iwarp.contract`).
Thin drivers run them: asyncio (:mod:`iwarp.asyncio`), blocking sockets
(:mod:`iwarp.sync`), the CLI and the capture analyzer.

The names a verbs user needs are here (imported on first use, so ``import
iwarp`` stays cheap; ``dir(iwarp)`` lists them). A fragment (it runs in a
coroutine; the README has the whole program)::

    import iwarp

    async def echo(qp: iwarp.QueuePair) -> None:
        await qp.send(await qp.receive())

    server = await iwarp.serve(echo, "127.0.0.1", 0)
    async with await iwarp.connect("127.0.0.1", port) as qp:
        await qp.send(b"hello")
"""

from __future__ import annotations

from iwarp._face import lazy_face

# Not imported from typing: ``import iwarp`` (and the ``iwarp`` command's
# start-up) stays a few hundred microseconds. Type checkers read it as true.
TYPE_CHECKING = False

__version__ = "0.1.0"

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
    "IwarpError": "iwarp.errors",
    "LocalProtocolError": "iwarp.errors",
    "MemoryRegion": "iwarp.rdmap.memory",
    "MpaConfig": "iwarp.mpa.config",
    "MpaError": "iwarp.errors",
    "ProtectionDomain": "iwarp.rdmap.memory",
    "QueuePair": "iwarp.asyncio.rdma",
    "RdmaError": "iwarp.rdma.errors",
    "ReadWR": "iwarp.rdmap.work",
    "RecvWR": "iwarp.rdmap.work",
    "Reject": "iwarp.mpa.policy",
    "RemoteProtocolError": "iwarp.errors",
    "SendWR": "iwarp.rdmap.work",
    "Sge": "iwarp.rdmap.work",
    "WaitTimeoutError": "iwarp.errors",
    "WorkOpcode": "iwarp.rdmap.work",
    "WriteWR": "iwarp.rdmap.work",
    "connect": "iwarp.asyncio.rdma",
    "serve": "iwarp.asyncio.rdma",
}

__all__ = [
    "__version__",
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
    "IwarpError",
    "LocalProtocolError",
    "MemoryRegion",
    "MpaConfig",
    "MpaError",
    "ProtectionDomain",
    "QueuePair",
    "RdmaError",
    "ReadWR",
    "RecvWR",
    "Reject",
    "RemoteProtocolError",
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
    from iwarp.errors import (
        IwarpError,
        LocalProtocolError,
        MpaError,
        RemoteProtocolError,
        WaitTimeoutError,
    )
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
