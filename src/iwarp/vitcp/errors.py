"""VI/TCP errors, on the package's two branches (see :mod:`iwarp.errors`).

VI/TCP has no Terminate message; a peer learns of an error from the Remote
Error Code of a later segment (Reliable Reception, §3.2) or from the TCP
connection closing. Each remote error therefore names the VI Error Type bit
(:class:`ViErrorType`, re-exported by :mod:`iwarp.vitcp.wire`) it is reported with. ``layer`` stays
LLP: VI/TCP sits directly on TCP.
"""

from __future__ import annotations

from enum import IntFlag

from iwarp.errors import IwarpError, LocalProtocolError, RemoteProtocolError

__all__ = [
    "AttributeMismatchError",
    "CrcMismatchError",
    "DescriptorError",
    "MalformedSegmentError",
    "MemoryProtectionError",
    "UnexpectedSegmentError",
    "ViErrorType",
    "VitcpClosedError",
    "VitcpError",
    "VitcpRejectedError",
    "VitcpUsageError",
]


class ViErrorType(IntFlag):
    """§3.2 Remote Error Code, VI Error Type bits (low three bits)."""

    NONE = 0
    #: RDMA Memory Protection Error.
    MPE = 0x1
    #: VI Descriptor Error.
    VDE = 0x2
    #: Unrecoverable Transport Error.
    UTE = 0x4


class VitcpError(RemoteProtocolError):
    """The VI/TCP peer broke the protocol.

    ``vi_error`` is the VI Error Type reported back in Reliable Reception;
    ``message_number`` the message concerned, when known.
    """

    vi_error: ViErrorType = ViErrorType.UTE

    def __init__(self, message: str, *, message_number: int | None = None) -> None:
        super().__init__(message)
        self.message_number = message_number


class MalformedSegmentError(VitcpError):
    """Bad version, length, type, header or option layout (§3.2-§3.4)."""


class CrcMismatchError(VitcpError):
    """The trailer CRC does not match the segment (§3.6)."""


class UnexpectedSegmentError(VitcpError):
    """A well-formed segment that the connection state does not allow."""


class AttributeMismatchError(VitcpError):
    """Reliability level or peer-to-peer bit differ, or an Accept contradicts
    its Request (§3.3)."""


class MemoryProtectionError(VitcpError):
    """An RDMA segment names an unknown memory handle, leaves the region, or
    the access is not enabled (VI Error Type bit 0)."""

    vi_error = ViErrorType.MPE


class DescriptorError(VitcpError):
    """No receive descriptor for a message that needs one, or it is too small
    (VI Error Type bit 1)."""

    vi_error = ViErrorType.VDE


class VitcpUsageError(LocalProtocolError):
    """The local consumer misused the VI/TCP API; nothing was sent."""


# How a connection ended, as both adapters (asyncio and iwarp.sync) raise it.
# Neither is a protocol error in itself: a reject is the peer's right (§4),
# and a closed VI carries the protocol error that closed it, if any.


class VitcpRejectedError(IwarpError):
    """ConnectReject, or ConnectNoMatch: no VI waits for that discriminator."""

    def __init__(self, no_match: bool) -> None:
        super().__init__("no matching discriminator" if no_match else "connection rejected")
        self.no_match = no_match


class VitcpClosedError(IwarpError):
    """The VI connection is closed; ``error`` is the protocol error, if any."""

    def __init__(self, reason: str, error: VitcpError | None = None) -> None:
        super().__init__(reason)
        self.error = error
