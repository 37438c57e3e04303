"""iwarp with one rule broken on purpose, for the conformance suite's own tests.

``python broken_target.py RULE listen ARGS...`` runs ``iwarp listen ARGS``;
``python broken_target.py RULE connect ARGS...`` runs ``iwarp connect ARGS``
again and again (see initiator_loop.py). RULE is one of:

* ``crc``: FPDUs are never CRC-checked (the decoder is built with CRC off);
* ``pd-length``: any PD_Length up to 65535 is accepted in Rev 1/2 frames;
* ``terminate``: errors end the stream without sending the Terminate.

Test-only: these are monkeypatches, not options of the product.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import iwarp.ddp.placement
import iwarp.ddp.segmentation
import iwarp.mpa.connection
import iwarp.mpa.framing
import iwarp.mpa.handshake
import iwarp.rdmap.atomics
import iwarp.rdmap.memory
import iwarp.rdmap.stream
from iwarp.ddp.errors import DdpTaggedCode, DdpTaggedError, DdpUntaggedCode, DdpUntaggedError
from iwarp.ddp.wire import (
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
    QueueNumber,
    fits_to_space,
)
from iwarp.mpa.wire import REPLY_KEY, REQUEST_KEY, RESERVED_FLAGS
from iwarp.rdmap.errors import (
    RemoteOperationCode,
    RemoteOperationError,
    RemoteProtectionCode,
    RemoteProtectionError,
)
from iwarp.rdmap.memory import Access, AccessFault
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.wire import INVALIDATE_OPCODES, AtomicOpcode, RdmapOpcode
from iwarp.rdmap.work import Completion, CompletionStatus, WorkOpcode


def break_crc() -> None:
    decoder = iwarp.mpa.framing.FpduDecoder
    original = decoder.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["crc"] = False
        original(self, *args, **kwargs)

    decoder.__init__ = init  # type: ignore[method-assign]


def break_pd_length() -> None:
    iwarp.mpa.handshake.private_data_limit = lambda config, revision: 0xFFFF


def break_terminate() -> None:
    stream = iwarp.rdmap.stream.RdmapStream
    # Every way out of the stream (ulpdus_to_send too) goes through runs_to_send.
    original = stream.runs_to_send

    def runs_to_send(self: Any, limit: int | None = None) -> list[Any]:
        terminating = self.state is StreamState.TERMINATING
        out = original(self, limit)
        return [] if terminating else out  # the Terminate is built, then never sent

    stream.runs_to_send = runs_to_send  # type: ignore[method-assign]


def _get(owner: object, name: str) -> Any:
    """``owner.name``, for names a module uses without exporting them."""
    return vars(owner)[name]


def _patch(owner: object, name: str, value: object) -> None:
    """Replace ``owner.name`` (a function of a module, a method of a class)."""
    if not hasattr(owner, name):
        raise AttributeError(f"{owner!r} has no {name}: the mutant no longer fits the stack")
    setattr(owner, name, value)


def _fix_frame(data: Any, *, key: bool = False, rev: bool = False) -> Any:
    """A copy of a received startup frame with its key or revision made acceptable."""
    if len(data) < 18:
        return data
    out = bytearray(data)
    if key and bytes(out[:16]) not in (REQUEST_KEY, REPLY_KEY):
        out[:16] = REQUEST_KEY
    if rev and out[17] > 2:
        out[17] = 2
    return out


def break_key() -> None:
    """RFC 5044 §7.1.1 Key: a Request's key is not checked (any 16 octets will do)."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        if expect_request:
            data = _fix_frame(data, key=True)
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def break_rev() -> None:
    """RFC 5044 §7.1.1 Rev: unknown revisions are taken as Rev 2."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        return original(_fix_frame(data, rev=True), config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


class _EchoReserved:
    """A Reply frame whose octets carry the Request's reserved flag bits."""

    def __init__(self, frame: Any, reserved: int) -> None:
        self._frame, self._reserved = frame, reserved

    def __getattr__(self, name: str) -> Any:
        return getattr(self._frame, name)

    def pack(self) -> bytes:
        data = bytearray(self._frame.pack())
        data[16] |= self._reserved
        return bytes(data)


def break_reply_reserved() -> None:
    """RFC 5044 §7.1.1 Res: the Reply echoes the Request's reserved bits (as siw does)."""
    original = _get(iwarp.mpa.connection, "build_reply")

    def build(config: Any, request: Any, **kwargs: Any) -> Any:
        reply, params = original(config, request, **kwargs)
        return _EchoReserved(reply, request.reserved & RESERVED_FLAGS), params

    _patch(iwarp.mpa.connection, "build_reply", build)


def _rewrite_first(method: str, fix: Any) -> None:
    """Wrap ``DdpReceiver.method(self, ulpdu)`` so that it sees ``fix(self, ulpdu)``."""
    receiver = iwarp.ddp.placement.DdpReceiver
    original = getattr(receiver, method)

    def wrapped(self: Any, ulpdu: Any) -> Any:
        return original(self, fix(self, ulpdu))

    setattr(receiver, method, wrapped)


def _with_version(self: Any, ulpdu: Any) -> Any:
    if len(ulpdu) < 1 or ulpdu[0] & VERSION_MASK == self.version:
        return ulpdu
    out = bytearray(ulpdu)
    out[0] = (out[0] & ~VERSION_MASK) | self.version
    return memoryview(out)


def break_ddp_version() -> None:
    """RFC 5041 §4.1 DV: the DDP version is not checked."""
    _rewrite_first("check_header", _with_version)
    _rewrite_first("receive", _with_version)
    rdmap = iwarp.rdmap.stream.RdmapStream
    # The fast paths check DV themselves: every segment takes the checked path.
    _patch(rdmap, "_place_send", lambda self, view: False)
    _patch(rdmap, "_place_write", lambda self, view: False)


def _untagged_field(index: int, value: Any) -> Any:
    """A DdpReceiver.receive rewrite: one untagged header field replaced by value(self, qn)."""

    def fix(self: Any, ulpdu: Any) -> Any:
        if len(ulpdu) < UNTAGGED_HEADER_SIZE or ulpdu[0] & TAGGED_FLAG:
            return ulpdu
        fields = list(UNTAGGED_HEADER.unpack_from(ulpdu, 0))
        fields[index] = value(self, fields[3])
        out = bytearray(ulpdu)
        UNTAGGED_HEADER.pack_into(out, 0, *fields)
        return memoryview(out)

    return fix


def break_qn() -> None:
    """RFC 5041 §7.1 check 1: an unknown queue number is taken as queue 0."""
    _rewrite_first("receive", _untagged_field(3, lambda self, qn: qn if qn in self.queues else 0))


def break_msn() -> None:
    """RFC 5041 §7.1 check 5: the MSN is not checked (the next one is assumed)."""

    def next_msn(self: Any, qn: int) -> int:
        queue = self.queues.get(qn)
        return queue.next_msn if queue is not None else 1

    _rewrite_first("receive", _untagged_field(4, next_msn))


def break_rdmap_version() -> None:
    """RFC 5040 §7.2 check 3: the RDMAP version is not checked."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._check_rdmap

    def check(self: Any, view: Any) -> int:
        out = bytearray(view)
        if len(out) > 1:
            out[1] = (out[1] & 0x0F) | (self.version << 6)
        return original(self, memoryview(out))

    _patch(stream, "_check_rdmap", check)


def break_opcode() -> None:
    """RFC 5040 §7.2 check 2: untagged opcodes are not checked (any is taken as a Send)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._check_rdmap

    def check(self: Any, view: Any) -> int:
        if len(view) > 1 and not view[0] & TAGGED_FLAG:
            opcode = view[1] & 0x0F
            known = self._opcode_tagged  # RFC 5040's opcodes, and RFC 7306's when on
            if opcode not in known or known[opcode]:
                return int(RdmapOpcode.SEND)
        return original(self, view)

    _patch(stream, "_check_rdmap", check)


def _scratch_on(faults: set[AccessFault], rights: int) -> None:
    """MemoryRegistry.access: these faults of an access with ``rights`` give scratch octets
    instead (the access "happens" somewhere harmless, and no error is reported)."""
    registry = iwarp.rdmap.memory.MemoryRegistry
    original = registry.access

    def access(self: Any, stag: int, pd: Any, to: int, length: int, want: int) -> Any:
        got = original(self, stag, pd, to, length, want)
        if isinstance(got, AccessFault) and got in faults and want == rights:
            return memoryview(bytearray(length))
        return got

    _patch(registry, "access", access)


def break_write_bounds() -> None:
    """RFC 5041 §7.1 tagged checks 3-5: RDMA Writes out of bounds (or wrapping) are taken."""
    _scratch_on({AccessFault.BASE_OR_BOUNDS, AccessFault.TO_WRAP}, int(Access.REMOTE_WRITE))
    _patch(iwarp.ddp.placement, "fits_to_space", lambda to, length: True)
    _patch(iwarp.rdmap.stream, "fits_to_space", lambda to, length: True)


def break_stag() -> None:
    """RFC 5041 §7.1 tagged check 1: RDMA Writes to unknown STags are taken."""
    _scratch_on({AccessFault.INVALID_STAG}, int(Access.REMOTE_WRITE))


def break_read_bounds() -> None:
    """RFC 5040 §7.2 rule 4 c-e: Read Requests out of bounds (or wrapping) are answered."""
    _scratch_on({AccessFault.BASE_OR_BOUNDS, AccessFault.TO_WRAP}, int(Access.REMOTE_READ))


def break_invalidate() -> None:
    """RFC 5040 §7.2 check 4: the Invalidate STag is not checked."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._send_received

    def received(self: Any, segment: Any, opcode: int) -> None:
        if opcode in INVALIDATE_OPCODES and self.pd.registry.lookup(segment.rsvdulp2) is None:
            opcode = int(RdmapOpcode.SEND)
        original(self, segment, opcode)

    _patch(stream, "_send_received", received)


def break_invalidate_valid() -> None:
    """RFC 5040 §1.2: a Send with Invalidate of a valid STag leaves it valid."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._send_received

    def received(self: Any, segment: Any, opcode: int) -> None:
        if opcode in INVALIDATE_OPCODES and self.pd.registry.lookup(segment.rsvdulp2) is not None:
            opcode = int(RdmapOpcode.SEND)
        original(self, segment, opcode)

    _patch(stream, "_send_received", received)


def break_terminate_queue() -> None:
    """RFC 5040 §5.4: the Terminate goes out on queue 0 instead of queue 2."""
    outgoing = iwarp.ddp.segmentation.OutgoingMessage
    untagged = outgoing.untagged

    def moved(payload: Any, *, qn: int, **kwargs: Any) -> Any:
        if qn == QueueNumber.TERMINATE:
            qn = int(QueueNumber.SEND)
        return untagged(payload, qn=qn, **kwargs)

    _patch(outgoing, "untagged", staticmethod(moved))


def break_atomic_alignment() -> None:
    """RFC 7306 §8.2: an Atomic Request's TO is not checked for 64-bit alignment (every
    other check is made; the word at the misaligned TO is acted on)."""
    checked = _get(iwarp.rdmap.stream, "check_target")

    def check(pd: Any, request: Any, *, ddp_header: bytes | None = None) -> Any:
        try:
            return checked(pd, request, ddp_header=ddp_header)
        except RemoteOperationError as exc:
            # The alignment check is the last one: past it, every other check passed.
            if exc.code != RemoteOperationCode.CATASTROPHIC_STREAM or not request.to % 8:
                raise
            return pd.registry.lookup(request.stag)

    _patch(iwarp.rdmap.stream, "check_target", check)


def break_atomic_response() -> None:
    """RFC 7306 §5.2.2: the Atomic Response's Original Request Identifier is not the
    Request's (one more)."""
    response = _get(iwarp.rdmap.stream, "AtomicResponse")

    class Misnumbered:
        unpack_from = staticmethod(response.unpack_from)

        def __new__(cls, request_id: int, original: int) -> Any:
            return response((request_id + 1) & 0xFFFFFFFF, original)

    _patch(iwarp.rdmap.stream, "AtomicResponse", Misnumbered)


def break_atomic_fetch_add() -> None:
    """RFC 7306 §5.1.1: FetchAdd returns the original word but does not store the sum."""

    def unchanged(original: int, add: int, mask: int = 0) -> int:
        return original

    _patch(iwarp.rdmap.atomics, "masked_fetch_add", unchanged)


def break_atomic_cmp_swap() -> None:
    """RFC 7306 §5.1.2: CmpSwap swaps the masked bits without comparing."""

    def swapped(original: int, compare: int, compare_mask: int, swap: int, swap_mask: int) -> int:
        return ((original & ~swap_mask) | (swap & swap_mask)) & 0xFFFFFFFFFFFFFFFF

    _patch(iwarp.rdmap.atomics, "masked_cmp_swap", swapped)


def break_atomic_opcode() -> None:
    """RFC 7306 §5.2.1 rule 4: a reserved AOpCode is not refused (every other check is
    made; it is executed as a CmpSwap)."""
    checked = _get(iwarp.rdmap.stream, "check_target")

    def check(pd: Any, request: Any, *, ddp_header: bytes | None = None) -> Any:
        known = dataclasses.replace(request, aopcode=AtomicOpcode.CMP_SWAP)
        return checked(pd, known, ddp_header=ddp_header)

    _patch(iwarp.rdmap.stream, "check_target", check)


def break_atomic_stag() -> None:
    """RFC 7306 §5 / RFC 5040 §7.2: an Atomic Request for an unknown STag acts on a scratch
    word (registered for it)."""
    checked = _get(iwarp.rdmap.stream, "check_target")

    def check(pd: Any, request: Any, *, ddp_header: bytes | None = None) -> Any:
        if pd.registry.lookup(request.stag) is None:
            rights = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC
            return pd.register(bytearray(8), rights, address=request.to)
        return checked(pd, request, ddp_header=ddp_header)

    _patch(iwarp.rdmap.stream, "check_target", check)


def break_immediate_size() -> None:
    """RFC 7306 §6.3: Immediate Data of any length is taken."""
    stream = iwarp.rdmap.stream.RdmapStream

    def received(self: Any, segment: Any, opcode: int) -> None:
        wr, length = segment.buffer.context, segment.message_length
        data = bytes(segment.buffer.view[:length])
        self._received(
            Completion(wr.wr_id, WorkOpcode.RECV, CompletionStatus.SUCCESS, length, immediate=data)
        )

    _patch(stream, "_immediate_received", received)


#: Each switch breaks one MUST rule; a case tagged with the rule in ``covers`` must fail.
RULES = {
    "crc": break_crc,
    "pd-length": break_pd_length,
    "terminate": break_terminate,
    "key": break_key,
    "rev": break_rev,
    "reply-reserved": break_reply_reserved,
    "ddp-version": break_ddp_version,
    "qn": break_qn,
    "msn": break_msn,
    "rdmap-version": break_rdmap_version,
    "opcode": break_opcode,
    "write-bounds": break_write_bounds,
    "stag": break_stag,
    "read-bounds": break_read_bounds,
    "invalidate": break_invalidate,
    "invalidate-valid": break_invalidate_valid,
    "terminate-queue": break_terminate_queue,
    "atomic-alignment": break_atomic_alignment,
    "atomic-response": break_atomic_response,
    "atomic-fetch-add": break_atomic_fetch_add,
    "atomic-cmp-swap": break_atomic_cmp_swap,
    "atomic-opcode": break_atomic_opcode,
    "atomic-stag": break_atomic_stag,
    "immediate-size": break_immediate_size,
}


# --- check-order variants: each is still conforming, every case must pass ------------------


def _ddp_check(self: Any, view: Any) -> None:
    """RFC 5041 §7.1's untagged checks 1-5 and tagged checks 1-5, placing nothing."""
    ddp = self._ddp
    n = len(view)
    if view[0] & TAGGED_FLAG:
        if n <= TAGGED_HEADER_SIZE:
            return
        _, _, stag, to = TAGGED_HEADER.unpack_from(view, 0)
        length = n - TAGGED_HEADER_SIZE
        if not fits_to_space(to, length):
            raise DdpTaggedError(DdpTaggedCode.TO_WRAP, "TO wraps (DDP checked first)")
        if self.pd.registry.lookup(stag) is None:
            raise DdpTaggedError(DdpTaggedCode.INVALID_STAG, "STag (DDP checked first)")
        return
    if n < UNTAGGED_HEADER_SIZE:
        return
    _, _, _, qn, msn, mo = UNTAGGED_HEADER.unpack_from(view, 0)
    queue = ddp.queues.get(qn)
    if queue is None:
        raise DdpUntaggedError(DdpUntaggedCode.INVALID_QN, f"queue {qn} (DDP checked first)")
    if not queue.buffers:
        raise DdpUntaggedError(DdpUntaggedCode.NO_BUFFER, "no buffer (DDP checked first)")
    index = (msn - queue.next_msn) & 0xFFFFFFFF
    if index >= len(queue.buffers):
        raise DdpUntaggedError(DdpUntaggedCode.MSN_RANGE, f"MSN {msn} (DDP checked first)")
    if mo > len(queue.buffers[index].view):
        raise DdpUntaggedError(DdpUntaggedCode.INVALID_MO, f"MO {mo} (DDP checked first)")


def ddp_first() -> None:
    """Every DDP field (version, queue, MSN, MO; STag, wrap) before the RDMAP ones."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._check_rdmap

    def check(self: Any, view: Any) -> int:
        self._ddp.check_header(view)
        _ddp_check(self, view)
        return original(self, view)

    _patch(stream, "_check_rdmap", check)


def invalidate_as_operation() -> None:
    """ "STag cannot be Invalidated" reported as a Remote Operation Error (RFC 5040 Figure 9)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._send_received

    def received(self: Any, segment: Any, opcode: int) -> None:
        try:
            original(self, segment, opcode)
        except RemoteProtectionError as exc:
            if exc.code != RemoteProtectionCode.CANNOT_INVALIDATE:
                raise
            raise RemoteOperationError(RemoteOperationCode.CANNOT_INVALIDATE, str(exc)) from None

    _patch(stream, "_send_received", received)


_REGISTRIES = [0]


def distinct_stags() -> None:
    """Each connection's STags are numbered apart (iwarp numbers each connection's STag
    table from 1, so two connections advertise the same STag numbers)."""
    registry = iwarp.rdmap.memory.MemoryRegistry
    original = registry.__init__

    def init(self: Any) -> None:
        original(self)
        _REGISTRIES[0] += 1
        self._next_index = 0x100 * _REGISTRIES[0]

    _patch(registry, "__init__", init)


VARIANTS = {
    "ddp-first": ddp_first,
    "distinct-stags": distinct_stags,
    "invalidate-operation": invalidate_as_operation,
}


# --- an older stack: conforming, without the optional RFC 7306 --------------------------------


def without_rfc7306() -> None:
    """No RFC 7306: its four opcodes are answered with "Unexpected OpCode" (§1.1)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._opcode_tagged = {op: t for op, t in self._opcode_tagged.items() if op < 8}

    _patch(stream, "__init__", init)


#: Conforming stacks without an optional extension: its cases must skip, saying why.
OLDER = {"no-rfc7306": without_rfc7306}
SWITCHES = {**RULES, **VARIANTS, **OLDER}

if __name__ == "__main__":
    SWITCHES[sys.argv[1]]()
    if sys.argv[2] == "listen":
        from iwarp.cli import main

        sys.exit(main(["listen", *sys.argv[3:]]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from initiator_loop import run  # type: ignore[import-not-found]

    run(sys.argv[3:])
