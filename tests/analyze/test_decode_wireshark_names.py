"""``iwarp decode`` speaks Wireshark's names too (issue 37): its iWARP and
TCP field names in ``-Y`` and ``-e``, a closing line after ``-c N`` that
counts what was read, and ``-V`` saying the CRC's byte order."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from analyze_traffic import standard

from iwarp.analyze.fields import ALIASES, FIELDS, field_named
from iwarp.cli import main

#: Wireshark 4's names for fields iwarp decodes (``tshark -G fields``).
WIRESHARK = {
    "iwarp_ddp.stag": "stag",
    "iwarp_ddp.tagged_offset": "to",
    "iwarp_ddp.tagged_flag": "tagged",
    "iwarp_ddp.last_flag": "last",
    "iwarp_ddp.qn": "qn",
    "iwarp_ddp.msn": "msn",
    "iwarp_ddp.mo": "mo",
    "iwarp_rdma.opcode": "opcode",
    "iwarp_rdma.sinkstag": "sink_stag",
    "iwarp_rdma.srcstag": "src_stag",
    "iwarp_rdma.rdmardsz": "read_size",
    "iwarp_rdma.term_errcode": "term_code",
    "iwarp_mpa.ulpdulength": "ulpdu_length",
    "iwarp_mpa.crc": "crc",
    "iwarp_mpa.rev": "rev",
    "tcp.stream": "stream",
    "tcp.srcport": "sport",
}


def test_every_alias_names_a_field() -> None:
    assert all(name in FIELDS for name in ALIASES.values())
    for alias, name in WIRESHARK.items():
        found = field_named(alias)
        assert found is not None and found.name == name, alias


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "c.pcap"
    cap, _ = standard(False, False).capture()
    cap.write(str(path))
    return path


def _decode(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["decode", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out


def test_wireshark_names_filter_and_print_as_ours_do(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = _decode(
        capsys,
        str(capture),
        "-Y",
        "stag == 0xabcd && stream == 0",
        "-T",
        "fields",
        "-e",
        "frame",
        "-e",
        "opcode",
        "-e",
        "stag",
        "-e",
        "crc",
    )
    theirs = _decode(
        capsys,
        str(capture),
        "-Y",
        "iwarp_ddp.stag == 0xabcd && tcp.stream == 0",
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "iwarp_rdma.opcode",
        "-e",
        "iwarp_ddp.stag",
        "-e",
        "iwarp_mpa.crc",
    )
    assert ours == theirs
    assert ours[0] == 0 and ours[1].count("\n") >= 1 and "0xabcd" in ours[1]


def test_the_closing_line_after_count_counts_what_was_read(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _decode(capsys, str(capture), "-c", "4")
    closing = next(line for line in out.splitlines() if line.startswith(f"{capture}:"))
    assert " 1 TCP connections, 1 with iWARP or VI/TCP, 2 FPDUs " in closing
    _, out = _decode(capsys, str(capture), "-c", "4", "--json")
    summary = json.loads(out.splitlines()[-1])
    assert (summary["connections"], summary["iwarp_connections"], summary["fpdus"]) == (1, 1, 2)


def test_verbose_says_the_crc_byte_order(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = _decode(capsys, str(capture), "-V", "-c", "3")
    (line, *_) = [x for x in out.splitlines() if "CRC 0x" in x]
    shown, swapped = re.findall(r"0x[0-9a-f]{8}", line)[:2]
    assert "big-endian" in line and "little-endian" in line
    assert bytes.fromhex(shown[2:]) == bytes.fromhex(swapped[2:])[::-1]
