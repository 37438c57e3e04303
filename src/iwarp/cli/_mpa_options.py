"""Options and counters shared by ``iwarp listen`` and ``iwarp connect``
(their records are printed by :class:`iwarp.cli._report.RecordPrinter`)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from dataclasses import replace

from iwarp.asyncio.mpa import MpaStream
from iwarp.cli._args import rate_mib_per_s
from iwarp.errors import MpaError, MpaErrorCode, RemoteProtocolError
from iwarp.mpa.config import MpaConfig, Rev0Profile
from iwarp.mpa.events import MpaParams
from iwarp.mpa.wire import IRD_ORD_MASK, MpaFrame, RtrFlags

_RTR_NAMES = {"send": RtrFlags.SEND, "write": RtrFlags.WRITE, "read": RtrFlags.READ}
_RTR_NAME_OF = {flag: name for name, flag in _RTR_NAMES.items()}


def _hex(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not hexadecimal octets: {text!r}") from exc


def _ird_ord(text: str) -> int:
    value = int(text, 0)
    if not 0 <= value <= IRD_ORD_MASK:
        raise argparse.ArgumentTypeError(f"must be 0..{IRD_ORD_MASK:#x} (0x3fff: no negotiation)")
    return value


def _rtr(text: str) -> RtrFlags:
    flags = RtrFlags(0)
    for name in filter(None, text.split(",")):
        if name not in _RTR_NAMES:
            raise argparse.ArgumentTypeError(f"RTR types are send, write, read; got {name!r}")
        flags |= _RTR_NAMES[name]
    return flags


def _rtr_order(text: str) -> tuple[RtrFlags, ...]:
    names = [name for name in text.split(",") if name]
    if not names or len(set(names)) != len(names) or not set(names) <= _RTR_NAMES.keys():
        raise argparse.ArgumentTypeError(
            f"an order of distinct RTR types among send, write, read; got {text!r}"
        )
    return tuple(_RTR_NAMES[name] for name in names)


def add_mpa_options(parser: argparse.ArgumentParser, *, initiator: bool) -> None:
    """The options both commands share (the issue's CLI contract);
    ``--fallback-rev1`` only with ``initiator``."""
    group = parser.add_argument_group("MPA startup")
    group.add_argument(
        "--mpa-rev", type=int, choices=(0, 1, 2), default=2, help="MPA revision (default 2)"
    )
    group.add_argument(
        "--markers", action="store_true", help="ask the peer to send markers (our M bit)"
    )
    group.add_argument("--no-crc", action="store_true", help="offer CRC off (our C bit 0)")
    group.add_argument(
        "--crc-required", action="store_true", help="always use CRC; refuse peers that send C=0"
    )
    group.add_argument(
        "--private-data", type=_hex, default=b"", metavar="HEX", help="our private data"
    )
    group.add_argument("--reject", action="store_true", help="reject the peer's frame")
    group.add_argument("--ird", type=_ird_ord, default=16, help="RFC 6581 IRD (default 16)")
    group.add_argument("--ord", type=_ird_ord, default=16, help="RFC 6581 ORD (default 16)")
    group.add_argument(
        "--rtr",
        type=_rtr,
        default=RtrFlags.WRITE | RtrFlags.READ,
        metavar="TYPES",
        help="RTR types offered/supported, comma separated: send,write,read (default write,read)",
    )
    group.add_argument(
        "--rtr-prefer",
        type=_rtr_order,
        default=None,
        metavar="ORDER",
        help="Responder: the order in which one RTR type is chosen, e.g. read,write as irdma "
        "(default write,read,send as siw)",
    )
    group.add_argument(
        "--refuse-markers",
        action="store_true",
        help="never send markers: refuse a peer that asks for them (M=1), as siw does",
    )
    group.add_argument(
        "--require-p2p",
        action="store_true",
        help="refuse Rev 2 frames without the peer-to-peer bit A and an RTR type we support, "
        "as irdma does: no Reply, the connection is closed",
    )
    group.add_argument(
        "--refuse-rev0",
        action="store_true",
        help="close on a Rev 0 frame without any Reply, as irdma does (default: the RFC 5044 "
        "Appendix C.2.1 Rev 1 Reply, then close)",
    )
    group.add_argument(
        "--pd-limit",
        type=int,
        default=512,
        metavar="N",
        help="private data limit for Rev >= 1 frames (default 512; siw/cxgb4 use 256)",
    )
    group.add_argument(
        "--permissive",
        action="store_true",
        help="RFC 5044 Appendix C permissive profile: run RDMAC mode with Rev 0 peers",
    )
    group.add_argument(
        "--timeout", type=float, default=None, metavar="S", help="startup timeouts in seconds"
    )
    group.add_argument(
        "--p2p",
        action="store_true",
        help="RFC 6581 peer-to-peer: request an RTR (Initiator; a Responder answers the "
        "Initiator's A bit whatever this says, RFC 6581 §9.2)",
    )
    if initiator:
        group.add_argument(
            "--fallback-rev1",
            action="store_true",
            help="if the peer closes on a Rev 2 Request, retry once with Rev 1 (RFC 6581 §10)",
        )
    else:
        parser.set_defaults(fallback_rev1=False)  # only an Initiator retries
    parser.add_argument(
        "--op",
        choices=("send", "write", "read", "mpa"),
        default="send",
        help="what carries the messages: RDMAP Sends (default), RDMA Writes into or RDMA "
        "Reads from buffers the listener advertises, or bare MPA ULPDUs (no DDP/RDMAP)",
    )
    group.add_argument(
        "--delayed",
        action="store_true",
        help="delayed startup (draft-ietf-rddp-mpa-02 §6.1.4): a streaming hello and the "
        "listener's last streaming message, then MPA on the same connection (with --op mpa)",
    )
    group.add_argument(
        "--mpa-mode",
        choices=("rfc", "culley"),
        default="rfc",
        help="rfc: Request/Reply frames (default); culley: draft-culley-iwarp-mpa-02, no "
        "frames, markers and CRC on, each direction framed after a streaming line "
        "(with --op mpa)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


#: Streaming lines of ``--delayed``: the Initiator's hello, the Responder's
#: last streaming message (seed 000 §6.1.4 rule 2).
DELAYED_HELLO = b"iwarp delayed startup\n"
DELAYED_SWITCH = b"iwarp switching to MPA\n"
#: The streaming line each side sends before framing its direction (culley-02).
CULLEY_SWITCH = b"iwarp culley-02 framing follows\n"


async def expect_line(stream: MpaStream, expected: bytes) -> None:
    """Read one streaming line and check it is ``expected``.

    :raises MpaError: the peer closed first (code 1).
    :raises RemoteProtocolError: the peer sent something else.
    """
    try:
        line = await stream.readexactly(len(expected))  # fails fast on anything else
    except asyncio.IncompleteReadError as exc:
        raise MpaError(
            MpaErrorCode.TCP_CLOSED,
            f"peer closed during the streaming exchange (after {len(exc.partial)} octets)",
        ) from None
    if line != expected:
        raise RemoteProtocolError(
            f"unexpected streaming message {line[:80]!r}, wanted {expected!r}"
        )


def config_from(args: argparse.Namespace) -> MpaConfig:
    """The MpaConfig the options describe; ValueError explains a bad mix."""
    if (args.delayed or args.mpa_mode == "culley") and args.op != "mpa":
        raise ValueError(
            "--delayed and --mpa-mode culley need --op mpa (the RDMA queue pair starts MPA "
            "as soon as TCP connects)"
        )
    if args.delayed and args.mpa_mode == "culley":
        raise ValueError("--delayed and --mpa-mode culley exclude each other")
    if args.mpa_mode == "culley":
        # Seed 002 has no Request/Reply: nothing could carry these, and
        # markers and CRC are always on.
        given = [
            name
            for name, value in (
                ("--no-crc", args.no_crc),
                ("--private-data", args.private_data),
                ("--reject", args.reject),
                ("--p2p", args.p2p),
                ("--fallback-rev1", args.fallback_rev1),
                ("--refuse-markers", args.refuse_markers),
                ("--require-p2p", args.require_p2p),
            )
            if value
        ]
        if given:
            raise ValueError(f"{', '.join(given)} mean nothing with --mpa-mode culley (no frames)")
    if args.permissive and args.refuse_rev0:
        raise ValueError("--permissive (run RDMAC mode) and --refuse-rev0 exclude each other")
    rev0_profile = Rev0Profile.NON_PERMISSIVE
    if args.permissive:
        rev0_profile = Rev0Profile.PERMISSIVE
    elif args.refuse_rev0:
        rev0_profile = Rev0Profile.REFUSE
    config = MpaConfig(
        revision=args.mpa_rev,
        markers=args.markers,
        crc=not args.no_crc,
        crc_required=args.crc_required,
        ird=args.ird,
        ord=args.ord,
        peer_to_peer=args.p2p,
        rtr_types=args.rtr,
        private_data_limit=args.pd_limit,
        rev0_profile=rev0_profile,
        refuse_markers=args.refuse_markers,
        require_peer_to_peer=args.require_p2p,
    )
    if args.rtr_prefer is not None:
        config = replace(config, rtr_preference=args.rtr_prefer)
    if args.timeout is None:
        return config
    return replace(
        config,
        request_timeout=args.timeout,
        reply_timeout=args.timeout,
        frame_timeout=args.timeout,
    )


def params_record(params: MpaParams) -> dict[str, object]:
    return {
        "rev": params.revision,
        "ddp_version": params.ddp_version,
        "markers_send": params.markers_send,
        "markers_receive": params.markers_receive,
        "crc": params.crc,
        "enhanced": params.enhanced,
        "ird": params.ird,
        "ord": params.ord,
        "peer_ird": params.peer_ird,
        "peer_ord": params.peer_ord,
        "peer_to_peer": params.peer_to_peer,
        "rtr": None if params.rtr is None else _RTR_NAME_OF[params.rtr],
        "mulpdu": params.mulpdu,
        "peer_private_data": params.peer_private_data.hex(),
    }


def frame_record(frame: MpaFrame) -> dict[str, object]:
    record: dict[str, object] = {
        "rev": frame.revision,
        "markers": frame.markers,
        "crc": frame.crc,
        "reject": frame.reject,
        "private_data": frame.ulp_private_data.hex(),
    }
    enhanced = frame.enhanced
    if enhanced is not None:
        record["ird"] = enhanced.ird
        record["ord"] = enhanced.ord
        record["p2p"] = RtrFlags.PEER_TO_PEER in enhanced.flags
        record["rtr"] = [name for name, flag in _RTR_NAMES.items() if flag in enhanced.flags]
    return record


def error_record(error: BaseException) -> dict[str, object]:
    code = error.code if isinstance(error, MpaError) else None
    return {"type": "error", "code": code, "message": str(error)}


class Digest:
    """Counts messages and octets, hashes their payloads in order, and
    times the run from :meth:`start` (or the first message).

    ``covers`` says what the hash is of (``sent``, ``received``, ``read``:
    the summary's ``sha256_of``). With ``until_last`` the time ends at the
    last message (a server: idle time after the transfer is not in its
    rate); otherwise it runs until the summary.
    """

    def __init__(self, covers: str = "received", *, until_last: bool = False) -> None:
        self.messages = 0
        self.octets = 0
        self.covers = covers
        self._sha = hashlib.sha256()
        self._started: float | None = None
        self._last: float | None = None
        self._until_last = until_last

    def start(self) -> None:
        """The run begins now (a later call changes nothing)."""
        if self._started is None:
            self._started = time.monotonic()

    @property
    def seconds(self) -> float:
        """Seconds since :meth:`start` (0 before), or from it to the last
        message with ``until_last``."""
        if self._started is None:
            return 0.0
        if self._until_last:
            return (self._last or self._started) - self._started
        return time.monotonic() - self._started

    def counters(self) -> tuple[int, int]:
        """(messages, octets) so far, for progress reports."""
        return self.messages, self.octets

    def add(self, payload: bytes | bytearray | memoryview) -> None:
        self.start()
        self.messages += 1
        self.octets += len(payload)
        self._sha.update(payload)
        if self._until_last:
            self._last = time.monotonic()

    def summary(self, **extra: object) -> dict[str, object]:
        """The ``summary`` record: counts, the full sha256 and what it covers,
        elapsed time and rate."""
        seconds = self.seconds
        return {
            "type": "summary",
            "messages": self.messages,
            "octets": self.octets,
            "sha256": self._sha.hexdigest(),
            "sha256_of": self.covers,
            "seconds": round(seconds, 6),
            "mib_per_s": rate_mib_per_s(self.octets, seconds),
            **extra,
        }


def message(index: int, size: int) -> bytes:
    """The ``index``-th test message of ``size`` octets (deterministic)."""
    block = hashlib.sha256(index.to_bytes(8, "big")).digest()
    return (block * (size // len(block) + 1))[:size]
