"""The words the conformance cases and the tool's session share.

Which end the target plays (:class:`TargetRole`), what cooperation a case
needs from it (:class:`Need`), and the two verdicts a case raises
(:class:`CaseFailed`, :class:`CaseSkipped`). Below both the session
(:mod:`iwarp.conformance.session`, which raises the verdicts) and the case
model (:mod:`iwarp.conformance.model`, whose cases run a session).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["BOTH", "CaseFailed", "CaseSkipped", "Need", "TargetRole"]


class TargetRole(StrEnum):
    """The MPA role the *target* plays (the tool plays the other one)."""

    #: The target listens; the tool connects and sends the MPA Request.
    RESPONDER = "responder"
    #: The target connects and sends the Request; the tool answers.
    INITIATOR = "initiator"


BOTH: Final = frozenset(TargetRole)


class Need(StrEnum):
    """Cooperation a case needs from the target beyond an MPA connection."""

    #: The target has a receive posted for a small (16-octet) Send: it speaks
    #: a Send-based conversation (iwarp listen/connect, rping).
    RECEIVE = "receive"
    #: The target advertised a tagged buffer (STag, TO, length) open to
    #: remote access: rping -c's first message, iwarp listen --op write/read.
    REGION = "region"
    #: The advertised buffer allows remote Write but not remote Read.
    WRITE_ONLY_REGION = "write-only region"
    #: The target answers our first message with FPDUs of its own.
    TALKS = "talks"
    #: The target takes Rev 2 Requests (RFC 6581 enhanced connection establishment); the
    #: runner skips these cases for a target that closes on Rev 2 and takes Rev 1.
    ENHANCED = "rev2"
    #: The target frames without an MPA Request or Reply (draft-culley-iwarp-mpa-02): the
    #: run selects it (``--mpa-mode culley``); every other case then skips.
    CULLEY = "culley"


class CaseFailed(Exception):  # noqa: N818 (a verdict, not an error)
    """The target broke the rule; the message says what was observed."""


class CaseSkipped(Exception):  # noqa: N818 (a verdict, not an error)
    """The target lacks a capability the case needs; the message says which."""
