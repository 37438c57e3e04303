"""VI/TCP (Internet VI, draft-dicecco-vitcp-01): a whole RDMA-over-TCP protocol.

A sibling of the MPA/DDP/RDMAP stack sharing only the error base classes:
``wire`` (segment layouts, tolerant decoder), ``crc`` (the §3.6 trailer CRC),
``handshake`` (connection establishment state machines), ``connection``
(the sans-IO endpoint), ``events``, ``config`` and ``errors``.
"""
