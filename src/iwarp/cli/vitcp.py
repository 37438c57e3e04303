"""``iwarp vitcp``: run VI/TCP (draft-dicecco-vitcp-01) between two hosts.

``iwarp vitcp listen`` waits for VI connections on one TCP port;
``iwarp vitcp connect`` opens one and moves ``--count`` messages of
``--size`` octets with Send, RDMA Write or RDMA Read. A short exchange of
control Sends (immediate data ``CONTROL_TAG``, JSON bodies) sets the
transfer up and returns the listener's summary::

    connector -> {"op": ..., "size": S, "count": N}
    listener  -> {"handle": H, "address": A, "length": S}   (a region of S octets)
    ... the transfer ...
    connector -> {"done": true}
    listener  -> its summary
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from iwarp.asyncio.vitcp import (
    VitcpClosedError,
    VitcpEndpoint,
    VitcpListener,
    VitcpRejectedError,
    connect,
)
from iwarp.cli._args import SIZE_HELP, count, port, rate_mib_per_s, size
from iwarp.cli._capture import add_pcap_option, captured
from iwarp.cli._progress import Progress, add_progress_options
from iwarp.cli._report import EXIT_FAILED, RecordPrinter, unreachable
from iwarp.cli._run import run_interruptible
from iwarp.errors import IwarpError
from iwarp.vitcp.config import VitcpConfig
from iwarp.vitcp.events import (
    Event,
    MessageReceived,
    RdmaReadServed,
    RdmaWriteReceived,
    ViCompletionStatus,
)
from iwarp.vitcp.wire import Reliability

#: Immediate data marking the CLI's control messages ("VITC").
CONTROL_TAG = 0x56495443
#: Sends in flight before the connector waits for the oldest completion.
WINDOW = 16
#: Receive descriptors each end keeps posted.
DESCRIPTORS = 32
#: Octets of the region window a connector writes into before the listener
#: hashes it (at least one message).
WRITE_WINDOW_OCTETS = 4 << 20
#: The listener's default bound on the region a connector asks for (16 MiB).
MAX_SIZE = 16 << 20
LEVELS = {
    "unreliable": Reliability.UNRELIABLE,
    "delivery": Reliability.DELIVERY,
    "reception": Reliability.RECEPTION,
}


#: Largest value of the 32-bit length and MTU fields (draft-dicecco-vitcp-01 §3).
_MAX32 = 0xFFFFFFFF


def _ranged_size(low: int, high: int, what: str) -> Callable[[str], int]:
    """A size type for argparse that must lie in ``low..high`` (usage error)."""

    def parse(text: str) -> int:
        value = size(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be from {low} to {high}, not {value}")
        return value

    return parse


def _discriminator(text: str) -> bytes:
    data = text.encode()
    if len(data) > 64:
        raise argparse.ArgumentTypeError(f"at most 64 octets, not {len(data)}")
    return data


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--crc", action="store_true", help="offer the CRC option (draft-dicecco-vitcp-01 §3.6)"
    )
    parser.add_argument(
        "--mtu",
        type=_ranged_size(1, _MAX32, "the MTU"),
        default=32768,
        help=f"largest segment payload to offer (default 32768; {SIZE_HELP})",
    )
    parser.add_argument(
        "--reliability",
        choices=sorted(LEVELS),
        default="delivery",
        help="VI reliability level (default delivery)",
    )
    parser.add_argument(
        "--discriminator",
        type=_discriminator,
        default=b"iwarp",
        help="VI discriminator, at most 64 octets (default 'iwarp')",
    )
    parser.add_argument(
        "--flow-control",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Descriptor Flow Control (draft-dicecco-vitcp-01 §3.3): our Sends wait for the "
        "peer's posted receive descriptors (default on; without it a long run of Sends "
        "outruns the listener's descriptors, which ends the connection)",
    )
    parser.add_argument("--json", action="store_true", help="print summaries as JSON lines")
    add_pcap_option(parser)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "vitcp",
        help="VI/TCP (Internet VI): listen for or open VI connections and move data",
        description="VI/TCP (draft-dicecco-vitcp-01): connection establishment, Send, "
        "RDMA Write and RDMA Read over TCP, with optional CRC and flow control.",
    )
    actions = parser.add_subparsers(dest="vitcp_command", metavar="ACTION", required=True)
    listen = actions.add_parser(
        "listen",
        help="accept VI connections on one port",
        description="Accept VI/TCP connections (passive side, draft-dicecco-vitcp-01 §4.3) "
        "on one TCP port, serve each connector's transfer (Sends, RDMA Writes into a region "
        "it asks for, RDMA Reads from it) and print one summary per connection: messages, "
        "octets, SHA-256, status. Runs until --count messages arrived in total, or until "
        "interrupted (Ctrl-C or SIGTERM: exit 130 or 143).",
    )
    listen.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    listen.add_argument("--port", type=port, default=0, help="TCP port (default 0: any free port)")
    listen.add_argument(
        "--count",
        type=count,
        default=0,
        help="serve connections until this many messages were received in total, "
        "as iwarp listen does (default 0: until interrupted)",
    )
    listen.add_argument(
        "--max-size",
        type=size,
        default=MAX_SIZE,
        metavar="S",
        help=f"largest message a connector may ask for, in octets (default 16MiB; {SIZE_HELP})",
    )
    _common(listen)
    listen.set_defaults(func=run_listen)
    conn = actions.add_parser(
        "connect",
        help="open a VI connection and transfer data",
        description="Open a VI/TCP connection (active side, draft-dicecco-vitcp-01 §4.2) to "
        "an iwarp vitcp listener, move --count messages of --size octets with Send, RDMA "
        "Write or RDMA Read (--op), and print a summary with the SHA-256 of what was sent, "
        "written or read, the rate, and the listener's own summary.",
    )
    conn.add_argument("host", metavar="HOST")
    conn.add_argument("port", metavar="PORT", type=port, help="TCP port of the listener")
    conn.add_argument("--count", type=count, default=1, help="messages to move (default 1)")
    conn.add_argument(
        "--size",
        type=_ranged_size(0, _MAX32, "a message"),
        default=1024,
        help=f"octets per message, below 4G (default 1024; {SIZE_HELP})",
    )
    conn.add_argument(
        "--op", choices=["send", "write", "read"], default="send", help="operation (default send)"
    )
    conn.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="give up connecting after S seconds (default 10; a peer that closes without a "
        "VI/TCP answer is retried, backing off, until then)",
    )
    add_progress_options(conn)
    _common(conn)
    conn.set_defaults(func=run_connect)


def _config(args: argparse.Namespace) -> VitcpConfig:
    discriminator: bytes = args.discriminator
    timeout = {} if getattr(args, "timeout", None) is None else {"connect_timeout": args.timeout}
    return VitcpConfig(
        **timeout,
        reliability=LEVELS[args.reliability],
        mtu=args.mtu,
        crc=args.crc,
        flow_control=args.flow_control,
        discriminator=discriminator,
    )


def payload(index: int, size: int) -> bytes:
    """The deterministic content of message ``index`` (both ends can check it)."""
    seed = index.to_bytes(4, "big")
    block = hashlib.sha256(seed).digest()
    return (block * (size // 32 + 1))[:size]


#: What a listener's hash covers, by the connector's op.
_LISTENER_COVERS = {"send": "received", "write": "written", "read": "served"}
#: What a connector's hash covers, by its op.
_CONNECTOR_COVERS = {"send": "sent", "write": "written", "read": "read"}


def _print(summary: dict[str, Any], as_json: bool) -> None:
    """A summary as one JSON line, or as ``summary: key=value`` lines (the
    listener's summary a connector got back on a line of its own)."""
    out = RecordPrinter(as_json)
    if as_json or not isinstance(summary.get("peer"), dict):
        out.emit(summary)
        return
    out.emit({key: value for key, value in summary.items() if key != "peer"})
    out.emit({"type": "peer", **summary["peer"]})


async def _control(endpoint: VitcpEndpoint, body: dict[str, Any]) -> None:
    await endpoint.send(json.dumps(body).encode(), immediate=CONTROL_TAG)


async def _next_control(endpoint: VitcpEndpoint, received: list[MessageReceived]) -> dict[str, Any]:
    """The peer's next control message (other messages go to ``received``).

    :raises ValueError: it is not a JSON object.
    """
    while True:
        message = await endpoint.receive()
        if message.immediate_data == CONTROL_TAG:
            body = json.loads(message.data)
            if not isinstance(body, dict):
                raise ValueError(f"control message {body!r} is not a JSON object")
            return body
        received.append(message)


# --- listen ---------------------------------------------------------------------------


def _control_request(data: bytes, max_size: int) -> dict[str, Any]:
    """A connector's control message; ValueError says what is wrong with it
    (it comes from the network: the listener must survive anything)."""
    request = json.loads(data)  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    if not isinstance(request, dict):
        raise ValueError("not a JSON object")
    if "op" in request:
        size = request.get("size")
        if type(size) is not int or not 0 <= size <= max_size:
            raise ValueError(f"size {size!r} is not an integer from 0 to {max_size}")
        slots = request.setdefault("slots", 1)
        if type(slots) is not int or not 1 <= slots <= max(1, max_size // max(size, 1)):
            raise ValueError(f"slots {slots!r}: the region would exceed --max-size {max_size}")
    if "written" in request:
        written = request["written"]
        if type(written) is not int or written < 0:
            raise ValueError(f"written {written!r} is not a count")
    return request


@dataclass(slots=True)
class _Tally:
    """What a listener counted on one connection."""

    sends: int = 0
    writes: int = 0
    reads: int = 0
    octets: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return self.sends + self.writes + self.reads

    def write_received(self, notice: RdmaWriteReceived) -> None:
        self.writes += 1
        self.octets += notice.length
        if notice.status is not ViCompletionStatus.SUCCESS:
            self.errors.append(notice.status.value)

    def read_served(self, notice: RdmaReadServed) -> None:
        self.reads += 1
        self.octets += notice.length


#: The notices a listener counts, and how; others (completions of its own
#: sends) are not counted.
_NOTICES: Final[dict[type[Event], Callable[[_Tally, Any], None]]] = {
    RdmaWriteReceived: _Tally.write_received,
    RdmaReadServed: _Tally.read_served,
}


@dataclass(slots=True)
class _Overall:
    """What a listener received over all its connections (for the summary
    an interrupt prints): finished connections plus the one in progress."""

    sha: Any = field(default_factory=hashlib.sha256)
    connections: int = 0
    messages: int = 0
    octets: int = 0
    current: _Tally | None = None

    def summary(self, **extra: object) -> dict[str, Any]:
        messages, octets = self.messages, self.octets
        if self.current is not None:
            messages += self.current.messages
            octets += self.current.octets
        return {
            "type": "summary",
            "role": "listener",
            "connections": self.connections,
            "messages": messages,
            "octets": octets,
            "sha256": self.sha.hexdigest(),
            "sha256_of": "every connection's data, in order",
            **extra,
        }


async def _serve_one(
    endpoint: VitcpEndpoint, max_size: int = MAX_SIZE, overall: _Overall | None = None
) -> dict[str, Any]:
    start = time.perf_counter()
    moved_until = start  # when the last data moved (or the transfer ended)
    overall = overall or _Overall()
    # Of the Sends' payloads, the written data and the data read from us.
    digest = hashlib.sha256()
    tally = overall.current = _Tally()
    summary: dict[str, Any] = {"role": "listener", "status": "ok"}
    memory = bytearray()
    base = 0  # the region's address
    size = 1
    try:
        while True:
            message = await endpoint.receive()
            moved_until = time.perf_counter()
            for notice in endpoint.pending_notices():
                count_notice = _NOTICES.get(type(notice))
                if count_notice is not None:
                    count_notice(tally, notice)
                if isinstance(notice, RdmaReadServed) and notice.address >= base:
                    served = memory[notice.address - base :][: notice.length]
                    digest.update(served)
                    overall.sha.update(served)
            if message.immediate_data != CONTROL_TAG:
                tally.sends += 1
                tally.octets += len(message.data)
                digest.update(message.data)
                overall.sha.update(message.data)
                if message.status is not ViCompletionStatus.SUCCESS:
                    tally.errors.append(message.status.value)
                continue
            try:
                request = _control_request(message.data, max_size)
            except ValueError as exc:
                summary.update(status=f"error: bad control message: {exc}")
                await endpoint.close()
                break
            if "op" in request:
                size = max(1, request["size"])
                memory = bytearray(payload(0, size) * request["slots"])
                region = endpoint.register(memory)  # lives as long as the connection
                base = region.address
                summary["sha256_of"] = _LISTENER_COVERS.get(str(request["op"]), "received")
                reply = {"handle": region.handle, "address": region.address, "length": size}
                await _control(endpoint, reply)
            elif "written" in request:
                # RDMA Writes filled the first slots (placed before this Send
                # arrived, in stream order): hash them before they are reused.
                for slot in range(min(request["written"], len(memory) // size)):
                    digest.update(memory[slot * size : (slot + 1) * size])
                    overall.sha.update(memory[slot * size : (slot + 1) * size])
                await _control(endpoint, {"hashed": request["written"]})
            elif request.get("done"):
                summary.update(
                    messages=tally.messages,
                    octets=tally.octets,
                    sends=tally.sends,
                    writes=tally.writes,
                    reads_served=tally.reads,
                    sha256=digest.hexdigest(),
                    sha256_of=summary.get("sha256_of", "received"),
                    errors=tally.errors,
                )
                await _control(endpoint, summary)
                break
        await endpoint.wait_closed()
    except (VitcpClosedError, IwarpError) as exc:
        summary.update(status=f"error: {exc}")
    summary.setdefault("messages", tally.messages)
    summary.setdefault("octets", tally.octets)
    summary.setdefault("sha256", digest.hexdigest())
    summary.setdefault("sha256_of", "received")
    # Over the time data moved: not the wait for the connector's close.
    seconds = moved_until - start
    summary["seconds"] = round(seconds, 6)
    summary["mib_per_s"] = rate_mib_per_s(tally.octets, seconds)
    overall.current = None
    overall.connections += 1
    overall.messages += tally.messages
    overall.octets += tally.octets
    summary["mtu"] = endpoint.params.mtu
    summary["crc"] = endpoint.params.crc
    summary["reliability"] = endpoint.params.reliability.name.lower()
    return summary


async def _listen(args: argparse.Namespace, overall: _Overall) -> int:
    config = _config(args)
    listener = await VitcpListener.start(args.host, args.port, config=config)
    RecordPrinter(args.json).emit(
        {"type": "listening", "host": listener.host, "port": listener.port}
    )
    received = 0  # messages (Sends, Writes, Reads served) over all connections
    status = 0

    def wait_next() -> asyncio.Future[VitcpEndpoint]:
        return asyncio.ensure_future(listener.accept(config.discriminator, keep_posted=DESCRIPTORS))

    # Two VIs wait at all times (offers are matched in order): a request
    # finding none would be answered ConnectNoMatch (§4.3), and a connector's
    # next connection may come before this side has taken the last one, or
    # its rejection, and offered again.
    pending = deque([wait_next(), wait_next()])
    try:
        while args.count <= 0 or received < args.count:
            waiting = pending.popleft()
            pending.append(wait_next())
            try:
                endpoint = await waiting
            except VitcpRejectedError:
                # §3.3: reliability level or peer-to-peer differ; ConnectReject sent.
                status = 1
                rejected = {"role": "listener", "messages": 0, "octets": 0}
                rejected.update(sha256=hashlib.sha256().hexdigest(), sha256_of="received")
                rejected.update(status="rejected")
                _print({"type": "summary", **rejected}, args.json)
                continue
            summary = await _serve_one(endpoint, args.max_size, overall)
            received += summary["messages"]
            summary["type"] = "summary"
            _print(summary, args.json)
            if summary["status"] != "ok":
                status = 1
    finally:
        for waiting in pending:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, IwarpError, OSError):
                await waiting
        await listener.close()
    return status


def run_listen(args: argparse.Namespace) -> int:
    overall = _Overall()

    def interrupted(why: str) -> None:
        _print(overall.summary(status="interrupted", interrupted=why), args.json)

    return run_interruptible(captured(args.pcap, _listen(args, overall)), interrupted)


# --- connect --------------------------------------------------------------------------


async def _transfer(
    endpoint: VitcpEndpoint, args: argparse.Namespace, live: dict[str, Any] | None = None
) -> dict[str, Any]:
    received: list[MessageReceived] = []
    # Writes go to a window of slots; the listener hashes each window before
    # the next overwrites it, so both ends report the written data's hash.
    slots = max(1, min(args.count, WRITE_WINDOW_OCTETS // max(args.size, 1)))
    request = {"op": args.op, "size": args.size, "count": args.count}
    if args.op == "write":
        request["slots"] = slots
    await _control(endpoint, request)
    target = await _next_control(endpoint, received)
    address, handle = target.get("address"), target.get("handle")
    if type(address) is not int or type(handle) is not int:
        raise ValueError(f"the listener's reply {target!r} names no memory region")
    sent = hashlib.sha256()
    read_digest = hashlib.sha256()
    local = endpoint.register(bytearray(max(1, args.size)))
    failures = 0
    start = time.perf_counter()
    inflight: deque[asyncio.Future[Event]] = deque()
    moved = [0]  # messages handed over so far, for progress and interrupts
    if live is not None:
        live.update(moved=moved, sent=sent, read=read_digest)
    progress = Progress(
        lambda: (moved[0], moved[0] * args.size),
        forced=args.progress,
        quiet=args.json,
        interval=args.interval,
    ).start()
    try:
        for index in range(args.count):
            data = payload(index + 1, args.size)
            if args.op == "send":
                sent.update(data)
                moved[0] = index + 1  # handed over: counted and hashed together
                inflight.append(endpoint.send_nowait(data))
                if len(inflight) >= WINDOW:
                    failures += _failed(await inflight.popleft())
                    await endpoint.drain()
            elif args.op == "write":
                sent.update(data)
                moved[0] = index + 1
                slot = index % slots
                done = await endpoint.rdma_write(
                    data, remote_address=address + slot * args.size, memory_handle=handle
                )
                failures += _failed(done)
                if slot == slots - 1 or index == args.count - 1:
                    await _control(endpoint, {"written": slot + 1})
                    answer = await _next_control(endpoint, received)
                    if answer.get("hashed") != slot + 1:
                        raise ValueError(f"the listener answered {answer!r}, not the written count")
            else:
                done_read = await endpoint.rdma_read(
                    local=local,
                    remote_address=address,
                    memory_handle=handle,
                    length=args.size,
                )
                failures += _failed(done_read)
                read_digest.update(local.view[: args.size])
                moved[0] = index + 1
    finally:
        progress.stop()
    while inflight:
        failures += _failed(await inflight.popleft())
    elapsed = time.perf_counter() - start
    await _control(endpoint, {"done": True})
    peer = await _next_control(endpoint, received)
    octets = args.count * args.size
    covered = read_digest if args.op == "read" else sent
    return {
        "role": "connector",
        "op": args.op,
        "messages": args.count,
        "octets": octets,
        "sha256": covered.hexdigest(),
        "sha256_of": _CONNECTOR_COVERS[args.op],
        "seconds": round(elapsed, 6),
        "mib_per_s": rate_mib_per_s(octets, elapsed),
        "failures": failures,
        "status": "ok" if failures == 0 else "error",
        "peer": peer,
    }


def _failed(event: Event) -> int:
    status = getattr(event, "status", ViCompletionStatus.SUCCESS)
    return 0 if status is ViCompletionStatus.SUCCESS else 1


async def _connect(args: argparse.Namespace, live: dict[str, Any]) -> int:
    config = _config(args)
    out = RecordPrinter(args.json, prog="iwarp vitcp connect")
    try:
        endpoint = await connect(
            args.host,
            args.port,
            config.discriminator,
            config=config,
            keep_posted=DESCRIPTORS,
        )
    except VitcpClosedError as exc:
        if isinstance(exc.__cause__, OSError) or "timed out" in str(exc):
            # Nothing there (refused, no route), or nothing answered in time.
            if isinstance(exc.__cause__, OSError):
                cause: BaseException = exc.__cause__
                tried = "TCP connect"
            else:
                cause = TimeoutError()
                tried = (
                    f"TCP connect and the VI/TCP ConnectRequest for {config.connect_timeout:g} s"
                )
            hint = (
                f"start a VI/TCP listener there, e.g. iwarp vitcp listen --host {args.host} "
                f"--port {args.port}"
            )
            out.emit(unreachable(args.host, args.port, cause, tried=tried, hint=hint))
        else:
            out.emit({"type": "error", "code": None, "message": str(exc)})
        return EXIT_FAILED
    except VitcpRejectedError as exc:
        out.emit({"type": "error", "code": None, "message": str(exc)})
        return EXIT_FAILED
    try:
        summary = await _transfer(endpoint, args, live)
    except (IwarpError, ValueError) as exc:
        hint = ""
        if not args.flow_control:
            # Our Sends did not wait for descriptors: the likely cause (§3.3).
            hint = (
                " (without descriptor flow control a run of Sends can outrun the "
                "listener's posted receive descriptors; drop --no-flow-control)"
            )
        out.emit({"type": "error", "code": None, "message": f"{exc}{hint}"})
        await endpoint.close()
        return EXIT_FAILED
    summary.update(
        type="summary",
        mtu=endpoint.params.mtu,
        crc=endpoint.params.crc,
        reliability=endpoint.params.reliability.name.lower(),
        flow_control=args.flow_control,
    )
    await endpoint.close()
    _print(summary, args.json)
    return 0 if summary["status"] == "ok" else 1


def run_connect(args: argparse.Namespace) -> int:
    live: dict[str, Any] = {}

    def interrupted(why: str) -> None:
        moved = live["moved"][0] if "moved" in live else 0
        digest = live.get("read" if args.op == "read" else "sent", hashlib.sha256())
        summary = {
            "type": "summary",
            "role": "connector",
            "op": args.op,
            "messages": moved,
            "octets": moved * args.size,
            "sha256": digest.hexdigest(),
            "sha256_of": _CONNECTOR_COVERS[args.op],
            "status": "interrupted",
            "interrupted": why,
        }
        _print(summary, args.json)

    return run_interruptible(captured(args.pcap, _connect(args, live)), interrupted)
