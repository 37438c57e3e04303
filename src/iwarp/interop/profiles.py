"""MPA configurations that behave like the iWARP peers users meet.

Each profile function returns an :class:`~iwarp.mpa.config.MpaConfig` that makes
an iwarp endpoint offer and accept what that peer does, so an application can
be tested against "a cxgb4" or "an irdma" without the hardware. The facts, with
their sources, are in the project's research notes on siw, cxgb4 and irdma
(Linux drivers ``drivers/infiniband/sw/siw``, ``hw/cxgb4/cm.c``, ``hw/irdma/cm.c``)
and in the siw guest's recordings; docs/interop.md sums them up.

Some behaviours are not configuration an ``MpaConfig`` can hold (refusing a
peer that asks for markers, refusing Rev 2 frames without the peer-to-peer
bit, retrying with Rev 1 after a reset); :data:`NOT_EXPRESSIBLE` lists them per
profile, and :func:`cli_options` turns a profile into ``iwarp listen``/``connect``
options for the parts the command line can express.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from iwarp.mpa.config import MpaConfig, Rev0Profile
from iwarp.mpa.wire import Revision, RtrFlags

#: The private data limit of Linux RDMA CM, siw and cxgb4 (RDMA_MAX_PRIVATE_DATA),
#: RFC 6581's four enhanced octets included.
LINUX_PRIVATE_DATA: Final = 256


def siw() -> MpaConfig:
    """Linux soft-iWARP 6.1 as shipped (``siw_main.c``, ``siw_cm.c``).

    Rev 2 with RFC 6581 data; does not ask for CRC but uses it when the peer
    does; private data <= 256; peer-to-peer off as Initiator, and as Responder
    supports Write and Read RTRs, preferring Write; IRD/ORD up to 128; waits
    10 s for a Reply and 5 s for a Request.
    """
    return MpaConfig(
        revision=Revision.REV2,
        markers=False,
        crc=False,
        private_data_limit=LINUX_PRIVATE_DATA,
        ird=128,
        ord=128,
        peer_to_peer=False,
        rtr_types=RtrFlags.WRITE | RtrFlags.READ,
        rtr_preference=(RtrFlags.WRITE, RtrFlags.READ),
        request_timeout=5.0,
        reply_timeout=10.0,
    )


def cxgb4() -> MpaConfig:
    """Chelsio T4-T6 (``iw_cxgb4`` module defaults).

    ``crc_enabled=1``: always sets C, so CRC is on for every connection;
    ``peer2peer=1`` with ``p2p_type`` Read: one RTR type, offered alone and the
    only one accepted; private data <= 256; ORD/IRD up to 32
    (``c4iw_max_read_depth``); ``ep_timeout_secs=60``.
    """
    return MpaConfig(
        revision=Revision.REV2,
        markers=False,
        crc=True,
        private_data_limit=LINUX_PRIVATE_DATA,
        ird=32,
        ord=32,
        peer_to_peer=True,
        rtr_types=RtrFlags.READ,
        rtr_preference=(RtrFlags.READ,),
        request_timeout=60.0,
        reply_timeout=60.0,
    )


def irdma() -> MpaConfig:
    """Intel E800/X722 (``irdma``).

    Always sets C; Rev 2 frames always carry the peer-to-peer bit, offering Write
    and Read RTR, and as Responder it picks Read when offered; Rev 0 is refused
    (the non-permissive profile); private data <= 512.
    """
    return MpaConfig(
        revision=Revision.REV2,
        markers=False,
        crc=True,
        rev0_profile=Rev0Profile.NON_PERMISSIVE,
        private_data_limit=512,
        peer_to_peer=True,
        rtr_types=RtrFlags.WRITE | RtrFlags.READ,
        rtr_preference=(RtrFlags.READ, RtrFlags.WRITE),
    )


def rfc() -> MpaConfig:
    """The letter of RFC 5044 + RFC 6581: PD <= 512, every RTR type, markers available."""
    return MpaConfig(
        revision=Revision.REV2,
        crc=True,
        private_data_limit=512,
        rev0_profile=Rev0Profile.NON_PERMISSIVE,
        rtr_types=RtrFlags.SEND | RtrFlags.WRITE | RtrFlags.READ,
        rtr_preference=(RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND),
    )


#: Profile name -> function returning its configuration.
PROFILES: Final[dict[str, Callable[[], MpaConfig]]] = {
    "siw": siw,
    "cxgb4": cxgb4,
    "irdma": irdma,
    "rfc": rfc,
}

#: Behaviours of each peer that an MpaConfig cannot express today.
NOT_EXPRESSIBLE: Final[dict[str, tuple[str, ...]]] = {
    "siw": (
        "refuses a Request with M=1 (Reply R=1) and a Reply with M=1 (closes): no knob to "
        "refuse markers instead of sending them",
        "as Responder with A set but no RTR type it proposes Write",
        "its Terminate has Layer and EType swapped (x86 bitfields); RTRs use STag 1",
    ),
    "cxgb4": (
        "retries with Rev 1 after a TCP reset of its Rev 2 attempt (asyncio connect's "
        "fallback_to_rev1 / iwarp connect --fallback-rev1, not a config knob)",
        "answers a refused connection with a reset, not an R=1 Reply",
        "its Reply advertises the global p2p_type even when it recorded Write",
    ),
    "irdma": (
        "refuses Rev 2 frames without the peer-to-peer bit (-EOPNOTSUPP): no knob to "
        "require peer-to-peer from the peer",
        "refuses a peer ORD above its IRD instead of clamping",
    ),
    "rfc": (),
}


def cli_options(config: MpaConfig) -> list[str]:
    """``iwarp listen``/``connect`` options that set what ``config`` holds (where the CLI can)."""
    opts = ["--mpa-rev", str(int(config.revision))]
    if config.markers:
        opts.append("--markers")
    if not config.crc:
        opts.append("--no-crc")
    if config.crc_required:
        opts.append("--crc-required")
    opts += ["--ird", str(config.ird), "--ord", str(config.ord)]
    opts += ["--pd-limit", str(config.private_data_limit)]
    if config.peer_to_peer:
        opts.append("--p2p")
    names = {RtrFlags.SEND: "send", RtrFlags.WRITE: "write", RtrFlags.READ: "read"}
    opts += ["--rtr", ",".join(name for flag, name in names.items() if flag in config.rtr_types)]
    return opts
