"""VI/TCP over asyncio: :func:`connect`, :class:`VitcpListener`, :class:`VitcpEndpoint`.

A thin shell around :class:`~iwarp.vitcp.connection.VitcpConnection`: what
a VI keeps and its calls that never wait are
:class:`~iwarp.vitcp.front.ViFront`'s, which VI a connection goes to
(§2.2.2.2.1) and when a peer-to-peer connect retries
:mod:`iwarp.vitcp.listener`'s; this module adds the calls that wait and
sends urgent octets with MSG_OOB where §3.7 allows it. Usage and urgent
data: docs/vitcp.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from iwarp._typing import Buffer
from iwarp.asyncio.driver import CoreDriver, wait_until
from iwarp.asyncio.server import run_handler
from iwarp.sockets import LISTEN_BACKLOG, send_urgent, urgent_pointer_exact, vitcp_setup
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError, VitcpRejectedError
from iwarp.vitcp.events import (
    Connected,
    ConnectionRequested,
    Event,
    MessageReceived,
    RdmaReadCompleted,
    SendCompleted,
)
from iwarp.vitcp.front import ViFront
from iwarp.vitcp.handshake import State
from iwarp.vitcp.listener import Demultiplexer, PeerRetry, peer_setup, start_connect
from iwarp.vitcp.memory import LocalBuffer, ViMemoryRegion

__all__ = [
    "VitcpClosedError",
    "VitcpEndpoint",
    "VitcpListener",
    "VitcpRejectedError",
    "connect",
    "connect_peer",
]


class _UrgentDriver(CoreDriver):
    """The asyncio driver, sending a segment's urgent octet with MSG_OOB
    (§3.7) when nothing is queued ahead of it."""

    core: VitcpConnection

    def __init__(self, front: ViFront) -> None:
        super().__init__(front)
        #: Segments whose first octet went as TCP urgent data.
        self.urgent_sent = 0
        self._oob: socket.socket | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A duplicate to send MSG_OOB with (asyncio's transport cannot).
        sock = transport.get_extra_info("socket")
        self._oob = vitcp_setup(sock, send_urgent=urgent_pointer_exact())
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._oob is not None:
            self._oob.close()
            self._oob = None
        super().connection_lost(exc)

    def flush(self) -> None:
        if self._oob is None:
            super().flush()  # no urgent octets: the plain path
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            self.core.segments_to_send()
            return
        batch: list[Buffer] = []
        for segment in self.core.segments_to_send():
            if segment.urgent and self._send_urgent(batch, segment.parts):
                batch = []
                continue
            batch.extend(segment.parts)
        self._write_chunks(batch)
        self.handle_events(self.core.take_events())
        if self.core.must_close:
            self.close()
        self._arm_timer()

    def _send_urgent(self, batch: list[Buffer], parts: list[Buffer]) -> bool:
        """Send the segment's first octet with MSG_OOB (§3.7), if nothing is
        queued ahead of it; False to send it normally."""
        transport = self.transport
        assert transport is not None and self._oob is not None
        self._write_chunks(batch)
        if transport.get_write_buffer_size():
            return False
        sent, rest = send_urgent(self._oob, parts)
        if sent:
            self.urgent_sent += 1
        transport.write(rest)
        return True


def _retrieved(future: asyncio.Future[Event]) -> None:
    """Mark a completion's error retrieved (no "exception was never retrieved")."""
    if not future.cancelled():
        future.exception()


class VitcpEndpoint(ViFront):
    """A connected VI: post descriptors, send, RDMA, receive (§3.2-§3.4)."""

    _driver: _UrgentDriver

    def __init__(self, core: VitcpConnection, *, keep_posted: int = 0) -> None:
        super().__init__(core, keep_posted=keep_posted)
        self._driver = _UrgentDriver(self)

    @property
    def urgent_sent(self) -> int:
        """Segments whose first octet went as TCP urgent data."""
        return self._driver.urgent_sent

    @property
    def peer(self) -> object:
        """The peer's address."""
        return self._driver.peer()

    async def _completion(self, number: int) -> Event:
        await wait_until(self._driver, lambda: self.completion_ready(number))
        return self.take_completion(number)

    def send_nowait(
        self, data: Buffer | LocalBuffer, *, immediate: int | None = None, urgent: bool = False
    ) -> asyncio.Future[Event]:
        """Post a Send; the future completes with its :class:`SendCompleted`."""
        number = self.post_send(data, immediate=immediate, urgent=urgent)
        self.applied()
        future = asyncio.ensure_future(self._completion(number))
        future.add_done_callback(_retrieved)  # an error nobody awaits is close_reason's
        return future

    async def send(
        self, data: Buffer | LocalBuffer, *, immediate: int | None = None, urgent: bool = False
    ) -> SendCompleted:
        """Send a message and wait for its descriptor to complete."""
        number = self.post_send(data, immediate=immediate, urgent=urgent)
        self.applied()
        event = await self._completion(number)
        await self._driver.drain()
        assert isinstance(event, SendCompleted)
        return event

    async def rdma_write(
        self,
        data: Buffer | LocalBuffer,
        *,
        remote_address: int,
        memory_handle: int,
        immediate: int | None = None,
    ) -> SendCompleted:
        """RDMA Write into the peer's registered memory."""
        number = self.post_rdma_write(
            data, remote_address=remote_address, memory_handle=memory_handle, immediate=immediate
        )
        self.applied()
        event = await self._completion(number)
        await self._driver.drain()
        assert isinstance(event, SendCompleted)
        return event

    async def rdma_read(
        self,
        *,
        local: ViMemoryRegion,
        local_address: int | None = None,
        remote_address: int,
        memory_handle: int,
        length: int,
    ) -> RdmaReadCompleted:
        """RDMA Read from the peer into ``local`` (at its start by default)."""
        number = self.post_rdma_read(
            local=local,
            local_address=local_address,
            remote_address=remote_address,
            memory_handle=memory_handle,
            length=length,
        )
        self.applied()
        event = await self._completion(number)
        assert isinstance(event, RdmaReadCompleted)
        return event

    async def drain(self) -> None:
        """Wait until TCP takes more (the transport's write buffer drained)."""
        await self._driver.drain()

    async def receive(self) -> MessageReceived:
        """The next Send message; raises :class:`VitcpClosedError` at the end."""
        await wait_until(self._driver, self.receive_ready)
        return self.take_message()

    async def next_notice(self) -> Event:
        """The next other event (RDMA Write received, read served, remote error)."""
        await wait_until(self._driver, self.notice_ready)
        return self.take_notice()

    async def close(self) -> None:
        """VipDisconnect: send what is queued, close TCP, wait for it."""
        if self.core.state is not State.DISCONNECTED:
            self.core.close()
            self.applied()
        self._driver.close()
        await self._driver.closed

    async def wait_closed(self) -> VitcpClosedError | None:
        """Wait until the peer or an error ends the VI; returns why."""
        await self._driver.closed
        return self.close_reason


async def connect(
    host: str,
    port: int,
    remote_discriminator: bytes = b"",
    *,
    config: VitcpConfig | None = None,
    keep_posted: int = 0,
    local_address: tuple[str, int] | None = None,
) -> VitcpEndpoint:
    """VipConnectRequest (§4.2): set up TCP, exchange CE segments.

    With ``config.peer_to_peer`` a ConnectNoMatch means the peer is not
    waiting yet; we retry, backing off, until ``config.connect_timeout``
    (§4, :class:`~iwarp.vitcp.listener.PeerRetry`).
    """
    config = config or VitcpConfig()
    loop = asyncio.get_running_loop()
    core = start_connect(config, remote_discriminator, loop.time(), keep_posted=keep_posted)
    retry = PeerRetry(config, loop.time())
    while True:
        endpoint = VitcpEndpoint(core, keep_posted=keep_posted)
        driver = endpoint._driver
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda d=driver: d, host, port, local_addr=local_address),
                max(retry.deadline - loop.time(), 0.001),
            )
        except TimeoutError:
            raise retry.timed_out(core, loop.time()) from None
        except OSError as exc:
            raise retry.tcp_failed(core, loop.time(), exc) from exc
        await wait_until(driver, endpoint.settled)
        outcome = endpoint.outcome
        if isinstance(outcome, Connected):
            return endpoint
        driver.close()
        if outcome is None:
            raise endpoint.closed_error()
        # Rejected, or ReconnectNeeded: drop this TCP connection (§4.2, §4).
        await driver.closed
        at = retry.after(core, loop.time(), outcome, host, port)
        await asyncio.sleep(at - loop.time())


Handler = Callable[[VitcpEndpoint], Awaitable[None]]


class VitcpListener:
    """The passive side: one TCP port, VIs told apart by discriminator (§2.2.2.2.1,
    :class:`~iwarp.vitcp.listener.Demultiplexer`)."""

    def __init__(self, config: VitcpConfig | None = None) -> None:
        self.config = config or VitcpConfig()
        self._server: asyncio.Server | None = None
        self._demux: Demultiplexer[Any] = Demultiplexer(self.config)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Every connection's VI until its TCP connection is gone.
        self._endpoints: set[VitcpEndpoint] = set()

    @classmethod
    async def start(
        cls, host: str, port: int, *, config: VitcpConfig | None = None
    ) -> VitcpListener:
        """Listen on ``host``:``port`` (port 0 picks one)."""
        listener = cls(config)
        loop = asyncio.get_running_loop()
        listener._server = await loop.create_server(
            listener._driver_factory, host, port, backlog=LISTEN_BACKLOG
        )
        return listener

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def host(self) -> str:
        assert self._server is not None
        return str(self._server.sockets[0].getsockname()[0])

    def _driver_factory(self) -> CoreDriver:
        endpoint = VitcpEndpoint(VitcpConnection(self.config, ViRole.PASSIVE))
        endpoint.on_request = self._on_request
        self._endpoints.add(endpoint)
        endpoint._driver.closed.add_done_callback(lambda _: self._endpoints.discard(endpoint))
        return endpoint._driver

    async def accept(
        self,
        discriminator: bytes = b"",
        *,
        config: VitcpConfig | None = None,
        keep_posted: int = 0,
        timeout: float | None = None,
    ) -> VitcpEndpoint:
        """VipConnectWait + VipConnectAccept for one connection."""
        future: asyncio.Future[VitcpEndpoint] = asyncio.get_running_loop().create_future()
        offer = self._demux.offer(discriminator, future, config=config, keep_posted=keep_posted)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._demux.withdraw(offer)

    def serve(
        self,
        discriminator: bytes,
        handler: Handler,
        *,
        config: VitcpConfig | None = None,
        keep_posted: int = 0,
    ) -> None:
        """Accept every connection for ``discriminator`` and run ``handler``."""
        self._demux.offer(
            discriminator, handler, config=config, keep_posted=keep_posted, every=True
        )

    def _on_request(self, endpoint: VitcpEndpoint, request: ConnectionRequested) -> None:
        core = endpoint.core
        routed = self._demux.route(core, request)
        owner = None if routed.offer is None else routed.offer.owner
        if isinstance(owner, asyncio.Future) and not routed.accepted:
            if not owner.done():
                owner.set_exception(VitcpRejectedError(no_match=False))
            return
        if owner is None or not routed.accepted:
            return
        assert routed.offer is not None and core.params is not None
        endpoint.keep_posted = routed.offer.keep_posted
        if isinstance(owner, asyncio.Future):
            if not owner.done():
                owner.set_result(endpoint)
            return
        task = asyncio.get_running_loop().create_task(self._run(owner, endpoint))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _run(handler: Handler, endpoint: VitcpEndpoint) -> None:
        try:
            await run_handler(handler, endpoint, endpoint.peer, None)
        finally:
            await endpoint.close()

    async def close(self) -> None:
        """Stop listening and close every connection it accepted."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for endpoint in list(self._endpoints):
            endpoint._driver.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def connect_peer(
    listener: VitcpListener,
    remote_host: str,
    remote_port: int,
    *,
    local_discriminator: bytes,
    remote_discriminator: bytes,
    config: VitcpConfig | None = None,
    keep_posted: int = 0,
) -> VitcpEndpoint:
    """VipConnectPeerRequest (§4): the end with the higher IP address connects
    (retrying on ConnectNoMatch), the other waits on its listener."""
    remote_ip = ipaddress.ip_address(
        (await asyncio.get_running_loop().getaddrinfo(remote_host, remote_port))[0][4][0]
    )
    config, role = peer_setup(
        config, listener.host, str(remote_ip), local_discriminator, remote_discriminator
    )
    if role is ViRole.ACTIVE:
        return await connect(
            remote_host,
            remote_port,
            remote_discriminator,
            config=config,
            keep_posted=keep_posted,
            local_address=(listener.host, 0),
        )
    return await listener.accept(
        local_discriminator,
        config=config,
        keep_posted=keep_posted,
        timeout=config.connect_timeout,
    )
