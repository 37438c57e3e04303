"""Policy of VI/TCP establishment that every adapter shares, without I/O.

* :class:`Demultiplexer`: one TCP port serves many VIs, told apart by the
  called discriminator of each ConnectRequest (draft-dicecco-vitcp
  §2.2.2.2.1, §4.3): a VI waiting for one connection is served first, then
  a VI serving every connection for that discriminator; with neither, the
  core answers ConnectNoMatch.
* :class:`PeerRetry`: the schedule of a peer-to-peer connect (§4): the
  active end retries while the passive end answers ConnectNoMatch (it is
  not waiting yet), backing off from 50 ms to 1 s, until the configured
  ``connect_timeout``; and, when it gives up, why.
  It also says what an attempt's outcome means (:meth:`PeerRetry.after`),
  ends the core and words the error when TCP setup fails or the attempts
  run out, so both adapters raise the same.
* :func:`start_connect`: the active core of a VipConnectRequest, with its
  receive descriptors posted in time; :func:`peer_setup`: the config and
  the role of each end of a VipConnectPeerRequest.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from iwarp.vitcp.config import ViRole, VitcpConfig, peer_role
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError, VitcpRejectedError
from iwarp.vitcp.events import (
    TCP_CLOSED_UNANSWERED,
    ConnectionRequested,
    ReconnectNeeded,
    ViConnectionRejected,
)
from iwarp.vitcp.handshake import State

__all__ = ["Demultiplexer", "Offer", "PeerRetry", "peer_setup", "start_connect"]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Offer(Generic[T]):
    """A VI ready to take connections for ``config.discriminator``.

    ``owner`` is the adapter's handle (a future to resolve, a handler to
    run); ``keep_posted`` receive descriptors are posted on accept.
    """

    config: VitcpConfig
    owner: T
    keep_posted: int = 0


@dataclass(frozen=True, slots=True)
class Routed(Generic[T]):
    """Where a ConnectRequest went: ``offer`` is None for ConnectNoMatch;
    ``accepted`` is False when that VI's attributes did not match (the
    core sent ConnectReject)."""

    offer: Offer[T] | None
    accepted: bool


class Demultiplexer(Generic[T]):
    """Hands each incoming connection to the VI its discriminator names."""

    def __init__(self, config: VitcpConfig | None = None) -> None:
        self.config = config or VitcpConfig()
        self._waiting: dict[bytes, deque[Offer[T]]] = {}
        self._serving: dict[bytes, Offer[T]] = {}

    def offer(
        self,
        discriminator: bytes,
        owner: T,
        *,
        config: VitcpConfig | None = None,
        keep_posted: int = 0,
        every: bool = False,
    ) -> Offer[T]:
        """Offer a VI for the next connection to ``discriminator`` (VipConnectWait),
        or for every one (``every``: a server)."""
        cfg = replace(config or self.config, discriminator=discriminator)
        offer = Offer(cfg, owner, keep_posted)
        if every:
            self._serving[discriminator] = offer
        else:
            self._waiting.setdefault(discriminator, deque()).append(offer)
        return offer

    def withdraw(self, offer: Offer[T]) -> None:
        """The VI stopped waiting (timeout, cancellation)."""
        queue = self._waiting.get(offer.config.discriminator)
        if queue is not None and offer in queue:
            queue.remove(offer)
            if not queue:
                del self._waiting[offer.config.discriminator]
        if self._serving.get(offer.config.discriminator) is offer:
            del self._serving[offer.config.discriminator]

    def route(self, core: VitcpConnection, request: ConnectionRequested) -> Routed[T]:
        """Decide for ``request`` on ``core`` (passive, in Matching): match
        and accept, reject on an attribute mismatch, or ConnectNoMatch."""
        called = request.called_discriminator
        queue = self._waiting.get(called)
        offer = queue.popleft() if queue else self._serving.get(called)
        if queue is not None and not queue:
            del self._waiting[called]
        if offer is None:
            core.no_match()  # §4.3: send ConnectNoMatch, close TCP
            return Routed(None, False)
        if not core.match(offer.config):
            return Routed(offer, False)
        core.accept()
        if offer.keep_posted:
            core.post_receive(offer.keep_posted)
        return Routed(offer, True)


def start_connect(
    config: VitcpConfig, remote_discriminator: bytes, now: float, *, keep_posted: int = 0
) -> VitcpConnection:
    """The active core of a VipConnectRequest (§4.2) to ``remote_discriminator``,
    waiting for the adapter's ``tcp_established``."""
    core = VitcpConnection(config, ViRole.ACTIVE)
    core.connect(now, remote_discriminator)
    if keep_posted:
        # Posted before the ConnectRequest: a message may follow the
        # ConnectAccept in the same TCP segment.
        core.post_receive(keep_posted)
    return core


def peer_setup(
    config: VitcpConfig | None,
    local_host: str,
    remote_ip: str,
    local_discriminator: bytes,
    remote_discriminator: bytes,
) -> tuple[VitcpConfig, ViRole]:
    """VipConnectPeerRequest (§4): the config both ends use (peer-to-peer,
    our discriminator) and our role: the end with the higher IP address
    connects, the other waits on its listener."""
    cfg = replace(config or VitcpConfig(), peer_to_peer=True, discriminator=local_discriminator)
    return cfg, peer_role(local_host, remote_ip, local_discriminator, remote_discriminator)


class PeerRetry:
    """When the active end of a peer-to-peer connect tries again (§4), and
    what it says when it stops.

    :param now: when the first attempt starts; the last may start before
        ``now + config.connect_timeout``.
    """

    FIRST_DELAY = 0.05
    MOST_DELAY = 1.0

    def __init__(self, config: VitcpConfig, now: float) -> None:
        self.deadline = now + config.connect_timeout
        self.attempts = 1
        #: Why attempts had to be repeated (each ReconnectNeeded reason, once).
        self.reasons: set[str] = set()
        self._delay = self.FIRST_DELAY

    def next_attempt(self, now: float, reason: str | None = None) -> float | None:
        """When to try again after an attempt ended with ``reason`` (a
        :class:`~iwarp.vitcp.events.ReconnectNeeded` reason), or None when
        the time is up. Each wait is twice the last, at most 1 s."""
        if reason is not None:
            self.reasons.add(reason)
        at = now + self._delay
        if at >= self.deadline:
            return None
        self._delay = min(self._delay * 2, self.MOST_DELAY)
        self.attempts += 1
        return at

    def gave_up(self, host: str, port: int) -> str:
        """Why the active end stopped trying ``host``:``port``: the peer's own
        answers if it gave any, else that it never answered in VI/TCP at all
        (TCP accepted and closed every time: likely not a VI/TCP listener)."""
        if self.reasons == {TCP_CLOSED_UNANSWERED}:
            return (
                f"{host}:{port} closed the TCP connection without a VI/TCP answer, "
                f"{self.attempts} times (is it a VI/TCP listener?)"
            )
        return (
            f"peer-to-peer connection timed out after {self.attempts} attempts "
            f"({'; '.join(sorted(self.reasons))})"
        )

    def reconnect_at(
        self, core: VitcpConnection, now: float, reason: str, host: str, port: int
    ) -> float:
        """When to open a new TCP connection after a ReconnectNeeded with
        ``reason`` (:meth:`next_attempt`).

        :raises VitcpClosedError: the time is up or the core ended; the core's
            establishment timer was run out first (§4.2).
        """
        at = self.next_attempt(now, reason)
        if at is None or core.state is State.DISCONNECTED:
            core.handle_timer(max(now, self.deadline))
            raise VitcpClosedError(self.gave_up(host, port))
        return at

    def after(
        self,
        core: VitcpConnection,
        now: float,
        outcome: ViConnectionRejected | ReconnectNeeded,
        host: str,
        port: int,
    ) -> float:
        """When to open a new TCP connection after an attempt that did not
        connect (its TCP connection is over): a ReconnectNeeded is retried
        (:meth:`reconnect_at`), a ConnectReject or ConnectNoMatch is not.

        :raises VitcpRejectedError: the peer rejected (or had no match, §4.3).
        :raises VitcpClosedError: the time is up or the core ended.
        """
        if isinstance(outcome, ViConnectionRejected):
            raise VitcpRejectedError(outcome.no_match)
        return self.reconnect_at(core, now, outcome.reason, host, port)

    def timed_out(self, core: VitcpConnection, now: float) -> VitcpClosedError:
        """TCP setup outlasted ``connect_timeout``: the consumer's timeout
        (§4.2) ends the core; returns the error to raise."""
        core.handle_timer(max(now, self.deadline))
        return VitcpClosedError("connection establishment timed out")

    @staticmethod
    def tcp_failed(core: VitcpConnection, now: float, exc: OSError) -> VitcpClosedError:
        """TCP setup failed: the core ends; returns the error to raise (from ``exc``)."""
        core.tcp_failed(now)
        return VitcpClosedError(f"TCP connection setup failed: {exc}")
