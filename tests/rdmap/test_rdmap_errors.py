"""Every RFC 5040/5041 error case, triggered on purpose.

Each test checks the Terminate fields (layer, type, code, header copies),
the completions on both sides, and that memory around the target region is
untouched.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import TAGGED_HEADER_SIZE, UNTAGGED_HEADER_SIZE, TaggedHeader, UntaggedHeader
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.memory import Access, MemoryRegion
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest, rdmap_control
from iwarp.rdmap.work import CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WorkOpcode, WriteWR
from rdmap.rdmap_harness import Side, make_pair, pump

GUARD = b"\xa5" * 16
ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def guarded(side: Side, size: int, access: Access = ALL) -> tuple[bytearray, MemoryRegion]:
    """A region of ``size`` octets in the middle of a bigger buffer with guard bytes."""
    backing = bytearray(GUARD + b"\x5a" * size + GUARD)
    view = memoryview(backing)[16 : 16 + size]
    return backing, side.pd.register(view, access, address=0x10000)


def intact(backing: bytearray, size: int) -> bool:
    return backing == bytearray(GUARD + b"\x5a" * size + GUARD)


def term_fields(side: Side) -> tuple[int, int, int]:
    (sent,) = side.terminates_sent()
    return sent.header.layer, sent.header.etype, sent.header.code


def received_fields(side: Side) -> tuple[int, int, int]:
    (received,) = side.terminates_received()
    return received.header.layer, received.header.etype, received.header.code


# --- RDMA Write: DDP tagged buffer errors (RFC 5041 §7.2 type 1) -------------


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("bad_stag", 0x00),
        ("bounds", 0x01),
        ("wrong_pd", 0x02),
        ("no_rights", 0x00),
        ("invalidated", 0x00),
        ("deregistered", 0x00),
    ],
)
def test_write_violations(case: str, code: int) -> None:
    a, b = make_pair(mulpdu=256)
    backing, region = guarded(b, 64)
    stag, to = region.stag, 0x10000
    if case == "bad_stag":
        stag ^= 0x100
    elif case == "bounds":
        to += 40  # 40 + 30 > 64
    elif case == "wrong_pd":
        backing, region = guarded(Side(b.stream, a.pd), 64)  # registered in a's PD
        stag = region.stag
    elif case == "no_rights":
        backing, region = guarded(b, 64, Access.LOCAL_WRITE | Access.REMOTE_READ)
        stag = region.stag
    elif case == "invalidated":
        region.invalidate()
    elif case == "deregistered":
        region.deregister()
    a.stream.post_send(WriteWR(b"\x01" * 30, stag, to, wr_id=1))
    a.stream.post_send(SendWR(b"after", wr_id=2))
    pump(a, b)
    assert term_fields(b) == (1, 1, code)  # layer DDP, tagged buffer error
    assert received_fields(a) == (1, 1, code)
    (term,) = b.terminates_sent()
    assert term.header.ddp_header == a.sent[0][:TAGGED_HEADER_SIZE]
    assert term.header.segment_length == TAGGED_HEADER_SIZE + 30
    assert term.header.rdma_header is None
    assert intact(backing, 64)
    # The Write and the Send were handed to MPA: both completed on a's side.
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS),
        (2, CompletionStatus.SUCCESS),
    ]
    assert b.stream.state is StreamState.TERMINATED
    assert a.stream.state is StreamState.TERMINATED


def test_write_to_wrap() -> None:
    _, b = make_pair()
    raw = TaggedHeader(0x1234, 2**64 - 2, rsvdulp=rdmap_control(0)).pack() + b"abcd"
    b.events.extend(b.stream.handle_ulpdu(raw))
    assert term_fields(b) == (1, 1, 0x03)


# --- RDMA Read Request: RDMAP remote protection errors -----------------------


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("bad_stag", 0x00),
        ("bounds", 0x01),
        ("no_rights", 0x02),
        ("wrong_pd", 0x03),
        ("invalidated", 0x00),
    ],
)
def test_read_violations(case: str, code: int) -> None:
    a, b = make_pair()
    backing, region = guarded(b, 64)
    stag, to = region.stag, 0x10000
    if case == "bad_stag":
        stag = 0x0BAD0000
    elif case == "bounds":
        to -= 1
    elif case == "no_rights":
        backing, region = guarded(b, 64, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        stag = region.stag
    elif case == "wrong_pd":
        backing, region = guarded(Side(b.stream, a.pd), 64)
        stag = region.stag
    elif case == "invalidated":
        region.invalidate()
    sink_backing, sink = guarded(a, 32)
    a.stream.post_send(ReadWR(Sge(sink), stag, to, wr_id=7))
    a.stream.post_send(SendWR(b"later", wr_id=8))
    pump(a, b)
    assert term_fields(b) == (0, 1, code)  # layer RDMAP, remote protection
    assert received_fields(a) == (0, 1, code)
    (term,) = b.terminates_sent()
    request = a.sent[0]
    assert term.header.ddp_header == request[:UNTAGGED_HEADER_SIZE]
    assert term.header.segment_length == len(request)
    assert term.header.rdma_header == request[UNTAGGED_HEADER_SIZE:]
    assert ReadRequest.unpack_from(term.header.rdma_header).src_stag == stag
    # The Read fails with a remote access error; the Send after it was sent
    # but completes after the Read (in order), successfully.
    assert [(c.wr_id, c.opcode, c.status) for c in a.completions()] == [
        (7, WorkOpcode.RDMA_READ, CompletionStatus.REMOTE_ACCESS_ERROR),
        (8, WorkOpcode.SEND, CompletionStatus.SUCCESS),
    ]
    assert intact(backing, 64) and intact(sink_backing, 32)


# --- Send: DDP untagged buffer errors (RFC 5041 §7.2 type 2) ------------------


def test_send_without_posted_receive() -> None:
    a, b = make_pair()
    a.stream.post_send(SendWR(b"nobody listens", wr_id=1))
    pump(a, b)
    assert term_fields(b) == (1, 2, 0x02)
    assert received_fields(a) == (1, 2, 0x02)
    (term,) = b.terminates_sent()
    assert term.header.ddp_header == a.sent[0][:UNTAGGED_HEADER_SIZE]


def test_send_too_long_for_the_buffer() -> None:
    a, b = make_pair()
    backing, region = guarded(b, 8)
    b.stream.post_recv(RecvWR(Sge(region), wr_id=4))
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=5))
    a.stream.post_send(SendWR(b"0123456789", wr_id=1))
    pump(a, b)
    assert term_fields(b) == (1, 2, 0x05)
    assert [(c.wr_id, c.status) for c in b.completions()] == [
        (4, CompletionStatus.LOCAL_LENGTH_ERROR),
        (5, CompletionStatus.FLUSHED),
    ]
    assert intact(backing, 8)


def test_msn_out_of_range() -> None:
    _, b = make_pair()
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=1))
    raw = UntaggedHeader(0, 5, 0, rsvdulp=rdmap_control(RdmapOpcode.SEND)).pack() + b"x"
    b.events.extend(b.stream.handle_ulpdu(raw))
    assert term_fields(b) == (1, 2, 0x03)
    assert b.completions()[0].status is CompletionStatus.FLUSHED


def test_invalid_queue_number() -> None:
    _, b = make_pair()
    raw = UntaggedHeader(9, 1, 0, rsvdulp=rdmap_control(RdmapOpcode.SEND)).pack()
    b.events.extend(b.stream.handle_ulpdu(raw))
    assert term_fields(b) == (1, 2, 0x01)


def test_ird_exceeded_by_peer() -> None:
    """The peer believes ORD 2 but we granted IRD 1: its second Read finds no slot."""
    a, b = make_pair(ord=2, peer_ird=1)
    src = b.pd.register(bytearray(16), Access.REMOTE_READ)
    sinks = [a.pd.register(bytearray(16)) for _ in range(2)]
    for i, sink in enumerate(sinks):
        a.stream.post_send(ReadWR(Sge(sink), src.stag, 0, wr_id=i))
    requests = a.stream.ulpdus_to_send()
    assert len(requests) == 2  # a's ORD allows both
    for ulpdu in requests:
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    assert term_fields(b) == (1, 2, 0x02)  # queue 1 has no buffer for MSN 2
    pump(a, b)
    assert received_fields(a) == (1, 2, 0x02)
    assert [c.status for c in a.completions()] == [
        CompletionStatus.REMOTE_INVALID_REQUEST,
        CompletionStatus.FLUSHED,
    ]


def test_ord_exceeded_is_never_sent() -> None:
    a, _ = make_pair(ord=1)
    sinks = [a.pd.register(bytearray(4)) for _ in range(3)]
    for sink in sinks:
        a.stream.post_send(ReadWR(Sge(sink), 0x100, 0))
    assert len(a.stream.ulpdus_to_send()) == 1


# --- Send with Invalidate: RDMAP remote protection, cannot invalidate --------


@pytest.mark.parametrize("case", ["unknown", "wrong_pd", "invalidated"])
def test_send_with_invalidate_of_bad_stag(case: str) -> None:
    a, b = make_pair()
    region = b.pd.register(bytearray(8), Access.REMOTE_WRITE | Access.LOCAL_WRITE)
    stag = region.stag
    if case == "unknown":
        stag = 0x77777777
    elif case == "wrong_pd":
        stag = a.pd.register(bytearray(8)).stag
    else:
        region.invalidate()
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=3))
    a.stream.post_send(SendWR(b"inv", invalidate_stag=stag))
    pump(a, b)
    assert term_fields(b) == (0, 1, 0x09)
    assert [(c.wr_id, c.status) for c in b.completions()] == [
        (3, CompletionStatus.LOCAL_PROTECTION_ERROR)
    ]


# --- RDMAP remote operation errors, DDP versions ------------------------------


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        (UntaggedHeader(0, 1, 0, rsvdulp=0x03).pack(), (0, 2, 0x05)),  # RDMAP version 0
        (UntaggedHeader(0, 1, 0, rsvdulp=0x83).pack(), (0, 2, 0x05)),  # RDMAP version 2
        (UntaggedHeader(0, 1, 0, rsvdulp=0x4C).pack(), (0, 2, 0x06)),  # opcode 12
        (UntaggedHeader(0, 1, 0, rsvdulp=0x40).pack(), (0, 2, 0x06)),  # Write untagged
        (TaggedHeader(1, 0, rsvdulp=0x43).pack() + b"x", (0, 2, 0x06)),  # Send tagged
        (UntaggedHeader(1, 1, 0, rsvdulp=0x43).pack(), (0, 2, 0x06)),  # Send on queue 1
        (bytes([0x42]) + UntaggedHeader(0, 1).pack()[1:], (1, 2, 0x06)),  # DDP version 2
        (bytes([0xC0]) + TaggedHeader(1, 0).pack()[1:], (1, 1, 0x04)),  # DDP version 0
        (b"\x41\x43\x00", (1, 0, 0)),  # shorter than a DDP header
        (TaggedHeader(5, 0, rsvdulp=0x42).pack() + b"x", (0, 2, 0x06)),  # unasked response
    ],
)
def test_malformed_messages(raw: bytes, fields: tuple[int, int, int]) -> None:
    _, b = make_pair()
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(8))), wr_id=1))
    b.events.extend(b.stream.handle_ulpdu(raw))
    assert term_fields(b) == fields


def test_read_response_must_match_the_request() -> None:
    a, b = make_pair()
    src = b.pd.register(bytearray(b"0123456789abcdef"), Access.REMOTE_READ)
    backing, sink = guarded(a, 16)
    a.stream.post_send(ReadWR(Sge(sink), src.stag, 0, wr_id=1))
    a.stream.ulpdus_to_send()
    bogus = TaggedHeader(sink.stag, sink.address + 4, rsvdulp=0x42).pack() + b"x" * 16
    a.events.extend(a.stream.handle_ulpdu(bogus))
    assert term_fields(a) == (1, 1, 0x01)
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.LOCAL_QP_OPERATION_ERROR)
    ]
    assert intact(backing, 16)


# --- after a Terminate --------------------------------------------------------


def test_terminate_is_sent_once_then_everything_is_dropped() -> None:
    a, b = make_pair()
    b.stream.handle_ulpdu(UntaggedHeader(9, 1).pack())
    out = b.stream.ulpdus_to_send()
    assert len(out) == 1
    header = UntaggedHeader.unpack_from(out[0])
    assert (header.qn, header.msn, header.mo, header.last) == (2, 1, 0, True)
    assert out[0][1] == rdmap_control(RdmapOpcode.TERMINATE)
    assert b.stream.state is StreamState.TERMINATED
    assert b.stream.handle_ulpdu(UntaggedHeader(0, 1, rsvdulp=0x43).pack()) == []
    assert b.stream.ulpdus_to_send() == []
    with pytest.raises(LocalProtocolError):
        b.stream.post_send(SendWR(b"x"))
    a.stream.handle_ulpdu(bytes(out[0]))
    assert a.stream.state is StreamState.TERMINATED
    with pytest.raises(LocalProtocolError):
        a.stream.post_recv(RecvWR(Sge(a.pd.register(bytearray(1)))))


def test_terminate_received_flushes_queued_work() -> None:
    a, b = make_pair(ord=1)
    sinks = [a.pd.register(bytearray(4)) for _ in range(2)]
    a.stream.post_recv(RecvWR(Sge(a.pd.register(bytearray(4))), wr_id=9))
    for i, sink in enumerate(sinks):
        a.stream.post_send(ReadWR(Sge(sink), 0x5555, 0, wr_id=i))
    pump(a, b)
    assert received_fields(a) == (0, 1, 0x00)
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (0, CompletionStatus.REMOTE_ACCESS_ERROR),
        (1, CompletionStatus.FLUSHED),
        (9, CompletionStatus.FLUSHED),
    ]


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_arbitrary_ulpdus_give_only_events(data: bytes) -> None:
    _, b = make_pair()
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(32))), wr_id=1))
    b.events.extend(b.stream.handle_ulpdu(data))
    b.events.extend(b.stream.handle_ulpdu(data))
    terms = b.terminates_sent()
    assert len(terms) <= 1
    expected = StreamState.TERMINATING if terms else StreamState.OPERATIONAL
    assert b.stream.state is expected


def test_terminate_about_a_send_flushes_an_unrelated_read() -> None:
    a, b = make_pair()
    src = b.pd.register(bytearray(8), Access.REMOTE_READ)
    a.stream.post_send(SendWR(b"no buffer for me", wr_id=1))
    a.stream.post_send(ReadWR(Sge(a.pd.register(bytearray(8))), src.stag, 0, wr_id=2))
    for ulpdu in a.stream.ulpdus_to_send():
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))  # Send first: Terminate
    pump(a, b)
    assert received_fields(a) == (1, 2, 0x02)
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.SUCCESS),
        (2, CompletionStatus.FLUSHED),
    ]
