"""VI/TCP with blocking calls: :func:`connect`, :class:`VitcpListener`, :class:`VitcpEndpoint`.

A thin shell around :class:`~iwarp.vitcp.connection.VitcpConnection` and
what the asyncio adapter shares (:class:`~iwarp.vitcp.front.ViFront`,
:mod:`iwarp.vitcp.listener`),
driven by the caller's thread (:mod:`iwarp.sync._driver`); each call that
waits takes ``timeout`` (seconds) and raises
:class:`~iwarp.sync.WaitTimeoutError` when it runs out. A listener owns
one TCP port; :meth:`VitcpListener.accept` answers connections that call
another discriminator with ConnectNoMatch (§2.2.2.2.1) and goes on
waiting. Urgent data (§3.7) is never sent (allowed: the marking is a MAY);
received urgent octets stay in the stream (SO_OOBINLINE). Usage: docs/sync.md.
"""

from __future__ import annotations

import contextlib
import socket
import time

from iwarp._typing import Buffer
from iwarp.sockets import vitcp_setup
from iwarp.sync._calls import (
    BusyPolled,
    CloseOnExit,
    TcpListener,
    WaitTimeoutError,
    clock,
    deadline_after,
    open_tcp,
)
from iwarp.sync._driver import Driver
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError, VitcpRejectedError
from iwarp.vitcp.events import (
    Connected,
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


class VitcpEndpoint(ViFront, BusyPolled, CloseOnExit):
    """A VI on one TCP connection: post descriptors, send, RDMA, receive
    (§3.2-§3.4). Made by :func:`connect` and :meth:`VitcpListener.accept`.

    What the VI keeps is :class:`~iwarp.vitcp.front.ViFront`'s; this drives
    its connection in the caller's thread until what a call waits for is
    there."""

    _driver: Driver

    def __init__(self, sock: socket.socket, core: VitcpConnection, keep_posted: int = 0) -> None:
        super().__init__(core, keep_posted=keep_posted)
        vitcp_setup(sock, send_urgent=False)  # urgent data is never sent (module docstring)
        self._driver = Driver(sock, core, self.dispatch)
        self.open(clock(), 0)
        self.applied()

    def fileno(self) -> int:
        return self._driver.fileno()

    def _polled(self) -> Driver:
        return self._driver

    def pending_notices(self) -> list[Event]:
        """Other events received so far (RDMA Write received, read served,
        remote error), without waiting (what the kernel holds is read first)."""
        self._driver.wait(clock())
        return super().pending_notices()

    # -- posting -----------------------------------------------------------------------

    def _await(self, number: int, timeout: float | None, what: str) -> Event:
        self._driver.flush()
        self._driver.run_until(lambda: self.completion_ready(number), deadline_after(timeout), what)
        return self.take_completion(number)

    def send(
        self,
        data: Buffer | LocalBuffer,
        *,
        immediate: int | None = None,
        timeout: float | None = None,
    ) -> SendCompleted:
        """Send a message and wait for its descriptor to complete."""
        number = self.post_send(data, immediate=immediate)
        event = self._await(number, timeout, f"Send {number}")
        assert isinstance(event, SendCompleted)
        return event

    def rdma_write(
        self,
        data: Buffer | LocalBuffer,
        *,
        remote_address: int,
        memory_handle: int,
        immediate: int | None = None,
        timeout: float | None = None,
    ) -> SendCompleted:
        """RDMA Write into the peer's registered memory."""
        number = self.post_rdma_write(
            data, remote_address=remote_address, memory_handle=memory_handle, immediate=immediate
        )
        event = self._await(number, timeout, f"RDMA Write {number}")
        assert isinstance(event, SendCompleted)
        return event

    def rdma_read(
        self,
        *,
        local: ViMemoryRegion,
        local_address: int | None = None,
        remote_address: int,
        memory_handle: int,
        length: int,
        timeout: float | None = None,
    ) -> RdmaReadCompleted:
        """RDMA Read from the peer into ``local`` (at its start by default)."""
        number = self.post_rdma_read(
            local=local,
            local_address=local_address,
            remote_address=remote_address,
            memory_handle=memory_handle,
            length=length,
        )
        event = self._await(number, timeout, f"RDMA Read {number}")
        assert isinstance(event, RdmaReadCompleted)
        return event

    # -- receiving ------------------------------------------------------------------------

    def receive(self, *, timeout: float | None = None) -> MessageReceived:
        """The next Send message.

        :raises VitcpClosedError: the VI ended first.
        :raises WaitTimeoutError: nothing arrived in time.
        """
        self._driver.run_until(self.receive_ready, deadline_after(timeout), "a message")
        return self.take_message()

    def next_notice(self, *, timeout: float | None = None) -> Event:
        """The next other event (RDMA Write received, read served, remote error)."""
        self._driver.run_until(self.notice_ready, deadline_after(timeout), "a notice")
        return self.take_notice()

    # -- closing --------------------------------------------------------------------------

    def close(self, *, timeout: float | None = 5.0) -> None:
        """VipDisconnect: send what is queued (at most ``timeout`` seconds), close TCP."""
        driver = self._driver
        if self.core.state is not State.DISCONNECTED:
            self.core.close()
        with contextlib.suppress(WaitTimeoutError):
            driver.send_all(deadline_after(timeout), "the close")
        driver.close()

    def wait_closed(self, *, timeout: float | None = None) -> VitcpClosedError | None:
        """Wait until the peer or an error ends the VI; returns why."""
        self._driver.run_until(lambda: self._driver.closed, deadline_after(timeout), "the close")
        return self.close_reason

    def abort(self) -> None:
        """Close at once (RST), dropping unsent data."""
        self._driver.abort()


def connect(
    host: str,
    port: int,
    remote_discriminator: bytes = b"",
    *,
    config: VitcpConfig | None = None,
    keep_posted: int = 0,
    timeout: float | None = None,
    local_address: tuple[str, int] | None = None,
) -> VitcpEndpoint:
    """VipConnectRequest (§4.2): set up TCP, exchange CE segments.

    With ``config.peer_to_peer`` a ConnectNoMatch means the peer is not
    waiting yet; we retry until ``config.connect_timeout`` (§4). ``timeout``
    bounds the whole call as well.

    :raises VitcpRejectedError: ConnectReject or ConnectNoMatch.
    :raises VitcpClosedError: TCP failed or establishment timed out.
    :raises WaitTimeoutError: ``timeout`` passed first.
    """
    config = config or VitcpConfig()
    core = start_connect(config, remote_discriminator, clock(), keep_posted=keep_posted)
    user_deadline = deadline_after(timeout)
    retry = PeerRetry(config, clock())
    while True:
        try:
            sock = open_tcp(host, port, _earlier(retry.deadline, user_deadline), local_address)
        except WaitTimeoutError:
            if user_deadline is not None and clock() >= user_deadline:
                raise
            raise retry.timed_out(core, clock()) from None
        except OSError as exc:
            raise retry.tcp_failed(core, clock(), exc) from exc
        endpoint = VitcpEndpoint(sock, core, keep_posted)
        driver = endpoint._driver
        try:
            driver.run_until(endpoint.settled, user_deadline, "VI/TCP connection establishment")
        except BaseException:
            driver.close()
            raise
        outcome = endpoint.outcome
        if isinstance(outcome, Connected):
            return endpoint
        driver.close()
        if outcome is None:
            raise endpoint.closed_error()
        # Rejected, or ReconnectNeeded: a new TCP connection after the shared
        # schedule's pause (§4.2, §4).
        at = retry.after(core, clock(), outcome, host, port)
        if user_deadline is not None and at >= user_deadline:
            raise WaitTimeoutError("timed out waiting for the peer to accept")
        time.sleep(max(at - clock(), 0.0))


def _earlier(a: float, b: float | None) -> float:
    return a if b is None else min(a, b)


class VitcpListener:
    """The passive side: one TCP port, VIs told apart by discriminator
    (§2.2.2.2.1, :class:`~iwarp.vitcp.listener.Demultiplexer`)."""

    def __init__(self, host: str | None, port: int, *, config: VitcpConfig | None = None) -> None:
        self.config = config or VitcpConfig()
        self._demux: Demultiplexer[None] = Demultiplexer(self.config)
        self._tcp = TcpListener(host, port)

    @property
    def port(self) -> int:
        return self._tcp.address[1]

    @property
    def host(self) -> str:
        return self._tcp.address[0]

    def accept(
        self,
        discriminator: bytes = b"",
        *,
        config: VitcpConfig | None = None,
        keep_posted: int = 0,
        timeout: float | None = None,
    ) -> VitcpEndpoint:
        """VipConnectWait + VipConnectAccept for one connection.

        Connections that call another discriminator get ConnectNoMatch
        (§4.3) while this waits; one connection's establishment runs at a
        time, the others wait in the backlog.

        :raises VitcpRejectedError: the caller's attributes do not match ours.
        :raises WaitTimeoutError: no matching connection in time.
        """
        deadline = deadline_after(timeout)
        offer = self._demux.offer(discriminator, None, config=config, keep_posted=keep_posted)
        try:
            while True:
                endpoint = self._next_request(deadline)
                if endpoint is None:
                    continue  # closed or timed out before its ConnectRequest
                request = endpoint.take_request()
                assert request is not None
                routed = self._demux.route(endpoint.core, request)
                driver = endpoint._driver
                driver.flush()  # ConnectAccept, ConnectReject or ConnectNoMatch
                if routed.offer is None:
                    driver.close()
                    continue
                if not routed.accepted:
                    driver.close()
                    raise VitcpRejectedError(no_match=False)
                endpoint.keep_posted = keep_posted
                return endpoint
        finally:
            self._demux.withdraw(offer)

    def _next_request(self, deadline: float | None) -> VitcpEndpoint | None:
        """The next TCP connection, once its ConnectRequest arrived."""
        sock = self._tcp.accept(deadline)
        endpoint = VitcpEndpoint(sock, VitcpConnection(self.config, ViRole.PASSIVE))
        driver = endpoint._driver
        try:
            driver.run_until(endpoint.requested, deadline, "a ConnectRequest")
        except BaseException:
            driver.close()
            raise
        if endpoint.request is None:
            driver.close()
            return None
        return endpoint

    def close(self) -> None:
        """Stop listening (accepted VIs stay open)."""
        self._tcp.close()

    def __enter__(self) -> VitcpListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_peer(
    listener: VitcpListener,
    remote_host: str,
    remote_port: int,
    *,
    local_discriminator: bytes,
    remote_discriminator: bytes,
    config: VitcpConfig | None = None,
    keep_posted: int = 0,
    timeout: float | None = None,
) -> VitcpEndpoint:
    """VipConnectPeerRequest (§4): the end with the higher IP address connects
    (retrying on ConnectNoMatch until the peer waits), the other waits on its
    listener. ``timeout`` bounds the call; ``config.connect_timeout`` too.
    """
    remote_ip = socket.getaddrinfo(remote_host, remote_port, type=socket.SOCK_STREAM)[0][4][0]
    config, role = peer_setup(
        config, listener.host, str(remote_ip), local_discriminator, remote_discriminator
    )
    if role is ViRole.ACTIVE:
        return connect(
            remote_host,
            remote_port,
            remote_discriminator,
            config=config,
            keep_posted=keep_posted,
            timeout=timeout,
            local_address=(listener.host, 0),
        )
    limit = config.connect_timeout if timeout is None else min(timeout, config.connect_timeout)
    return listener.accept(
        local_discriminator, config=config, keep_posted=keep_posted, timeout=limit
    )
