"""RFC 7306 Atomic Responses matched with their Atomic Requests, in a capture.

A Responder answers Atomic Requests in the order it received them (RFC
7306 §5.2.2 rule 8), each Response carrying the Request Identifier of its
Request (§5.2.2). :class:`AtomicMatcher` pairs the Requests one direction
sent with the Responses the other direction sent, in order, whichever of
the two a capture reader sees first, and reports a Response whose
identifier differs from its Request's, or that answers no Request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

__all__ = ["AtomicMatcher", "Mismatch"]

#: Requests (or Responses) kept waiting for their other half, per direction:
#: an Atomic Request answered is one of at most a few outstanding, so this
#: bounds memory on captures that never show the answers.
MAX_WAITING: Final = 1 << 16

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class _Seen(Generic[D]):
    request_id: int
    sender: D
    seq: int
    frame: int | None


@dataclass(frozen=True, slots=True)
class Mismatch(Generic[D]):
    """A Response that does not answer its Request: where it is, and why."""

    sender: D
    seq: int
    frame: int | None
    message: str


class AtomicMatcher(Generic[D]):
    """Pairs Atomic Requests and Responses of one connection.

    ``D`` names a direction (whatever the caller uses); each call says which
    direction sent the message and which is the other one.
    """

    def __init__(self) -> None:
        #: By requesting direction: its Requests not yet answered, and the
        #: other direction's Responses not yet matched (seen first).
        self._requests: dict[D, deque[_Seen[D]]] = {}
        self._responses: dict[D, deque[_Seen[D]]] = {}
        #: Set when a queue overflowed: matching stops (it would be wrong).
        self.overflowed = False

    def request(
        self, sender: D, request_id: int, seq: int, frame: int | None
    ) -> Mismatch[D] | None:
        """``sender`` sent an Atomic Request."""
        seen = _Seen(request_id, sender, seq, frame)
        waiting = self._responses.get(sender)
        if waiting:
            return _check(seen, waiting.popleft())
        self._push(self._requests, sender, seen)
        return None

    def response(
        self, sender: D, requester: D, request_id: int, seq: int, frame: int | None
    ) -> Mismatch[D] | None:
        """``sender`` sent an Atomic Response (to ``requester``'s Request)."""
        seen = _Seen(request_id, sender, seq, frame)
        waiting = self._requests.get(requester)
        if waiting:
            return _check(waiting.popleft(), seen)
        self._push(self._responses, requester, seen)
        return None

    def unanswered(self) -> list[Mismatch[D]]:
        """At the end: Responses no Request was seen for."""
        if self.overflowed:
            return []
        return [
            Mismatch(
                seen.sender,
                seen.seq,
                seen.frame,
                f"Atomic Response to request {seen.request_id:#x} answers no Atomic Request "
                "(RFC 7306 §5.2.2)",
            )
            for waiting in self._responses.values()
            for seen in waiting
        ]

    def _push(self, table: dict[D, deque[_Seen[D]]], key: D, seen: _Seen[D]) -> None:
        if self.overflowed:
            return
        waiting = table.setdefault(key, deque())
        if len(waiting) >= MAX_WAITING:
            self.overflowed = True
            self._requests.clear()
            self._responses.clear()
            return
        waiting.append(seen)


def _check(request: _Seen[D], response: _Seen[D]) -> Mismatch[D] | None:
    if request.request_id == response.request_id:
        return None
    return Mismatch(
        response.sender,
        response.seq,
        response.frame,
        f"Atomic Response to request {response.request_id:#x}, but the Atomic Request it "
        f"answers (in order) is {request.request_id:#x} (RFC 7306 §5.2.2)",
    )
