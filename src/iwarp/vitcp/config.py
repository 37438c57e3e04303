"""Configuration of a VI/TCP endpoint and the values a connection agrees on.

:class:`VitcpConfig` is what this end offers in its CE header (§3.3) and how
it behaves; :class:`Negotiated` is what the ConnectRequest/ConnectAccept
exchange settled, never a mutation of the config.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import Enum

from iwarp.vitcp.crc import CrcOrder
from iwarp.vitcp.wire import (
    DISCRIMINATOR_SIZE,
    HEADER_SIZE,
    MAX_SEGMENT_LENGTH,
    RDMA_HEADER_SIZE,
    TRAILER_SIZE,
    Attributes,
    Reliability,
)

__all__ = ["MAX_MTU", "Negotiated", "ViRole", "VitcpConfig", "peer_role"]

#: The largest segment payload the 16-bit Segment Length allows for every
#: segment type, even when the length counts the trailer.
MAX_MTU = MAX_SEGMENT_LENGTH - HEADER_SIZE - RDMA_HEADER_SIZE - TRAILER_SIZE  # 65491


class ViRole(Enum):
    """§4: the active end sends the ConnectRequest; the passive end listens.

    Not MPA's :class:`iwarp.mpa.config.Role` (Initiator, Responder): a VI/TCP
    end's role says who opens TCP and sends the ConnectRequest, and in a
    peer-to-peer connect it is decided by addresses (:func:`peer_role`).
    """

    ACTIVE = "active"
    PASSIVE = "passive"


def peer_role(
    local_ip: str,
    remote_ip: str,
    local_discriminator: bytes = b"",
    remote_discriminator: bytes = b"",
) -> ViRole:
    """§4 peer-to-peer: the end with the numerically higher IP address is active.

    Equal addresses (both ends on one host) are not covered by the draft;
    the higher discriminator is then active, so both ends still agree.
    """
    local, remote = ipaddress.ip_address(local_ip), ipaddress.ip_address(remote_ip)
    if local.version != remote.version:
        raise ValueError("peer-to-peer ends must use the same IP version")
    if int(local) != int(remote):
        return ViRole.ACTIVE if int(local) > int(remote) else ViRole.PASSIVE
    if local_discriminator == remote_discriminator:
        raise ValueError("peer-to-peer ends on one address need different discriminators")
    return ViRole.ACTIVE if local_discriminator > remote_discriminator else ViRole.PASSIVE


@dataclass(frozen=True, slots=True, kw_only=True)
class VitcpConfig:
    """What this end proposes and accepts."""

    reliability: Reliability = Reliability.DELIVERY
    """VI reliability level; both ends must ask for the same one (§3.3)."""
    mtu: int = 32768
    """Largest payload of one VI segment we send or accept; the connection
    uses the lesser of both ends' values (§2.2.1, §3.3)."""
    rdma_write: bool = True
    """Accept RDMA Writes into our registered memory (RDMA Write Enable)."""
    rdma_read: bool = True
    """Serve RDMA Reads from our registered memory (RDMA Read Enable)."""
    flow_control: bool = False
    """Descriptor Flow Control Enabled: we hold Sends (and RDMA Writes with
    immediate data) until the peer has posted a receive descriptor."""
    read_window: int = 4
    """RDMA Reads we allow outstanding; the connection uses the lesser."""
    crc: bool = False
    """Offer the CRC option: trailers are used if both ends offer it (§3.6)."""
    urgent_marker: bool = False
    """Offer the Urgent Marker option: the peer may mark the first octet of a
    segment as TCP urgent data (§3.7). Only set it if urgent octets are kept
    in line (SO_OOBINLINE)."""
    peer_to_peer: bool = False
    """Peer-to-peer connection establishment (§4)."""
    discriminator: bytes = b""
    """Our discriminator: calling (active) or listening (passive), <= 64 octets."""
    connect_timeout: float = 10.0
    """Consumer timeout for VipConnectRequest / VipConnectPeerRequest (§4.2)."""
    incoming_timeout: float = 10.0
    """How long a passive end waits for the ConnectRequest (§4.3 Incoming)."""
    initial_message_number: int = 0
    """First Message Number (§3.2: "may be varied by an implementation");
    the ConnectRequest/Accept carries it, data messages follow it."""
    crc_order: CrcOrder = CrcOrder.MSB_FIRST
    """Bit order of the CRCs we send; both are accepted (see crc.py)."""
    length_includes_trailer: bool = False
    """Count the trailer in the Segment Length we send; the peer's reading is
    detected from its CE segment."""
    max_receive_size: int = 1 << 30
    """Largest Send a receive descriptor posted without a capacity accepts:
    a longer one is a descriptor error, so a peer cannot make us buffer
    without bound."""

    def __post_init__(self) -> None:
        if not 1 <= self.mtu <= 0xFFFFFFFF:
            raise ValueError(f"MTU {self.mtu} out of range")
        if not 0 <= self.read_window <= 0xFFFF:
            raise ValueError(f"read window {self.read_window} out of range")
        if len(self.discriminator) > DISCRIMINATOR_SIZE:
            raise ValueError("a discriminator has at most 64 octets")
        if self.max_receive_size < 0:
            raise ValueError("max_receive_size must not be negative")
        if not 0 <= self.initial_message_number < 1 << 32:
            raise ValueError("message numbers are 32 bits")

    @property
    def attributes(self) -> Attributes:
        """The Calling Attributes this config sends."""
        attrs = self.reliability.value
        if self.rdma_write:
            attrs |= Attributes.RDMA_WRITE
        if self.rdma_read:
            attrs |= Attributes.RDMA_READ
        if self.flow_control:
            attrs |= Attributes.FLOW_CONTROL
        if self.peer_to_peer:
            attrs |= Attributes.PEER_TO_PEER
        return attrs


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What the CE exchange settled for one connection."""

    reliability: Reliability
    #: The agreed MTU, bounded by what the 16-bit Segment Length allows.
    mtu: int
    #: RDMA Reads that may be outstanding.
    read_window: int
    #: Trailers on every data segment, both directions.
    crc: bool
    #: The peer's Calling Attributes.
    peer_attributes: Attributes
    #: We may mark segment starts as urgent (the peer sent the option).
    urgent_allowed: bool
    #: The peer counts the trailer in its Segment Length.
    peer_length_includes_trailer: bool
    #: The peer's discriminator and ours.
    remote_discriminator: bytes
    local_discriminator: bytes

    @property
    def peer_flow_control(self) -> bool:
        """The peer holds its Sends for our descriptors: we must advertise."""
        return bool(self.peer_attributes & Attributes.FLOW_CONTROL)

    @property
    def peer_rdma_write(self) -> bool:
        return bool(self.peer_attributes & Attributes.RDMA_WRITE)

    @property
    def peer_rdma_read(self) -> bool:
        return bool(self.peer_attributes & Attributes.RDMA_READ)
