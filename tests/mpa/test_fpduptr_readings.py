"""FPDUPTR on receive (RFC 5044 §4.3; seeds 000 and 002).

* Its two low bits "MUST be treated as zero": the decoder, the connection,
  the out-of-order receiver and the analyzer accept them (the analyzer with
  a note, not an error).
* Seeds 000 and 002 count FPDUPTR back to "the beginning of the current
  FPDU": for an FPDU that starts with a marker that is 4 more than RFC
  5044's count to the ULPDU_Length field (512 instead of 508). Rev 0 and
  culley-02 receivers accept either; everything sends RFC 5044's reading.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from iwarp import _accel, _kernels
from iwarp._crc32c import crc32c
from iwarp.analyze.analyzer import analyze_file
from iwarp.analyze.records import ErrorRecord, NoteRecord
from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.errors import MpaErrorCode
from iwarp.mpa import framing
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import ConnectionFailed, UlpduReceived
from iwarp.mpa.framing import FpduDecoder, FpduEncoder, fpdu_wire_size
from iwarp.mpa.ooo import OutOfOrderReceiver, ReceiveFailed, UlpduDelivered, UlpduPassed
from iwarp.mpa.wire import CRC_FIELD, FrameFlags, MpaFrame

SIZES = [1000, 490, 1500, 700, 2000, 1200]  # several FPDUs start on a marker position
ULPDUS = [bytes([i]) * n for i, n in enumerate(SIZES)]


def stream() -> tuple[bytes, list[tuple[int, int]]]:
    """The framed ULPDUs (markers, CRC) and each FPDU's (start, wire size)."""
    encoder = FpduEncoder(markers=True, crc=True)
    out = b"".join(b"".join(bytes(p) for p in encoder.encode(u)) for u in ULPDUS)
    spans, at = [], 0
    for n in SIZES:
        wire = fpdu_wire_size(n, at % 512, markers=True)
        spans.append((at, wire))
        at += wire
    assert at == len(out)
    return out, spans


def rewrite(data: bytes, spans: list[tuple[int, int]], *, low_bits: bool, seed: bool) -> bytes:
    """Set the markers' two low FPDUPTR bits and/or switch FPDUs that start
    with a marker to the seeds' reading; CRCs recomputed (they cover markers)."""
    out = bytearray(data)
    changed = 0
    for start, wire in spans:
        lead = start % 512 == 0
        first = start + (-start % 512 or 512) if lead else start + (-start % 512)
        for marker in range(first, start + wire, 512):
            ptr = int.from_bytes(out[marker + 2 : marker + 4], "big")
            if seed and lead:
                ptr += 4
            if low_bits:
                ptr |= 3
            out[marker + 2 : marker + 4] = ptr.to_bytes(2, "big")
            changed += 1
        crc = crc32c(bytes(out[start : start + wire - 4]))
        out[start + wire - 4 : start + wire] = CRC_FIELD.pack(crc)
    assert changed >= 6
    return bytes(out)


def decode(data: bytes, *, either: bool, chunk: int = 700) -> tuple[list[bytes], object]:
    decoder = FpduDecoder(markers=True, crc=True, either_fpduptr=either)
    got: list[bytes] = []
    for i in range(0, len(data), chunk):
        got += [bytes(u) for u in decoder.feed(data[i : i + chunk])]
    return got, decoder.error


@pytest.fixture(params=["accelerated", "pure"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(framing, "kernels", _kernels)
    elif not _accel.ACTIVE:
        pytest.skip("the C accelerator is not active")
    return str(request.param)


def test_low_bits_are_masked_on_receive(path: str) -> None:
    data, spans = stream()
    for either in (False, True):
        got, error = decode(rewrite(data, spans, low_bits=True, seed=False), either=either)
        assert error is None and got == ULPDUS


def test_the_seed_reading_in_rev0_and_culley_modes_only(path: str) -> None:
    data, spans = stream()
    seeded = rewrite(data, spans, low_bits=False, seed=True)
    got, error = decode(seeded, either=True)
    assert error is None and got == ULPDUS
    got, error = decode(rewrite(data, spans, low_bits=True, seed=True), either=True)
    assert error is None and got == ULPDUS
    got, error = decode(seeded, either=False)  # Rev 1/2: RFC 5044 only
    assert getattr(error, "mpa_code", None) is MpaErrorCode.MARKER_MISMATCH
    # A pointer that fits neither reading is still a marker error.
    wrong = rewrite(data, spans, low_bits=False, seed=False)
    at = spans[1][0] + (-spans[1][0] % 512)
    broken = bytearray(wrong)
    broken[at + 3] ^= 0x10
    start, wire = spans[1]
    broken[start + wire - 4 : start + wire] = CRC_FIELD.pack(
        crc32c(bytes(broken[start : start + wire - 4]))
    )
    _, error = decode(bytes(broken), either=True)
    assert getattr(error, "mpa_code", None) is MpaErrorCode.MARKER_MISMATCH


@pytest.mark.parametrize("seed", [False, True])
def test_out_of_order_receiver(seed: bool) -> None:
    data, spans = stream()
    wire = rewrite(data, spans, low_bits=True, seed=seed)
    pieces = [(i, wire[i : i + 300]) for i in range(0, len(wire), 300)]
    random.Random(5).shuffle(pieces)
    receiver = OutOfOrderReceiver(start=1000, markers=True, crc=True, either_fpduptr=True)
    passed: dict[int, bytes] = {}
    delivered = 0
    for offset, piece in pieces:
        for event in receiver.receive(1000 + offset, piece):
            assert not isinstance(event, ReceiveFailed), event
            if isinstance(event, UlpduPassed):
                passed[event.offset] = bytes(event.ulpdu)
            elif isinstance(event, UlpduDelivered):
                delivered += 1
    assert delivered == len(ULPDUS)
    assert [passed[start] for start, _ in spans] == ULPDUS


@pytest.mark.parametrize("rev", [0, 1])
def test_decode_notes_low_bits_and_reads_seed_pointers_for_rev0(tmp_path: Path, rev: int) -> None:
    data, spans = stream()
    capture = TcpCapture()
    flags = FrameFlags.MARKERS | FrameFlags.CRC
    capture.send(Direction.C2S, MpaFrame(True, flags, rev).pack())
    capture.send(Direction.S2C, MpaFrame(False, flags, rev).pack())
    capture.send(Direction.C2S, rewrite(data, spans, low_bits=True, seed=rev == 0))
    capture.close()
    path = tmp_path / "fpduptr.pcap"
    capture.write(str(path))
    analysis = analyze_file(str(path))
    records = list(analysis.records())
    errors = [r for r in records if isinstance(r, ErrorRecord)]
    marker_errors = [e for e in errors if "marker" in e.message.lower()]
    assert marker_errors == []
    notes = [r for r in records if isinstance(r, NoteRecord) and "two low bits" in r.message]
    assert len(notes) >= 6


@pytest.mark.parametrize("rev", [0, 1])
def test_the_connection_reads_seed_pointers_only_in_rev0(rev: int) -> None:
    data, spans = stream()
    seeded = rewrite(data, spans, low_bits=True, seed=True)
    conn = MpaConnection(Role.INITIATOR, MpaConfig(revision=rev, markers=True))
    conn.data_to_send()
    reply = MpaFrame(False, FrameFlags.MARKERS | FrameFlags.CRC, rev).pack()
    events = conn.receive_data(reply + seeded, 0.0)
    params = conn.params
    assert params is not None and params.revision == rev and params.markers_receive
    got = [bytes(e.data) for e in events if isinstance(e, UlpduReceived)]
    failed = [e for e in events if isinstance(e, ConnectionFailed)]
    if rev == 0:
        assert got == ULPDUS and failed == []
    else:  # the first FPDU that starts on a marker position holds a seed pointer
        assert failed and failed[0].error.mpa_code is MpaErrorCode.MARKER_MISMATCH
