"""Wireshark's MPA dissector decodes what FpduEncoder sends."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import FrameFlags, MpaFrame, mulpdu
from tsharkutil import decode, needs_tshark

pytestmark = [pytest.mark.tshark, needs_tshark]

# A DDP untagged Send header (RFC 5041 §4.3: control T=0 L=1 DV=1; RDMAP Send)
# so that tshark's DDP dissector sees a plausible ULPDU.
SEND_HEADER = bytes.fromhex("414300000000000000000000000100000000")


@pytest.mark.parametrize("markers", [True, False])
@pytest.mark.parametrize("crc", [True, False])
def test_tshark_decodes_every_fpdu(tmp_path: Path, markers: bool, crc: bool) -> None:
    rng = random.Random(5044)
    flags = (FrameFlags.MARKERS if markers else FrameFlags(0)) | (
        FrameFlags.CRC if crc else FrameFlags(0)
    )
    capture = TcpCapture(client_isn=0xFFFFF000)  # sequence numbers wrap in the stream
    capture.send(Direction.C2S, MpaFrame(True, flags, 1).pack())
    capture.send(Direction.S2C, MpaFrame(False, flags, 1).pack())
    largest = mulpdu(1460, markers=markers)
    sizes = [0, 1, 2, 3, 200, 511, 512, 1000, largest - len(SEND_HEADER)]
    sizes += [rng.randrange(0, largest - len(SEND_HEADER)) for _ in range(20)]
    expected = []
    for direction in (Direction.C2S, Direction.S2C):
        start = capture.stream_start(direction) + 20  # after the 20-octet frame
        encoder = FpduEncoder(markers=markers, crc=crc, origin=start)
        for size in sizes:
            ulpdu = SEND_HEADER + rng.randbytes(size)
            offset = (encoder.position - start) % 2**32
            fpdu = encoder.encode_bytes(ulpdu)
            capture.send(direction, fpdu)  # one FPDU per TCP segment
            # Where the markers must be and what they must say (RFC 5044 §4.3).
            header = 4 if markers and offset % 512 == 0 else 0
            want = [
                (0, 0 if k < header else k - header)
                for k in range(0, len(fpdu), 4)
                if markers and (offset + k) % 512 == 0
            ]
            expected.append((len(ulpdu), want))
    capture.close()
    path = tmp_path / "fpdus.pcap"
    capture.write(str(path))

    result = decode(str(path))
    assert result.malformed == []
    assert [p.kind for p in result.pdus[:2]] == ["request", "reply"]
    fpdus = result.fpdus
    assert len(fpdus) == len(expected)
    for pdu, (ulpdu_length, want) in zip(fpdus, expected, strict=True):
        assert int(pdu.fields["iwarp_mpa.ulpdulength"]) == ulpdu_length
        assert pdu.crc_status == ("good" if crc else None)
        assert pdu.markers == want
    if markers:
        assert sum(len(p.markers) for p in fpdus) > len(sizes)
