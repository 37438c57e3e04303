"""rping's conversation on the blocking adapter (``iwarp ping --sync``).

The rping logic itself is sans-IO (:mod:`iwarp.apps.rping`: it posts work
and reacts to completions); here a sync :class:`~iwarp.sync.rdma.QueuePair`
carries it, the caller's thread waiting on one shared completion queue, as
rping itself does with one CQ per connection.
"""

from __future__ import annotations

from collections.abc import Callable

from iwarp.apps.rping import MIN_SIZE, RpingClient, RpingServer
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap.memory import ProtectionDomain
from iwarp.rdmap.work import Completion
from iwarp.sync._calls import clock, deadline_after
from iwarp.sync.rdma import (
    CompletionQueue,
    ConnectionTerminatedError,
    QueuePair,
    connect,
    listen,
)

__all__ = ["run_client", "run_server"]

#: Called once the queue pair is up (for ``-d`` output).
OnConnect = Callable[[QueuePair], None]
#: Called with each completion and the lines the rping logic produced for it.
OnCompletion = Callable[[Completion, list[str]], None]


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - clock(), 0.0)


def run_client(
    host: str,
    port: int,
    *,
    config: MpaConfig,
    size: int,
    count: int,
    validate: bool = False,
    first_send_delay: float = 0.0,
    timeout: float | None = None,
    on_connect: OnConnect | None = None,
    on_completion: OnCompletion | None = None,
    local_address: tuple[str, int] | None = None,
) -> RpingClient:
    """rping ``-c``: connect (from ``local_address``, rping's ``-I``, if
    given), ping ``count`` times (0: until stopped), close.

    Returns the client logic (``.pings``, ``.error``).

    :raises WaitTimeoutError: ``timeout`` (for the whole run) passed.
    """
    deadline = deadline_after(timeout)
    pd = ProtectionDomain()
    logic = RpingClient(pd, size=size, count=count, validate=validate)
    cq = CompletionQueue()
    qp = connect(
        host,
        port,
        pd=pd,
        config=config,
        setup=logic.setup,
        send_cq=cq,
        recv_cq=cq,
        first_send_delay=first_send_delay,
        timeout=timeout,
        local_address=local_address,
    )
    try:
        if on_connect is not None:
            on_connect(qp)
        logic.start()
        while not logic.finished and logic.error is None:
            completion = cq.wait(timeout=_remaining(deadline))
            lines = logic.handle(completion)
            if on_completion is not None:
                on_completion(completion, lines)
    except ConnectionTerminatedError as exc:
        logic.error = logic.error or str(exc)
    finally:
        qp.close(timeout=_remaining(deadline))
    return logic


def run_server(
    host: str,
    port: int,
    *,
    config: MpaConfig,
    size: int,
    timeout: float | None = None,
    on_listen: Callable[[int], None] | None = None,
    on_connect: OnConnect | None = None,
    on_completion: OnCompletion | None = None,
) -> RpingServer:
    """rping ``-s``: serve one client until it disconnects.

    Returns the server logic (``.pings``, ``.error``).

    :raises WaitTimeoutError: ``timeout`` (for the whole run) passed.
    """
    deadline = deadline_after(timeout)
    pd = ProtectionDomain()
    logic = RpingServer(pd, size=max(size, MIN_SIZE))
    cq = CompletionQueue()
    with listen(host, port, pd=pd, config=config, setup=logic.setup) as listener:
        if on_listen is not None:
            on_listen(listener.port)
        qp = listener.accept(timeout=_remaining(deadline), send_cq=cq, recv_cq=cq)
    try:
        if on_connect is not None:
            on_connect(qp)
        while logic.error is None and not logic.finished:
            completion = cq.wait(timeout=_remaining(deadline))
            lines = logic.handle(completion)
            if on_completion is not None:
                on_completion(completion, lines)
    except ConnectionTerminatedError:
        pass  # the client went away; the logic says whether that was the end
    finally:
        qp.close(timeout=_remaining(deadline))
    if qp.terminate is not None and logic.error is None:
        logic.error = f"terminated: {qp.end_reason}"
    return logic
