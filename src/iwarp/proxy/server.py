"""The asyncio adapter of :class:`~iwarp.proxy.core.ProxyConnection`.

It holds two TCP legs per connection (the Initiator's, accepted; the
Responder's, opened to the target), hands what each reads to the core and
does what the core says: writes, FINs, resets, the core's timer. Reading
from an end pauses while the core holds its output (a delay or stall) or
while the other leg's transport has more than its high-water mark waiting,
so a connection holds at most what one read brings besides one FPDU.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from iwarp.analyze.pcapng import PcapngWriter, TcpFlow
from iwarp.analyze.records import Record
from iwarp.proxy.core import Close, ProxyConnection, Role, Send, Startup
from iwarp.proxy.spec import Fault

__all__ = ["ProxyOptions", "ProxyServer"]

#: Write-side high-water mark of a leg: above it the other end is not read.
HIGH_WATER: Final = 256 * 1024
_LINGER_RESET: Final = struct.pack("ii", 1, 0)


@dataclass(slots=True)
class ProxyOptions:
    """What ``iwarp proxy`` is told: where to connect, which faults, its bounds."""

    target: tuple[str, int]
    faults: list[Fault] = field(default_factory=list)
    #: Connections at once; more are refused (closed at accept).
    max_connections: int = 64
    #: Seconds without a octet either way before a connection is closed (None: never).
    idle_timeout: float | None = 300.0
    #: Seconds to wait for the target's TCP connect.
    connect_timeout: float = 10.0
    #: Whether every FPDU's record goes to ``on_record`` (False: frames,
    #: errors, notes and applied faults only; FPDUs are still counted).
    fpdu_records: bool = True
    #: How connections start: Request/Reply, or culley-02's framing without frames.
    startup: Startup = "rfc"
    #: Whether the ULPDUs are DDP segments (False: ``--raw-ulp``).
    ddp: bool = True


class _Leg(asyncio.Protocol):
    """One TCP connection of a proxied pair."""

    def __init__(self, session: _Session, role: Role) -> None:
        self.session = session
        self.role = role
        self.transport: asyncio.Transport | None = None
        self.write_paused = False
        self.read_paused = False
        self.eof_sent = False
        self.got_eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: trust the type.
        transport = cast("asyncio.Transport", transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session.leg_made(self)

    def data_received(self, data: bytes) -> None:
        self.session.received(self.role, data)

    def eof_received(self) -> bool:
        self.got_eof = True
        self.session.ended(self.role, "close")
        if self.eof_sent and self.transport is not None:
            self.transport.close()  # both ways ended: nothing more to say
        return True  # keep writing toward this end until the other side ends

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if exc is not None and not self.got_eof:
            self._salvage()
        if not self.got_eof:
            self.session.ended(self.role, "reset" if exc is not None else "close")
        self.session.leg_lost(self)

    def _salvage(self) -> None:
        """Octets that arrived before the reset and were not read yet.

        A reset that a write runs into ends the transport without reading
        what the kernel still holds, and that is often the very thing that
        explains the reset: a peer's Terminate, sent just before it closed
        (RFC 5040 §5.4). The socket is still open here on asyncio's loop;
        a read of a non-blocking socket gives that data, then the error.
        At most :data:`HIGH_WATER` octets."""
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        fd = sock.fileno() if sock is not None else -1
        left = HIGH_WATER
        with contextlib.suppress(OSError, ValueError):
            while fd >= 0 and left > 0:
                data = os.read(fd, min(left, 1 << 16))
                if not data:
                    return
                left -= len(data)
                self.session.received(self.role, data)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.session.steer()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.session.steer()


class _Session:
    """One connection: its core, its two legs, its capture flows, its timer."""

    def __init__(self, server: ProxyServer, index: int) -> None:
        self.server = server
        self.loop = server.loop
        self.index = index
        self.core: ProxyConnection | None = None
        self.legs: dict[Role, _Leg] = {}
        self.flows: dict[Role, TcpFlow] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.pending: list[bytes] = []
        self.finished = False

    # -- legs ------------------------------------------------------------------------

    def leg_made(self, leg: _Leg) -> None:
        self.legs[leg.role] = leg
        if leg.role == "initiator":
            # What arrives before the target answers waits in ``pending`` (no
            # pause here: uvloop starts reading after connection_made anyway).
            self.loop.create_task(self._open_target())
            return
        self._start()

    async def _open_target(self) -> None:
        host, port = self.server.options.target
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: _Leg(self, "responder"), host, port),
                self.server.options.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            self.server.refused(self, f"cannot reach {host}:{port}: {str(exc) or 'timed out'}")
            leg = self.legs["initiator"]
            if leg.transport is not None:
                leg.transport.close()
            self.finished = True
            return

    def _start(self) -> None:
        server = self.server
        now = self.loop.time()
        ini, res = self.legs["initiator"], self.legs["responder"]
        addresses: dict[Role, tuple[str, int]] = {
            "initiator": _address(ini, "peername"),
            "responder": _address(res, "peername"),
        }
        self.core = ProxyConnection(
            self.index,
            server.options.faults,
            now,
            addresses=addresses,
            idle_timeout=server.options.idle_timeout,
            epoch=time.time() - now,
            fpdu_records=server.options.fpdu_records,
            startup=server.options.startup,
            ddp=server.options.ddp,
        )
        writer = server.capture
        if writer is not None:
            self.flows["initiator"] = TcpFlow(
                writer,
                _address(ini, "sockname"),
                addresses["initiator"],
                initiator=False,
            )
            self.flows["responder"] = TcpFlow(
                writer,
                _address(res, "sockname"),
                addresses["responder"],
                initiator=True,
            )
        pending, self.pending = self.pending, []
        for data in pending:
            self.received("initiator", data)
        self._after()

    def leg_lost(self, leg: _Leg) -> None:
        if all(each.lost for each in self.legs.values()) and len(self.legs) == 2:
            self._finish()
        elif self.core is None and leg.role == "initiator":
            self.finished = True
            self.server.forget(self)

    # -- into the core ---------------------------------------------------------------

    def received(self, role: Role, data: bytes) -> None:
        core = self.core
        if core is None:
            self.pending.append(data)
            if sum(map(len, self.pending)) > HIGH_WATER and role in self.legs:
                transport = self.legs[role].transport
                if transport is not None:
                    transport.pause_reading()
                    self.legs[role].read_paused = True
            return
        flow = self.flows.get(role)
        if flow is not None:
            flow.received(data)
        core.receive(role, data, self.loop.time())
        self._after()

    def ended(self, role: Role, how: Literal["close", "reset"]) -> None:
        if self.core is None:
            return
        self.core.end(role, how, self.loop.time())
        self._after()

    def _on_timer(self) -> None:
        self.timer = None
        if self.core is not None:
            self.core.handle_timer(self.loop.time())
            self._after()

    # -- out of the core ----------------------------------------------------------

    def _after(self) -> None:
        core = self.core
        if core is None:
            return
        for record in core.take_records():
            self.server.on_record(core, record)
        for item in core.take_output():
            leg = self.legs.get(item.to)
            transport = leg.transport if leg is not None else None
            if leg is None or transport is None or leg.lost or transport.is_closing():
                continue
            if isinstance(item, Send):
                if leg.eof_sent:
                    continue
                transport.write(item.data)
                flow = self.flows.get(item.to)
                if flow is not None:
                    flow.sent(item.data)
            elif isinstance(item, Close):
                self._close(leg, transport, item.how)
        self.steer()
        self._arm()

    def _close(self, leg: _Leg, transport: asyncio.Transport, how: str) -> None:
        if how == "rst":
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            transport.abort()
        elif how == "fin" and not leg.got_eof and transport.can_write_eof():
            leg.eof_sent = True
            transport.write_eof()
        else:  # the end already closed its side, or "close": all is said
            leg.eof_sent = True
            transport.close()

    def steer(self) -> None:
        """Pause or resume reading each end (core holds, the other leg's backlog)."""
        core = self.core
        if core is None:
            return
        for role, leg in self.legs.items():
            other = self.legs.get("responder" if role == "initiator" else "initiator")
            pause = core.reading_paused(role) or (other is not None and other.write_paused)
            transport = leg.transport
            if transport is None or leg.lost or transport.is_closing() or pause == leg.read_paused:
                continue
            leg.read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _arm(self) -> None:
        core = self.core
        if core is None:
            return
        when = core.get_timer()
        if self.timer is not None:
            # An earlier timer may stay: the core answers a call before its
            # deadline with nothing, and the timer is armed again after it
            # (the idle deadline moves with every read: no re-arming per read).
            if when is not None and self.timer.when() <= when:
                return
            self.timer.cancel()
            self.timer = None
        if when is not None and not self.finished:
            self.timer = self.loop.call_at(when, self._on_timer)

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for flow in self.flows.values():
            flow.close()
        self.server.finished(self)

    def close_now(self) -> None:
        """Close both legs (the proxy is stopping)."""
        for leg in self.legs.values():
            if leg.transport is not None and not leg.lost:
                leg.transport.close()


def _address(leg: _Leg, which: str) -> tuple[str, int]:
    transport = leg.transport
    value = transport.get_extra_info(which) if transport is not None else None
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return ("?", 0)


class ProxyServer:
    """Accepts connections and proxies each to the target.

    ``on_record`` gets every decode record (with its connection: its
    :meth:`~ProxyConnection.where` places it), ``on_summary`` each ended
    connection's summary record, ``on_refused`` a record for a connection
    that was not proxied (over the limit, target unreachable).
    """

    def __init__(
        self,
        options: ProxyOptions,
        *,
        on_record: Callable[[ProxyConnection, Record], None] | None = None,
        on_summary: Callable[[dict[str, object]], None] | None = None,
        on_refused: Callable[[dict[str, object]], None] | None = None,
        capture: PcapngWriter | None = None,
    ) -> None:
        self.options = options
        self._on_record = on_record
        self._on_summary = on_summary
        self._on_refused = on_refused
        self.capture = capture
        self.loop = asyncio.get_running_loop()
        self.sessions: dict[int, _Session] = {}
        self.count = 0
        self.refused_count = 0
        self.summaries: list[dict[str, object]] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str | None, port: int) -> tuple[str, int]:
        """Listen on ``host:port``; returns the address bound (port 0: any)."""
        self.server = await self.loop.create_server(self._accept, host, port, reuse_address=True)
        sockets = self.server.sockets
        name = sockets[0].getsockname() if sockets else ("?", port)
        return str(name[0]), int(name[1])

    def _accept(self) -> asyncio.Protocol:
        self.count += 1
        session = _Session(self, self.count)
        if len(self.sessions) >= self.options.max_connections:
            self.refused(session, f"connection limit {self.options.max_connections} reached")
            return _Refused()
        self.sessions[session.index] = session
        return _Leg(session, "initiator")

    def on_record(self, core: ProxyConnection, record: Record) -> None:
        if self._on_record is not None:
            self._on_record(core, record)

    def refused(self, session: _Session, why: str) -> None:
        self.refused_count += 1
        self.sessions.pop(session.index, None)
        if self._on_refused is not None:
            self._on_refused({"type": "refused", "connection": session.index, "reason": why})

    def forget(self, session: _Session) -> None:
        self.sessions.pop(session.index, None)

    def finished(self, session: _Session) -> None:
        self.sessions.pop(session.index, None)
        if session.core is None:
            return
        summary = session.core.summary()
        self.summaries.append(summary)
        if self._on_summary is not None:
            self._on_summary(summary)

    def open_summaries(self) -> list[dict[str, object]]:
        """Summaries of the connections still open (for Ctrl-C)."""
        return [s.core.summary() for s in self.sessions.values() if s.core is not None]

    async def close(self) -> None:
        """Stop listening and close every connection."""
        for session in list(self.sessions.values()):
            session.close_now()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class _Refused(asyncio.Protocol):
    """A connection over the limit: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
