"""Received octets are copied once, from the receive buffer into place.

Sends and RDMA Writes of 1 MiB arrive in borrowed 256 KiB reads (as the
drivers lend their receive buffer), markers off and on, on both kernel
modules. Placing them must not copy the data anywhere else first: the
Python allocations made while receiving (tracemalloc's peak per read) stay
far below the data received. Before the one kernel interface the pure path
copied every read (about 1.2 MiB allocated per MiB received, 2.3 with
markers); a copy of the payload anywhere on the way would show the same.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import pytest

from iwarp import _kernels
from iwarp.mpa import framing
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap import stream as stream_module
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import RecvWR, SendWR, Sge, WriteWR
from rdma.rdma_harness import make_ends, pump

SIZE = 1 << 20
MESSAGES = 3
READ = 256 * 1024


@contextmanager
def pure() -> Iterator[None]:
    modules = (framing, stream_module)
    saved = [getattr(m, "kernels") for m in modules]  # noqa: B009
    for module in modules:
        setattr(module, "kernels", _kernels)  # noqa: B010
    try:
        yield
    finally:
        for module, value in zip(modules, saved, strict=True):
            setattr(module, "kernels", value)  # noqa: B010


def allocated_per_mib(op: str, markers: bool) -> float:
    """Peak Python allocation per receive_data call, summed, per MiB received."""
    config = MpaConfig(crc=True, markers=markers)
    a, b = make_ends(config, config, emss=1460)
    pump(a, b)
    region = bytearray(SIZE)
    mr = b.pd.register(region, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    stream = b.conn.stream
    assert stream is not None
    sinks = [bytearray(SIZE) for _ in range(MESSAGES)]
    for i, sink in enumerate(sinks):
        stream.post_recv(RecvWR(Sge(b.pd.register(sink, Access.LOCAL_WRITE)), wr_id=i))
    data = os.urandom(SIZE)
    for i in range(MESSAGES):
        wr = WriteWR(data, mr.stag, 0, wr_id=i) if op == "write" else SendWR(data, wr_id=i)
        a.conn.post_send(wr)
    wire = bytearray()
    while True:
        out = a.conn.data_to_send(limit=1 << 16)
        if not out:
            break
        for piece in out:
            wire += piece
    receive = bytearray(READ)
    total = 0
    tracemalloc.start()
    try:
        for at in range(0, len(wire), READ):
            piece = memoryview(wire)[at : at + READ]
            receive[: len(piece)] = piece
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            b.conn.receive_data(memoryview(receive)[: len(piece)], 0.0)
            total += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    if op == "write":
        assert region == data
    else:
        assert all(sink == data for sink in sinks)
    return total / MESSAGES / SIZE


@pytest.mark.parametrize("path", ["chosen", "pure"])
@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("op", ["send", "write"])
def test_received_octets_are_copied_once(op: str, markers: bool, path: str) -> None:
    context: AbstractContextManager[None] = pure() if path == "pure" else nullcontext()
    with context:
        per_mib = allocated_per_mib(op, markers)
    assert per_mib < 0.25, f"{per_mib:.2f} MiB allocated per MiB received"
