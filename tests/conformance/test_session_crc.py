"""The tool's FPDU reader checks the CRC of every FPDU, markers or not (RFC 5044 §6):
a case must never take a bad CRC for a good one."""

from __future__ import annotations

import socket
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.conformance.link import Link
from iwarp.conformance.session import Session
from iwarp.conformance.terms import TargetRole
from iwarp.mpa.framing import FpduEncoder

#: ULPDU sizes: small ones, and ones that make markers fall inside an FPDU, right before its
#: ULPDU_Length field and right after its PAD.
SIZES = st.lists(st.integers(min_value=0, max_value=1400), min_size=1, max_size=6)


def _read_all(wire: bytes, count: int, *, markers: bool) -> list[tuple[bytes, bool]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        theirs = socket.create_connection(server.getsockname()[:2])
        ours, _ = server.accept()
    with ours, theirs:
        theirs.sendall(wire)
        theirs.shutdown(socket.SHUT_WR)
        session = Session(Link(ours), TargetRole.RESPONDER, deadline=time.monotonic() + 5.0)
        session.markers_receive = markers
        out = []
        for _ in range(count):
            got = session.next_fpdu()
            assert got is not None
            out.append((got.ulpdu, got.crc_ok))
        return out


@settings(max_examples=60, deadline=None)
@given(sizes=SIZES, markers=st.booleans(), data=st.data())
def test_a_wrong_crc_is_seen_with_or_without_markers(
    sizes: list[int], markers: bool, data: st.DataObject
) -> None:
    ulpdus = [bytes((i + n) & 0xFF for n in range(size)) for i, size in enumerate(sizes)]
    bad = data.draw(st.integers(min_value=-1, max_value=len(ulpdus) - 1), label="bad")
    encoder = FpduEncoder(markers=markers, crc=True)
    wire = bytearray()
    for i, ulpdu in enumerate(ulpdus):
        fpdu = bytearray(encoder.encode_bytes(ulpdu))
        if i == bad:
            fpdu[-1] ^= 0x01  # the CRC's last octet: never a marker
        wire += fpdu
    got = _read_all(bytes(wire), len(ulpdus), markers=markers)
    assert [u for u, _ in got] == ulpdus
    assert [ok for _, ok in got] == [i != bad for i in range(len(ulpdus))]


def test_a_marker_inside_the_fpdu_counts_in_its_crc() -> None:
    """Changing a marker's octets (not the content) is a CRC error."""
    encoder = FpduEncoder(markers=True, crc=True)
    ulpdu = bytes(range(256)) * 4  # 1024 octets: markers at 512 (and 0) fall inside
    wire = bytearray(encoder.encode_bytes(ulpdu))
    wire[512 + 1] ^= 0x01  # the marker at stream offset 512 (its reserved half)
    ((back, ok),) = _read_all(bytes(wire), 1, markers=True)
    assert back == ulpdu
    assert not ok
