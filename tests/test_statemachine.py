"""The one state-machine runner and diagram generator, over every table that uses it."""

from __future__ import annotations

import itertools
import re
from enum import Enum
from typing import Any

import pytest

from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode, RemoteProtocolError
from iwarp.mpa.handshake import INITIATOR_TRANSITIONS, RESPONDER_TRANSITIONS, MpaInput, MpaState
from iwarp.rdmap.state import TRANSITIONS as STREAM_TRANSITIONS
from iwarp.statemachine import Machine, TransitionTable
from iwarp.vitcp.errors import UnexpectedSegmentError, VitcpUsageError
from iwarp.vitcp.handshake import (
    ACTIVE_TRANSITIONS,
    PASSIVE_TRANSITIONS,
    PEER_ACTIVE_TRANSITIONS,
)

AnyTable = TransitionTable[Any, Any]

TABLES: dict[str, AnyTable] = {
    "mpa-initiator": INITIATOR_TRANSITIONS,
    "mpa-responder": RESPONDER_TRANSITIONS,
    "rdmap-stream": STREAM_TRANSITIONS,
    "vitcp-active": ACTIVE_TRANSITIONS,
    "vitcp-peer-active": PEER_ACTIVE_TRANSITIONS,
    "vitcp-passive": PASSIVE_TRANSITIONS,
}

#: The error classes each table's missing pairs stand for: (local, remote).
ERRORS: dict[str, tuple[type[Exception], type[Exception]]] = {
    "mpa-initiator": (LocalProtocolError, MpaError),
    "mpa-responder": (LocalProtocolError, MpaError),
    "rdmap-stream": (LocalProtocolError, RemoteProtocolError),
    "vitcp-active": (VitcpUsageError, UnexpectedSegmentError),
    "vitcp-peer-active": (VitcpUsageError, UnexpectedSegmentError),
    "vitcp-passive": (VitcpUsageError, UnexpectedSegmentError),
}


def _pairs(table: AnyTable) -> list[tuple[Enum, Enum]]:
    state_type: type[Enum] = type(table.starts[0][0])
    input_type: type[Enum] = type(next(iter(table))[1])
    return list(itertools.product(state_type, input_type))


@pytest.mark.parametrize("name", list(TABLES))
def test_every_pair_follows_the_table_or_raises_on_its_side(name: str) -> None:
    table = TABLES[name]
    local_error, remote_error = ERRORS[name]
    for state, event in _pairs(table):
        machine = Machine(table, state)
        if (state, event) in table:
            assert machine.can(event)
            assert machine.process(event) is table[state, event]
            continue
        assert not machine.can(event)
        expected = local_error if event in table.local_inputs else remote_error
        with pytest.raises(expected, match="is not allowed in state") as info:
            machine.process(event)
        assert machine.state is state
        # Local misuse and remote misbehaviour never share a class.
        local = isinstance(info.value, LocalProtocolError)
        assert local is (event in table.local_inputs)
        assert isinstance(info.value, RemoteProtocolError) is not local


def test_mpa_remote_error_is_invalid_frame() -> None:
    """RFC 5044 §7.1.2 rules 5, 8: a Reply to a Responder is MPA error 4."""
    with pytest.raises(MpaError) as info:
        Machine(RESPONDER_TRANSITIONS, MpaState.AWAIT_REQUEST).process(MpaInput.REPLY_ACCEPT)
    assert info.value.mpa_code is MpaErrorCode.INVALID_FRAME


_EDGE = re.compile(r"^    (\w+) --> (\w+): (.+)$")


@pytest.mark.parametrize("name", list(TABLES))
def test_diagram_is_the_table(name: str) -> None:
    """Reading the drawing back gives every pair of the table exactly once."""
    table = TABLES[name]
    lines = table.mermaid().split("\n")
    assert lines[0] == "stateDiagram-v2"
    starts = [line for line in lines if line.startswith("    [*] --> ")]
    assert len(starts) == len(table.starts)
    state_type: type[Enum] = type(table.starts[0][0])
    input_type: type[Enum] = type(next(iter(table))[1])
    nodes = {table.node(m): m for m in state_type}
    inputs = {str(m.value): m for m in input_type}
    drawn: dict[tuple[Enum, Enum], Enum] = {}
    for line in lines[1 + len(starts) :]:
        match = _EDGE.match(line)
        assert match, line
        source, target = nodes[match[1]], nodes[match[2]]
        for label in match[3].split(", "):
            key = (source, inputs[label])
            assert key not in drawn, key
            drawn[key] = target
    assert drawn == dict(table)


def test_replace_keeps_errors_and_starts() -> None:
    assert PEER_ACTIVE_TRANSITIONS.local_inputs is ACTIVE_TRANSITIONS.local_inputs
    assert PEER_ACTIVE_TRANSITIONS.starts == ACTIVE_TRANSITIONS.starts
    assert len(PEER_ACTIVE_TRANSITIONS) == len(ACTIVE_TRANSITIONS)
    assert dict(PEER_ACTIVE_TRANSITIONS) != dict(ACTIVE_TRANSITIONS)
