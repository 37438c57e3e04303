"""iwarp: RDMA over TCP (MPA, DDP, RDMAP) and VI/TCP, in Python.

The protocol logic lives in sans-IO cores (``iwarp.mpa``, ...): bytes in,
events out, bytes to send out, with no sockets, clocks or event loops inside.
Thin adapters (asyncio, the CLI, the capture analyzer) drive those cores.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
