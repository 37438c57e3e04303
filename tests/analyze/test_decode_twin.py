"""The decode kernels' pure twin (iwarp._decode) against the C kernels
(src/iwarp/_decode.c), function by function: the same results, and the
same refusals, on arbitrary input, from every offset.

The analyzer calls one or the other (iwarp.analyze.kernels, chosen once);
test_decode_kernels.py holds whole decodes on either to the same records.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import pytest
from analyze_traffic import coalesced, standard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twin_kernels import KERNELS, PURE, needs_c

from iwarp.analyze.capture import TcpPacket
from iwarp.analyze.records import FpduRecord, MarkerRecord
from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU
from iwarp.rdmap.wire import rdmap_control

pytestmark = needs_c


def same(name: str, *args: Any) -> Any:
    """Call the kernel ``name`` both ways: the same result or the same
    exception type (a cache dict is each call's own)."""
    outcomes = []
    for kernel in (KERNELS, PURE):
        own = [{} if isinstance(a, dict) else a for a in args]
        try:
            outcomes.append(("result", getattr(kernel, name)(*own)))
        except (ValueError, TypeError, RuntimeError) as exc:
            outcomes.append(("error", type(exc)))
    assert outcomes[0] == outcomes[1], name
    return outcomes[0][1]


def conversation(markers: bool = False) -> bytes:
    cap, _ = standard(markers, markers).capture(coalesced(2))
    return bytes(cap.to_bytes())


def as_pcapng(pcap: bytes, order: str) -> bytes:
    """The pcap's frames as Enhanced Packet Blocks of two interfaces."""

    def block(kind: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        size = struct.pack(order + "I", len(body) + 12)
        return struct.pack(order + "I", kind) + size + body + size

    out = b""
    pos, index = 24, 0
    while pos + 16 <= len(pcap):
        seconds, micros, caplen, _ = struct.unpack_from("<IIII", pcap, pos)
        frame = pcap[pos + 16 : pos + 16 + caplen]
        stamp = seconds * 10**6 + micros
        out += block(
            6, struct.pack(order + "IIIII", index % 2, stamp >> 32, stamp, caplen, caplen) + frame
        )
        pos += 16 + caplen
        index += 1
    return out


CAPTURE = conversation()
NG_LE, NG_BE = as_pcapng(CAPTURE, "<"), as_pcapng(CAPTURE, ">")
LINKTYPES = st.sampled_from([0, 1, 12, 14, 101, 113, 228, 229, 276, 189])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.integers(0, 4000),
    flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=6),
    cap=st.sampled_from([0, 60, 1 << 18]),
    linktype=LINKTYPES,
    big=st.booleans(),
)
def test_pcap_batches_are_the_same_from_any_offset(
    start: int, flips: list[tuple[int, int]], cap: int, linktype: int, big: bool
) -> None:
    data = bytearray(CAPTURE)
    for at, mask in flips:
        data[24 + at % (len(data) - 24)] ^= mask
    pos = start % (len(data) + 1)
    same("pcap_batch", bytes(data), pos, big, 1e-6, linktype, cap, 7, TcpPacket, {})


def test_every_record_boundary_of_a_pcap_gives_the_same_batch() -> None:
    pos = 24
    while pos < len(CAPTURE):
        items, _ = same("pcap_batch", CAPTURE, pos, False, 1e-6, 1, 1 << 18, 0, TcpPacket, {})
        assert items and isinstance(items[0], TcpPacket)
        pos += 16 + struct.unpack_from("<I", CAPTURE, pos + 8)[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.sampled_from(["<", ">"]),
    start=st.integers(0, 4000),
    flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=6),
    interfaces=st.lists(st.tuples(LINKTYPES, st.sampled_from([1e-6, 1e-9, 2.0**-20])), max_size=3),
    caps=st.tuples(st.sampled_from([0, 60, 1 << 18]), st.sampled_from([0, 100, 1 << 22])),
)
def test_pcapng_batches_are_the_same_from_any_offset(
    order: str,
    start: int,
    flips: list[tuple[int, int]],
    interfaces: list[tuple[int, float]],
    caps: tuple[int, int],
) -> None:
    data = bytearray(NG_LE if order == "<" else NG_BE)
    for at, mask in flips:
        data[at % len(data)] ^= mask
    pos = start % (len(data) + 1)
    same("pcapng_batch", bytes(data), pos, order == ">", interfaces, *caps, 3, TcpPacket, {})


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=120), linktype=LINKTYPES, prefix=st.integers(0, 3))
def test_any_frame_is_the_same_tcp_packet_or_none(frame: bytes, linktype: int, prefix: int) -> None:
    # Mostly real frames of the conversation, damaged, and any octets.
    pos = 24 + prefix * 100
    real = CAPTURE[pos + 16 : pos + 16 + struct.unpack_from("<I", CAPTURE, pos + 8)[0]]
    for data in (frame, real[: len(frame)] + frame[len(real) :], real):
        same("tcp_packet", 5, linktype, 1.5, data, TcpPacket, {})


def test_bad_arguments_are_refused_alike() -> None:
    class Loose(tuple):  # type: ignore[type-arg]
        pass

    for pos, frames in ((len(CAPTURE) + 1, 0), (-1, 0), (24, -1), (24, 2**63 - 1)):
        same("pcap_batch", CAPTURE, pos, False, 1e-6, 1, 1 << 18, frames, TcpPacket, {})
        same("pcapng_batch", NG_LE, pos, False, [], 1 << 18, 1 << 22, frames, TcpPacket, {})
    same("pcap_batch", CAPTURE, 24, False, 1e-6, 1, 1 << 18, 0, Loose, {})
    same("tcp_packet", 1, 1, 0.0, CAPTURE[40:100], Loose, {})
    same("pcapng_batch", NG_LE, 0, False, [(1, 1e-6, 3)], 1 << 18, 1 << 22, 0, TcpPacket, {})
    for at, phase, count in ((-1, 0, 1), (5, 0, 1), (0, 512, 1), (0, 0, -1)):
        same("fpdu_walk", bytearray(4), at, phase, True, False, True, True, MAX_ULPDU, count)
        same("fpdu_count", bytearray(4), at, phase, True, False, True, True, MAX_ULPDU, count)
        same("fpdu_view", bytearray(4), at, phase, True, False, True)
    same("fpdu_view", bytearray(64), 0, 506, True, False, False)  # a marker across the CRC


@pytest.mark.parametrize("phase", [512, 2**32, 2**32 + 1, 2**33 + 4, -1])
def test_a_phase_beyond_the_marker_interval_is_refused(phase: int) -> None:
    # The C kernels read the phase as an unsigned int, which took any int
    # modulo 2**32 (2**32 + 1 walked as phase 1); both refuse it now.
    stream = bytearray(b"".join(bytes(p) for p in FpduEncoder(markers=True).encode(b"x" * 40)))
    for kernel in (KERNELS, PURE):
        with pytest.raises(ValueError, match="out of range"):
            kernel.fpdu_view(stream, 0, phase, True, False, False)
        with pytest.raises(ValueError, match="out of range"):
            kernel.fpdu_walk(stream, 0, phase, True, False, False, False, MAX_ULPDU, 9)
        with pytest.raises(ValueError, match="out of range"):
            kernel.fpdu_count(stream, 0, phase, True, False, False, False, MAX_ULPDU, 9)


# -- FPDUs ---------------------------------------------------------------------------


def ulpdu(kind: int, size: int, number: int) -> bytes:
    """A Write, a Send, a Read Request, or raw octets."""
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    if kind == 0:
        tagged = TaggedHeader(stag=number, to=number << 20, last=True, rsvdulp=rdmap_control(0))
        return tagged.pack() + payload
    if kind == 1:
        send = UntaggedHeader(qn=0, msn=number, mo=0, last=True, rsvdulp=rdmap_control(3))
        return send.pack() + payload
    if kind == 2:
        read = UntaggedHeader(qn=1, msn=number, mo=0, last=True, rsvdulp=rdmap_control(1))
        return read.pack() + bytes(28)
    return payload


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1200)), min_size=1, max_size=5),
    flags=st.lists(st.booleans(), min_size=4, max_size=4),
    steps=st.integers(0, 200),
    flip=st.one_of(st.none(), st.integers(0, 1 << 20)),
    cut=st.integers(0, 1 << 20),
    max_ulpdu=st.sampled_from([MAX_ULPDU, 1000, 0]),
)
def test_views_walks_and_counts_are_the_same_from_every_offset(
    ulpdus: list[tuple[int, int]],
    flags: list[bool],
    steps: int,
    flip: int | None,
    cut: int,
    max_ulpdu: int,
) -> None:
    # Encoded FPDUs, perhaps one octet changed and cut short; every offset
    # of the buffer is a start (most are not FPDU boundaries: random
    # octets as an FPDU), at the phase the stream gives it.
    markers, either, ddp, crc = flags
    encoder = FpduEncoder(markers=markers, crc=crc, origin=0, position=4 * steps)
    data = bytearray()
    for i, (kind, size) in enumerate(ulpdus):
        data += b"".join(bytes(p) for p in encoder.encode(ulpdu(kind, size, i)))
    if flip is not None:
        data[flip % len(data)] ^= 1 << (flip % 8)
    chunk = bytearray(data[: len(data) - cut % (len(data) // 2 + 1)])
    for at in range(0, len(chunk) + 1):
        phase = (4 * steps + at) % 512
        if markers and phase % 4:
            continue  # off the 4-octet grid: fpdu_view refuses (tested above)
        same("fpdu_view", chunk, at, phase, markers, either, ddp)
        walk = (chunk, at, phase, markers, either, ddp, crc, max_ulpdu)
        same("fpdu_walk", *walk, 1 << 20)
        same("fpdu_count", *walk, 1 << 20)
        same("fpdu_count", bytes(chunk), *walk[1:], 2)


@settings(max_examples=500, deadline=None)
@given(head=st.binary(min_size=0, max_size=40), opcode=st.integers(0, 15), qn=st.integers(0, 3))
def test_any_ulpdu_is_described_the_same(head: bytes, opcode: int, qn: int) -> None:
    # Steer the opcode, versions and queue to plain headers about half the time.
    data = bytearray(head)
    if len(data) >= 10 and opcode % 2:
        data[0] = (data[0] & 0xC0) | 1
        data[1] = 0x40 | opcode
        data[6:10] = qn.to_bytes(4, "big")
    same("describe_ulpdu", bytes(data))


# -- JSON lines and records ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    numbers=st.lists(st.integers(-(2**70), 2**70), min_size=6, max_size=6),
    checked=st.sampled_from([True, False, 1]),
    direction=st.sampled_from(["initiator", 'q"', "\u00e9"]),
    ulp=st.dictionaries(
        st.sampled_from(["stag", "to", "opcode_name", "qn", "x"]),
        st.one_of(st.integers(), st.text(max_size=3), st.none(), st.booleans()),
        max_size=4,
    ),
)
def test_where_c_writes_a_line_it_is_the_pure_twins(
    numbers: list[int], checked: object, direction: str, ulp: dict[str, object]
) -> None:
    stream, seq, frame, wire, crc, expected = numbers
    marker = MarkerRecord(seq, 0, 4, 4)
    record = FpduRecord(
        stream, direction, seq, frame, wire, 8, (marker,), b"\0", crc % 2**32, expected % 2**32,
        checked, ulp,  # type: ignore[arg-type]
    )  # fmt: skip
    line = KERNELS.fpdu_json(record)
    assert line is None or line == PURE.fpdu_json(record)
    for other in (None, marker, "fpdu"):
        for kernel in (KERNELS, PURE):
            with pytest.raises(TypeError):
                kernel.fpdu_json(other)


def test_records_are_made_and_refused_alike() -> None:
    slots = tuple(getattr(MarkerRecord, f.name) for f in dataclasses.fields(MarkerRecord))

    class FromDict(dict):  # type: ignore[type-arg]
        __slots__ = ("a",)

    makers: list[Callable[..., Any]] = [KERNELS.new_record, PURE.new_record]
    made = [make(MarkerRecord, slots, 1, 2, 3, 4) for make in makers]
    assert made[0] == made[1] == MarkerRecord(1, 2, 3, 4)
    for cls, descriptors in (
        (int, slots),
        (TcpPacket, slots),
        (FromDict, slots),
        ("MarkerRecord", slots),
        (MarkerRecord, slots[:3]),
        (MarkerRecord, list(slots)),
        (MarkerRecord, (*slots[:3], "d")),
        (MarkerRecord, (*slots[:3], vars(FromDict)["a"])),
    ):
        messages = []
        for make in makers:
            with pytest.raises(TypeError) as caught:
                make(cls, descriptors, 1, 2, 3, 4)
            messages.append(str(caught.value))
        assert messages[0] == messages[1]
