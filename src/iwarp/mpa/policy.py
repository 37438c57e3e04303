"""What an MPA end decides, written once for every driver.

* The Responder's answer to a Request: :class:`Accept` or :class:`Reject`,
  each with optional RFC 6581 IRD/ORD, applied by :func:`answer_request`.
* The Initiator's Rev 1 fallback (RFC 6581 §10): :func:`rev1_fallback`
  says whether a failed Rev 2 startup is retried, on a new TCP connection,
  with a plain Rev 1 Request, and gives the config to retry with;
  :class:`Attempts` runs it for every ``connect``.

The asyncio adapters, the blocking adapter and the CLI call these; none of
them decides on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from iwarp.errors import IwarpError, MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.events import ConnectionRejected, RequestReceived
from iwarp.mpa.handshake import build_request, retry_as_rev1
from iwarp.mpa.wire import Revision

__all__ = [
    "Accept",
    "Attempts",
    "ConnectionRejectedError",
    "Decider",
    "Reject",
    "answer_request",
    "rev1_fallback",
]


class ConnectionRejectedError(IwarpError):
    """MPA startup ended in a reject: R=1 from the peer, or a local policy
    or decision refused. ``event`` has the frame and its private data.

    Neither API misuse nor a protocol violation, so neither a
    LocalProtocolError nor a RemoteProtocolError.
    """

    def __init__(self, event: ConnectionRejected) -> None:
        who = "peer" if event.by_peer else "local policy"
        super().__init__(f"MPA connection rejected by {who}: {event.reason}")
        self.event = event

    @property
    def private_data(self) -> bytes:
        """The Reply's private data (Initiator) or the one we sent (Responder)."""
        return self.event.private_data


@dataclass(frozen=True, slots=True)
class Accept:
    """A Responder's decision: accept with this private data, and optionally
    override the configured RFC 6581 IRD/ORD for this connection."""

    private_data: bytes = b""
    ird: int | None = None
    ord: int | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """A Responder's decision: reject (R=1) with this private data; for an
    RFC 6581 peer, the IRD/ORD to report (e.g. the ORD this end requires
    when the Initiator's IRD was too small, RFC 6581 §9.1)."""

    private_data: bytes = b""
    ird: int | None = None
    ord: int | None = None


#: Sees each valid Request and returns the decision (default: accept).
Decider = Callable[[RequestReceived], "Accept | Reject"]


class _Answerable(Protocol):
    def accept(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> object: ...

    def reject(
        self, private_data: bytes = b"", *, ird: int | None = None, ord: int | None = None
    ) -> object: ...


def answer_request(
    conn: _Answerable, request: RequestReceived, decide: Decider | None
) -> Accept | Reject:
    """Ask ``decide`` (or accept) and apply the answer to ``conn`` (an
    :class:`~iwarp.mpa.connection.MpaConnection` or anything with the same
    ``accept``/``reject``). Returns the decision.

    :raises LocalProtocolError: the private data or IRD/ORD are invalid.
    """
    decision: Accept | Reject = Accept() if decide is None else decide(request)
    if isinstance(decision, Reject):
        conn.reject(decision.private_data, ird=decision.ird, ord=decision.ord)
    else:
        conn.accept(decision.private_data, ird=decision.ird, ord=decision.ord)
    return decision


def rev1_fallback(config: MpaConfig, error: MpaError, *, requested: bool) -> MpaConfig | None:
    """The config to retry a failed startup with, or None for no retry.

    RFC 6581 §10: a Responder that does not know Rev 2 closes the connection
    on an enhanced Request, and the Initiator MAY retry with unenhanced MPA
    (cxgb4 does). Retried once, when asked for (``requested`` or the
    config's ``rev1_fallback``) and when ``error`` is that case.
    """
    if not (requested or config.rev1_fallback) or not retry_as_rev1(config, error):
        return None
    return replace(config, revision=Revision.REV1)


class Attempts:
    """An Initiator's startup attempts, as every ``connect`` makes them:
    the first with ``config``; after a failure, once more as Rev 1 when
    :func:`rev1_fallback` says so (``fallback`` or the config's
    ``rev1_fallback``), on a new TCP connection::

        attempts = Attempts(config, private_data, fallback=fallback_to_rev1)
        while True:
            try:
                return connect_once(attempts.config)
            except MpaError as exc:
                attempts.failed(exc)  # raises it unless a retry follows

    :raises LocalProtocolError: the private data does not fit ``config``
        (before any connection is opened).
    """

    __slots__ = ("_fallback", "config")

    def __init__(self, config: MpaConfig, private_data: bytes, *, fallback: bool) -> None:
        build_request(config, private_data)
        #: The config of the next attempt.
        self.config = config
        self._fallback = fallback

    def failed(self, error: MpaError) -> None:
        """The attempt with :attr:`config` failed with ``error``: raises it,
        unless a Rev 1 attempt follows (then :attr:`config` is its config)."""
        retry = rev1_fallback(self.config, error, requested=self._fallback)
        if retry is None:
            raise error
        self.config = retry
        self._fallback = False  # rev1_fallback gives None for a Rev 1 config: once
