"""`iwarp decode --json` lines: json_line(record) is json.dumps(record.to_json()), always.

The C accelerator writes an FPDU's line when its values are of the usual
kinds (src/iwarp/_decode.c fpdu_json); its pure twin (iwarp._decode
fpdu_json) writes every one. The tests here run with C when it is built and
compare it with the pure twin (twin_kernels.pure_python, as
``IWARP_NO_ACCEL=1`` has the analyzer do).
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twin_kernels import HAVE_C, KERNELS, PURE, needs_c, pure_python

from iwarp.analyze import records
from iwarp.analyze.analyzer import Options, analyze_stream
from iwarp.analyze.capture import read_tcp_packets
from iwarp.analyze.records import (
    _DDP_KEYS,
    _RDMAP_KEYS,
    ErrorRecord,
    FpduRecord,
    MarkerRecord,
    NoteRecord,
    json_line,
)


class Kind(enum.IntEnum):
    ONE = 1
    TWO = 2


ints = st.one_of(st.integers(0, 2**32 - 1), st.integers(-(2**70), 2**70))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.sampled_from(list(Kind)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# Mostly the keys describe_ulpdu writes, some others (left out of the line, as by to_json).
ulp_keys = st.sampled_from([*_DDP_KEYS, *_RDMAP_KEYS, "other", "ulpdu"])
markers = st.builds(
    MarkerRecord,
    seq=st.one_of(ints, st.sampled_from(list(Kind))),
    reserved=st.integers(0, 0xFFFF),
    fpduptr=st.integers(0, 0xFFFF),
    expected=st.one_of(st.integers(0, 0xFFFF), st.sampled_from(list(Kind))),
)
fpdus = st.builds(
    FpduRecord,
    stream=st.one_of(ints, st.sampled_from(list(Kind))),
    direction=st.one_of(st.sampled_from(["initiator", "responder"]), st.text(max_size=8)),
    seq=ints,
    frame=st.one_of(st.none(), ints, st.sampled_from(list(Kind))),
    wire_length=ints,
    ulpdu_length=st.one_of(ints, st.sampled_from(list(Kind))),
    markers=st.lists(markers, max_size=4).map(tuple),
    pad=st.binary(max_size=3),
    crc=st.integers(0, 2**32 - 1),
    crc_expected=st.integers(0, 2**32 - 1),
    crc_checked=st.booleans(),
    ulp=st.dictionaries(ulp_keys, values, max_size=12),
)


@settings(max_examples=100, deadline=None)
@given(
    record=st.one_of(
        st.builds(
            ErrorRecord,
            stream=ints,
            direction=st.text(max_size=8),
            seq=ints,
            frame=st.one_of(st.none(), ints),
            code=st.one_of(st.none(), st.integers(0, 5)),
            layer=st.text(max_size=6),
            message=st.text(max_size=30),
        ),
        st.builds(
            NoteRecord,
            stream=ints,
            direction=st.text(max_size=8),
            seq=ints,
            frame=st.one_of(st.none(), ints),
            message=st.text(max_size=30),
        ),
    )
)
def test_other_records_are_json_dumps_of_to_json(record: ErrorRecord | NoteRecord) -> None:
    assert json_line(record) == json.dumps(record.to_json())


def test_a_typical_fpdu_takes_the_direct_line() -> None:
    record = FpduRecord(
        stream=3,
        direction="initiator",
        seq=3779800579,
        frame=69,
        wire_length=16384,
        ulpdu_length=16376,
        markers=(MarkerRecord(512, 0, 508, 508), MarkerRecord(1024, 1, 3, 1020)),
        pad=b"\x00\x00",
        crc=0x0AA2CFDD,
        crc_expected=0x0AA2CFDD,
        crc_checked=True,
        ulp={
            "tagged": True,
            "last": False,
            "stag": 4099,
            "to": 65536,
            "opcode": 0,
            "opcode_name": "RDMA_WRITE",
            "ulpdu": b"ignored",
        },
    )
    line = json_line(record)
    assert line == json.dumps(record.to_json())
    assert json.loads(line)["markers"][1] == {
        "seq": 1024,
        "reserved": 1,
        "fpduptr": 3,
        "expected": 1020,
        "ok": False,
    }


# -- the C line (src/iwarp/_decode.c fpdu_json) ----------------------------------------


def c_line(record: FpduRecord) -> str | None:
    line: str | None = KERNELS.fpdu_json(record)
    return line


# One test for both paths: drawing these records is most of its time
# (nested values), so each record is drawn once and checked every way.
@settings(max_examples=400, deadline=None)
@given(fpdus)
def test_fpdu_line_is_json_dumps_of_to_json(record: FpduRecord) -> None:
    # Any record: the line is json.dumps of to_json, on one line.
    expected = json.dumps(record.to_json())
    assert json_line(record) == expected
    assert "\n" not in expected
    assert PURE.fpdu_json(record) == expected  # the pure twin writes every line
    if HAVE_C:
        # And the C line, when it writes one, is the pure-Python line.
        line = c_line(record)
        assert line is None or line == expected
        with pure_python():
            assert json_line(record) == expected


plain_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12).filter(
    lambda s: '"' not in s and "\\" not in s
)
usual_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(list(Kind)),
    plain_text,
)
usual_markers = st.builds(
    MarkerRecord,
    seq=st.integers(0, 2**63 - 1),
    reserved=st.integers(0, 0xFFFF),
    fpduptr=st.integers(0, 0xFFFF),
    expected=st.integers(0, 0xFFFF),
)
usual_fpdus = st.builds(
    FpduRecord,
    stream=st.integers(0, 2**63 - 1),
    direction=plain_text,
    seq=st.integers(0, 2**32 - 1),
    frame=st.one_of(st.none(), st.integers(0, 2**63 - 1)),
    wire_length=st.integers(0, 2**64 - 1),
    ulpdu_length=st.integers(-(2**63), 2**63 - 1),
    markers=st.lists(usual_markers, max_size=40).map(tuple),
    pad=st.binary(max_size=8),
    crc=st.integers(0, 2**32 - 1),
    crc_expected=st.integers(0, 2**32 - 1),
    crc_checked=st.booleans(),
    ulp=st.dictionaries(ulp_keys, usual_values, max_size=20),
)


@needs_c
@settings(max_examples=400, deadline=None)
@given(usual_fpdus)
def test_usual_records_take_the_c_line(record: FpduRecord) -> None:
    # Numbers within 64 bits, printable strings, bools, None: C writes them
    # all (markers past the stack buffer too), as json.dumps does.
    line = c_line(record)
    assert line is not None
    assert line == json.dumps(record.to_json())
    with pure_python():
        assert json_line(record) == line


@needs_c
@pytest.mark.parametrize(
    "change",
    [
        {"crc_checked": 1},
        {"crc": 2**32},
        {"seq": 2**64},
        {"stream": Kind.ONE},
        {"frame": True},
        {"direction": "caf\u00e9"},
        {"direction": 'a"b'},
        {"pad": bytearray(b"\1")},
        {"markers": [MarkerRecord(1, 0, 0, 0)]},
        {"markers": (MarkerRecord(-1, 0, 0, 0),)},
        {"ulp": {"stag": 2**64}},
        {"ulp": {"stag": -(2**63) - 1}},
        {"ulp": {"opcode_name": "tab\there"}},
        {"ulp": {"read_request": {"sink_stag": 1}}},
        {"ulp": {"to": 1.5}},
    ],
)
def test_unusual_values_are_left_to_python(change: dict[str, object]) -> None:
    fields: dict[str, Any] = {
        "stream": 1,
        "direction": "initiator",
        "seq": 5,
        "frame": 9,
        "wire_length": 24,
        "ulpdu_length": 18,
        "markers": (),
        "pad": b"",
        "crc": 1,
        "crc_expected": 1,
        "crc_checked": True,
        "ulp": {"tagged": False},
    }
    fields.update(change)
    record = FpduRecord(**fields)
    assert c_line(record) is None
    assert json_line(record) == json.dumps(record.to_json())


@needs_c
def test_the_c_line_refuses_other_objects() -> None:
    kernel: Any = KERNELS
    for other in (None, 1, "fpdu", MarkerRecord(1, 0, 0, 0), NoteRecord(1, "x", 1, None, "m")):
        with pytest.raises(TypeError):
            kernel.fpdu_json(other)
    with pytest.raises(TypeError):
        kernel.json_table(FpduRecord, MarkerRecord, list(_DDP_KEYS), _RDMAP_KEYS)
    with pytest.raises(ValueError):
        kernel.json_table(FpduRecord, MarkerRecord, ('a"b',), _RDMAP_KEYS)
    with pytest.raises(ValueError):
        kernel.json_table(FpduRecord, MarkerRecord, tuple(str(i) for i in range(33)), ())
    # A refused table leaves the one in use as it was.
    record = FpduRecord(1, "initiator", 5, 9, 24, 18, (), b"", 1, 1, True, {"stag": 7, "qn": 1})
    assert c_line(record) == json.dumps(record.to_json())


@pytest.mark.parametrize("mix", ["default", "marked"])
def test_generated_captures_give_the_same_lines_both_ways(tmp_path: Path, mix: str) -> None:
    from test_capture_scale import make_capture_module

    path = tmp_path / f"{mix}.pcap"
    make_capture_module().make_capture(str(path), 2 << 20, seed=5, concurrent=8, mix=mix)
    with path.open("rb") as f:
        outputs = [out for out in analyze_stream(read_tcp_packets(f), Options())]
    found = [out for out in outputs if isinstance(out, FpduRecord)]
    assert found
    lines = [json_line(record) for record in found]
    with pure_python():
        assert [json_line(record) for record in found] == lines
    assert lines == [json.dumps(record.to_json()) for record in found]
    if HAVE_C:
        # C writes every FPDU's line but those with a nested object (Read
        # Requests, Terminates, Atomics), which Python writes.
        nested = [r for r in found if any(isinstance(v, dict) for v in r.ulp.values())]
        taken = [r for r in found if c_line(r) is not None]
        assert len(taken) == len(found) - len(nested) > len(nested)


def test_the_record_maker_is_the_kernels_new_record_on_either_path() -> None:
    # The same records in one call each (tests/analyze/test_decode_kernels.py).
    for cls in (records.FpduRecord, records.MarkerRecord):
        maker: Any = records.record_maker(cls)
        assert maker.func is KERNELS.new_record and maker.args[0] is cls
