"""RFC 7306 in the RDMAP core: masked operations against plain-integer models,
the Responder's checks and their Terminates, ordering, Immediate Data."""

from __future__ import annotations

import struct
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import UNTAGGED_HEADER_SIZE, UntaggedHeader
from iwarp.errors import LocalProtocolError
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.atomics import check_target, execute, masked_cmp_swap, masked_fetch_add
from iwarp.rdmap.memory import Access, MemoryRegion, MemoryRegistry
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.wire import (
    AtomicRequest,
    AtomicResponse,
    RdmapOpcode,
    rdmap_control,
)
from iwarp.rdmap.work import (
    CompareSwapWR,
    CompletionStatus,
    FetchAddWR,
    ImmediateWR,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)
from rdmap.rdmap_harness import Side, pump

u64 = st.integers(0, 2**64 - 1)
WORD = struct.Struct(">Q")
ATOMIC = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ | Access.REMOTE_WRITE
BASE = 0x4000


# --- plain-integer models -----------------------------------------------------------


def fetch_add_model(original: int, add: int, mask: int) -> int:
    """RFC 7306 §5.1.1's pseudocode, bit by bit."""
    result = carry = 0
    for bit in range(64):
        at = 1 << bit
        total = carry + ((original & at) >> bit) + ((add & at) >> bit)
        carry = (total & 2) >> 1
        if total & 1:
            result |= at
        carry = int(bool(carry) and not mask & at)
    return result


def fields_model(original: int, add: int, mask: int) -> int:
    """Each field (ending at a mask bit, or bit 63) summed on its own."""
    result, start = 0, 0
    for bit in range(64):
        if mask >> bit & 1 or bit == 63:
            width = bit - start + 1
            keep = (1 << width) - 1
            total = ((original >> start) & keep) + ((add >> start) & keep)
            result |= (total & keep) << start
            start = bit + 1
    return result


def cmp_swap_model(original: int, compare: int, cmask: int, swap: int, smask: int) -> int:
    for bit in range(64):
        if cmask >> bit & 1 and (original ^ compare) >> bit & 1:
            return original
    out = original
    for bit in range(64):
        if smask >> bit & 1:
            out = (out & ~(1 << bit)) | (swap & (1 << bit))
    return out


# Masks that make carries cross field borders: few set bits, and all-ones.
masks = st.one_of(
    u64,
    st.just(0),
    st.just(2**64 - 1),
    st.sets(st.integers(0, 63), max_size=6).map(lambda bits: sum(1 << b for b in bits)),
)
carrying = st.one_of(u64, st.integers(0, 64).map(lambda n: (1 << n) - 1 if n else 0))


@settings(max_examples=500)
@given(original=carrying, add=carrying, mask=masks)
def test_fetch_add_matches_the_pseudocode(original: int, add: int, mask: int) -> None:
    got = masked_fetch_add(original, add, mask)
    assert got == fetch_add_model(original, add, mask) == fields_model(original, add, mask)


def test_fetch_add_examples() -> None:
    assert masked_fetch_add(2**64 - 1, 1) == 0  # mask 0: one 64-bit sum, carry out dropped
    # Two 32-bit fields (top bits 31 and 63): the low field's carry is dropped.
    assert masked_fetch_add(0x00000001_FFFFFFFF, 1, (1 << 31) | (1 << 63)) == 0x00000001_00000000
    # Eight 8-bit counters.
    tops = sum(1 << (8 * i + 7) for i in range(8))
    assert masked_fetch_add(0x01FF0203_04050607, 0x01010101_01010101, tops) == 0x02000304_05060708


@settings(max_examples=500)
@given(original=u64, compare=u64, cmask=masks, swap=u64, smask=masks, same=st.booleans())
def test_cmp_swap_matches_the_pseudocode(
    *, original: int, compare: int, cmask: int, swap: int, smask: int, same: bool
) -> None:
    if same:  # make the comparison match often
        compare = (original & cmask) | (compare & ~cmask)
    got = masked_cmp_swap(original, compare, cmask, swap, smask)
    assert got == cmp_swap_model(original, compare, cmask, swap, smask)


# --- two streams -----------------------------------------------------------------


def pair(
    *, ird: int = 2, ord: int = 2, atomic_ird: int = 2, atomic_ord: int = 2, peer_atomics: int = 2
) -> tuple[Side, Side]:
    registry = MemoryRegistry()
    pd_a, pd_b = registry.alloc_pd(), registry.alloc_pd()
    a = RdmapStream(
        pd_a,
        initiator=True,
        mulpdu=1024,
        ird=ird,
        ord=ord,
        atomic_ird=atomic_ird,
        atomic_ord=atomic_ord,
    )
    b = RdmapStream(
        pd_b,
        initiator=False,
        mulpdu=1024,
        ird=ird,
        ord=ord,
        atomic_ird=peer_atomics,
        atomic_ord=peer_atomics,
    )
    return Side(a, pd_a, a.take_events()), Side(b, pd_b, b.take_events())


def counter(
    side: Side, value: int = 0, words: int = 2, access: Access = ATOMIC
) -> tuple[bytearray, MemoryRegion]:
    buf = bytearray(WORD.pack(value) * words)
    return buf, side.pd.register(buf, access, address=BASE)


def terminated(side: Side) -> tuple[int, int, int]:
    (sent,) = side.terminates_sent()
    return sent.header.layer, sent.header.etype, sent.header.code


@settings(max_examples=60, deadline=None)
@given(
    start=u64,
    ops=st.lists(st.tuples(st.booleans(), u64, masks, u64, masks), min_size=1, max_size=6),
)
def test_operations_through_the_wire_match_the_model(
    start: int, ops: list[tuple[bool, int, int, int, int]]
) -> None:
    a, b = pair(atomic_ord=3, peer_atomics=3)
    buf, region = counter(b, start)
    model = start
    expected = []
    for i, (is_add, x, m1, y, m2) in enumerate(ops):
        if is_add:
            a.stream.post_send(FetchAddWR(region.stag, BASE + 8, x, m1, wr_id=i))
            new = fields_model(model, x, m1)
        else:
            a.stream.post_send(CompareSwapWR(region.stag, BASE + 8, y, x, m1, m2, wr_id=i))
            new = cmp_swap_model(model, y, m1, x, m2)
        expected.append((i, model))
        model = new
    pump(a, b)
    done = a.completions()
    assert [(c.wr_id, c.original) for c in done] == expected
    assert all(c.ok and c.byte_len == 8 for c in done)
    assert [c.opcode for c in done] == [
        WorkOpcode.ATOMIC_FETCH_ADD if op[0] else WorkOpcode.ATOMIC_CMP_SWAP for op in ops
    ]
    assert WORD.unpack_from(buf, 8)[0] == model  # big-endian in memory
    assert WORD.unpack_from(buf, 0)[0] == start  # the other word untouched
    assert not b.completions()  # §5.2.1 rule 3: not delivered to the Responder's ULP


def test_atomic_requests_on_the_wire() -> None:
    a, b = pair()
    _, region = counter(b)
    a.stream.post_send(FetchAddWR(region.stag, BASE, 5, wr_id=1))
    (request,) = a.stream.ulpdus_to_send()
    header = UntaggedHeader.unpack_from(request)
    assert (header.qn, header.msn, header.mo) == (1, 1, 0)  # queue 1, like Read Requests
    assert request[1] == rdmap_control(RdmapOpcode.ATOMIC_REQUEST)
    req = AtomicRequest.unpack_from(request, UNTAGGED_HEADER_SIZE)
    assert (req.aopcode, req.stag, req.to, req.data, req.mask) == (0, region.stag, BASE, 5, 0)
    assert len(request) == UNTAGGED_HEADER_SIZE + 52
    b.stream.handle_ulpdu(bytes(request))
    (response,) = b.stream.ulpdus_to_send()
    header = UntaggedHeader.unpack_from(response)
    assert (header.qn, header.msn, len(response)) == (3, 1, UNTAGGED_HEADER_SIZE + 12)
    assert AtomicResponse.unpack_from(response, UNTAGGED_HEADER_SIZE) == AtomicResponse(
        req.request_id, 0
    )


# --- the Responder's checks (RFC 7306 §8.2, RFC 5040 §7.2 codes) ----------------


@pytest.mark.parametrize(
    ("case", "fields", "status"),
    [
        ("bad_stag", (0, 1, 0x00), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("bounds", (0, 1, 0x01), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("no_rights", (0, 1, 0x02), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("wrong_pd", (0, 1, 0x03), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("wrap", (0, 1, 0x04), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("invalidated", (0, 1, 0x00), CompletionStatus.REMOTE_ACCESS_ERROR),
        ("misaligned", (0, 2, 0x07), CompletionStatus.REMOTE_OPERATION_ERROR),
        ("unsupported", (0, 2, 0x06), CompletionStatus.REMOTE_OPERATION_ERROR),
    ],
)
def test_responder_failures_terminate(
    case: str, fields: tuple[int, int, int], status: CompletionStatus
) -> None:
    a, b = pair()
    access = ATOMIC & ~Access.REMOTE_ATOMIC if case == "no_rights" else ATOMIC
    buf, region = counter(b, 0x1122334455667788, access=access)
    before = bytes(buf)
    stag, to = region.stag, BASE
    if case == "bad_stag":
        stag = 0x7777
    elif case == "bounds":
        to = BASE + 16
    elif case == "wrong_pd":
        stag = a.pd.register(bytearray(16), ATOMIC).stag
    elif case == "wrap":
        to = 2**64 - 4  # also misaligned: the access checks come first
    elif case == "invalidated":
        region.invalidate()
    elif case == "misaligned":
        to = BASE + 4
    a.stream.post_send(CompareSwapWR(stag, to, 0x1122334455667788, 1, wr_id=9))
    if case == "unsupported":
        (ulpdu,) = a.stream.ulpdus_to_send()
        raw = bytearray(ulpdu)
        raw[UNTAGGED_HEADER_SIZE + 3] = 0x01  # AOpCode 0001b: reserved
        b.events.extend(b.stream.handle_ulpdu(bytes(raw)))
    pump(a, b)
    assert terminated(b) == fields
    (term,) = b.terminates_sent()
    assert term.header.ddp_header is not None  # §8.1 rule 2: the DDP header, no RDMA header
    assert UntaggedHeader.unpack_from(term.header.ddp_header).qn == 1
    assert term.header.rdma_header is None
    assert bytes(buf) == before  # memory never modified
    (done,) = a.completions()
    assert (done.wr_id, done.status) == (9, status)


def test_a_stream_without_atomics_answers_unexpected_opcode() -> None:
    """RFC 7306 §1.1: what a peer without Atomic Operations answers a probe."""
    a, b = pair(peer_atomics=0)
    _, region = counter(b)
    a.stream.post_send(FetchAddWR(region.stag, BASE, 0, wr_id=3))
    pump(a, b)
    assert terminated(b) == (0, 2, 0x06)
    (done,) = a.completions()
    assert done.status is CompletionStatus.REMOTE_OPERATION_ERROR


def test_atomic_ord_zero_refuses_locally() -> None:
    a, _ = pair(atomic_ord=0)
    with pytest.raises(LocalProtocolError, match="atomic_ord is 0"):
        a.stream.post_send(FetchAddWR(0x100, 0, 1))
    with pytest.raises(LocalProtocolError, match="64-bit"):
        pair()[0].stream.post_send(FetchAddWR(0x100, 0, 2**64))


def test_atomic_limits_both_ways() -> None:
    # The Requester sends at most atomic_ord; the rest waits, in order.
    a, b = pair(atomic_ord=2)
    _, region = counter(b)
    for i in range(5):
        a.stream.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=i))
    first = a.stream.ulpdus_to_send()
    assert len(first) == 2
    assert not a.stream.has_data_to_send  # waiting on atomic_ord, not busy
    for ulpdu in first:
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    pump(a, b)
    assert [c.original for c in a.completions()] == [0, 1, 2, 3, 4]
    # A peer that sends more than our atomic_ird finds no buffer on queue 1.
    a, b = pair(atomic_ord=3, peer_atomics=1)
    _, region = counter(b)
    for i in range(3):
        a.stream.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=i))
    for ulpdu in a.stream.ulpdus_to_send():
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    assert terminated(b) == (1, 2, 0x02)


def test_ird_still_counts_reads_alone() -> None:
    a, b = pair(ord=2, ird=2)
    b.stream.ird = 1  # as if it granted IRD 1
    b.stream._inbound = [0, 0]
    src = b.pd.register(bytearray(16), Access.REMOTE_READ)
    for i in range(2):
        a.stream.post_send(ReadWR(Sge(a.pd.register(bytearray(16))), src.stag, 0, wr_id=i))
    for ulpdu in a.stream.ulpdus_to_send():
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    assert terminated(b) == (1, 2, 0x02)


# --- ordering (RFC 7306 §5.4, §7) -----------------------------------------------


def test_read_before_atomic_sees_the_old_value_and_after_the_new() -> None:
    a, b = pair()
    buf, region = counter(b, 10)
    sinks = [a.pd.register(bytearray(8)) for _ in range(2)]
    a.stream.post_send(ReadWR(Sge(sinks[0]), region.stag, BASE, wr_id=1))
    a.stream.post_send(FetchAddWR(region.stag, BASE, 5, wr_id=2))
    a.stream.post_send(ReadWR(Sge(sinks[1]), region.stag, BASE, wr_id=3))
    a.stream.post_send(CompareSwapWR(region.stag, BASE, 15, 100, wr_id=4))
    pump(a, b)
    done = a.completions()
    assert [(c.wr_id, c.ok) for c in done] == [(1, True), (2, True), (3, True), (4, True)]
    assert WORD.unpack(sinks[0].view)[0] == 10
    assert done[1].original == 10
    assert WORD.unpack(sinks[1].view)[0] == 15
    assert done[3].original == 15
    assert WORD.unpack_from(buf)[0] == 100


def test_write_then_atomic_then_send() -> None:
    """A Write before an Atomic is placed before it executes; a Send after
    it completes at the Responder without waiting for the response (§5.4 rule 6)."""
    a, b = pair()
    buf, region = counter(b, 0)
    recv = b.pd.register(bytearray(16), Access.LOCAL_WRITE)
    b.stream.post_recv(RecvWR(Sge(recv), wr_id=50))
    a.stream.post_send(WriteWR(WORD.pack(41), region.stag, BASE, wr_id=1))
    a.stream.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=2))
    a.stream.post_send(SendWR(b"after", wr_id=3))
    pump(a, b)
    assert [(c.wr_id, c.original) for c in a.completions()] == [(1, None), (2, 41), (3, None)]
    assert WORD.unpack_from(buf)[0] == 42
    (recvd,) = b.completions()
    assert (recvd.wr_id, recvd.byte_len, recvd.immediate) == (50, 5, None)


def test_response_to_nothing_and_wrong_identifier() -> None:
    a, b = pair()
    stray = UntaggedHeader(3, 1, 0, rsvdulp=rdmap_control(RdmapOpcode.ATOMIC_RESPONSE)).pack()
    a.events.extend(a.stream.handle_ulpdu(stray + AtomicResponse(1, 0).pack()))
    assert terminated(a) == (0, 2, 0x06)
    a, b = pair()
    _, region = counter(b)
    a.stream.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=1))
    a.stream.ulpdus_to_send()
    a.events.extend(a.stream.handle_ulpdu(stray + AtomicResponse(12345, 0).pack()))
    assert terminated(a) == (0, 2, 0x07)
    assert [c.status for c in a.completions()] == [CompletionStatus.FLUSHED]


def test_send_on_queue_3_is_an_invalid_qn() -> None:
    _, b = pair()
    send = UntaggedHeader(3, 1, 0, rsvdulp=rdmap_control(RdmapOpcode.SEND)).pack()
    b.events.extend(b.stream.handle_ulpdu(send + b"x"))
    assert terminated(b) == (1, 2, 0x01)


@pytest.mark.parametrize("room", range(1, 53))
def test_requests_split_at_every_point_execute_once(room: int) -> None:
    """An Atomic Request split into segments of any size executes once."""
    a, b = pair()
    a.stream.mulpdu = UNTAGGED_HEADER_SIZE + room  # below the API's floor, on purpose
    _, region = counter(b)
    for i in range(3):
        a.stream.post_send(FetchAddWR(region.stag, BASE, 1 << i, wr_id=i))
    pump(a, b)
    assert [c.original for c in a.completions()] == [0, 1, 3]


# --- atomicity across streams and threads (RFC 7306 §5.3) -----------------------


def test_atomic_across_streams_of_one_stag_space() -> None:
    registry = MemoryRegistry()
    server_pd = registry.alloc_pd()
    buf = bytearray(8)
    region = server_pd.register(buf, ATOMIC, address=BASE)
    sides = []
    for _ in range(3):
        client_pd = MemoryRegistry().alloc_pd()
        client = RdmapStream(client_pd, initiator=True, mulpdu=1024)
        server = RdmapStream(server_pd, initiator=False, mulpdu=1024)
        sides.append(
            (
                Side(client, client_pd, client.take_events()),
                Side(server, server_pd, server.take_events()),
            )
        )
    for round_ in range(20):
        for a, _ in sides:
            a.stream.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=round_))
        for a, b in sides:
            pump(a, b)
    originals = sorted(c.original or 0 for a, _ in sides for c in a.completions())
    assert originals == list(range(60))
    assert WORD.unpack(buf)[0] == 60


def test_execute_is_atomic_across_threads() -> None:
    pd = MemoryRegistry().alloc_pd()
    buf = bytearray(8)
    region = pd.register(buf, ATOMIC)
    target = check_target(pd, AtomicRequest.fetch_add(1, region.stag, 0, 1))
    seen: list[list[int]] = [[] for _ in range(4)]

    def work(out: list[int]) -> None:
        for _ in range(2000):
            out.append(execute(target, AtomicRequest.fetch_add(1, region.stag, 0, 1)))

    threads = [threading.Thread(target=work, args=(out,)) for out in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(v for out in seen for v in out) == list(range(8000))
    assert WORD.unpack(buf)[0] == 8000


# --- Immediate Data (RFC 7306 §6) ------------------------------------------------


def test_immediate_data_in_order_with_and_without_se() -> None:
    a, b = pair()
    bufs = [b.pd.register(bytearray(16), Access.LOCAL_WRITE) for _ in range(4)]
    for i, region in enumerate(bufs):
        b.stream.post_recv(RecvWR(Sge(region), wr_id=100 + i))
    a.stream.post_send(ImmediateWR(b"IMMDATA1", wr_id=1))
    a.stream.post_send(SendWR(b"a send", wr_id=2))
    a.stream.post_send(ImmediateWR(b"IMMDATA2", wr_id=3, solicited=True))
    a.stream.post_send(SendWR(b"another", wr_id=4, solicited=True))
    sent = a.stream.ulpdus_to_send()
    assert [UntaggedHeader.unpack_from(u).qn for u in sent] == [0, 0, 0, 0]
    assert sent[0][1] == rdmap_control(RdmapOpcode.IMMEDIATE_DATA)
    assert sent[2][1] == rdmap_control(RdmapOpcode.IMMEDIATE_DATA_WITH_SE)
    assert len(sent[0]) == UNTAGGED_HEADER_SIZE + 8
    for ulpdu in sent:
        b.events.extend(b.stream.handle_ulpdu(bytes(ulpdu)))
    a.events.extend(a.stream.take_events())
    assert [(c.wr_id, c.opcode) for c in a.completions()] == [
        (1, WorkOpcode.IMMEDIATE_DATA),
        (2, WorkOpcode.SEND),
        (3, WorkOpcode.IMMEDIATE_DATA),
        (4, WorkOpcode.SEND),
    ]
    got = [(c.wr_id, c.byte_len, c.immediate, c.solicited) for c in b.completions()]
    assert got == [
        (100, 8, b"IMMDATA1", False),
        (101, 6, None, False),
        (102, 8, b"IMMDATA2", True),
        (103, 7, None, True),
    ]


@pytest.mark.parametrize("size", [0, 7, 9])
def test_immediate_data_must_be_8_octets(size: int) -> None:
    a, b = pair()
    with pytest.raises(LocalProtocolError, match="exactly 8 octets"):
        a.stream.post_send(ImmediateWR(b"x" * size))
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(16), Access.LOCAL_WRITE)), wr_id=7))
    header = UntaggedHeader(0, 1, 0, rsvdulp=rdmap_control(RdmapOpcode.IMMEDIATE_DATA)).pack()
    b.events.extend(b.stream.handle_ulpdu(header + b"x" * size))
    assert terminated(b) == (0, 2, 0x07)
    (done,) = b.completions()
    assert (done.wr_id, done.status) == (7, CompletionStatus.LOCAL_LENGTH_ERROR)
    assert b.stream.state is not StreamState.OPERATIONAL


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=80),
    op=st.sampled_from([8, 9, 10, 11]),
    qn=st.integers(0, 4),
)
def test_arbitrary_extension_segments_give_protocol_errors_only(
    data: bytes, op: int, qn: int
) -> None:
    _, b = pair()
    counter(b)
    b.stream.post_recv(RecvWR(Sge(b.pd.register(bytearray(16), Access.LOCAL_WRITE))))
    header = UntaggedHeader(qn, 1, 0, rsvdulp=rdmap_control(op)).pack()
    b.stream.handle_ulpdu(header + data)  # never raises: a Terminate at most
    b.stream.ulpdus_to_send()


def test_rtr_streams_still_accept_atomics() -> None:
    registry = MemoryRegistry()
    pd_a, pd_b = registry.alloc_pd(), registry.alloc_pd()
    a = RdmapStream(pd_a, initiator=True, mulpdu=1024, rtr=RtrFlags.READ)
    b = RdmapStream(pd_b, initiator=False, mulpdu=1024, rtr=RtrFlags.READ)
    sa, sb = Side(a, pd_a, a.take_events()), Side(b, pd_b, b.take_events())
    _, region = counter(sb, 7)
    a.post_send(FetchAddWR(region.stag, BASE, 1, wr_id=1))
    pump(sa, sb)
    assert [(c.wr_id, c.original) for c in sa.completions()] == [(1, 7)]


def test_an_atomic_waits_for_a_lane_still_writing_the_read_response_before_it() -> None:
    """A send lane writes a taken Read Response from memory until it says
    so: the Atomic Operation after it executes only then (RFC 7306 §7)."""
    a, b = pair()
    buf, region = counter(b, 10, words=512)
    sink = a.pd.register(bytearray(len(buf)))
    a.stream.post_send(ReadWR(Sge(sink), region.stag, BASE, wr_id=1))
    a.stream.post_send(FetchAddWR(region.stag, BASE, 5, wr_id=2))
    for ulpdu in a.stream.ulpdus_to_send():
        b.stream.handle_ulpdu(bytes(ulpdu))
    taken = b.stream.take_message(1024)  # a lane takes the Read Response
    assert taken is not None
    run, token = taken
    assert b.stream.take_message(1) is None  # an Atomic Response is never a lane's
    assert not b.stream.has_data_to_send  # nothing to do until the lane is done
    assert b.stream.runs_to_send() == []
    assert WORD.unpack_from(buf)[0] == 10  # not executed
    written = [bytes(ulpdu) for ulpdu in run.ulpdus()]  # the lane reads the memory now
    b.stream.message_sent(token)
    assert b.stream.has_data_to_send
    (answer,) = b.stream.ulpdus_to_send()
    assert WORD.unpack_from(buf)[0] == 15
    for ulpdu in [*written, answer]:
        a.events.extend(a.stream.handle_ulpdu(ulpdu))
    a.events.extend(a.stream.take_events())
    assert [(c.wr_id, c.ok, c.original) for c in a.completions()] == [
        (1, True, None),
        (2, True, 10),
    ]
    assert WORD.unpack_from(sink.view)[0] == 10  # the Read saw the word before the atomic


def test_the_terminate_fails_the_atomic_it_reports_not_a_read_around_it() -> None:
    a, b = pair()
    _, region = counter(b, 3)
    sinks = [a.pd.register(bytearray(8)) for _ in range(2)]
    a.stream.post_send(ReadWR(Sge(sinks[0]), region.stag, BASE, wr_id=1))
    a.stream.post_send(FetchAddWR(region.stag, BASE + 4, 1, wr_id=2))  # misaligned
    a.stream.post_send(ReadWR(Sge(sinks[1]), region.stag, BASE, wr_id=3))
    pump(a, b)
    # The Responder terminates as soon as the Atomic Request is delivered,
    # before the first Read was answered (RFC 5040 §7.1: at once); the
    # Terminate's copied DDP header names the Atomic Request by its MSN.
    assert [(c.wr_id, c.status) for c in a.completions()] == [
        (1, CompletionStatus.FLUSHED),
        (2, CompletionStatus.REMOTE_OPERATION_ERROR),
        (3, CompletionStatus.FLUSHED),
    ]
