"""RFC 7306 Atomic Operations: the masked arithmetic and the Responder's side.

The two operations (RFC 7306 §5.1) act on one 64-bit word, big-endian in
the target memory (the wire's byte order, so what a peer reads back with
an RDMA Read is the same integer):

* :func:`masked_fetch_add`: each bit set in the Add Mask is the most
  significant bit of a field, and a carry out of it is dropped (§5.1.1's
  pseudocode); mask 0 is one 64-bit addition.
* :func:`masked_cmp_swap`: when the Compare Mask's bits of the word equal
  those of Compare Data, the Swap Mask's bits take Swap Data's (§5.1.2).

:func:`check_target` makes the Responder's checks in order: the AOpCode
(§5.2.1 rule 4), then the STag as for an RDMA Read (valid, this stream's
protection domain, :attr:`~iwarp.rdmap.memory.Access.REMOTE_ATOMIC`,
bounds, TO wrap: RFC 5040 §7.2 codes), then 64-bit alignment of the TO
(§8.2: Remote Operation Error, "Catastrophic error, localized to RDMAP
Stream"). :func:`execute` does the read-modify-write under the STag
space's lock (§5.3: atomic across every stream of the "RNIC").
"""

from __future__ import annotations

import struct
from typing import Final

from iwarp.rdmap.errors import (
    LocalCatastrophicError,
    RemoteOperationCode,
    RemoteOperationError,
    RemoteProtectionError,
)
from iwarp.rdmap.memory import Access, AccessFault, MemoryRegion, ProtectionDomain
from iwarp.rdmap.terminate import READ_FAULTS
from iwarp.rdmap.wire import AtomicOpcode, AtomicRequest

__all__ = [
    "ATOMIC_DEPTH",
    "MAX_ATOMIC_DEPTH",
    "WORD_SIZE",
    "check_target",
    "execute",
    "masked_cmp_swap",
    "masked_fetch_add",
]

#: The 64-bit word every Atomic Operation acts on (RFC 7306 §5).
WORD_SIZE: Final = 8
_WORD: Final = struct.Struct(">Q")
_ALL: Final = 0xFFFFFFFFFFFFFFFF
_TOP: Final = 1 << 63
_REMOTE_ATOMIC: Final = int(Access.REMOTE_ATOMIC)

#: Default limit on outstanding Atomic Requests, both ways: how many a
#: Requester may have unanswered, and how many queue-1 slots a Responder
#: keeps for them besides its IRD (RFC 7306 §5.2.2 rules 4 and 5). RFC 7306
#: leaves agreeing on it to the ULP; every stream of this stack uses it.
ATOMIC_DEPTH: Final = 4
#: Largest ``atomic_ord`` / ``atomic_ird`` a queue pair takes: the width of
#: MPA's IRD and ORD fields (RFC 6581 §9.1, 14 bits). A Responder keeps a
#: queue-1 slot per Atomic Request it may have to answer.
MAX_ATOMIC_DEPTH: Final = 0x3FFF


def masked_fetch_add(original: int, add: int, mask: int = 0) -> int:
    """The word after a masked FetchAdd of ``add`` (RFC 7306 §5.1.1).

    Each field ends at a bit set in ``mask`` (its most significant bit) and
    sums on its own: the field's top bits are left out of the addition, so
    a carry out of a field's lower bits stops in its top bit, which is then
    the XOR of the two top bits and that carry; a carry out of a top bit
    (and out of bit 63) is dropped.
    """
    tops = (mask & _ALL) | _TOP
    low = ((original & ~tops) + (add & ~tops)) & _ALL
    return (low ^ ((original ^ add) & tops)) & _ALL


def masked_cmp_swap(
    original: int, compare: int, compare_mask: int, swap: int, swap_mask: int
) -> int:
    """The word after a masked CmpSwap (RFC 7306 §5.1.2's pseudocode)."""
    if (compare ^ original) & compare_mask & _ALL:
        return original
    return ((original & ~swap_mask) | (swap & swap_mask)) & _ALL


def check_target(
    pd: ProtectionDomain, request: AtomicRequest, *, ddp_header: bytes | None = None
) -> MemoryRegion:
    """The region an Atomic Request may act on, after the Responder's checks.

    :raises RemoteOperationError: an unsupported AOpCode ("Unexpected
        OpCode"), or a TO that is not 64-bit aligned ("Catastrophic error,
        localized to RDMAP Stream", RFC 7306 §8.2).
    :raises RemoteProtectionError: the STag, protection domain, rights,
        bounds or TO wrap check failed (RFC 5040 §4.8 codes).
    """
    if request.aopcode not in (AtomicOpcode.FETCH_ADD, AtomicOpcode.CMP_SWAP):
        raise RemoteOperationError(
            RemoteOperationCode.UNEXPECTED_OPCODE,
            f"atomic operation code {request.aopcode:#x} is not supported",
            ddp_header=ddp_header,
        )
    target = f"STag {request.stag:#010x} TO {request.to:#x}"
    region = pd.registry.lookup(request.stag)
    fault = (
        AccessFault.INVALID_STAG
        if region is None
        else region.check(pd, request.to, WORD_SIZE, _REMOTE_ATOMIC)
    )
    if fault is not None:
        raise RemoteProtectionError(
            READ_FAULTS[fault], f"Atomic Operation on {target}: {fault.name}", ddp_header=ddp_header
        )
    assert region is not None
    if request.to % WORD_SIZE:
        raise RemoteOperationError(
            RemoteOperationCode.CATASTROPHIC_STREAM,
            f"Atomic Operation on {target}: not 64-bit aligned (RFC 7306 §8.2)",
            ddp_header=ddp_header,
        )
    return region


def execute(region: MemoryRegion, request: AtomicRequest) -> int:
    """Perform a checked request on its word; returns the original value.

    The read-modify-write holds the lock of the region's STag space, so no
    other Atomic Operation of any stream on it, and no placement into the
    region (they hold the lock too), comes between its read and its write
    (RFC 7306 §5, §5.3).

    :raises LocalCatastrophicError: the region was invalidated or
        deregistered since it was checked (nothing is modified).
    """
    pd = region.pd
    if not region.valid or pd is None:
        raise LocalCatastrophicError(
            f"STag {region.stag:#010x} became invalid before its Atomic Operation"
        )
    with pd.registry.atomic_lock:
        word = region.slice(request.to, WORD_SIZE)
        (original,) = _WORD.unpack_from(word)
        if request.aopcode == AtomicOpcode.FETCH_ADD:
            value = masked_fetch_add(original, request.data, request.mask)
        else:
            value = masked_cmp_swap(
                original, request.compare, request.compare_mask, request.data, request.mask
            )
        if value != original:
            # One 8-octet copy (struct's pack_into stores octet by octet): a
            # send lane reading the word without the GIL and without the
            # lock sees the old or the new word where such a copy is one store.
            word[:] = _WORD.pack(value)
    return int(original)
