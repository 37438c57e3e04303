"""The composed iWARP stack (MPA + DDP + RDMAP) for one connection, sans-IO."""

from __future__ import annotations

from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.events import StackEvent

__all__ = ["RdmaConnection", "StackEvent"]
