"""The VI/TCP trailer CRC (draft-dicecco-vitcp-01 §3.6).

§3.6 defines the CRC as plain polynomial arithmetic: take the whole segment
with zero in the CRC field (a), complement its first 32 bits (b), read its n
bits as the coefficients of M(x) of degree n-1 (c), divide by

    G(x) = x^32+x^31+x^30+x^28+x^27+x^25+x^24+x^22+x^21+x^20+x^16+x^10+x^9+x^6+1

(0xDB710641 without the x^32 term: the Ethernet polynomial reversed, d) and
complement the remainder (e). The draft does not say in which order the bits
of an octet enter M(x), so two readings exist (:class:`CrcOrder`):

* ``MSB_FIRST`` -- the draft's own bit numbering (bit 7 of octet 0 is the
  first bit, all fields big-endian): M(x) starts at the top bit of the first
  octet, and the CRC field holds R(x) with the x^31 coefficient in its top
  bit. This is what a)-e) say read literally, and what we send by default.
* ``LSB_FIRST`` -- "exactly that used for the ethernet CRC": octets enter
  least-significant bit first, as Ethernet serialises them, and the field is
  laid out the way Ethernet sends its FCS (x^31 coefficient in bit 0 of the
  first octet).

Receivers accept either (see :func:`matches`).

Speed: G(x) is the reciprocal of the Ethernet polynomial E(x), and dividing
by a reciprocal polynomial is dividing the bit-reversed message by E(x). So
the segment is reversed octet-wise (C speed), run through ``zlib.crc32``
(which is E(x) with octets entering least-significant bit first), and the
result is moved back with one multiplication by a power of x^-1 modulo E(x)
that depends only on the segment length (cached). The tests check this
against a literal bit-by-bit division of a)-e).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from enum import Enum
from functools import lru_cache
from typing import Final

from iwarp._typing import Buffer

#: §3.6: the generator polynomial, x^32 term removed.
POLYNOMIAL: Final = 0xDB710641
#: The Ethernet CRC-32 polynomial E(x) with its x^32 term, G's reciprocal.
_ETHERNET: Final = 0x104C11DB7
#: x^-1 modulo E(x): x * ((E(x) - 1) / x) = E(x) - 1 = 1 (mod E).
_X_INVERSE: Final = (_ETHERNET ^ 1) >> 1
_MASK32: Final = 0xFFFFFFFF
#: Octet bit reversal, for the LSB_FIRST reading.
_REVERSE_BITS: Final = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


class CrcOrder(Enum):
    """The two readings of the order in which bits enter M(x) (§3.6)."""

    #: Bit 7 of each octet first; CRC field big-endian. Our default.
    MSB_FIRST = "msb"
    #: Bit 0 of each octet first, as Ethernet; CRC field as the Ethernet FCS.
    LSB_FIRST = "lsb"


def _reflect32(value: int) -> int:
    b = value.to_bytes(4, "little").translate(_REVERSE_BITS)
    return int.from_bytes(b, "big")


def _mulmod(a: int, b: int) -> int:
    """a(x) * b(x) modulo E(x), both of degree < 32."""
    result = 0
    while b:
        if b & 1:
            result ^= a
        b >>= 1
        a <<= 1
        if a >> 32:
            a ^= _ETHERNET
    return result


@lru_cache(maxsize=128)
def _x_inverse_power(k: int) -> int:
    """x^-k modulo E(x); segments mostly share a few lengths."""
    result, base = 1, _X_INVERSE
    while k:
        if k & 1:
            result = _mulmod(result, base)
        base = _mulmod(base, base)
        k >>= 1
    return result


def _reversed_octets(part: Buffer, lsb: bool) -> bytes:
    octets = part.tobytes()[::-1] if isinstance(part, memoryview) else bytes(part[::-1])
    return octets.translate(_REVERSE_BITS) if lsb else octets


def _remainder(parts: Sequence[Buffer], total: int, lsb: bool) -> int:
    """R(x) of the segment ``parts`` + zero CRC field, without step b)."""
    # The reversed segment is: zero CRC field, then the parts back to front.
    # The zero field leads, so it adds nothing to a remainder started at zero.
    register = _MASK32  # zlib's running value for a zero register
    for part in reversed(parts):
        register = zlib.crc32(_reversed_octets(part, lsb), register)
    # zlib gives reflect(M*(x) x^32 mod E); M*(x) = R*(x) x^(n-32) (mod E)
    # with R* the 32-bit reversal of R, so R* = M* x^32 x^-n.
    product = _reflect32(register ^ _MASK32)
    return _reflect32(_mulmod(product, _x_inverse_power(8 * (total + 4))))


@lru_cache(maxsize=128)
def _complement_term(total: int, lsb: bool) -> int:
    """What b) (the first 32 bits complemented) adds to R(x): the remainder
    is linear in M(x), so this is the remainder of 32 ones then zeros."""
    return _remainder((b"\xff\xff\xff\xff" + bytes(total - 4),), total, lsb)


def crc(parts: Sequence[Buffer] | Buffer, order: CrcOrder = CrcOrder.MSB_FIRST) -> bytes:
    """The four octets of the CRC field for a segment made of ``parts``.

    ``parts`` are the segment's octets without the trailer (header, RDMA or
    CE header, options, payload), in order, as one buffer or several, at
    least 4 octets in all (a VI segment header alone has 24); the zero CRC
    field of §3.6 a) is accounted for here.
    """
    if isinstance(parts, bytes | bytearray | memoryview):
        parts = (parts,)
    total = sum(len(p) for p in parts)
    if total < 4:
        raise ValueError("a VI segment has at least 4 octets before its trailer")
    lsb = order is CrcOrder.LSB_FIRST
    value = _remainder(parts, total, lsb) ^ _complement_term(total, lsb) ^ _MASK32
    if lsb:
        return _reflect32(value).to_bytes(4, "little")
    return value.to_bytes(4, "big")


def matches(parts: Sequence[Buffer] | Buffer, field: Buffer) -> CrcOrder | None:
    """The reading under which ``field`` is the CRC of ``parts``, or None.

    Our own reading is tried first, so the second costs nothing for peers
    that agree with us.
    """
    expected = bytes(field)
    for order in (CrcOrder.MSB_FIRST, CrcOrder.LSB_FIRST):
        if crc(parts, order) == expected:
            return order
    return None
