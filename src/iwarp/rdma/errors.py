"""Errors a queue pair's user sees (every adapter raises these same classes)."""

from __future__ import annotations

from iwarp.errors import IwarpError, TerminateLayer
from iwarp.rdmap.errors import RdmapErrorType, RemoteOperationCode
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import Completion

__all__ = [
    "AtomicsNotSupportedError",
    "ConnectionTerminatedError",
    "RdmaError",
    "describe_terminate",
    "refuses_extensions",
]


def describe_terminate(header: TerminateHeader) -> str:
    """What a Terminate reports, by name (:func:`~iwarp.rdmap.terminate.terminate_name`)."""
    return terminate_name(header.layer, header.etype, header.code)


class RdmaError(IwarpError):
    """A work request completed with an error status.

    ``completion`` is the failed completion; ``terminate`` the Terminate
    that ended the stream, when one did.
    """

    def __init__(self, completion: Completion, terminate: TerminateHeader | None = None) -> None:
        where = "" if terminate is None else f" (Terminate {describe_terminate(terminate)})"
        super().__init__(
            f"{completion.opcode.value} work request {completion.wr_id}: "
            f"{completion.status.value}{where}"
        )
        self.completion = completion
        self.terminate = terminate


def refuses_extensions(header: TerminateHeader | None) -> bool:
    """Whether a Terminate is the answer of a peer without RFC 7306
    support: "a Remote Operation Error or Unexpected OpCode error" (RFC 7306
    §1.1), other than the catastrophic error a misaligned target brings."""
    return (
        header is not None
        and header.layer == TerminateLayer.RDMAP
        and header.etype == RdmapErrorType.REMOTE_OPERATION
        and header.code != RemoteOperationCode.CATASTROPHIC_STREAM
    )


class AtomicsNotSupportedError(RdmaError):
    """The peer refused an Atomic Operation as a peer without RFC 7306
    Atomic Operations does (Remote Operation Error / Unexpected OpCode,
    RFC 7306 §1.1). The connection is over (the peer terminated it)."""

    def __init__(self, completion: Completion, terminate: TerminateHeader | None = None) -> None:
        super().__init__(completion, terminate)
        what = "" if terminate is None else f": it answered {describe_terminate(terminate)}"
        self.args = (
            f"the peer does not support RFC 7306 Atomic Operations{what}; "
            "the connection is terminated",
        )


class ConnectionTerminatedError(IwarpError):
    """The connection ended (Terminate, close or failure): nothing can be
    posted or received any more. The message says why."""
