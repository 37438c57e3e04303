"""``iwarp listen --memory-budget``: peers do not choose what the listener allocates.

A hello announces N messages of S octets. The listener allocates buffers
only for the credits it grants (a window, and what the listener-wide budget
has left), never for N; a peer whose one buffer does not fit is refused with
an error record, and an allocation that fails (an address-space cap) is a
refusal too, never a MemoryError traceback.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys

import pytest

from clitools import IWARP, Listener, by_type, connect, mpa_peer, send_header
from iwarp.apps.rping import ADVERT
from iwarp.cli._rdma_traffic import REFUSAL_STAG, format_size, parse_size
from iwarp.mpa.framing import FpduDecoder, FpduEncoder


def test_sizes() -> None:
    assert parse_size("4096") == 4096
    assert parse_size("64K") == 64 << 10
    assert parse_size("16m") == 16 << 20
    assert parse_size("4G") == 4 << 30
    assert parse_size("256MiB") == 256 << 20
    for bad in ("", "G", "1.5M", "-1", "12Q"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert format_size(256 << 20) == "256 MiB" and format_size(1000) == "1000 octets"


#: Runs ``iwarp`` with its address space capped at argv[1] octets.
_CAPPED = (
    "import resource, runpy, sys; cap = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_AS, (cap, cap)); "
    "runpy.run_module('iwarp', run_name='__main__')"
)


def start(*args: str, limit_as: int | None = None) -> Listener:
    command = [*IWARP, "listen", "--port", "0", "--json", *args]
    if limit_as is not None:
        command = [sys.executable, "-c", _CAPPED, str(limit_as), *command[3:]]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Listener(proc)


def finish(listener: Listener) -> tuple[int, list[dict[str, object]], str]:
    out, err = listener.proc.communicate(timeout=30)
    lines = listener.lines + [json.loads(line) for line in out.splitlines() if line.strip()]
    return listener.proc.returncode, lines, err


def hello(port: int, count: int, size: int) -> socket.socket:
    """A hand-made connector that sends only its hello."""
    sock = mpa_peer(port)
    sock.sendall(FpduEncoder(crc=True).encode_bytes(send_header(0) + ADVERT.pack(count, 0, size)))
    return sock


def credits(sock: socket.socket, at_least: int, quiet: float = 0.3) -> int:
    """Advertisements received: wait for ``at_least``, then until ``quiet`` s pass
    without more (more than expected shows up as a larger count)."""
    decoder = FpduDecoder(markers=False, crc=True)
    seen = 0
    while True:
        ready, _, _ = select.select([sock], [], [], quiet if seen >= at_least else 10)
        if not ready:
            assert seen >= at_least, f"only {seen} advertisements"
            return seen
        data = sock.recv(65536)
        if not data:
            return seen
        seen += sum(1 for ulpdu in decoder.feed(data) if len(ulpdu) == 18 + ADVERT.size)


def refused(sock: socket.socket) -> bool:
    """The listener ended the connection (reset or close) without advertising:
    at most a refusal (STag REFUSAL_STAG) came, no credit."""
    sock.settimeout(10)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    decoder = FpduDecoder(markers=False, crc=True)
    adverts = [ADVERT.unpack(bytes(ulpdu)[-ADVERT.size :]) for ulpdu in decoder.feed(data)]
    return all(stag == REFUSAL_STAG for _, stag, _ in adverts)


@pytest.mark.slow
def test_credits_shrink_to_the_budget_and_then_peers_are_refused() -> None:
    mib = 1 << 20
    listener = start("--memory-budget", "20M", "--connections", "4")
    try:
        # 1 MiB messages: a full window is 8 buffers (8 MiB), whatever N says.
        first = hello(listener.port, 1_000_000, mib)
        assert credits(first, 8) == 8
        second = hello(listener.port, 1_000_000, mib)
        assert credits(second, 8) == 8
        third = hello(listener.port, 1_000_000, mib)  # 4 MiB left: 4 credits
        assert credits(third, 4) == 4
        fourth = hello(listener.port, 10, mib)  # nothing left
        assert refused(fourth)
        # Closing a connection gives its octets back: a real connector runs
        # its messages with the credits that fit.
        first.close()
        rc, out = connect(listener.port, "--count", "20", "--size", str(mib))
        assert rc == 0, out
        for sock in (second, third, fourth):
            sock.close()
        lrc, lines = listener.finish()
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
            listener.proc.communicate()
    assert lrc == 1 and lines[-1]["messages"] == 20
    (error,) = by_type(lines, "error")
    assert "--memory-budget 20 MiB" in str(error["message"]), error


@pytest.mark.parametrize("op", ["send", "write", "read"])
def test_a_huge_announcement_is_refused_by_the_default_budget(op: str) -> None:
    """4 GiB - 1 octets per message with --max-size 4G: the default budget
    (256 MiB) refuses it before anything is allocated."""
    listener = start("--op", op, "--max-size", "4G", "--connections", "2")
    try:
        peer = hello(listener.port, 1, 0xFFFF_FFFF)
        assert refused(peer)
        peer.close()
        rc, out = connect(listener.port, "--op", op, "--count", "3")
        assert rc == 0, out
        lrc, lines, stderr = finish(listener)
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
            listener.proc.communicate()
    (error,) = by_type(lines, "error")
    assert "--memory-budget 256 MiB" in str(error["message"])
    assert lrc == 1 and lines[-1]["messages"] == 3 and "Traceback" not in stderr


def test_no_memory_error_under_an_address_space_cap() -> None:
    """A budget larger than the process may map: the failed allocation
    refuses the peer with an error record, the listener serves on."""
    listener = start(
        "--max-size", "4G", "--memory-budget", "64G", "--connections", "2", limit_as=1 << 30
    )
    try:
        peer = hello(listener.port, 1, 3 << 30)
        assert refused(peer)
        peer.close()
        rc, out = connect(listener.port, "--count", "3")
        assert rc == 0, out
        lrc, lines, stderr = finish(listener)
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
            listener.proc.communicate()
    (error,) = by_type(lines, "error")
    assert "no memory" in str(error["message"]), error
    assert lrc == 1 and lines[-1]["messages"] == 3
    assert "MemoryError" not in stderr and "Traceback" not in stderr, stderr
