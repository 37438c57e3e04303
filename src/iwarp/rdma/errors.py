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
    "connection_ended",
    "describe_terminate",
    "refuses_extensions",
    "terminate_fields",
]


def describe_terminate(header: TerminateHeader) -> str:
    """What a Terminate reports, by name (:func:`~iwarp.rdmap.terminate.terminate_name`)."""
    return terminate_name(header.layer, header.etype, header.code)


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


class ConnectionTerminatedError(IwarpError):
    """The connection ended (Terminate, close or failure): nothing can be
    posted or received any more. The message says why and names the peer.

    After a Terminate, sent or received, every later call on the queue pair
    raises this error with the same message and fields (docs/errors.md).

    :ivar terminate: the Terminate that ended the stream, or None (a close,
        a lost connection, a failed startup).
    :ivar terminate_received: the peer sent it (False: we did).
    :ivar peer: the peer's address as ``host:port``, or None when unknown.
    :ivar closed_by_peer: the peer closed TCP (FIN) with no Terminate.
    :ivar call: the call that raised it (``send``, ``rdma_read``,
        ``receive``, ``post_send``...), named first in the message
        (``rdma_read failed: ...``); None for ``close()``'s report.
    """

    def __init__(
        self,
        message: str,
        *,
        terminate: TerminateHeader | None = None,
        terminate_received: bool = False,
        peer: str | None = None,
        closed_by_peer: bool = False,
        call: str | None = None,
    ) -> None:
        super().__init__(message)
        self.call = call
        self.terminate = terminate
        self.terminate_received = terminate_received
        self.peer = peer
        self.closed_by_peer = closed_by_peer

    @property
    def layer(self) -> TerminateLayer | None:
        """The Terminate's layer (RFC 5040 §7.1), None without one."""
        return None if self.terminate is None else TerminateLayer(self.terminate.layer)

    @property
    def etype(self) -> int | None:
        """The Terminate's error type, None without one."""
        return None if self.terminate is None else self.terminate.etype

    @property
    def code(self) -> int | None:
        """The Terminate's error code, None without one."""
        return None if self.terminate is None else self.terminate.code


def terminate_fields(header: TerminateHeader) -> str:
    """A Terminate's numbers and meaning, e.g. ``layer DDP, type 1, code 0x00:
    DDP tagged buffer error: invalid STag (RFC 5041 §7.2)``."""
    layer = header.layer
    layer_name = TerminateLayer(layer).name if layer in _LAYER_VALUES else str(layer)
    return (
        f"layer {layer_name}, type {header.etype}, code {header.code:#04x}: "
        f"{describe_terminate(header)}"
    )


_LAYER_VALUES = frozenset(int(layer) for layer in TerminateLayer)


class RdmaError(IwarpError):
    """A work request completed with an error status: the peer refused it.

    The message names the call, then what ended the connection, in the
    words of :func:`connection_ended` (the peer's address and the
    Terminate's layer, type, code and RFC name), e.g. ``rdma_read failed
    (remote access error): the peer 10.0.0.2:4791 terminated the
    connection: Terminate received (...)``. No internal work request id.

    :ivar completion: the failed completion.
    :ivar terminate: the Terminate that ended the stream, when one did.
    :ivar call: the verb that failed (``rdma_read``, ``fetch_add``...).
    :ivar peer: the peer's address as ``host:port``, or None when unknown.
    """

    def __init__(
        self,
        completion: Completion,
        terminate: TerminateHeader | None = None,
        *,
        call: str | None = None,
        ended: ConnectionTerminatedError | None = None,
    ) -> None:
        self.completion = completion
        self.terminate = terminate
        self.call = call if call is not None else completion.opcode.value
        self.peer = None if ended is None else ended.peer
        status = completion.status.value.replace("_", " ")
        if ended is not None:
            cause = f": {ended}"
        elif terminate is not None:
            cause = f": Terminate ({terminate_fields(terminate)})"
        else:
            cause = ""
        super().__init__(f"{self.call} failed ({status}){cause}")


class AtomicsNotSupportedError(RdmaError):
    """The peer refused an Atomic Operation as a peer without RFC 7306
    Atomic Operations does (Remote Operation Error / Unexpected OpCode,
    RFC 7306 §1.1). The connection is over (the peer terminated it)."""

    def __init__(
        self,
        completion: Completion,
        terminate: TerminateHeader | None = None,
        *,
        call: str | None = None,
        ended: ConnectionTerminatedError | None = None,
    ) -> None:
        super().__init__(completion, terminate, call=call, ended=ended)
        who = "the peer" if self.peer is None else f"the peer {self.peer}"
        what = "" if terminate is None else f": it answered {describe_terminate(terminate)}"
        self.args = (
            f"{self.call} failed: {who} does not support RFC 7306 Atomic Operations{what}; "
            "the connection is terminated",
        )


def connection_ended(
    peer: str | None,
    terminate: TerminateHeader | None,
    terminate_received: bool,
    closed_by_peer: bool,
    reason: str,
    call: str | None = None,
) -> ConnectionTerminatedError:
    """The one error of a queue pair whose connection ended, in words that
    name the peer and what ended it: the Terminate (its layer, type, code,
    the RFC's name, and who sent it), the peer's close, or ``reason`` (the
    endpoint's words for anything else). The same words every time: nothing
    that happens after the end (TCP closing) changes them. ``call``: the
    call that raises it, said first (``rdma_read failed: ...``)."""
    who = "the peer" if peer is None else f"the peer {peer}"
    to = "" if peer is None else f" to {peer}"
    if terminate is not None:
        fields = terminate_fields(terminate)
        if terminate_received:
            message = f"{who} terminated the connection: Terminate received ({fields})"
        else:
            message = f"the connection{to} ended: Terminate sent ({fields})"
    elif closed_by_peer:
        message = f"{who} closed the connection"
    else:
        message = f"the connection{to} ended: {reason}"
    if call is not None:
        message = f"{call} failed: {message}"
    return ConnectionTerminatedError(
        message,
        terminate=terminate,
        terminate_received=terminate_received,
        peer=peer,
        closed_by_peer=closed_by_peer,
        call=call,
    )
