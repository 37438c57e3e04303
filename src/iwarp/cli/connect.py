"""``iwarp connect``: open an iWARP connection (as MPA Initiator) and move messages.

Moves ``--count`` messages of ``--size`` octets with ``--op`` (RDMAP Sends,
RDMA Writes into the listener's advertised buffers, RDMA Reads from them,
or bare MPA ULPDUs; see :mod:`iwarp.cli._rdma_traffic`), closes gracefully and exits
0; any error (including a reject) exits 1. The summary's ``messages``,
``octets`` and ``sha256`` describe the messages sent (read, for ``read``),
so a script can compare them with the ``iwarp listen`` summary.
"""

from __future__ import annotations

import argparse
import asyncio

from iwarp.apps.rping import ADVERT
from iwarp.asyncio import rdma
from iwarp.asyncio.mpa import ConnectionRejectedError, MpaSocket, MpaStream, connect, open_stream
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
    message,
    params_record,
)
from iwarp.cli._progress import Progress, WireOctets, add_progress_options
from iwarp.cli._rdma_traffic import (
    CONTROL_BUFFERS,
    MAX_COUNT,
    check_stack,
    connect_traffic,
    error_fields,
    qp_emss,
    reset,
)
from iwarp.cli._receipt import (
    ReceiptError,
    Watcher,
    peer_failure,
    split_offer,
    tcp_acknowledged,
)
from iwarp.cli._report import EXIT_FAILED, EXIT_USAGE, RecordPrinter, unreachable
from iwarp.cli._run import run_interruptible
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import ConnectionRejected
from iwarp.mpa.handshake import build_request
from iwarp.mpa.wire import MAX_ULPDU

#: Seconds ``--op mpa`` waits for the listener's receipt (without --timeout).
RECEIPT_TIMEOUT = 60.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "connect",
        help="open an iWARP connection as MPA Initiator and move messages",
        description="Connect over TCP, run MPA startup as Initiator (RFC 5044 §7.1, RFC 6581), "
        "print the negotiated parameters, move --count messages of --size octets as RDMAP "
        "Sends, RDMA Writes or RDMA Reads (--op), and close gracefully.",
    )
    parser.add_argument("host", help="address of the listener")
    parser.add_argument("port", type=port, help="TCP port of the listener")
    parser.add_argument("--count", type=count, default=1, help="messages to send (default 1)")
    parser.add_argument(
        "--size", type=size, default=64, help=f"octets per message (default 64; {SIZE_HELP})"
    )
    parser.add_argument(
        "--delay",
        type=float,
        default=0.0,
        metavar="S",
        help="wait S seconds after the Reply before the first message (a Linux siw "
        "Responder may miss an FPDU that follows its Reply too closely)",
    )
    parser.add_argument(
        "--no-receipt",
        action="store_true",
        help="--op mpa: do not ask the listener for a receipt; success once the peer's TCP "
        "acknowledged every octet (the default with a peer that offers no receipts: any MPA "
        "peer but iwarp listen)",
    )
    add_mpa_options(parser, initiator=True)
    add_progress_options(parser)
    add_pcap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = RecordPrinter(args.json, prog="iwarp connect")
    try:
        config = config_from(args)
        _check_size(args)
    except ValueError as exc:
        out.emit({"type": "error", "code": None, "message": f"bad options: {exc}"})
        return EXIT_USAGE
    digest = Digest("read" if args.op == "read" else "sent")

    def interrupted(why: str) -> None:
        out.closed = True
        extra = {} if args.op == "mpa" else {"op": args.op}
        out.emit(digest.summary(**extra, interrupted=why))

    return run_interruptible(_run(args, config, out, digest), interrupted)


async def _run(
    args: argparse.Namespace, config: MpaConfig, out: RecordPrinter, digest: Digest
) -> int:
    progress = Progress(
        digest.counters,
        forced=args.progress,
        quiet=args.json,
        interval=args.interval,
        wire=WireOctets(),
    )
    async with pcap_capture(args.pcap, raw_ulp=args.op == "mpa"):
        try:
            if args.op == "mpa":
                return await _connect(args, config, out, digest, progress)
            return await _connect_rdma(args, config, out, digest, progress)
        finally:
            progress.stop()


#: Largest message of the RDMA ops: DDP's message offset is 32 bits (RFC 5041 §4.4).
MAX_MESSAGE = 0xFFFFFFFF


def _check_size(args: argparse.Namespace) -> None:
    """Refuse a ``--size`` no connection could carry, before connecting.

    :raises ValueError: with ``--op mpa`` larger than any MULPDU (one
        message is one FPDU, MPA RFC 5044 §4.1); otherwise beyond DDP's 32-bit
        message offset.
    """
    if args.op == "mpa" and args.size > MAX_ULPDU:
        raise ValueError(
            f"--size {args.size} exceeds {MAX_ULPDU}, the largest MULPDU of any connection: "
            "with --op mpa one message must fit one FPDU"
        )
    if args.size > MAX_MESSAGE:
        raise ValueError(f"--size {args.size} exceeds {MAX_MESSAGE} (DDP's 32-bit offsets)")
    if args.count > MAX_COUNT:
        raise ValueError(f"--count {args.count} exceeds {MAX_COUNT}")


def _rejected(event: ConnectionRejected, out: RecordPrinter) -> int:
    """Report a reject (the peer's R=1 or our own policy); the exit status."""
    record: dict[str, object] = {"type": "rejected", "reason": event.reason}
    if event.frame is not None:
        record.update(frame_record(event.frame))
    out.emit(record)
    return 1


def _not_connected(exc: IwarpError | OSError, out: RecordPrinter, args: argparse.Namespace) -> int:
    """Report why MPA startup or the TCP connect failed; the exit status."""
    if isinstance(exc, IwarpError):
        out.emit(error_record(exc))
    else:
        hint = (
            f"start an MPA Responder there, e.g. iwarp listen --host {args.host} --port {args.port}"
        )
        if args.op != "send":
            hint += f" --op {args.op}"
        code = int(MpaErrorCode.TCP_CLOSED)  # RFC 5044 §8: the TCP connection failed
        out.emit(unreachable(args.host, args.port, exc, tried="TCP connect", hint=hint, code=code))
    return EXIT_FAILED


async def _open_qp(args: argparse.Namespace, config: MpaConfig) -> rdma.QueuePair:
    return await rdma.connect(
        args.host,
        args.port,
        config=config,
        private_data=args.private_data,
        receive_buffers=CONTROL_BUFFERS,
        receive_size=ADVERT.size,
        first_send_delay=args.delay,
        fallback_to_rev1=args.fallback_rev1,
    )


async def _connect_rdma(
    args: argparse.Namespace,
    config: MpaConfig,
    out: RecordPrinter,
    digest: Digest,
    progress: Progress,
) -> int:
    try:
        qp = await _open_qp(args, config)
    except rdma.ConnectionRejectedError as exc:
        return _rejected(exc.event, out)
    except (IwarpError, OSError) as exc:
        return _not_connected(exc, out, args)
    out.emit(
        {
            "type": "established",
            "peer": f"{args.host}:{args.port}",
            "emss": qp_emss(qp),
            **params_record(qp.params),
        }
    )
    if args.reject:
        # RFC 5044 §7.1.2 rule 6: the Initiator's ULP may close after
        # examining the Reply's private data.
        out.emit({"type": "rejected", "reason": "closed by the Initiator after the Reply"})
        await qp.close()
        return 0
    digest.start()
    progress.wire_add(qp.get_extra_info("socket"))
    progress.start()
    try:
        check_stack(qp)
        await connect_traffic(qp, args.op, args.count, args.size, digest)
        await qp.close()
    except IwarpError as exc:
        record_ = error_fields(qp, exc)
        reset(qp)
        out.emit(record_ if record_ is not None else error_record(exc))
        return 1
    progress.stop()
    failure = error_fields(qp)
    if failure is not None:
        out.emit(failure)
        return 1
    out.emit(digest.summary(op=args.op))
    return 0


async def _open_mpa(args: argparse.Namespace, config: MpaConfig) -> MpaSocket:
    """MPA in full operation: immediate startup, or a streaming exchange first
    (``--delayed``, ``--mpa-mode culley``) on the same TCP connection."""
    if not args.delayed and args.mpa_mode != "culley":
        return await connect(
            args.host,
            args.port,
            config=config,
            private_data=args.private_data,
            fallback_to_rev1=args.fallback_rev1,
        )
    build_request(config, args.private_data)  # LocalProtocolError before connecting
    stream = await open_stream(args.host, args.port, config=config)
    try:
        return await asyncio.wait_for(_switch(stream, args), config.reply_timeout)
    except TimeoutError:
        stream.abort()
        raise MpaError(
            MpaErrorCode.TCP_CLOSED, f"no answer within {config.reply_timeout:g} s"
        ) from None
    except BaseException:
        stream.abort()
        raise


async def _switch(stream: MpaStream, args: argparse.Namespace) -> MpaSocket:
    if args.mpa_mode == "culley":
        # draft-culley-iwarp-mpa-02 §8.1: our direction frames right after
        # our streaming line, the peer's after its own.
        stream.write(CULLEY_SWITCH)
        sock = await stream.start_framed(send=True, receive=False)
        await expect_line(stream, CULLEY_SWITCH)
        await stream.start_framed(send=False, receive=True)
        return sock
    # Seed 000 §6.1.4: the Responder's last streaming message, then our Request.
    stream.write(DELAYED_HELLO)
    await expect_line(stream, DELAYED_SWITCH)
    return await stream.start_mpa(Role.INITIATOR, private_data=args.private_data)


async def _connect(
    args: argparse.Namespace,
    config: MpaConfig,
    out: RecordPrinter,
    digest: Digest,
    progress: Progress,
) -> int:
    try:
        sock = await _open_mpa(args, config)
    except ConnectionRejectedError as exc:
        return _rejected(exc.event, out)
    except (IwarpError, OSError) as exc:
        return _not_connected(exc, out, args)
    params = sock.params
    peer_private_data, offered = split_offer(params.peer_private_data)
    # Ask for a receipt only of a listener that offers one (culley-02 has
    # no Reply to offer it in: there both ends are iwarp's).
    ask = not args.no_receipt and (offered or args.mpa_mode == "culley")
    out.emit(
        {
            "type": "established",
            "peer": f"{args.host}:{args.port}",
            "emss": sock.emss,
            **params_record(params),
            "peer_private_data": peer_private_data.hex(),
            "receipts": offered,
        }
    )
    if args.reject:
        # RFC 5044 §7.1.2 rule 6: the Initiator's ULP may close after
        # examining the Reply's private data.
        out.emit({"type": "rejected", "reason": "closed by the Initiator after the Reply"})
        await sock.close()
        return 0
    if args.delay > 0:
        await asyncio.sleep(args.delay)
    digest.start()
    progress.start()
    try:
        if args.size > params.mulpdu:
            raise LocalProtocolError(
                f"--size {args.size} exceeds MULPDU {params.mulpdu} for EMSS {sock.emss}: "
                "one message must fit one FPDU"
            )
        # The listener sends nothing before the receipt but a Terminate: a
        # watcher reads it while we send, so it is not lost to the reset
        # that the listener's close answers our next octets with.
        async with Watcher(sock, receipt=ask) as watcher:
            for i in range(args.count):
                payload = message(i, args.size)
                sock.send(payload)
                digest.add(payload)
                await sock.drain()
                await watcher.check()
                if sock.error is not None:
                    raise sock.error
            if not args.count:
                delivery: dict[str, object] = {}
            elif ask:
                # Sent is not received: only the listener's receipt says so.
                await watcher.confirm(digest, args.timeout or RECEIPT_TIMEOUT)
                delivery = {
                    "delivery": "receipt",
                    "delivery_note": "the listener's receipt confirms every message",
                }
            else:
                delivery = await _without_receipt(sock, args, watcher)
        await sock.close()
    except ReceiptError as exc:
        out.emit(exc.record)
        sock.abort()
        return 1
    except IwarpError as exc:
        terminated = await peer_failure(sock)
        out.emit(terminated.record if terminated is not None else error_record(exc))
        sock.abort()
        return 1
    progress.stop()
    if sock.error is not None:
        out.emit(error_record(sock.error))
        return 1
    out.emit(digest.summary(**delivery))
    return 0


#: Seconds a connector without a receipt waits, after its FIN, for the
#: peer's (a Terminate that comes first fails the run).
CLOSE_WAIT = 2.0


async def _without_receipt(
    sock: MpaSocket, args: argparse.Namespace, watcher: Watcher
) -> dict[str, object]:
    """Wait for the peer's TCP to acknowledge every octet, then end our
    direction (FIN) and read until the peer closes too: a peer that refused
    the ULPDUs (a Terminate, e.g. an RDMA stack that read them as DDP) fails
    the run. Returns the summary's ``delivery`` fields, which say that this
    is all that is known.

    :raises ReceiptError: the peer sent a Terminate, or did not acknowledge.
    """
    why = "--no-receipt" if args.no_receipt else "the peer offers no receipts"
    acknowledged = await tcp_acknowledged(sock, args.timeout or RECEIPT_TIMEOUT)
    closed = await watcher.until_closed(min(args.timeout or CLOSE_WAIT, CLOSE_WAIT))
    after = "it closed after us" if closed else f"it did not close within {CLOSE_WAIT:g} s"
    if acknowledged:
        note = f"the peer's TCP acknowledged every octet, {after}; no receipt ({why})"
        return {"delivery": "tcp", "delivery_note": note}
    note = (
        "every octet handed to TCP (its acknowledgements cannot be read here), "
        f"{after}; no receipt ({why})"
    )
    return {"delivery": "sent", "delivery_note": note}
