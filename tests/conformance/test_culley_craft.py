"""The FPDU draft-culley/9/1 sends: at every marker phase, one inner marker and only its
FPDUPTR wrong (iwarp's receiver refuses it with code 3, not 2; put right, it decodes)."""

from __future__ import annotations

import pytest

from iwarp._crc32c import crc32c
from iwarp.conformance.cases_culley import MESSAGE, wrong_marker
from iwarp.errors import MpaErrorCode
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import CRC_FIELD, MARKER, MARKER_INTERVAL

PHASES = range(0, MARKER_INTERVAL, 4)


@pytest.mark.parametrize("phase", PHASES)
def test_only_one_marker_is_wrong(phase: int) -> None:
    bad = wrong_marker(FpduEncoder(markers=True, crc=True, position=phase))
    lead = 4 if phase == 0 else 0
    # Markers sit at stream positions 512 apart: the leading one (phase 0) and one inside.
    inside = [i for i in range(lead, len(bad.fpdu)) if (phase + i) % MARKER_INTERVAL == 0]
    assert inside == [bad.at]
    assert bad.wrong not in (bad.right, bad.at) and bad.wrong % 4 == 0
    assert MARKER.unpack_from(bad.fpdu, bad.at) == (0, bad.wrong)
    assert CRC_FIELD.unpack_from(bad.fpdu, len(bad.fpdu) - 4)[0] == crc32c(bad.fpdu[:-4])
    # Both FPDUPTR readings accepted, the CRC checked: refused for the marker only.
    decoder = FpduDecoder(markers=True, crc=True, either_fpduptr=True, position=phase)
    assert decoder.feed(bad.fpdu) == []
    assert decoder.error is not None and decoder.error.mpa_code is MpaErrorCode.MARKER_MISMATCH
    # The marker put right (and the CRC with it): the message itself decodes.
    fixed = bytearray(bad.fpdu)
    MARKER.pack_into(fixed, bad.at, 0, bad.right)
    CRC_FIELD.pack_into(fixed, len(fixed) - 4, crc32c(bytes(fixed[:-4])))
    decoder = FpduDecoder(markers=True, crc=True, either_fpduptr=True, position=phase)
    (ulpdu,) = decoder.feed(bytes(fixed))
    assert decoder.error is None and bytes(ulpdu) == (MESSAGE * 10)[: bad.size]
