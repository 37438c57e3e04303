"""The C loops of the analyzer (src/iwarp/_decode.c) against their
pure-Python twins (iwarp._decode): the same segments from every capture,
the same FPDU views from any octets, the same records from whole generated
captures.

Each test runs the same input twice, with the C kernels and with the pure
twin (twin_kernels.pure_python: the analyzer's modules call iwarp._decode,
as ``IWARP_NO_ACCEL=1`` has them do), and compares everything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analyze_traffic import coalesced, pcap_records, resegmented, standard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_analyzer import to_linktype, to_pcapng
from test_capture_scale import make_capture_module
from twin_kernels import KERNELS, needs_c, pure_python

from iwarp.analyze import mpa, records
from iwarp.analyze.analyzer import ConnectionReport, Options, analyze_stream
from iwarp.analyze.capture import CaptureError, CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.mpa import FpduView, Framing, inspect_fpdu
from iwarp.analyze.records import FpduRecord, MarkerRecord
from iwarp.analyze.render import summary_json
from iwarp.analyze.tcp import StreamWindow
from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.mpa.framing import FpduEncoder, fpdu_wire_size
from iwarp.mpa.wire import MARKER_INTERVAL, MARKER_SIZE, MAX_ULPDU
from iwarp.rdmap.wire import OPCODE_QUEUE, OPCODE_TAGGED, describe_ulpdu, rdmap_control

pytestmark = needs_c


def mpa_kernels() -> Any:
    return KERNELS


def segments(data: bytes) -> tuple[list[TcpPacket], CaptureStats, str | None]:
    stats = CaptureStats()
    out: list[TcpPacket] = []
    error = None
    try:
        out.extend(read_tcp_packets(io.BytesIO(data), stats))
    except CaptureError as exc:
        error = str(exc)
    return out, stats, error


def both(data: bytes) -> tuple[list[TcpPacket], CaptureStats, str | None]:
    accelerated = segments(data)
    with pure_python():
        pure = segments(data)
    assert accelerated == pure
    return accelerated


def classic(ipv6: bool = False) -> bytes:
    client, server = (
        (("::1", 50000), ("::1", 4000)) if ipv6 else (("10.1.2.3", 50000), ("192.168.0.9", 4000))
    )
    cap, _ = standard(True, False).capture(coalesced(2), client=client, server=server)
    return cap.to_bytes()


def big_endian(data: bytes) -> bytes:
    """The same pcap written in the other byte order, with nanosecond stamps."""
    _, major, minor, zone, sigfigs, snaplen, link = struct.unpack_from("<IHHiIII", data)
    out = bytearray(struct.pack(">IHHiIII", 0xA1B23C4D, major, minor, zone, sigfigs, snaplen, link))
    pos = 24
    while pos < len(data):
        seconds, micros, caplen, wire = struct.unpack_from("<IIII", data, pos)
        out += struct.pack(">IIII", seconds, micros * 1000 + 7, caplen, wire)
        out += data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
    return bytes(out)


def pcapng_mixed(order: str) -> bytes:
    """A pcapng section in either byte order with two interfaces (ns and
    binary 2**-20 s stamps) taking frames in turn, an EPB of an interface
    that does not exist, a Simple Packet Block and a custom block."""

    def block(kind: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        size = struct.pack(order + "I", len(body) + 12)
        return struct.pack(order + "I", kind) + size + body + size

    def option(code: int, value: bytes) -> bytes:
        return struct.pack(order + "HH", code, len(value)) + value + bytes(-len(value) % 4)

    end = struct.pack(order + "HH", 0, 0)
    out = block(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack(order + "HHI", 1, 0, 262144) + option(9, b"\x09") + end)
    out += block(1, struct.pack(order + "HHI", 1, 0, 262144) + option(9, b"\x94") + end)
    data = classic()
    pos, index = 24, 0
    while pos < len(data):
        seconds, micros, caplen, _ = struct.unpack_from("<IIII", data, pos)
        frame_data = data[pos + 16 : pos + 16 + caplen]
        stamp = (seconds * 10**6 + micros) * 1000 + index
        head = struct.pack(
            order + "IIIII", index % 2, stamp >> 32, stamp & 0xFFFFFFFF, caplen, caplen
        )
        out += block(6, head + frame_data)
        if index == 3:
            out += block(6, struct.pack(order + "IIIII", 5, 0, 0, caplen, caplen) + frame_data)
            out += block(3, struct.pack(order + "I", caplen) + frame_data)
            out += block(0x40000BAD, b"custom")
        pos += 16 + caplen
        index += 1
    return out


VARIANTS: dict[str, Callable[[], bytes]] = {
    "pcapng-mixed-le": lambda: pcapng_mixed("<"),
    "pcapng-mixed-be": lambda: pcapng_mixed(">"),
    "ethernet": classic,
    "big-endian-ns": lambda: big_endian(classic()),
    "ipv6": lambda: classic(ipv6=True),
    "pcapng": lambda: to_pcapng(classic()),
    "vlan": lambda: to_linktype(classic(), 1, lambda f: f[:12] + b"\x81\x00\x00\x05" + f[12:]),
    "qinq": lambda: to_linktype(
        classic(), 1, lambda f: f[:12] + b"\x88\xa8\x00\x01\x81\x00\x00\x05" + f[12:]
    ),
    "sll": lambda: to_linktype(
        classic(), 113, lambda f: struct.pack("!HHH8sH", 0, 772, 0, b"", 0x0800) + f[14:]
    ),
    "sll2": lambda: to_linktype(
        classic(), 276, lambda f: struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 0, b"") + f[14:]
    ),
    "raw": lambda: to_linktype(classic(), 101, lambda f: f[14:]),
    "raw-12": lambda: to_linktype(classic(), 12, lambda f: f[14:]),
    "ipv4-228": lambda: to_linktype(classic(), 228, lambda f: f[14:]),
    "null-le": lambda: to_linktype(classic(), 0, lambda f: struct.pack("<I", 2) + f[14:]),
    "null-be": lambda: to_linktype(classic(), 0, lambda f: struct.pack(">I", 2) + f[14:]),
    # IPv4 fragments (MF set on every frame; first fragments still decode).
    "fragments": lambda: to_linktype(
        classic(), 1, lambda f: f[:20] + bytes([f[20] | 0x20]) + f[21:]
    ),
    # A snaplen of 60 octets: payloads cut short of their IP length.
    "snaplen": lambda: to_linktype(classic(), 1, lambda f: f[:60]),
    # Ethernet padding past the IP length.
    "padded": lambda: to_linktype(classic(), 1, lambda f: f + bytes(8)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_link_layer_gives_the_same_segments(variant: str) -> None:
    packets, stats, error = both(VARIANTS[variant]())
    assert error is None and packets
    assert stats.frames == stats.tcp + stats.skipped


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    variant=st.sampled_from(sorted(VARIANTS)),
    cut=st.integers(0, 4000),
    junk=st.binary(max_size=300),
    flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=8),
)
def test_damaged_captures_give_the_same_segments(
    variant: str, cut: int, junk: bytes, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(VARIANTS[variant]())
    for at, mask in flips:  # damage anywhere past the file header
        data[28 + at % (len(data) - 28)] ^= mask
    both(bytes(data[: len(data) - cut]) + junk)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    octets=st.binary(min_size=0, max_size=3000),
    start=st.integers(0, 3000),
    origin=st.integers(-600, 600),
    markers=st.booleans(),
    crc=st.booleans(),
    either=st.booleans(),
    base=st.integers(0, 100),
)
def test_any_octets_give_the_same_fpdu_view(
    octets: bytes, start: int, origin: int, markers: bool, crc: bool, either: bool, base: int
) -> None:
    window = StreamWindow(0)
    window.append(base, octets, 1)
    framing = Framing(origin, markers, crc, either_fpduptr=either)
    at = base + start % (len(octets) + 8)
    accelerated = inspect_fpdu(window, at, framing)
    with pure_python():
        pure = inspect_fpdu(window, at, framing)
    assert accelerated == pure


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=64),
    size=st.integers(0, 3000),
    seed=st.integers(0, 1 << 32),
    origin=st.integers(-600, 600),
    markers=st.booleans(),
    crc=st.booleans(),
    either=st.booleans(),
    steps=st.integers(0, 300),
)
def test_whole_fpdus_of_any_octets_give_the_same_view(
    body: bytes,
    size: int,
    seed: int,
    origin: int,
    markers: bool,
    crc: bool,
    either: bool,
    steps: int,
) -> None:
    # Random octets almost never hold a ULPDU_Length that fits what was
    # captured: here one always does, so whole FPDUs with whatever markers,
    # PAD and CRC the octets hold are compared, not only where data stops.
    # FPDUs lie on the 4-octet grid from the origin (every FPDU's size is a
    # multiple of 4; markers point to it), as the analyzer only looks there.
    base = 4 * steps + origin % 4
    phase = (base - origin) % MARKER_INTERVAL
    lead = MARKER_SIZE if markers and phase == 0 else 0
    wire = fpdu_wire_size(size, phase, markers=markers)
    data = bytearray(random.Random(seed).randbytes(wire))
    head = body[:wire]
    data[: len(head)] = head  # the first octets (a marker, DDP/RDMAP headers) as drawn
    data[lead : lead + 2] = size.to_bytes(2, "big")
    window = StreamWindow(0)
    window.append(base, bytes(data), 1)
    framing = Framing(origin, markers, crc, either_fpduptr=either)
    accelerated = inspect_fpdu(window, base, framing)
    with pure_python():
        pure = inspect_fpdu(window, base, framing)
    assert isinstance(accelerated, FpduView) and accelerated.wire_length == wire
    assert accelerated == pure


@pytest.mark.parametrize("markers", [False, True])
def test_encoded_fpdus_give_the_same_views(markers: bool) -> None:
    encoder = FpduEncoder(markers=markers, crc=True, origin=0)
    stream = bytearray()
    starts = []
    for size in (0, 1, 2, 3, 14, 500, 505, 506, 507, 508, 509, 1021, 4096, 16384, 64768):
        starts.append(encoder.position)
        stream += encoder.encode_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    window = StreamWindow(0)
    window.append(0, bytes(stream), 1)
    framing = Framing(0, markers, True)
    for start in starts:
        view = inspect_fpdu(window, start, framing)
        assert isinstance(view, FpduView) and view.valid(framing)
        with pure_python():
            assert inspect_fpdu(window, start, framing) == view


# -- fpdu_walk: the clean FPDUs in a row --------------------------------------------


def expected_walk(
    chunk: bytes,
    at: int,
    phase: int,
    markers: bool,
    crc: bool,
    ddp: bool,
    either: bool = False,
    count: int = 1 << 20,
) -> tuple[list[tuple[Any, ...]], int, int]:
    """What fpdu_walk must return, from the pure-Python view of each FPDU:
    those the walk records with no error or note, in a row; where it
    stopped; and the wire size of the FPDU there if its length field is in
    the chunk but not its end."""
    window = StreamWindow(0)
    window.append(0, chunk, 1)
    framing = Framing(at - phase, markers, crc, either_fpduptr=either)
    taken: list[tuple[Any, ...]] = []
    pos = at
    count = min(count, 4096)  # the most one call takes (WALK_MAX in _decode.c)
    while len(taken) < count:
        with pure_python():
            view = inspect_fpdu(window, pos, framing)
        if not isinstance(view, FpduView) or len(view.ulpdu) > MAX_ULPDU:
            break
        if not view.valid(framing) or any(view.pad):
            break
        if any(p != e for _, _, p, e in view.markers):  # low FPDUPTR bits: a note
            break
        ulp = None
        if ddp:
            # A plain header C describes; any other ULPDU the analyzer describes.
            if mpa_kernels().describe_ulpdu(view.ulpdu) is None:
                break
            ulp = describe_ulpdu(view.ulpdu)
        view_fields = (view.wire_length, len(view.ulpdu), view.pad, view.crc, view.crc_expected)
        taken.append((pos, *view_fields, tuple(view.markers), ulp))
        pos += view.wire_length
    need = 0
    if len(taken) < count:
        with pure_python():
            view = inspect_fpdu(window, pos, framing)
        if isinstance(view, int) and view == len(chunk):  # not whole: the chunk ends first
            phase_at = (pos - framing.origin) % MARKER_INTERVAL
            lead = MARKER_SIZE if markers and phase_at == 0 else 0
            if pos + lead + 2 <= len(chunk):
                length = int.from_bytes(chunk[pos + lead : pos + lead + 2], "big")
                need = fpdu_wire_size(length, phase_at, markers=markers)
    return taken, pos, need


def ddp_ulpdu(kind: int, size: int, number: int) -> bytes:
    """A Write, a Send or a Read Request (which C leaves to Python), or raw octets."""
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


def assert_counted_as_walked(
    chunk: bytearray,
    at: int,
    phase: int,
    markers: bool,
    either: bool,
    ddp: bool,
    crc: bool,
    max_ulpdu: int = MAX_ULPDU,
) -> None:
    """fpdu_count takes the FPDUs fpdu_walk takes, stops where it stops and
    says what it needs, at any count (1, 2, ... and more than there are)."""
    flags = (markers, either, ddp, crc, max_ulpdu)
    taken, stop, need = mpa_kernels().fpdu_walk(chunk, at, phase, *flags, 4096)
    assert mpa_kernels().fpdu_count(chunk, at, phase, *flags, len(chunk)) == (
        len(taken),
        stop,
        need,
    )
    for count in range(min(len(taken), 3) + 1):
        walked = mpa_kernels().fpdu_walk(chunk, at, phase, *flags, count)
        counted = mpa_kernels().fpdu_count(chunk, at, phase, *flags, count)
        assert counted == (len(walked[0]), walked[1], walked[2])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ulpdus=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2000)), min_size=1, max_size=6),
    markers=st.booleans(),
    crc=st.booleans(),
    ddp=st.booleans(),
    steps=st.integers(0, 200),
    flip=st.one_of(st.none(), st.integers(0, 1 << 20)),
    cut=st.integers(0, 1 << 20),
    skip=st.integers(0, 5),
)
def test_the_walk_takes_the_clean_fpdus_in_a_row(
    ulpdus: list[tuple[int, int]],
    markers: bool,
    crc: bool,
    ddp: bool,
    steps: int,
    flip: int | None,
    cut: int,
    skip: int,
) -> None:
    # Encoded FPDUs (Writes, Sends, Read Requests, raw octets) from any
    # marker phase, one octet changed somewhere, the stream cut anywhere.
    origin = 0
    encoder = FpduEncoder(markers=markers, crc=crc, origin=origin, position=4 * steps)
    starts = []
    data = bytearray()
    for i, (kind, size) in enumerate(ulpdus):
        starts.append(encoder.position)
        data += b"".join(bytes(p) for p in encoder.encode(ddp_ulpdu(kind, size, i)))
    if flip is not None and data:
        data[flip % len(data)] ^= 1 << (flip % 8)
    chunk = bytearray(data[: len(data) - cut % (len(data) + 1)])
    first = min(starts[min(skip, len(starts) - 1)] - 4 * steps, len(chunk))
    phase = (starts[min(skip, len(starts) - 1)] - origin) % MARKER_INTERVAL
    walked = mpa_kernels().fpdu_walk(
        chunk, first, phase, markers, False, ddp, crc, MAX_ULPDU, 1 << 20
    )
    assert walked == expected_walk(bytes(chunk), first, phase, markers, crc, ddp)
    assert_counted_as_walked(chunk, first, phase, markers, False, ddp, crc)
    if flip is None and cut % (len(data) + 1) == 0 and not ddp:
        assert walked[1:] == (len(chunk), 0)  # every FPDU is whole and clean


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    octets=st.binary(max_size=3000),
    start=st.integers(0, 3000),
    phase=st.integers(0, 127),
    flags=st.lists(st.booleans(), min_size=4, max_size=4),
    length=st.integers(0, 3000),
)
def test_the_walk_of_any_octets_is_the_clean_views(
    octets: bytes, start: int, phase: int, flags: list[bool], length: int
) -> None:
    markers, either, ddp, crc = flags
    chunk = bytearray(octets)
    at = start % (len(chunk) + 1)
    phase *= 4  # FPDUs lie on the 4-octet grid from the marker origin
    lead = MARKER_SIZE if markers and phase == 0 else 0
    if at + lead + 2 <= len(chunk):  # a ULPDU_Length that may fit what follows
        chunk[at + lead : at + lead + 2] = length.to_bytes(2, "big")
    walked = mpa_kernels().fpdu_walk(chunk, at, phase, markers, either, ddp, crc, MAX_ULPDU, 99)
    assert walked == expected_walk(bytes(chunk), at, phase, markers, crc, ddp, either, 99)
    assert_counted_as_walked(chunk, at, phase, markers, either, ddp, crc)


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("either", [False, True])
def test_the_walk_stops_at_each_kind_of_unclean_fpdu(markers: bool, either: bool) -> None:
    encoder = FpduEncoder(markers=markers, crc=True, origin=0)
    sizes = (4096, 1000, MAX_ULPDU - 14, 20)  # the third FPDU as large as may be
    starts, data = [], bytearray()
    for i, size in enumerate(sizes):
        starts.append(encoder.position)
        data += b"".join(bytes(p) for p in encoder.encode(ddp_ulpdu(0, size, i)))
    walk = mpa_kernels().fpdu_walk
    taken, stop, need = walk(bytearray(data), 0, 0, markers, either, True, True, MAX_ULPDU, 100)
    assert [t[0] for t in taken] == starts and (stop, need) == (len(data), 0)
    assert all(isinstance(t[7], dict) and not t[7]["problems"] for t in taken)
    # Cut short: the walk says what the FPDU it stopped at needs.
    cut = walk(bytearray(data[: starts[3] + 5]), 0, 0, markers, either, True, True, MAX_ULPDU, 9)
    assert cut[1:] == (starts[3], len(data) - starts[3])
    # A count, a lower ULPDU limit, a bad CRC, a marker's Reserved field or
    # FPDUPTR's low bits: the walk stops right there, needing nothing.
    assert walk(bytearray(data), 0, 0, markers, either, True, True, MAX_ULPDU, 2)[1:] == (
        starts[2],
        0,
    )
    assert walk(bytearray(data), 0, 0, markers, either, True, True, 64767, 100)[1:] == (
        starts[2],
        0,
    )
    bad = bytearray(data)
    bad[starts[2] - 1] ^= 1  # the CRC of the second FPDU
    assert walk(bad, 0, 0, markers, either, True, True, MAX_ULPDU, 100)[1:] == (starts[1], 0)
    assert walk(bad, 0, 0, markers, either, True, False, MAX_ULPDU, 100)[1] == len(data)
    if markers:
        for offset, change in ((MARKER_INTERVAL, 0x80), (MARKER_INTERVAL + 3, 1)):
            bad = bytearray(data)
            bad[offset] ^= change  # the first FPDU's first inner marker
            assert walk(bad, 0, 0, True, either, False, False, MAX_ULPDU, 100)[1:] == (0, 0)
    # A described ULPDU with no plain header (a Read Request): left to Python.
    read = b"".join(
        bytes(p) for p in FpduEncoder(markers=markers, crc=True).encode(ddp_ulpdu(2, 0, 1))
    )
    assert walk(bytearray(read), 0, 0, markers, either, True, True, MAX_ULPDU, 9) == ([], 0, 0)
    assert len(walk(bytearray(read), 0, 0, markers, either, False, True, MAX_ULPDU, 9)[0]) == 1


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("either", [False, True])
def test_the_count_stops_where_the_walk_stops(markers: bool, either: bool) -> None:
    encoder = FpduEncoder(markers=markers, crc=True, origin=0)
    starts, data = [], bytearray()
    for i, kind in enumerate((0, 1, 0, 2, 1, 0)):  # a Read Request, fourth: left to Python
        starts.append(encoder.position)
        data += b"".join(bytes(p) for p in encoder.encode(ddp_ulpdu(kind, 600 + 700 * i, i)))
    cases: list[tuple[bytearray, int]] = [(bytearray(data), MAX_ULPDU), (bytearray(data), 2000)]
    cases += [(bytearray(data[:cut]), MAX_ULPDU) for cut in (3, starts[2] + 5, len(data) - 1)]
    for offset, change in ((starts[2] - 1, 1), (starts[1] + 6, 0x40), (MARKER_INTERVAL, 0x80)):
        bad = bytearray(data)
        bad[offset] ^= change  # a CRC, a DDP control field, a marker (or the payload)
        cases.append((bad, MAX_ULPDU))
    for chunk, max_ulpdu in cases:
        for ddp, crc in ((True, True), (False, True), (True, False), (False, False)):
            for first in starts[:2]:
                if first <= len(chunk):
                    phase = first % MARKER_INTERVAL
                    args = (chunk, first, phase, markers, either, ddp, crc, max_ulpdu)
                    assert_counted_as_walked(*args)


def test_the_walk_refuses_out_of_range_arguments() -> None:
    walk = mpa_kernels().fpdu_walk
    for at, phase, count in ((-1, 0, 1), (5, 0, 1), (0, 512, 1), (0, 0, -1)):
        with pytest.raises(ValueError, match="out of range"):
            walk(bytearray(4), at, phase, True, False, True, True, MAX_ULPDU, count)
        with pytest.raises(ValueError, match="out of range"):
            mpa_kernels().fpdu_count(
                bytearray(4), at, phase, True, False, True, True, MAX_ULPDU, count
            )
    assert mpa_kernels().fpdu_count(bytearray(64), 0, 506, True, False, False, False, 99, 9) == (
        0,
        0,
        0,
    )
    # Off the 4-octet grid a marker may fall across the CRC: fpdu_view
    # refuses that FPDU, the walk does not take it.
    with pytest.raises(RuntimeError):
        mpa_kernels().fpdu_view(bytearray(64), 0, 506, True, False, False)
    assert walk(bytearray(64), 0, 506, True, False, False, False, MAX_ULPDU, 9) == ([], 0, 0)


def decode_all(path: Path) -> list[str]:
    """Every record and report of a capture, as JSON lines."""
    lines = []
    with path.open("rb") as f:
        for out in analyze_stream(read_tcp_packets(f), Options()):
            item = summary_json(out) if isinstance(out, ConnectionReport) else out.to_json()
            lines.append(json.dumps(item, sort_keys=True))
    return lines


@pytest.mark.parametrize("mix", ["default", "marked"])
def test_generated_captures_decode_the_same_record_for_record(tmp_path: Path, mix: str) -> None:
    path = tmp_path / f"{mix}.pcap"
    manifest = make_capture_module().make_capture(str(path), 4 << 20, seed=3, concurrent=8, mix=mix)
    accelerated = decode_all(path)
    with pure_python():
        pure = decode_all(path)
    assert accelerated == pure
    # And it is what the generator sent.
    found = sum(1 for line in accelerated if '"type": "fpdu"' in line)
    assert found == sum(manifest["total"]["fpdus"].values())
    assert not any('"type": "error"' in line for line in accelerated)


@pytest.mark.parametrize("per", [1, 3])
def test_segments_cut_anywhere_decode_the_same(tmp_path: Path, per: int) -> None:
    sizes = [1, 7, 512, 3, 1460, 9000, 2]
    cap, _ = standard(True, True).capture(resegmented(sizes) if per == 1 else coalesced(per))
    path = tmp_path / "cut.pcap"
    path.write_bytes(cap.to_bytes())
    accelerated = decode_all(path)
    with pure_python():
        assert decode_all(path) == accelerated


@settings(max_examples=500, deadline=None)
@given(
    head=st.tuples(st.integers(0, 255), st.integers(0, 255)),
    rest=st.binary(max_size=40),
    qn=st.sampled_from([b"", b"\0\0\0\0", b"\0\0\0\1", b"\0\0\0\2"]),
)
def test_plain_headers_are_described_as_describe_ulpdu_does(
    head: tuple[int, int], rest: bytes, qn: bytes
) -> None:
    # Untagged headers put the queue number at octet 6: steer it to real queues.
    ulpdu = bytes(head) + rest[:4] + qn + rest[4:]
    described = mpa_kernels().describe_ulpdu(ulpdu)
    expected = describe_ulpdu(ulpdu)
    if described is None:
        # Left to Python: a problem, or an opcode with more than DDP fields.
        assert expected["problems"] or expected.get("opcode") not in mpa.PLAIN_OPCODES
    else:
        assert list(described.items()) == list(expected.items())
        assert expected["opcode"] in mpa.PLAIN_OPCODES


def test_every_plain_opcode_is_described_in_c() -> None:
    for opcode in mpa.PLAIN_OPCODES:
        tagged = OPCODE_TAGGED[opcode]
        header = (
            TaggedHeader(stag=5, to=1 << 40, last=True, rsvdulp=rdmap_control(opcode)).pack()
            if tagged
            else UntaggedHeader(
                qn=OPCODE_QUEUE[opcode], msn=9, mo=3, last=False, rsvdulp=rdmap_control(opcode)
            ).pack()
        )
        ulpdu = header + b"payload"
        described = mpa_kernels().describe_ulpdu(ulpdu)
        assert described is not None
        assert list(described.items()) == list(describe_ulpdu(ulpdu).items())


EDGES = st.sampled_from(
    [0, 1, 2, 15, 16, 19, 20, 31, 32, 511, 512, 2**31 - 1, 2**32 - 1, 2**63 - 1]
)
NUMBERS = st.one_of(st.integers(-(2**63), 2**63 - 1), EDGES, st.integers(-20, 3000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, 3),
    buffer=st.binary(max_size=600),
    numbers=st.lists(NUMBERS, min_size=4, max_size=4),
    flags=st.lists(st.booleans(), min_size=3, max_size=3),
    linktype=st.sampled_from([0, 1, 12, 101, 113, 228, 229, 276, 189, -1]),
)
def test_hostile_arguments_are_refused_or_read_within_bounds(
    which: int, buffer: bytes, numbers: list[int], flags: list[bool], linktype: int
) -> None:
    # Reading outside the buffer is what the sanitizer build reports; here,
    # only refusals (ValueError, OverflowError) or results come back.
    kernel: Any = KERNELS
    a, b, c, d = numbers
    cache: dict[int, str] = {}
    with contextlib.suppress(ValueError, OverflowError):
        if which == 0:
            items, pos = kernel.pcap_batch(
                buffer, a, flags[0], 1e-6, linktype, b, c, TcpPacket, cache
            )
            assert 0 <= pos <= len(buffer)
            assert all(isinstance(i, (TcpPacket, tuple)) for i in items)
        elif which == 1:
            interfaces = [(linktype, 1e-9), (1, 1e-6)]
            items, pos = kernel.pcapng_batch(
                buffer, a, flags[0], interfaces, b, d, c, TcpPacket, cache
            )
            assert 0 <= pos <= len(buffer)
        elif which == 2:
            kernel.tcp_packet(a, linktype, 0.0, buffer, TcpPacket, cache)
        else:
            taken = mpa_kernels().fpdu_view(bytearray(buffer), a, b, *flags)
            assert taken is None or taken[0] <= len(buffer)


def test_out_of_range_arguments_are_refused() -> None:
    kernel: Any = KERNELS
    data = classic()
    for pos, frames in ((len(data) + 1, 0), (-1, 0), (24, -1), (24, 2**63 - 1)):
        with pytest.raises(ValueError, match="out of range"):
            kernel.pcap_batch(data, pos, False, 1e-6, 1, 1 << 18, frames, TcpPacket, {})
        with pytest.raises(ValueError, match="out of range"):
            kernel.pcapng_batch(data, pos, False, [], 1 << 18, 1 << 22, frames, TcpPacket, {})

    class Loose(tuple):  # type: ignore[type-arg]
        pass  # has a __dict__: not laid out as a tuple

    with pytest.raises(TypeError, match="plain tuple subclass"):
        kernel.pcap_batch(data, 24, False, 1e-6, 1, 1 << 18, 0, Loose, {})
    for at, phase in ((-1, 0), (len(data) + 1, 0), (0, 512)):
        with pytest.raises(ValueError, match="out of range"):
            mpa_kernels().fpdu_view(bytearray(data), at, phase, True, False, True)
    # In range, a whole capture's records come back in one batch.
    items, pos = kernel.pcap_batch(data, 24, False, 1e-6, 1, 1 << 18, 0, TcpPacket, {})
    assert pos == len(data) and items == list(read_tcp_packets(io.BytesIO(data)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(40, 3000), min_size=1, max_size=6),
    markers=st.tuples(st.booleans(), st.booleans()),
    crc=st.booleans(),
    swaps=st.lists(st.integers(0, 1000), max_size=6),
    copies=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=4),
)
def test_any_segmentation_reordering_and_retransmission_decode_the_same(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    markers: tuple[bool, bool],
    crc: bool,
    swaps: list[int],
    copies: list[tuple[int, int]],
) -> None:
    cap, _ = standard(*markers, crc=crc).capture(resegmented(sizes))
    header, records = pcap_records(cap.to_bytes())
    # After the handshake and frames, before the FINs: neighbours swapped in
    # the capture (reordering) and segments captured again later
    # (retransmission), as test_analyzer does with a fixed seed.
    head, body, tail = records[:7], records[7:-3], records[-3:]
    for at in swaps:
        i = at % max(len(body) - 1, 1)
        if i + 1 < len(body):
            body[i], body[i + 1] = body[i + 1], body[i]
    for which, where in copies:
        if body:
            body.insert(where % (len(body) + 1), body[which % len(body)])
    path = tmp_path_factory.mktemp("any") / "any.pcap"
    path.write_bytes(
        header
        + b"".join(struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in head + body + tail)
    )
    accelerated = decode_all(path)
    with pure_python():
        assert decode_all(path) == accelerated
    assert any('"type": "fpdu"' in line for line in accelerated)
    assert not any('"type": "error"' in line for line in accelerated)


@pytest.mark.parametrize("markers", [(False, False), (True, True)])
def test_sequence_numbers_wrapping_inside_fpdus_decode_the_same(
    tmp_path: Path, markers: tuple[bool, bool]
) -> None:
    # Both directions cross 2**32 within their first FPDUs (the walk's
    # records and their markers count sequence numbers modulo 2**32).
    cap, sent = standard(*markers).capture(
        resegmented([1460, 700, 3000]), client_isn=2**32 - 1500, server_isn=2**32 - 900
    )
    path = tmp_path / "wrap.pcap"
    path.write_bytes(cap.to_bytes())
    accelerated = decode_all(path)
    with pure_python():
        assert decode_all(path) == accelerated
    seqs = [json.loads(line)["seq"] for line in accelerated if '"type": "fpdu"' in line]
    assert min(seqs) < 2**16 and max(seqs) > 2**32 - 2**16  # both sides of the wrap
    assert sorted(seqs) == sorted(seq for each in sent.values() for seq in each)


# -- records made in one call (new_record, records.record_maker) ---------------------

RECORD_VALUES = st.one_of(
    NUMBERS, st.text(max_size=8), st.binary(max_size=8), st.none(), st.booleans()
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(RECORD_VALUES, min_size=12, max_size=12),
    marker_values=st.lists(RECORD_VALUES, min_size=4, max_size=4),
)
def test_a_record_made_in_one_call_is_the_record_init_makes(
    values: list[Any], marker_values: list[Any]
) -> None:
    made_marker = records.record_maker(MarkerRecord)(*marker_values)
    marker = MarkerRecord(*marker_values)
    values[6] = (made_marker, made_marker)
    values[11] = {"opcode": values[11]}
    made = records.record_maker(FpduRecord)(*values)
    expected = FpduRecord(*values)
    assert type(made) is FpduRecord and type(made_marker) is MarkerRecord
    assert made == expected and repr(made) == repr(expected)
    assert made_marker == marker and hash(made_marker) == hash(marker)
    assert [getattr(made, f.name) for f in dataclasses.fields(FpduRecord)] == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seq = 1  # type: ignore[misc]


def test_record_maker_uses_the_kernel_for_frozen_slots_dataclasses_only() -> None:
    assert isinstance(records.record_maker(FpduRecord), functools.partial)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Later:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    for cls in (Later, Unslotted, Checked):
        assert records.record_maker(cls) is cls


def test_new_record_refuses_what_is_not_a_plain_class_of_slots() -> None:
    kernel: Any = KERNELS
    slots = tuple(getattr(MarkerRecord, f.name) for f in dataclasses.fields(MarkerRecord))

    class FromDict(dict):  # type: ignore[type-arg]
        __slots__ = ("a",)

    class Other:
        __slots__ = ("a", "b", "c", "d")

    plain = "a class of slots made by a class statement"
    for cls in (int, TcpPacket, FromDict, "MarkerRecord", None):
        with pytest.raises(TypeError, match=plain):
            kernel.new_record(cls, slots, 1, 2, 3, 4)
    for bad in (slots[:3], list(slots), None):
        with pytest.raises(TypeError, match="one descriptor per value"):
            kernel.new_record(MarkerRecord, bad, 1, 2, 3, 4)
    other = tuple(vars(Other)[name] for name in Other.__slots__)
    for bad in (other, (*slots[:3], "d"), (*slots[:3], MarkerRecord.to_json)):
        with pytest.raises(TypeError, match="member descriptors of cls"):
            kernel.new_record(MarkerRecord, bad, 1, 2, 3, 4)
    for args in ((), (MarkerRecord,)):
        with pytest.raises(TypeError, match="new_record"):
            kernel.new_record(*args)
    # Descriptors of a base class fit its subclasses; none at all is allowed.
    base = vars(records._Where)["stream"]
    made = kernel.new_record(FpduRecord, (base,), 7)
    assert made.stream == 7
    with pytest.raises(AttributeError):
        _ = made.seq  # a slot not set reads as missing, not as garbage
    assert type(kernel.new_record(Other, ())) is Other
