"""Display filters (``iwarp decode -Y``): grammar, meaning, faults."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from analyze_traffic import standard
from hypothesis import given, settings
from hypothesis import strategies as st

from clitools import run_in_process
from iwarp.analyze.fields import FIELDS, Row
from iwarp.analyze.filter import MAX_DEPTH, FilterError, compile_filter

SEND: Row = {
    "frame": 8,
    "time": 0.0007,
    "stream": 0,
    "direction": "initiator",
    "seq": 4122,
    "type": "fpdu",
    "src": "10.0.0.1",
    "dst": "10.0.0.2",
    "sport": 50000,
    "dport": 4000,
    "addr": ("10.0.0.1", "10.0.0.2"),
    "port": (50000, 4000),
    "wire_length": 124,
    "ulpdu_length": 118,
    "crc_ok": True,
    "crc": 0x1234ABCD,
    "tagged": False,
    "last": True,
    "qn": 0,
    "msn": 7,
    "mo": 0,
    "payload_length": 100,
    "opcode": 3,
    "opcode_name": "SEND",
}
WRITE: Row = {
    **{k: v for k, v in SEND.items() if k not in ("qn", "msn", "mo")},
    "direction": "responder",
    "src": "fe80::1",
    "dst": "10.0.0.1",
    "addr": ("fe80::1", "10.0.0.1"),
    "tagged": True,
    "last": False,
    "stag": 0x100A,
    "to": 0x10000,
    "opcode": 0,
    "opcode_name": "RDMA_WRITE",
    "crc_ok": False,
}
ERROR: Row = {
    "frame": 9,
    "stream": 1,
    "direction": "initiator",
    "seq": 1,
    "type": "error",
    "error": "CRC field 0x1, computed 0x2",
    "code": 2,
    "layer": "mpa",
}
ROWS = {"send": SEND, "write": WRITE, "error": ERROR}


def matching(expression: str) -> set[str]:
    shows = compile_filter(expression)
    return {name for name, row in ROWS.items() if shows.matches(row)}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("opcode == send", {"send"}),
        ("opcode == 3", {"send"}),
        ("opcode == 0x3", {"send"}),
        ("opcode eq SEND", {"send"}),
        ("opcode == write", {"write"}),
        ("opcode == rdma_write", {"write"}),
        ("opcode_name == rdma_write", {"write"}),
        ("opcode != send", {"write"}),  # absent in the error: false
        ("not opcode == send", {"write", "error"}),
        ("stag == 0x100a", {"write"}),
        ("stag == 4106", {"write"}),
        ("stag", {"write"}),
        ("stag != 5", {"write"}),
        ("msn < 10 and msn >= 7", {"send"}),
        ("msn > 7", set()),
        ("queue == 0", {"send"}),
        ("crc_ok", {"send"}),
        ("crc_ok == false", {"write"}),
        ("not crc_ok", {"write", "error"}),
        ("crc_ok == false or error", {"write", "error"}),
        ("error contains CRC", {"error"}),
        ('error contains "computed 0x2"', {"error"}),
        ("code == 2 && layer == mpa", {"error"}),
        ("type == fpdu", {"send", "write"}),
        ("type in {fpdu, error}", {"send", "write", "error"}),
        ("stream in {1 3}", {"error"}),
        ("tcp.stream == 0", {"send", "write"}),
        ("direction == responder", {"write"}),
        ("addr == 10.0.0.2", {"send"}),
        ("ip.addr == 10.0.0.1", {"send", "write"}),
        ("addr != 10.0.0.2", {"write"}),
        ("addr == 10.0.0.0/8", {"send", "write"}),
        ("addr == fe80::0001", {"write"}),
        ("src == fe80::/10", {"write"}),
        ("port == 4000 and not port == 50001", {"send", "write"}),
        ("tcp.dstport == 4000", {"send", "write"}),
        ("time < 0.001", {"send", "write"}),
        ("len == 100", {"send", "write"}),
        ("wire_length >= 124 and last", {"send"}),
        ("tagged == true || msn == 7", {"send", "write"}),
        ("(opcode == send or opcode == write) and not tagged", {"send"}),
        ("opcode == send or opcode == write and not tagged", {"send"}),  # and binds first
        ("!(stag) && !error", {"send"}),
        ("NOT stag AND NOT error", {"send"}),
        ("frame == 010", set()),  # ten, not eight (no octal by a leading zero)
        ("frame == 0o10", {"send", "write"}),
        ("crc == 0x1234abcd", {"send", "write"}),
    ],
)
def test_meaning(expression: str, expected: set[str]) -> None:
    assert matching(expression) == expected


@pytest.mark.parametrize(
    ("expression", "column", "fragment"),
    [
        ("", 1, "expected a field name"),
        ("stagg == 3", 1, "no field 'stagg'"),
        ("stag = 3", 6, "'=' is not an operator"),
        ("stag == ", 9, "expected a value"),
        ("stag == foo", 9, "stag takes a number"),
        ("opcode == sned", 11, "a number or a name (rdma_write, write, "),
        ("aopcode == add", 12, "a number or a name (fetch_add, cmp_swap)"),
        ("crc_ok == maybe", 11, "true or false"),
        ("addr == 10.0.0.300", 9, "not an IP address"),
        ("opcode_name < SEND", 13, "only ==, != and contains"),
        ("msn contains 3", 14, "'contains' applies to text"),
        ("(stag == 3", 11, "expected ')'"),
        ("stag == 3)", 10, "unexpected ')'"),
        ("stag == 3 msn == 4", 11, "unexpected 'msn'"),
        ("error contains 'CRC", 16, "string not closed"),
        ("stag == 3 and", 14, "expected a field name"),
        ("stag in {1 2", 13, "expected '}'"),
        ("stag in 1", 9, "expected '{'"),
        ("stag in {}", 9, "an empty set"),
        ("stag == 3 # x", 11, "unexpected character '#'"),
        ("and", 1, "expected a field name"),
    ],
)
def test_faults_say_what_and_where(expression: str, column: int, fragment: str) -> None:
    with pytest.raises(FilterError) as caught:
        compile_filter(expression)
    fault = caught.value
    assert fragment in fault.message
    assert fault.position + 1 == column
    lines = fault.describe().splitlines()
    assert lines[0].endswith(f"(column {column})")
    assert lines[1] == "  " + expression
    assert lines[2] == "  " + " " * (column - 1) + "^"


def test_length_is_bounded() -> None:
    with pytest.raises(FilterError, match="longer than"):
        compile_filter("stag or " * 1000 + "stag")


def test_nesting_is_bounded() -> None:
    compile_filter("(" * MAX_DEPTH + "stag" + ")" * MAX_DEPTH)
    for deep in ("(" * 2000 + "stag" + ")" * 2000, "not " * 1000 + "stag", "!" * 3000 + "stag"):
        with pytest.raises(FilterError, match="nested more than"):
            compile_filter(deep)


@pytest.mark.slow
@given(st.text(max_size=80))
def test_any_text_gives_a_filter_or_a_filter_error(text: str) -> None:
    try:
        shows = compile_filter(text)
    except FilterError as fault:
        assert 0 <= fault.position <= len(text)
        return
    for row in ROWS.values():
        assert shows.matches(row) in (True, False)


_KEYWORDS = ["and", "or", "not", "in", "contains", "==", "!=", "<", ">=", "&&", "||", "!"]
_VALUES = ["(", ")", "{", "}", ",", "0x10", "3", "send", "true", "10.0.0.1", '"a b"', "fe80::1"]
_WORDS = st.sampled_from([*FIELDS, *_KEYWORDS, *_VALUES])


@given(st.lists(_WORDS, max_size=12))
def test_any_sequence_of_tokens_gives_a_filter_or_a_filter_error(words: list[str]) -> None:
    text = " ".join(words)
    try:
        shows = compile_filter(text)
    except FilterError:
        return
    for row in ROWS.values():
        assert shows.matches(row) in (True, False)


ATOMS = [
    "opcode == send",
    "stag",
    "crc_ok",
    "msn < 10",
    "error",
    "addr == 10.0.0.2",
    "tagged == false",
]


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> tuple[str, object]:
    """An expression and its tree: ("atom", i), ("not", t), ("and"|"or", a, b)."""
    if depth > 3 or draw(st.booleans()):
        i = draw(st.integers(0, len(ATOMS) - 1))
        return ATOMS[i], ("atom", i)
    kind = draw(st.sampled_from(["not", "and", "or", "paren"]))
    left_text, left = draw(expressions(depth + 1))
    if kind == "not":
        atom = isinstance(left, tuple) and left[0] == "atom"
        return (f"not {left_text}" if atom else f"not ({left_text})"), ("not", left)
    if kind == "paren":
        return f"({left_text})", left
    right_text, right = draw(expressions(depth + 1))
    # Parenthesised both sides: the tree is what was written.
    word = draw(st.sampled_from({"and": ["and", "&&"], "or": ["or", "||"]}[kind]))
    return f"({left_text}) {word} ({right_text})", (kind, left, right)


def evaluate(tree: object, atoms: list[bool]) -> bool:
    assert isinstance(tree, tuple)
    if tree[0] == "atom":
        return atoms[tree[1]]
    if tree[0] == "not":
        return not evaluate(tree[1], atoms)
    left, right = evaluate(tree[1], atoms), evaluate(tree[2], atoms)
    return left and right if tree[0] == "and" else left or right


@settings(max_examples=200)
@given(expressions())
def test_combinations_mean_what_boolean_logic_says(drawn: tuple[str, object]) -> None:
    text, tree = drawn
    shows = compile_filter(text)
    for row in ROWS.values():
        atoms = [compile_filter(a).matches(row) for a in ATOMS]
        assert shows.matches(row) is evaluate(tree, atoms)


@given(st.lists(st.sampled_from(ATOMS), min_size=2, max_size=5))
def test_and_binds_tighter_than_or(atoms: list[str]) -> None:
    text = " or ".join(
        " and ".join(atoms[i : i + 2]) for i in range(0, len(atoms), 2)
    )  # a and b or c and d or e
    shows = compile_filter(text)
    for row in ROWS.values():
        values = [compile_filter(a).matches(row) for a in atoms]
        groups = [values[i : i + 2] for i in range(0, len(values), 2)]
        assert shows.matches(row) is any(all(g) for g in groups)


# -- from the command line -------------------------------------------------------------


def decode(*argv: str) -> subprocess.CompletedProcess[str]:
    """``iwarp decode ARGV`` on one capture, in this process."""
    return run_in_process("decode", *argv)


def test_the_filter_selects_json_records(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    cap, _ = standard(True, False).capture()
    cap.write(str(path))
    every = [json.loads(x) for x in decode(str(path), "--json").stdout.splitlines()]
    chosen = [
        json.loads(x)
        for x in decode(
            str(path), "--json", "-Y", "opcode == rdma_write or (msn >= 2 and not tagged)"
        ).stdout.splitlines()
    ]

    def wanted(r: dict[str, object]) -> bool:
        ddp, rdmap = r.get("ddp") or {}, r.get("rdmap") or {}
        assert isinstance(ddp, dict) and isinstance(rdmap, dict)
        if rdmap.get("opcode") == 0:
            return True
        return "msn" in ddp and ddp["msn"] >= 2 and not ddp["tagged"]

    records = [r for r in every if r["type"] not in ("stream_summary", "capture_summary")]
    kept = [r for r in chosen if r["type"] not in ("stream_summary", "capture_summary")]
    assert kept == [r for r in records if wanted(r)] and len(kept) == 5
    # Summaries and statistics count everything.
    assert chosen[-1] == {
        **every[-1],
        "seconds": chosen[-1]["seconds"],
        "mib_per_s": chosen[-1]["mib_per_s"],
    }


def test_the_filter_and_count_in_the_listing(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    cap, _ = standard(False, False).capture()
    cap.write(str(path))
    done = decode(str(path), "-Y", "type == fpdu and direction == initiator", "-c", "2")
    lines = [x for x in done.stdout.splitlines() if "→" in x]
    assert done.returncode == 0 and len(lines) == 2
    assert "SEND QN 0 MSN 1" in lines[0] and "RDMA_WRITE STag 0xabcd" in lines[1]


def test_a_bad_filter_is_a_usage_error(tmp_path: Path) -> None:
    done = decode(str(tmp_path / "never-read.pcap"), "-Y", "stag == (3")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "expected a value for stag, found '(' (column 9)" in done.stderr
    assert "  stag == (3\n" in done.stderr and "          ^" in done.stderr


def test_fields_lists_every_field() -> None:
    done = decode("--fields")
    assert done.returncode == 0
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert names == list(FIELDS)
    assert "(also ip.addr, ipv6.addr)" in done.stdout


def test_the_filter_selects_verbose_trees(tmp_path: Path) -> None:
    path = tmp_path / "c.pcap"
    cap, _ = standard(False, False).capture()
    cap.write(str(path))
    done = decode(str(path), "-V", "-Y", "stag")
    heads = [line for line in done.stdout.splitlines() if line.startswith("frame ")]
    assert len(heads) == 3 and all(": FPDU, " in h for h in heads)
    assert done.stdout.count("    DDP: version 1, flags TL, STag ") == 3
    assert "stream 0:" in done.stdout  # the summary stays
