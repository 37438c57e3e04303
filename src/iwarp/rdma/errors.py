"""Errors a queue pair's user sees (every adapter raises these same classes)."""

from __future__ import annotations

from iwarp.errors import IwarpError
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import TerminateHeader
from iwarp.rdmap.work import Completion

__all__ = ["ConnectionTerminatedError", "RdmaError", "describe_terminate"]


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


class ConnectionTerminatedError(IwarpError):
    """The connection ended (Terminate, close or failure): nothing can be
    posted or received any more. The message says why."""
