"""RDMAP: the RDMA Protocol (RFC 5040) over DDP, sans-IO.

``wire`` declares the RDMAP control field, the Read Request and Terminate
headers; ``errors`` the Terminate error types and codes; ``memory`` the
protection domains, memory regions and STags; ``stream`` the protocol core
(Send, RDMA Write, RDMA Read, Terminate, RFC 6581 RTR).
"""

from __future__ import annotations
