"""The whole stack on both paths: accelerated == pure Python, octet for octet.

One initiator posts random RDMA Writes and Sends (some out of bounds, some
too long for the receive buffer) to a responder; the wire octets may be
corrupted and are delivered in random chunks. Run once with the C
accelerator and once without, everything observable must be equal: the
octets on the wire both ways, every event (completions, Terminates with
their layer/type/code and header copies, MPA errors with their stream
offsets), and every octet of the responder's memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp import _accel, _kernels
from iwarp.mpa import framing
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap import stream as stream_module
from iwarp.rdmap.memory import Access
from iwarp.rdmap.work import RecvWR, SendWR, Sge, WriteWR
from rdma.rdma_harness import make_ends, pump

pytestmark = pytest.mark.skipif(not _accel.ACTIVE, reason="the C accelerator is not active")

REGION = 9000
RECV_SIZE = 4000


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


Op = tuple[str, int, int]


def run(
    ops: list[Op], markers: bool, emss: int, chunk: int, flip: tuple[int, int] | None
) -> tuple[list[bytes], list[str], bytes, list[bytes], bytes]:
    config = MpaConfig(crc=True, markers=markers)
    a, b = make_ends(config, config, emss=emss)
    pump(a, b)
    region = bytearray(REGION)
    mr = b.pd.register(region, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    sinks = [bytearray(RECV_SIZE) for _ in range(4)]
    stream = b.conn.stream
    assert stream is not None
    for i, sink in enumerate(sinks):
        stream.post_recv(RecvWR(Sge(b.pd.register(sink, Access.LOCAL_WRITE)), wr_id=i))
    for i, (kind, at, length) in enumerate(ops):
        data = bytes((i * 7 + k) & 0xFF for k in range(length))
        if kind == "write":
            a.conn.post_send(WriteWR(data, mr.stag, at, wr_id=i))
        else:
            a.conn.post_send(SendWR(data, wr_id=i))
    wire: list[bytes] = []
    while True:
        out = b"".join(bytes(x) for x in a.conn.data_to_send(limit=1 << 16))
        if not out:
            break
        wire.append(out)
    stream_bytes = bytearray(b"".join(wire))
    if flip is not None and stream_bytes:
        stream_bytes[flip[0] % len(stream_bytes)] ^= flip[1]
    events = []
    # As the asyncio driver does: one receive buffer, reused for every read
    # (the core borrows it: nothing may keep a view into it).
    receive = bytearray(chunk)
    for i in range(0, len(stream_bytes), chunk):
        piece = stream_bytes[i : i + chunk]
        receive[: len(piece)] = piece
        events += b.conn.receive_data(memoryview(receive)[: len(piece)], 0.0)
        receive[:] = bytes(len(receive))
    answer = b"".join(bytes(x) for x in b.conn.data_to_send())
    return wire, [repr(e) for e in events], bytes(region), [bytes(s) for s in sinks], answer


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, REGION + 100), st.integers(0, 6000)),
        st.tuples(st.just("send"), st.just(0), st.integers(0, RECV_SIZE + 100)),
    ),
    min_size=1,
    max_size=6,
)


@given(
    ops=ops_strategy,
    markers=st.booleans(),
    emss=st.sampled_from([300, 700, 1460]),
    chunk=st.sampled_from([61, 1500, 9000, 1 << 16]),
    flip=st.none() | st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)),
)
@settings(max_examples=300)
def test_accelerated_equals_pure(
    ops: list[Op], markers: bool, emss: int, chunk: int, flip: tuple[int, int] | None
) -> None:
    fast = run(ops, markers, emss, chunk, flip)
    with pure():
        slow = run(ops, markers, emss, chunk, flip)
    assert fast == slow


def test_a_bulk_write_and_send_arrive_whole() -> None:
    """The common case, checked on its own: runs of segments placed whole."""
    ops: list[Op] = [("write", 0, REGION), ("send", 0, RECV_SIZE), ("write", 100, 5000)]
    wire, events, region, sinks, answer = run(ops, True, 1460, 1 << 16, None)
    assert answer == b""
    assert region[:100] == bytes((k) & 0xFF for k in range(100))
    assert region[100:5100] == bytes((14 + k) & 0xFF for k in range(5000))
    assert sinks[0] == bytes((7 + k) & 0xFF for k in range(RECV_SIZE))
    with pure():
        assert run(ops, True, 1460, 1 << 16, None) == (wire, events, region, sinks, answer)
