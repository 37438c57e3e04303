"""The recording path of ``--pcap`` (the proxy writes every read of both legs through it):
the Internet checksum summed in parts, the frames it stamps, and the aligner that cuts
a stream into one FPDU per segment, at any segmentation."""

from __future__ import annotations

import struct
from ipaddress import ip_address
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from iwarp.analyze.pcapng import FpduAligner, PcapngWriter, TcpFlow
from iwarp.analyze.synth import Endpoint, _checksum, tcp_frame


def _reference(data: bytes) -> int:
    """RFC 1071 word by word: the one's complement of the end-around-carry sum."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@given(st.lists(st.binary(max_size=64), max_size=5), st.binary(max_size=65))
def test_checksum_in_parts_is_rfc1071s(evens: list[bytes], last: bytes) -> None:
    parts = [p + b"\0" if len(p) % 2 else p for p in evens] + [last]
    assert _checksum(*parts) == _reference(b"".join(parts))
    assert _checksum(*(memoryview(p) for p in parts)) == _reference(b"".join(parts))


@given(st.sampled_from([b"\0", b"\xff"]), st.integers(0, 40))
def test_checksum_of_all_zero_and_all_one_words(octet: bytes, words: int) -> None:
    data = octet * (2 * words)
    assert _checksum(data) == _reference(data)


@given(st.binary(max_size=3000), st.sampled_from(["192.0.2.1", "2001:db8::1"]))
def test_a_frames_tcp_checksum_verifies(payload: bytes, address: str) -> None:
    src = Endpoint(ip_address(address), 40000, b"\x02" * 6)
    dst = Endpoint(ip_address(address), 7000, b"\x02" * 6)
    frame = tcp_frame(src, dst, 1, 2, 0x18, memoryview(payload))
    v4 = src.address.version == 4
    segment = frame[14 + (20 if v4 else 40) :]
    length = (
        struct.pack("!BBH", 0, 6, len(segment)) if v4 else struct.pack("!IxxxB", len(segment), 6)
    )
    pseudo = src.address.packed + dst.address.packed + length
    assert _reference(pseudo + segment) == 0  # the stored checksum completes the sum
    assert segment[20:] == payload
    if v4:
        assert _reference(frame[14:34]) == 0


def _fpdu(ulpdu: int) -> bytes:
    return struct.pack("!H", ulpdu) + bytes(range(256)) * (ulpdu // 256) + bytes(ulpdu % 256)


@given(st.lists(st.integers(1, 2000), min_size=1, max_size=12), st.data())
def test_the_aligner_cuts_the_same_units_at_any_segmentation(
    sizes: list[int], data: st.DataObject
) -> None:
    request = b"MPA ID Req Frame" + bytes([0x40, 0, 0, 4]) + b"abcd"
    fpdus = [_fpdu(n) + bytes(-(n + 2) % 4) + b"CRC!" for n in sizes]
    stream = request + b"".join(fpdus)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=20)))
    aligner = FpduAligner()
    units: list[bytes] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        units += aligner.feed(memoryview(stream)[a:b])
    units += aligner.flush()
    assert units == [request, *fpdus]


def test_every_read_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    """Frames of one read are flushed together, once: the file holds all of them
    (the capture can be read while it grows) when the read's call returns."""
    request = b"MPA ID Req Frame" + bytes([0x40, 0, 0, 0])
    read = b"".join(_fpdu(n) + bytes(-(n + 2) % 4) + b"CRC!" for n in (10, 1000, 3))
    path = tmp_path / "flow.pcapng"
    with path.open("wb") as out:
        writer = PcapngWriter(out)
        flow = TcpFlow(writer, ("127.0.0.1", 40000), ("127.0.0.1", 7000), initiator=True)
        for data in (request, read[:7], read[7:]):
            flow.sent(data)
            assert path.stat().st_size == out.tell()
        assert writer.frames == 3 + 1 + 3  # handshake, the Request, three FPDUs
