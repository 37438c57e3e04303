"""An EMSS change in full operation reaches DDP/RDMAP segmentation.

RFC 5044 §3 / §4.5: MULPDU follows the EMSS. After ``set_emss(536)`` every
ULPDU that leaves is at most the new MULPDU, the message being segmented
included; before it, 1454-octet ULPDUs (EMSS 1460, CRC, no markers).
"""

from __future__ import annotations

import os

from iwarp.mpa.config import MpaConfig
from iwarp.mpa.framing import FpduDecoder
from iwarp.mpa.wire import mulpdu
from iwarp.rdmap.memory import Access
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import CompletionStatus, RecvWR, SendWR, Sge, WriteWR
from rdma.rdma_harness import make_ends, pump
from rdmap.rdmap_harness import make_pair

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def test_set_emss_in_full_operation_shrinks_every_later_ulpdu() -> None:
    posted: list[RdmapStream] = []
    a, b = make_ends(MpaConfig(), MpaConfig(), emss=1460, on_stream=posted.append)
    pump(a, b)
    (stream_b,) = posted
    assert a.conn.params is not None and a.conn.params.mulpdu == 1454
    received = bytearray(30_000)
    stream_b.post_recv(RecvWR(Sge(b.pd.register(received)), wr_id=1))
    second = bytearray(30_000)
    stream_b.post_recv(RecvWR(Sge(b.pd.register(second)), wr_id=2))
    remote = bytearray(30_000)
    region = b.pd.register(remote, ALL, address=0x4000)
    data = os.urandom(30_000)

    start = len(b"".join(a.wire))
    a.conn.post_send(SendWR(data[:5000], wr_id=1))  # before the change
    pump(a, b)
    middle = len(b"".join(a.wire))
    a.conn.set_emss(536)
    assert a.conn.params.mulpdu == mulpdu(536, markers=False)
    a.conn.post_send(SendWR(data, wr_id=2))
    a.conn.post_send(WriteWR(data[::-1], region.stag, 0x4000, wr_id=3))
    pump(a, b)

    wire = b"".join(a.wire)
    decoder = FpduDecoder(markers=False, crc=True)
    before = [len(u) for u in decoder.feed(wire[start:middle])]
    after = [len(u) for u in decoder.feed(wire[middle:])]
    assert max(before) == 1454
    assert after and max(after) <= mulpdu(536, markers=False) < 1454
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS),
        (2, CompletionStatus.SUCCESS),
        (3, CompletionStatus.SUCCESS),
    ]
    assert bytes(received[:5000]) == data[:5000]
    assert bytes(second) == data and bytes(remote) == data[::-1]


def test_the_message_being_segmented_follows_the_change() -> None:
    a, b = make_pair(mulpdu=1024)
    buf = bytearray(20_000)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(buf)), wr_id=9))
    data = os.urandom(20_000)
    a.stream.post_send(SendWR(data, wr_id=1))
    first = a.stream.ulpdus_to_send(limit=3000)  # part of the message
    assert first and max(len(u) for u in first) == 1024
    a.stream.set_mulpdu(300)
    rest = a.stream.ulpdus_to_send()
    assert rest and max(len(u) for u in rest) <= 300
    for ulpdu in (*first, *rest):
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    assert [(c.wr_id, c.byte_len) for c in b.completions()] == [(9, 20_000)]
    assert bytes(buf) == data
