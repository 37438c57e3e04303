"""RDMAP codecs (RFC 5040 §4): round trips, siw's bytes, tolerant decoding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import TaggedHeader, UntaggedHeader
from iwarp.rdmap.wire import (
    READ_REQUEST_SIZE,
    HeaderControl,
    RdmapOpcode,
    ReadRequest,
    TerminateHeader,
    describe_ulpdu,
    rdmap_control,
    split_control,
)

u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


@given(version=st.integers(0, 3), opcode=st.integers(0, 15))
def test_control_round_trip(version: int, opcode: int) -> None:
    assert split_control(rdmap_control(opcode, version)) == (version, opcode)


def test_control_octets_match_siw() -> None:
    assert rdmap_control(RdmapOpcode.SEND) == 0x43
    assert rdmap_control(RdmapOpcode.RDMA_READ_RESPONSE) == 0x42
    assert rdmap_control(RdmapOpcode.TERMINATE) == 0x47


@settings(max_examples=200)
@given(sink_stag=u32, sink_to=u64, size=u32, src_stag=u32, src_to=u64)
def test_read_request_round_trip(
    *, sink_stag: int, sink_to: int, size: int, src_stag: int, src_to: int
) -> None:
    req = ReadRequest(sink_stag, sink_to, size, src_stag, src_to)
    raw = req.pack()
    assert len(raw) == READ_REQUEST_SIZE
    assert ReadRequest.unpack_from(raw) == req


def test_read_request_bytes_from_evidence() -> None:
    # a_rpingsrv: our Read Request to siw, after the 18-octet DDP header.
    raw = bytes.fromhex("0051510000000000000000000000002030f3d700000055a6815ab4c0")
    req = ReadRequest.unpack_from(raw)
    assert req == ReadRequest(0x00515100, 0, 32, 0x30F3D700, 0x55A6815AB4C0)
    assert req.pack() == raw
    assert req.advanced(8) == ReadRequest(0x00515100, 8, 24, 0x30F3D700, 0x55A6815AB4C8)


headers = st.one_of(
    st.none(),
    st.builds(lambda s, t: TaggedHeader(s, t, rsvdulp=0x40).pack(), u32, u64),
    st.builds(lambda q, m, o: UntaggedHeader(q, m, o, rsvdulp=0x43).pack(), u32, u32, u32),
)


@settings(max_examples=200)
@given(
    layer=st.integers(0, 15),
    etype=st.integers(0, 15),
    code=st.integers(0, 255),
    length=st.one_of(st.none(), st.integers(0, 0xFFFF)),
    ddp=headers,
    rdma=st.one_of(st.none(), st.binary(min_size=28, max_size=28)),
)
def test_terminate_round_trip(
    *,
    layer: int,
    etype: int,
    code: int,
    length: int | None,
    ddp: bytes | None,
    rdma: bytes | None,
) -> None:
    term = TerminateHeader(layer, etype, code, length, ddp, rdma)
    decoded = TerminateHeader.unpack_from(term.pack())
    assert (decoded.layer, decoded.etype, decoded.code) == (layer, etype, code)
    assert decoded.segment_length == length
    assert decoded.ddp_header == ddp
    assert decoded.rdma_header == rdma
    assert decoded.hdrct == term.flags


def test_terminate_md_r_bits() -> None:
    term = TerminateHeader(0, 1, 0, 46, UntaggedHeader(1, 1, rsvdulp=0x41).pack(), bytes(28))
    raw = term.pack()
    assert raw[:4] == bytes([0x01, 0x00, 0xE0, 0x00])
    assert len(raw) == 4 + 2 + 18 + 28
    assert term.flags == HeaderControl.SEGMENT_LENGTH | HeaderControl.DDP_HEADER | (
        HeaderControl.RDMA_HEADER
    )


def test_siw_terminate_nibble_swap() -> None:
    # a_rpingsrv_p2p-nomatch: siw logs "layer 2, type 0, code 7", wire "02 07 00 00".
    term = TerminateHeader.unpack_from(bytes.fromhex("02070000"))
    assert (term.layer, term.etype, term.code) == (0, 2, 7)
    assert term.siw_view() == (2, 0, 7)


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_describe_never_raises(data: bytes) -> None:
    out = describe_ulpdu(data)
    assert out["length"] == len(data)
    assert isinstance(out["problems"], list)


def test_describe_rejects_nothing_but_reports() -> None:
    ulpdu = bytes.fromhex("c1ff0000000100000000000000") + b"\0"
    out = describe_ulpdu(ulpdu)
    assert out["opcode_name"] == "reserved(0xf)"
    assert out["problems"]
