"""The blocking adapter reads a bulk transfer by receive lane.

Once a read fills the driver's buffer, the connection's reads go through
its :class:`~iwarp.rdma.lanes.ReceiveLane` (one C call per ring's worth,
the GIL released while it reads): what arrives, completes and ends must
not depend on it. The suite runs again with ``IWARP_NO_ACCEL=1`` (no
lanes); ``IWARP_NO_LANES=1`` turns them off alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import iwarp.sync as rdma
from iwarp.mpa.config import MpaConfig
from iwarp.rdma import lanes
from iwarp.rdma.lanes import ReceiveLane

REMOTE = rdma.Access.LOCAL_WRITE | rdma.Access.REMOTE_WRITE | rdma.Access.REMOTE_READ
T = 30.0
SIZE = 4 << 20


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Octets the receive lanes took themselves (checked and placed)."""
    counts: list[int] = []
    walk = ReceiveLane.walk

    def counting(self: ReceiveLane, *args: Any) -> Any:
        result = walk(self, *args)
        counts.append(result[1])
        return result

    monkeypatch.setattr(ReceiveLane, "walk", counting)
    yield counts


def _serve(handler: Any, **options: Any) -> tuple[int, threading.Thread, list[BaseException]]:
    listener = rdma.listen("127.0.0.1", 0, **options)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with listener, listener.accept(timeout=T) as qp:
                handler(qp)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.port, thread, errors


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
def test_writes_sends_and_reads_arrive_by_the_lane(
    taken: list[int], markers: bool, crc: bool
) -> None:
    """4 MiB Writes, Sends and a Read each way: the same octets arrive; the
    lane takes nearly all of them where it runs (the C accelerator)."""
    config = MpaConfig(markers=markers, crc=crc)
    pd = rdma.ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)
    exposed = pd.register(bytearray(os.urandom(SIZE)), REMOTE)
    payloads = [os.urandom(n) for n in (SIZE, 65536, 300_001, SIZE)]
    received: list[bytes] = []

    def handler(qp: rdma.QueuePair) -> None:
        # The blocking adapter reads in the caller's thread: a pause before
        # the first receive lets the Write pile up in the socket, so the
        # first read fills the driver's buffer and the lane starts there
        # (when it starts otherwise depends on how the reads fall).
        time.sleep(0.3)
        for _ in payloads:
            received.append(qp.receive(timeout=T))
        qp.send(b"done", timeout=T)
        qp.receive(timeout=T)

    port, thread, errors = _serve(
        handler, pd=pd, config=config, receive_buffers=4, receive_size=SIZE
    )
    with rdma.connect("127.0.0.1", port, config=config, timeout=T) as qp:
        written = os.urandom(SIZE - 10)
        assert qp.rdma_write(written, target.stag, 10, timeout=T) == len(written)
        for payload in payloads:
            qp.send(payload, timeout=T)
        assert qp.rdma_read(SIZE - 1, exposed.stag, 1, timeout=T) == bytes(exposed.view[1:])
        assert qp.receive(timeout=T) == b"done"
        assert bytes(target.view[10:]) == written
        qp.send(b"bye", timeout=T)
    thread.join(T)
    assert not errors, errors
    assert received == payloads
    if lanes.RECEIVE_ACTIVE:
        # Of the 16 MiB of Writes, Sends and Read Responses, the lane takes
        # most: all after the first read that fills the driver's buffer
        # (at the server; the client reads the Read Responses).
        assert sum(taken) > 2 * SIZE, sum(taken)
    else:
        assert sum(taken) == 0


def test_a_terminate_in_the_middle_of_a_bulk_write() -> None:
    """A Write that runs past its region after several MiB went by the
    lane: the usual path answers with the Terminate it always gives, and
    the writer's next call fails with it."""
    pd = rdma.ProtectionDomain()
    target = pd.register(bytearray(SIZE), REMOTE)

    def handler(qp: rdma.QueuePair) -> None:
        with pytest.raises(rdma.ConnectionTerminatedError, match="Terminate sent"):
            qp.receive(timeout=T)

    port, thread, errors = _serve(handler, pd=pd)
    with rdma.connect("127.0.0.1", port, timeout=T) as qp:
        qp.rdma_write(os.urandom(SIZE), target.stag, 0, timeout=T)
        qp.rdma_write(os.urandom(SIZE), target.stag, 0, timeout=T)
        with pytest.raises(rdma.ConnectionTerminatedError, match="base or bounds"):
            qp.rdma_write(os.urandom(SIZE), target.stag, 1, timeout=T)
            qp.receive(timeout=T)
    thread.join(T)
    assert not errors, errors
