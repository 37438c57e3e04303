"""iwarp peers for rdma-core example programs, so they can run against iwarp.

``rping`` has ``iwarp ping``. These cover the exchanges of two more
librdmacm examples, over :mod:`iwarp.asyncio.rdma` (RDMAP Sends):

* ``ucmatose`` (cmatose.c): the server waits until every one of its
  ``-c`` connections is established, then sends ``-C`` messages of ``-S``
  octets on each; the client receives them all, then sends as many back; the
  server receives them and disconnects every connection, which the client
  waits for (it never disconnects first). :func:`ucmatose_server` and
  :func:`ucmatose_client` play either side.
* ``rdma_client`` / ``rdma_server`` (rdma_client.c): the client sends one
  message of 16 octets and waits for one back. :func:`echo_server` sends each
  received message back.

MPA note: the ucmatose server sends first. RFC 5044 §7.1.2 makes a Responder
wait for the Initiator's first FPDU before sending, so an iwarp *server* for
ucmatose needs the RFC 6581 peer-to-peer mode (the RTR is that first FPDU):
against siw's default build (no peer-to-peer) it waits forever, by design.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from iwarp.asyncio.rdma import ConnectionTerminatedError, QueuePair, connect, serve
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig


@dataclass(slots=True)
class PeerResult:
    """What a peer did: connections that completed the exchange, messages, errors."""

    connections: int = 0
    sent: int = 0
    received: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _payload(size: int, index: int) -> bytes:
    return bytes((index + i) & 0xFF for i in range(size))


async def _send_messages(qp: QueuePair, result: PeerResult, count: int, size: int) -> None:
    """ucmatose's messages: ``count`` Sends of ``size`` octets."""
    for i in range(count):
        await qp.send(_payload(size, i))
        result.sent += 1


async def _receive_messages(qp: QueuePair, result: PeerResult, count: int) -> None:
    for _ in range(count):
        await qp.receive()
        result.received += 1


async def _until_done(
    done: asyncio.Event, timeout: float, result: PeerResult, progress: Callable[[], str]
) -> None:
    """Wait for ``done``; after ``timeout`` record what ``progress`` says was reached."""
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        result.errors.append(progress())


async def ucmatose_client(
    host: str,
    port: int,
    *,
    connections: int,
    count: int,
    size: int,
    config: MpaConfig | None = None,
    timeout: float = 60.0,
    stagger: float = 0.05,
) -> PeerResult:
    """Open ``connections`` (``stagger`` seconds apart) to a ``ucmatose`` server, play its client.

    The connections are all open at once: the server sends only when every
    one is established.
    """
    result = PeerResult()

    async def one(index: int) -> None:
        # ucmatose's own client starts its connections one event at a time;
        # a burst of simultaneous SYNs through qemu's user networking loses some.
        await asyncio.sleep(index * stagger)
        qp = await connect(
            host,
            port,
            config=config,
            receive_buffers=max(count, 1),
            receive_size=max(size, 1),
        )
        try:
            await _receive_messages(qp, result, count)
            await _send_messages(qp, result, count, size)
            await qp.drain()
            # The server disconnects; ucmatose's client only answers that.
            await qp.closed
            result.connections += 1
        except (IwarpError, OSError) as exc:
            result.errors.append(f"connection {index}: {exc}")
        finally:
            if not qp.closed.done():
                qp.abort()

    await _gather_with_timeout([one(i) for i in range(connections)], timeout, result)
    return result


async def ucmatose_server(
    host: str,
    port: int,
    *,
    connections: int,
    count: int,
    size: int,
    config: MpaConfig | None = None,
    timeout: float = 60.0,
) -> PeerResult:
    """Serve ``connections`` ``ucmatose`` clients as its server does, then return."""
    result = PeerResult()
    established: list[QueuePair] = []
    all_in = asyncio.Event()
    done = asyncio.Event()
    finished = 0

    async def handler(qp: QueuePair) -> None:
        nonlocal finished
        established.append(qp)
        if len(established) == connections:
            all_in.set()
        try:
            await all_in.wait()
            await _send_messages(qp, result, count, size)
            await _receive_messages(qp, result, count)
            result.connections += 1
        except (IwarpError, OSError) as exc:
            result.errors.append(f"connection {len(established)}: {exc}")
        finally:
            finished += 1
            if finished == connections:
                done.set()
        # serve() closes the queue pair (our disconnect) when the handler returns.

    server = await serve(
        handler,
        host,
        port,
        config=config,
        receive_buffers=max(count, 1),
        receive_size=max(size, 1),
    )
    async with server:
        await _until_done(
            done,
            timeout,
            result,
            lambda: (
                f"after {timeout:.0f} s: {len(established)} of {connections} connections, "
                f"{result.sent} messages sent, {result.received} received"
            ),
        )
        await asyncio.sleep(0.2)  # let the handlers' closes go out
    return result


async def echo_server(
    host: str,
    port: int,
    *,
    messages: int,
    config: MpaConfig | None = None,
    size: int = 1 << 16,
    timeout: float = 60.0,
) -> PeerResult:
    """Send every received message back until ``messages`` were echoed."""
    result = PeerResult()
    done = asyncio.Event()

    async def handler(qp: QueuePair) -> None:
        try:
            while result.sent < messages:
                data = await qp.receive()
                result.received += 1
                await qp.send(data)
                result.sent += 1
            await qp.drain()
            result.connections += 1
        except ConnectionTerminatedError:
            pass
        except (IwarpError, OSError) as exc:
            result.errors.append(str(exc))
        if result.sent >= messages or result.errors:
            done.set()
        # Let the client disconnect first (rdma_client does).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(qp.closed), 5.0)

    server = await serve(handler, host, port, config=config, receive_buffers=4, receive_size=size)
    async with server:
        await _until_done(
            done,
            timeout,
            result,
            lambda: f"{result.sent} of {messages} messages echoed after {timeout:.0f} s",
        )
        await asyncio.sleep(0.5)
    return result


async def _gather_with_timeout(
    jobs: list[Coroutine[Any, Any, None]], timeout: float, result: PeerResult
) -> None:
    tasks = [asyncio.ensure_future(j) for j in jobs]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        result.errors.append(f"{len(pending)} connections unfinished after {timeout:.0f} s")
    for task in done:
        exc = task.exception()
        if exc is not None:
            result.errors.append(f"{type(exc).__name__}: {exc}")
