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
    "connect": "iwarp.asyncio.rdma",
    "serve": "iwarp.asyncio.rdma",
    "QueuePair": "iwarp.asyncio.rdma",
    "CompletionQueue": "iwarp.asyncio.rdma",
    "ProtectionDomain": "iwarp.rdmap.memory",
    "MemoryRegion": "iwarp.rdmap.memory",
    "Access": "iwarp.rdmap.memory",
    "SendWR": "iwarp.rdmap.work",
    "WriteWR": "iwarp.rdmap.work",
    "ReadWR": "iwarp.rdmap.work",
    "RecvWR": "iwarp.rdmap.work",
    "Sge": "iwarp.rdmap.work",
    "Completion": "iwarp.rdmap.work",
    "CompletionStatus": "iwarp.rdmap.work",
    "MpaConfig": "iwarp.mpa.config",
    "Accept": "iwarp.mpa.policy",
    "Reject": "iwarp.mpa.policy",
    "ConnectionRejectedError": "iwarp.mpa.policy",
    "ConnectionTerminatedError": "iwarp.rdma.errors",
    "RdmaError": "iwarp.rdma.errors",
    "IwarpError": "iwarp.errors",
    "LocalProtocolError": "iwarp.errors",
    "RemoteProtocolError": "iwarp.errors",
    "MpaError": "iwarp.errors",
}

__all__ = [
    "__version__",
    "Accept",
    "Access",
    "Completion",
    "CompletionQueue",
    "CompletionStatus",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
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
    "WriteWR",
    "connect",
    "serve",
]

if TYPE_CHECKING:
    from iwarp.asyncio.rdma import CompletionQueue, QueuePair, connect, serve
    from iwarp.errors import IwarpError, LocalProtocolError, MpaError, RemoteProtocolError
    from iwarp.mpa.config import MpaConfig
    from iwarp.mpa.policy import Accept, ConnectionRejectedError, Reject
    from iwarp.rdma.errors import ConnectionTerminatedError, RdmaError
    from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
    from iwarp.rdmap.work import (
        Completion,
        CompletionStatus,
        ReadWR,
        RecvWR,
        SendWR,
        Sge,
        WriteWR,
    )


__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, globals())
