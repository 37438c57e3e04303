"""What a connection costs and leaves behind: ended queue pairs are freed by
reference counting alone (no cyclic GC), idle connections before MPA
startup are small and each closed by its startup timeout, and failures in
the server (bad FPDUs with the Request, setup or handler exceptions) are
reported once, with no traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import selectors
import socket
import subprocess
import sys
import time
import tracemalloc
import weakref
from collections.abc import Awaitable, Callable, Iterator

import pytest

from iwarp import serving
from iwarp.asyncio.driver import CoreDriver
from iwarp.asyncio.mpa import MpaSocket
from iwarp.asyncio.mpa import serve as mpa_serve
from iwarp.asyncio.rdma import ConnectionTerminatedError, QueuePair, connect, serve
from iwarp.errors import IwarpError, MpaError
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.handshake import build_request
from iwarp.rdmap.work import RecvWR, Sge


def run(coro: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro(), timeout)

    asyncio.run(main())


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Unhandled:
    """Records what the loop's exception handler sees (tracebacks, "Task
    exception was never retrieved")."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, object]] = []

    def install(self) -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: self.contexts.append(context)
        )


def test_ended_queue_pairs_are_freed_without_the_cyclic_gc(no_gc: None) -> None:
    refs: list[tuple[str, weakref.ref[object]]] = []

    async def handler(qp: QueuePair) -> None:
        refs.extend([("server qp", weakref.ref(qp)), ("server stream", weakref.ref(qp.stream))])
        refs.append(("server pd", weakref.ref(qp.pd)))
        await qp.send(await qp.receive())

    async def main() -> None:
        server = await serve(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port)
        qp.register(bytearray(1 << 20))  # a region the PD holds
        refs.extend([("client qp", weakref.ref(qp)), ("client stream", weakref.ref(qp.stream))])
        refs.extend([("client pd", weakref.ref(qp.pd)), ("endpoint", weakref.ref(qp.endpoint))])
        await qp.send(b"x" * 3000)
        assert await qp.receive() == b"x" * 3000
        await qp.close()
        del qp
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.2)  # the server's side sees the FIN and ends

    run(main)
    alive = [name for name, ref in refs if ref() is not None]
    assert len(refs) == 7 and alive == []


def test_failed_startup_is_freed_without_the_cyclic_gc(no_gc: None) -> None:
    refs: list[weakref.ref[object]] = []

    async def main() -> None:
        server = await serve(lambda qp: asyncio.sleep(0), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(MpaError):
            await connect("127.0.0.1", port, config=MpaConfig(revision=0))  # refused
        server.close()
        await server.wait_closed()

    original = QueuePair.__init__

    def tracking(self: QueuePair, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        refs.append(weakref.ref(self))

    QueuePair.__init__ = tracking  # type: ignore[method-assign]
    try:
        run(main)
    finally:
        QueuePair.__init__ = original  # type: ignore[method-assign]
    assert len(refs) == 2 and [r for r in refs if r() is not None] == []


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def _idle_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` TCP connections to ``port`` that never send an octet."""
    loop = asyncio.get_running_loop()
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        socks.append(sock)
    return socks


async def _closed_by_the_server(socks: list[socket.socket]) -> int:
    """Wait (5 s each at most) for each socket's EOF or reset, close it; how
    many the server had closed."""
    loop = asyncio.get_running_loop()
    closed = 0
    for sock in socks:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 16), 5.0)
        except ConnectionResetError:
            data = b""
        closed += data == b""
        sock.close()
    return closed


def test_idle_connections_are_small_and_all_closed_by_the_startup_timeout() -> None:
    count = 200

    async def main() -> None:
        config = MpaConfig(request_timeout=0.5)
        server = await serve(lambda qp: asyncio.sleep(0), "127.0.0.1", 0, config=config)
        port = server.sockets[0].getsockname()[1]
        base_fds = _open_fds()
        tracemalloc.start()
        base_memory = tracemalloc.get_traced_memory()[0]
        socks = await _idle_connections(port, count)
        await asyncio.sleep(0.2)  # every connection accepted, none answered
        memory = tracemalloc.get_traced_memory()[0] - base_memory
        fds = _open_fds() - base_fds
        tracemalloc.stop()
        # One descriptor on our side, at most one on the server's: no
        # duplicate before startup completes.
        assert count < fds <= 2 * count
        # The queue pair, its cores and asyncio's transport; no receive buffer.
        assert memory / count < 16 << 10, memory / count
        assert await _closed_by_the_server(socks) == count
        server.close()
        await server.wait_closed()

    run(main)


def test_idle_connections_closed_by_the_startup_timeout_are_freed_without_the_cyclic_gc(
    no_gc: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of a connection the startup timeout closed outlives it: not
    our driver, not asyncio's transport (asyncio 3.11 keeps a closed
    transport in a reference cycle unless the driver breaks it)."""
    count = 50
    refs: list[weakref.ref[object]] = []
    original = CoreDriver.connection_made

    def tracking(self: CoreDriver, transport: asyncio.BaseTransport) -> None:
        refs.extend([weakref.ref(self), weakref.ref(transport)])
        original(self, transport)

    monkeypatch.setattr(CoreDriver, "connection_made", tracking)

    async def main() -> None:
        config = MpaConfig(request_timeout=0.2)
        server = await serve(lambda qp: asyncio.sleep(0), "127.0.0.1", 0, config=config)
        port = server.sockets[0].getsockname()[1]
        socks = await _idle_connections(port, count)
        # Each sees EOF (or a reset) once the server closed it.
        assert await _closed_by_the_server(socks) == count
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)  # the last connection_lost callbacks run

    run(main)
    assert len(refs) == 2 * count
    alive = [ref() for ref in refs if ref() is not None]
    assert alive == []


@pytest.mark.parametrize("release_after", [8, 0])
def test_a_burst_of_ended_connections_runs_a_few_collections(
    release_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a burst of at least RELEASE_AFTER connections ends, the server
    runs a full collection as they fall to a quarter, a quarter of that,
    and none: a few per burst, none when the policy is off."""
    count = 16
    calls: list[int] = []
    collect = gc.collect
    monkeypatch.setattr(serving, "RELEASE_AFTER", release_after)

    def counting(generation: int = 2) -> int:
        calls.append(generation)
        return 0

    monkeypatch.setattr(gc, "collect", counting)

    async def main() -> None:
        config = MpaConfig(request_timeout=0.3)
        server = await serve(lambda qp: asyncio.sleep(0), "127.0.0.1", 0, config=config)
        port = server.sockets[0].getsockname()[1]
        socks = await _idle_connections(port, count)
        await _closed_by_the_server(socks)
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)

    run(main)
    collect()
    # 16 -> 4, 4 -> 1, 1 -> 0: three (fewer if some ended before the last accept).
    assert (1 <= len(calls) <= 3) if release_after else calls == []


_LOW_FD_SERVER = """
import asyncio, logging, resource, sys
from iwarp.asyncio.rdma import serve
from iwarp.mpa.config import MpaConfig

logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))

async def main():
    config = MpaConfig(request_timeout=float(sys.argv[2]))
    server = await serve(lambda qp: asyncio.sleep(0), "127.0.0.1", 0, config=config)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the test closes our stdin
    server.close()

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE, Linux accept")
def test_a_listener_out_of_descriptors_closes_every_connection_and_logs_once() -> None:
    """With fewer descriptors than connections, each connection is either
    accepted (and closed by its startup timeout) or closed at once; none
    waits in the backlog, and the episode is one warning, no tracebacks."""
    count, limit = 120, 40
    server = subprocess.Popen(
        [sys.executable, "-c", _LOW_FD_SERVER, str(limit), "2.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        sel = selectors.DefaultSelector()
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sel.register(sock, selectors.EVENT_READ, sock)
        closed = 0
        deadline = time.monotonic() + 20.0  # a bound, not a measured time
        while closed < count and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1.0):
                sock = key.data
                try:
                    data = sock.recv(16)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(sock)
                    sock.close()
                    closed += 1
        for key in list(sel.get_map().values()):
            key.data.close()
        _, log = server.communicate(timeout=20)  # closes its stdin: it stops
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert closed == count
    assert log.count("out of file descriptors") == 1, log
    assert "Traceback" not in log and "out of system resource" not in log, log


def _request_and_fpdu(*, bad_crc: bool) -> bytes:
    request = build_request(MpaConfig(), b"").pack()
    fpdu = b"".join(bytes(p) for p in FpduEncoder(markers=False, crc=True).encode(b"\x41" * 20))
    if bad_crc:
        fpdu = fpdu[:-1] + bytes([fpdu[-1] ^ 0xFF])
    return request + fpdu


async def _send_raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    received = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(4096), 5.0):
            received += chunk
    except ConnectionResetError:
        pass
    writer.close()
    return received


def test_mpa_serve_closes_after_a_request_and_a_bad_fpdu_in_one_segment() -> None:
    failures: list[tuple[BaseException, object]] = []

    async def handler(sock: MpaSocket) -> None:
        raise AssertionError("not established")

    async def main() -> None:
        unhandled = Unhandled()
        unhandled.install()
        server = await mpa_serve(
            handler, "127.0.0.1", 0, on_failure=lambda e, p: failures.append((e, p))
        )
        port = server.sockets[0].getsockname()[1]
        await asyncio.gather(*(_send_raw(port, _request_and_fpdu(bad_crc=True)) for _ in range(5)))
        server.close()
        await server.wait_closed()
        assert unhandled.contexts == []

    run(main)  # _send_raw returned: the server closed every connection
    assert len(failures) == 5
    assert all(isinstance(e, MpaError) and e.code == 2 for e, _ in failures)
    assert all(isinstance(peer, tuple) for _, peer in failures)


def test_setup_raising_on_a_bad_first_fpdu_is_reported_once_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[tuple[BaseException, object]] = []

    def setup(qp: QueuePair) -> None:
        # The FPDU after the Request failed already: posting still works
        # (setup runs before the failure is handled) and nothing raises.
        qp.post_recv(RecvWR(Sge(qp.register(bytearray(64))), wr_id=1))

    async def main() -> None:
        unhandled = Unhandled()
        unhandled.install()
        server = await serve(
            lambda qp: asyncio.sleep(0),
            "127.0.0.1",
            0,
            setup=setup,
            on_failure=lambda e, p: failures.append((e, p)),
        )
        port = server.sockets[0].getsockname()[1]
        await asyncio.gather(*(_send_raw(port, _request_and_fpdu(bad_crc=True)) for _ in range(5)))
        server.close()
        await server.wait_closed()
        assert unhandled.contexts == []

    with caplog.at_level(logging.DEBUG):
        run(main)
    assert len(failures) == 5
    assert all(isinstance(e, MpaError) and e.code == 2 for e, _ in failures)
    assert "Traceback" not in caplog.text


def test_setup_exception_ends_the_connection_and_is_reported() -> None:
    failures: list[tuple[BaseException, object]] = []

    def setup(qp: QueuePair) -> None:
        raise RuntimeError("setup bug")

    async def main() -> None:
        unhandled = Unhandled()
        unhandled.install()
        server = await serve(
            lambda qp: asyncio.sleep(0),
            "127.0.0.1",
            0,
            setup=setup,
            on_failure=lambda e, p: failures.append((e, p)),
        )
        port = server.sockets[0].getsockname()[1]
        # The Reply went out before setup ran; the server's Terminate waits
        # for our first FPDU (RFC 5044 §7.1.2 rule 4) or TCP closes first.
        qp = await connect("127.0.0.1", port)
        with pytest.raises(ConnectionTerminatedError):
            await qp.receive()
        await qp.close()
        await asyncio.sleep(0.1)
        server.close()
        await server.wait_closed()
        assert unhandled.contexts == []

    run(main)
    assert len(failures) == 1
    error, peer = failures[0]
    assert isinstance(error, IwarpError) and "setup bug" in str(error)
    assert isinstance(peer, tuple)


def test_handler_exception_is_reported_once_and_ends_with_a_terminate() -> None:
    failures: list[tuple[BaseException, object]] = []

    async def handler(qp: QueuePair) -> None:
        await qp.receive()
        raise ValueError("handler bug")

    async def main() -> None:
        unhandled = Unhandled()
        unhandled.install()
        server = await serve(
            handler, "127.0.0.1", 0, on_failure=lambda e, p: failures.append((e, p))
        )
        port = server.sockets[0].getsockname()[1]
        qp = await connect("127.0.0.1", port)
        await qp.send(b"go")
        with pytest.raises(ConnectionTerminatedError):
            await qp.receive()
        assert qp.terminate is not None and qp.terminate_received
        assert qp.terminate.layer == 0 and qp.terminate.etype == 0  # RDMAP local catastrophic
        await qp.close()
        server.close()
        await server.wait_closed()
        assert unhandled.contexts == []

    run(main)
    assert len(failures) == 1
    error, peer = failures[0]
    assert isinstance(error, ValueError) and isinstance(peer, tuple)
