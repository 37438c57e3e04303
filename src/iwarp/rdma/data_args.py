"""The data arguments of the simple ``rdma_write`` / ``rdma_read`` calls.

Both adapters' queue pairs (asyncio and blocking) accept the same forms,
so the two calls are symmetric:

* a registered :class:`~iwarp.rdmap.memory.MemoryRegion`, with ``offset``
  and ``length`` selecting a piece of it (or an :class:`~iwarp.rdmap.work.Sge`);
* plain memory: bytes-like data to write; a writable buffer to read into,
  or an ``int`` length to read that many octets and get them back as bytes.
  Plain memory to read into is registered for the one Read (local write
  access only) and deregistered when it completes.
"""

from __future__ import annotations

from dataclasses import dataclass

from iwarp._typing import Buffer
from iwarp.errors import LocalProtocolError
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.work import Sge, Source

__all__ = ["ReadTarget", "read_target", "write_source"]

#: What ``rdma_write`` takes.
WriteData = Buffer | MemoryRegion | Sge
#: What ``rdma_read`` reads into (an ``int``: that many octets, returned as bytes).
ReadInto = MemoryRegion | Sge | bytearray | memoryview | int


def _piece(size: int, offset: int, length: int | None) -> tuple[int, int]:
    end = size if length is None else offset + length
    if offset < 0 or (length is not None and length < 0) or end > size:
        raise LocalProtocolError(
            f"offset {offset} and length {length} do not fit a buffer of {size} octets"
        )
    return offset, end


def write_source(data: WriteData, offset: int = 0, length: int | None = None) -> Source:
    """The source of an RDMA Write: ``data`` or the piece ``offset``/``length`` of it.

    :raises LocalProtocolError: the piece lies outside ``data``, or an Sge
        was given together with ``offset``/``length``.
    """
    if isinstance(data, Sge):
        if offset or length is not None:
            raise LocalProtocolError("an Sge already names its piece: no offset/length with it")
        return data
    if isinstance(data, MemoryRegion):
        start, end = _piece(data.length, offset, length)
        return Sge(data, start, end - start)
    if offset or length is not None:
        view = memoryview(data)
        start, end = _piece(view.nbytes, offset, length)
        return view.cast("B")[start:end]
    return data


@dataclass(slots=True)
class ReadTarget:
    """Where an RDMA Read lands, and what to give back once it completed."""

    sge: Sge
    #: Registered for this Read only (deregistered by :meth:`finish`).
    temporary: MemoryRegion | None = None
    #: Allocated for a Read given as a length: returned as bytes.
    allocated: bytearray | None = None

    def finish(self, byte_len: int) -> int | bytes:
        """Release the temporary region; the octets read (bytes for a
        length-only Read, else their count)."""
        if self.temporary is not None:
            self.temporary.deregister()
            self.temporary = None
        if self.allocated is not None:
            return bytes(self.allocated[:byte_len])
        return byte_len


def read_target(
    pd: ProtectionDomain, local: ReadInto, offset: int = 0, length: int | None = None
) -> ReadTarget:
    """The sink of an RDMA Read into ``local`` (see the module docstring).

    :raises LocalProtocolError: a read-only buffer, a negative length, a
        piece outside the buffer, or an Sge with ``offset``/``length``.
    """
    if isinstance(local, Sge):
        if offset or length is not None:
            raise LocalProtocolError("an Sge already names its piece: no offset/length with it")
        return ReadTarget(local)
    if isinstance(local, MemoryRegion):
        start, end = _piece(local.length, offset, length)
        return ReadTarget(Sge(local, start, end - start))
    if isinstance(local, bool) or not isinstance(local, (int, bytearray, memoryview)):
        raise LocalProtocolError(
            "rdma_read reads into a MemoryRegion, an Sge, a writable buffer or a length"
        )
    allocated = None
    if isinstance(local, int):
        if local < 0 or offset:
            raise LocalProtocolError("a Read length must be >= 0 (and takes no offset)")
        allocated = bytearray(local)
        local = allocated
    view = memoryview(local)
    if view.readonly:
        raise LocalProtocolError("rdma_read needs a writable buffer (bytearray, memoryview)")
    start, end = _piece(view.nbytes, offset, length)
    region = pd.register(view, Access.LOCAL_WRITE)
    return ReadTarget(Sge(region, start, end - start), region, allocated)
