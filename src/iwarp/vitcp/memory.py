"""Registered memory (§2.2.2.1): regions named by a handle and an address.

"All memory used in data transfer is registered with the VI Provider.
Memory handles are used to identify the region and to qualify virtual
memory addresses." Addresses here are 64-bit values the table hands out
(with an unmapped gap between regions, so an off-by-one address lands
outside every region) unless the caller gives its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from iwarp._typing import Buffer
from iwarp.vitcp.errors import VitcpUsageError

__all__ = ["LocalBuffer", "MemoryTable", "ViMemoryRegion"]

#: Where synthetic region addresses start, and the gap between regions.
ADDRESS_BASE: Final = 0x1000_0000
ADDRESS_GAP: Final = 0x1000


@dataclass(slots=True)
class ViMemoryRegion:
    """A registered region: a handle qualifies addresses in it.

    Not :class:`iwarp.rdmap.memory.MemoryRegion`: VI/TCP names remote memory
    by (memory handle, virtual address) with two rights bits (§2.2.2.2.3),
    where RDMAP names it by STag and tagged offset with a protection domain,
    access flags and invalidation (RFC 5040 §5.1); the two never meet."""

    handle: int
    address: int
    view: memoryview
    remote_write: bool
    remote_read: bool

    @property
    def length(self) -> int:
        return len(self.view)

    def slice(self, address: int, length: int) -> memoryview | None:
        """The octets at ``address``, or None if they leave the region."""
        start = address - self.address
        if start < 0 or length < 0 or start + length > len(self.view):
            return None
        return self.view[start : start + length]


@dataclass(frozen=True, slots=True)
class LocalBuffer:
    """Message data named by registered memory, as a VI descriptor does.

    If it is not inside a registered region the message is still sent, padded
    with zeros and flagged Transmit Error (§2.2.2.2.5).
    """

    memory_handle: int
    address: int
    length: int


class MemoryTable:
    """The regions one VI endpoint registered."""

    __slots__ = ("_next_address", "_next_handle", "_regions")

    def __init__(self) -> None:
        self._regions: dict[int, ViMemoryRegion] = {}
        self._next_handle = 1
        self._next_address = ADDRESS_BASE

    def register(
        self,
        buffer: Buffer,
        *,
        address: int | None = None,
        remote_write: bool = True,
        remote_read: bool = True,
    ) -> ViMemoryRegion:
        """Register ``buffer``; peers name it by the returned handle and address."""
        view = memoryview(buffer).cast("B")
        if remote_write and view.readonly:
            raise VitcpUsageError("remote writes need writable memory")
        if address is None:
            address = self._next_address
            self._next_address += -(-max(1, len(view)) // ADDRESS_GAP) * ADDRESS_GAP
            self._next_address += ADDRESS_GAP
        if address < 0 or address + len(view) > 1 << 64:
            raise VitcpUsageError("address range outside 64 bits")
        region = ViMemoryRegion(self._next_handle, address, view, remote_write, remote_read)
        self._regions[region.handle] = region
        self._next_handle += 1
        return region

    def deregister(self, handle: int) -> None:
        """Forget a region; later RDMA naming it is a protection error."""
        if self._regions.pop(handle, None) is None:
            raise VitcpUsageError(f"no memory region with handle {handle}")

    def get(self, handle: int) -> ViMemoryRegion | None:
        """The region registered under ``handle``, if any."""
        return self._regions.get(handle)

    def resolve(self, handle: int, address: int, length: int) -> memoryview | None:
        """The octets ``handle`` and ``address`` name, or None if they are not
        all inside one registered region."""
        region = self._regions.get(handle)
        return None if region is None else region.slice(address, length)
