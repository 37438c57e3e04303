"""rping's conversation (rdma-core ``librdmacm/examples/rping.c``), sans-IO.

The same messages as rping, so that ``iwarp ping`` talks to real ``rping``
(siw-vm evidence ``a_rpingsrv``, ``b_rev2_play``). Each iteration:

1. the client fills its *start* buffer with ``"rdma-ping-<n>: "`` and a
   rolling ``A..z`` pattern (NUL-terminated) and advertises it with a Send
   of 16 octets: BE64 address, BE32 STag, BE32 length;
2. the server RDMA-Reads that buffer into its *rdma* buffer, then Sends
   16 octets ("go ahead": its never-filled send buffer, zeros);
3. the client advertises its *rdma* buffer (the sink) the same way;
4. the server RDMA-Writes ``strlen + 1`` octets of what it read there and
   Sends again ("done"); the client compares both buffers (``-V``).

Both sides keep one receive buffer posted, reposted after each receive.
The classes only post work and react to completions; an adapter moves the
bytes (``iwarp.cli.ping``), a test replays recorded frames.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol

from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    ReadWR,
    RecvWR,
    SendQueueWR,
    SendWR,
    Sge,
    WorkOpcode,
    WriteWR,
)

__all__ = ["ADVERT", "DEFAULT_SIZE", "RpingClient", "RpingServer", "ping_payload"]

#: rping's ``struct rping_rdma_info``: buf (BE64), rkey (BE32), size (BE32).
ADVERT: Final = struct.Struct(">QII")
#: rping's default ``-S``.
DEFAULT_SIZE: Final = 64
#: Smallest ``-S`` accepted (the advertisement and a short prefix fit).
MIN_SIZE: Final = 16
#: Where the buffers sit in the TO space unless pinned (any values work).
_ADDRESSES: Final = {"recv": 0x10000, "send": 0x20000, "rdma": 0x30000, "start": 0x40000}
_RECV_ID: Final = 1
_SEND_ID: Final = 2
_RDMA_ID: Final = 3


class WorkPoster(Protocol):
    """What the rping logic posts to: an RdmapStream or an RdmaConnection."""

    def post_send(self, wr: SendQueueWR) -> None: ...

    def post_recv(self, wr: RecvWR) -> None: ...


def ping_payload(ping: int, size: int, start: int) -> bytes:
    """rping's start-buffer contents for iteration ``ping`` (pattern from ``start``)."""
    prefix = f"rdma-ping-{ping}: ".encode()[:size]
    out = bytearray(prefix)
    c = start
    while len(out) < size:
        out.append(c)
        c = c + 1 if c < 122 else 65
    out[size - 1] = 0
    return bytes(out)


def _c_string(data: bytes | bytearray | memoryview) -> str:
    raw = bytes(data)
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("latin-1")


class _Phase(Enum):
    WAIT_READ_ADV = "wait for the start buffer advertisement"
    READING = "RDMA Read in progress"
    WAIT_WRITE_ADV = "wait for the sink advertisement"
    WRITING = "RDMA Write in progress"
    WAIT_GO_AHEAD = "wait for go-ahead"
    WAIT_DONE = "wait for write-complete"
    FINISHED = "finished"


@dataclass
class _Buffers:
    recv: MemoryRegion
    send: MemoryRegion
    rdma: MemoryRegion
    start: MemoryRegion | None = None


def _register(
    pd: ProtectionDomain,
    size: int,
    client: bool,
    regions: dict[str, tuple[int, int]],
) -> _Buffers:
    """rping's four buffers; ``regions`` may pin (STag, address) per name."""

    def reg(name: str, length: int, access: Access) -> MemoryRegion:
        stag, address = regions.get(name, (None, _ADDRESSES[name]))
        return pd.register(bytearray(length), access, address=address, stag=stag)

    remote = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
    return _Buffers(
        recv=reg("recv", ADVERT.size, Access.LOCAL_WRITE),
        send=reg("send", ADVERT.size, Access.LOCAL_WRITE),
        rdma=reg("rdma", size, remote),
        start=reg("start", size, remote) if client else None,
    )


@dataclass
class RpingServer:
    """rping ``-s``: read the client's buffer, write it back, for each ping."""

    pd: ProtectionDomain
    size: int = DEFAULT_SIZE
    #: Pin buffer (STag, address) by name ("recv", "send", "rdma").
    regions: dict[str, tuple[int, int]] = field(default_factory=dict)
    pings: int = 0
    error: str | None = None
    _bufs: _Buffers | None = None
    _qp: WorkPoster | None = None
    _phase: _Phase = _Phase.WAIT_READ_ADV
    _write_len: int = 0

    @property
    def finished(self) -> bool:
        """The client disconnected (or an error ended the exchange)."""
        return self._phase is _Phase.FINISHED

    def setup(self, qp: WorkPoster) -> None:
        """Register the buffers and post the receive (before accepting)."""
        self._bufs = _register(self.pd, self.size, False, self.regions)
        self._qp = qp
        qp.post_recv(RecvWR(Sge(self._bufs.recv), wr_id=_RECV_ID))

    def handle(self, completion: Completion) -> list[str]:
        """React to one completion; returns ``-v``/``-d`` style lines."""
        bufs, qp = self._bufs, self._qp
        assert bufs is not None and qp is not None
        if completion.status is CompletionStatus.FLUSHED:
            self._phase = _Phase.FINISHED  # the client disconnected
            return []
        if not completion.ok:
            self.error = f"{completion.opcode.value} completion {completion.status.value}"
            self._phase = _Phase.FINISHED
            return []
        lines: list[str] = []
        if completion.opcode is WorkOpcode.RECV:
            addr, rkey, length = ADVERT.unpack_from(bufs.recv.view)
            lines.append(f"Received rkey {rkey:x} addr {addr:x} len {length} from peer")
            qp.post_recv(RecvWR(Sge(bufs.recv), wr_id=_RECV_ID))
            if self._phase is _Phase.WAIT_READ_ADV:
                if length > self.size:
                    self.error = f"the client's buffer ({length}) exceeds ours ({self.size})"
                    self._phase = _Phase.FINISHED
                    return lines
                self._phase = _Phase.READING
                qp.post_send(ReadWR(Sge(bufs.rdma, 0, length), rkey, addr, wr_id=_RDMA_ID))
            elif self._phase is _Phase.WAIT_WRITE_ADV:
                data = bytes(bufs.rdma.view)
                end = data.find(b"\0")
                self._write_len = min(len(data) if end < 0 else end + 1, length)
                self._phase = _Phase.WRITING
                qp.post_send(
                    WriteWR(Sge(bufs.rdma, 0, self._write_len), rkey, addr, wr_id=_RDMA_ID)
                )
            else:
                self.error = f"unexpected Send while in phase: {self._phase.value}"
        elif completion.opcode is WorkOpcode.RDMA_READ:
            lines.append(f"server ping data: {_c_string(bufs.rdma.view)}")
            self._phase = _Phase.WAIT_WRITE_ADV
            qp.post_send(SendWR(Sge(bufs.send), wr_id=_SEND_ID))
        elif completion.opcode is WorkOpcode.RDMA_WRITE:
            self.pings += 1
            self._phase = _Phase.WAIT_READ_ADV
            qp.post_send(SendWR(Sge(bufs.send), wr_id=_SEND_ID))
        return lines


@dataclass
class RpingClient:
    """rping ``-c``: advertise, let the server read and write back, compare."""

    pd: ProtectionDomain
    size: int = DEFAULT_SIZE
    #: Pings to run; 0 runs until stopped.
    count: int = 0
    validate: bool = False
    regions: dict[str, tuple[int, int]] = field(default_factory=dict)
    pings: int = 0
    error: str | None = None
    _bufs: _Buffers | None = None
    _qp: WorkPoster | None = None
    _phase: _Phase = _Phase.WAIT_GO_AHEAD
    _start_char: int = 65

    @property
    def finished(self) -> bool:
        return self._phase is _Phase.FINISHED

    def setup(self, qp: WorkPoster) -> None:
        """Register the buffers and post the receive (before any Send arrives)."""
        self._bufs = _register(self.pd, self.size, True, self.regions)
        self._qp = qp
        qp.post_recv(RecvWR(Sge(self._bufs.recv), wr_id=_RECV_ID))

    def start(self) -> None:
        """Begin the first ping."""
        if self.count and self.pings >= self.count:
            self._phase = _Phase.FINISHED
            return
        bufs, qp = self._bufs, self._qp
        assert bufs is not None and bufs.start is not None and qp is not None
        bufs.start.view[:] = ping_payload(self.pings, self.size, self._start_char)
        self._start_char = self._start_char + 1 if self._start_char < 122 else 65
        self._advertise(bufs.start)
        self._phase = _Phase.WAIT_GO_AHEAD

    def _advertise(self, region: MemoryRegion) -> None:
        bufs, qp = self._bufs, self._qp
        assert bufs is not None and qp is not None
        ADVERT.pack_into(bufs.send.view, 0, region.address, region.stag, region.length)
        qp.post_send(SendWR(Sge(bufs.send), wr_id=_SEND_ID))

    def handle(self, completion: Completion) -> list[str]:
        """React to one completion; returns ``-v`` style lines."""
        bufs, qp = self._bufs, self._qp
        assert bufs is not None and bufs.start is not None and qp is not None
        if completion.status is CompletionStatus.FLUSHED and not self.finished:
            self.error = f"disconnected after {self.pings} pings"
            self._phase = _Phase.FINISHED
            return []
        if not completion.ok:
            self.error = f"{completion.opcode.value} completion {completion.status.value}"
            self._phase = _Phase.FINISHED
            return []
        if completion.opcode is not WorkOpcode.RECV:
            return []
        qp.post_recv(RecvWR(Sge(bufs.recv), wr_id=_RECV_ID))
        if self._phase is _Phase.WAIT_GO_AHEAD:
            self._advertise(bufs.rdma)
            self._phase = _Phase.WAIT_DONE
            return []
        if self._phase is not _Phase.WAIT_DONE:
            self.error = f"unexpected Send while in phase: {self._phase.value}"
            return []
        lines: list[str] = []
        if self.validate and bytes(bufs.start.view) != bytes(bufs.rdma.view):
            self.error = "data mismatch!"
            self._phase = _Phase.FINISHED
            return lines
        lines.append(f"ping data: {_c_string(bufs.rdma.view)}")
        self.pings += 1
        self.start()
        return lines
