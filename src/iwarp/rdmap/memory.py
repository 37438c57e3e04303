"""Protection domains, memory regions and STags (RFC 5040 §2, RFC 5042 §5-§6).

A :class:`MemoryRegistry` is the STag space of one RNIC: every registered
region has a 32-bit STag that names it on the wire. Regions belong to a
:class:`ProtectionDomain`; an RDMAP stream (queue pair) belongs to one PD
too, and a remote peer may only reach regions of the stream's PD (RFC 5042
§5.1: "STag not associated with the stream" otherwise), with the rights
the region was registered with, inside its bounds, and only while its STag
is valid (not invalidated nor deregistered).

Registered buffers are any writable Python buffer (``bytearray``,
``mmap``, a writable ``memoryview``); a read-only one (``bytes``) may be
registered for remote reads and as a send source. The region keeps a
``memoryview`` on the buffer, so a ``bytearray`` cannot be resized under it.

Tagged offsets are virtual addresses, as verbs users expect: a region
registered at ``address`` covers TOs ``address .. address + length - 1``
(rping advertises its buffer this way).
"""

from __future__ import annotations

import mmap
import threading
import weakref
from enum import IntEnum, IntFlag

from iwarp._typing import Buffer
from iwarp.ddp.wire import MAX_TO, fits_to_space
from iwarp.errors import LocalProtocolError

__all__ = ["Access", "AccessFault", "MemoryRegion", "MemoryRegistry", "ProtectionDomain"]


class Access(IntFlag):
    """Access rights of a region (values as verbs' ``IBV_ACCESS_*``).

    Local read access is always granted.
    """

    LOCAL_WRITE = 0x1
    REMOTE_WRITE = 0x2
    REMOTE_READ = 0x4
    #: RFC 7306 Atomic Operations (FetchAdd, CmpSwap) on the region's
    #: 64-bit words; needs a writable buffer.
    REMOTE_ATOMIC = 0x8


class AccessFault(IntEnum):
    """Why an access to (STag, TO, length) was refused, in checking order."""

    INVALID_STAG = 0
    STAG_NOT_ASSOCIATED = 1
    ACCESS_RIGHTS = 2
    BASE_OR_BOUNDS = 3
    TO_WRAP = 4


class MemoryRegion:
    """A registered buffer: its STag, protection domain, rights and bounds.

    The STag is both the local key and the remote key (iWARP has one STag
    per region).
    """

    __slots__ = ("_bits", "_pd", "_view", "access", "address", "length", "stag", "valid")

    def __init__(
        self, pd: ProtectionDomain, view: memoryview, access: Access, stag: int, address: int
    ) -> None:
        # Weak: the PD's STag table holds its regions; a strong way back
        # would be a reference cycle, and an ended connection's regions
        # (receive pools of 64 KiB buffers) would wait for the cyclic GC.
        self._pd = weakref.ref(pd)
        self._view = view
        self.access = access
        self._bits = int(access)  # plain int: IntFlag operators are slow on hot paths
        self.stag = stag
        self.address = address
        self.length = len(view)
        #: False once invalidated or deregistered: every access is refused.
        self.valid = True

    @property
    def view(self) -> memoryview:
        """The whole registered buffer (local access, no checks)."""
        return self._view

    @property
    def pd(self) -> ProtectionDomain | None:
        """The protection domain (None once nobody holds it: a region does
        not keep its PD alive, the PD keeps its regions)."""
        return self._pd()

    def allows(self, rights: int) -> bool:
        """Whether the region grants every right in ``rights``."""
        return not rights & ~self._bits

    def check(self, pd: ProtectionDomain, to: int, length: int, rights: int) -> AccessFault | None:
        """Check a remote access; None when allowed (RFC 5041 §7.1, RFC 5040 §7.2)."""
        if not self.valid:
            return AccessFault.INVALID_STAG
        if pd is not self._pd():
            return AccessFault.STAG_NOT_ASSOCIATED
        if rights & ~self._bits:
            return AccessFault.ACCESS_RIGHTS
        if not fits_to_space(to, length):
            return AccessFault.TO_WRAP
        start = to - self.address
        if start < 0 or start + length > self.length:
            return AccessFault.BASE_OR_BOUNDS
        return None

    def slice(self, to: int, length: int) -> memoryview:
        """The octets at TOs ``to .. to + length - 1`` (after :meth:`check`)."""
        start = to - self.address
        return self._view[start : start + length]

    def invalidate(self) -> None:
        """Local invalidation: the STag stops working at once (RFC 5040 §2.4)."""
        self.valid = False

    def deregister(self) -> None:
        """Invalidate and forget the region, and release our view of its buffer
        (an ``mmap`` can be closed once no slice handed out is alive)."""
        self.valid = False
        pd = self._pd()
        if pd is not None:
            pd.registry._forget(self)
        self._view.release()

    def __repr__(self) -> str:
        state = "valid" if self.valid else "invalid"
        return (
            f"MemoryRegion(stag={self.stag:#010x}, address={self.address:#x}, "
            f"length={self.length}, access={self.access!r}, {state})"
        )


class ProtectionDomain:
    """A protection domain: regions and streams that may use each other."""

    __slots__ = ("__weakref__", "registry")

    def __init__(self, registry: MemoryRegistry | None = None) -> None:
        #: The STag space this PD's regions live in.
        self.registry = registry if registry is not None else MemoryRegistry()

    def register(
        self,
        buffer: Buffer | mmap.mmap,
        access: Access = Access.LOCAL_WRITE,
        *,
        address: int = 0,
        stag: int | None = None,
    ) -> MemoryRegion:
        """Register ``buffer`` with ``access`` rights, at TO ``address``.

        ``stag`` asks for a particular STag (to replay recorded traffic); it
        must be free, 32-bit, and not 0 or 1.

        :raises LocalProtocolError: write access asked for a read-only buffer,
            the region would wrap the 64-bit TO space, or ``stag`` is taken.
        """
        base = memoryview(buffer)
        view = base if base.format == "B" and base.ndim == 1 else base.cast("B")
        writes = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
        if view.readonly and access & writes:
            raise LocalProtocolError("write access needs a writable buffer")
        if not fits_to_space(address, len(view)) or address > MAX_TO:
            raise LocalProtocolError(f"region at {address:#x} does not fit the 64-bit TO space")
        return self.registry._add(self, view, Access(access), address, stag)


class MemoryRegistry:
    """The STag table of one RNIC (shared by all its protection domains).

    STags are ``index << 8 | key`` as verbs providers make them: a new
    registration never reuses a recently freed STag. Index 0 is never used,
    so STags 0 and 1 (the RFC 6581 RTR STags) never name a region.
    """

    __slots__ = ("_key", "_next_index", "_regions", "atomic_lock", "atomic_stags")

    def __init__(self) -> None:
        #: Held by every RFC 7306 Atomic Operation's read-modify-write on a
        #: region of this STag space (:func:`iwarp.rdmap.atomics.execute`),
        #: and by every placement into a region of :attr:`atomic_stags`
        #: (RDMA Write and Read Response segments, Sends into its receive
        #: buffers), so none comes between an Atomic Operation's read and
        #: its write (RFC 7306 §5).
        self.atomic_lock = threading.Lock()
        #: The STags of the registered regions with
        #: :attr:`Access.REMOTE_ATOMIC`: placements into them take
        #: :attr:`atomic_lock`; placements into other regions test this set
        #: only.
        self.atomic_stags: set[int] = set()
        self._regions: dict[int, MemoryRegion] = {}
        self._next_index = 1
        self._key = 0

    def alloc_pd(self) -> ProtectionDomain:
        """A new protection domain in this STag space."""
        return ProtectionDomain(self)

    def lookup(self, stag: int) -> MemoryRegion | None:
        """The region named by ``stag``, if any (valid or not)."""
        return self._regions.get(stag)

    def access(
        self, stag: int, pd: ProtectionDomain, to: int, length: int, rights: int
    ) -> memoryview | AccessFault:
        """The octets a remote access may touch, or why it may not."""
        region = self._regions.get(stag)
        if region is None:
            return AccessFault.INVALID_STAG
        fault = region.check(pd, to, length, rights)
        if fault is not None:
            return fault
        return region.slice(to, length)

    def _add(
        self,
        pd: ProtectionDomain,
        view: memoryview,
        access: Access,
        address: int,
        stag: int | None = None,
    ) -> MemoryRegion:
        if stag is not None:
            if not 2 <= stag <= 0xFFFFFFFF or stag in self._regions:
                raise LocalProtocolError(f"STag {stag:#010x} is not available")
        else:
            while True:
                self._key = (self._key + 0x5B) & 0xFF
                stag = (self._next_index << 8) | self._key
                self._next_index = self._next_index + 1 if self._next_index < 0xFFFFFF else 1
                if stag not in self._regions:
                    break
        region = MemoryRegion(pd, view, access, stag, address)
        self._regions[stag] = region
        if access & Access.REMOTE_ATOMIC:
            self.atomic_stags.add(stag)
        return region

    def _forget(self, region: MemoryRegion) -> None:
        if self._regions.get(region.stag) is region:
            del self._regions[region.stag]
            self.atomic_stags.discard(region.stag)
