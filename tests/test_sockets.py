"""iwarp.sockets: vectored sends that go out in part, and a listener out of
descriptors that closes what it cannot accept (both adapters use them)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.sockets import (
    listening_socket_for,
    send_chunks,
    send_urgent,
    vitcp_setup,
    write_chunks,
)


@pytest.mark.parametrize("writev", [False, True])
@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40_000), min_size=1, max_size=40))
def test_send_chunks_returns_exactly_what_the_kernel_did_not_take(
    writev: bool, pieces: list[bytes]
) -> None:
    """Also by ``os.writev`` on the descriptor (the asyncio driver's write)."""
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        seen: list[int] = []
        count = lambda batch, n: seen.append(n)  # noqa: E731
        if writev:
            left = write_chunks(lambda batch: os.writev(a.fileno(), batch), list(pieces), count)
        else:
            left = send_chunks(a, list(pieces), count)
        b.setblocking(False)
        received = bytearray()
        while True:
            try:
                chunk = b.recv(1 << 20)
            except BlockingIOError:
                break
            received += chunk
        rest = b"".join(bytes(piece) for piece in left)
        assert bytes(received) + rest == b"".join(pieces)
        assert sum(seen) == len(received)
    finally:
        a.close()
        b.close()


_OUT_OF_DESCRIPTORS = r"""
import os, resource, sys
from iwarp.sync._calls import TcpListener, WaitTimeoutError, clock

listener = TcpListener("127.0.0.1", 0)
print(listener.address[1], flush=True)
sys.stdin.readline()  # the test connected
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
hogs = []
try:
    while True:
        hogs.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    listener.accept(clock() + 1.0)
    print("accepted", flush=True)
except WaitTimeoutError:
    print("timed out", flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE, Linux accept")
def test_a_blocking_listener_out_of_descriptors_closes_the_waiting_connection() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _OUT_OF_DESCRIPTORS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert client.recv(16) == b""  # closed at once, not left in the backlog
        client.close()
        out, log = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out.strip() == "timed out", (out, log)
    assert log.count("out of file descriptors") == 1, log
    assert "Traceback" not in log, log


def _vitcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on loopback; the second end set up for VI/TCP."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    vitcp_setup(b, send_urgent=False)
    return a, b


@pytest.mark.parametrize("send_urgent", [False, True])
def test_vitcp_setup_keeps_urgent_octets_inline_and_dups_only_to_send_them(
    send_urgent: bool,
) -> None:
    a, b = _vitcp_pair()
    with a, b:
        oob = vitcp_setup(a, send_urgent=send_urgent)
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE)
        assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        if not send_urgent:
            assert oob is None
            return
        assert oob is not None and oob.fileno() != a.fileno()
        with oob:
            assert oob.send(b"!", socket.MSG_OOB) == 1
            b.settimeout(5)
            assert b.recv(1) == b"!"  # SO_OOBINLINE: the urgent octet stays in the stream
    assert vitcp_setup(None, send_urgent=True) is None


def test_send_urgent_sends_the_first_octet_out_of_band_and_gives_the_rest() -> None:
    a, b = _vitcp_pair()
    with a, b:
        oob = vitcp_setup(a, send_urgent=True)
        assert oob is not None
        with oob:
            sent, rest = send_urgent(oob, [b"!ab", memoryview(b"cd")])
            assert sent and rest == b"abcd"
            a.sendall(rest)
            b.settimeout(5)
            received = b""
            while len(received) < 5:
                received += b.recv(5)
            assert received == b"!abcd"  # SO_OOBINLINE: in the stream, in order
        # The kernel refuses (closed socket): nothing went, all of it is to write.
        assert send_urgent(oob, [b"xy"]) == (False, b"xy")


def test_listening_socket_for_binds_one_address_and_declines_several() -> None:
    one = socket.getaddrinfo("127.0.0.1", 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sock = listening_socket_for(one + one, 16)  # the same address twice is one
    assert sock is not None
    with sock:
        assert sock.getsockname()[0] == "127.0.0.1"
    two = [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", 0)),
    ]
    assert listening_socket_for(two, 16) is None
