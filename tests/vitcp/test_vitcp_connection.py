"""Data transfer on a connected VI (§2.2.2.2, §3.2-§3.7), two endpoints in memory."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import out
from iwarp.errors import RemoteProtocolError
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import LocalBuffer, VitcpConnection
from iwarp.vitcp.crc import CrcOrder, crc
from iwarp.vitcp.errors import (
    CrcMismatchError,
    DescriptorError,
    MalformedSegmentError,
    MemoryProtectionError,
    UnexpectedSegmentError,
    VitcpUsageError,
)
from iwarp.vitcp.events import (
    Connected,
    Event,
    MessageReceived,
    RdmaReadCompleted,
    RdmaReadServed,
    RdmaWriteReceived,
    RemoteErrorReported,
    SendCompleted,
    ViCompletionStatus,
    ViConnectionClosed,
)
from iwarp.vitcp.handshake import State
from iwarp.vitcp.wire import (
    HEADER_SIZE,
    RdmaHeader,
    Reliability,
    SegmentFlags,
    SegmentHeader,
    SegmentType,
    ViErrorType,
    decode_segment,
    encode_segment,
)


def state_of(connection: VitcpConnection) -> State:
    """The state, read through a call so that mypy does not narrow it."""
    return connection.state


class Pair:
    """An active and a passive endpoint joined by an in-memory stream."""

    def __init__(self, a_config: VitcpConfig, b_config: VitcpConfig, chunk: int = 0) -> None:
        self.a = VitcpConnection(a_config, ViRole.ACTIVE)
        self.b = VitcpConnection(b_config, ViRole.PASSIVE)
        self.ea: list[Event] = []
        self.eb: list[Event] = []
        self.wire_ab: list[bytes] = []
        self.wire_ba: list[bytes] = []
        self.chunk = chunk
        self.a.connect(0.0, b_config.discriminator)
        self.b.tcp_accepted(0.0)
        self.a.tcp_established(0.0)
        self.pump()
        assert self.b.match()
        self.b.accept()
        self.pump()
        assert state_of(self.a) is State.CONNECTED and self.b.state is State.CONNECTED
        self.ea.clear()
        self.eb.clear()

    def _deliver(self, to: VitcpConnection, data: bytes) -> list[Event]:
        if not self.chunk:
            return to.receive_data(data, 0.0)
        events = []
        for i in range(0, len(data), self.chunk):
            events += to.receive_data(data[i : i + self.chunk], 0.0)
        return events

    def pump(self, limit: int = 1000) -> None:
        for _ in range(limit):
            da, db = out(self.a), out(self.b)
            self.ea += self.a.take_events()
            self.eb += self.b.take_events()
            if not da and not db:
                return
            if da:
                self.wire_ab.append(da)
                self.eb += self._deliver(self.b, da)
            if db:
                self.wire_ba.append(db)
                self.ea += self._deliver(self.a, db)
        raise AssertionError("endpoints never went quiet")


def of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def segments(wire: bytes, *, trailer: bool = False) -> list[Any]:
    out = []
    pos = 0
    while pos < len(wire):
        seg = decode_segment(wire, pos, trailer=trailer)
        assert seg is not None
        out.append(seg)
        pos += seg.size
    return out


def cfg(**kw: Any) -> VitcpConfig:
    return VitcpConfig(**kw)


LEVELS = list(Reliability)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("use_crc", [False, True])
@pytest.mark.parametrize("flow", [False, True])
def test_every_message_type(level: Reliability, use_crc: bool, flow: bool) -> None:
    config = cfg(reliability=level, crc=use_crc, flow_control=flow, mtu=700)
    p = Pair(config, config, chunk=333)
    target = bytearray(4000)
    region = p.b.register(target)
    local = p.a.register(bytearray(4000))
    p.b.post_receive(3)
    p.pump()
    n_send = p.a.send(b"s" * 2000, immediate=0xCAFE)
    n_write = p.a.rdma_write(
        b"w" * 1500, remote_address=region.address + 5, memory_handle=region.handle
    )
    n_write_imm = p.a.rdma_write(
        b"", remote_address=region.address, memory_handle=region.handle, immediate=7
    )
    n_empty = p.a.send(b"")
    target[3000:3100] = b"r" * 100
    n_read = None
    if level is not Reliability.UNRELIABLE:
        n_read = p.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address + 1,
            remote_address=region.address + 3000,
            memory_handle=region.handle,
            length=100,
        )
    p.pump()
    messages = of(p.eb, MessageReceived)
    assert [(m.message_number, m.data, m.immediate_data) for m in messages] == [
        (n_send, b"s" * 2000, 0xCAFE),
        (n_empty, b"", None),
    ]
    writes = of(p.eb, RdmaWriteReceived)
    assert [(w.message_number, w.length, w.immediate_data) for w in writes] == [
        (n_write, 1500, None),
        (n_write_imm, 0, 7),
    ]
    assert target[5:1505] == b"w" * 1500
    completions = of(p.ea, SendCompleted)
    assert sorted(c.message_number for c in completions) == sorted(
        [n_send, n_write, n_write_imm, n_empty]
    )
    assert all(c.status is ViCompletionStatus.SUCCESS for c in completions)
    if n_read is not None:
        (read,) = of(p.ea, RdmaReadCompleted)
        assert read.message_number == n_read and read.status is ViCompletionStatus.SUCCESS
        assert local.view[1:101] == b"r" * 100
        assert of(p.eb, RdmaReadServed)[0].message_number == n_read
    assert p.b.descriptors_posted == 0
    # Every segment carries a trailer iff CRC was agreed, and no payload
    # exceeds the MTU.
    for seg in segments(b"".join(p.wire_ab), trailer=use_crc):
        assert (seg.trailer is not None) == use_crc
        assert seg.crc_ok in (None, True)
        assert len(seg.payload) <= 700


def test_segmentation_and_numbering() -> None:
    p = Pair(cfg(mtu=100, initial_message_number=0xFFFFFFFE), cfg())
    p.b.post_receive(2)
    p.pump()
    p.wire_ab.clear()
    first = p.a.send(bytes(range(250)), immediate=1)
    second = p.a.send(b"x")
    assert first == 0xFFFFFFFF and second == 0  # CE took 0xFFFFFFFE; numbers wrap
    p.pump()
    segs = segments(b"".join(p.wire_ab))
    assert [(s.header.message_number, s.header.data_offset, len(s.payload)) for s in segs] == [
        (first, 0, 100),
        (first, 100, 100),
        (first, 200, 50),
        (second, 0, 1),
    ]
    assert [s.header.eom for s in segs] == [False, False, True, True]
    # IdV and the immediate value in every segment of the message (§3.2).
    assert all(s.header.flags & SegmentFlags.IDV for s in segs[:3])
    assert all(s.header.immediate_data == 1 for s in segs[:3])
    assert not segs[3].header.flags & SegmentFlags.IDV and segs[3].header.immediate_data == 0


def test_read_response_carries_request_number_and_nop_the_last_message() -> None:
    config = cfg(reliability=Reliability.RECEPTION, mtu=64)
    p = Pair(config, config)
    region = p.b.register(bytearray(b"abcdefgh" * 20))
    local = p.a.register(bytearray(200))
    number = p.a.rdma_read(
        local_handle=local.handle,
        local_address=local.address,
        remote_address=region.address,
        memory_handle=region.handle,
        length=160,
    )
    p.pump()
    responses = [
        s for s in segments(b"".join(p.wire_ba)) if s.header.type is SegmentType.RDMA_READ_RESPONSE
    ]
    assert [s.header.message_number for s in responses] == [number] * 3
    assert [s.header.data_offset for s in responses] == [0, 64, 128]
    assert responses[0].rdma == RdmaHeader(region.address, region.handle, 160)
    assert bytes(local.view[:160]) == b"abcdefgh" * 20
    # The responder acknowledges the request with a NOP carrying its own
    # last message number (the CE's, as it sent no message).
    nops = [s for s in segments(b"".join(p.wire_ba)) if s.header.type is SegmentType.NOP]
    assert nops and all(n.header.message_number == 0 for n in nops)
    assert nops[-1].header.message_ack == number


def test_interleaved_read_response_is_accepted() -> None:
    """§2.2.2.2.3: read response segments may sit between a message's segments."""
    config = cfg(reliability=Reliability.DELIVERY, mtu=50)
    p = Pair(config, config)
    region_b = p.b.register(bytearray(b"R" * 100))
    local = p.a.register(bytearray(100))
    p.a.post_receive(1)
    p.pump()
    number = p.a.rdma_read(
        local_handle=local.handle,
        local_address=local.address,
        remote_address=region_b.address,
        memory_handle=region_b.handle,
        length=100,
    )
    request = out(p.a)
    p.b.receive_data(request, 0.0)
    p.b.take_events()
    response = segments(out(p.b))
    send_number = p.b.send(b"S" * 100)
    send = segments(out(p.b))
    assert len(response) == 2 and len(send) == 2
    raw_send = [
        b"".join(bytes(x) for x in encode_segment(s.header, payload=s.payload)) for s in send
    ]
    raw_resp = [
        b"".join(bytes(x) for x in encode_segment(s.header, rdma=s.rdma, payload=s.payload))
        for s in response
    ]
    interleaved = raw_send[0] + raw_resp[0] + raw_resp[1] + raw_send[1]
    events = p.a.receive_data(interleaved, 0.0)
    (read,) = of(events, RdmaReadCompleted)
    (message,) = of(events, MessageReceived)
    assert read.message_number == number and bytes(local.view) == b"R" * 100
    assert message.message_number == send_number and message.data == b"S" * 100


def test_other_interleaving_is_a_protocol_error() -> None:
    p = Pair(cfg(), cfg())
    p.b.post_receive(2)
    first = encode_segment(SegmentHeader(SegmentType.SEND, SegmentFlags(0), message_number=1))
    second = encode_segment(SegmentHeader(SegmentType.SEND, message_number=2))
    events = p.b.receive_data(b"".join(bytes(x) for x in first + second), 0.0)
    (closed,) = of(events, ViConnectionClosed)
    assert isinstance(closed.error, UnexpectedSegmentError)
    assert state_of(p.b) is State.DISCONNECTED


def test_message_numbers_must_follow() -> None:
    p = Pair(cfg(), cfg())
    p.b.post_receive(2)
    one = encode_segment(SegmentHeader(SegmentType.SEND, message_number=10))
    three = encode_segment(SegmentHeader(SegmentType.SEND, message_number=12))
    events = p.b.receive_data(b"".join(bytes(x) for x in one + three), 0.0)
    assert of(events, MessageReceived)[0].message_number == 10
    assert isinstance(of(events, ViConnectionClosed)[0].error, UnexpectedSegmentError)


def test_nop_with_wrong_number_is_an_error() -> None:
    p = Pair(cfg(), cfg())
    p.b.post_receive(1)
    msg = encode_segment(SegmentHeader(SegmentType.SEND, message_number=5))
    nop = encode_segment(SegmentHeader(SegmentType.NOP, message_number=4))
    events = p.b.receive_data(b"".join(bytes(x) for x in msg + nop), 0.0)
    assert isinstance(of(events, ViConnectionClosed)[0].error, UnexpectedSegmentError)


def test_reliable_reception_completes_on_ack() -> None:
    config = cfg(reliability=Reliability.RECEPTION)
    p = Pair(config, config)
    p.b.post_receive(2)
    p.pump()
    number = p.a.send(b"hello")
    p.b.receive_data(out(p.a), 0.0)
    assert not of(p.a.take_events(), SendCompleted)  # not before the ACK
    ack = out(p.b)  # a NOP carrying Message ACK
    (nop,) = segments(ack)
    assert nop.header.type is SegmentType.NOP and nop.header.message_ack == number
    (done,) = p.a.receive_data(ack, 0.0)
    assert isinstance(done, SendCompleted) and done.message_number == number
    # Idle afterwards: no NOP answers a NOP.
    assert out(p.a) == b"" and out(p.b) == b""


@pytest.mark.parametrize("level", [Reliability.UNRELIABLE, Reliability.DELIVERY])
def test_lower_levels_complete_when_sent(level: Reliability) -> None:
    p = Pair(cfg(reliability=level), cfg(reliability=level))
    number = p.a.send(b"x")
    (done,) = p.a.take_events()
    assert isinstance(done, SendCompleted) and done.message_number == number


def test_flow_control_holds_sends_until_credit() -> None:
    p = Pair(cfg(flow_control=True), cfg())
    first = p.a.send(b"one")
    assert out(p.a) == b""  # §3.2: delayed until a descriptor is posted
    p.b.post_receive(1)
    p.pump()
    assert [m.data for m in of(p.eb, MessageReceived)] == [b"one"]
    assert of(p.ea, SendCompleted)[0].message_number == first
    # RDMA Writes without immediate data need no descriptor.
    region = p.b.register(bytearray(10))
    p.a.send(b"two")
    p.a.rdma_write(b"w", remote_address=region.address, memory_handle=region.handle)
    assert out(p.a) == b""  # the write waits behind the Send: order is kept
    p.b.post_receive(1)
    p.pump()
    assert [m.data for m in of(p.eb, MessageReceived)] == [b"one", b"two"]
    assert bytes(region.view[0:1]) == b"w"


def test_credit_nops_do_not_flood() -> None:
    p = Pair(cfg(flow_control=True), cfg())
    nops = 0
    for _ in range(200):
        p.b.post_receive(1)
        nops += len(segments(out(p.b)))
    assert 1 <= nops <= 10
    # Nothing to say without flow control at the peer.
    q = Pair(cfg(), cfg())
    q.b.post_receive(5)
    assert out(q.b) == b""


def test_flow_control_with_credits_ahead() -> None:
    p = Pair(cfg(flow_control=True), cfg())
    p.b.post_receive(3)
    p.pump()
    for i in range(5):
        p.a.send(bytes([i]))
    p.pump()
    assert len(of(p.eb, MessageReceived)) == 3
    p.b.post_receive(2)
    p.pump()
    assert [m.data for m in of(p.eb, MessageReceived)] == [bytes([i]) for i in range(5)]


def test_read_window_is_enforced() -> None:
    config = cfg(read_window=2, mtu=1000)
    p = Pair(config, cfg(read_window=5))
    region = p.b.register(bytearray(1000))
    local = p.a.register(bytearray(1000))
    for i in range(4):
        p.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address + i * 10,
            remote_address=region.address,
            memory_handle=region.handle,
            length=10,
        )
    wire = out(p.a)
    assert len(segments(wire)) == 2  # two outstanding, two queued
    p.b.receive_data(wire, 0.0)
    done = p.a.receive_data(out(p.b), 0.0)
    assert len(of(done, RdmaReadCompleted)) == 2
    wire = out(p.a)
    assert len(segments(wire)) == 2  # the window opened again
    p.b.receive_data(wire, 0.0)
    done = p.a.receive_data(out(p.b), 0.0)
    assert len(of(done, RdmaReadCompleted)) == 2


def test_responder_refuses_reads_beyond_window() -> None:
    p = Pair(cfg(read_window=1), cfg(read_window=1))
    region = p.b.register(bytearray(10))
    rdma = RdmaHeader(region.address, region.handle, 10)
    reads = [
        encode_segment(SegmentHeader(SegmentType.RDMA_READ_REQUEST, message_number=n), rdma=rdma)
        for n in (1, 2)
    ]
    events = p.b.receive_data(b"".join(bytes(x) for r in reads for x in r), 0.0)
    assert isinstance(of(events, ViConnectionClosed)[0].error, DescriptorError)


@pytest.mark.parametrize("level", LEVELS)
def test_protection_error_per_level(level: Reliability) -> None:
    p = Pair(cfg(reliability=level), cfg(reliability=level))
    region = p.b.register(bytearray(10))
    p.b.post_receive(1)
    p.pump()
    bad = p.a.rdma_write(b"x" * 11, remote_address=region.address, memory_handle=region.handle)
    after = p.a.send(b"after")
    p.pump()
    writes = of(p.eb, RdmaWriteReceived)
    if level is Reliability.UNRELIABLE:
        # Dropped with an error status; the VI goes on.
        assert writes[0].status is ViCompletionStatus.PROTECTION_ERROR
        assert of(p.eb, MessageReceived)[0].message_number == after
        assert state_of(p.b) is State.CONNECTED
        assert bytes(region.view) == bytes(10)
        return
    closed = of(p.eb, ViConnectionClosed)[0]
    assert isinstance(closed.error, MemoryProtectionError)
    assert state_of(p.b) is State.DISCONNECTED
    if level is Reliability.RECEPTION:
        (report,) = of(p.ea, RemoteErrorReported)
        assert report.message_number == bad and report.vi_error is ViErrorType.MPE
        statuses = {c.message_number: c.status for c in of(p.ea, SendCompleted)}
        assert statuses[bad] is ViCompletionStatus.PROTECTION_ERROR
        assert statuses[after] is ViCompletionStatus.FLUSHED


@pytest.mark.parametrize(
    ("handle_delta", "address_delta", "length"),
    [(1, 0, 4), (0, -1, 4), (0, 7, 4), (0, 0, 11)],
)
def test_bounds_and_handles(handle_delta: int, address_delta: int, length: int) -> None:
    config = cfg(reliability=Reliability.RECEPTION)
    p = Pair(config, config)
    region = p.b.register(bytearray(10))
    local = p.a.register(bytearray(20))
    number = p.a.rdma_read(
        local_handle=local.handle,
        local_address=local.address,
        remote_address=region.address + address_delta,
        memory_handle=region.handle + handle_delta,
        length=length,
    )
    p.pump()
    (read,) = of(p.ea, RdmaReadCompleted)
    assert read.message_number == number
    assert read.status is ViCompletionStatus.PROTECTION_ERROR
    assert isinstance(of(p.eb, ViConnectionClosed)[0].error, MemoryProtectionError)


def test_disabled_rdma_and_region_permissions() -> None:
    p = Pair(cfg(), cfg(rdma_write=False, rdma_read=False))
    with pytest.raises(VitcpUsageError, match="RDMA Write"):
        p.a.rdma_write(b"x", remote_address=0, memory_handle=1)
    with pytest.raises(VitcpUsageError, match="RDMA Read"):
        p.a.rdma_read(local_handle=1, local_address=0, remote_address=0, memory_handle=1, length=1)
    q = Pair(cfg(), cfg())
    region = q.b.register(bytearray(10), remote_write=False)
    q.a.rdma_write(b"x", remote_address=region.address, memory_handle=region.handle)
    q.pump()
    assert isinstance(of(q.eb, ViConnectionClosed)[0].error, MemoryProtectionError)
    with pytest.raises(VitcpUsageError):
        q.b.register(b"readonly")
    with pytest.raises(VitcpUsageError):
        q.b.deregister(999)


@pytest.mark.parametrize("level", LEVELS)
def test_missing_descriptor(level: Reliability) -> None:
    p = Pair(cfg(reliability=level), cfg(reliability=level))
    number = p.a.send(b"nobody posted")
    p.pump()
    if level is Reliability.UNRELIABLE:
        (message,) = of(p.eb, MessageReceived)
        assert message.status is ViCompletionStatus.DESCRIPTOR_ERROR and message.data == b""
        assert state_of(p.b) is State.CONNECTED
        return
    assert isinstance(of(p.eb, ViConnectionClosed)[0].error, DescriptorError)
    if level is Reliability.RECEPTION:
        assert of(p.ea, RemoteErrorReported)[0].vi_error is ViErrorType.VDE
        assert of(p.ea, SendCompleted)[0].message_number == number
        assert of(p.ea, SendCompleted)[0].status is ViCompletionStatus.DESCRIPTOR_ERROR


def test_descriptor_capacity() -> None:
    p = Pair(cfg(reliability=Reliability.UNRELIABLE), cfg(reliability=Reliability.UNRELIABLE))
    p.b.post_receive(1, capacity=4)
    p.b.post_receive(1, capacity=4)
    p.a.send(b"12345")
    p.a.send(b"1234")
    p.pump()
    first, second = of(p.eb, MessageReceived)
    assert first.status is ViCompletionStatus.DESCRIPTOR_ERROR
    assert second.data == b"1234" and second.status is ViCompletionStatus.SUCCESS


@pytest.mark.parametrize("level", LEVELS)
def test_bad_crc_per_level(level: Reliability) -> None:
    """§3.6 action 2: deliver with a transport error; close unless Unreliable;
    Reliable Reception reports an Unrecoverable Transport Error."""
    config = cfg(reliability=level, crc=True, mtu=10)
    p = Pair(config, config)
    p.b.post_receive(2)
    p.pump()
    number = p.a.send(b"0123456789abcdefghij")
    wire = bytearray(out(p.a))
    wire[HEADER_SIZE + 2] ^= 0x40  # a payload octet of the first segment
    events = p.b.receive_data(bytes(wire), 0.0)
    (message,) = of(events, MessageReceived)
    assert message.status is ViCompletionStatus.TRANSPORT_ERROR
    assert message.message_number == number
    if level is Reliability.UNRELIABLE:
        assert state_of(p.b) is State.CONNECTED
        assert len(message.data) == 20
        p.a.send(b"next")
        p.pump()
        assert of(p.eb, MessageReceived)[-1].data == b"next"
        return
    assert state_of(p.b) is State.DISCONNECTED
    assert isinstance(of(events, ViConnectionClosed)[0].error, CrcMismatchError)
    if level is Reliability.RECEPTION:
        (nop,) = segments(out(p.b), trailer=True)
        assert nop.header.type is SegmentType.NOP
        assert nop.header.vi_error is ViErrorType.UTE and nop.header.message_ack == number


def test_transmit_error_pads_and_flags() -> None:
    config = cfg(reliability=Reliability.RECEPTION, mtu=4)
    p = Pair(config, config)
    p.b.post_receive(2)
    p.pump()
    p.wire_ab.clear()
    region = p.a.register(bytearray(b"registered"))
    good = p.a.send(LocalBuffer(region.handle, region.address, 10))
    bad = p.a.send(LocalBuffer(region.handle, region.address + 5, 10))
    p.pump()
    statuses = {c.message_number: c.status for c in of(p.ea, SendCompleted)}
    assert statuses == {
        good: ViCompletionStatus.SUCCESS,
        bad: ViCompletionStatus.PROTECTION_ERROR,
    }
    first, second = of(p.eb, MessageReceived)
    assert first.data == b"registered" and first.status is ViCompletionStatus.SUCCESS
    assert second.data == bytes(10) and second.status is ViCompletionStatus.TRANSMIT_ERROR
    flagged = [s for s in segments(b"".join(p.wire_ab)) if s.header.flags & SegmentFlags.TRE]
    assert len(flagged) == 3 and all(s.header.message_number == bad for s in flagged)
    assert state_of(p.b) is State.CONNECTED


def test_urgent_only_when_the_peer_allowed_it() -> None:
    p = Pair(cfg(), cfg(urgent_marker=True))
    p.a.send(b"x" * 10, urgent=True)
    out = p.a.segments_to_send()
    assert [s.urgent for s in out] == [True]
    p.b.post_receive(1)
    p.b.send(b"y", urgent=True)
    assert not any(s.urgent for s in p.b.segments_to_send())


def test_urgent_marks_only_the_first_segment() -> None:
    p = Pair(cfg(mtu=4), cfg(urgent_marker=True))
    p.a.send(b"x" * 10, urgent=True)
    assert [s.urgent for s in p.a.segments_to_send()] == [True, False, False]


def test_close_flushes_outstanding() -> None:
    config = cfg(reliability=Reliability.RECEPTION)
    p = Pair(config, config)
    number = p.a.send(b"pending")
    p.a.close()
    events = p.a.take_events()
    assert of(events, SendCompleted)[0].status is ViCompletionStatus.FLUSHED
    assert of(events, SendCompleted)[0].message_number == number
    assert of(events, ViConnectionClosed)
    with pytest.raises(VitcpUsageError):
        p.a.send(b"late")
    assert p.a.receive_data(b"ignored", 0.0) == []


def test_tcp_close_ends_the_vi() -> None:
    p = Pair(cfg(), cfg())
    events = p.b.connection_lost(1.0)
    assert state_of(p.b) is State.DISCONNECTED
    assert of(events, ViConnectionClosed)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x02" + bytes(23),  # bad version
        b"\x01\x09" + bytes(22),  # unknown type 9
        b"\x01\x80\x00\x05" + bytes(20),  # length below the header
        SegmentHeader(SegmentType.CONNECT_REQUEST, length=164).pack() + bytes(140),
        SegmentHeader(SegmentType.NOP, length=30).pack() + bytes(6),
        SegmentHeader(SegmentType.RDMA_READ_RESPONSE, length=40).pack() + bytes(16),
    ],
)
@pytest.mark.parametrize("level", LEVELS)
def test_malformed_segment_closes(raw: bytes, level: Reliability) -> None:
    p = Pair(cfg(reliability=level), cfg(reliability=level))
    events = p.b.receive_data(raw, 0.0)
    (closed,) = of(events, ViConnectionClosed)
    assert isinstance(closed.error, RemoteProtocolError)
    assert state_of(p.b) is State.DISCONNECTED
    nops = segments(out(p.b))
    if level is Reliability.RECEPTION:
        assert nops[0].header.vi_error & ViErrorType.UTE
    else:
        assert nops == []


def test_write_must_fill_its_rdma_length() -> None:
    p = Pair(cfg(), cfg())
    region = p.b.register(bytearray(10))
    seg = encode_segment(
        SegmentHeader(SegmentType.RDMA_WRITE, message_number=1),
        rdma=RdmaHeader(region.address, region.handle, 5),
        payload=b"abc",
    )
    events = p.b.receive_data(b"".join(bytes(x) for x in seg), 0.0)
    assert isinstance(of(events, ViConnectionClosed)[0].error, MalformedSegmentError)


def test_remote_error_with_is_code_is_reported() -> None:
    config = cfg(reliability=Reliability.RECEPTION)
    p = Pair(config, config)
    number = p.a.send(b"x")
    out(p.a)
    nop = SegmentHeader(
        SegmentType.NOP,
        message_number=0,
        message_ack=number,
        vi_error=ViErrorType.VDE,
        is_error_code=0x42,
    )
    events = p.a.receive_data(nop.pack(), 0.0)
    (report,) = of(events, RemoteErrorReported)
    assert report.is_error_code == 0x42 and report.vi_error is ViErrorType.VDE
    assert of(events, SendCompleted)[0].status is ViCompletionStatus.DESCRIPTOR_ERROR
    assert state_of(p.a) is State.DISCONNECTED


def test_lower_levels_ignore_ack_fields() -> None:
    p = Pair(cfg(), cfg())
    nop = SegmentHeader(SegmentType.NOP, message_ack=77, vi_error=ViErrorType.MPE)
    events = p.a.receive_data(nop.pack(), 0.0)
    assert events == [] and p.a.state is State.CONNECTED


def test_big_message_crosses_many_segments() -> None:
    config = cfg(mtu=65000, crc=True)
    p = Pair(config, config)
    p.b.post_receive(1)
    p.pump()
    data = random.Random(1).randbytes(3 * 1024 * 1024 + 17)
    p.a.send(data)
    p.pump()
    assert of(p.eb, MessageReceived)[0].data == data


ops = st.lists(
    st.tuples(
        st.sampled_from(["send", "write", "read"]),
        st.integers(0, 3000),
        st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    ),
    min_size=1,
    max_size=8,
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=ops,
    level=st.sampled_from([Reliability.DELIVERY, Reliability.RECEPTION]),
    use_crc=st.booleans(),
    flow=st.booleans(),
    mtu=st.integers(1, 2000),
    chunk=st.integers(0, 700),
    order=st.sampled_from(list(CrcOrder)),
    includes=st.booleans(),
)
def test_hypothesis_round_trips(
    operations: list[tuple[str, int, int | None]],
    level: Reliability,
    use_crc: bool,
    flow: bool,
    mtu: int,
    chunk: int,
    order: CrcOrder,
    includes: bool,
) -> None:
    a_config = cfg(reliability=level, crc=use_crc, flow_control=flow, mtu=mtu, crc_order=order)
    b_config = cfg(reliability=level, crc=use_crc, length_includes_trailer=includes, mtu=4000)
    p = Pair(a_config, b_config, chunk=chunk)
    rng = random.Random(len(operations))
    remote = p.b.register(bytearray(rng.randbytes(3000)))
    local = p.a.register(bytearray(3000))
    sent: list[bytes] = []
    for op, size, immediate in operations:
        data = rng.randbytes(size)
        if op == "send":
            p.b.post_receive(1)
            p.a.send(data, immediate=immediate)
            sent.append(data)
        elif op == "write":
            p.a.rdma_write(
                data, remote_address=remote.address, memory_handle=remote.handle, immediate=None
            )
            p.pump()
            assert bytes(remote.view[:size]) == data
        else:
            p.a.rdma_read(
                local_handle=local.handle,
                local_address=local.address,
                remote_address=remote.address,
                memory_handle=remote.handle,
                length=size,
            )
            p.pump()
            assert bytes(local.view[:size]) == bytes(remote.view[:size])
        p.pump()
    assert [m.data for m in of(p.eb, MessageReceived)] == sent
    assert all(c.status is ViCompletionStatus.SUCCESS for c in of(p.ea, SendCompleted))
    assert state_of(p.a) is State.CONNECTED and p.b.state is State.CONNECTED
    assert not of(p.ea, ViConnectionClosed) and not of(p.eb, ViConnectionClosed)


@settings(max_examples=150, deadline=None)
@given(
    data=st.binary(max_size=300),
    level=st.sampled_from(LEVELS),
    use_crc=st.booleans(),
    split=st.integers(0, 300),
)
def test_fuzz_connected_endpoint(
    data: bytes, level: Reliability, use_crc: bool, split: int
) -> None:
    """Arbitrary octets on a connected VI: only events, never an exception
    (not even the consumer's VitcpUsageError)."""
    config = cfg(reliability=level, crc=use_crc)
    prefix = b"\x01" + data[1:] if data else data  # a valid version octet
    for blob in (data, prefix):
        q = Pair(config, config)
        q.b.register(bytearray(64))
        q.b.post_receive(2)
        q.b.receive_data(blob[:split], 0.0)
        q.b.receive_data(blob[split:], 0.0)
        out(q.b)


def test_crc_trailer_detected_lsb() -> None:
    # A peer computing the Ethernet bit order is understood.
    config = cfg(crc=True, crc_order=CrcOrder.LSB_FIRST)
    p = Pair(config, cfg(crc=True))
    p.b.post_receive(1)
    p.pump()
    p.a.send(b"ethernet order")
    wire = out(p.a)
    (seg,) = segments(wire, trailer=True)
    assert seg.crc_order is CrcOrder.LSB_FIRST
    assert seg.trailer == crc(wire[:-4], CrcOrder.LSB_FIRST)
    events = p.b.receive_data(wire, 0.0)
    assert of(events, MessageReceived)[0].data == b"ethernet order"


def test_connected_event_params() -> None:
    a = VitcpConnection(cfg(), ViRole.ACTIVE)
    b = VitcpConnection(cfg(), ViRole.PASSIVE)
    a.connect(0.0)
    b.tcp_accepted(0.0)
    a.tcp_established(0.0)
    b.receive_data(out(a), 0.0)
    b.take_events()
    b.match()
    b.accept()
    (connected,) = a.receive_data(out(b), 0.0)
    assert isinstance(connected, Connected)
    assert connected.params.reliability is Reliability.DELIVERY


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400), use_crc=st.booleans(), split=st.integers(0, 400))
def test_fuzz_establishment(data: bytes, use_crc: bool, split: int) -> None:
    """Arbitrary octets to a passive end awaiting a ConnectRequest and to an
    active end awaiting the accept: only events, never an exception."""
    seg_type = [5, 6, 7, 8][split % 4]
    for blob in (data, b"\x01" + bytes([seg_type]) + data[2:]):
        passive = VitcpConnection(cfg(crc=use_crc), ViRole.PASSIVE)
        passive.tcp_accepted(0.0)
        active = VitcpConnection(cfg(crc=use_crc), ViRole.ACTIVE)
        active.connect(0.0)
        active.tcp_established(0.0)
        out(active)
        for endpoint in (passive, active):
            endpoint.receive_data(blob[:split], 0.0)
            endpoint.receive_data(blob[split:], 0.0)
            out(endpoint)
        assert state_of(passive) in (State.INCOMING, State.MATCHING, State.DISCONNECTED)


def raw(*segments: list[bytes | bytearray | memoryview]) -> bytes:
    return b"".join(bytes(part) for parts in segments for part in parts)


def send_seg(number: int, offset: int = 0, *, eom: bool = True, data: bytes = b"ab") -> bytes:
    flags = SegmentFlags.EOM if eom else SegmentFlags(0)
    header = SegmentHeader(SegmentType.SEND, flags, data_offset=offset, message_number=number)
    return raw(encode_segment(header, payload=data))


def write_seg(
    number: int, rdma: RdmaHeader, offset: int = 0, *, eom: bool = True, data: bytes = b"ab"
) -> bytes:
    flags = SegmentFlags.EOM if eom else SegmentFlags(0)
    header = SegmentHeader(SegmentType.RDMA_WRITE, flags, data_offset=offset, message_number=number)
    return raw(encode_segment(header, rdma=rdma, payload=data))


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("continuation offset", MalformedSegmentError),
        ("first offset", MalformedSegmentError),
        ("rdma header changes", MalformedSegmentError),
        ("write past its length", MalformedSegmentError),
        ("multi-segment read request", MalformedSegmentError),
        ("connect on a connected vi", UnexpectedSegmentError),
    ],
)
def test_crafted_message_errors(case: str, error: type[Exception]) -> None:
    p = Pair(cfg(), cfg())
    p.b.post_receive(4)
    region = p.b.register(bytearray(100))
    rdma = RdmaHeader(region.address, region.handle, 4)
    wire = {
        "continuation offset": send_seg(1, eom=False) + send_seg(1, 5),
        "first offset": send_seg(1, 3),
        "rdma header changes": write_seg(1, rdma, eom=False)
        + write_seg(1, RdmaHeader(region.address + 1, region.handle, 4), 2),
        "write past its length": write_seg(1, rdma, eom=False) + write_seg(1, rdma, 2, data=b"xyz"),
        "multi-segment read request": raw(
            encode_segment(
                SegmentHeader(SegmentType.RDMA_READ_REQUEST, SegmentFlags(0), message_number=1),
                rdma=rdma,
            )
        ),
        "connect on a connected vi": raw(
            encode_segment(SegmentHeader(SegmentType.CONNECT_REJECT, message_number=1))
        ),
    }[case]
    events = p.b.receive_data(wire, 0.0)
    (closed,) = of(events, ViConnectionClosed)
    assert isinstance(closed.error, error), closed


@pytest.mark.parametrize(
    "case",
    ["no read", "wrong number", "wrong offset", "too long", "short", "transmit error"],
)
def test_crafted_read_responses(case: str) -> None:
    p = Pair(cfg(), cfg())
    local = p.a.register(bytearray(10))
    if case != "no read":
        number = p.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address,
            remote_address=0x99,
            memory_handle=7,
            length=4,
        )
    else:
        number = 1
    out(p.a)
    rdma = RdmaHeader(0x99, 7, 4)

    def response(num: int, offset: int, data: bytes, flags: SegmentFlags) -> bytes:
        header = SegmentHeader(
            SegmentType.RDMA_READ_RESPONSE, flags, data_offset=offset, message_number=num
        )
        return raw(encode_segment(header, rdma=rdma, payload=data))

    eom = SegmentFlags.EOM
    wire = {
        "no read": response(number, 0, b"abcd", eom),
        "wrong number": response(number + 1, 0, b"abcd", eom),
        "wrong offset": response(number, 1, b"abc", eom),
        "too long": response(number, 0, b"abcde", eom),
        "short": response(number, 0, b"abc", eom),
        "transmit error": response(number, 0, b"ab", SegmentFlags.TRE)
        + response(number, 2, b"cd", eom),
    }[case]
    events = p.a.receive_data(wire, 0.0)
    if case == "transmit error":
        (read,) = of(events, RdmaReadCompleted)
        assert read.status is ViCompletionStatus.TRANSMIT_ERROR
        return
    (closed,) = of(events, ViConnectionClosed)
    expected = (
        UnexpectedSegmentError if case in ("no read", "wrong number") else (MalformedSegmentError)
    )
    assert isinstance(closed.error, expected)


def test_active_refuses_data_before_the_accept() -> None:
    a = VitcpConnection(cfg(), ViRole.ACTIVE)
    a.connect(0.0)
    a.tcp_established(0.0)
    events = a.receive_data(send_seg(1), 0.0)
    assert isinstance(of(events, ViConnectionClosed)[0].error, UnexpectedSegmentError)


@pytest.mark.parametrize("kind", ["send", "write"])
def test_bad_crc_in_the_middle_of_a_message(kind: str) -> None:
    config = cfg(reliability=Reliability.DELIVERY, crc=True, mtu=4)
    p = Pair(config, config)
    p.b.post_receive(1)
    region = p.b.register(bytearray(12))
    p.pump()
    if kind == "send":
        number = p.a.send(b"0123456789ab")
    else:
        number = p.a.rdma_write(
            b"0123456789ab", remote_address=region.address, memory_handle=region.handle
        )
    wire = bytearray(out(p.a))
    wire[-6] ^= 1  # the last segment's payload
    events = p.b.receive_data(bytes(wire), 0.0)
    kind_event = MessageReceived if kind == "send" else RdmaWriteReceived
    (delivered,) = of(events, kind_event)
    assert delivered.message_number == number
    assert delivered.status is ViCompletionStatus.TRANSPORT_ERROR
    assert isinstance(of(events, ViConnectionClosed)[0].error, CrcMismatchError)


def test_usage_limits() -> None:
    p = Pair(cfg(read_window=0), cfg())
    local = p.a.register(bytearray(4))
    with pytest.raises(VitcpUsageError, match="window is zero"):
        p.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address,
            remote_address=0,
            memory_handle=1,
            length=1,
        )
    q = Pair(cfg(), cfg())
    local = q.a.register(bytearray(4))
    with pytest.raises(VitcpUsageError, match="writable registered memory"):
        q.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address,
            remote_address=0,
            memory_handle=1,
            length=5,
        )
    with pytest.raises(VitcpUsageError, match="32 bits"):
        q.a.send(b"", immediate=1 << 32)
    with pytest.raises(VitcpUsageError, match="negative"):
        q.a.post_receive(-1)
    with pytest.raises(VitcpUsageError, match="64 bits"):
        q.a.register(bytearray(4), address=(1 << 64) - 2)
    u = Pair(cfg(reliability=Reliability.UNRELIABLE), cfg(reliability=Reliability.UNRELIABLE))
    local = u.a.register(bytearray(4))
    with pytest.raises(VitcpUsageError, match="reliable"):
        u.a.rdma_read(
            local_handle=local.handle,
            local_address=local.address,
            remote_address=0,
            memory_handle=1,
            length=1,
        )


def test_close_flushes_queued_messages() -> None:
    p = Pair(cfg(flow_control=True), cfg())
    held = p.a.send(b"held: no credit")
    p.a.close()
    (done,) = of(p.a.take_events(), SendCompleted)
    assert done.message_number == held and done.status is ViCompletionStatus.FLUSHED


def test_is_error_code_alone_is_reported_once() -> None:
    config = cfg(reliability=Reliability.RECEPTION)
    p = Pair(config, config)
    number = p.a.send(b"x")
    out(p.a)
    nop = SegmentHeader(SegmentType.NOP, message_ack=number, is_error_code=9).pack()
    events = p.a.receive_data(nop + nop, 0.0)
    (report,) = of(events, RemoteErrorReported)
    assert (report.message_number, report.is_error_code) == (number, 9)
    assert report.vi_error is ViErrorType.NONE
    assert of(events, SendCompleted)[0].status is ViCompletionStatus.SUCCESS
    assert state_of(p.a) is State.CONNECTED


def test_unbounded_descriptors_still_have_a_limit() -> None:
    config = cfg(reliability=Reliability.RECEPTION, mtu=100)
    p = Pair(config, cfg(reliability=Reliability.RECEPTION, max_receive_size=250))
    p.b.post_receive(2)
    p.pump()
    number = p.a.send(bytes(300))
    p.pump()
    assert isinstance(of(p.eb, ViConnectionClosed)[0].error, DescriptorError)
    (report,) = of(p.ea, RemoteErrorReported)
    assert report.message_number == number and report.vi_error is ViErrorType.VDE
