"""``iwarp listen``: accept iWARP connections (as MPA Responder) and count what arrives.

Serves many connections at once until ``--count`` messages have been
received in total, or ``--connections`` connections have ended, then prints
a summary and exits: 0 if no connection failed, 1 otherwise. The messages
are RDMAP Sends, RDMA Writes into advertised buffers or RDMA Reads from
them (``--op``, see :mod:`iwarp.cli._rdma_traffic`), or bare MPA ULPDUs
(``--op mpa``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from iwarp.asyncio import rdma
from iwarp.asyncio.mpa import (
    Accept,
    ConnectionRejectedError,
    MpaSocket,
    MpaStream,
    Reject,
    serve,
    serve_stream,
)
from iwarp.cli._args import SIZE_HELP, count, port, size
from iwarp.cli._capture import add_pcap_option, pcap_capture
from iwarp.cli._mpa_options import (
    CULLEY_SWITCH,
    DELAYED_HELLO,
    DELAYED_SWITCH,
    Digest,
    add_mpa_options,
    config_from,
    error_record,
    expect_line,
    frame_record,
    params_record,
)
from iwarp.cli._progress import Progress, WireOctets, add_progress_options
from iwarp.cli._rdma_traffic import (
    DEFAULT_MEMORY_BUDGET,
    ListenSession,
    MemoryBudget,
    RefusedError,
    check_stack,
    error_fields,
    hello_in,
    op_refusal,
    reset,
)
from iwarp.cli._receipt import RECEIPT_REQUEST, offer_receipts, receipt, terminate_for
from iwarp.cli._report import RecordPrinter
from iwarp.cli._run import run_interruptible
from iwarp.errors import IwarpError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.handshake import private_data_limit
from iwarp.mpa.policy import Decider
from iwarp.mpa.wire import ENHANCED_SIZE


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "listen",
        help="accept iWARP connections as MPA Responder and count the messages received",
        description="Listen for TCP connections, run MPA startup as Responder (RFC 5044 §7.1, "
        "RFC 6581), print the negotiated parameters, and count and hash the messages "
        "received until --count messages (or --connections connections) are done.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=0, help="TCP port (default 0: any free port)")
    parser.add_argument(
        "--count",
        type=count,
        default=0,
        help="exit after this many messages (default 0: run until interrupted; Ctrl-C or "
        "SIGTERM prints the summary so far and exits 130 or 143)",
    )
    parser.add_argument(
        "--connections",
        type=count,
        default=0,
        metavar="N",
        help="exit after N connections ended, accepted or not (default 0: no limit)",
    )
    parser.add_argument(
        "--max-size",
        type=size,
        default=16 << 20,
        metavar="S",
        help=f"largest message a peer may announce, in octets (default 16M; {SIZE_HELP})",
    )
    parser.add_argument(
        "--memory-budget",
        type=size,
        default=DEFAULT_MEMORY_BUDGET,
        metavar="S",
        help="most octets of buffers all peers together may make the listener allocate "
        "(--op send/write/read; K/M/G suffixes; default 256M): each connection gets as "
        "many buffers (credits) as fit, at least one, else it is refused with an error record",
    )
    parser.add_argument(
        "--no-receipt",
        action="store_true",
        help="--op mpa: do not offer receipts (by default the Reply's private data ends with "
        "16 octets that tell iwarp connect to ask for one)",
    )
    add_mpa_options(parser, initiator=False)
    add_progress_options(parser)
    add_pcap_option(parser)
    parser.set_defaults(func=run)


#: MPA errors after which the send direction still works (RFC 5044 §8).
_REPORTABLE = (MpaErrorCode.CRC_MISMATCH, MpaErrorCode.MARKER_MISMATCH)
#: Seconds a finished listener waits for --op mpa connectors' receipt requests.
_RECEIPT_GRACE = 5


def _peer(sock_or_addr: object) -> str:
    if isinstance(sock_or_addr, tuple) and len(sock_or_addr) >= 2:
        return f"{sock_or_addr[0]}:{sock_or_addr[1]}"
    return str(sock_or_addr)


def run(args: argparse.Namespace) -> int:
    out = RecordPrinter(args.json, prog="iwarp listen")
    try:
        config = config_from(args)
    except ValueError as exc:
        out.emit({"type": "error", "code": None, "message": f"bad options: {exc}"})
        return 2
    # The rate is over the time data moved: from the first connection to
    # the last message, not the idle time before or after.
    digest = Digest("served" if args.op == "read" else "received", until_last=True)
    state = {"ended": 0, "errors": 0, "accepted": 0, "active": 0, "unconfirmed": 0}

    def interrupted(why: str) -> None:
        out.closed = True
        out.emit(_summary(args, digest, state, interrupted=why))

    try:
        return run_interruptible(_listen(args, config, out, digest, state), interrupted)
    except OSError as exc:
        out.emit({"type": "error", "code": None, "message": f"cannot listen: {exc}"})
        return 1


def _summary(
    args: argparse.Namespace, digest: Digest, state: dict[str, int], **extra: object
) -> dict[str, object]:
    return digest.summary(
        connections=state["ended"],
        accepted=state["accepted"],
        errors=state["errors"],
        op=args.op,
        **extra,
    )


async def _listen(
    args: argparse.Namespace,
    config: MpaConfig,
    out: RecordPrinter,
    digest: Digest,
    state: dict[str, int],
) -> int:
    async with pcap_capture(args.pcap, raw_ulp=args.op == "mpa"):
        return await _serve(args, config, out, digest, state)


async def _serve(
    args: argparse.Namespace,
    config: MpaConfig,
    out: RecordPrinter,
    digest: Digest,
    state: dict[str, int],
) -> int:
    done = asyncio.Event()
    progress = Progress(
        digest.counters,
        forced=args.progress,
        quiet=args.json,
        interval=args.interval,
        wire=WireOctets(),
    )

    def ended() -> None:
        state["ended"] += 1
        if args.connections and state["ended"] >= args.connections:
            done.set()

    def closed(peer: str, received: Digest) -> None:
        out.emit(
            {
                "type": "closed",
                "peer": peer,
                "messages": received.messages,
                "octets": received.octets,
            }
        )
        ended()

    def decide(request: RequestReceived) -> Accept | Reject:
        out.emit({"type": "request", **frame_record(request.frame)})
        if args.reject:
            return Reject(args.private_data)
        if args.op != "mpa" or args.no_receipt:
            return Accept(args.private_data)
        # Offer receipts, where they fit the private data (RFC 6581's IRD
        # and ORD take 4 octets of it).
        room = private_data_limit(config, request.frame.revision) - ENHANCED_SIZE
        return Accept(offer_receipts(args.private_data, room))

    def on_failure(error: BaseException, peer: object) -> None:
        if isinstance(error, ConnectionRejectedError):
            out.emit({"type": "rejected", "peer": _peer(peer), "reason": error.event.reason})
        else:
            state["errors"] += 1
            out.emit({**error_record(error), "peer": _peer(peer)})
        ended()

    async def handler(sock: MpaSocket) -> None:
        peer = _peer(sock.get_extra_info("peername"))
        state["accepted"] += 1
        state["active"] += 1
        try:
            await serve_one(sock, peer)
        finally:
            state["active"] -= 1

    async def serve_one(sock: MpaSocket, peer: str) -> None:
        out.emit({"type": "established", "peer": peer, **params_record(sock.params)})
        digest.start()
        received = Digest()
        state["unconfirmed"] += 1  # until its receipt is sent, or it ends
        confirmed = False
        try:
            async for payload in sock:
                theirs = hello_in(payload) if received.messages == 0 else None
                if theirs is not None:
                    # An iwarp connect running the RDMA stack: say so, and
                    # tell it (as the refusal its stack can take) before closing.
                    state["errors"] += 1
                    message = f"the peer runs --op {theirs}, this listener --op mpa"
                    out.emit({"type": "error", "code": None, "message": message, "peer": peer})
                    sock.send(op_refusal("mpa"))
                    await sock.close()
                    break
                if payload == RECEIPT_REQUEST:  # iwarp connect --op mpa is done
                    summary = received.summary()
                    sock.send(receipt(received.messages, received.octets, str(summary["sha256"])))
                    if not confirmed:
                        confirmed = True
                        state["unconfirmed"] -= 1
                    continue
                digest.add(payload)
                received.add(payload)
                if args.count and digest.messages >= args.count:
                    done.set()
        except IwarpError as exc:
            state["errors"] += 1
            out.emit({**error_record(exc), "peer": peer})
            if isinstance(exc, MpaError) and exc.mpa_code in _REPORTABLE:
                # The send direction still works (RFC 5044 §8): tell the peer.
                with contextlib.suppress(IwarpError):
                    sock.send(terminate_for(exc))
        finally:
            if not confirmed:
                state["unconfirmed"] -= 1
        closed(peer, received)

    async def stream_handler(stream: MpaStream) -> None:
        """``--delayed`` / ``--mpa-mode culley``: streaming first, then MPA."""
        peer = stream.get_extra_info("peername")
        try:
            sock = await asyncio.wait_for(_switch(stream, args, decide), config.request_timeout)
        except TimeoutError:
            error = MpaError(
                MpaErrorCode.TCP_CLOSED,
                f"no streaming message within {config.request_timeout:g} s",
            )
            on_failure(error, peer)
            return
        except IwarpError as exc:
            on_failure(exc, peer)
            return
        await handler(sock)

    sessions: dict[int, ListenSession] = {}
    budget = MemoryBudget(args.memory_budget)

    def setup(qp: rdma.QueuePair) -> None:
        session = ListenSession(args.op, args.max_size, budget)
        sessions[id(qp)] = session
        session.setup(qp)

    async def rdma_handler(qp: rdma.QueuePair) -> None:
        # No session when the stack never started RDMAP (check_stack says why).
        session = sessions.pop(id(qp), None) or ListenSession(args.op, args.max_size)
        peer = _peer(qp.peer)
        state["accepted"] += 1
        state["active"] += 1
        out.emit({"type": "established", "peer": peer, **params_record(qp.params)})
        digest.start()
        sock = qp.get_extra_info("socket")
        progress.wire_add(sock)

        def on_message(payload: bytes) -> None:
            digest.add(payload)
            if args.count and digest.messages >= args.count:
                done.set()

        try:
            check_stack(qp)
            await session.run(on_message)
            record = error_fields(qp)
        except RefusedError as exc:
            record = error_fields(qp, exc)
            with contextlib.suppress(IwarpError, OSError):
                await asyncio.wait_for(qp.close(), 5)  # the refusal goes first
        except IwarpError as exc:
            record = error_fields(qp, exc)
            reset(qp)
        finally:
            state["active"] -= 1
            progress.wire_drop(sock)
        if record is not None:
            if not session.hello_seen and record.get("terminate") == "sent":
                # Its first ULPDU was no RDMAP hello: most likely bare MPA.
                record["message"] = (
                    f"{record['message']} (the peer sent no hello: does it run --op mpa? this "
                    f"listener runs --op {args.op})"
                )
            state["errors"] += 1
            out.emit({**record, "peer": peer})
        closed(peer, session.digest)

    if args.delayed or args.mpa_mode == "culley":
        server = await serve_stream(stream_handler, args.host, args.port, config=config)
    elif args.op == "mpa":
        server = await serve(
            handler, args.host, args.port, config=config, decide=decide, on_failure=on_failure
        )
    else:
        server = await rdma.serve(
            rdma_handler,
            args.host,
            args.port,
            config=config,
            setup=setup,
            decide=decide,
            on_failure=on_failure,
        )
    bound_host, bound_port = server.sockets[0].getsockname()[:2]
    out.emit({"type": "listening", "host": bound_host, "port": bound_port, "op": args.op})
    progress.start()
    try:
        await done.wait()
    finally:
        progress.stop()
        server.close()
    # Let connections that are closing report it; the summary comes last.
    # An --op mpa connector that sent its messages waits for its receipt
    # (iwarp.cli._receipt): give it the time to ask.
    for tick in range(100 * int(_RECEIPT_GRACE)):
        if not state["active"] or (tick >= 100 and state["unconfirmed"] <= 0):
            break
        await asyncio.sleep(0.01)
    out.closed = True
    out.emit(_summary(args, digest, state))
    return 1 if state["errors"] else 0


async def _switch(stream: MpaStream, args: argparse.Namespace, decide: Decider) -> MpaSocket:
    """Switch a streaming connection into MPA as the connecting side expects."""
    if args.mpa_mode == "culley":
        # draft-culley-iwarp-mpa-02 §8.1: the peer's direction frames after
        # its streaming line, ours after our own.
        await expect_line(stream, CULLEY_SWITCH)
        sock = await stream.start_framed(send=False, receive=True)
        stream.write(CULLEY_SWITCH)
        await stream.start_framed(send=True, receive=False)
        return sock
    # Seed 000 §6.1.4: the Initiator's hello, our last streaming message, MPA.
    await expect_line(stream, DELAYED_HELLO)
    return await stream.start_mpa(Role.RESPONDER, last_streaming=DELAYED_SWITCH, decide=decide)
