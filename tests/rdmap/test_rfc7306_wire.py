"""RFC 7306 wire formats: octets built by hand from the RFC's figures, round trips."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import QueueNumber, UntaggedHeader
from iwarp.rdmap.wire import (
    ATOMIC_REQUEST_SIZE,
    ATOMIC_RESPONSE_SIZE,
    IMMEDIATE_DATA_SIZE,
    NO_MASK,
    OPCODE_QUEUE,
    OPCODE_TAGGED,
    AtomicOpcode,
    AtomicRequest,
    AtomicResponse,
    RdmapOpcode,
    describe_ulpdu,
    rdmap_control,
)

u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


def test_opcodes_queues_and_subcodes_from_figure_2_and_section_10() -> None:
    # Figure 2: 1000b..1011b, all untagged; queues 0, 0, 1, 3.
    assert [
        int(op)
        for op in (
            RdmapOpcode.IMMEDIATE_DATA,
            RdmapOpcode.IMMEDIATE_DATA_WITH_SE,
            RdmapOpcode.ATOMIC_REQUEST,
            RdmapOpcode.ATOMIC_RESPONSE,
        )
    ] == [0b1000, 0b1001, 0b1010, 0b1011]
    assert [OPCODE_QUEUE[op] for op in range(8, 12)] == [0, 0, 1, 3]
    assert not any(OPCODE_TAGGED[op] for op in range(8, 12))
    assert int(QueueNumber.ATOMIC_RESPONSE) == 3
    # §10.1: FetchAdd 0x0, (0x1 reserved), CmpSwap 0x2.
    assert (int(AtomicOpcode.FETCH_ADD), int(AtomicOpcode.CMP_SWAP)) == (0, 2)
    # RV 01b in the top bits, the opcode in the low nibble (§4.1 Figure 1).
    assert rdmap_control(RdmapOpcode.ATOMIC_REQUEST) == 0x4A
    assert rdmap_control(RdmapOpcode.ATOMIC_RESPONSE) == 0x4B


def test_atomic_request_octets_from_figure_4() -> None:
    # Figure 4, word by word: reserved(28)+AOpCode(4); Request Identifier;
    # Remote STag; Remote TO (2 words); Add/Swap Data; Add/Swap Mask;
    # Compare Data; Compare Mask (2 words each).
    raw = bytes.fromhex(
        "00000002"  # AOpCode 0010b: CmpSwap
        "0badcafe"  # Request Identifier
        "00012345"  # Remote STag
        "0000000000001008"  # Remote Tagged Offset
        "1111111111111111"  # Swap Data
        "00000000ffffffff"  # Swap Mask
        "2222222222222222"  # Compare Data
        "ffffffff00000000"  # Compare Mask
    )
    assert len(raw) == ATOMIC_REQUEST_SIZE == 52  # §4: "52 bytes long"
    req = AtomicRequest.unpack_from(raw)
    assert req == AtomicRequest(
        AtomicOpcode.CMP_SWAP,
        0x0BADCAFE,
        0x12345,
        0x1008,
        0x1111111111111111,
        0x00000000FFFFFFFF,
        0x2222222222222222,
        0xFFFFFFFF00000000,
    )
    assert req.pack() == raw
    built = AtomicRequest.cmp_swap(
        0x0BADCAFE,
        0x12345,
        0x1008,
        0x2222222222222222,
        0x1111111111111111,
        compare_mask=0xFFFFFFFF00000000,
        swap_mask=0x00000000FFFFFFFF,
    )
    assert built.pack() == raw


def test_fetch_add_sets_compare_fields_as_section_5_2_1_asks() -> None:
    raw = AtomicRequest.fetch_add(7, 0x100, 0x40, 5).pack()
    # Compare Data zero, Compare Mask all ones "on transmit".
    assert raw[:4] == bytes(4)
    assert raw[36:44] == bytes(8)
    assert raw[44:52] == b"\xff" * 8
    assert AtomicRequest.unpack_from(raw).compare_mask == NO_MASK


def test_reserved_bits_are_kept_apart_from_the_aopcode() -> None:
    raw = bytes.fromhex("fffffff0") + bytes(48)
    req = AtomicRequest.unpack_from(raw)
    assert req.aopcode == AtomicOpcode.FETCH_ADD
    assert req.reserved == 0x0FFFFFFF


def test_atomic_response_octets_from_figure_6() -> None:
    raw = bytes.fromhex("0badcafe0123456789abcdef")
    assert len(raw) == ATOMIC_RESPONSE_SIZE == 12
    resp = AtomicResponse.unpack_from(raw)
    assert resp == AtomicResponse(0x0BADCAFE, 0x0123456789ABCDEF)
    assert resp.pack() == raw


@settings(max_examples=200)
@given(code=st.integers(0, 15), rid=u32, stag=u32, to=u64, a=u64, b=u64, c=u64, d=u64)
def test_atomic_request_round_trip(
    *, code: int, rid: int, stag: int, to: int, a: int, b: int, c: int, d: int
) -> None:
    req = AtomicRequest(code, rid, stag, to, a, b, c, d)
    assert AtomicRequest.unpack_from(req.pack()) == req


@given(rid=u32, value=u64)
def test_atomic_response_round_trip(rid: int, value: int) -> None:
    resp = AtomicResponse(rid, value)
    assert AtomicResponse.unpack_from(resp.pack()) == resp


def _segment(opcode: int, qn: int, body: bytes, msn: int = 1) -> bytes:
    return UntaggedHeader(qn, msn, 0, rsvdulp=rdmap_control(opcode)).pack() + body


def test_describe_appendix_a_segments() -> None:
    # A.1: an Atomic Request on queue 1, misaligned TO reported.
    req = AtomicRequest.fetch_add(9, 0x200, 0x1004, 1)
    out = describe_ulpdu(_segment(RdmapOpcode.ATOMIC_REQUEST, 1, req.pack()))
    assert out["opcode_name"] == "ATOMIC_REQUEST"
    assert out["atomic_request"]["request_id"] == 9  # type: ignore[index]
    assert out["problems"] == ["atomic target TO 0x1004 is not 64-bit aligned"]
    # A.2: an Atomic Response on queue 3.
    resp = AtomicResponse(9, 41).pack()
    out = describe_ulpdu(_segment(RdmapOpcode.ATOMIC_RESPONSE, 3, resp))
    assert out["atomic_response"] == {"request_id": 9, "original": 41}
    assert out["problems"] == []
    # ... on the wrong queue.
    out = describe_ulpdu(_segment(RdmapOpcode.ATOMIC_RESPONSE, 1, resp))
    assert out["problems"] == ["opcode 11 on queue 1"]
    # A.3: Immediate Data, exactly 8 octets on queue 0.
    out = describe_ulpdu(_segment(RdmapOpcode.IMMEDIATE_DATA_WITH_SE, 0, b"ABCDEFGH"))
    assert out["immediate_data"] == b"ABCDEFGH".hex()
    assert out["problems"] == []
    assert IMMEDIATE_DATA_SIZE == 8
    out = describe_ulpdu(_segment(RdmapOpcode.IMMEDIATE_DATA, 0, b"ABC"))
    assert out["problems"] == ["Immediate Data of 3 octets, not 8"]
    # An unsupported AOpCode (0x1 is reserved).
    bad = AtomicRequest(1, 1, 1, 0, 0, 0).pack()
    out = describe_ulpdu(_segment(RdmapOpcode.ATOMIC_REQUEST, 1, bad))
    assert out["problems"] == ["unsupported atomic operation code 0x1"]
    out = describe_ulpdu(_segment(RdmapOpcode.ATOMIC_REQUEST, 1, bad[:20]))
    assert out["problems"] == ["truncated Atomic Request header"]
