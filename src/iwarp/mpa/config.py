"""Configuration of an MPA endpoint: what it offers and what it tolerates.

:class:`MpaConfig` is immutable; the values a connection actually ends up
with after the Request/Reply exchange are an :class:`~iwarp.mpa.events.MpaParams`.
The defaults follow what today's peers (Linux siw, Chelsio cxgb4, Intel
irdma) send: MPA Rev 2 (RFC 6581) with enhanced data, CRC on, markers off.
See ``docs/mpa-connection.md`` for the reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from iwarp.mpa.wire import (
    IRD_ORD_MASK,
    MAX_PRIVATE_DATA,
    MAX_PRIVATE_DATA_REV0,
    RTR_TYPES,
    Revision,
    RtrFlags,
)

__all__ = ["MpaConfig", "Rev0Profile", "Role"]


class Role(Enum):
    """Which end of the MPA startup this endpoint plays (RFC 5044 §7.1).

    Unrelated to who opened the TCP connection: the Initiator is the end
    that sends the MPA Request Frame.
    """

    INITIATOR = "initiator"
    RESPONDER = "responder"


class Rev0Profile(Enum):
    """How an IETF endpoint (Rev >= 1) treats a Rev 0 peer (RFC 5044 Appendix C).

    Rev 0 is the MPA of draft-ietf-rddp-mpa-01/02 and of RDMA Consortium
    ("RDMAC") RNICs, which run DDP/RDMAP version 0 with markers and CRC on.
    """

    #: Appendix C.2.1/C.2.2: cannot run DDP/RDMAP version 0. As Responder it
    #: answers with its own Rev and closes; as Initiator it closes on a Rev 0
    #: Reply. The connection fails with MPA error 4.
    NON_PERMISSIVE = "non-permissive"
    #: Appendix C.2.4/C.2.5: switches this connection to RDMAC mode: a Rev 0
    #: Reply with M=1 and C=1, markers in both directions, CRC on, and
    #: DDP/RDMAP version 0 reported to the upper layer.
    PERMISSIVE = "permissive"
    #: Intel irdma: Rev 0 is not a revision it parses. The frame is improperly
    #: formatted (error 4): no Reply at all, the connection is closed (irdma
    #: resets it). As Initiator, as NON_PERMISSIVE.
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True, kw_only=True)
class MpaConfig:
    """What this endpoint sends in its Request/Reply and what it accepts."""

    revision: int = Revision.REV2
    """MPA revision to send: 0 (draft-ietf-rddp-mpa-01/02, RDMAC), 1 (RFC
    5044) or 2 (RFC 6581; the frame carries the S bit and IRD/ORD)."""

    markers: bool = False
    """Our M bit: ask the peer to put markers in the FPDUs it sends *to us*
    (RFC 5044 §7.1.1). Markers we send depend only on the peer's M bit."""

    crc: bool = True
    """Our C bit. CRC is used in both directions if either side sets it."""

    crc_required: bool = False
    """Always send C=1 and refuse a peer whose frame has C=0 (siw's
    ``mpa_crc_required``): the Responder rejects, the Initiator exits."""

    crc_strict: bool = False
    """With ``crc`` off: refuse a peer whose frame has C=1 instead of turning
    CRC on (siw's ``mpa_crc_strict``)."""

    rev0_profile: Rev0Profile = Rev0Profile.NON_PERMISSIVE
    """Handling of Rev 0 peers when ``revision`` >= 1 (RFC 5044 Appendix C)."""

    refuse_markers: bool = False
    """Never send markers: refuse a peer whose frame asks for them (M=1), as
    siw does. The Responder answers with a Reject (R=1) carrying our own M
    bit; the Initiator exits MPA on such a Reply. Our own M bit is ``markers``."""

    rev1_fallback: bool = False
    """Initiator: when the peer closes or resets the connection on our Rev 2
    Request, retry once on a new connection with Rev 1 (RFC 6581 §10 "MAY",
    as cxgb4 does). The asyncio ``connect`` and ``iwarp connect`` honour it
    (a sans-IO core cannot open connections); ``retry_as_rev1`` decides."""

    require_peer_to_peer: bool = False
    """Refuse a Rev 2 frame (with this endpoint at Rev 2) that lacks RFC 6581
    Control Flag A or an RTR type among ``rtr_types``, as irdma does
    (-EOPNOTSUPP): the frame is improperly formatted (error 4), no Reply is
    sent and the connection is closed. A Reject (R=1) is still a reject."""

    private_data_limit: int = MAX_PRIVATE_DATA
    """Largest private data field (RFC 6581 enhanced data included) sent or
    accepted in a Rev >= 1 frame: at most 512 (RFC 5044 §7.1.1); siw and
    cxgb4 use 256. A longer field makes the frame improperly formatted."""

    rev0_private_data_limit: int = MAX_PRIVATE_DATA_REV0
    """The same for Rev 0 frames, whose PD_Length may reach 65535."""

    receive_buffer_limit: int = 65536 + 20
    """Octets this endpoint buffers while waiting for a whole startup frame
    or for the application's accept/reject; bounds every private data
    limit (RFC 5044 §7.1.2 rule 9: "the application buffer")."""

    ird: int = 16
    """RFC 6581 §9.1 IRD offered: inbound RDMA Read Requests we can queue.
    0x3FFF asks for no automatic negotiation."""

    ord: int = 16
    """RFC 6581 §9.1 ORD offered: outbound RDMA Reads we want to issue."""

    peer_to_peer: bool = False
    """Initiator: set Control Flag A (RFC 6581 §9.2) and offer ``rtr_types``;
    the first FPDU then is a zero-length RTR message of the chosen type."""

    rtr_types: RtrFlags = RtrFlags.WRITE | RtrFlags.READ
    """RTR messages this endpoint can send (Initiator) or receive (Responder),
    any of B (Send), C (Write), D (Read)."""

    rtr_preference: tuple[RtrFlags, ...] = (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND)
    """Order in which one RTR type is chosen among those both sides support
    (siw and cxgb4 prefer Write, irdma Read)."""

    request_timeout: float = 5.0
    """Responder: seconds to wait for the Request after starting (rule 8;
    detects Responder/Responder mis-starts). siw uses 5 s."""

    reply_timeout: float = 10.0
    """Initiator: seconds to wait for the Reply after sending the Request
    (siw uses 10 s)."""

    frame_timeout: float = 5.0
    """Seconds allowed from the first octet of a startup frame to its last
    (rule 10: guards against slow senders)."""

    def __post_init__(self) -> None:
        if self.revision not in (0, 1, 2):
            raise ValueError(f"revision must be 0, 1 or 2, got {self.revision}")
        if not 0 <= self.private_data_limit <= MAX_PRIVATE_DATA:
            raise ValueError(f"private_data_limit must be 0..{MAX_PRIVATE_DATA}")
        if not 0 <= self.rev0_private_data_limit <= MAX_PRIVATE_DATA_REV0:
            raise ValueError(f"rev0_private_data_limit must be 0..{MAX_PRIVATE_DATA_REV0}")
        if self.receive_buffer_limit < 20:
            raise ValueError("receive_buffer_limit must hold at least a frame header (20)")
        for name in ("ird", "ord"):
            value = getattr(self, name)
            if not 0 <= value <= IRD_ORD_MASK:
                raise ValueError(f"{name} must be 0..{IRD_ORD_MASK}, got {value}")
        if self.rtr_types & ~RTR_TYPES:
            raise ValueError("rtr_types may hold only SEND, WRITE and READ")
        for name in ("request_timeout", "reply_timeout", "frame_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.crc_strict and self.crc_required:
            raise ValueError("crc_strict (refuse CRC) contradicts crc_required")

    @property
    def sends_crc(self) -> bool:
        """The C bit this endpoint puts in its frames."""
        return self.crc or self.crc_required
