"""Blocking adapters: the sans-IO cores on plain sockets, no event loop, no threads.

The caller's thread moves the octets while it is inside a call (posting
work, polling or waiting for completions, receiving); every call that can
block takes ``timeout`` in seconds and raises :class:`WaitTimeoutError`
(a :class:`TimeoutError`) when it runs out. See docs/sync.md.

* :mod:`iwarp.sync.rdma` (re-exported here): queue pairs with verbs names,
  ``connect``/``listen``, ``ProtectionDomain``, ``CompletionQueue``,
  ``post_send``/``post_recv``/``poll``/``wait`` and the simple ``send``,
  ``receive``, ``rdma_write``, ``rdma_read``.
* :mod:`iwarp.sync.mpa`: a blocking MPA socket (FPDUs, no DDP/RDMAP), and
  delayed startup or culley-02 on a live connection (``open_stream``).
* :mod:`iwarp.sync.vitcp`: a blocking VI/TCP endpoint and listener.
"""

from __future__ import annotations

from iwarp.mpa.config import MpaConfig
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
from iwarp.sync._calls import WaitTimeoutError
from iwarp.sync._driver import BUSY_POLL
from iwarp.sync.rdma import (
    Accept,
    Access,
    CompletionQueue,
    ConnectionRejectedError,
    ConnectionTerminatedError,
    Listener,
    MemoryRegion,
    ProtectionDomain,
    QueuePair,
    RdmaError,
    Reject,
    connect,
    listen,
)

__all__ = [
    "BUSY_POLL",
    "Accept",
    "Access",
    "Completion",
    "CompletionQueue",
    "CompletionStatus",
    "ConnectionRejectedError",
    "ConnectionTerminatedError",
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
