"""``--pcap FILE``: record this process's own TCP traffic as pcapng.

No root, no tcpdump: while :func:`pcap_capture` is active, every
connection the running event loop opens or accepts (``create_connection``,
``create_server``) is tapped between the transport and the protocol, and
what the protocol writes and what it receives go to a
:class:`~iwarp.analyze.pcapng.TcpFlow` with the socket's real addresses and
ports. ``iwarp decode`` and Wireshark read the file.

A command adds the option with :func:`add_pcap_option` and runs its
coroutine as ``captured(args.pcap, coroutine)``, or inside
``async with pcap_capture(args.pcap):`` (both no-ops for None).

The file is opened when the command line is read (:func:`open_captures`,
called by ``iwarp``'s dispatch), so a path that cannot be opened is a usage
error before anything starts. A write that fails later (a full disk, an I/O
error) stops the command: the writer keeps the error instead of raising it
into a protocol's callback, the command's task is cancelled (the blocking
adapter's call raises), and :class:`~iwarp.cli._run.CommandStoppedError` carries one
line naming the file and the error to the runner, which prints it and the
command's summary so far and exits with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from iwarp.analyze.origin import application_name
from iwarp.analyze.pcapng import PcapngWriter, TcpFlow
from iwarp.cli._run import CommandStoppedError

__all__ = [
    "CaptureFile",
    "add_pcap_option",
    "captured",
    "open_captures",
    "pcap_capture",
    "sync_pcap_capture",
]

T = TypeVar("T")


class CaptureFile:
    """A ``--pcap FILE`` as the command line named it; :meth:`open` opens it
    for writing before the command starts."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.command = "iwarp"
        self._out: BinaryIO | None = None

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    def open(self, command: str) -> None:
        """Open (truncate) the file; ``command`` (``iwarp demo``) starts the
        lines that report on it. :raises OSError: it cannot be opened."""
        self.command = command
        if self._out is None:
            self._out = open(self.path, "wb")  # noqa: SIM115 - closed by take()'s user

    def take(self) -> BinaryIO:
        """The opened file (opened now if :meth:`open` was not called)."""
        if self._out is None:
            self.open(self.command)
        out = self._out
        assert out is not None
        return out

    def write_failed(self, exc: OSError) -> CommandStoppedError:
        """The one line that stops the command (without a traceback)."""
        return CommandStoppedError(
            f"{self.command}: --pcap {self.path}: write failed: {_reason(exc)}"
        )


def _reason(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the system's words and the code."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def open_captures(args: argparse.Namespace, command: str) -> str | None:
    """Open every :class:`CaptureFile` of ``args``; the usage error (one line)
    for the first that cannot be opened, or None."""
    for value in vars(args).values():
        if isinstance(value, CaptureFile):
            try:
                value.open(command)
            except OSError as exc:
                return f"{command}: --pcap {value.path}: cannot open for writing: {_reason(exc)}"
    return None


def add_pcap_option(parser: argparse.ArgumentParser) -> None:
    """The ``--pcap FILE`` option (the same help in every command)."""
    parser.add_argument(
        "--pcap",
        type=CaptureFile,
        default=None,
        metavar="FILE",
        help="write what this process sends and receives to FILE as pcapng (synthesized "
        "Ethernet/IP/TCP headers, real ports and stream offsets); read it with iwarp decode "
        "or Wireshark. A FILE that cannot be opened is a usage error (exit 2); a write that "
        "fails during the run stops the command with its summary so far (exit 1)",
    )


def _target(path: CaptureFile | Path | str) -> CaptureFile:
    return path if isinstance(path, CaptureFile) else CaptureFile(str(path))


@contextlib.asynccontextmanager
async def pcap_capture(
    path: CaptureFile | Path | str | None, *, raw_ulp: bool = False
) -> AsyncIterator[PcapngWriter | None]:
    """Tap every connection of the running loop into ``path`` until exit.

    ``raw_ulp``: the MPA connections carry bare ULPDUs, not DDP segments
    (``--op mpa``); the file says so (:mod:`iwarp.analyze.origin`), and
    ``iwarp decode`` does not decode DDP/RDMAP headers in it.

    :raises CommandStoppedError: a write to the file failed (the block was cancelled)."""
    if path is None:
        yield None
        return
    target = _target(path)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    failures: list[OSError] = []

    def failed(exc: OSError) -> None:
        failures.append(exc)
        if task is not None and len(failures) == 1:
            task.cancel()  # it wakes with CancelledError at its next await

    with target.take() as out:
        writer = PcapngWriter(out, application=application_name(raw_ulp=raw_ulp), on_error=failed)
        tap = _LoopTap(loop, writer)
        tap.install()
        try:
            yield writer
        except asyncio.CancelledError:
            if not failures:
                raise
        finally:
            tap.uninstall()
            writer.close()  # connections that end later are not recorded
            if failures:
                _quiet_close(out)
        if failures:
            if task is not None:
                task.uncancel()  # failed()'s cancel is taken back: CommandStoppedError says why
            raise target.write_failed(failures[0])


def _quiet_close(out: BinaryIO) -> None:
    """Close a file whose writes failed: its buffer cannot be written either."""
    with contextlib.suppress(OSError):
        out.close()


@contextlib.contextmanager
def sync_pcap_capture(path: CaptureFile | Path | str | None, *, initiator: bool) -> Iterator[None]:
    """The same for the blocking adapter (``iwarp.sync``): every connection
    whose driver starts inside the block, seen from the end that connected
    (``initiator``) or accepted. A failed write raises
    :class:`~iwarp.cli._run.CommandStoppedError` out of the adapter's call that recorded it."""
    from iwarp.sync._calls import Tap, tapping  # the CLI's other paths do not need it

    if path is None:
        yield
        return
    target = _target(path)

    def failed(exc: OSError) -> None:
        raise target.write_failed(exc)

    with target.take() as out:
        flows: list[TcpFlow] = []
        try:
            writer = PcapngWriter(out, on_error=failed)

            def tap(sock: socket.socket) -> Tap | None:
                try:
                    local, remote = sock.getsockname(), sock.getpeername()
                except OSError:
                    return None  # already gone: nothing to record
                flow = TcpFlow(writer, local, remote, initiator=initiator)
                flows.append(flow)
                return flow

            try:
                with tapping(tap):
                    yield
            finally:
                for flow in flows:
                    flow.close()
                writer.close()
        except CommandStoppedError:
            _quiet_close(out)
            raise


async def captured(path: CaptureFile | Path | str | None, work: Awaitable[T]) -> T:
    """``work`` with its traffic recorded into ``path`` (None: not recorded);
    the one call a command needs: ``asyncio.run(captured(args.pcap, main()))``."""
    async with pcap_capture(path):
        return await work


class _LoopTap:
    """Wraps the loop's ``create_connection`` and ``create_server``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, writer: PcapngWriter) -> None:
        self._loop = loop
        self._writer = writer
        self._flows: list[TcpFlow] = []
        self._saved: dict[str, Any] = {}

    def install(self) -> None:
        loop: Any = self._loop
        create_connection = loop.create_connection
        create_server = loop.create_server
        self._saved = {"create_connection": create_connection, "create_server": create_server}

        async def tapped_connection(
            factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
        ) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
            transport, protocol = await create_connection(
                lambda: _tapped(factory(), self._writer, self._flows, initiator=True),
                *args,
                **kwargs,
            )
            return transport, protocol.inner

        async def tapped_server(
            factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
        ) -> asyncio.AbstractServer:
            server: asyncio.AbstractServer = await create_server(
                lambda: _tapped(factory(), self._writer, self._flows, initiator=False),
                *args,
                **kwargs,
            )
            return server

        loop.create_connection = tapped_connection
        loop.create_server = tapped_server

    def uninstall(self) -> None:
        loop: Any = self._loop
        for name in self._saved:
            with contextlib.suppress(AttributeError):
                delattr(loop, name)  # the instance attribute; the method shows again
        for flow in self._flows:
            flow.close()
        self._flows.clear()


def _tapped(
    inner: asyncio.BaseProtocol, writer: PcapngWriter, flows: list[TcpFlow], *, initiator: bool
) -> _TapProtocol:
    kind = _BufferedTap if isinstance(inner, asyncio.BufferedProtocol) else _TapProtocol
    return kind(inner, writer, flows, initiator)


class _TapProtocol(asyncio.Protocol):
    """Sits between a transport and the real protocol, recording both ways."""

    def __init__(
        self,
        inner: asyncio.BaseProtocol,
        writer: PcapngWriter,
        flows: list[TcpFlow],
        initiator: bool,
    ) -> None:
        self.inner = inner
        self._writer = writer
        self._flows = flows
        self._initiator = initiator
        self.flow: TcpFlow | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        local = transport.get_extra_info("sockname")
        remote = transport.get_extra_info("peername")
        endpoints = isinstance(local, tuple) and isinstance(remote, tuple)
        mirrored = endpoints and any(f.key == (remote[:2], local[:2]) for f in self._flows)
        if endpoints and not mirrored:
            # (Both ends in this process, as in iwarp demo: recorded once.)
            flow = TcpFlow(self._writer, local, remote, initiator=self._initiator)
            self.flow = flow
            self._flows.append(flow)
            transport = _tap_writes(transport, flow)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.flow is not None:
            self.flow.close()
            if self.flow in self._flows:
                self._flows.remove(self.flow)
            self.flow = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self.flow is not None:
            self.flow.received(data)
        inner: Any = self.inner
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        inner: Any = self.inner
        result: bool | None = inner.eof_received()
        return result


class _BufferedTap(_TapProtocol, asyncio.BufferedProtocol):
    """The tap for a :class:`asyncio.BufferedProtocol` (reads into its buffer)."""

    _buffer: memoryview | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        inner: Any = self.inner
        self._buffer = memoryview(inner.get_buffer(sizehint))
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.flow is not None and self._buffer is not None:
            self.flow.received(self._buffer[:nbytes])  # before the protocol reuses it
        inner: Any = self.inner
        inner.buffer_updated(nbytes)


def _tap_writes(transport: asyncio.BaseTransport, flow: TcpFlow) -> asyncio.BaseTransport:
    """A stand-in for ``transport`` that records what goes through ``write``
    and ``writelines`` (``writelines`` may call ``write``), and through a
    protocol's own duplicate of the socket (vectored sends). A wrapper, not
    patched attributes: uvloop's transports have read-only methods."""
    tapped: Any = _TappedTransport(transport, flow)
    return cast(asyncio.BaseTransport, tapped)


class _TappedTransport:
    """``transport`` with its writes recorded in ``flow``; every other
    attribute is the transport's own."""

    def __init__(self, transport: asyncio.BaseTransport, flow: TcpFlow) -> None:
        self._transport: Any = transport
        self._flow = flow
        self._inside = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        value = self._transport.get_extra_info(name, default)
        if name == "socket" and value is not None:
            return _SocketTap(value, self._flow)
        return value

    def write(self, data: Any) -> None:
        if not self._inside:
            self._flow.sent(data)
        self._transport.write(data)

    def writelines(self, chunks: Iterable[Any]) -> None:
        chunks = list(chunks)
        for chunk in chunks:
            self._flow.sent(chunk)
        self._inside = True
        try:
            self._transport.writelines(chunks)
        finally:
            self._inside = False


class _SocketTap:
    """A socket whose sends (and whose duplicates' sends) are recorded as
    far as the kernel took them; everything else is the socket's own."""

    #: Drivers that would write on the socket's descriptor themselves (past
    #: any wrapper) write through the transport instead, which is recorded.
    records_sends = True

    def __init__(self, sock: Any, flow: TcpFlow) -> None:
        self._sock = sock
        self._flow = flow

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def dup(self) -> _SocketTap:
        return _SocketTap(self._sock.dup(), self._flow)

    def send(self, data: Any, *args: Any) -> int:
        sent: int = self._sock.send(data, *args)
        self._flow.sent(memoryview(data).cast("B")[:sent])
        return sent

    def sendall(self, data: Any, *args: Any) -> None:
        self._sock.sendall(data, *args)
        self._flow.sent(data)

    def sendmsg(self, buffers: Iterable[Any], *args: Any) -> int:
        buffers = list(buffers)
        sent: int = self._sock.sendmsg(buffers, *args)
        left = sent
        for buffer in buffers:
            if left <= 0:
                break
            view = memoryview(buffer).cast("B")[:left]
            self._flow.sent(view)
            left -= len(view)
        return sent
