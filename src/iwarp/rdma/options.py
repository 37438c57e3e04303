"""How ``connect``, ``serve``, ``listen`` and ``accept`` set up a queue pair,
documented once for every adapter.

The asyncio (:mod:`iwarp.asyncio.rdma`) and the blocking
(:mod:`iwarp.sync.rdma`) calls take the keyword arguments below (each the
ones that apply to it) and make one
:class:`~iwarp.rdma.endpoint.QueuePairOptions` of them with
:func:`initiator_options` or :func:`responder_options`, so the defaults
are chosen here, once.

``pd``
    The protection domain of the queue pair's memory. By default every
    queue pair gets its own (:func:`domain`); a server's connections too.
``config``
    The MPA startup. ``connect``'s default is
    :data:`~iwarp.rdma.endpoint.INITIATOR_CONFIG`, which offers RFC 6581
    peer-to-peer so that the server may send first (its fence lifts with
    our RTR); a config of your own offers it only with
    ``peer_to_peer=True``. ``serve``/``listen``'s default is ``MpaConfig()``.
``private_data``
    ``connect``: the private data of our MPA Request.
``receive_buffers``, ``receive_size``
    The receive pool behind ``QueuePair.receive``: buffers of
    ``receive_size`` octets (64 KiB) the queue pair keeps posted and
    reposts itself. By default 4, or none when ``setup`` is given (it posts
    the application's own receives). Posted only once MPA startup
    completed: a connection costs no buffers before.
``setup``
    Called with the queue pair as soon as MPA is in full operation, before
    any message is processed: post receives there (where verbs programs
    post them before ``rdma_accept``).
``first_send_delay``
    ``connect``: seconds to hold our first FPDU after the Reply (0.5
    against Linux siw, whose responder may miss an early FPDU).
``shared_cq``, ``send_cq``, ``recv_cq``
    Where completions go (:class:`~iwarp.rdma.front.CompletionQueueFront`,
    the same in every adapter): by default the queue pair has its own
    ``send_cq`` and ``recv_cq``; ``shared_cq`` makes one queue for both;
    ``send_cq``/``recv_cq`` take completion queues of the application's
    (``CompletionQueue()``), which may also serve several queue pairs.
``decide``
    ``serve``/``listen``: sees each valid Request and returns
    :class:`~iwarp.mpa.policy.Accept` or :class:`~iwarp.mpa.policy.Reject`
    (by default every Request is accepted).
``local_address``
    ``connect``: the (host, port) to connect from (port 0: any), as
    rping's ``-I`` takes a source address; None lets the system choose.
``atomic_ord``, ``atomic_ird``
    RFC 7306 Atomic Operations (``fetch_add``, ``compare_swap``): how many
    Atomic Requests the queue pair may have unanswered (``atomic_ord``;
    later work waits behind them) and how many of the peer's it keeps room
    to answer (``atomic_ird``), each
    :data:`~iwarp.rdmap.atomics.ATOMIC_DEPTH` (4) by default, 0 to
    :data:`~iwarp.rdmap.atomics.MAX_ATOMIC_DEPTH`. MPA does not negotiate
    them (RFC 7306 leaves that to the application): give the peer an
    ``atomic_ird`` at least your ``atomic_ord``, or its Terminate ends the
    connection. ``atomic_ord=0`` refuses local Atomic Operations;
    ``atomic_ird=0`` answers the peer's as a stack without RFC 7306 does
    (Terminate "Unexpected OpCode", §1.1).
``fallback_to_rev1``
    ``connect``: retry once with a Rev 1 Request when an unenhanced
    Responder closes on our Rev 2 one (RFC 6581 §10; also the config's
    ``rev1_fallback``; :func:`iwarp.mpa.policy.rev1_fallback`).
"""

from __future__ import annotations

from typing import TypedDict, Unpack

from iwarp.errors import LocalProtocolError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.policy import Decider
from iwarp.rdma.endpoint import INITIATOR_CONFIG, QueuePairOptions
from iwarp.rdmap.atomics import MAX_ATOMIC_DEPTH
from iwarp.rdmap.memory import ProtectionDomain

__all__ = [
    "InitiatorSettings",
    "ResponderSettings",
    "QueuePairSettings",
    "domain",
    "initiator_options",
    "responder_options",
]


class QueuePairSettings(TypedDict, total=False):
    """The settings of both roles, as keyword arguments (each documented
    above); ``connect``, ``serve``, ``listen`` take them as ``**settings``."""

    receive_buffers: int | None
    receive_size: int
    shared_cq: bool
    atomic_ord: int
    atomic_ird: int


class InitiatorSettings(QueuePairSettings, total=False):
    """``connect``'s settings."""

    private_data: bytes
    first_send_delay: float


class ResponderSettings(QueuePairSettings, total=False):
    """``serve``'s and ``listen``'s settings."""

    decide: Decider | None


def initiator_options(
    config: MpaConfig | None, **settings: Unpack[InitiatorSettings]
) -> QueuePairOptions:
    """``connect``'s settings (the module's documentation says what each means).

    :raises LocalProtocolError: an atomic depth out of range.
    """
    options = QueuePairOptions(config if config is not None else INITIATOR_CONFIG, **settings)
    return _checked(options)


def responder_options(
    config: MpaConfig | None, **settings: Unpack[ResponderSettings]
) -> QueuePairOptions:
    """``serve``'s and ``listen``'s settings (see the module's documentation).

    :raises LocalProtocolError: an atomic depth out of range.
    """
    return _checked(QueuePairOptions(config if config is not None else MpaConfig(), **settings))


def _checked(options: QueuePairOptions) -> QueuePairOptions:
    _depth("atomic_ord", options.atomic_ord)
    _depth("atomic_ird", options.atomic_ird)
    return options


def _depth(name: str, value: int) -> int:
    """:raises LocalProtocolError: not a whole number from 0 to MAX_ATOMIC_DEPTH."""
    if isinstance(value, bool) or not 0 <= value <= MAX_ATOMIC_DEPTH:
        raise LocalProtocolError(f"{name} must be a whole number from 0 to {MAX_ATOMIC_DEPTH}")
    return value


def domain(pd: ProtectionDomain | None) -> ProtectionDomain:
    """``pd``, or a protection domain of the queue pair's own."""
    return pd if pd is not None else ProtectionDomain()
