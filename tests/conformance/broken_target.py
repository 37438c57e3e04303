"""iwarp with one rule broken on purpose, for the conformance suite's own tests.

``python broken_target.py RULE listen ARGS...`` runs ``iwarp listen ARGS``;
``python broken_target.py RULE connect ARGS...`` runs ``iwarp connect ARGS``
again and again (see initiator_loop.py). RULE is a key of ``SWITCHES``: a
mutant of ``RULES`` (one MUST rule broken, e.g. ``crc``: FPDUs are never
CRC-checked; the Responder's rules act in ``listen``, the Initiator's, such as
``request-key`` or ``reply-r``, in ``connect``, and a rule of code both roles
share in both), a conforming variant (``VARIANTS`` for the Responder,
``INITIATOR_VARIANTS`` for the Initiator), an older stack (``OLDER``), a Responder that
sends no FPDU (``SILENT``) or one that leaves out a SHOULD (``SHOULD_SKIPPED``).

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
from iwarp._crc32c import crc32c
from iwarp._kernels import SCAN_MARKER
from iwarp.ddp.errors import DdpTaggedCode, DdpTaggedError, DdpUntaggedCode, DdpUntaggedError
from iwarp.ddp.wire import (
    LAST_FLAG,
    TAGGED_FLAG,
    TAGGED_HEADER,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    VERSION_MASK,
    QueueNumber,
    fits_to_space,
)
from iwarp.errors import MpaError, MpaErrorCode
from iwarp.mpa.config import Role
from iwarp.mpa.handshake import MpaState, RequestVerdict
from iwarp.mpa.wire import (
    CRC_FIELD,
    ENHANCED_SIZE,
    IRD_ORD_NONE,
    MARKER,
    REPLY_KEY,
    REQUEST_KEY,
    RESERVED_FLAGS,
    EnhancedData,
    FrameFlags,
    RtrFlags,
)
from iwarp.rdmap.errors import (
    RemoteOperationCode,
    RemoteOperationError,
    RemoteProtectionCode,
    RemoteProtectionError,
)
from iwarp.rdmap.memory import Access, AccessFault
from iwarp.rdmap.state import StreamState
from iwarp.rdmap.wire import (
    INVALIDATE_OPCODES,
    READ_REQUEST_SIZE,
    AtomicOpcode,
    RdmapOpcode,
    ReadRequest,
)
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


def _fix_frame(data: Any, *, key: bytes = b"", rev: bool = False) -> Any:
    """A copy of a received startup frame with its key (made ``key``) or revision made
    acceptable. A frame that carries either real key keeps it (the key still tells a
    Request from a Reply, RFC 5044 §7.1.2 rule 8)."""
    if len(data) < 18:
        return data
    out = bytearray(data)
    if key and bytes(out[:16]) not in (REQUEST_KEY, REPLY_KEY):
        out[:16] = key
    if rev and out[17] > 2:
        out[17] = 2
    return out


def break_key() -> None:
    """RFC 5044 §7.1.1 Key: a received frame's key is not checked (any 16 octets will do:
    the Responder's Request, the Initiator's Reply)."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        data = _fix_frame(data, key=REQUEST_KEY if expect_request else REPLY_KEY)
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def break_rev() -> None:
    """RFC 5044 §7.1.1 Rev: unknown revisions are taken as Rev 2 (in a Request and in a
    Reply)."""
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


def break_write_end() -> None:
    """RFC 5041 §7.1 tagged check 4, off by one: an RDMA Write whose last octet is the first
    past the buffer is taken (that octet goes nowhere); Writes further out are refused."""
    registry = iwarp.rdmap.memory.MemoryRegistry
    original = registry.access

    def access(self: Any, stag: int, pd: Any, to: int, length: int, want: int) -> Any:
        got = original(self, stag, pd, to, length, want)
        region = self.lookup(stag)
        if (
            got is AccessFault.BASE_OR_BOUNDS
            and want == int(Access.REMOTE_WRITE)
            and region is not None
            and region.address <= to
            and to + length == region.address + region.length + 1
        ):
            return memoryview(bytearray(length))
        return got

    _patch(registry, "access", access)
    _no_fast_paths()


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


# --- the MPA startup frames (RFC 5044 §7.1, RFC 6581) -------------------------------------


class _PackedAs:
    """A Reply frame whose octets are rewritten by ``fix`` when packed (every other attribute
    is the real frame's)."""

    def __init__(self, frame: Any, fix: Any) -> None:
        self._frame, self._fix = frame, fix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._frame, name)

    def pack(self) -> bytes:
        data = bytearray(self._frame.pack())
        self._fix(data)
        return bytes(data)


def _rewrite_reply(fix: Any, *, frame: Any = None) -> None:
    """Every Reply built by ``build_reply`` goes out rewritten: ``frame(reply, request)`` may
    return another MpaFrame, ``fix(octets)`` changes its packed octets in place."""
    original = _get(iwarp.mpa.connection, "build_reply")

    def build(config: Any, request: Any, **kwargs: Any) -> Any:
        reply, params = original(config, request, **kwargs)
        if frame is not None:
            reply = frame(reply, request)
        return (_PackedAs(reply, fix) if fix is not None else reply), params

    _patch(iwarp.mpa.connection, "build_reply", build)


def break_reply_key() -> None:
    """RFC 5044 §7.1.1 Key: the Reply carries the Request's key (every Reply is wrong, so
    every case that reads a Reply fails)."""

    def fix(data: bytearray) -> None:
        data[:16] = REQUEST_KEY

    _rewrite_reply(fix)


def break_reply_flags() -> None:
    """RFC 5044 §7.1.1 Res: the Reply sets a reserved flag bit (0x01)."""

    def fix(data: bytearray) -> None:
        data[16] |= 0x01

    _rewrite_reply(fix)


def break_reply_rev() -> None:
    """RFC 5044 §7.1.1 Rev: the Reply always carries the Responder's own revision (2), even
    to a Rev 1 Request."""
    _rewrite_reply(None, frame=lambda reply, request: dataclasses.replace(reply, revision=2))


def break_reply_pd() -> None:
    """RFC 5044 §7.1.1 Private Data: the Reply carries 600 octets of private data (every case
    that reads a Reply fails: the tool refuses a Reply over 512 octets)."""

    def frame(reply: Any, request: Any) -> Any:
        return dataclasses.replace(reply, private_data=reply.private_data + bytes(600))

    _rewrite_reply(None, frame=frame)


def break_request_r() -> None:
    """RFC 5044 §7.1.1 R: the R bit of a Request is checked on reception (the Responder
    closes on it)."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        if expect_request and len(data) > 16 and data[16] & FrameFlags.REJECT:
            raise MpaError(MpaErrorCode.INVALID_FRAME, "R bit set in a Request (mutant)")
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def break_reply_to_invalid() -> None:
    """RFC 5044 §7.1.2 rule 2: an improperly formatted Request is answered with an accepting
    Reply (Rev 1, C=1) before the close, as by a Responder that replies before validating."""
    connection = iwarp.mpa.connection.MpaConnection
    original = connection._startup
    parse = _get(iwarp.mpa.connection, "parse_frame")
    reply = REPLY_KEY + bytes([FrameFlags.CRC, 1, 0, 0])

    def startup(self: Any) -> None:
        if self.role is Role.RESPONDER:
            try:
                parse(self._rx, self.config, expect_request=True)
            except MpaError:
                self._out.append(reply)
        original(self)

    _patch(connection, "_startup", startup)


def break_fin_startup() -> None:
    """RFC 5044 §8 code 4: a Request cut short by FIN is not closed at once; the Responder
    waits for its startup timeout."""
    connection = iwarp.mpa.connection.MpaConnection
    original = connection._end_of_stream

    def end(self: Any) -> None:
        if self.state in (MpaState.AWAIT_REQUEST, MpaState.AWAIT_REPLY):
            self._peer_closed = True
            return
        original(self)

    _patch(connection, "_end_of_stream", end)


def break_rev0() -> None:
    """RFC 5044 Appendix C.2.1: a Rev 0 Request is answered with a Rev 1 Reply and the
    connection stays open (neither RDMAC mode nor the close)."""
    checked = _get(iwarp.mpa.connection, "check_request")

    def check(config: Any, request: Any) -> Any:
        verdict, why = checked(config, request)
        if verdict is RequestVerdict.INCOMPATIBLE:
            return RequestVerdict.DELIVER, ""
        return verdict, why

    _patch(iwarp.mpa.connection, "check_request", check)
    original = _get(iwarp.mpa.connection, "build_reply")

    def build(config: Any, request: Any, **kwargs: Any) -> Any:
        if request.revision == 0:
            request = dataclasses.replace(request, revision=1)
        return original(config, request, **kwargs)

    _patch(iwarp.mpa.connection, "build_reply", build)


def break_responder_first() -> None:
    """RFC 5044 §7.1.2 rule 4: the Responder sends an FPDU (a zero-length RDMA Write) right
    after its accepting Reply, before any FPDU from the Initiator."""
    connection = iwarp.mpa.connection.MpaConnection
    original = connection.accept
    write = bytes([TAGGED_FLAG | LAST_FLAG | 1, 0x40]) + bytes(12)  # DV 1, RV 1, STag 0, TO 0

    def accept(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if self._encoder is not None:
            self._out.extend(self._encoder.encode(write))
        return out

    _patch(connection, "accept", accept)


def _enhanced_reply(change: Any) -> None:
    """The Reply's enhanced data (RFC 6581) rewritten by ``change(reply, request)``."""
    _rewrite_reply(None, frame=change)


def break_enhanced_reply() -> None:
    """RFC 6581 §10: an enhanced Request gets an unenhanced Reply (S=0, no IRD/ORD)."""

    def change(reply: Any, request: Any) -> Any:
        if reply.enhanced is None:
            return reply
        return dataclasses.replace(
            reply,
            flags=reply.flags & ~FrameFlags.ENHANCED,
            private_data=reply.private_data[ENHANCED_SIZE:],
        )

    _enhanced_reply(change)


def break_unenhanced_reply() -> None:
    """RFC 6581 §10: an unenhanced Rev 2 Request (S=0) gets an enhanced Reply."""

    def change(reply: Any, request: Any) -> Any:
        if reply.enhanced is not None or reply.revision < 2:
            return reply
        return dataclasses.replace(
            reply,
            flags=reply.flags | FrameFlags.ENHANCED,
            private_data=EnhancedData(16, 16).pack() + reply.private_data,
        )

    _enhanced_reply(change)


def break_rev1() -> None:
    """RFC 6581 §10: Rev 1 Requests are no longer accepted (closed as improperly formatted)."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        if expect_request and len(data) > 17 and data[17] == 1:
            raise MpaError(MpaErrorCode.INVALID_FRAME, "Rev 1 Request refused (mutant)")
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def break_short_enhanced() -> None:
    """RFC 6581 §9 / RFC 5044 rule 9: S=1 with fewer than 4 octets of private data is taken
    as an unenhanced Request."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        short = len(data) >= 20 and int.from_bytes(bytes(data[18:20]), "big") < ENHANCED_SIZE
        if expect_request and short and data[17] == 2 and data[16] & FrameFlags.ENHANCED:
            data = bytearray(data)
            data[16] &= ~FrameFlags.ENHANCED
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def _enhanced_fields(change: Any) -> None:
    """The Reply's IRD/ORD replaced by ``change(reply_enhanced, request_enhanced)``."""

    def frame(reply: Any, request: Any) -> Any:
        if reply.enhanced is None or request.enhanced is None:
            return reply
        enhanced = change(reply.enhanced, request.enhanced)
        rest = reply.private_data[ENHANCED_SIZE:]
        return dataclasses.replace(reply, private_data=enhanced.pack() + rest)

    _enhanced_reply(frame)


def break_ord() -> None:
    """RFC 6581 §9.1: the Responder's ORD is its own (16), not limited to the Initiator's IRD."""
    _enhanced_fields(
        lambda ours, theirs: (
            dataclasses.replace(ours, ord=16)
            if IRD_ORD_NONE not in (ours.ord, theirs.ird)
            else ours
        )
    )


def break_ird_ord_none() -> None:
    """RFC 6581 §9.1: 0x3FFF is taken as a number (the Responder's Reply carries its own
    IRD and ORD, 16, instead of 0x3FFF; the Initiator reads a 0x3FFF in the Reply as
    0x3FFE, so that a Responder ORD of 0x3FFF exceeds its IRD: TERM code 6)."""

    def change(ours: Any, theirs: Any) -> Any:
        ird = 16 if ours.ird == IRD_ORD_NONE else ours.ird
        ord_ = 16 if ours.ord == IRD_ORD_NONE else ours.ord
        return dataclasses.replace(ours, ird=ird, ord=ord_)

    _enhanced_fields(change)

    def as_number(value: int) -> int:
        return IRD_ORD_NONE - 1 if value == IRD_ORD_NONE else value

    def reply(request: Any, frame: Any) -> Any:
        peer = frame.enhanced
        if peer is None or IRD_ORD_NONE not in (peer.ird, peer.ord):
            return frame
        numbers = EnhancedData(as_number(peer.ird), as_number(peer.ord), peer.flags)
        rest = frame.private_data[ENHANCED_SIZE:]
        return dataclasses.replace(frame, private_data=numbers.pack() + rest)

    _initiator_reads(reply)


def break_peer_to_peer() -> None:
    """RFC 6581 §9.2: the A bit of a Request is ignored (the Reply has A=0, no RTR type)."""
    _enhanced_fields(lambda ours, theirs: dataclasses.replace(ours, flags=RtrFlags.NONE))


def break_rtr_bits() -> None:
    """RFC 6581 §9.2: with A=0 the Reply (the Responder's) and the Request (the
    Initiator's) still set the RTR types their sender supports (C and D)."""

    def change(ours: Any, theirs: Any) -> Any:
        if RtrFlags.PEER_TO_PEER in ours.flags:
            return ours
        return dataclasses.replace(ours, flags=RtrFlags.WRITE | RtrFlags.READ)

    _enhanced_fields(change)
    _request_enhanced(lambda ours: change(ours, None))


def break_write_rtr() -> None:
    """RFC 6581 §9.2: the Write RTR (a zero-length RDMA Write) is not recognised as an RTR
    (the Responder that offered it answers it with TERM code 7)."""
    _patch(iwarp.rdmap.stream.RdmapStream, "_is_tagged_rtr", lambda self, view: False)


def break_zero_read() -> None:
    """RFC 5040 §5.2.1: a zero-length Read Request is not answered."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._read_request

    def read_request(self: Any, segment: Any) -> None:
        raw = bytes(segment.buffer.view[:READ_REQUEST_SIZE])
        if len(raw) == READ_REQUEST_SIZE and ReadRequest.unpack_from(raw).size == 0:
            return
        original(self, segment)

    _patch(stream, "_read_request", read_request)


def break_zero_read_stag() -> None:
    """RFC 5040 §5.2.1: the STag of a zero-length Read Request is validated (an unknown one
    brings TERM invalid STag)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._read_request

    def read_request(self: Any, segment: Any) -> None:
        raw = bytes(segment.buffer.view[:READ_REQUEST_SIZE])
        if len(raw) == READ_REQUEST_SIZE:
            req = ReadRequest.unpack_from(raw)
            if req.size == 0 and self.pd.registry.lookup(req.src_stag) is None:
                raise RemoteProtectionError(
                    RemoteProtectionCode.INVALID_STAG,
                    f"zero-length Read of STag {req.src_stag:#x} (mutant)",
                    rdmap_header=raw,
                )
        original(self, segment)

    _patch(stream, "_read_request", read_request)


def break_read_sink() -> None:
    """RFC 5040 §5.2.2: a Read Response goes 8 octets past the Read Request's sink TO."""
    original = _get(iwarp.rdmap.stream, "_Response")

    def response(source: Any, request: Any) -> Any:
        if request.size:
            request = dataclasses.replace(request, sink_to=request.sink_to + 8)
        return original(source, request)

    _patch(iwarp.rdmap.stream, "_Response", response)


def break_read_source_to() -> None:
    """RFC 5040 §5.2.2: a Read Response goes to the Read Request's Data Source TO (the
    target's own buffer address) instead of its Data Sink TO."""
    original = _get(iwarp.rdmap.stream, "_Response")

    def response(source: Any, request: Any) -> Any:
        if request.size:
            request = dataclasses.replace(request, sink_to=request.src_to)
        return original(source, request)

    _patch(iwarp.rdmap.stream, "_Response", response)


def break_read_last() -> None:
    """RFC 5041 §4.1 L: the Responder's Read Responses never set the Last flag."""

    def fix(fpdu: bytearray) -> None:
        if fpdu[2] & TAGGED_FLAG and fpdu[3] & 0x0F == RdmapOpcode.RDMA_READ_RESPONSE:
            fpdu[2] &= ~LAST_FLAG & 0xFF
            _recrc(fpdu)

    _rewrite_sent(fix)


def break_read_order() -> None:
    """RFC 5040 §5.2.1: a Read Request overtakes those still waiting for their Read Response
    (the ones that arrive together are answered last-asked first)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._read_request

    def read_request(self: Any, segment: Any) -> None:
        original(self, segment)
        self._irq.rotate(1)  # the newest response, appended last, goes out first

    _patch(stream, "_read_request", read_request)


def break_read_data() -> None:
    """RFC 5040 §5.1/§5.2: what a Read returns is not what was placed (its first octet is
    inverted). Buffers are open to remote Read and Write (``read-write``), so that the case
    can write and read back."""
    read_write()
    registry = iwarp.rdmap.memory.MemoryRegistry
    original = registry.access

    def access(self: Any, stag: int, pd: Any, to: int, length: int, want: int) -> Any:
        got = original(self, stag, pd, to, length, want)
        if want == int(Access.REMOTE_READ) and not isinstance(got, AccessFault) and length:
            copy = bytearray(got)
            copy[0] ^= 0xFF
            return memoryview(copy)
        return got

    _patch(registry, "access", access)


def _no_fast_paths() -> None:
    """Every segment takes the checked path (the fast paths make their own checks)."""
    rdmap = iwarp.rdmap.stream.RdmapStream
    _patch(rdmap, "_place_send", lambda self, view: False)
    _patch(rdmap, "_place_write", lambda self, view: False)
    _patch(rdmap, "_place_run", lambda self, buffer, records, index: 0)


def break_ddp_reserved() -> None:
    """RFC 5041 §4.1 Rsvd: reserved DDP control bits are checked (reported as a wrong DDP
    version)."""
    receiver = iwarp.ddp.placement.DdpReceiver
    original = receiver.check_header

    def check(self: Any, ulpdu: Any) -> None:
        if len(ulpdu) and ulpdu[0] & 0x3C:
            if ulpdu[0] & TAGGED_FLAG:
                raise DdpTaggedError(DdpTaggedCode.INVALID_VERSION, "reserved DDP bits (mutant)")
            raise DdpUntaggedError(DdpUntaggedCode.INVALID_VERSION, "reserved DDP bits (mutant)")
        original(self, ulpdu)

    _patch(receiver, "check_header", check)
    _no_fast_paths()


def break_write_segments() -> None:
    """RFC 5041 §5.2: a tagged segment without the Last flag is refused (base or bounds)."""
    receiver = iwarp.ddp.placement.DdpReceiver
    original = receiver.check_header

    def check(self: Any, ulpdu: Any) -> None:
        if len(ulpdu) > TAGGED_HEADER_SIZE and ulpdu[0] & TAGGED_FLAG and not ulpdu[0] & LAST_FLAG:
            raise DdpTaggedError(DdpTaggedCode.BASE_OR_BOUNDS, "L=0 segment refused (mutant)")
        original(self, ulpdu)

    _patch(receiver, "check_header", check)
    _no_fast_paths()


def break_write_placed() -> None:
    """RFC 5041 §5.1.1: an RDMA Write at the start of a valid buffer is refused (base or
    bounds: an off-by-one base check)."""
    registry = iwarp.rdmap.memory.MemoryRegistry
    original = registry.access

    def access(self: Any, stag: int, pd: Any, to: int, length: int, want: int) -> Any:
        got = original(self, stag, pd, to, length, want)
        region = self.lookup(stag)
        if (
            want == int(Access.REMOTE_WRITE)
            and length
            and not isinstance(got, AccessFault)
            and region is not None
            and to == region.address
        ):
            return AccessFault.BASE_OR_BOUNDS
        return got

    _patch(registry, "access", access)
    _no_fast_paths()


_ALL_REGISTRIES: list[Any] = []


def break_stag_scope() -> None:
    """RFC 5041 §7.2 / RFC 5040 §7.2: an STag of another connection is refused with the wrong
    code, base or bounds (STags numbered apart per connection). Letting it through is no
    violation (RFC 5040 §8.1.1 leaves an STag's scope to the implementation: the cases skip)."""
    distinct_stags()
    registry = iwarp.rdmap.memory.MemoryRegistry
    init = registry.__init__
    original = registry.access

    def new_init(self: Any) -> None:
        init(self)
        _ALL_REGISTRIES.append(self)

    def access(self: Any, stag: int, pd: Any, to: int, length: int, want: int) -> Any:
        if self.lookup(stag) is None:
            for other in _ALL_REGISTRIES:
                region = other.lookup(stag)
                if other is not self and region is not None:
                    return AccessFault.BASE_OR_BOUNDS
        return original(self, stag, pd, to, length, want)

    _patch(registry, "__init__", new_init)
    _patch(registry, "access", access)


def _other_region(registry: Any, stag: int) -> Any:
    """The region ``stag`` names in another connection's registry (see _track_registries)."""
    for other in _ALL_REGISTRIES:
        region = other.lookup(stag)
        if other is not registry and region is not None:
            return region
    return None


def _track_registries() -> None:
    """Each connection's STags numbered apart, and every registry remembered."""
    distinct_stags()
    registry = iwarp.rdmap.memory.MemoryRegistry
    init = registry.__init__

    def new_init(self: Any) -> None:
        init(self)
        _ALL_REGISTRIES.append(self)

    _patch(registry, "__init__", new_init)


def break_invalidate_scope() -> None:
    """RFC 5040 §7.2 / §8.1.1: a Send with Invalidate naming another connection's STag
    invalidates it there (and is taken as a plain Send here)."""
    _track_registries()
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._send_received

    def received(self: Any, segment: Any, opcode: int) -> None:
        registry = self.pd.registry
        if opcode in INVALIDATE_OPCODES and registry.lookup(segment.rsvdulp2) is None:
            region = _other_region(registry, segment.rsvdulp2)
            if region is not None:
                region.invalidate()
                opcode = int(RdmapOpcode.SEND)
        original(self, segment, opcode)

    _patch(stream, "_send_received", received)


def break_atomic_scope() -> None:
    """RFC 7306 §5 / RFC 5040 §8.1.1: an Atomic Request naming another connection's STag acts
    on that connection's word."""
    _track_registries()
    checked = _get(iwarp.rdmap.stream, "check_target")

    def check(pd: Any, request: Any, *, ddp_header: bytes | None = None) -> Any:
        if pd.registry.lookup(request.stag) is None:
            region = _other_region(pd.registry, request.stag)
            if region is not None:
                return region
        return checked(pd, request, ddp_header=ddp_header)

    _patch(iwarp.rdmap.stream, "check_target", check)


# --- the FPDU stream (RFC 5044 §4) ------------------------------------------------------------


def _no_lanes() -> None:
    """FPDUs go only through the queue of MpaConnection (no send or receive lane)."""
    connection = iwarp.mpa.connection.MpaConnection
    _patch(connection, "lane_encoder", lambda self: None)
    _patch(connection, "lane_decoder", lambda self: None)


class _FpduCutter:
    """Finds the FPDUs of an unmarked stream that starts with one startup frame and hands each
    complete one (with its 2-octet length, PAD and CRC) to ``fix`` (which may change it)."""

    def __init__(self, fix: Any) -> None:
        self.fix = fix
        self.pending = bytearray()
        self.frame_done = False

    def feed(self, data: bytes) -> bytes:
        self.pending += data
        out = bytearray()
        if not self.frame_done:
            if len(self.pending) < 20:
                return b""
            end = 20 + int.from_bytes(self.pending[18:20], "big")
            if len(self.pending) < end:
                return b""
            out += self.pending[:end]
            del self.pending[:end]
            self.frame_done = True
        while len(self.pending) >= 2:
            length = int.from_bytes(self.pending[:2], "big")
            size = 2 + length + (-(2 + length) % 4) + 4
            if len(self.pending) < size:
                break
            fpdu = bytearray(self.pending[:size])
            del self.pending[:size]
            self.fix(fpdu)
            out += fpdu
        return bytes(out)


def _recrc(fpdu: bytearray) -> None:
    CRC_FIELD.pack_into(fpdu, len(fpdu) - 4, crc32c(bytes(fpdu[:-4])))


def _rewrite_sent(fix: Any) -> None:
    """Every FPDU the Responder sends (no markers) is rewritten by ``fix`` before it goes out."""
    _no_lanes()
    connection = iwarp.mpa.connection.MpaConnection
    original = connection.data_to_send

    def data_to_send(self: Any) -> list[Any]:
        pieces = original(self)
        if self.role is not Role.RESPONDER or (self.params and self.params.markers_send):
            return pieces
        cutter = vars(self).setdefault("_mutant_cutter", _FpduCutter(fix))
        data = cutter.feed(b"".join(bytes(p) for p in pieces))
        return [data] if data else []

    _patch(connection, "data_to_send", data_to_send)
    _patch(connection, "has_data_to_send", property(lambda self: bool(self._out)))


def break_pad_sent() -> None:
    """RFC 5044 §4.1 PAD: the Responder's PAD octets are 0xff (the CRC covers them)."""

    def fix(fpdu: bytearray) -> None:
        length = int.from_bytes(fpdu[:2], "big")
        pad = len(fpdu) - 4 - 2 - length
        if pad:
            fpdu[2 + length : 2 + length + pad] = b"\xff" * pad
            _recrc(fpdu)

    _rewrite_sent(fix)


def break_crc_first_term() -> None:
    """RFC 5044 §7.1.2 rule 4: a Responder whose first FPDU fails its CRC answers with a
    Terminate (code 2), as in Full Operation, though it has validated no FPDU yet."""
    original = _get(iwarp.mpa.connection, "transition")

    def transition(role: Any, state: Any, event: Any) -> Any:
        if (role, state, event) == (
            Role.RESPONDER,
            MpaState.AWAIT_FIRST_FPDU,
            iwarp.mpa.handshake.MpaInput.BAD_FPDU,
        ):
            return MpaState.FULL_OPERATION
        return original(role, state, event)

    _patch(iwarp.mpa.connection, "transition", transition)


def break_crc_sent() -> None:
    """RFC 5044 §4.4: the Responder's FPDUs carry a wrong CRC."""

    def fix(fpdu: bytearray) -> None:
        fpdu[-1] ^= 0x01

    _rewrite_sent(fix)


def break_pad_checked() -> None:
    """RFC 5044 §4.1 PAD: non-zero PAD octets are refused (as a CRC error), though a good
    CRC covers them."""
    _no_lanes()
    connection = iwarp.mpa.connection.MpaConnection
    original = connection._feed

    def fix(fpdu: bytearray) -> None:
        length = int.from_bytes(fpdu[:2], "big")
        if fpdu[2 + length : -4].strip(b"\0"):
            fpdu[-1] ^= 0x01

    def feed(self: Any, data: Any) -> None:
        if self.params is None or self.params.markers_receive or not self.params.crc:
            original(self, data)
            return
        cutter = vars(self).get("_mutant_cutter")
        if cutter is None:
            cutter = self._mutant_cutter = _FpduCutter(fix)
            cutter.frame_done = True
        out = cutter.feed(bytes(data))
        if out:
            original(self, out)

    _patch(connection, "_feed", feed)


def break_crc_always() -> None:
    """RFC 5044 §7.1.1 C: the CRC is checked even when CRCs are not in use."""
    decoder = iwarp.mpa.framing.FpduDecoder
    original = decoder.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["crc"] = True
        original(self, *args, **kwargs)

    decoder.__init__ = init  # type: ignore[method-assign]


def break_markers() -> None:
    """RFC 5044 §4.3 and §7.1.2 rule 7: the Responder's markers are placed from a stream
    origin 4 octets before Full Operation (the first octets are not a marker, and every
    marker is 4 octets early)."""
    base = iwarp.mpa.framing.FpduEncoder

    class Shifted(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("markers"):
                kwargs.setdefault("origin", (-4) & 0xFFFFFFFF)
                kwargs.setdefault("position", 0)
            super().__init__(*args, **kwargs)

    _patch(iwarp.mpa.connection, "FpduEncoder", Shifted)


def break_marker_ptr() -> None:
    """RFC 5044 §4.3: the FPDUPTR of every marker inside an FPDU is 4 too large (the first
    marker, 0 between FPDUs, is right)."""
    _no_lanes()
    _patch(iwarp.mpa.framing, "_pack_marker", lambda reserved, ptr: MARKER.pack(reserved, ptr + 4))
    encoder = iwarp.mpa.framing.FpduEncoder

    def encode_run(self: Any, run: Any) -> list[Any]:
        # Runs are framed by a kernel with markers of its own: one ULPDU at a time instead.
        return [piece for ulpdu in run.ulpdus() for piece in self.encode(ulpdu)]

    _patch(encoder, "encode_run", encode_run)


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


# --- the checks of RFC 5041 §7.1 and RFC 5040 §7.2 that only the Terminate showed before -----


def _untagged_room(ddp: Any, ulpdu: Any) -> tuple[int, int, int] | None:
    """(MO, payload length, size of the buffer the segment's MSN selects) of an untagged
    segment on a queue with a buffer posted; None for anything else (left to the checks)."""
    if len(ulpdu) < UNTAGGED_HEADER_SIZE or ulpdu[0] & TAGGED_FLAG:
        return None
    _, _, _, qn, msn, mo = UNTAGGED_HEADER.unpack_from(ulpdu, 0)
    queue = ddp.queues.get(qn)
    if queue is None or not queue.buffers:
        return None
    index = (msn - queue.next_msn) & 0xFFFFFFFF
    if index >= len(queue.buffers):
        return None
    return mo, len(ulpdu) - UNTAGGED_HEADER_SIZE, len(queue.buffers[index].view)


def break_mo() -> None:
    """RFC 5041 §7.1 untagged check 3: an MO beyond the buffer is not refused (the segment
    is placed at MO 0 instead; check 4, the sum of MO and length, is still made)."""

    def fix(self: Any, ulpdu: Any) -> Any:
        room = _untagged_room(self, ulpdu)
        if room is None or room[0] <= room[2]:
            return ulpdu
        out = bytearray(ulpdu)
        UNTAGGED_HEADER.pack_into(out, 0, *UNTAGGED_HEADER.unpack_from(out, 0)[:5], 0)
        return memoryview(out)

    _rewrite_first("receive", fix)


def break_message_length() -> None:
    """RFC 5041 §7.1 untagged check 4: a segment whose MO plus length passes the end of the
    buffer is not refused (what fits is placed, the rest dropped; check 3 is still made)."""

    def fix(self: Any, ulpdu: Any) -> Any:
        room = _untagged_room(self, ulpdu)
        if room is None:
            return ulpdu
        mo, length, size = room
        if mo > size or mo + length <= size:
            return ulpdu
        return ulpdu[: UNTAGGED_HEADER_SIZE + size - mo]

    _rewrite_first("receive", fix)


def _rewrite_tagged_opcode(when: Any) -> None:
    """RdmapStream._receive: a tagged segment for which ``when(stream, opcode)`` holds is
    taken as an RDMA Write (its opcode rewritten before any check)."""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._receive

    def receive(self: Any, view: Any) -> None:
        if len(view) > 1 and view[0] & TAGGED_FLAG and when(self, view[1] & 0x0F):
            out = bytearray(view)
            out[1] = (out[1] & 0xF0) | RdmapOpcode.RDMA_WRITE
            view = memoryview(out)
        original(self, view)

    _patch(stream, "_receive", receive)


def break_tagged_opcode() -> None:
    """RFC 5040 §7.2 check 2 for tagged segments: an opcode that is not a tagged one (a
    Send, a Read Request, an unknown one) is taken as an RDMA Write."""
    _rewrite_tagged_opcode(lambda self, opcode: self._opcode_tagged.get(opcode) is not True)


def break_read_response() -> None:
    """RFC 5040 §5.2.2 / §7.2 check 2: an RDMA Read Response that answers no outstanding
    Read Request is placed as an RDMA Write (into the STag it names, if writable)."""

    def unrequested(self: Any, opcode: int) -> bool:
        if opcode != RdmapOpcode.RDMA_READ_RESPONSE:
            return False
        work = self._orq[0] if self._orq else None
        return work is None or work.request is None

    _rewrite_tagged_opcode(unrequested)


def break_read_stag() -> None:
    """RFC 5040 §7.2 rule 4.a: a Read Request of an unknown Data Source STag is answered
    (with scratch octets) instead of refused."""
    _scratch_on({AccessFault.INVALID_STAG}, int(Access.REMOTE_READ))


def break_ird() -> None:
    """RFC 5040 §6.1 with RFC 5041 §7.1 check 2: a Read Request beyond the IRD the Responder
    stated is dropped without a word (no Read Response, no Terminate: a silent stall).
    (A mutant that answers it instead cannot be told from a Responder that keeps pace.)"""
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream._deliver

    def deliver(self: Any, segment: Any, opcode: int) -> None:
        if opcode == RdmapOpcode.RDMA_READ_REQUEST and self._inbound[0] >= self.ird:
            return
        original(self, segment, opcode)

    _patch(stream, "_deliver", deliver)


def break_crc_sent_marked() -> None:
    """draft-culley-iwarp-mpa-02 §7.2 (RFC 5044 §4.4 with markers): the Responder's FPDUs
    with markers carry a wrong CRC (its last octet changed; FPDUs without markers keep theirs)."""
    _no_lanes()
    encoder = iwarp.mpa.framing.FpduEncoder
    original = encoder.encode

    def encode(self: Any, ulpdu: Any) -> list[Any]:
        pieces = original(self, ulpdu)
        if self.markers and self.crc:
            crc = bytearray(pieces[-1])
            crc[-1] ^= 0x01
            pieces[-1] = bytes(crc)
        return pieces

    def encode_run(self: Any, run: Any) -> list[Any]:
        return [piece for ulpdu in run.ulpdus() for piece in self.encode(ulpdu)]

    _patch(encoder, "encode", encode)
    _patch(encoder, "encode_run", encode_run)


# --- the Initiator: its Request (RFC 5044 §7.1.1, RFC 6581) and its handling of Replies ------


def _rewrite_request(fix: Any = None, *, frame: Any = None) -> None:
    """Every Request built by ``build_request`` goes out rewritten: ``frame(request)`` may
    return another MpaFrame (the one the Initiator then believes it sent), ``fix(octets)``
    changes the packed octets in place (the Initiator believes it sent the frame unchanged)."""
    original = _get(iwarp.mpa.connection, "build_request")

    def build(config: Any, private_data: bytes) -> Any:
        request = original(config, private_data)
        if frame is not None:
            request = frame(request)
        return _PackedAs(request, fix) if fix is not None else request

    _patch(iwarp.mpa.connection, "build_request", build)


def _request_enhanced(change: Any) -> None:
    """The enhanced data of the Request replaced by ``change(enhanced)``."""

    def frame(request: Any) -> Any:
        if request.enhanced is None:
            return request
        rest = request.private_data[ENHANCED_SIZE:]
        return dataclasses.replace(request, private_data=change(request.enhanced).pack() + rest)

    _rewrite_request(frame=frame)


def _initiator_reads(change: Any) -> None:
    """``complete_initiator`` sees ``change(request, reply)`` instead of the Reply received
    (the Initiator's reading of a valid Reply, after the frame checks)."""
    original = _get(iwarp.mpa.connection, "complete_initiator")

    def complete(config: Any, request: Any, reply: Any, **kwargs: Any) -> Any:
        return original(config, request, change(request, reply), **kwargs)

    _patch(iwarp.mpa.connection, "complete_initiator", complete)


def _reply_octets(change: Any) -> None:
    """The Initiator parses ``change(octets)`` instead of the Reply's octets received."""
    original = _get(iwarp.mpa.connection, "parse_frame")

    def parse(data: Any, config: Any, *, expect_request: bool) -> Any:
        if not expect_request:
            data = change(data)
        return original(data, config, expect_request=expect_request)

    _patch(iwarp.mpa.connection, "parse_frame", parse)


def break_request_key() -> None:
    """RFC 5044 §7.1.1 Key: the Request's key is "mPA ID Req Frame" (every case reads the
    Request first, so every case fails, each for the Request)."""

    def fix(data: bytearray) -> None:
        data[0] ^= 0x20

    _rewrite_request(fix)


def break_request_flags() -> None:
    """RFC 5044 §7.1.1 Res: the Request sets a reserved flag bit (0x01)."""

    def fix(data: bytearray) -> None:
        data[16] |= 0x01

    _rewrite_request(fix)


def break_request_rev() -> None:
    """RFC 5044 §7.1.1 Rev: the Request carries Rev 3 (the Initiator itself goes on as
    Rev 2; every case fails for the Request)."""

    def fix(data: bytearray) -> None:
        data[17] = 3

    _rewrite_request(fix)


def break_request_pd() -> None:
    """RFC 5044 §7.1.1 Private Data: the Request carries 600 octets of private data (every
    case fails for the Request: the tool refuses a Request over 512 octets)."""

    def frame(request: Any) -> Any:
        return dataclasses.replace(request, private_data=request.private_data + bytes(600))

    _rewrite_request(frame=frame)


def break_request_enhanced() -> None:
    """RFC 6581 §9 / RFC 5044 §7.1.2 rule 1: an enhanced Request (S=1) goes out without
    its IRD/ORD (PD_Length 4 short; every case fails for the Request)."""

    def fix(data: bytearray) -> None:
        if data[17] == 2 and data[16] & FrameFlags.ENHANCED and len(data) >= 24:
            length = int.from_bytes(data[18:20], "big") - ENHANCED_SIZE
            data[18:20] = length.to_bytes(2, "big")
            del data[20:24]

    _rewrite_request(fix)


def break_reply_reserved_checked() -> None:
    """RFC 5044 §7.1.1 Res: the reserved bits of a Reply are checked on reception (the
    Initiator closes on them as on an improperly formatted Reply)."""

    def change(data: Any) -> Any:
        if len(data) > 16 and data[16] & RESERVED_FLAGS and bytes(data[:16]) == REPLY_KEY:
            raise MpaError(MpaErrorCode.INVALID_FRAME, "reserved bits in a Reply (mutant)")
        return data

    _reply_octets(change)


def break_reply_r() -> None:
    """RFC 5044 §7.1.2 rule 3: a Reply with R=1 is taken as accepting (the Initiator enters
    Full Operation instead of exiting MPA)."""

    def change(request: Any, reply: Any) -> Any:
        return dataclasses.replace(reply, flags=reply.flags & ~FrameFlags.REJECT)

    _initiator_reads(change)


def break_request_as_reply() -> None:
    """RFC 5044 §7.1.2 rule 8: a Request received by the Initiator is taken as a Reply
    (Initiator/Initiator startups go unnoticed)."""

    def change(data: Any) -> Any:
        if len(data) >= 16 and bytes(data[:16]) == REQUEST_KEY:
            data = bytearray(data)
            data[:16] = REPLY_KEY
        return data

    _reply_octets(change)


def break_rev0_reply() -> None:
    """RFC 5044 Appendix C.2.2 and C.2.5: a Rev 0 Reply to a Rev 1/2 Request is taken as a
    Rev 1 Reply (the connection stays open, neither the close nor RDMAC mode: DDP and
    RDMAP version 1)."""

    def change(request: Any, reply: Any) -> Any:
        if request.revision >= 1 and reply.revision == 0:
            return dataclasses.replace(reply, revision=1)
        return reply

    _initiator_reads(change)


def break_rtr_offer() -> None:
    """RFC 6581 §9.2: the peer-to-peer Request (A=1) offers no RTR type (B, C, D clear)."""

    def change(ours: Any) -> Any:
        if RtrFlags.PEER_TO_PEER not in ours.flags:
            return ours
        return dataclasses.replace(ours, flags=RtrFlags.PEER_TO_PEER)

    _request_enhanced(change)


def break_rtr_choice() -> None:
    """RFC 6581 §9.2: the Initiator sends an RTR type it offered other than the one the
    Reply chose (a Read RTR for a Write one, a Write RTR for any other)."""

    def change(config: Any, outcome: Any) -> Any:
        params = outcome.params
        if params is None or params.rtr is None:
            return outcome
        other = RtrFlags.READ if params.rtr is RtrFlags.WRITE else RtrFlags.WRITE
        ord_ = max(params.ord, 1) if other is RtrFlags.READ else params.ord
        params = dataclasses.replace(params, rtr=other, ord=ord_)
        return dataclasses.replace(outcome, params=params)

    _initiator_outcome(change)


def break_first_octets() -> None:
    """RFC 5044 §7.1.2 rule 7: with markers off, the Initiator's first octets in Full
    Operation are four zero octets (a Marker nobody asked for) before its first FPDU."""
    connection = iwarp.mpa.connection.MpaConnection
    original = connection._enter_full_operation

    def enter(self: Any, params: Any) -> None:
        original(self, params)
        if self.role is Role.INITIATOR and not params.markers_send:
            self._out.append(bytes(4))

    _patch(connection, "_enter_full_operation", enter)


def _initiator_outcome(change: Any) -> None:
    """``complete_initiator``'s outcome (the negotiation after a valid Reply) replaced by
    ``change(config, outcome)``."""
    original = _get(iwarp.mpa.connection, "complete_initiator")

    def complete(config: Any, request: Any, reply: Any, **kwargs: Any) -> Any:
        return change(config, original(config, request, reply, **kwargs))

    _patch(iwarp.mpa.connection, "complete_initiator", complete)


def break_ird_term() -> None:
    """RFC 6581 §9.1: the Initiator's TERM for a Responder ORD above its IRD carries code 5
    (local catastrophic error) instead of 6."""

    def change(config: Any, outcome: Any) -> Any:
        error = outcome.negotiation_error
        if error is None or error.mpa_code is not MpaErrorCode.INSUFFICIENT_IRD:
            return outcome
        other = MpaError(MpaErrorCode.LOCAL_CATASTROPHIC, f"{error} (mutant: code 5)")
        return dataclasses.replace(outcome, negotiation_error=other)

    _initiator_outcome(change)


def break_rtr_unmatched() -> None:
    """RFC 6581 §9.2: when the Reply chooses no RTR type the Initiator can send, it sends
    its own first one anyway (a Write RTR) instead of TERM code 7."""

    def change(config: Any, outcome: Any) -> Any:
        error = outcome.negotiation_error
        if error is None or error.mpa_code is not MpaErrorCode.NO_MATCHING_RTR:
            return outcome
        rtr = next(
            t for t in (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND) if t in config.rtr_types
        )
        params = dataclasses.replace(
            outcome.params, peer_to_peer=True, rtr=rtr, ord=max(outcome.params.ord, 1)
        )
        return dataclasses.replace(outcome, params=params, negotiation_error=None)

    _initiator_outcome(change)


# --- draft-culley-iwarp-mpa-02: the receiver's marker check ----------------------------------


def break_marker_checked() -> None:
    """draft-culley-iwarp-mpa-02 §9 code 3: a received marker's FPDUPTR is never compared
    with the framing (the CRC still is, over the marker as received).

    Both paths (the C ``scan`` kernel and its pure-Python twin) check every marker of an
    FPDU after its CRC and before cutting any out, and stop at the first wrong one; the
    wrapper then writes the FPDUPTR they expected into that marker and decodes the FPDU again
    with the CRC (already checked) off, so the FPDU is delivered as if the marker were right.
    """
    _no_lanes()
    real = _get(iwarp.mpa.framing, "kernels")

    class Unchecked:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def scan(
            buffer: Any, start: int, end: int, markers: bool, crc: bool, phase: int, *rest: Any
        ) -> tuple[Any, ...]:
            records = bytearray()
            check, stop_at = crc, end
            while True:
                found, stop, phase, error, a, b, where = real.scan(
                    buffer, start, stop_at, markers, check, phase, *rest
                )
                records += found
                if error == SCAN_MARKER:
                    view = memoryview(buffer).cast("B")
                    view[where + 2 : where + 4] = b.to_bytes(2, "big")
                    lead = 4 if phase == 0 else 0
                    n = int.from_bytes(view[stop + lead : stop + lead + 2], "big")
                    wire = iwarp.mpa.framing.fpdu_wire_size(n, phase, markers=True)
                    start, check, stop_at = stop, False, stop + wire
                    continue
                if error or stop_at == end:
                    return bytes(records), stop, phase, error, a, b, where
                start, check, stop_at = stop, crc, end

    _patch(iwarp.mpa.framing, "kernels", Unchecked())


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
    "write-end": break_write_end,
    "read-source-to": break_read_source_to,
    "read-last": break_read_last,
    "invalidate-scope": break_invalidate_scope,
    "atomic-scope": break_atomic_scope,
    "crc-first-term": break_crc_first_term,
    "stag": break_stag,
    "read-bounds": break_read_bounds,
    "invalidate": break_invalidate,
    "invalidate-valid": break_invalidate_valid,
    "terminate-queue": break_terminate_queue,
    "atomic-alignment": break_atomic_alignment,
    "reply-key": break_reply_key,
    "reply-flags": break_reply_flags,
    "reply-rev": break_reply_rev,
    "reply-pd": break_reply_pd,
    "request-r": break_request_r,
    "reply-to-invalid": break_reply_to_invalid,
    "fin-startup": break_fin_startup,
    "rev0": break_rev0,
    "responder-first": break_responder_first,
    "enhanced-reply": break_enhanced_reply,
    "unenhanced-reply": break_unenhanced_reply,
    "rev1": break_rev1,
    "short-enhanced": break_short_enhanced,
    "ord": break_ord,
    "ird-ord-none": break_ird_ord_none,
    "peer-to-peer": break_peer_to_peer,
    "rtr-bits": break_rtr_bits,
    "write-rtr": break_write_rtr,
    "zero-read": break_zero_read,
    "zero-read-stag": break_zero_read_stag,
    "read-sink": break_read_sink,
    "read-order": break_read_order,
    "read-data": break_read_data,
    "ddp-reserved": break_ddp_reserved,
    "write-segments": break_write_segments,
    "write-placed": break_write_placed,
    "stag-scope": break_stag_scope,
    "pad-sent": break_pad_sent,
    "crc-sent": break_crc_sent,
    "pad-checked": break_pad_checked,
    "crc-always": break_crc_always,
    "markers": break_markers,
    "marker-ptr": break_marker_ptr,
    "atomic-response": break_atomic_response,
    "atomic-fetch-add": break_atomic_fetch_add,
    "atomic-cmp-swap": break_atomic_cmp_swap,
    "atomic-opcode": break_atomic_opcode,
    "atomic-stag": break_atomic_stag,
    "immediate-size": break_immediate_size,
    "mo": break_mo,
    "message-length": break_message_length,
    "tagged-opcode": break_tagged_opcode,
    "read-response": break_read_response,
    "read-stag": break_read_stag,
    "ird": break_ird,
    "crc-sent-marked": break_crc_sent_marked,
    "request-key": break_request_key,
    "request-flags": break_request_flags,
    "request-rev": break_request_rev,
    "request-pd": break_request_pd,
    "request-enhanced": break_request_enhanced,
    "reply-reserved-checked": break_reply_reserved_checked,
    "reply-r": break_reply_r,
    "request-as-reply": break_request_as_reply,
    "rev0-reply": break_rev0_reply,
    "rtr-offer": break_rtr_offer,
    "rtr-choice": break_rtr_choice,
    "ird-term": break_ird_term,
    "rtr-unmatched": break_rtr_unmatched,
    "first-octets": break_first_octets,
}

# draft-culley-02 only (proven in test_culley.py, in a culley run).
RULES["marker-checked"] = break_marker_checked


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


def read_write() -> None:
    """Every buffer registered for remote access is open to remote Read and Write (``iwarp
    listen --op write`` advertises a write-only buffer, ``--op read`` a read-only one)."""
    domain = iwarp.rdmap.memory.ProtectionDomain
    original = domain.register
    remote = Access.REMOTE_READ | Access.REMOTE_WRITE

    def register(self: Any, buffer: Any, access: Any = Access.LOCAL_WRITE, **kwargs: Any) -> Any:
        if access & remote:
            access |= remote
        return original(self, buffer, access, **kwargs)

    _patch(domain, "register", register)


VARIANTS = {
    "ddp-first": ddp_first,
    "read-write": read_write,
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


# --- a Responder that never sends an FPDU: no case may pass it on silence alone --------------


def mute_responder() -> None:
    """The Responder sends its Reply, then nothing at all (every FPDU it would send is
    dropped): it neither answers a valid carrier nor reports a broken one. The cases that
    accept silence must skip it, not pass it (they cannot show it would have answered)."""

    def mute(fpdu: bytearray) -> None:
        fpdu[:] = b""

    _rewrite_sent(mute)


SILENT = {"mute": mute_responder}


# --- a Responder without the startup timer RFC 5044 asks for (a SHOULD) ---------------------

#: Its "timer": longer than any run (the MPA core keeps a deadline, so it gets a far one).
NEVER = 1e6


def without_startup_timer() -> None:
    """RFC 5044 §7.1.2 rules 8 and 10 (SHOULD): the Responder puts no timeout on the
    Request it waits for, whole or in part (nor the Initiator on the Reply); a connection
    that never sends one stays open until the peer closes it. By default the startup-timer
    cases skip it, saying the close did not come within the wait; with ``--startup-wait``
    they fail it."""
    connection = iwarp.mpa.connection.MpaConnection
    original = connection.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.config = dataclasses.replace(
            self.config, request_timeout=NEVER, reply_timeout=NEVER, frame_timeout=NEVER
        )

    _patch(connection, "__init__", init)


#: Conforming stacks that leave out a SHOULD no MUST case covers.
SHOULD_SKIPPED = {"no-startup-timer": without_startup_timer}


# --- an Initiator that has nothing to say: conforming, every case must pass -----------------

#: Seconds the quiet Initiator keeps a connection open, at most.
QUIET_SECONDS = 3.0


def quiet_initiator() -> None:
    """``iwarp connect``'s application sends nothing: after the Reply the connection stays
    open and silent (the stack still answers what it receives, sends its RTR and its
    Terminates) until the peer closes it or QUIET_SECONDS pass. RFC 5044 §7.1.2 rule 3 and
    RFC 5040 leave the first ULP message to the application."""
    import asyncio
    import contextlib

    import iwarp.cli.connect

    async def traffic(qp: Any, *args: Any) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(qp.closed), QUIET_SECONDS)

    _patch(iwarp.cli.connect, "connect_traffic", traffic)


#: Conforming Initiators that differ from ``iwarp connect`` in what the RFCs leave open.
INITIATOR_VARIANTS = {"quiet": quiet_initiator}
SWITCHES = {**RULES, **VARIANTS, **OLDER, **INITIATOR_VARIANTS, **SILENT, **SHOULD_SKIPPED}

if __name__ == "__main__":
    SWITCHES[sys.argv[1]]()
    if sys.argv[2] == "listen":
        from iwarp.cli import main

        sys.exit(main(["listen", *sys.argv[3:]]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from initiator_loop import run  # type: ignore[import-not-found]

    run(sys.argv[3:])
