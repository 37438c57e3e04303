"""``iwarp connect``: open an MPA connection (as Initiator) and send messages.

Sends ``--count`` messages of ``--size`` octets, closes gracefully and
exits 0; any error (including a reject) exits 1. The summary's
``messages``, ``octets`` and ``sha256`` describe the messages sent, so a
script can compare them with the ``iwarp listen`` summary.
"""

from __future__ import annotations

import argparse
import asyncio

from iwarp.asyncio.mpa import MpaRejectedError, connect
from iwarp.cli._mpa import (
    Digest,
    Output,
    add_mpa_options,
    config_from,
    error_record,
    frame_record,
    message,
    params_record,
)
from iwarp.errors import IwarpError, LocalProtocolError
from iwarp.mpa.config import MpaConfig


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "connect",
        help="open an MPA connection as Initiator and send messages",
        description="Connect over TCP, run MPA startup as Initiator (RFC 5044 §7.1, RFC 6581), "
        "print the negotiated parameters, send --count messages of --size octets, "
        "and close gracefully.",
    )
    parser.add_argument("host", help="address of the listener")
    parser.add_argument("port", type=int, help="TCP port of the listener")
    parser.add_argument("--count", type=int, default=1, help="messages to send (default 1)")
    parser.add_argument("--size", type=int, default=64, help="octets per message (default 64)")
    parser.add_argument(
        "--delay",
        type=float,
        default=0.0,
        metavar="S",
        help="wait S seconds after the Reply before the first message (a Linux siw "
        "Responder may miss an FPDU that follows its Reply too closely)",
    )
    add_mpa_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Output(args.json)
    if args.count < 0 or args.size < 0:
        out.emit({"type": "error", "code": None, "message": "--count and --size must be >= 0"})
        return 2
    try:
        config = config_from(args)
    except ValueError as exc:
        out.emit({"type": "error", "code": None, "message": f"bad options: {exc}"})
        return 2
    return asyncio.run(_connect(args, config, out))


async def _connect(args: argparse.Namespace, config: MpaConfig, out: Output) -> int:
    try:
        sock = await connect(
            args.host,
            args.port,
            config=config,
            private_data=args.private_data,
            fallback_to_rev1=args.fallback_rev1,
        )
    except MpaRejectedError as exc:
        frame = exc.event.frame
        record: dict[str, object] = {"type": "rejected", "reason": exc.event.reason}
        if frame is not None:
            record.update(frame_record(frame))
        out.emit(record)
        return 1
    except (IwarpError, OSError) as exc:
        if isinstance(exc, IwarpError):
            out.emit(error_record(exc))
        else:
            out.emit({"type": "error", "code": 1, "message": f"TCP connect failed: {exc}"})
        return 1
    params = sock.params
    out.emit(
        {
            "type": "established",
            "peer": f"{args.host}:{args.port}",
            "emss": sock.emss,
            **params_record(params),
        }
    )
    if args.reject:
        # RFC 5044 §7.1.2 rule 6: the Initiator's ULP may close after
        # examining the Reply's private data.
        out.emit({"type": "rejected", "reason": "closed by the Initiator after the Reply"})
        await sock.close()
        return 0
    digest = Digest()
    if args.delay > 0:
        await asyncio.sleep(args.delay)
    try:
        if args.size > params.mulpdu:
            raise LocalProtocolError(
                f"--size {args.size} exceeds MULPDU {params.mulpdu} for EMSS {sock.emss}: "
                "one message must fit one FPDU"
            )
        for i in range(args.count):
            payload = message(i, args.size)
            sock.send(payload)
            digest.add(payload)
            await sock.drain()
            if sock.error is not None:
                raise sock.error
        await sock.close()
    except IwarpError as exc:
        out.emit(error_record(exc))
        sock.abort()
        return 1
    if sock.error is not None:
        out.emit(error_record(sock.error))
        return 1
    out.emit(digest.summary())
    return 0
