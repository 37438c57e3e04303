"""A lane never acts on a descriptor that was closed.

A send lane waits for room in one C call without the GIL, on the socket's
descriptor number. Another thread that aborts the queue pair meanwhile
must not free that number under it: a new connection would get the number
and the lane would write the old message into it. The blocking driver shuts
the socket down (which ends the lane's call at once) and closes it only
after the call returned; the call that waited ends with an error.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

import iwarp.sync as blocking
from iwarp.errors import IwarpError
from iwarp.rdma import lanes
from iwarp.rdmap.memory import Access, ProtectionDomain

T = 30.0
SIZE = 32 << 20  # far more than the socket buffers hold


@pytest.mark.skipif(not lanes.ACTIVE, reason="send lanes need the C accelerator")
def test_an_abort_from_another_thread_never_frees_the_number_under_a_lane() -> None:
    pd = ProtectionDomain()
    target = pd.register(bytearray(SIZE), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    listener = blocking.listen("127.0.0.1", 0, pd=pd)
    read_now = threading.Event()
    server_done = threading.Event()

    def serve() -> None:
        try:
            with listener, listener.accept(timeout=T) as qp:
                # Not reading (nothing reads between calls): the writer's
                # lane fills the socket buffers and waits for room.
                read_now.wait(T)
                qp.wait_closed(timeout=T)
        except (IwarpError, OSError):
            pass
        finally:
            server_done.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    qp = blocking.connect("127.0.0.1", listener.port, timeout=T)
    driver = qp._driver
    old_fd = qp.fileno()
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            qp.rdma_write(bytes(SIZE), target.stag, 0)
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    for _ in range(3000):  # until the lane waits for room
        if driver._lane is not None and driver.unsent:
            break
        time.sleep(0.001)
    time.sleep(0.2)  # (in its C call by now)
    assert writer.is_alive()

    qp.abort()  # from this thread, while the lane waits
    # A new connection takes the lowest free descriptor number: the old one
    # once it is free.
    other = socket.create_server(("127.0.0.1", 0))
    clients: list[socket.socket] = []
    accepted: list[socket.socket] = []
    try:
        for _ in range(32):
            client = socket.create_connection(other.getsockname(), timeout=T)
            clients.append(client)
            accepted.append(other.accept()[0])
            if client.fileno() == old_fd:
                break
        reused = accepted[-1] if clients[-1].fileno() == old_fd else None
        read_now.set()  # the old peer reads now: room on the old connection
        writer.join(T)
        assert not writer.is_alive()
        server_done.wait(T)
        if reused is not None:
            reused.settimeout(0.5)
            try:
                stray = reused.recv(1 << 16)
            except TimeoutError:
                stray = b""
            assert stray == b"", f"{len(stray)} octets of the old message on a new connection"
    finally:
        for sock in (*clients, *accepted, other):
            sock.close()
    (error,) = outcome
    assert isinstance(error, IwarpError), error
    print(f"the writer ended with {error!r}")
