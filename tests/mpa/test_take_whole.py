"""FpduDecoder.take_whole, the out-of-order receiver's one-FPDU check,
against the decoder's general path (feed_batch)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from iwarp.mpa.framing import FpduDecoder, FpduEncoder


def _pair(crc: bool, limit: int = 0xFFFF) -> tuple[FpduDecoder, FpduDecoder]:
    return FpduDecoder(crc=crc, max_ulpdu=limit), FpduDecoder(crc=crc, max_ulpdu=limit)


@given(st.binary(max_size=300), st.booleans(), st.binary(max_size=40))
def test_take_whole_gives_what_feed_batch_gives(ulpdu: bytes, crc: bool, before: bytes) -> None:
    encoder = FpduEncoder(crc=crc)
    frames = [encoder.encode_bytes(b) for b in (before, ulpdu)]
    whole, general = _pair(crc)
    for fpdu in frames:
        taken = whole.take_whole(memoryview(fpdu))
        assert taken is not None and taken.readonly
        assert bytes(taken) == b"".join(bytes(u) for u in general.feed_batch(fpdu))
        assert whole.position == general.position and whole.phase == general.phase


@given(st.binary(min_size=1, max_size=100), st.integers(min_value=0))
def test_take_whole_declines_and_changes_nothing(ulpdu: bytes, where: int) -> None:
    fpdu = FpduEncoder().encode_bytes(ulpdu)
    flipped = bytearray(fpdu)
    flipped[where % len(fpdu)] ^= 0x01
    cases = [
        fpdu[:-1],  # not whole
        fpdu + fpdu,  # two FPDUs
        bytes(flipped),  # a bad CRC or a wrong length
        b"",
    ]
    for data in cases:
        decoder = FpduDecoder()
        assert decoder.take_whole(memoryview(data)) is None
        assert decoder.position == 0 and decoder.error is None and decoder.buffered == 0
    over = FpduDecoder(max_ulpdu=len(ulpdu) - 1)
    assert over.take_whole(memoryview(fpdu)) is None
    held = FpduDecoder()
    held.feed_batch(fpdu[:3])
    assert held.take_whole(memoryview(fpdu)) is None and held.buffered == 3
    marked = FpduDecoder(markers=True)
    assert marked.take_whole(memoryview(fpdu)) is None
