"""One behavioural suite for both adapters: every scenario runs with each
client kind (``iwarp.sync``, ``iwarp.asyncio.rdma``) against each server
kind, over real loopback sockets. The mixed pairs are the two adapters
talking to each other."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable

import pytest

from adapters.sides import CALL_TIMEOUT, Adapter, Side
from iwarp.asyncio.mpa import Reject
from iwarp.asyncio.rdma import ConnectionRejectedError, ConnectionTerminatedError, RdmaError
from iwarp.errors import LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.memory import Access, ProtectionDomain
from iwarp.rdmap.work import CompletionStatus, ReadWR, RecvWR, SendWR, Sge, WorkOpcode

REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def sha(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "config",
    [MpaConfig(crc=True), MpaConfig(crc=False, markers=True)],
    ids=["crc", "markers"],
)
@pytest.mark.parametrize("size", [0, 1, 4093, 1 << 20])
def test_send_write_read_round_trips(
    pair: tuple[Adapter, Adapter], config: MpaConfig, size: int
) -> None:
    client, server = pair
    data = os.urandom(size)
    server_pd = ProtectionDomain()
    target = bytearray(size + 64)
    target_mr = server_pd.register(target, REMOTE, address=0x5000)
    got: list[bytes] = []

    def handler(qp: Side) -> None:
        got.append(qp.receive())  # Send 1: the data
        qp.send(target_mr.stag.to_bytes(4, "big"))
        assert qp.receive() == b"done"

    port = server.serve(
        handler, pd=server_pd, config=config, receive_buffers=4, receive_size=max(size, 16)
    )
    qp = client.connect(port, config=config, receive_buffers=2)
    assert qp.params.crc == config.crc and qp.params.markers_send == config.markers
    qp.send(data)
    stag = int.from_bytes(qp.receive(), "big")
    qp.rdma_write(data, stag, 0x5000 + 32)
    sink = qp.register(bytearray(size), Access.LOCAL_WRITE)
    assert qp.rdma_read(sink, stag, 0x5000 + 32) == size
    assert sha(sink.view) == sha(data)
    qp.send(b"done")
    assert server.take_failures() == []
    qp.close()
    assert len(got) == 1 and sha(got[0]) == sha(data)
    assert sha(target[32 : 32 + size]) == sha(data)
    assert target[:32] == bytes(32) and target[32 + size :] == bytes(32)


def test_rdma_write_and_read_take_the_same_forms(pair: tuple[Adapter, Adapter]) -> None:
    """Write and Read each take a region with offset/length, an Sge, or
    plain memory (bytes to write; a writable buffer or a length to read)."""
    client, server = pair
    server_pd = ProtectionDomain()
    target = bytearray(256)
    target_mr = server_pd.register(target, REMOTE, address=0x9000)

    def handler(qp: Side) -> None:
        assert qp.receive() == b"hello"  # the Responder may not send first (RFC 5044)
        qp.send(target_mr.stag.to_bytes(4, "big"))
        assert qp.receive() == b"done"

    port = server.serve(handler, pd=server_pd, receive_buffers=2)
    qp = client.connect(port, receive_buffers=2)
    qp.send(b"hello")
    stag = int.from_bytes(qp.receive(), "big")
    data = os.urandom(200)
    source = qp.register(bytearray(data), Access.LOCAL_WRITE)
    assert qp.rdma_write(data, stag, 0x9000, offset=0, length=50) == 50  # bytes, a piece
    assert qp.rdma_write(source, stag, 0x9000 + 50, offset=50, length=50) == 50  # region
    assert qp.rdma_write(Sge(source, 100, 50), stag, 0x9000 + 100) == 50  # Sge
    assert qp.rdma_write(memoryview(data)[150:], stag, 0x9000 + 150) == 50  # plain buffer
    assert qp.rdma_read(200, stag, 0x9000) == data  # a length: bytes back
    into = bytearray(300)
    assert qp.rdma_read(into, stag, 0x9000, offset=100, length=200) == 200  # a buffer
    assert into[100:] == data and into[:100] == bytes(100)
    sink = qp.register(bytearray(200), Access.LOCAL_WRITE)
    assert qp.rdma_read(sink, stag, 0x9000 + 20, offset=20, length=30) == 30  # region
    assert sink.view[20:50] == data[20:50] and sink.view[:20] == bytes(20)
    assert qp.rdma_read(Sge(sink, 0, 20), stag, 0x9000) == 20  # Sge, as before
    assert sink.view[:20] == data[:20]
    misuses: list[Callable[[], object]] = [
        lambda: qp.rdma_read(b"read-only", stag, 0x9000),  # type: ignore[arg-type]
        lambda: qp.rdma_read(-1, stag, 0x9000),
        lambda: qp.rdma_read(sink, stag, 0x9000, offset=190, length=20),
        lambda: qp.rdma_write(source, stag, 0x9000, offset=-1),
        lambda: qp.rdma_write(data, stag, 0x9000, offset=150, length=51),
    ]
    for misuse in misuses:
        with pytest.raises(LocalProtocolError):
            misuse()
    qp.send(b"done")
    assert server.take_failures() == []
    qp.close()
    assert target[:200] == data and target[200:] == bytes(56)


def test_messages_keep_their_order_both_ways(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    rounds = 200

    def handler(qp: Side) -> None:
        for _ in range(rounds):
            qp.send(qp.receive()[::-1])

    port = server.serve(handler, receive_buffers=8)
    qp = client.connect(port, receive_buffers=8)
    for i in range(rounds):
        message = f"message {i} ".encode() * (i % 7)
        qp.send(message)
        assert qp.receive() == message[::-1]
    qp.close()


@pytest.mark.parametrize("rtr", [RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND])
def test_verbs_api_with_peer_to_peer_rtr(pair: tuple[Adapter, Adapter], rtr: RtrFlags) -> None:
    client, server = pair
    server_pd = ProtectionDomain()
    buf = bytearray(32)
    region = server_pd.register(buf)
    received: list[tuple[int, bytes, bool]] = []

    def setup(qp: Side) -> None:
        qp.post_recv(RecvWR(Sge(region), wr_id=77))

    def handler(qp: Side) -> None:
        completion = qp.wait_recv()
        assert completion.opcode is WorkOpcode.RECV
        received.append((completion.wr_id, bytes(buf[: completion.byte_len]), completion.solicited))

    config = MpaConfig(rtr_types=RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ)
    port = server.serve(handler, pd=server_pd, config=config, setup=setup)
    qp = client.connect(port, config=MpaConfig(peer_to_peer=True, rtr_types=rtr))
    assert qp.params.rtr == rtr
    qp.post_send(SendWR(b"verbs!", wr_id=5, solicited=True))
    completion = qp.wait_send()
    assert (completion.wr_id, completion.status) == (5, CompletionStatus.SUCCESS)
    qp.drain()
    qp.wait_closed()
    assert server.take_failures() == []
    assert received == [(77, b"verbs!", True)]
    qp.close()


def test_remote_access_error_terminates_with_the_rfc_codes(
    pair: tuple[Adapter, Adapter],
) -> None:
    client, server = pair
    server_pd = ProtectionDomain()
    guarded = bytearray(b"\xa5" * 48)
    region = server_pd.register(
        memoryview(guarded)[16:32], Access.REMOTE_WRITE | Access.LOCAL_WRITE
    )
    seen: list[tuple[bool, bool]] = []

    def handler(qp: Side) -> None:
        with pytest.raises(ConnectionTerminatedError):
            qp.receive()
        seen.append((qp.terminate is not None, qp.terminate_received))

    port = server.serve(handler, pd=server_pd, receive_buffers=1)
    qp = client.connect(port)
    sink = qp.register(bytearray(16), Access.LOCAL_WRITE)
    with pytest.raises(RdmaError) as info:
        qp.rdma_read(sink, region.stag, 0)  # no remote read right
    assert info.value.completion.status is CompletionStatus.REMOTE_ACCESS_ERROR
    term = info.value.terminate
    assert term is not None and (term.layer, term.etype, term.code) == (0, 1, 0x02)
    assert qp.terminate_received
    with pytest.raises(ConnectionTerminatedError):
        qp.send(b"after the Terminate")
    qp.wait_closed()
    assert server.take_failures() == []
    assert seen == [(True, False)]  # the server sent it
    assert guarded == b"\xa5" * 48
    qp.close()


def test_no_matching_rtr_fails_the_connect_with_code_7(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    ended: list[tuple[int, int, int] | None] = []

    def handler(qp: Side) -> None:
        qp.wait_closed()
        t = qp.terminate
        ended.append(None if t is None else (t.layer, t.etype, t.code))

    port = server.serve(handler, config=MpaConfig(rtr_types=RtrFlags.WRITE))
    with pytest.raises(MpaError) as info:
        client.connect(port, config=MpaConfig(peer_to_peer=True, rtr_types=RtrFlags.SEND))
    assert info.value.code == 7
    assert server.take_failures() == []
    assert ended == [(2, 0, 7)]


def test_reads_beyond_ord_wait_and_complete_in_order(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    server_pd = ProtectionDomain()
    source = server_pd.register(bytearray(os.urandom(4096)), REMOTE)

    def handler(qp: Side) -> None:
        qp.wait_closed()

    port = server.serve(handler, pd=server_pd, config=MpaConfig(ird=1))
    qp = client.connect(port, config=MpaConfig(ord=1))
    assert qp.params.ord == 1
    sinks = [qp.register(bytearray(4096)) for _ in range(4)]
    for i, sink in enumerate(sinks):
        qp.post_send(ReadWR(Sge(sink), source.stag, 0, wr_id=i))
    qp.drain()  # the fourth Read left only after three responses came back
    done = [qp.wait_send() for _ in range(4)]
    assert [(c.wr_id, c.ok) for c in done] == [(i, True) for i in range(4)]
    assert all(bytes(s.view) == bytes(source.view) for s in sinks)
    qp.close()


def test_a_peer_reset_ends_waiting_operations(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair

    def handler(qp: Side) -> None:
        qp.receive()
        qp.abort()  # RST while the client waits for an answer

    port = server.serve(handler, receive_buffers=1)
    qp = client.connect(port, receive_buffers=1)
    qp.send(b"hello?")
    with pytest.raises(ConnectionTerminatedError):
        qp.receive()
    with pytest.raises(ConnectionTerminatedError):
        qp.send(b"too late")
    qp.close()


def test_a_returning_handler_closes_after_what_it_posted(
    pair: tuple[Adapter, Adapter],
) -> None:
    """docs/rdmap.md "When a handler returns": posted work goes out, then
    FIN; the client's waiting and later calls see the connection over."""
    client, server = pair

    def handler(qp: Side) -> None:
        assert qp.receive() == b"hello"
        qp.send(b"last words")  # returning right after: still delivered

    port = server.serve(handler, receive_buffers=1)
    qp = client.connect(port, receive_buffers=2)
    qp.send(b"hello")
    assert qp.receive() == b"last words"
    with pytest.raises(ConnectionTerminatedError):
        qp.receive()
    sink = qp.register(bytearray(8), Access.LOCAL_WRITE)
    with pytest.raises((ConnectionTerminatedError, RdmaError)):
        qp.rdma_read(sink, 0x1234, 0)
    assert server.take_failures() == []
    qp.close()


def test_a_send_held_by_the_mpa_fence_logs_why(
    pair: tuple[Adapter, Adapter], caplog: pytest.LogCaptureFixture
) -> None:
    """The server sends first to a client that did not negotiate
    peer-to-peer: a warning names the fence and the fix, and the Send goes
    out once the client speaks."""
    caplog.set_level(logging.WARNING, logger="iwarp")
    client, server = pair

    def handler(qp: Side) -> None:
        qp.send(b"server first")  # held until the client's first FPDU
        assert qp.receive() == b"client"

    port = server.serve(handler, receive_buffers=1)
    qp = client.connect(port, config=MpaConfig(), receive_buffers=1)  # no peer-to-peer

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "RFC 5044" in r.getMessage()]

    deadline = time.monotonic() + CALL_TIMEOUT  # a bound, not an assertion on time
    while not warned() and time.monotonic() < deadline:
        time.sleep(0.02)
    (message,) = warned()
    assert "peer-to-peer" in message and "send first" in message
    qp.send(b"client")
    assert qp.receive() == b"server first"
    assert server.take_failures() == []
    qp.close()


def test_by_default_the_server_may_send_first(
    pair: tuple[Adapter, Adapter], caplog: pytest.LogCaptureFixture
) -> None:
    """connect() without a config offers RFC 6581 peer-to-peer: the client's
    RTR lifts the server's fence, so a server that speaks first is answered
    without the client sending anything, and nothing is warned about."""
    caplog.set_level(logging.WARNING, logger="iwarp")
    client, server = pair

    def handler(qp: Side) -> None:
        qp.send(b"server first")
        assert qp.receive() == b"client"

    port = server.serve(handler, receive_buffers=1)
    qp = client.connect(port, receive_buffers=1)
    assert qp.params.peer_to_peer and qp.params.rtr is not None
    assert qp.receive() == b"server first"  # before the client sent any message
    qp.send(b"client")
    qp.close()
    assert server.take_failures() == []
    assert [r for r in caplog.records if "RFC 5044" in r.getMessage()] == []


def test_a_rejected_request_raises_with_the_private_data(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    asked: list[bytes] = []

    def decide(request: RequestReceived) -> Reject:
        asked.append(request.private_data)
        return Reject(b"not today")

    port = server.serve(lambda qp: None, decide=decide)
    with pytest.raises(ConnectionRejectedError) as info:
        client.connect(port, config=MpaConfig(), receive_buffers=1)
    assert info.value.private_data == b"not today"
    failures = server.take_failures()
    assert [type(f) for f in failures] == [ConnectionRejectedError]
    assert asked == [b""]


def test_posted_sends_are_delivered_before_the_close(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    count = 50
    got: list[bytes] = []

    def handler(qp: Side) -> None:
        while True:
            try:
                got.append(qp.receive())
            except ConnectionTerminatedError:
                return

    port = server.serve(handler, receive_buffers=count)
    qp = client.connect(port)
    for i in range(count):
        qp.post_send(SendWR(i.to_bytes(2, "big") * 1000, wr_id=i))
    qp.close()  # graceful: everything posted goes out first
    assert server.take_failures() == []
    assert got == [i.to_bytes(2, "big") * 1000 for i in range(count)]


def _completions(side: Side, count: int) -> list[tuple[int, WorkOpcode, CompletionStatus, int]]:
    entries = [side.wait_send() for _ in range(count)]
    return [(c.wr_id, c.opcode, c.status, c.byte_len) for c in entries]


def _echo(qp: Side) -> None:
    qp.send(b"re:" + qp.receive())
    qp.wait_closed()


def test_a_completion_queue_shared_by_two_queue_pairs(pair: tuple[Adapter, Adapter]) -> None:
    """One queue for the send and receive work of two queue pairs: its
    entries come in the order the work completed, whichever queue pair and
    adapter; once both queue pairs are over, a wait says so."""
    client, server = pair
    ports = [server.serve(_echo, receive_buffers=1) for _ in range(2)]
    cq = client.completion_queue()
    a, b = (client.connect(port, cq=cq) for port in ports)
    sinks = [bytearray(16), bytearray(16)]
    for side, sink, base in ((a, sinks[0], 10), (b, sinks[1], 20)):
        side.post_recv(RecvWR(Sge(side.register(sink), 0, 16), wr_id=base))
        side.post_send(SendWR(b"hello" * (base // 10), wr_id=base + 1))
        assert _completions(side, 2) == [
            (base + 1, WorkOpcode.SEND, CompletionStatus.SUCCESS, 5 * (base // 10)),
            (base, WorkOpcode.RECV, CompletionStatus.SUCCESS, 3 + 5 * (base // 10)),
        ]
    assert bytes(sinks[0][:8]) == b"re:hello" and bytes(sinks[1][:13]) == b"re:hellohello"
    a.close()
    b.post_send(SendWR(b"", wr_id=99))
    assert _completions(b, 1) == [(99, WorkOpcode.SEND, CompletionStatus.SUCCESS, 0)]
    b.close()
    with pytest.raises(ConnectionTerminatedError):
        b.wait_send()


def test_shared_cq_puts_send_and_receive_work_in_one_queue(pair: tuple[Adapter, Adapter]) -> None:
    client, server = pair
    port = server.serve(_echo, receive_buffers=1)
    qp = client.connect(port, shared_cq=True)
    sink = bytearray(8)
    qp.post_recv(RecvWR(Sge(qp.register(sink), 0, 8), wr_id=1))
    qp.post_send(SendWR(b"ping", wr_id=2))
    assert _completions(qp, 2) == [
        (2, WorkOpcode.SEND, CompletionStatus.SUCCESS, 4),
        (1, WorkOpcode.RECV, CompletionStatus.SUCCESS, 7),
    ]
    assert bytes(sink[:7]) == b"re:ping"
    qp.close()
