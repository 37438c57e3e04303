"""TCP socket handling that the asyncio and the blocking adapters share.

Nothing here knows an event loop: socket options (VI/TCP's urgent data
too), vectored sends that may go out in part, and a listening socket that
stays usable when the process runs out of file descriptors.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from iwarp._typing import Buffer
from iwarp.mpa.connection import DEFAULT_EMSS

__all__ = [
    "MAX_IOV",
    "RECEIVE_BULK",
    "RECEIVE_CHUNK",
    "SheddingSocket",
    "address_text",
    "connect_failure_reason",
    "DRAIN_LIMIT",
    "finish_writing",
    "is_connect_failure",
    "named_connect_error",
    "LISTEN_BACKLOG",
    "listening_socket",
    "listening_socket_for",
    "send_chunks",
    "send_urgent",
    "tcp_setup",
    "unsent_part",
    "urgent_pointer_exact",
    "vitcp_setup",
    "write_chunks",
]

log = logging.getLogger("iwarp")

#: Octets read per ``recv_into`` into a driver's receive buffer.
RECEIVE_CHUNK: Final = 256 << 10
#: The receive buffer of a bulk transfer: a blocking connection whose read
#: filled its buffer reads this much at once from then on, and the asyncio
#: drivers' buffer (one per thread) is this size. Four times fewer reads
#: per MiB, each costing a wake-up and the stack's Python per read
#: (docs/performance.md, "The whole-message lanes").
RECEIVE_BULK: Final = 1 << 20
#: Most buffers per ``sendmsg`` (Linux IOV_MAX is 1024).
MAX_IOV: Final = 512


def tcp_setup(sock: socket.socket | None) -> int:
    """Turn Nagle off (RFC 5044 §5.3: FPDUs go out when framed) and return
    the EMSS that MULPDU is sized from (TCP_MAXSEG; :data:`DEFAULT_EMSS`
    when the socket cannot tell)."""
    if sock is None:
        return DEFAULT_EMSS
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        emss = int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
    except (OSError, AttributeError):
        return DEFAULT_EMSS
    return emss if emss > 0 else DEFAULT_EMSS


def urgent_pointer_exact() -> bool:
    """Whether the kernel's urgent pointer points at the urgent octet
    (RFC 1122), which VI/TCP §3.7 requires before any octet is marked urgent:
    on Linux ``net.ipv4.tcp_stdurg = 1``. With the default BSD behaviour
    (pointer after the octet) urgent data is never sent."""
    try:
        return Path("/proc/sys/net/ipv4/tcp_stdurg").read_text().strip() == "1"
    except OSError:
        return False


def vitcp_setup(sock: socket.socket | None, *, send_urgent: bool) -> socket.socket | None:
    """TCP_NODELAY and SO_OOBINLINE for a VI/TCP connection: received urgent
    octets stay in the stream (§3.7).

    With ``send_urgent`` (the adapter may mark octets urgent and
    :func:`urgent_pointer_exact` holds) returns a duplicate of the socket to
    send MSG_OOB with; else None.
    """
    if sock is None:
        return None
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
        if not send_urgent:
            return None
        return socket.fromfd(sock.fileno(), sock.family, sock.type)
    except OSError:
        return None


def send_urgent(sock: socket.socket, parts: list[Buffer]) -> tuple[bool, bytes]:
    """Send a segment's first octet as TCP urgent data (``MSG_OOB``, VI/TCP
    §3.7) on ``sock``, the duplicate :func:`vitcp_setup` gave. Returns
    whether the kernel took it and the octets still to write, in order: the
    rest of the segment, or all of it when the urgent octet did not go."""
    data = b"".join(bytes(part) for part in parts)
    try:
        sent = sock.send(data[:1], socket.MSG_OOB)
    except OSError:
        sent = 0
    return (True, data[1:]) if sent == 1 else (False, data)


def _size(chunk: Buffer) -> int:
    return chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)


def unsent_part(chunks: list[Buffer], sent: int) -> list[Buffer]:
    """What is left of ``chunks`` after ``sent`` octets went out (the buffers
    not touched stay the same objects; a partly sent one becomes a view)."""
    for i, chunk in enumerate(chunks):
        size = _size(chunk)
        if sent < size:
            rest = chunks[i:]
            if sent:
                rest[0] = memoryview(chunk).cast("B")[sent:]
            return rest
        sent -= size
    return []


def send_chunks(
    sock: socket.socket,
    chunks: list[Buffer],
    on_sent: Callable[[list[Buffer], int], None] | None = None,
) -> list[Buffer]:
    """``sendmsg`` the buffers, :data:`MAX_IOV` at a time, as far as a
    non-blocking socket takes them; returns what it did not take, in order.
    ``on_sent(batch, n)`` sees each batch and how many octets of it went.

    :raises OSError: the connection failed (not for a full send buffer).
    """
    if len(chunks) == 1 and on_sent is None:  # one framed run: most sends
        chunk = chunks[0]
        try:
            sent = sock.send(chunk)
        except (BlockingIOError, InterruptedError):
            return chunks
        return [] if sent == _size(chunk) else unsent_part(chunks, sent)
    return write_chunks(sock.sendmsg, chunks, on_sent)


#: Most octets of unread input :func:`finish_writing` discards (a peer that
#: sends faster than we read stops it; the close then proceeds).
DRAIN_LIMIT: Final = 4 << 20


def finish_writing(sock: Any, fd: int) -> None:
    """Before a graceful close while the peer may still send: shut our
    write side (FIN right behind what is queued, a Terminate above all) and
    discard the input that is there, without waiting (at most
    :data:`DRAIN_LIMIT` octets). Closing a socket with unread input makes
    the kernel answer with RST and drop what it has not sent yet; a peer
    may then never see the Terminate that explains the close (RFC 5040
    §5.4). ``sock`` is the socket (or asyncio's view of it), ``fd`` its
    non-blocking descriptor."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    left = DRAIN_LIMIT
    with contextlib.suppress(OSError):  # (BlockingIOError: nothing more there)
        while left > 0:
            got = len(os.read(fd, min(left, 1 << 16)))
            if not got:
                return
            left -= got


def write_chunks(
    write: Callable[[list[Buffer]], int],
    chunks: list[Buffer],
    on_sent: Callable[[list[Buffer], int], None] | None = None,
) -> list[Buffer]:
    """:func:`send_chunks` with any gathering write of a non-blocking
    descriptor (``sock.sendmsg``, or ``os.writev`` on its file descriptor):
    :data:`MAX_IOV` buffers per call, as far as it takes them; returns what
    it did not take, in order.

    :raises OSError: the connection failed (not for a full send buffer).
    """
    for first in range(0, len(chunks), MAX_IOV):
        batch = chunks[first : first + MAX_IOV]
        try:
            sent = write(batch)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if on_sent is not None:
            on_sent(batch, sent)
        left = unsent_part(batch, sent)
        if left:
            left.extend(chunks[first + MAX_IOV :])
            return left
    return []


#: accept() errors that mean "no descriptor left" (per process, system-wide).
_OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE})


class SheddingSocket(socket.socket):
    """A listening socket that refuses connections it has no descriptor for.

    Out of descriptors, ``accept()`` fails while the connection stays in the
    kernel's backlog, where no startup timer runs; asyncio then logs the
    error (with a traceback, once per try) and stops accepting for a
    second. This socket keeps one spare descriptor instead (the libev
    technique): it closes the spare, accepts the waiting connection, closes
    it at once (the peer sees EOF) and takes the spare again, so every
    connection is either served or closed, the listener never spins on a
    backlog it cannot accept from, and the episode is logged once (a
    warning when it starts, one line with the count when accepting works
    again). Such an ``accept()`` raises :class:`ConnectionAbortedError`,
    which asyncio and the blocking listener take as "nothing to accept".
    """

    def __init__(self, family: int, kind: int, proto: int) -> None:
        super().__init__(family, kind, proto)
        self._spare = _take_spare()
        self._refused = 0

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            conn, address = super().accept()
        except OSError as exc:
            if exc.errno not in _OUT_OF_DESCRIPTORS or self._spare is None:
                raise
            self._refuse(exc)
            raise ConnectionAbortedError(exc.errno, "connection refused: no descriptor") from None
        if self._refused:
            log.warning(
                "listener %s accepts again; %d connections were closed at once while it "
                "had no file descriptor",
                self.getsockname(),
                self._refused,
            )
            self._refused = 0
        return conn, address

    def _refuse(self, exc: OSError) -> None:
        if not self._refused:
            log.warning(
                "listener %s is out of file descriptors (%s; RLIMIT_NOFILE %s): new "
                "connections are closed at once until some close",
                self.getsockname(),
                exc.strerror,
                _nofile_limit(),
            )
        spare, self._spare = self._spare, None
        if spare is not None:
            os.close(spare)
        with contextlib.suppress(OSError):
            conn, _ = super().accept()
            conn.close()
            self._refused += 1
        self._spare = _take_spare()

    def close(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            os.close(spare)
        super().close()


def _take_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return None


def _nofile_limit() -> str:
    try:
        import resource  # Unix only

        return str(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (ImportError, OSError, ValueError):
        return "unknown"


#: The listen backlog of every server and listener (asyncio's ``serve``,
#: the blocking ``listen``, VI/TCP's listeners), unless one is given.
LISTEN_BACKLOG: Final = 1024


def listening_socket(family: int, address: Any, backlog: int) -> SheddingSocket:
    """A non-blocking :class:`SheddingSocket` bound to ``address`` and
    listening (SO_REUSEADDR; IPv6 sockets take only IPv6)."""
    sock = SheddingSocket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def listening_socket_for(infos: Iterable[tuple[Any, ...]], backlog: int) -> SheddingSocket | None:
    """:func:`listening_socket` on the one address ``getaddrinfo`` results
    (``infos``) name; None when they name several (the caller binds them all)."""
    addresses = {(info[0], info[4]) for info in infos}
    if len(addresses) != 1:
        return None
    family, address = addresses.pop()
    return listening_socket(family, address, backlog)


#: Why a connect failed, said plainly, by errno.
_CONNECT_REASONS: Final = {
    errno.ECONNREFUSED: "connection refused: nothing listens on that port",
    errno.ETIMEDOUT: "no answer (timed out)",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ECONNRESET: "the peer reset the connection",
    errno.EADDRNOTAVAIL: "the address is not available here",
}


def connect_failure_reason(error: BaseException) -> str:
    """Why a TCP connect failed, in words (for every command's "cannot
    reach" message)."""
    # A library connect's error names the address already: its cause's words.
    error = getattr(error, "connect_cause", None) or error
    if isinstance(error, socket.gaierror):
        return f"the host name does not resolve ({error.strerror})"
    if isinstance(error, TimeoutError) and error.errno is None:
        return "no answer (timed out)"
    if isinstance(error, OSError) and error.errno in _CONNECT_REASONS:
        return _CONNECT_REASONS[error.errno]
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[:1].lower() + error.strerror[1:]
    return str(error) or type(error).__name__


def address_text(address: object) -> str | None:
    """A socket address as ``host:port`` (``[host]:port`` for IPv6), for
    messages; None when there is none."""
    if not isinstance(address, tuple) or len(address) < 2:
        return None if address is None else str(address)
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def named_connect_error(error: OSError, host: str, port: int) -> OSError:
    """``error`` of a failed TCP connect, as the same class with the same
    errno whose message names the address and the reason in words (the
    library's connect calls raise it ``from`` the original)."""
    where = address_text((host, port))
    if isinstance(error, socket.gaierror):
        message = f"cannot resolve {host!r} to connect to {where}: {error.strerror}"
    elif is_connect_failure(error) or not error.strerror:
        message = f"cannot connect to {where}: {connect_failure_reason(error)}"
    else:  # (a local cause, such as a source address not here: the system's words)
        message = f"cannot connect to {where}: {error.strerror}"
    named = type(error)(message) if error.errno is None else type(error)(error.errno, message)
    named.connect_cause = error  # type: ignore[attr-defined]
    return named


def is_connect_failure(error: BaseException) -> bool:
    """Whether ``error`` says the peer could not be reached at all (a name
    that does not resolve, a refused, unroutable or unanswered connect), as
    opposed to a connection that failed later (a reset, say) or a local
    address that cannot be used (a source address not on this host)."""
    if isinstance(error, (socket.gaierror, ConnectionRefusedError)):
        return True
    if isinstance(error, TimeoutError) and error.errno is None:
        return False  # a wait of ours ran out, not the connect
    return isinstance(error, OSError) and error.errno in {
        errno.ECONNREFUSED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
    }
