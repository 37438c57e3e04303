"""State machines as data: one table type, one runner, one diagram generator.

Every protocol state machine of the package (MPA startup, the RDMAP stream,
VI/TCP connection establishment) is a :class:`TransitionTable`: a read-only
mapping from every legal ``(state, input)`` pair to the next state, plus
what the table needs to explain itself:

* which inputs are *local* (API calls of this endpoint's user); a local input
  the table does not allow is misuse (:class:`~iwarp.errors.LocalProtocolError`
  or the table's subclass), a remote one is the peer breaking the protocol
  (the table's :class:`~iwarp.errors.RemoteProtocolError`, e.g. MPA error 4);
* where the machine starts, for the diagram.

Tests walk every pair of a table; the docs embed :meth:`TransitionTable.mermaid`
and a test keeps the two equal. :class:`Machine` is a running instance for
cores that keep the state next to the table; cores that keep the state in
an attribute of their own call :meth:`TransitionTable.next`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Generic, TypeVar

from iwarp.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["Machine", "TransitionTable"]

S = TypeVar("S", bound=Enum)
I = TypeVar("I", bound=Enum)  # noqa: E741


class TransitionTable(Mapping[tuple[S, I], S], Generic[S, I]):
    """Every legal ``(state, input) -> state`` of one state machine.

    :param transitions: the table itself.
    :param local_inputs: the inputs that come from the local user.
    :param local_error: builds the error for a local input not allowed now.
    :param remote_error: builds the error for a remote input not allowed now.
    :param starts: the initial states, each with an optional label (drawn on
        the ``[*]`` edge, e.g. which role starts there).
    """

    __slots__ = ("_map", "local_error", "local_inputs", "remote_error", "starts")

    def __init__(
        self,
        transitions: Mapping[tuple[S, I], S],
        *,
        local_inputs: frozenset[I],
        remote_error: Callable[[str], RemoteProtocolError],
        local_error: Callable[[str], LocalProtocolError] = LocalProtocolError,
        starts: tuple[tuple[S, str], ...],
    ) -> None:
        self._map: dict[tuple[S, I], S] = dict(transitions)
        self.local_inputs = local_inputs
        self.local_error = local_error
        self.remote_error = remote_error
        self.starts = starts

    # -- the mapping: what tests walk --------------------------------------------

    def __getitem__(self, key: tuple[S, I]) -> S:
        return self._map[key]

    def __iter__(self) -> Iterator[tuple[S, I]]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def replace(self, changes: Mapping[tuple[S, I], S]) -> TransitionTable[S, I]:
        """A copy of this table with ``changes`` applied (same errors and starts)."""
        return TransitionTable(
            {**self._map, **changes},
            local_inputs=self.local_inputs,
            local_error=self.local_error,
            remote_error=self.remote_error,
            starts=self.starts,
        )

    # -- the runner ---------------------------------------------------------------

    def next(self, state: S, event: I) -> S:
        """The state ``event`` leads to from ``state``.

        :raises LocalProtocolError: ``event`` is local and not allowed now.
        :raises RemoteProtocolError: ``event`` is remote and not allowed now.
        """
        nxt = self._map.get((state, event))
        if nxt is None:
            raise self.error(state, event)
        return nxt

    def error(self, state: S, event: I) -> LocalProtocolError | RemoteProtocolError:
        """The error a missing ``(state, event)`` entry stands for."""
        message = f"{event.value} is not allowed in state {state.value}"
        if event in self.local_inputs:
            return self.local_error(message)
        return self.remote_error(message)

    # -- the drawing --------------------------------------------------------------

    def node(self, state: S) -> str:
        """How the diagram names ``state``: by value when every value of its
        enum is a valid mermaid identifier (the spec's names, e.g. VI/TCP's
        ``PendingAccept``), else by member name."""
        if all(str(member.value).isidentifier() for member in type(state)):
            return str(state.value)
        return state.name

    def mermaid(self) -> str:
        """The table as a mermaid ``stateDiagram-v2``: nothing more, nothing less.

        One arrow per (state, next state), labelled with every input that
        takes it (by value, in the enum's order); states as :meth:`node`.
        """
        node = self.node
        state_order = {member: i for i, member in enumerate(type(self.starts[0][0]))}
        edges: dict[tuple[S, S], list[I]] = {}
        for (state, event), nxt in self._map.items():
            edges.setdefault((state, nxt), []).append(event)
        lines = ["stateDiagram-v2"]
        for state, label in self.starts:
            lines.append(f"    [*] --> {node(state)}" + (f": {label}" if label else ""))
        for (state, nxt), events in sorted(
            edges.items(), key=lambda item: (state_order[item[0][0]], state_order[item[0][1]])
        ):
            input_order = {member: i for i, member in enumerate(type(events[0]))}
            events.sort(key=input_order.__getitem__)
            lines.append(
                f"    {node(state)} --> {node(nxt)}: {', '.join(str(e.value) for e in events)}"
            )
        return "\n".join(lines)


class Machine(Generic[S, I]):
    """One running instance of a :class:`TransitionTable`."""

    __slots__ = ("state", "table")

    def __init__(self, table: TransitionTable[S, I], initial: S | None = None) -> None:
        self.table = table
        self.state: S = table.starts[0][0] if initial is None else initial

    def can(self, event: I) -> bool:
        """Whether ``event`` is allowed now."""
        return (self.state, event) in self.table

    def process(self, event: I) -> S:
        """Move on ``event``; on an error the state stays as it was."""
        self.state = self.table.next(self.state, event)
        return self.state
