"""The composed iWARP stack (MPA + DDP + RDMAP) for one connection, sans-IO."""

from __future__ import annotations

from iwarp.rdma.connection import Event, RdmaConnection

__all__ = ["Event", "RdmaConnection"]
