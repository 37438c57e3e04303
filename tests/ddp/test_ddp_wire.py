"""DDP header codecs (RFC 5041 §4): round trips and the bytes siw sends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.ddp.wire import (
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER_SIZE,
    TaggedHeader,
    UntaggedHeader,
    header_size,
    pack_control,
)

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)


@settings(max_examples=200)
@given(stag=u32, to=u64, last=st.booleans(), rsvdulp=u8, version=st.integers(0, 3))
def test_tagged_round_trip(*, stag: int, to: int, last: bool, rsvdulp: int, version: int) -> None:
    header = TaggedHeader(stag=stag, to=to, last=last, rsvdulp=rsvdulp, version=version)
    raw = header.pack()
    assert len(raw) == TAGGED_HEADER_SIZE == header_size(raw[0])
    assert TaggedHeader.unpack_from(b"xx" + raw, 2) == header


@settings(max_examples=200)
@given(qn=u32, msn=u32, mo=u32, last=st.booleans(), rsvdulp=u8, rsvdulp2=u32)
def test_untagged_round_trip(
    *, qn: int, msn: int, mo: int, last: bool, rsvdulp: int, rsvdulp2: int
) -> None:
    header = UntaggedHeader(qn=qn, msn=msn, mo=mo, last=last, rsvdulp=rsvdulp, rsvdulp2=rsvdulp2)
    raw = header.pack()
    assert len(raw) == UNTAGGED_HEADER_SIZE == header_size(raw[0])
    assert UntaggedHeader.unpack_from(raw) == header


def test_siw_send_header_bytes() -> None:
    # siw-vm evidence a_rpingsrv: rping's first Send, "41 43 ... QN 0 MSN 1 MO 0".
    header = UntaggedHeader(qn=0, msn=1, mo=0, last=True, rsvdulp=0x43)
    assert header.pack().hex() == "414300000000000000000000000100000000"


def test_siw_write_header_bytes() -> None:
    # siw-vm evidence p2p-write: the Write RTR "c1 40 00000001 TO 0".
    header = TaggedHeader(stag=1, to=0, last=True, rsvdulp=0x40)
    assert header.pack().hex() == "c1400000000100000000" + "00000000"


def test_reserved_control_bits_are_decoded_not_sent() -> None:
    header = TaggedHeader.unpack_from(bytes([0xFD, 0x40]) + bytes(12))
    assert header.reserved == 0xF and header.version == 1 and header.last
    assert header.pack()[0] == pack_control(tagged=True, last=True)
