"""``iwarp ping``: a drop-in for rdma-core's ``rping`` over our iWARP stack.

Same flags as rping (``-s``/``-c``, ``-a``, ``-I``, ``-p``, ``-P``, ``-C``,
``-S``, ``-V``, ``-v``, ``-d``) and the same conversation on the wire (see
:mod:`iwarp.apps.rping`), so it talks to real ``rping`` on Linux siw in
both directions. ``-P``: a persistent server (``--sync``: one client after
another; asyncio: each client as it comes) until Ctrl-C or SIGTERM, which
print the clients and pings served. ``-I``: the client's source address.
A client whose server hangs up before the first ping names the likely
cause (its ``-S`` is larger than the server's). Exit status 0 when every
ping completed (and validated); 130/143 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import iwarp.apps.rping_sync as sync_rping
from iwarp.apps.rping import DEFAULT_SIZE, MIN_SIZE, RpingClient, RpingServer
from iwarp.asyncio.rdma import (
    ConnectionTerminatedError,
    ProtectionDomain,
    QueuePair,
    connect,
    serve,
)
from iwarp.cli._args import SIZE_HELP, count, format_octets, format_rate, port, size
from iwarp.cli._capture import add_pcap_option, pcap_capture, sync_pcap_capture
from iwarp.cli._progress import Progress, add_progress_options
from iwarp.cli._report import format_error, unreachable
from iwarp.cli._run import run_blocking_interruptible, run_interruptible
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.wire import RtrFlags
from iwarp.rdmap.work import Completion, WorkOpcode
from iwarp.sockets import is_connect_failure
from iwarp.sync.rdma import QueuePair as SyncQueuePair

#: rping's default port.
DEFAULT_PORT = 7174


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "ping",
        help="rping-compatible RDMA ping-pong (Send, RDMA Read, RDMA Write)",
        description="A drop-in for rdma-core's rping: the client advertises a buffer, the "
        "server RDMA-Reads it and RDMA-Writes it back into the client's sink, once per ping. "
        "Talks to real rping (e.g. on Linux siw).",
    )
    role = parser.add_mutually_exclusive_group(required=True)
    role.add_argument("-s", dest="server", action="store_true", help="server")
    role.add_argument("-c", dest="client", action="store_true", help="client")
    parser.add_argument("-a", dest="address", default=None, help="address (server: bind)")
    parser.add_argument(
        "-I",
        dest="source",
        default=None,
        metavar="ADDRESS",
        help="client: source address to connect from (as rping -I)",
    )
    parser.add_argument(
        "-P",
        dest="persistent",
        action="store_true",
        help="server: persistent, serve client after client until interrupted (as rping -P)",
    )
    parser.add_argument("-p", dest="port", type=port, default=DEFAULT_PORT, help="port (7174)")
    parser.add_argument("-C", dest="count", type=count, default=0, help="pings (0: forever)")
    parser.add_argument(
        "-S",
        dest="size",
        type=size,
        default=DEFAULT_SIZE,
        help=f"ping size ({DEFAULT_SIZE}; {SIZE_HELP})",
    )
    parser.add_argument("-V", dest="validate", action="store_true", help="validate ping data")
    parser.add_argument("-v", dest="verbose", action="store_true", help="print ping data")
    parser.add_argument("-d", dest="debug", action="store_true", help="debug output")
    parser.add_argument("--no-crc", action="store_true", help="do not ask for MPA CRC")
    parser.add_argument("--markers", action="store_true", help="ask for MPA markers")
    parser.add_argument(
        "--rev", type=int, choices=(1, 2), default=2, help="MPA revision to send (2)"
    )
    parser.add_argument(
        "--p2p",
        choices=("write", "read", "send"),
        default=None,
        help="client: RFC 6581 peer-to-peer with this RTR type",
    )
    parser.add_argument(
        "--delay",
        type=float,
        default=0.5,
        help="client: seconds between the MPA Reply and our first message (0.5; "
        "a siw responder may miss an earlier one)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="give up after this many seconds"
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="run on the blocking adapter (iwarp.sync: plain sockets, no event loop)",
    )
    add_pcap_option(parser)
    add_progress_options(parser)
    parser.set_defaults(func=run)


_RTR = {"write": RtrFlags.WRITE, "read": RtrFlags.READ, "send": RtrFlags.SEND}


def _config(args: argparse.Namespace) -> MpaConfig:
    p2p = args.p2p is not None and args.client
    return MpaConfig(
        revision=args.rev,
        crc=not args.no_crc,
        markers=args.markers,
        ird=16,
        ord=16,
        peer_to_peer=p2p,
        rtr_types=_RTR[args.p2p] if p2p else RtrFlags.WRITE | RtrFlags.READ | RtrFlags.SEND,
    )


def _describe(qp: QueuePair | SyncQueuePair) -> str:
    p = qp.params
    rtr = f", RTR {(p.rtr.name or str(int(p.rtr))).lower()}" if p.peer_to_peer and p.rtr else ""
    return (
        f"MPA Rev {p.revision}, CRC {'on' if p.crc else 'off'}, markers "
        f"{'on' if p.markers_send else 'off'}/{'on' if p.markers_receive else 'off'}, "
        f"IRD {p.ird}, ORD {p.ord}, MULPDU {p.mulpdu}{rtr}"
    )


def run(args: argparse.Namespace) -> int:
    if args.size < MIN_SIZE:
        print(f"size {args.size} too small (minimum {MIN_SIZE})", file=sys.stderr)
        return 2
    if args.persistent and not args.server:
        print("iwarp ping: -P is a server option (with -s)", file=sys.stderr)
        return 2
    if args.source is not None and not args.client:
        print("iwarp ping: -I is a client option (with -c); a server binds -a", file=sys.stderr)
        return 2
    tally = _Tally(args.size, persistent=args.persistent)

    def interrupted(why: str) -> None:
        print(f"iwarp ping: interrupted by {why}: {tally.text()}", file=sys.stderr)

    try:
        if args.sync:

            def blocking() -> int:
                with sync_pcap_capture(args.pcap, initiator=args.client):
                    return _sync(args, tally)

            status = run_blocking_interruptible(blocking, interrupted)
        else:
            status = run_interruptible(_captured(args, tally), interrupted)
        if args.debug and status == 0:
            print(tally.text())
        return status
    except (OSError, IwarpError) as exc:
        if args.client and is_connect_failure(exc):
            host = args.address or "127.0.0.1"
            hint = f"start an rping server there, e.g. iwarp ping -s -a {host} -p {args.port}"
            exc_record = unreachable(host, args.port, exc, tried="TCP connect", hint=hint)
            print(format_error("iwarp ping", exc_record), file=sys.stderr)
        else:
            print(f"iwarp ping: {exc}", file=sys.stderr)
        return 1


def _sync(args: argparse.Namespace, tally: _Tally) -> int:
    """The same conversation on iwarp.sync (what ``--sync`` selects)."""

    def connected(qp: SyncQueuePair) -> None:
        if args.debug:
            print(f"{'connected' if args.client else 'accepted'}: {_describe(qp)}", flush=True)

    def completed(completion: Completion, lines: list[str]) -> None:
        # a ping: the client's check of the echo, the server's RDMA Write back
        if args.client:
            tally.pings += sum(line.startswith("ping data") for line in lines)
        elif completion.opcode is WorkOpcode.RDMA_WRITE and completion.ok:
            tally.pings += 1
        if args.debug:
            print(f"{completion.opcode.value} completion: {completion.status.value}")
        for line in lines:
            if (args.verbose and "ping data" in line) or (args.debug and args.server):
                print(line)

    def listening(port: int) -> None:
        if args.debug and not tally.clients:
            print(f"listening on port {port}", flush=True)

    if args.client:
        client = sync_rping.run_client(
            args.address or "127.0.0.1",
            args.port,
            config=_config(args),
            size=args.size,
            count=args.count,
            validate=args.validate,
            first_send_delay=args.delay,
            timeout=args.timeout,
            on_connect=connected,
            on_completion=completed,
            local_address=_source(args),
        )
        return _client_ended(args, client)
    while True:  # -P: the next client, one after another, until interrupted
        server = sync_rping.run_server(
            args.address or "0.0.0.0",
            args.port,
            config=_config(args),
            size=args.size,
            timeout=args.timeout,
            on_listen=listening,
            on_connect=connected,
            on_completion=completed,
        )
        tally.clients += 1
        if server.error is not None:
            print(server.error, file=sys.stderr)
        elif args.debug:
            print(f"{server.pings} pings served; disconnected", flush=True)
        if not args.persistent:
            return 0 if server.error is None else 1


def _source(args: argparse.Namespace) -> tuple[str, int] | None:
    """``-I``: the address to connect from (any port)."""
    return None if args.source is None else (args.source, 0)


def _client_ended(args: argparse.Namespace, client: RpingClient) -> int:
    """The client's exit status; an error names its likely cause."""
    if client.error is not None:
        hint = ""
        if client.pings == 0 and client.error.startswith("disconnected"):
            hint = (
                f" (the server closed the connection before the first ping: most likely "
                f"its buffer is smaller than our -S {client.size}; an rping server refuses "
                f"a larger buffer, so give the server -S {client.size} or more)"
            )
        print(f"{client.error}{hint}", file=sys.stderr)
        return 1
    if args.debug:
        print(f"{client.pings} pings done; disconnected")
    return 0


class _Tally:
    """Pings done (client) or served (server) so far, and since when."""

    def __init__(self, size: int, *, persistent: bool = False) -> None:
        self.size = size
        self.pings = 0
        #: Clients served (a server's; counted and printed with ``-P``).
        self.clients = 0
        self._persistent = persistent
        self._start = time.monotonic()

    def text(self) -> str:
        """The summary: pings, octets moved (each ping: an RDMA Read and an
        RDMA Write of the ping size), elapsed time and rate."""
        seconds = time.monotonic() - self._start
        octets = 2 * self.size * self.pings
        served = f"{self.clients} clients served, " if self._persistent else ""
        return (
            f"{served}{self.pings} pings of {self.size} octets, {format_octets(octets)} moved in "
            f"{seconds:.3f} s, {format_rate(octets, seconds)}"
        )


async def _captured(args: argparse.Namespace, tally: _Tally) -> int:
    # Pings so far on stderr once a run lasts (rping itself is silent).
    progress = Progress(
        lambda: (tally.pings, 2 * tally.size * tally.pings),
        forced=args.progress,
        interval=args.interval,
        label="pings" if args.client else "pings served",
    ).start()
    try:
        async with pcap_capture(args.pcap):
            if args.timeout:
                return await _with_timeout(args, tally)
            return await (_client(args, tally) if args.client else _server(args, tally))
    finally:
        progress.stop()


async def _with_timeout(args: argparse.Namespace, tally: _Tally) -> int:
    work = _client(args, tally) if args.client else _server(args, tally)
    try:
        return await asyncio.wait_for(work, args.timeout)
    except TimeoutError:
        print(f"iwarp ping: timed out after {args.timeout} s", file=sys.stderr)
        return 1


async def _client(args: argparse.Namespace, tally: _Tally) -> int:
    pd = ProtectionDomain()
    client = RpingClient(pd, size=args.size, count=args.count, validate=args.validate)
    qp = await connect(
        args.address or "127.0.0.1",
        args.port,
        pd=pd,
        config=_config(args),
        setup=client.setup,
        first_send_delay=args.delay,
        shared_cq=True,
        local_address=_source(args),
    )
    if args.debug:
        print(f"connected: {_describe(qp)}")
    client.start()
    try:
        while not client.finished and client.error is None:
            completion = await qp.send_cq.wait()
            if args.debug:
                print(f"{completion.opcode.value} completion: {completion.status.value}")
            lines = client.handle(completion)
            tally.pings = client.pings
            for line in lines:
                if args.verbose and line.startswith("ping data"):
                    print(line)
    except ConnectionTerminatedError as exc:
        client.error = client.error or str(exc)
    await qp.close()
    return _client_ended(args, client)


async def _server(args: argparse.Namespace, tally: _Tally) -> int:
    result: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    servers: dict[int, RpingServer] = {}

    def setup(qp: QueuePair) -> None:
        logic = RpingServer(qp.pd, size=max(args.size, MIN_SIZE))
        servers[id(qp)] = logic
        logic.setup(qp)

    async def handler(qp: QueuePair) -> None:
        logic = servers.pop(id(qp))
        if args.debug:
            print(f"accepted: {_describe(qp)}")
        try:
            while logic.error is None and not logic.finished:
                completion = await qp.send_cq.wait()
                if args.debug:
                    print(f"{completion.opcode.value} completion: {completion.status.value}")
                before = logic.pings
                lines = logic.handle(completion)
                tally.pings += logic.pings - before
                for line in lines:
                    if (args.verbose and line.startswith("server ping data")) or args.debug:
                        print(line)
        except ConnectionTerminatedError:
            pass
        if qp.terminate is not None:
            logic.error = logic.error or f"terminated: {qp.end_reason}"
        tally.clients += 1
        if not args.persistent and not result.done():
            result.set_result(0 if logic.error is None else 1)
        if logic.error is not None:
            print(logic.error, file=sys.stderr)
        elif args.debug:
            print(f"{logic.pings} pings served; client disconnected")

    server = await serve(
        handler,
        args.address or "0.0.0.0",
        args.port,
        config=_config(args),
        setup=setup,
        shared_cq=True,
    )
    if args.debug:
        print(f"listening on port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        status = await result
    return status
