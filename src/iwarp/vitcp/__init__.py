"""VI/TCP (Internet VI, draft-dicecco-vitcp-01): a whole RDMA-over-TCP protocol.

A sibling of the MPA/DDP/RDMAP stack sharing only the error base classes:
``wire`` (segment layouts, tolerant decoder), ``crc`` (the §3.6 trailer CRC),
``handshake`` (connection establishment state machines), ``connection``
(the sans-IO endpoint), ``memory`` (registered regions), ``events``,
``config`` and ``errors``; and, for the adapters, ``endpoint`` (what a VI
keeps: queues, completions, the keep-posted rule) and ``listener``
(discriminator demultiplexing, the peer-to-peer retry schedule).
"""
