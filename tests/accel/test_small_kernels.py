"""The small-message lane's kernels (``small_send``, ``small_receive``): the
C functions of ``_small.c`` and their pure-Python twin ``iwarp._small`` give
the same results, errors and memory for any input, and agree with the full
path's framer and decoder (FpduEncoder, FpduDecoder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp import _accel, _small
from iwarp._crc32c import crc32c
from iwarp.ddp.wire import LAST_FLAG, UNTAGGED_HEADER
from iwarp.errors import MpaError
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import CRC_FIELD, MARKER, ULPDU_LENGTH
from iwarp.rdma import small
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control

SEND = rdmap_control(RdmapOpcode.SEND, 1)
SEND_SE = rdmap_control(RdmapOpcode.SEND_WITH_SE, 1)

#: The kernels to check: the pure twin always, the C ones when built.
KERNELS: list[Any] = [_small]
if _accel.speedups is not None:
    KERNELS.append(_accel.speedups)


def test_the_lane_uses_the_chosen_kernels() -> None:
    """One choice at import: the C functions exactly when the accelerator runs."""
    assert (small.kernels is _small) is (not _accel.ACTIVE)


def _header(msn: int, rdmap: int = SEND, control: int = 1 | LAST_FLAG, qn: int = 0) -> bytes:
    return UNTAGGED_HEADER.pack(control, rdmap, 0, qn, msn, 0)


phases = st.integers(0, 127).map(lambda k: 4 * k)


@settings(max_examples=200, deadline=None)
@given(
    header=st.binary(max_size=30),
    payload=st.binary(max_size=1600),
    markers=st.booleans(),
    crc=st.booleans(),
    phase=phases,
)
def test_small_send_frames_what_the_encoder_frames(
    header: bytes, payload: bytes, markers: bool, crc: bool, phase: int
) -> None:
    """The octets of FpduEncoder.encode, and its marker phase after them,
    from any marker phase (the leading marker at phase 0, markers inside,
    one right before the CRC)."""
    encoder = FpduEncoder(markers=markers, crc=crc, position=phase)
    expected = encoder.encode_bytes(header + payload)
    for kernel in KERNELS:
        frame, after = kernel.small_send(header, memoryview(payload), markers, crc, phase)
        assert frame == expected
        assert after == (phase + len(frame)) % 512
        if markers:
            assert after == encoder.phase


@pytest.mark.parametrize("kernel", KERNELS)
def test_small_send_refuses_bad_arguments(kernel: Any) -> None:
    for phase in (-4, 2, 512):
        with pytest.raises((ValueError, OverflowError)):
            kernel.small_send(b"", b"", False, True, phase)
    with pytest.raises(ValueError, match="16-bit"):
        kernel.small_send(bytes(18), bytes(0x10000 - 18), False, True, 0)
    with pytest.raises(TypeError):
        kernel.small_send("text", b"", False, True, 0)


def _receive(kernel: Any, data: bytes, room: int, **kw: Any) -> tuple[Any, bytes]:
    head = bytearray(b"\xee" * room)
    args = {"markers": False, "crc": True, "phase": 0, "limit": 0xFFFF, "msn": 1} | kw
    record = kernel.small_receive(
        data,
        args["markers"],
        args["crc"],
        args["phase"],
        args["limit"],
        1,
        args["msn"],
        SEND,
        SEND_SE,
        head,
    )
    return record, bytes(head)


@settings(max_examples=200, deadline=None)
@given(
    payload=st.binary(max_size=1200),
    markers=st.booleans(),
    crc=st.booleans(),
    phase=phases,
    solicited=st.booleans(),
    room=st.integers(0, 1300),
    msn=st.integers(0, 3),
)
def test_small_receive_places_what_the_decoder_decodes(
    payload: bytes, markers: bool, crc: bool, phase: int, solicited: bool, room: int, msn: int
) -> None:
    """A one-segment Send's FPDU: taken when its MSN is the one expected and
    it fits, with the ULPDU the full path's decoder recovers, the marker
    phase after it, and the payload placed; otherwise declined with the
    buffer untouched."""
    rdmap = SEND_SE if solicited else SEND
    frame, _ = _small.small_send(_header(1, rdmap), payload, markers, crc, phase)
    decoder = FpduDecoder(markers=markers, crc=crc, position=phase)
    (ulpdu,) = decoder.feed(frame)
    assert bytes(ulpdu)[18:] == payload
    fits = len(payload) <= room and msn == 1
    for kernel in KERNELS:
        record, head = _receive(kernel, frame, room, markers=markers, crc=crc, phase=phase, msn=msn)
        if fits:
            assert record == (len(payload), rdmap, decoder.phase if markers else record[2])
            assert record[2] == (phase + len(frame)) % 512
            assert head == payload + b"\xee" * (room - len(payload))
        else:
            assert record is None and head == b"\xee" * room


def _full_path_accepts(data: bytes, markers: bool, crc: bool, phase: int) -> bool:
    decoder = FpduDecoder(markers=markers, crc=crc, position=phase)
    try:
        return len(decoder.feed(data)) == 1 and decoder.buffered == 0
    except MpaError:
        return False


@settings(max_examples=300, deadline=None)
@given(
    payload=st.binary(max_size=700),
    markers=st.booleans(),
    crc=st.booleans(),
    phase=phases,
    flips=st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 255)), max_size=3),
    cut=st.integers(-8, 8),
    limit=st.integers(0, 800),
)
def test_any_octets_give_the_same_answer_on_both_kernels(
    payload: bytes,
    markers: bool,
    crc: bool,
    phase: int,
    flips: list[tuple[int, int]],
    cut: int,
    limit: int,
) -> None:
    """A frame with octets changed, cut short or lengthened: C and pure give
    the same record and memory, and a frame they take is one the full
    path's decoder takes too (the lane never accepts what it would refuse)."""
    frame, _ = _small.small_send(_header(1), payload, markers, crc, phase)
    data = bytearray(frame)
    for at, xor in flips:
        if data:
            data[at % len(data)] ^= xor
    data = data[: len(data) + cut] if cut < 0 else data + bytes(cut)
    answers = [
        _receive(k, bytes(data), 720, markers=markers, crc=crc, phase=phase, limit=limit)
        for k in KERNELS
    ]
    assert all(a == answers[0] for a in answers)
    record, _ = answers[0]
    if record is not None:
        assert _full_path_accepts(bytes(data), markers, crc, phase)
        assert record[0] <= limit


@pytest.mark.parametrize("kernel", KERNELS)
def test_small_receive_declines_what_is_not_a_whole_plain_send(kernel: Any) -> None:
    send: Callable[[bytes], bytes] = lambda header: _small.small_send(  # noqa: E731
        header, b"data", False, True, 0
    )[0]
    good = send(_header(1))
    assert _receive(kernel, good, 8)[0] == (4, SEND, len(good))
    declined = [
        send(_header(2)),  # another MSN
        send(_header(1, RdmapOpcode.SEND_WITH_INVALIDATE | 0x40)),  # Invalidate: full path
        send(_header(1, control=1)),  # L clear: more segments follow
        send(_header(1, control=0x80 | 1 | LAST_FLAG)),  # tagged
        send(_header(1, control=LAST_FLAG)),  # DDP version 0
        send(_header(1, qn=1)),  # queue 1
        good[:-1],
        good + good,
        b"",
        _small.small_send(b"short", b"", False, True, 0)[0],  # shorter than a DDP header
        # 15-17 octets: as long on the wire as a header-only Send (24 octets),
        # still shorter than the 18-octet DDP/RDMAP header (a fuzz finding)
        *(_small.small_send(_header(1)[:n], b"", False, True, 0)[0] for n in (15, 16, 17)),
    ]
    for data in declined:
        assert _receive(kernel, data, 8) == (None, b"\xee" * 8)
    assert _receive(kernel, good, 3) == (None, b"\xee" * 3)  # too long for the buffer
    assert _receive(kernel, good, 8, limit=21)[0] is None  # over the receive limit
    with pytest.raises(TypeError):
        kernel.small_receive(good, False, True, 0, 0xFFFF, 1, 1, SEND, SEND_SE, b"read-only")
    with pytest.raises((ValueError, OverflowError)):
        kernel.small_receive(good, False, True, 3, 0xFFFF, 1, 1, SEND, SEND_SE, bytearray(8))


def _outcome(function: Callable[..., object], *args: Any) -> object:
    try:
        return ("ok", function(*args))
    except (ValueError, OverflowError, TypeError) as exc:
        return type(exc).__name__


#: Integers at the edges of the C types (the arguments are Py_ssize_t).
EDGES = (-(2**63) - 1, -(2**63), -4, -1, 0, 4, 21, 2**32 + 1, 2**63 - 1, 2**63, 2**64 + 4)


@pytest.mark.skipif(
    len(KERNELS) < 2, reason="no C kernels to compare (not built, or IWARP_NO_ACCEL)"
)
@pytest.mark.parametrize("value", EDGES)
def test_both_kernels_take_and_refuse_the_same_integers(value: int) -> None:
    """Each integer argument at the edges of the C types: the same result
    or the same refusal from both kernels (a negative limit takes nothing,
    a value past Py_ssize_t is an OverflowError, a phase past 511 a
    ValueError), with the same memory."""
    good = _small.small_send(_header(1), b"data", False, True, 0)[0]
    sends = [_outcome(k.small_send, b"", b"x", False, True, value) for k in KERNELS]
    assert sends[0] == sends[1]
    for at in range(6):  # phase, limit, version, msn, send, send_se
        answers = []
        for kernel in KERNELS:
            head = bytearray(8)
            args: list[Any] = [0, 0xFFFF, 1, 1, SEND, SEND_SE]
            args[at] = value
            answers.append((_outcome(kernel.small_receive, good, False, True, *args, head), head))
        assert answers[0] == answers[1], at


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("at", [0, 20, 24, 30])
def test_small_receive_refuses_a_head_over_its_data(kernel: Any, at: int) -> None:
    """A head that is a view of the received octets is refused (ValueError),
    before anything is written: the payload is gathered piece by piece past
    the markers, and would otherwise overwrite octets still to be read (the
    kernels' rule for an output over an input)."""
    frame, _ = _small.small_send(_header(1), bytes(range(256)) * 3, True, True, 256)
    data = bytearray(frame)
    with pytest.raises(ValueError, match="overlaps"):
        kernel.small_receive(
            data, True, True, 256, 0xFFFF, 1, 1, SEND, SEND_SE, memoryview(data)[at:]
        )
    assert data == frame


#: Arguments of the wrong kind for some position (True: a bool is its
#: integer where an integer is taken, as for the C conversion).
_WRONG_KINDS: list[Any] = ["text", None, 4.0, 600.0, object(), [1, 2], True]


@pytest.mark.skipif(
    len(KERNELS) < 2, reason="no C kernels to compare (not built, or IWARP_NO_ACCEL)"
)
@pytest.mark.parametrize(
    "wrong", _WRONG_KINDS, ids=["str", "None", "float", "float-large", "object", "list", "bool"]
)
def test_both_kernels_refuse_the_same_kinds_of_argument(wrong: Any) -> None:
    """An argument of the wrong kind in any position (a text for octets, a
    float or None for an integer, a read-only or missing buffer), or a
    wrong number of arguments: the same refusal (or, for the flags, which
    take any truth value, the same result) from both kernels, with the
    same memory."""
    good = _small.small_send(_header(1), b"data", False, True, 0)[0]
    sends: list[Any] = [_header(1), b"data", False, True, 0]
    for at in range(len(sends)):
        args = list(sends)
        args[at] = wrong
        outcomes = [_outcome(k.small_send, *args) for k in KERNELS]
        assert outcomes[0] == outcomes[1], at
    receives: list[Any] = [good, False, True, 0, 0xFFFF, 1, 1, SEND, SEND_SE, None]
    for at in range(len(receives)):
        answers = []
        for kernel in KERNELS:
            head = bytearray(8)
            args = list(receives)
            args[-1] = head
            args[at] = wrong
            answers.append((_outcome(kernel.small_receive, *args), bytes(head)))
        assert answers[0] == answers[1], at
    for kernel in KERNELS:
        with pytest.raises(TypeError):
            kernel.small_send(*sends[:-1])
        with pytest.raises(TypeError):
            kernel.small_receive(*receives[:-1])


def _marked_frame(ulpdu: bytes, phase: int, crc: bool) -> tuple[bytes, bool]:
    """``ulpdu``'s FPDU with markers from marker phase ``phase`` as a peer
    that wraps FPDUPTR to 16 bits frames it (RFC 5044 §4.3 has no room for
    more), and whether a marker had to wrap."""
    n = len(ulpdu)
    content = ULPDU_LENGTH.pack(n) + ulpdu + bytes(-(2 + n) % 4)
    lead = 4 if phase == 0 else 0
    at = 512 - ((phase + lead) % 512)
    out = bytearray(lead)
    start = count = 0
    wrapped = False
    while at <= len(content):
        out += content[start:at]
        ptr = at + 4 * count  # back to the ULPDU_Length field
        wrapped |= ptr > 0xFFFF
        out += MARKER.pack(0, ptr & 0xFFFF)
        start, at, count = at, at + 508, count + 1
    out += content[start:]
    out += CRC_FIELD.pack(crc32c(out) if crc else 0)
    return bytes(out), wrapped


@settings(max_examples=300, deadline=None)
@given(
    phase=phases,
    n=st.one_of(st.integers(18, 0xFFFF), st.integers(64_000, 0xFFFF)),
    crc=st.booleans(),
    limit=st.sampled_from([0xFFFF, 64768, 65020, 1 << 14]),
)
def test_marked_sends_up_to_the_limit_are_refused_as_the_decoder_refuses(
    phase: int, n: int, crc: bool, limit: int
) -> None:
    """Markers on, every marker phase, a one-segment Send of any ULPDU
    length up to the 16-bit limit: both twins take exactly the FPDUs the
    full path's decoder takes, and place the same payload. One whose
    markers would count back past 0xFFFF (a ULPDU of about 65,020 octets
    or more) is refused by the decoder with MPA error 3, and declined by
    both twins (never an exception, never placed modulo 2**16)."""
    payload = bytes(range(256)) * ((n - 18) // 256 + 1)
    ulpdu = _header(1) + payload[: n - 18]
    frame, wrapped = _marked_frame(ulpdu, phase, crc)
    decoder = FpduDecoder(markers=True, crc=crc, position=phase, max_ulpdu=limit)
    try:
        got = [bytes(u) for u in decoder.feed(frame)]
        error = decoder.error
    except MpaError as exc:
        got, error = [], exc
    accepted = got == [ulpdu] and error is None
    if wrapped:
        assert not accepted
        if n <= limit:
            assert error is not None and error.mpa_code == 3
    answers = [
        _receive(k, frame, 0x10000, markers=True, crc=crc, phase=phase, limit=limit)
        for k in KERNELS
    ]
    assert all(a == answers[0] for a in answers)
    record, head = answers[0]
    if accepted:
        assert record == (n - 18, SEND, (phase + len(frame)) % 512)
        assert head[: n - 18] == ulpdu[18:]
    else:
        assert record is None and head == b"\xee" * 0x10000


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("phase", [0, 4, 508])
def test_small_send_refuses_markers_past_16_bits(kernel: Any, phase: int) -> None:
    """A marked FPDU whose last marker would count back past 0xFFFF cannot
    be framed: ValueError from both twins (senders keep MULPDU below it)."""
    with pytest.raises(ValueError, match="FPDUPTR"):
        kernel.small_send(_header(1), bytes(0xFFFF - 18), True, True, phase)
    frame, _ = kernel.small_send(_header(1), bytes(64768 - 18), True, True, phase)
    assert len(frame) > 64768
