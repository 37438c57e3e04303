"""MPA configurations that behave like the iWARP peers users meet.

Each profile function returns an :class:`~iwarp.mpa.config.MpaConfig` that makes
an iwarp endpoint offer and accept what that peer does, so an application can
be tested against "a cxgb4" or "an irdma" without the hardware. The facts, with
their sources, are in the project's research notes on siw, cxgb4 and irdma
(Linux drivers ``drivers/infiniband/sw/siw``, ``hw/cxgb4/cm.c``, ``hw/irdma/cm.c``)
and in the siw guest's recordings; docs/interop.md sums them up.

Refusing a peer that asks for markers (siw), refusing Rev 2 frames without the
peer-to-peer bit and Rev 0 frames (irdma) and retrying with Rev 1 after a reset
(cxgb4) are ``MpaConfig`` knobs; what no configuration holds (Terminate quirks,
a reset instead of a Reject) is listed per profile in :data:`NOT_EXPRESSIBLE`.
:func:`cli_options` turns a profile into ``iwarp listen``/``connect`` options.
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
    does; never sends markers (a Request with M=1 gets a Reject, a Reply with
    M=1 ends the attempt); private data <= 256; peer-to-peer off as Initiator,
    and as Responder supports Write and Read RTRs, preferring Write (and
    proposing Write when A comes with no type it supports); IRD/ORD up to 128;
    waits 10 s for a Reply and 5 s for a Request.
    """
    return MpaConfig(
        revision=Revision.REV2,
        markers=False,
        refuse_markers=True,
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
    only one accepted (a Reply choosing another type is error 7, answered by a
    Terminate); a Rev 2 Request met by a reset is retried with Rev 1; private
    data <= 256; ORD/IRD up to 32 (``c4iw_max_read_depth``); ``ep_timeout_secs=60``.
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
        rev1_fallback=True,
        request_timeout=60.0,
        reply_timeout=60.0,
    )


def irdma() -> MpaConfig:
    """Intel E800/X722 (``irdma``).

    Always sets C; Rev 2 frames always carry the peer-to-peer bit, offering Write
    and Read RTR, and as Responder it picks Read when offered; a Rev 2 frame
    without A or without a Write/Read RTR bit (-EOPNOTSUPP) and any Rev 0 frame
    are refused with no Reply, the connection reset; private data <= 512.
    """
    return MpaConfig(
        revision=Revision.REV2,
        markers=False,
        crc=True,
        rev0_profile=Rev0Profile.REFUSE,
        require_peer_to_peer=True,
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
        "its Reply echoes the Request's flag byte and Rev (reserved bits included), and a "
        "refused Rev 0 Request is closed without a Reply",
        "its Terminate has Layer and EType swapped (x86 bitfields); RTRs use STag 1",
    ),
    "cxgb4": (
        "answers a refused connection with a reset, not an R=1 Reply (with mpa_rev 0)",
        "its Reply advertises the global p2p_type even when it recorded Write",
    ),
    "irdma": (
        "as Initiator, a Responder ORD above its IRD resets the connection before it is "
        "established (iwarp reports error 6 after ConnectionEstablished)",
        "its Reject is sent with FIN; it retransmits MPA frames itself (own CM TCP)",
    ),
    "rfc": (),
}


def cli_options(config: MpaConfig) -> list[str]:
    """``iwarp listen``/``connect`` options that set what ``config`` holds (where the CLI can:
    not the timeouts, nor ``rev1_fallback``, which only ``connect`` has)."""
    opts = ["--mpa-rev", str(int(config.revision))]
    if config.markers:
        opts.append("--markers")
    if not config.crc:
        opts.append("--no-crc")
    if config.crc_required:
        opts.append("--crc-required")
    if config.refuse_markers:
        opts.append("--refuse-markers")
    if config.require_peer_to_peer:
        opts.append("--require-p2p")
    if config.rev0_profile is Rev0Profile.REFUSE:
        opts.append("--refuse-rev0")
    elif config.rev0_profile is Rev0Profile.PERMISSIVE:
        opts.append("--permissive")
    opts += ["--ird", str(config.ird), "--ord", str(config.ord)]
    opts += ["--pd-limit", str(config.private_data_limit)]
    if config.peer_to_peer:
        opts.append("--p2p")
    names = {RtrFlags.SEND: "send", RtrFlags.WRITE: "write", RtrFlags.READ: "read"}
    opts += ["--rtr", ",".join(name for flag, name in names.items() if flag in config.rtr_types)]
    opts += ["--rtr-prefer", ",".join(names[flag] for flag in config.rtr_preference)]
    # rev1_fallback is an Initiator's retry: ``iwarp connect --fallback-rev1``.
    return opts
