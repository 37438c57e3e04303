"""RDMAP core over back-to-back streams: Send, Write, Read, ordering, ORD."""

from __future__ import annotations

import mmap
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import UntaggedHeader
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.memory import Access
from iwarp.rdmap.wire import RdmapOpcode, split_control
from iwarp.rdmap.work import (
    CompletionStatus,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)
from rdmap.rdmap_harness import make_pair, pump


def test_send_into_posted_buffers_in_order() -> None:
    a, b = make_pair(mulpdu=128)
    bufs = [bytearray(300) for _ in range(3)]
    for i, buf in enumerate(bufs):
        b.stream.post_recv(RecvWR(Sge(b.pd.register(buf)), wr_id=10 + i))
    messages = [b"", os.urandom(110), os.urandom(300)]
    for i, msg in enumerate(messages):
        a.stream.post_send(SendWR(msg, wr_id=i, solicited=i == 1))
    pump(a, b)
    assert [(c.wr_id, c.opcode, c.status, c.byte_len) for c in a.completions()] == [
        (i, WorkOpcode.SEND, CompletionStatus.SUCCESS, len(m)) for i, m in enumerate(messages)
    ]
    recvs = b.completions()
    assert [(c.wr_id, c.byte_len, c.solicited) for c in recvs] == [
        (10, 0, False),
        (11, 110, True),
        (12, 300, False),
    ]
    for buf, msg in zip(bufs, messages, strict=True):
        assert bytes(buf[: len(msg)]) == msg
    # the 300-octet Send took several segments, MSN 3 on queue 0
    headers = [UntaggedHeader.unpack_from(s) for s in a.sent]
    assert [h.msn for h in headers][-1] == 3 and len(a.sent) > 3


def test_write_then_read_back() -> None:
    a, b = make_pair(mulpdu=200)
    target = bytearray(5000)
    region = b.pd.register(
        target, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ, address=0x7000
    )
    data = os.urandom(3000)
    a.stream.post_send(WriteWR(data, region.stag, 0x7000 + 100, wr_id=1))
    sink = bytearray(3000)
    sink_region = a.pd.register(sink)
    a.stream.post_send(ReadWR(Sge(sink_region), region.stag, 0x7000 + 100, wr_id=2))
    pump(a, b)
    assert bytes(target[100:3100]) == data
    assert not any(target[:100]) and not any(target[3100:])
    assert bytes(sink) == data
    assert [(c.wr_id, c.status, c.byte_len) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS, 3000),
        (2, CompletionStatus.SUCCESS, 3000),
    ]
    assert b.completions() == []  # Writes and Read Requests are invisible to b's ULP


def test_read_completes_before_later_send() -> None:
    a, b = make_pair()
    src = b.pd.register(bytearray(b"x" * 64), Access.REMOTE_READ)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=5))
    sink = a.pd.register(bytearray(64))
    a.stream.post_send(ReadWR(Sge(sink), src.stag, 0, wr_id=1))
    a.stream.post_send(SendWR(b"hi", wr_id=2))
    # The Send goes out right after the Read Request, but completes after the Read.
    out = a.stream.ulpdus_to_send()
    assert [split_control(u[1])[1] for u in out] == [
        RdmapOpcode.RDMA_READ_REQUEST,
        RdmapOpcode.SEND,
    ]
    assert a.stream.take_events() == []
    for u in out:
        b.events.extend(b.stream.handle_ulpdu(bytes(u)))
    pump(a, b)
    assert [c.wr_id for c in a.completions()] == [1, 2]


def test_ord_limits_outstanding_reads() -> None:
    a, b = make_pair(ord=1, ird=1)
    src = b.pd.register(bytearray(os.urandom(16)), Access.REMOTE_READ)
    sinks = [a.pd.register(bytearray(16)) for _ in range(3)]
    for i, sink in enumerate(sinks):
        a.stream.post_send(ReadWR(Sge(sink), src.stag, 0, wr_id=i))
    first = a.stream.ulpdus_to_send()
    assert len(first) == 1 and not a.stream.has_data_to_send  # waits for the response
    for u in first:
        b.stream.handle_ulpdu(bytes(u))
    for u in b.stream.ulpdus_to_send():
        a.events.extend(a.stream.handle_ulpdu(bytes(u)))
    assert a.stream.has_data_to_send
    pump(a, b)
    assert [c.wr_id for c in a.completions()] == [0, 1, 2]
    assert all(bytes(s.view) == bytes(src.view) for s in sinks)


def test_send_with_invalidate_invalidates_the_region() -> None:
    a, b = make_pair()
    region = b.pd.register(bytearray(32), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=3))
    a.stream.post_send(SendWR(b"done", invalidate_stag=region.stag, solicited=True))
    pump(a, b)
    (recv,) = b.completions()
    assert recv.invalidated_stag == region.stag and recv.solicited and recv.ok
    assert not region.valid


def test_zero_length_read_and_write_skip_stag_checks() -> None:
    a, b = make_pair()
    sink = a.pd.register(bytearray(4))
    a.stream.post_send(WriteWR(b"", 0xDEAD, 0, wr_id=1))
    a.stream.post_send(ReadWR(Sge(sink, 0, 0), 0xBEEF, 2**64 - 1, wr_id=2))
    pump(a, b)
    assert [(c.wr_id, c.ok) for c in a.completions()] == [(1, True), (2, True)]
    assert not b.terminates_sent()


def test_local_misuse_is_refused() -> None:
    a, b = make_pair(ord=0)
    other = b.pd.register(bytearray(8))
    readonly = a.pd.register(b"abc", Access.REMOTE_READ)
    with pytest.raises(LocalProtocolError):
        a.stream.post_recv(RecvWR(Sge(other)))  # another PD
    with pytest.raises(LocalProtocolError):
        a.stream.post_recv(RecvWR(Sge(readonly)))  # no local write
    with pytest.raises(LocalProtocolError):
        a.stream.post_send(ReadWR(Sge(a.pd.register(bytearray(8))), 1, 0))  # ORD 0
    with pytest.raises(LocalProtocolError):
        a.pd.register(b"abc", Access.REMOTE_WRITE)
    with pytest.raises(LocalProtocolError):
        a.stream.post_send(SendWR(Sge(readonly, 2, 5)))  # outside the region


ops = st.lists(
    st.tuples(st.sampled_from(["send", "write", "read"]), st.integers(0, 2500)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None)
@given(ops=ops, mulpdu=st.integers(128, 1500), seed=st.binary(min_size=8, max_size=8))
def test_random_operations_deliver_every_byte(
    ops: list[tuple[str, int]], mulpdu: int, seed: bytes
) -> None:
    a, b = make_pair(mulpdu=mulpdu, ord=2, ird=2)
    remote = bytearray(os.urandom(6000))
    remote_region = b.pd.register(
        remote, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ, address=1 << 40
    )
    expected_remote = bytearray(remote)
    checks: list[tuple[bytearray, bytes]] = []
    for i, (op, size) in enumerate(ops):
        data = (seed * (size // 8 + 1))[:size]
        if op == "send":
            buf = bytearray(size)
            b.stream.post_recv(RecvWR(Sge(b.pd.register(buf)), wr_id=i))
            a.stream.post_send(SendWR(data, wr_id=i))
            checks.append((buf, data))
        elif op == "write":
            a.stream.post_send(WriteWR(data, remote_region.stag, (1 << 40) + 7, wr_id=i))
            expected_remote[7 : 7 + size] = data
        else:
            # RFC 5040 §5.5 rule 12: a Read sees every earlier Write; a later
            # Write may or may not be seen, so then read where none writes.
            at = 3000 if any(o == "write" for o, _ in ops[i + 1 :]) else 0
            sink = bytearray(size)
            remote_to = (1 << 40) + at
            a.stream.post_send(
                ReadWR(Sge(a.pd.register(sink)), remote_region.stag, remote_to, wr_id=i)
            )
            checks.append((sink, bytes(expected_remote[at : at + size])))
    pump(a, b)
    assert [c.wr_id for c in a.completions()] == list(range(len(ops)))
    assert all(c.ok for c in a.completions() + b.completions())
    assert remote == expected_remote
    for buf, data in checks:
        assert bytes(buf) == data


def test_regions_over_mmap_and_memoryview() -> None:
    a, b = make_pair(mulpdu=300)
    with mmap.mmap(-1, 4096) as mapped:
        backing = bytearray(1024)
        view_region = b.pd.register(memoryview(backing)[256:512], Access.REMOTE_WRITE)
        map_region = b.pd.register(mapped, Access.REMOTE_WRITE | Access.REMOTE_READ)
        data = os.urandom(1000)
        a.stream.post_send(WriteWR(data, map_region.stag, 3000, wr_id=1))
        a.stream.post_send(WriteWR(data[:256], view_region.stag, 0, wr_id=2))
        sink = bytearray(1000)
        a.stream.post_send(ReadWR(Sge(a.pd.register(sink)), map_region.stag, 3000, wr_id=3))
        pump(a, b)
        assert mapped[3000:4000] == data and bytes(sink) == data
        assert bytes(backing[256:512]) == data[:256]
        assert not any(backing[:256]) and not any(backing[512:])
        assert all(c.ok for c in a.completions())
        map_region.deregister()
        view_region.deregister()


def test_remote_addresses_out_of_range_are_refused() -> None:
    a, _ = make_pair()
    sink = Sge(a.pd.register(bytearray(4)))
    for wr in (
        WriteWR(b"x", 1 << 32, 0),
        WriteWR(b"x", -1, 0),
        WriteWR(b"x", 5, 1 << 64),
        WriteWR(b"xy", 5, (1 << 64) - 1),
        ReadWR(sink, 1 << 32, 0),
        ReadWR(sink, 5, -1),
    ):
        with pytest.raises(LocalProtocolError):
            a.stream.post_send(wr)
    assert a.stream.ulpdus_to_send() == []
