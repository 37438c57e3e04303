"""RFC 7306 verbs on both adapters, over loopback: a shared counter several
clients increment with fetch_add, a lock taken with compare_swap, Immediate
Data, the support probe. Every client kind against every server kind."""

from __future__ import annotations

import asyncio
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import iwarp.rdma.connection
import iwarp.rdmap.atomics
from adapters.sides import Adapter, AsyncioSide, Side, SyncAdapter, SyncSide
from iwarp.asyncio.rdma import AtomicsNotSupportedError, ConnectionTerminatedError, RdmaError
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.atomics import ATOMIC_DEPTH, MAX_ATOMIC_DEPTH
from iwarp.rdmap.memory import Access, ProtectionDomain
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import (
    CompletionStatus,
    FetchAddWR,
    ImmediateData,
    ReadWR,
    RecvWR,
    Sge,
    WorkOpcode,
)

WORD = struct.Struct(">Q")
SHARED = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ | Access.REMOTE_WRITE
CLIENTS = 3
ROUNDS = 25
#: Most attempts a client makes to take the lock in one round (bounded).
TRIES = 20_000


def until_done(qp: Side) -> None:
    """A server handler: serve the atomics until the client says it is done."""
    assert qp.receive() == b"done"


def run_clients(
    client: Adapter, ports: list[int], body: Callable[[Side, int], None]
) -> list[BaseException]:
    """``body(qp, index)`` for one client per port, each in a thread of its own."""
    errors: list[BaseException] = []
    sides = [client.connect(port) for port in ports]

    def run(qp: Side, index: int) -> None:
        try:
            body(qp, index)
            qp.send(b"done")
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(qp, i), daemon=True) for i, qp in enumerate(sides)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a client hung"
    for qp in sides:
        qp.close()
    return errors


def serve_all(server: Adapter, pd: ProtectionDomain, count: int) -> list[int]:
    """One server connection per client, all in one protection domain (one STag space)."""
    return [server.serve(until_done, pd=pd, receive_buffers=1) for _ in range(count)]


def test_clients_incrementing_one_counter_lose_nothing(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    pd = ProtectionDomain()
    memory = bytearray(16)
    counter = pd.register(memory, SHARED, address=0x1000)
    seen: list[list[int]] = [[] for _ in range(CLIENTS)]

    def body(qp: Side, index: int) -> None:
        for _ in range(ROUNDS):
            seen[index].append(qp.fetch_add(counter.stag, 0x1008, 1))

    errors = run_clients(client, serve_all(server, pd, CLIENTS), body)
    assert errors == []
    assert server.take_failures() == []
    # Every increment took effect once: the originals are 0 .. N-1, each seen once.
    assert sorted(v for values in seen for v in values) == list(range(CLIENTS * ROUNDS))
    assert all(values == sorted(values) for values in seen)  # each client's in order
    assert WORD.unpack_from(memory, 8)[0] == CLIENTS * ROUNDS
    assert WORD.unpack_from(memory, 0)[0] == 0


def test_a_compare_swap_lock_is_mutually_exclusive(pair: tuple[Adapter, Adapter]) -> None:
    """Inside the lock each client increments a plain word with an RDMA Read
    and an RDMA Write (not atomic at all): no increment is lost only if no
    two clients are ever inside together."""
    client, server = pair
    pd = ProtectionDomain()
    memory = bytearray(24)  # lock word, plain counter, clients inside
    words = pd.register(memory, SHARED)
    lock, plain, inside = 0, 8, 16
    contended = [0]

    def body(qp: Side, index: int) -> None:
        me = index + 1
        for _ in range(ROUNDS):
            for _attempt in range(TRIES):
                if qp.compare_swap(words.stag, lock, 0, me) == 0:
                    break
                contended[0] += 1
            else:
                raise AssertionError("the lock was never free")
            assert qp.fetch_add(words.stag, inside, 1) == 0, "two clients inside the lock"
            value = WORD.unpack(bytes(qp.rdma_read(8, words.stag, plain)))[0]
            qp.rdma_write(WORD.pack(value + 1), words.stag, plain)
            assert qp.fetch_add(words.stag, inside, 2**64 - 1) == 1  # minus one
            assert qp.compare_swap(words.stag, lock, me, 0) == me  # release

    errors = run_clients(client, serve_all(server, pd, CLIENTS), body)
    assert errors == []
    assert server.take_failures() == []
    assert WORD.unpack_from(memory, plain)[0] == CLIENTS * ROUNDS
    assert WORD.unpack_from(memory, lock)[0] == 0
    assert WORD.unpack_from(memory, inside)[0] == 0


def test_masked_operations_and_work_requests(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    pd = ProtectionDomain()
    memory = bytearray(WORD.pack(0x00000001_FFFFFFFF))
    word = pd.register(memory, SHARED)
    (port,) = serve_all(server, pd, 1)
    qp = client.connect(port)
    halves = (1 << 31) | (1 << 63)  # two 32-bit fields
    assert qp.fetch_add(word.stag, 0, 1, mask=halves) == 0x00000001_FFFFFFFF
    assert WORD.unpack(memory)[0] == 0x00000001_00000000  # the low field wrapped alone
    # Swap the high half when the low half is 0.
    got = qp.compare_swap(
        word.stag, 0, 0, 0xABCD << 32, compare_mask=0xFFFFFFFF, swap_mask=0xFFFFFFFF << 32
    )
    assert got == 0x00000001_00000000
    assert WORD.unpack(memory)[0] == 0x0000ABCD_00000000
    # The verbs way: a work request, its completion on send_cq.
    qp.post_send(FetchAddWR(word.stag, 0, 5, wr_id=77))
    done = qp.wait_send()
    assert (done.wr_id, done.opcode, done.status) == (
        77,
        WorkOpcode.ATOMIC_FETCH_ADD,
        CompletionStatus.SUCCESS,
    )
    assert done.original == 0x0000ABCD_00000000
    assert qp.supports_atomics(word.stag, 0)
    assert WORD.unpack(memory)[0] == 0x0000ABCD_00000005  # the probe changed nothing
    qp.send(b"done")
    qp.close()
    assert server.take_failures() == []


def test_a_misaligned_target_is_an_rdma_error_not_unsupported(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    pd = ProtectionDomain()
    memory = bytearray(16)
    word = pd.register(memory, SHARED)

    def handler(qp: Side) -> None:
        with pytest.raises(ConnectionTerminatedError):
            qp.receive()

    port = server.serve(handler, pd=pd, receive_buffers=1)
    qp = client.connect(port)
    with pytest.raises(RdmaError) as info:
        qp.fetch_add(word.stag, 4, 1)
    assert not isinstance(info.value, AtomicsNotSupportedError)
    term = info.value.terminate
    assert term is not None and (term.layer, term.etype, term.code) == (0, 2, 0x07)
    assert info.value.completion.status is CompletionStatus.REMOTE_OPERATION_ERROR
    assert memory == bytearray(16)
    qp.wait_closed()
    qp.close()
    assert server.take_failures() == []


@pytest.fixture
def peer_without_atomics(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Streams made by connections answer Atomic Requests as a stack without
    RFC 7306 (``atomic_ird=0``), while still able to send them."""

    class NoAtomics(RdmapStream):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs["atomic_ird"] = 0
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(iwarp.rdma.connection, "RdmapStream", NoAtomics)
    yield


@pytest.mark.usefixtures("peer_without_atomics")
def test_the_probe_reports_a_peer_without_atomics(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    pd = ProtectionDomain()
    word = pd.register(bytearray(8), SHARED)

    def handler(qp: Side) -> None:
        with pytest.raises(ConnectionTerminatedError):
            qp.receive()

    for probe in (True, False):
        port = server.serve(handler, pd=pd, receive_buffers=1)
        qp = client.connect(port)
        if probe:
            assert qp.supports_atomics(word.stag, 0) is False
        else:
            with pytest.raises(AtomicsNotSupportedError, match="RFC 7306") as info:
                qp.fetch_add(word.stag, 0, 1)
            term = info.value.terminate
            assert term is not None and (term.layer, term.etype, term.code) == (0, 2, 0x06)
            assert "unexpected opcode" in str(info.value)
        qp.wait_closed()
        qp.close()
    assert server.take_failures() == []


def test_immediate_data_arrives_in_order_and_says_so(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    got: list[tuple[bytes, bool]] = []

    def handler(qp: Side) -> None:
        for _ in range(4):
            data = qp.receive()
            got.append((bytes(data), isinstance(data, ImmediateData)))

    port = server.serve(handler, receive_buffers=4)
    qp = client.connect(port)
    qp.send_immediate(b"\x00\x01\x02\x03\x04\x05\x06\x07")
    qp.send(b"a plain send")
    qp.send_immediate(b"IMMEDIAT", solicited=True)
    with pytest.raises(LocalProtocolError, match="exactly 8 octets"):
        qp.send_immediate(b"too long, 9")
    qp.send(b"done")
    qp.wait_closed()
    qp.close()
    assert server.take_failures() == []
    assert got == [
        (b"\x00\x01\x02\x03\x04\x05\x06\x07", True),
        (b"a plain send", False),
        (b"IMMEDIAT", True),
        (b"done", False),
    ]


def test_immediate_data_completes_a_posted_receive(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    completions: list[tuple[int, bytes | None, bool, int]] = []

    def handler(qp: Side) -> None:
        regions = [qp.register(bytearray(16), Access.LOCAL_WRITE) for _ in range(3)]
        for i, region in enumerate(regions):
            qp.post_recv(RecvWR(Sge(region), wr_id=i))
        qp.send(b"posted")
        for _ in regions:
            done = qp.wait_recv()
            completions.append((done.wr_id, done.immediate, done.solicited, done.byte_len))

    port = server.serve(handler)
    qp = client.connect(port, receive_buffers=1)
    assert qp.receive() == b"posted"
    qp.send_immediate(b"verbs!!!", solicited=True)
    qp.send_immediate(b"no event")
    qp.send(b"last")
    qp.wait_closed()
    qp.close()
    assert server.take_failures() == []
    assert completions == [
        (0, b"verbs!!!", True, 8),
        (1, b"no event", False, 8),
        (2, None, False, 4),
    ]


def test_a_large_read_before_an_atomic_sees_the_word_before_it(
    pair: tuple[Adapter, Adapter],
) -> None:
    """RFC 7306 §7: an Atomic Operation after an RDMA Read executes after the
    Read Response was generated, also when that response is large enough
    for a send lane, which writes it from memory."""
    client, server = pair
    pd = ProtectionDomain()
    size = 1 << 20
    memory = bytearray(WORD.pack(41) + bytes(size - 8))
    region = pd.register(memory, SHARED)
    (port,) = serve_all(server, pd, 1)
    qp = client.connect(port)
    sink = qp.register(bytearray(size), Access.LOCAL_WRITE)
    for round_ in range(3):
        qp.post_send(ReadWR(Sge(sink), region.stag, 0, wr_id=round_))
        assert qp.fetch_add(region.stag, 0, 1) == 41 + round_
        done = qp.wait_send()
        assert (done.wr_id, done.status, done.byte_len) == (
            round_,
            CompletionStatus.SUCCESS,
            size,
        )
        assert WORD.unpack_from(sink.view)[0] == 41 + round_  # before the atomic
    assert WORD.unpack_from(memory)[0] == 44
    qp.send(b"done")
    qp.close()
    assert server.take_failures() == []


def test_atomic_depths_are_options_of_connect_and_serve(pair: tuple[Adapter, Adapter]) -> None:
    """``atomic_ord``/``atomic_ird`` reach each queue pair's stream: a client
    with 8 outstanding against a server with room for 8 gets every answer;
    ``atomic_ord=0`` refuses locally; a server with ``atomic_ird=0``
    answers as a stack without RFC 7306 does."""
    client, server = pair
    pd = ProtectionDomain()
    memory = bytearray(8)
    word = pd.register(memory, SHARED)
    deep = server.serve(until_done, pd=pd, receive_buffers=1, atomic_ird=8)
    qp = client.connect(deep, atomic_ord=8)
    assert isinstance(qp, SyncSide | AsyncioSide)
    assert (qp.qp.stream.atomic_ord, qp.qp.stream.atomic_ird) == (8, ATOMIC_DEPTH)
    for i in range(8):
        qp.post_send(FetchAddWR(word.stag, 0, 1, wr_id=i))
    done = [qp.wait_send() for _ in range(8)]
    assert sorted(c.wr_id for c in done) == list(range(8))
    assert all(c.ok for c in done)
    assert sorted(c.original or 0 for c in done) == list(range(8))
    assert WORD.unpack(memory)[0] == 8
    qp.send(b"done")
    qp.close()

    port = server.serve(until_done, pd=pd, receive_buffers=1)
    qp = client.connect(port, atomic_ord=0)
    with pytest.raises(LocalProtocolError, match="atomic_ord is 0"):
        qp.fetch_add(word.stag, 0, 1)
    qp.send(b"done")
    qp.close()
    assert server.take_failures() == []

    def refused(qp: Side) -> None:
        with pytest.raises(ConnectionTerminatedError):
            qp.receive()

    port = server.serve(refused, pd=pd, receive_buffers=1, atomic_ird=0)
    qp = client.connect(port)
    with pytest.raises(AtomicsNotSupportedError, match="RFC 7306"):
        qp.fetch_add(word.stag, 0, 1)
    qp.wait_closed()
    qp.close()
    assert server.take_failures() == []
    assert WORD.unpack(memory)[0] == 8


@pytest.mark.parametrize("depth", [-1, MAX_ATOMIC_DEPTH + 1, True])
def test_atomic_depths_out_of_range_are_refused_before_connecting(depth: int) -> None:
    from iwarp import sync
    from iwarp.asyncio import rdma as aio

    async def nothing(qp: aio.QueuePair) -> None:
        pass

    for name in ("atomic_ord", "atomic_ird"):
        with pytest.raises(LocalProtocolError, match=name):
            sync.connect("127.0.0.1", 9, **{name: depth})  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError, match=name):
            sync.listen("127.0.0.1", 0, **{name: depth})  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError, match=name):
            asyncio.run(aio.connect("127.0.0.1", 9, **{name: depth}))  # type: ignore[arg-type]
        with pytest.raises(LocalProtocolError, match=name):
            asyncio.run(aio.serve(nothing, "127.0.0.1", 0, **{name: depth}))  # type: ignore[arg-type]


#: The FetchAdd of the race below: +1 in the word's low 16-bit field only.
LOW_FIELD = (1 << 15) | (1 << 31) | (1 << 63)
WRITERS = 2
#: Rounds of each writer: Writes of BURST words, then a Read of the word.
ROUNDS_OF_WRITES = 60
BURST = 2
ADDS = 300


def written(tag: int) -> int:
    """The word a writer writes: the tag in the high half, a check of it in
    bits 16-31 (a word mixing two writes' halves fails it), count 0 below."""
    return tag << 32 | (((tag * 40503) ^ 0xA5A5) & 0xFFFF) << 16


def tag_of(word: int) -> int:
    """The tag of a word, after checking that its halves belong together."""
    tag = word >> 32
    assert word & 0xFFFF0000 == written(tag) & 0xFFFF0000, f"a torn word: {word:#018x}"
    return tag


@pytest.mark.parametrize("widened", [False, True], ids=["as-is", "widened"])
def test_writes_do_not_come_between_an_atomic_read_and_write(
    widened: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 7306 §5 with real threads: one client FetchAdds a word while
    others RDMA Write it, each connection served by a thread of its own
    (``iwarp.sync``), all in one STag space. Placements hold the Atomic
    Operations' lock, so the history is one of whole operations: every word
    seen is a written one plus the adds made since (no torn word, no lost
    increment), and no Write is lost inside a read-modify-write. The writers
    take turns (a lock of the clients'), which orders the Writes; a writer
    reads the word back after its Writes, on the same stream (it must see
    its last Write), and a FetchAdd begun after that Read was answered must
    not see an earlier Write's word.

    ``widened``: each FetchAdd sleeps between reading the word and writing
    it back (the GIL is free), so that a placement not holding the lock
    would land inside the read-modify-write many times a run."""
    if widened:
        compute = iwarp.rdmap.atomics.masked_fetch_add

        def slow(original: int, add: int, mask: int = 0) -> int:
            time.sleep(0.0002)
            return compute(original, add, mask)

        monkeypatch.setattr(iwarp.rdmap.atomics, "masked_fetch_add", slow)
    server = SyncAdapter()
    client = SyncAdapter()
    pd = ProtectionDomain()
    memory = bytearray(WORD.pack(written(0)))
    word = pd.register(memory, SHARED)
    turn = threading.Lock()
    order = {0: 0}  # tag: its Write's place among all Writes
    read_back: list[tuple[int, int, int]] = []  # (Read done, last tag written, word read)
    originals: list[tuple[int, int]] = []  # (FetchAdd begun, original)

    def body(qp: Side, index: int) -> None:
        if index == 0:
            for _ in range(ADDS):
                begun = time.monotonic_ns()
                originals.append((begun, qp.fetch_add(word.stag, 0, 1, mask=LOW_FIELD)))
            return
        for round_ in range(ROUNDS_OF_WRITES):
            with turn:
                for k in range(BURST):
                    tag = index << 16 | round_ * BURST + k + 1
                    order[tag] = len(order)
                    qp.rdma_write(WORD.pack(written(tag)), word.stag, 0)
                back = WORD.unpack(bytes(qp.rdma_read(8, word.stag, 0)))[0]
                read_back.append((time.monotonic_ns(), tag, back))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches inside a read-modify-write become likely
    try:
        errors = run_clients(client, serve_all(server, pd, 1 + WRITERS), body)
    finally:
        sys.setswitchinterval(interval)
        server.finish()
        client.finish()
    assert errors == []
    assert len(originals) == ADDS and len(read_back) == WRITERS * ROUNDS_OF_WRITES
    for _, tag, back in read_back:
        assert tag_of(back) == tag, "a writer's Read did not see its Write"
    # The adder's view: runs of one tag each, in the Writes' order, each
    # counting 0, 1, 2... from its Write (only this client adds)...
    previous = (0, -1)
    for _, value in originals:
        tag, count = tag_of(value), value & 0xFFFF
        assert tag in order
        if tag == previous[0]:
            assert count == previous[1] + 1, "an increment was lost"
        else:
            assert order[tag] > order[previous[0]], "an earlier Write's word came back"
            assert count == 0, "a Write's word did not start at 0"
        previous = (tag, count)
    # ... and never older than a Write a writer had read back before.
    newest_read = 0
    reads = iter(sorted(read_back))
    pending = next(reads, None)
    for begun, value in originals:
        while pending is not None and pending[0] < begun:
            newest_read = max(newest_read, order[pending[1]])
            pending = next(reads, None)
        assert order[tag_of(value)] >= newest_read, "a Write was lost"
