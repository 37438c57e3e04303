"""`iwarp decode --json` lines: json_line(record) is json.dumps(record.to_json()), always."""

from __future__ import annotations

import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=400, deadline=None)
@given(fpdus)
def test_fpdu_line_is_json_dumps_of_to_json(record: FpduRecord) -> None:
    line = json_line(record)
    assert line == json.dumps(record.to_json())
    assert "\n" not in line


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
