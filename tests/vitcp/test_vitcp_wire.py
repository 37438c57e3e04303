"""VI/TCP wire formats (§3): layouts, round trips, the tolerant decoder."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.errors import RemoteProtocolError
from iwarp.vitcp.crc import CrcOrder, crc
from iwarp.vitcp.errors import MalformedSegmentError
from iwarp.vitcp.wire import (
    CE_FIXED_SIZE,
    HEADER_SIZE,
    RDMA_HEADER_SIZE,
    Attributes,
    CeHeader,
    OptionType,
    RdmaHeader,
    Reliability,
    SegmentFlags,
    SegmentHeader,
    SegmentType,
    ViErrorType,
    decode_segment,
    encode_segment,
)


def joined(parts: list[bytes | bytearray | memoryview]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_header_layout_matches_section_3_2() -> None:
    header = SegmentHeader(
        SegmentType.RDMA_WRITE,
        SegmentFlags.EOM | SegmentFlags.IDV,
        length=0x1234,
        data_offset=0x01020304,
        immediate_data=0xA1A2A3A4,
        message_number=0x123,
        message_ack=0x122,
        rx_descriptors_posted=0xBEEF,
        vi_error=ViErrorType.UTE | ViErrorType.MPE,
        is_error_code=0x7E,
    )
    raw = header.pack()
    assert raw == bytes.fromhex("01c1123401020304a1a2a3a40000012300000122beef7e05")
    assert SegmentHeader.unpack_from(raw) == header
    assert HEADER_SIZE == 24


def test_type_flags_bits() -> None:
    # §3.2: Eom bit 7, IdV bit 6, TrE bit 5, type in bits 4-0.
    raw = SegmentHeader(SegmentType.CONNECT_NO_MATCH, SegmentFlags.TRE).pack()
    assert raw[1] == 0x28


def test_rdma_header_layout() -> None:
    rdma = RdmaHeader(0x0102030405060708, 0x0A0B0C0D, 0x11223344)
    assert rdma.pack() == bytes.fromhex("01020304050607080a0b0c0d11223344")
    assert RdmaHeader.unpack_from(rdma.pack()) == rdma


def test_ce_header_layout_and_options() -> None:
    ce = CeHeader(
        Attributes.RELIABLE_RECEPTION | Attributes.RDMA_READ,
        mtu=9000,
        read_window=4,
        calling_discriminator=b"client",
        called_discriminator=b"server",
        crc=True,
        urgent_marker=True,
    )
    raw = ce.pack()
    assert raw[:2] == b"\x00\x14"  # RR | RDMA read enable
    assert raw[2:4] == b"\x00\x06"
    assert raw[4:8] == (9000).to_bytes(4, "big")
    assert raw[8:14] == b"client" and raw[14:72] == bytes(58)
    assert raw[72:74] == b"\x00\x04"
    assert raw[74:76] == b"\x00\x06"
    assert raw[76:82] == b"server"
    # Options: CRC (type 1, length 4), Urgent (2, 4), End (type 0 alone).
    assert raw[CE_FIXED_SIZE:] == bytes.fromhex("00010004000200040000")
    decoded = CeHeader.unpack_from(raw, 0, len(raw))
    assert decoded == ce
    assert decoded.reliability is Reliability.RECEPTION


def test_unknown_options_are_ignored_and_list_may_end_with_segment() -> None:
    fixed = CeHeader(Attributes.UNRELIABLE, mtu=1500).pack()[:CE_FIXED_SIZE]
    raw = fixed + bytes.fromhex("0009000a") + b"abcdef" + bytes.fromhex("00010004")
    decoded = CeHeader.unpack_from(raw, 0, len(raw))
    assert decoded.crc
    assert decoded.other_options == ((9, b"abcdef"),)
    assert not decoded.end_option


@pytest.mark.parametrize(
    "options",
    [
        "0001",  # truncated option header
        "00010002",  # length below the 4 octets of type + length
        "00090010aabb",  # runs past the segment
    ],
)
def test_bad_options(options: str) -> None:
    fixed = CeHeader(Attributes.UNRELIABLE, mtu=1500).pack()[:CE_FIXED_SIZE]
    raw = fixed + bytes.fromhex(options)
    with pytest.raises(MalformedSegmentError):
        CeHeader.unpack_from(raw, 0, len(raw))


def test_discriminator_length_above_64() -> None:
    raw = bytearray(CeHeader(Attributes.UNRELIABLE, mtu=1500).pack())
    raw[2:4] = struct.pack(">H", 65)
    with pytest.raises(MalformedSegmentError, match="discriminator"):
        CeHeader.unpack_from(raw, 0, len(raw))


def test_reliability_needs_exactly_one_bit() -> None:
    assert CeHeader(Attributes.NONE, mtu=1).reliability is None
    both = Attributes.UNRELIABLE | Attributes.RELIABLE_DELIVERY
    assert CeHeader(both, mtu=1).reliability is None


@pytest.mark.parametrize("trailer", [False, True])
@pytest.mark.parametrize("seg_type", list(SegmentType))
def test_every_type_round_trips(seg_type: SegmentType, trailer: bool) -> None:
    rdma = RdmaHeader(0x1000, 7, 5) if seg_type in (1, 2, 3) else None
    ce = None
    if seg_type in (SegmentType.CONNECT_REQUEST, SegmentType.CONNECT_ACCEPT):
        ce = CeHeader(Attributes.RELIABLE_DELIVERY, mtu=1000, crc=trailer)
    payload = b"hello" if seg_type in (0, 1, 3) else b""
    header = SegmentHeader(seg_type, SegmentFlags.EOM, message_number=9)
    parts = encode_segment(header, rdma=rdma, ce=ce, payload=payload, trailer=trailer)
    wire = joined(parts)
    # Known trailer, and detected one, give the same answer.
    for given_trailer in (trailer, None):
        seg = decode_segment(wire + b"\x01" * 4, trailer=given_trailer)
        assert seg is not None
        assert seg.header.type is seg_type
        assert seg.size == len(wire)
        assert bytes(seg.payload) == payload
        assert seg.rdma == rdma
        assert seg.ce == ce
        assert seg.crc_ok is (True if trailer else None)
    expected_length = len(wire) - (4 if trailer else 0)
    assert struct.unpack_from(">H", wire, 2)[0] == expected_length


def test_needs_more_data_at_every_cut() -> None:
    wire = joined(
        encode_segment(SegmentHeader(SegmentType.SEND), payload=b"payload!", trailer=True)
    )
    for cut in range(len(wire)):
        assert decode_segment(wire[:cut], trailer=True) is None
    assert decode_segment(wire, trailer=True) is not None


def test_bad_crc_is_reported_not_raised() -> None:
    wire = bytearray(
        joined(encode_segment(SegmentHeader(SegmentType.SEND), payload=b"abc", trailer=True))
    )
    wire[HEADER_SIZE] ^= 0x01
    seg = decode_segment(wire, trailer=True)
    assert seg is not None and seg.crc_ok is False


def test_lsb_first_peer_is_accepted() -> None:
    parts = encode_segment(
        SegmentHeader(SegmentType.SEND), payload=b"abc", trailer=True, crc_order=CrcOrder.LSB_FIRST
    )
    seg = decode_segment(joined(parts), trailer=True)
    assert seg is not None and seg.crc_order is CrcOrder.LSB_FIRST


def test_length_counting_the_trailer_is_detected_on_ce_segments() -> None:
    ce = CeHeader(Attributes.UNRELIABLE, mtu=1000, crc=True)
    wire = joined(
        encode_segment(
            SegmentHeader(SegmentType.CONNECT_REQUEST),
            ce=ce,
            trailer=True,
            length_includes_trailer=True,
        )
    )
    assert struct.unpack_from(">H", wire, 2)[0] == len(wire)
    seg = decode_segment(wire, length_includes_trailer=None)
    assert seg is not None
    assert seg.length_includes_trailer and seg.crc_ok and seg.ce == ce and seg.size == len(wire)
    # The other reading decodes the same segment from a peer that excludes it.
    wire2 = joined(encode_segment(SegmentHeader(SegmentType.CONNECT_REQUEST), ce=ce, trailer=True))
    seg2 = decode_segment(wire2, length_includes_trailer=None)
    assert seg2 is not None and not seg2.length_includes_trailer and seg2.crc_ok


@pytest.mark.parametrize("seg_type", [SegmentType.CONNECT_REJECT, SegmentType.CONNECT_NO_MATCH])
def test_reject_trailer_found_by_length(seg_type: SegmentType) -> None:
    body = SegmentHeader(seg_type, length=HEADER_SIZE + 4).pack()
    seg = decode_segment(body + crc(body))
    assert seg is not None and seg.crc_ok and seg.size == 28
    plain = SegmentHeader(seg_type).pack()
    seg = decode_segment(plain)
    assert seg is not None and seg.trailer is None and seg.size == 24


def test_data_segment_counting_the_trailer() -> None:
    parts = encode_segment(
        SegmentHeader(SegmentType.SEND), payload=b"xyz", trailer=True, length_includes_trailer=True
    )
    seg = decode_segment(joined(parts), trailer=True, length_includes_trailer=True)
    assert seg is not None and bytes(seg.payload) == b"xyz" and seg.crc_ok


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b.__setitem__(0, 2), "version"),
        (lambda b: b.__setitem__(1, 0x80 | 9), "unknown VI segment type"),
        (lambda b: b.__setitem__(1, 31), "unknown VI segment type"),
        (lambda b: b.__setitem__(slice(2, 4), b"\x00\x10"), "below its minimum"),
    ],
)
def test_malformed_headers(mutate: object, match: str) -> None:
    raw = bytearray(SegmentHeader(SegmentType.SEND, length=30).pack() + b"abcdef")
    mutate(raw)  # type: ignore[operator]
    with pytest.raises(MalformedSegmentError, match=match):
        decode_segment(raw, trailer=False)


@pytest.mark.parametrize("seg_type", [SegmentType.NOP, SegmentType.RDMA_READ_REQUEST])
def test_payload_in_types_without_one(seg_type: SegmentType) -> None:
    minimum = HEADER_SIZE + (RDMA_HEADER_SIZE if seg_type is SegmentType.RDMA_READ_REQUEST else 0)
    raw = SegmentHeader(seg_type, length=minimum + 7).pack() + bytes(minimum + 7)
    with pytest.raises(MalformedSegmentError):
        decode_segment(raw, trailer=False)


def test_encode_refuses_oversized_segment() -> None:
    with pytest.raises(ValueError, match="16-bit"):
        encode_segment(SegmentHeader(SegmentType.SEND), payload=bytes(65535))


headers = st.builds(
    SegmentHeader,
    st.sampled_from([SegmentType.SEND, SegmentType.RDMA_WRITE, SegmentType.RDMA_READ_RESPONSE]),
    st.sampled_from([SegmentFlags(0), SegmentFlags.EOM, SegmentFlags.EOM | SegmentFlags.IDV]),
    st.just(0),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**16 - 1),
    st.sampled_from(list(ViErrorType)),
    st.integers(0, 255),
)


@settings(max_examples=80, deadline=None)
@given(
    header=headers,
    payload=st.binary(max_size=200),
    trailer=st.booleans(),
    rdma=st.builds(
        RdmaHeader, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)
    ),
)
def test_hypothesis_round_trip(
    header: SegmentHeader, payload: bytes, trailer: bool, rdma: RdmaHeader
) -> None:
    has_rdma = header.type is not SegmentType.SEND
    wire = joined(
        encode_segment(header, rdma=rdma if has_rdma else None, payload=payload, trailer=trailer)
    )
    seg = decode_segment(wire, trailer=trailer)
    assert seg is not None
    assert bytes(seg.payload) == payload
    assert seg.rdma == (rdma if has_rdma else None)
    length = HEADER_SIZE + (RDMA_HEADER_SIZE if has_rdma else 0) + len(payload)
    assert seg.header == SegmentHeader(
        header.type,
        header.flags,
        length,
        header.data_offset,
        header.immediate_data,
        header.message_number,
        header.message_ack,
        header.rx_descriptors_posted,
        header.vi_error,
        header.is_error_code,
    )


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=400),
    trailer=st.sampled_from([None, True, False]),
    includes=st.sampled_from([None, True, False]),
)
def test_fuzz_arbitrary_bytes_give_only_protocol_errors(
    data: bytes, trailer: bool | None, includes: bool | None
) -> None:
    for candidate in (data, b"\x01" + data[1:2] + data[2:]):
        try:
            seg = decode_segment(candidate, trailer=trailer, length_includes_trailer=includes)
        except RemoteProtocolError:
            continue
        if seg is not None:
            assert seg.size <= len(candidate)


@settings(max_examples=200, deadline=None)
@given(options=st.binary(max_size=80), tail=st.binary(max_size=8))
def test_fuzz_ce_options(options: bytes, tail: bytes) -> None:
    fixed = CeHeader(Attributes.UNRELIABLE, mtu=1500).pack()[:CE_FIXED_SIZE]
    body = fixed + options
    wire = SegmentHeader(SegmentType.CONNECT_REQUEST, length=HEADER_SIZE + len(body)).pack()
    with contextlib.suppress(RemoteProtocolError):
        decode_segment(wire + body + tail, length_includes_trailer=None)


def test_option_type_values() -> None:
    assert [int(o) for o in OptionType] == [0, 1, 2]


def test_complete_buffer_decides_the_last_segment() -> None:
    wire = joined(encode_segment(SegmentHeader(SegmentType.SEND), payload=b"end"))
    assert decode_segment(wire) is None  # a trailer may still come
    seg = decode_segment(wire, complete=True)
    assert seg is not None and seg.trailer is None and bytes(seg.payload) == b"end"
    with_crc = joined(encode_segment(SegmentHeader(SegmentType.SEND), payload=b"end", trailer=True))
    seg = decode_segment(with_crc, complete=True)
    assert seg is not None and seg.crc_ok


def test_guessing_both_readings_on_data_segments() -> None:
    inside = joined(
        encode_segment(
            SegmentHeader(SegmentType.SEND),
            payload=b"abc",
            trailer=True,
            length_includes_trailer=True,
        )
    )
    seg = decode_segment(inside, length_includes_trailer=None)
    assert seg is not None and seg.length_includes_trailer and seg.crc_ok
    assert bytes(seg.payload) == b"abc" and seg.size == len(inside)


@settings(max_examples=100, deadline=None)
@given(
    attributes=st.integers(0, 0x7F),
    mtu=st.integers(0, 2**32 - 1),
    window=st.integers(0, 2**16 - 1),
    calling=st.binary(max_size=64),
    called=st.binary(max_size=64),
    use_crc=st.booleans(),
    urgent=st.booleans(),
    others=st.lists(st.tuples(st.integers(3, 0xFFFF), st.binary(max_size=12)), max_size=3),
    includes=st.booleans(),
)
def test_hypothesis_ce_round_trip(
    attributes: int,
    mtu: int,
    window: int,
    calling: bytes,
    called: bytes,
    use_crc: bool,
    urgent: bool,
    others: list[tuple[int, bytes]],
    includes: bool,
) -> None:
    ce = CeHeader(
        Attributes(attributes), mtu, window, calling, called, use_crc, urgent, tuple(others)
    )
    wire = joined(
        encode_segment(
            SegmentHeader(SegmentType.CONNECT_ACCEPT),
            ce=ce,
            trailer=use_crc,
            length_includes_trailer=includes,
        )
    )
    seg = decode_segment(wire, length_includes_trailer=None)
    assert seg is not None and seg.ce == ce and seg.size == len(wire)
    assert seg.crc_ok is (True if use_crc else None)
    if use_crc:
        assert seg.length_includes_trailer is includes
