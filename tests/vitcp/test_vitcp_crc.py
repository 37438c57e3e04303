"""The §3.6 CRC: the fast implementation against a literal bit-by-bit one.

``reference_crc`` follows draft-dicecco-vitcp-01 §3.6 a)-e) one bit at a
time with Python integers as polynomials; it shares no code with
``iwarp.vitcp.crc``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.vitcp.crc import POLYNOMIAL, CrcOrder, crc, matches

#: §3.6 G(x), with its x^32 term, written out from the list of exponents.
G_EXPONENTS = (32, 31, 30, 28, 27, 25, 24, 22, 21, 20, 16, 10, 9, 6, 0)
G = sum(1 << e for e in G_EXPONENTS)


def _bits(data: bytes, msb_first: bool) -> Iterator[int]:
    order = range(7, -1, -1) if msb_first else range(8)
    for octet in data:
        for k in order:
            yield (octet >> k) & 1


def reference_crc(body: bytes, *, msb_first: bool = True) -> bytes:
    """The CRC field of a segment whose octets before the trailer are ``body``."""
    # a) the whole segment with zero in the CRC field.
    bits = list(_bits(body + bytes(4), msb_first))
    # b) complement the first 32 bits.
    for i in range(32):
        bits[i] ^= 1
    # c) the n bits are the coefficients of M(x), first bit highest.
    m = 0
    for bit in bits:
        m = (m << 1) | bit
    # d) remainder of M(x) / G(x).
    while m.bit_length() > 32:
        m ^= G << (m.bit_length() - 33)
    # e) complemented.
    r = m ^ 0xFFFFFFFF
    if msb_first:
        return r.to_bytes(4, "big")
    # Ethernet reading: the x^31 coefficient is sent first, octets LSB first.
    sequence = [(r >> (31 - i)) & 1 for i in range(32)]
    out = bytearray(4)
    for i, bit in enumerate(sequence):
        out[i // 8] |= bit << (i % 8)
    return bytes(out)


def test_polynomial_is_the_reversed_ethernet_polynomial() -> None:
    # §3.6: "In hex format with the x^32 term removed, this is 0xDB710641",
    # the Ethernet polynomial 0x104C11DB7 read right to left.
    assert G == (1 << 32) | POLYNOMIAL
    assert int(f"{0x104C11DB7:033b}"[::-1], 2) == G


@pytest.mark.parametrize("size", [4, 5, 7, 8, 23, 24, 28, 40, 164, 1000, 4099])
@pytest.mark.parametrize("order", list(CrcOrder))
def test_matches_reference_at_sizes(size: int, order: CrcOrder) -> None:
    data = bytes((i * 37 + size) & 0xFF for i in range(size))
    assert crc(data, order) == reference_crc(data, msb_first=order is CrcOrder.MSB_FIRST)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(min_size=4, max_size=300), cuts=st.lists(st.integers(0, 300), max_size=4))
def test_matches_reference_any_chunking(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    parts = [memoryview(data)[a:b] for a, b in itertools.pairwise(points)]
    parts = [p for p in parts if len(p)] or [memoryview(data)]
    for order in CrcOrder:
        expected = reference_crc(data, msb_first=order is CrcOrder.MSB_FIRST)
        assert crc(parts, order) == expected
        assert crc(bytearray(data), order) == expected


def test_known_values_from_reference() -> None:
    # Pinned from the bit-by-bit reference: guards against both drifting.
    assert reference_crc(b"123456789") == bytes.fromhex("3477c647")
    assert reference_crc(b"123456789", msb_first=False) == bytes.fromhex("1e667ee0")
    assert crc(b"123456789") == bytes.fromhex("3477c647")


def test_zero_field_is_part_of_the_division() -> None:
    # a): the segment includes the (zeroed) CRC field, so appending zeros to
    # the body changes the CRC: the field is not simply "the remainder".
    assert crc(b"\x00" * 8) != crc(b"\x00" * 12)


def test_detects_every_single_bit_error() -> None:
    data = bytearray(b"VI/TCP segment body with some payload")
    good = crc(data)
    for i in range(len(data) * 8):
        data[i // 8] ^= 1 << (i % 8)
        assert crc(data) != good
        data[i // 8] ^= 1 << (i % 8)


def test_matches_names_the_reading() -> None:
    data = b"x" * 30
    assert matches(data, crc(data)) is CrcOrder.MSB_FIRST
    assert matches(data, crc(data, CrcOrder.LSB_FIRST)) is CrcOrder.LSB_FIRST
    assert bytes(4) not in (crc(data), crc(data, CrcOrder.LSB_FIRST))
    assert matches(data, bytes(4)) is None


def test_too_short() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        crc(b"abc")
