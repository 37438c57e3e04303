"""FPDU framing (RFC 5044 §4-§6): vectors, properties, limits."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers import all_splits, chunked
from iwarp._crc32c import crc32c
from iwarp.errors import LocalProtocolError, MpaErrorCode
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU, fpdu_length, mulpdu, pad_length

# Seed 000 §5.2 Figure 5 / RFC 5044 Appendix A: the first FPDU of a stream,
# a Send of 24 zero octets (DDP header: control 0x4003, QN 0, MSN 1, MO 0).
FIG5_ULPDU = bytes.fromhex("400300000000000000000000000100000000") + bytes(24)
FIG5_FPDU = bytes.fromhex(
    "00000000002a400300000000000000000000000100000000" + "00" * 24 + "4c86b384"
)
# Figure 6: the second FPDU, at stream offset 0x1ec after a 492-octet first
# FPDU, MSN 2, with the marker at 0x200 (FPDUPTR 0x14).
FIG6_ULPDU = bytes.fromhex("400300000000000000000000000200000000") + bytes(24)
FIG6_FPDU = bytes.fromhex(
    "002a40030000000000000000000000020000000000000014" + "00" * 24 + "a19cd103"
)


def decode_all(decoder: FpduDecoder, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(bytes(u) for u in decoder.feed(chunk))
    return out


def reference_walk(stream: bytes, origin_offset: int) -> tuple[list[tuple[int, int]], set[int]]:
    """Markers ``(stream index, FPDUPTR)`` and FPDU length-field indexes.

    An independent walk: ``origin_offset`` is the offset from the marker
    origin of ``stream[0]``; every 512th octet from the origin is taken to
    be a marker, everything else is walked with ULPDU lengths only.
    """
    markers: list[tuple[int, int]] = []
    starts: set[int] = set()

    def at_marker(pos: int) -> bool:
        return (origin_offset + pos) % 512 == 0

    pos = 0
    while pos < len(stream):
        if at_marker(pos):
            markers.append((pos, struct.unpack_from(">H", stream, pos + 2)[0]))
            pos += 4
        starts.add(pos)
        (n,) = struct.unpack_from(">H", stream, pos)
        for _ in range(fpdu_length(n) // 4):
            if at_marker(pos) and pos not in starts:
                markers.append((pos, struct.unpack_from(">H", stream, pos + 2)[0]))
                pos += 4
            pos += 4
    return markers, starts


class TestSpecVectors:
    def test_figure5_encoded_byte_for_byte(self) -> None:
        assert FpduEncoder(markers=True, crc=True).encode_bytes(FIG5_ULPDU) == FIG5_FPDU

    def test_figure6_encoded_byte_for_byte(self) -> None:
        encoder = FpduEncoder(markers=True, crc=True)
        first = encoder.encode_bytes(bytes(482))
        assert len(first) == 0x1EC
        assert encoder.position == 0x1EC
        assert encoder.encode_bytes(FIG6_ULPDU) == FIG6_FPDU

    def test_figure6_wire_crc_is_lsb_first(self) -> None:
        assert FIG6_FPDU[-4:] == bytes.fromhex("a19cd103")
        assert crc32c(FIG6_FPDU[:-4]) == 0x03D19CA1

    def test_figures_decoded(self) -> None:
        encoder = FpduEncoder(markers=True, crc=True)
        stream = encoder.encode_bytes(bytes(482)) + FIG6_FPDU
        for chunks in all_splits(stream):
            decoder = FpduDecoder(markers=True, crc=True)
            assert decode_all(decoder, chunks) == [bytes(482), FIG6_ULPDU]
            assert decoder.error is None
        assert decode_all(FpduDecoder(markers=True), [FIG5_FPDU]) == [FIG5_ULPDU]

    def test_crc32c_check_value(self) -> None:
        assert crc32c(b"123456789") == 0xE3069283
        assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4


class TestEncoder:
    def test_crc_off_sends_zero_crc(self) -> None:
        fpdu = FpduEncoder(crc=False).encode_bytes(b"abc")
        assert fpdu == b"\x00\x03abc" + bytes(3) + bytes(4)  # 3 PAD octets, zero CRC

    @pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6])
    def test_padding_makes_multiple_of_four(self, n: int) -> None:
        fpdu = FpduEncoder().encode_bytes(bytes(range(n)))
        assert len(fpdu) % 4 == 0
        assert len(fpdu) == 2 + n + pad_length(n) + 4
        assert fpdu[2 + n : 2 + n + pad_length(n)] == bytes(pad_length(n))

    def test_refuses_ulpdu_above_limit(self) -> None:
        encoder = FpduEncoder(max_ulpdu=1000)
        with pytest.raises(LocalProtocolError, match="MULPDU"):
            encoder.encode(bytes(1001))
        assert encoder.position == 0  # nothing was framed
        with pytest.raises(ValueError, match="max_ulpdu"):
            FpduEncoder(max_ulpdu=MAX_ULPDU + 1)

    def test_largest_ulpdu_with_markers_fits_fpduptr(self) -> None:
        encoder = FpduEncoder(markers=True, position=508)
        stream = encoder.encode_bytes(bytes(MAX_ULPDU))
        assert FpduDecoder(markers=True, position=508).feed(stream)[0] == bytes(MAX_ULPDU)

    def test_zero_copy_output(self) -> None:
        payload = bytes(4000)
        pieces = FpduEncoder(crc=True).encode(payload)
        assert any(p is payload for p in pieces)

    def test_position_must_be_aligned(self) -> None:
        with pytest.raises(ValueError, match="multiples of 4"):
            FpduEncoder(markers=True, origin=10, position=12)
        with pytest.raises(ValueError, match="32-bit"):
            FpduEncoder(origin=2**32)

    def test_marker_between_fpdus_belongs_to_next(self) -> None:
        # First FPDU ends exactly at offset 512: the marker there is zero and
        # is covered by the CRC of the second FPDU.
        encoder = FpduEncoder(markers=True)
        first = encoder.encode_bytes(bytes(512 - 4 - 6 - 2))
        assert len(first) == 512
        second = encoder.encode_bytes(b"hi")
        assert second[:4] == bytes(4)
        assert second[-4:] == struct.pack("<I", crc32c(second[:-4]))

    @pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6])
    def test_tiny_fpdu_with_marker_before_crc(self, n: int) -> None:
        # At offset 508 the next marker falls 4 octets into the FPDU: after
        # the ULPDU and PAD of a tiny ULPDU, so PAD goes before the marker.
        encoder = FpduEncoder(markers=True, position=508)
        fpdu = encoder.encode_bytes(bytes([9]) * n)
        assert FpduDecoder(markers=True, position=508).feed(fpdu)[0] == bytes([9]) * n
        if n <= 2:
            assert fpdu[4:8] == struct.pack(">HH", 0, 4)

    def test_marker_right_before_crc(self) -> None:
        # Content ends 4 octets before a marker position: the marker falls
        # between PAD and CRC and belongs to this FPDU (RFC 5044 §6.1).
        encoder = FpduEncoder(markers=True, position=4)
        fpdu = encoder.encode_bytes(bytes(506))  # 4 + 2 + 506 = 512: marker, then CRC
        assert len(fpdu) == 2 + 506 + 4 + 4
        assert fpdu[508:512] == struct.pack(">HH", 0, 508)
        assert fpdu[-4:] == struct.pack("<I", crc32c(fpdu[:-4]))
        assert FpduDecoder(markers=True, position=4).feed(fpdu)[0] == bytes(506)


class TestMulpdu:
    @pytest.mark.parametrize(
        ("emss", "markers", "expected"),
        [
            (1460, True, 1460 - (6 + 4 * 3 + 0)),
            (1460, False, 1454),
            (1448, True, 1448 - (6 + 4 * 3 + 0)),
            (1449, False, 1449 - (6 + 1)),
            (9000, True, 9000 - (6 + 4 * 18 + 0)),
            (65483, False, MAX_ULPDU),
            (100, False, 128),
            (536, True, 536 - (6 + 8 + 0)),
        ],
    )
    def test_formulas_and_clamp(self, emss: int, markers: bool, expected: int) -> None:
        assert mulpdu(emss, markers=markers) == expected

    def test_fpdu_fits_emss(self) -> None:
        for emss in range(140, 4000, 7):
            for markers in (False, True):
                size = mulpdu(emss, markers=markers)
                for start in range(0, 512, 4):
                    encoder = FpduEncoder(markers=markers, position=start)
                    assert len(encoder.encode_bytes(bytes(size))) <= emss


ulpdus = st.lists(st.binary(min_size=0, max_size=1500), min_size=1, max_size=8)
positions = st.sampled_from([0, 4, 508, 1024, 2**32 - 4, 2**32 - 512, 2**32 - 1024]) | (
    st.integers(0, 2**30).map(lambda x: x * 4)
)


class TestRoundTrip:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        ulpdus=ulpdus,
        markers=st.booleans(),
        crc=st.booleans(),
        origin=st.integers(0, 2**32 - 1),
        offset=positions,
        cuts=st.lists(st.integers(1, 700), min_size=1, max_size=6),
    )
    def test_any_chunking_round_trips(
        self,
        ulpdus: list[bytes],
        markers: bool,
        crc: bool,
        origin: int,
        offset: int,
        cuts: list[int],
    ) -> None:
        position = (origin + offset) % 2**32
        encoder = FpduEncoder(markers=markers, crc=crc, origin=origin, position=position)
        stream = b"".join(encoder.encode_bytes(u) for u in ulpdus)
        assert encoder.position == (position + len(stream)) % 2**32
        decoder = FpduDecoder(markers=markers, crc=crc, origin=origin, position=position)
        assert decode_all(decoder, chunked(stream, cuts)) == ulpdus
        assert decoder.error is None
        assert decoder.buffered == 0
        assert decoder.position == encoder.position

    @settings(max_examples=60, deadline=None)
    @given(ulpdus=ulpdus, offset=st.integers(0, 127).map(lambda x: x * 4))
    def test_markers_where_an_independent_walk_expects_them(
        self, ulpdus: list[bytes], offset: int
    ) -> None:
        encoder = FpduEncoder(markers=True, origin=0, position=offset)
        stream = b"".join(encoder.encode_bytes(u) for u in ulpdus)
        markers, starts = reference_walk(stream, offset)
        # One marker at every 512th octet of the stream, no more, no fewer.
        assert [m for m, _ in markers] == [p for p in range(len(stream)) if (offset + p) % 512 == 0]
        for where, ptr in markers:
            if ptr == 0:  # between FPDUs: an FPDU header follows
                assert where + 4 in starts
            else:  # points back to the length field of the FPDU holding it
                assert where - ptr in starts
                assert max(s for s in starts if s < where) == where - ptr

    @settings(max_examples=60, deadline=None)
    @given(
        sizes=st.lists(st.integers(0, MAX_ULPDU), min_size=1, max_size=4),
        offset=st.integers(0, 127).map(lambda x: x * 4),
        crc=st.booleans(),
        cut=st.integers(1000, 70000),
    )
    def test_large_fpdus_with_many_markers(
        self, sizes: list[int], offset: int, crc: bool, cut: int
    ) -> None:
        # Large FPDUs take the planned (cached, strided) marker paths.
        ulpdus = [bytes([i % 251 + 1]) * n for i, n in enumerate(sizes)]
        encoder = FpduEncoder(markers=True, crc=crc, position=offset)
        stream = b"".join(encoder.encode_bytes(u) for u in ulpdus)
        markers, starts = reference_walk(stream, offset)
        for where, ptr in markers:
            assert ptr == 0 or max(s for s in starts if s < where) == where - ptr
        decoder = FpduDecoder(markers=True, crc=crc, position=offset)
        assert decode_all(decoder, chunked(stream, [cut])) == ulpdus
        assert decoder.error is None

    @pytest.mark.parametrize("victim", [0, 1, 5, 9, 20])
    def test_bad_marker_in_a_large_fpdu_is_located(self, victim: int) -> None:
        encoder = FpduEncoder(markers=True, crc=False)
        stream = bytearray(encoder.encode_bytes(bytes(12000)))
        where = 512 * (victim + 1)
        assert stream[where : where + 4] == struct.pack(">HH", 0, where - 4)
        stream[where + 2] ^= 0x01
        decoder = FpduDecoder(markers=True, crc=False)
        assert decoder.feed(bytes(stream)) == []
        assert decoder.error is not None
        assert decoder.error.mpa_code is MpaErrorCode.MARKER_MISMATCH
        assert decoder.error.stream_offset == where

    def test_every_split_of_a_marker_stream(self) -> None:
        encoder = FpduEncoder(markers=True, crc=True, position=256)
        messages = [bytes([i]) * size for i, size in enumerate((1, 300, 700, 0, 509))]
        stream = b"".join(encoder.encode_bytes(m) for m in messages)
        for chunks in all_splits(stream):
            decoder = FpduDecoder(markers=True, crc=True, position=256)
            assert decode_all(decoder, chunks) == messages


class TestErrors:
    @settings(max_examples=200, deadline=None)
    @given(
        sizes=st.lists(st.integers(0, 1200), min_size=3, max_size=3),
        markers=st.booleans(),
        victim=st.integers(0, 2),
        bit=st.integers(0, 10**6),
    )
    def test_flipped_bit_is_crc_error_and_never_delivered(
        self, sizes: list[int], markers: bool, victim: int, bit: int
    ) -> None:
        encoder = FpduEncoder(markers=markers, crc=True)
        fpdus = [encoder.encode_bytes(bytes([i + 1]) * n) for i, n in enumerate(sizes)]
        start = sum(len(f) for f in fpdus[:victim])
        lead = 4 if markers and start % 512 == 0 else 0
        length_field = range(start + lead, start + lead + 2)
        stream = bytearray(b"".join(fpdus))
        index = start + bit // 8 % len(fpdus[victim])
        assume(index not in length_field)  # covered below: a new length moves the CRC
        stream[index] ^= 1 << (bit % 8)
        decoder = FpduDecoder(markers=markers, crc=True)
        got = decode_all(decoder, [bytes(stream)])
        assert got == [bytes([i + 1]) * n for i, n in enumerate(sizes[:victim])]
        assert decoder.error is not None
        assert decoder.error.mpa_code is MpaErrorCode.CRC_MISMATCH
        assert decoder.feed(fpdus[-1]) == []  # nothing more, ever

    @pytest.mark.parametrize("bit", range(16))
    def test_flipped_length_bit_never_delivers(self, bit: int) -> None:
        encoder = FpduEncoder(crc=True)
        good = [encoder.encode_bytes(bytes([7]) * 100) for _ in range(800)]
        stream = bytearray(b"".join(good))
        stream[bit // 8] ^= 1 << (7 - bit % 8)
        decoder = FpduDecoder(crc=True)
        assert decode_all(decoder, [bytes(stream)]) == []
        assert decoder.error is not None
        assert decoder.error.mpa_code in (MpaErrorCode.CRC_MISMATCH, MpaErrorCode.MARKER_MISMATCH)

    def test_marker_disagreeing_with_length_is_code_3(self) -> None:
        encoder = FpduEncoder(markers=True, crc=False)
        stream = bytearray(encoder.encode_bytes(bytes(600)))
        assert stream[512:516] == struct.pack(">HH", 0, 508)
        stream[514:516] = struct.pack(">H", 100)
        decoder = FpduDecoder(markers=True, crc=False)
        assert decoder.feed(bytes(stream)) == []
        assert decoder.error is not None
        assert decoder.error.mpa_code is MpaErrorCode.MARKER_MISMATCH
        assert decoder.error.stream_offset == 512

    def test_crc_checked_before_markers(self) -> None:
        # RFC 5044 §8 code 3 applies "in the event that the CRC is valid".
        encoder = FpduEncoder(markers=True, crc=True)
        stream = bytearray(encoder.encode_bytes(bytes(600)))
        stream[514] ^= 0x40
        decoder = FpduDecoder(markers=True, crc=True)
        decoder.feed(bytes(stream))
        assert decoder.error is not None
        assert decoder.error.mpa_code is MpaErrorCode.CRC_MISMATCH

    def test_reserved_marker_bits_ignored(self) -> None:
        encoder = FpduEncoder(markers=True, crc=False)
        stream = bytearray(encoder.encode_bytes(bytes(600)))
        stream[512:514] = b"\xff\xff"  # Reserved
        stream[515] |= 0x03  # the two low FPDUPTR bits are treated as zero
        assert decode_all(FpduDecoder(markers=True, crc=False), [bytes(stream)]) == [bytes(600)]

    def test_length_above_limit_is_an_error_not_an_allocation(self) -> None:
        decoder = FpduDecoder(max_ulpdu=1000)
        assert decoder.feed(b"\x03\xe9" + bytes(10)) == []
        assert decoder.error is not None
        assert decoder.error.mpa_code is MpaErrorCode.MARKER_MISMATCH
        assert decoder.buffered == 0

    def test_buffer_holds_at_most_one_fpdu(self) -> None:
        encoder = FpduEncoder(markers=True)
        stream = b"".join(encoder.encode_bytes(bytes(1000)) for _ in range(50))
        decoder = FpduDecoder(markers=True)
        largest = 0
        count = 0
        for chunk in chunked(stream, [333, 1777, 5]):
            count += len(decoder.feed(chunk))
            largest = max(largest, decoder.buffered)
        assert count == 50
        assert largest < 1000 + 6 + 4 * 3

    @settings(max_examples=300, deadline=None)
    @given(
        data=st.binary(max_size=3000),
        markers=st.booleans(),
        crc=st.booleans(),
        cut=st.integers(1, 200),
    )
    def test_garbage_gives_only_protocol_errors(
        self, data: bytes, markers: bool, crc: bool, cut: int
    ) -> None:
        decoder = FpduDecoder(markers=markers, crc=crc, max_ulpdu=2000)
        for chunk in chunked(data, [cut]):
            for ulpdu in decoder.feed(chunk):
                assert len(ulpdu) <= 2000
        assert decoder.buffered <= 2000 + 6 + 4 * 5 + 4
