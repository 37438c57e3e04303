"""``iwarp proxy``: a protocol-aware man in the middle between two iWARP peers.

:mod:`iwarp.proxy.spec` reads ``--fault`` SPECs, :mod:`iwarp.proxy.core`
follows one connection without I/O (decoding both directions with the
analyzer's readers and applying the faults), :mod:`iwarp.proxy.server` is
its asyncio adapter.
"""
