"""The parsers ``tools/fuzz`` drives, each as ``target(data: bytes) -> None``.

A target turns arbitrary octets into input for one parser (the first octets
choose options, the rest is the wire data, cut into chunks where the parser
is incremental) and lets only the errors the parser documents escape:
:class:`iwarp.errors.IwarpError` (every protocol error: MPA, DDP, RDMAP,
VI/TCP) and, for capture files, :class:`iwarp.analyze.capture.CaptureError`.
Anything else (IndexError, struct.error, MemoryError, an assertion) is a
finding. ``SEEDS`` gives each target valid inputs to start from.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

from iwarp.analyze.analyzer import Options, analyze_packets
from iwarp.analyze.capture import CaptureError, read_tcp_packets
from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.ddp.segmentation import tagged_segments, untagged_segments
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.handshake import build_request
from iwarp.mpa.ooo import OutOfOrderReceiver
from iwarp.mpa.wire import FrameFlags, MpaFrame
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.stream import RdmapStream
from iwarp.rdmap.work import RecvWR, Sge
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.wire import decode_segment

Target = Callable[[bytes], None]
#: What a parser may raise on bad input; anything else is a finding.
EXPECTED: tuple[type[BaseException], ...] = (IwarpError, CaptureError)


def _chunks(data: bytes, seed: int) -> list[bytes]:
    """Cut ``data`` into pieces whose sizes follow ``seed`` (1..256 octets)."""
    out, i, k = [], 0, seed | 1
    while i < len(data):
        k = (k * 1103515245 + 12345) & 0x7FFFFFFF
        step = 1 + (k >> 8) % (1 + (seed % 255))
        out.append(data[i : i + step])
        i += step
    return out


# -- MPA -----------------------------------------------------------------------------


def mpa_responder(data: bytes) -> None:
    """MpaConnection as Responder: a Request, then FPDUs (after accepting)."""
    if len(data) < 2:
        return
    options, cut = data[0], data[1]
    config = MpaConfig(revision=options % 3, markers=bool(options & 4), crc=bool(options & 8))
    conn = MpaConnection(Role.RESPONDER, config)
    for chunk in _chunks(data[2:], cut):
        for event in conn.receive_data(chunk, now=1.0):
            if isinstance(event, RequestReceived) and options & 16 == 0:
                conn.accept(b"ok")
        conn.data_to_send()
    conn.handle_timer(1e9)


def mpa_initiator(data: bytes) -> None:
    """MpaConnection as Initiator: a Reply, then FPDUs."""
    if len(data) < 2:
        return
    options, cut = data[0], data[1]
    config = MpaConfig(revision=options % 3, markers=bool(options & 4), crc=bool(options & 8))
    conn = MpaConnection(Role.INITIATOR, config, private_data=b"hi")
    conn.data_to_send()
    for chunk in _chunks(data[2:], cut):
        conn.receive_data(chunk, now=1.0)
        conn.data_to_send()
    conn.handle_timer(1e9)


def fpdu_decoder(data: bytes) -> None:
    if len(data) < 2:
        return
    options, cut = data[0], data[1]
    decoder = FpduDecoder(
        markers=bool(options & 1),
        crc=bool(options & 2),
        either_fpduptr=bool(options & 4),
        origin=0,
        position=(options >> 3) * 4,
        max_ulpdu=0xFFFF if options & 0x80 else 1500,
    )
    for chunk in _chunks(data[2:], cut):
        decoder.feed(chunk)


def ooo_receiver(data: bytes) -> None:
    """Pieces ``(BE16 offset, length octet, octets)`` in the order given."""
    if len(data) < 1:
        return
    options = data[0]
    receiver = OutOfOrderReceiver(
        start=0xFFFF_FF00 + options,  # the sequence space wraps on the way
        markers=bool(options & 1),
        crc=bool(options & 2),
        either_fpduptr=bool(options & 4),
        window=1 << 20,
    )
    i = 1
    while i + 3 <= len(data):
        offset, size = struct.unpack_from(">HB", data, i)
        i += 3
        piece = data[i : i + size]
        i += size
        receiver.receive((receiver.start + offset) & 0xFFFFFFFF, piece)


# -- DDP / RDMAP ---------------------------------------------------------------------


def rdmap_receive(data: bytes) -> None:
    """An RDMAP stream (Responder) fed ULPDUs ``(BE16 length, octets)``, with
    receive buffers posted and a region any peer may write and read."""
    if len(data) < 1:
        return
    registry = MemoryRegistry()
    pd = registry.alloc_pd()
    stream = RdmapStream(pd, initiator=bool(data[0] & 1), mulpdu=1024, ird=4, ord=4)
    for k in range(4):
        stream.post_recv(RecvWR(Sge(pd.register(bytearray(64 * (k + 1)))), wr_id=k))
    pd.register(
        bytearray(4096),
        Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ,
        address=0x1000,
        stag=0x100,
    )
    i = 1
    while i + 2 <= len(data):
        (size,) = struct.unpack_from(">H", data, i)
        i += 2
        stream.handle_ulpdu(data[i : i + size % 2048])
        i += size % 2048
        stream.ulpdus_to_send(limit=1 << 16)


def queue_pair(data: bytes) -> None:
    """A queue-pair endpoint (Responder, after MPA startup, with a receive
    pool and a region any peer may write and read) fed FPDUs framed around
    ULPDUs ``(BE16 length, octets)``: each FPDU whole (the small-message
    short ways) or in pieces (the full path), as the first octet says;
    after each, the endpoint answers with a Send of the ULPDU's first
    octets, which the peer takes (the queue pair's per-message calls,
    iwarp.rdma.qpbase: ``send_now``, ``receive_data``, ``take_message``,
    ``settled``, on the fast path and off it)."""
    if len(data) < 1:
        return
    options = data[0]
    config = MpaConfig(crc=bool(options & 1))
    registry = MemoryRegistry()
    peer = QueuePairEndpoint(Role.INITIATOR, registry.alloc_pd(), config)
    qp = QueuePairEndpoint(
        Role.RESPONDER, registry.alloc_pd(), config, receive_buffers=2, receive_size=64
    )
    qp.pd.register(
        bytearray(4096),
        Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ,
        address=0x1000,
        stag=0x100,
    )
    qp.receive_data(b"".join(bytes(c) for c in peer.data_to_send()), 0.0)
    peer.receive_data(b"".join(bytes(c) for c in qp.data_to_send()), 0.0)
    encoder = FpduEncoder(crc=config.crc)
    i = 1
    while i + 2 <= len(data):
        (size,) = struct.unpack_from(">H", data, i)
        i += 2
        fpdu = encoder.encode_bytes(data[i : i + size % 2048])
        i += size % 2048
        for piece in [fpdu] if options & 2 else _chunks(fpdu, size):
            qp.receive_data(piece, 0.0)
        qp.data_to_send()
        while qp.take_message() is not None:
            pass
        qp.settled()
        frame = qp.send_now(data[i - size % 2048 : i][: size % 96], solicited=bool(size & 1))
        answer = frame or b"".join(bytes(c) for c in qp.data_to_send())
        if answer:  # (b"" would be a FIN)
            peer.receive_data(answer, 0.0)
        while peer.take_message() is not None:
            pass


# -- VI/TCP --------------------------------------------------------------------------


def vitcp_segment(data: bytes) -> None:
    if len(data) < 1:
        return
    options = data[0]
    trailer = (None, True, False)[options % 3]
    includes = (None, True, False)[(options // 3) % 3]
    decode_segment(
        data[1:], trailer=trailer, length_includes_trailer=includes, complete=bool(options & 64)
    )


def vitcp_connection(data: bytes) -> None:
    if len(data) < 2:
        return
    conn = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    conn.tcp_accepted(0.0)
    for chunk in _chunks(data[2:], data[1]):
        conn.receive_data(chunk, 0.0)
        if data[0] & 1 and conn.take_events():
            try:
                conn.match()
                conn.accept()
            except IwarpError:
                pass
        conn.data_to_send()
    conn.handle_timer(1e9)


# -- captures ------------------------------------------------------------------------


def capture(data: bytes) -> None:
    """pcap / pcapng reader, TCP reassembly and the analyzer, records drained."""
    options = Options()
    reports = analyze_packets(read_tcp_packets(io.BytesIO(data)), options)
    for report in reports:
        for record in report.records:
            record.to_json()


# -- the accelerator's kernels, called directly ---------------------------------------

#: Integers at the edges of the kernels' C types (Py_ssize_t, uint32, uint64)
#: and of the protocol's fields.
_EDGES = (
    *(0, 1, 2, 3, 4, 6, 7, 8, 13, 14, 15, 17, 18, 19, 31, 32, 33, 508, 511, 512),
    *(0xFFFF, 0x10000, 2**31 - 1, 2**31, 2**32 - 4, 2**32 - 1, 2**32, 2**32 + 1),
    *(2**63 - 8, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1, -2, -(2**31), -(2**63)),
)
#: The largest head buffer small_receive is given (a 16-bit ULPDU_Length's
#: payload fits; more room changes nothing).
_HEAD_CAP = 1 << 16
#: What a kernel may raise for arguments it refuses.
_ARGUMENT_ERRORS = (ValueError, OverflowError, TypeError, BufferError)


class _Draw:
    """Arguments taken from the fuzzer's octets (zeros once they run out)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def octet(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def number(self, small: int) -> int:
        """Mostly ``0 .. small``, else an edge value or an edge plus a little."""
        kind = self.octet()
        if kind < 192:
            return (kind << 8 | self.octet()) % (max(small, 0) + 1)
        edge = _EDGES[self.octet() % len(_EDGES)]
        return edge + (kind & 7) - 4 if kind >= 240 else edge

    def octets(self, size: int) -> bytearray:
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return bytearray(chunk) + bytearray(size - len(chunk))

    def records(self, size: int) -> memoryview:
        """``size`` (offset, length) records of native uint32, at any alignment."""
        shift = self.octet() % 8
        holder = bytearray(shift)
        for _ in range(self.octet() % 6):
            at, n = self.number(size), self.number(size)
            holder += struct.pack("=II", at & 0xFFFFFFFF, n & 0xFFFFFFFF)
        holder += self.octets(self.octet() % 4)  # a torn last record
        return memoryview(holder)[shift:]

    def target(self, source: bytearray) -> memoryview | bytearray:
        """A fresh writable buffer, or a view overlapping ``source``."""
        size = self.number(64)
        if self.octet() & 1 and source:
            start = self.octet() % len(source)
            return memoryview(source)[start : start + max(size, 0)]
        return bytearray(max(0, min(size, 1 << 16)))


def _small_frame(draw: _Draw) -> tuple[bytearray, bool, bool, int]:
    """A one-segment Send's FPDU as the small-message lane frames it, with
    drawn fields, then octets changed or cut; and its markers, CRC and
    marker phase. Octets past the fuzzer's input draw zeros, which give the
    fields the lane takes."""
    from iwarp import _small

    header = struct.pack(
        ">BBIIII",
        draw.octet() if draw.octet() & 1 else 0x41,  # DDP: L, version 1
        (0x43, 0x45, draw.octet())[draw.octet() % 3],  # RDMAP: Send, Send with SE
        0,
        draw.number(2**32 - 1) & 0xFFFFFFFF if draw.octet() & 1 else 0,  # QN
        draw.number(3) & 0xFFFFFFFF,  # MSN
        draw.number(2**32 - 1) & 0xFFFFFFFF if draw.octet() & 1 else 0,  # MO
    )
    markers, crc, phase = bool(draw.octet() & 1), bool(draw.octet() & 1), 4 * draw.number(127)
    flips = [(draw.number(2000), draw.octet()) for _ in range(draw.octet() % 4)]
    cut = draw.octet() % 8 if draw.octet() & 1 else 0
    payload = draw.octets(draw.number(600) % 4096)
    frame = bytearray(_small.small_send(header, payload, markers, crc, phase)[0])
    for at, xor in flips:
        frame[at % len(frame)] ^= xor
    del frame[len(frame) - cut :]
    return frame, markers, crc, phase


def _kernel_call(module: Any, small: Any, data: bytes) -> tuple[object, ...]:
    """One kernel of ``module`` (or of the small-message lane's ``small``)
    on the arguments ``data`` gives (the same arguments, fresh buffers, on
    every call); its outcome and what it left in the buffers it may write."""
    draw = _Draw(data)
    which = draw.octet() % 7
    buffer = draw.octets(draw.number(300) % 4096)
    written: list[Any] = [buffer]
    try:
        if which == 0:
            result: object = module.crc32c(
                buffer[draw.number(16) % (len(buffer) + 1) :], draw.number(2**32 - 1)
            )
        elif which == 1:
            payload = draw.octets(draw.number(200) % 4096)
            header = draw.octets(draw.number(32) % 40)
            size = 1 + draw.number(7)
            start = draw.number(len(payload))
            out = None if draw.octet() & 1 else draw.target(payload)
            written += [payload, out]
            result = module.frame_run(
                out, header, payload, start, start + draw.number(len(payload) - start),
                1 + draw.number(1999), draw.number(len(header) - size), size,
                draw.number(2**64), draw.number(255), bool(draw.octet() & 1),
                bool(draw.octet() & 1), 4 * draw.number(127),
            )  # fmt: skip
        elif which == 2:
            result = module.scan(
                buffer, draw.number(64), draw.number(len(buffer)), bool(draw.octet() & 1),
                bool(draw.octet() & 1), 4 * draw.number(127), draw.number(0xFFFF),
                bool(draw.octet() & 1),
            )  # fmt: skip
        elif which == 3:
            result = module.segment_run(
                buffer, draw.records(len(buffer)), draw.number(8), bool(draw.octet() & 1),
                draw.number(255), draw.number(255), draw.number(255), draw.number(2**32),
                draw.number(2**32), draw.number(2**64),
            )  # fmt: skip
        elif which == 4:
            records = draw.records(len(buffer))
            target = draw.target(buffer)
            written.append(target)
            result = module.place_run(
                buffer, records, draw.number(3), draw.number(3), draw.number(20), target
            )
        elif which == 5:
            header = draw.octets(draw.number(32) % 40)
            result = small.small_send(
                header, buffer, bool(draw.octet() & 1), bool(draw.octet() & 1), 4 * draw.number(127)
            )
        else:
            # The call's own integers first: zeros (past the input) take the frame.
            limit, version = 0xFFFF - draw.number(0xFFFF), draw.number(3) if draw.octet() & 1 else 1
            msn, send, send_se = draw.number(3), draw.number(255), draw.number(255)
            send, send_se = (send, send_se) if draw.octet() & 1 else (0x43, 0x45)
            other = draw.octet() & 1  # else the connection's own framing, as the lane is called
            place = 1300 - draw.number(1300)
            overlap = draw.octet() & 1
            frame, markers, crc, phase = _small_frame(draw)
            if other:
                markers, crc, phase = not markers, not crc, 4 * draw.number(127)
            # An edge value drawn for ``place`` (1300 + 2**31...) would ask
            # for gigabytes, zeroed and copied per kernel: the slow inputs of
            # this target (about 17 s each under ASan). Past the largest
            # FPDU a head buffer's size changes nothing: capped there.
            head: memoryview | bytearray = bytearray(max(0, min(place, _HEAD_CAP)))
            if overlap:
                head = memoryview(frame)[place % len(frame) :] if frame else head
            written += [frame, head]
            result = small.small_receive(
                frame, markers, crc, phase, limit, version, msn, send, send_se, head
            )
    except ValueError as exc:
        outcome: tuple[object, ...] = ("ValueError", str(exc))
    except _ARGUMENT_ERRORS as exc:
        outcome = (type(exc).__name__,)
    else:
        outcome = ("ok", result)
    return (*outcome, [None if w is None else bytes(w) for w in written])


#: Link types the decode kernels know, and some they do not.
_LINKTYPES = (0, 1, 12, 101, 113, 228, 229, 276, 189, -1, 2**31 - 1)


class _Twins:
    """Calls a C decode kernel and, when it returns, its pure twin with the
    same arguments (a cache dict of its own): the same result, or an
    AssertionError."""

    def __init__(self, c: Any, pure: Any) -> None:
        self.c, self.pure = c, pure

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            result = getattr(self.c, name)(*args)
            twin_args = [{} if isinstance(a, dict) else a for a in args]
            try:
                twin = getattr(self.pure, name)(*twin_args)
            except Exception as exc:
                raise AssertionError(f"{name}: C returned, its pure twin raised {exc!r}") from exc
            if twin != result:
                raise AssertionError(f"{name}: C {result!r:.300} != pure {twin!r:.300}")
            return result

        return call


def _decode_kernel_call(data: bytes) -> None:
    """One decode kernel of the C module (src/iwarp/_decode.c) on hostile
    arguments drawn from ``data``: capture buffers of any octets, positions,
    caps and frame counts at the C types' edges, odd interface lists, FPDU
    offsets and phases out of range. It returns or refuses (a ValueError,
    OverflowError, TypeError); a batch never ends outside its buffer; and
    what it returns, its pure twin (iwarp._decode) returns too."""
    from iwarp.analyze import kernels as chosen
    from iwarp.analyze.capture import TcpPacket

    if chosen.kernels is chosen.pure:
        return  # the pure-Python path: no C kernels to hold to their twin
    packets: Any = _Twins(chosen.kernels, chosen.pure)
    fpdus: Any = packets
    draw = _Draw(data)
    which = draw.octet() % 7
    if which == 5:
        _fpdu_json_call(draw)
        return
    if which == 6:
        _new_record_call(draw)
        return
    buffer = bytes(draw.octets(draw.number(300) % 4096))
    linktype = _LINKTYPES[draw.octet() % len(_LINKTYPES)]
    cache: dict[int, str] = {}
    result: Any = None
    try:
        if which == 0:
            result = packets.pcap_batch(
                buffer, draw.number(64), bool(draw.octet() & 1), 10.0 ** -(draw.octet() % 10),
                linktype, draw.number(1 << 18), draw.number(2**40), TcpPacket, cache,
            )  # fmt: skip
        elif which == 1:
            interfaces: list[object] = [
                (_LINKTYPES[draw.octet() % len(_LINKTYPES)], 10.0 ** -(draw.octet() % 10))
                for _ in range(draw.octet() % 4)
            ]
            if draw.octet() & 1:
                interfaces.append(("not", "an interface")[: draw.octet() % 3])
            result = packets.pcapng_batch(
                buffer, draw.number(64), bool(draw.octet() & 1), interfaces,
                draw.number(1 << 18), draw.number(1 << 22), draw.number(2**40), TcpPacket, cache,
            )  # fmt: skip
        elif which == 2:
            packets.tcp_packet(draw.number(2**40), linktype, 0.0, buffer, TcpPacket, cache)
        elif which == 3:
            phase, markers = draw.number(511), bool(draw.octet() & 1)
            try:
                fpdus.fpdu_view(
                    bytearray(buffer), draw.number(len(buffer)), phase, markers,
                    bool(draw.octet() & 1), bool(draw.octet() & 1),
                )  # fmt: skip
            except RuntimeError:
                # A phase off the marker origin's 4-octet grid can put a
                # marker across the CRC: refused. The analyzer never asks
                # (its FPDU starts lie on that grid).
                if not (markers and phase & 3):
                    raise
            # The clean FPDUs in a row from the same place: each within the
            # buffer; counted (fpdu_count), the same number, stop and need.
            at = draw.number(len(buffer))
            walk = (
                bytearray(buffer), at, phase, markers, bool(draw.octet() & 1),
                bool(draw.octet() & 1), bool(draw.octet() & 1), draw.number(1 << 17),
                draw.number(1 << 13),
            )  # fmt: skip
            taken, stop, need = fpdus.fpdu_walk(*walk)
            if (
                not at <= stop <= len(buffer)
                or any(not (at <= t[0] and t[0] + t[1] <= stop) for t in taken)
                or (need and need <= len(buffer) - stop)
            ):
                raise AssertionError(f"a walk from {at} ended at {stop} of {len(buffer)}")
            if fpdus.fpdu_count(*walk) != (len(taken), stop, need):
                raise AssertionError(f"fpdu_count from {at} differs from fpdu_walk")
        else:
            fpdus.describe_ulpdu(buffer)
    except _ARGUMENT_ERRORS:
        return
    if result is not None:
        _, pos = result
        if not 0 <= pos <= len(buffer):
            raise AssertionError(f"a decode batch ended at {pos}, outside {len(buffer)} octets")


def _fpdu_json_call(draw: _Draw) -> None:
    """The C line of an FPDU record (fpdu_json) with values at the C types'
    edges, odd types and long marker lists: None or the pure-Python line."""
    from iwarp.analyze import kernels as chosen
    from iwarp.analyze import records
    from iwarp.analyze.records import FpduRecord, MarkerRecord

    kernel: Any = chosen.kernels
    odd: tuple[object, ...] = (None, True, "x", 'q"', "\u00e9", 1.5, b"", [], {"a": 1})

    def value() -> object:
        kind = draw.octet()
        return odd[kind % len(odd)] if kind >= 224 else draw.number(1 << 20)

    keys = (*records._DDP_KEYS, *records._RDMAP_KEYS, "other")
    make: Any = MarkerRecord
    markers = tuple(
        make(draw.number(1 << 20), draw.number(0xFFFF), draw.number(0xFFFF), value())
        for _ in range(draw.number(200) % 200)
    )
    fields: list[Any] = [value(), value() if draw.octet() % 4 == 3 else "initiator"]
    fields += [value() for _ in range(4)]
    fields += [list(markers) if draw.octet() % 8 == 7 else markers]
    fields += [bytes(draw.octets(draw.octet() % 8)), draw.number(1 << 32), draw.number(1 << 32)]
    fields += [(True, False, 1)[draw.octet() % 3]]
    fields += [{keys[draw.octet() % len(keys)]: value() for _ in range(draw.octet() % 24)}]
    record = FpduRecord(*fields)
    line = kernel.fpdu_json(record)
    if line is None:
        return  # declined: values json.dumps may refuse too (bytes), not the C line's
    expected = chosen.pure.fpdu_json(record)
    if line != expected:
        raise AssertionError(f"C line {line!r:.300} != Python line {expected!r:.300}")


def _new_record_call(draw: _Draw) -> None:
    """A record made in one call (new_record) from hostile classes (C types,
    a tuple subclass, a class with a C base, a class without slots),
    descriptor tuples of the wrong class, length or kind, and any values:
    refused with a TypeError, or an instance whose slots read back the values."""
    import dataclasses

    from iwarp.analyze import kernels as chosen
    from iwarp.analyze.capture import TcpPacket
    from iwarp.analyze.records import FpduRecord, MarkerRecord

    kernel: Any = chosen.kernels

    class FromDict(dict):  # type: ignore[type-arg]
        __slots__ = ("a",)

    class Open:
        pass

    classes: tuple[Any, ...] = (FpduRecord, MarkerRecord, int, TcpPacket, FromDict, Open, "x")
    cls = classes[draw.octet() % len(classes)]
    owner = classes[draw.octet() % 2]
    slots: list[Any] = [getattr(owner, f.name) for f in dataclasses.fields(owner)]
    slots = slots[: draw.octet() % (len(slots) + 2)]
    if draw.octet() % 4 == 3 and slots:
        slots[draw.octet() % len(slots)] = (vars(FromDict)["a"], "a", None, MarkerRecord.to_json)[
            draw.octet() % 4
        ]
    odd: tuple[object, ...] = (None, "x", b"", 1.5, (), [])
    values = [
        odd[kind % len(odd)] if (kind := draw.octet()) >= 200 else draw.number(1 << 20)
        for _ in range(max(0, len(slots) + draw.octet() % 3 - 1))
    ]
    try:
        made = kernel.new_record(cls, tuple(slots) if draw.octet() & 7 else slots, *values)
    except TypeError:
        return
    got = [descriptor.__get__(made, cls) for descriptor in slots]
    if type(made) is not cls or got != values:
        raise AssertionError(f"new_record made {made!r:.200} from {values!r:.200}")


class _Posted:
    """A posted receive buffer as the receive lane reads it (a ``view``)."""

    def __init__(self, view: object) -> None:
        self.view = view


def _recv_lane_call(data: bytes) -> None:
    """The receive lane's kernel (``recv_lane``, C only: it has no pure
    twin) on hostile arguments: a ring of FPDUs built from drawn DDP/RDMAP
    headers (Writes, Read Responses and Sends near their windows' edges,
    TOs and MOs near 2**32 and 2**64), octets changed, start, end, limits,
    control octets and MSNs at the C types' edges, windows of any size and
    base, read-only or released buffers, torn tuples. It returns or
    refuses; what it returns lies in the ring, and no octet outside a
    window changes (each window is a slice between guard octets)."""
    try:
        from iwarp import _speedups
    except ImportError:
        return
    lane: Any = _speedups  # recv_lane is C only (typed in iwarp.rdma.lanes)
    # Zeros (past the input) draw a ring of a whole RDMA Write, Read
    # Response and Send and a Write again, CRC off, into their windows:
    # what the lane places; other octets draw edges.
    draw = _Draw(data)
    guard = 8
    memory = bytearray((1 + draw.octet() % 4) * 1024 + 2 * guard)
    size = len(memory) - 2 * guard
    window = memoryview(memory)[guard : guard + size]
    base = draw.number(2**64 - 1)
    ulpdus = []
    for k in range(4 - draw.octet() % 5):
        kind = (k + draw.octet()) % 3
        n = 64 + draw.number(1500) % 2048
        control = draw.octet() if draw.octet() & 1 else (0xC1, 0x81, 0x41, 0x01)[draw.octet() % 4]
        if kind < 2:  # tagged: Write or Read Response
            ctl = (0x40 + kind, 0x41 - kind, draw.octet())[draw.octet() % 3]
            to = draw.number(2**64 - 1) if draw.octet() & 1 else base + draw.number(size)
            head = struct.pack(">BBIQ", control, ctl, draw.number(7) & 0xFFFFFFFF, to % 2**64)
        else:
            ctl = (0x43, 0x45, draw.octet())[draw.octet() % 3]
            head = struct.pack(
                ">BBIIII", control & 0x7F, ctl, 0, draw.number(2) & 0xFFFFFFFF,
                draw.number(3) & 0xFFFFFFFF, draw.number(size) & 0xFFFFFFFF,
            )  # fmt: skip
        ulpdus.append(head + draw.octets(n))
    crc = bool(draw.octet() & 1)
    markers, either = bool(draw.octet() & 1), bool(draw.octet() & 1)
    phase = 4 * (draw.number(127) % 128)  # the encoder's; the kernel's may be anything
    encoder = FpduEncoder(crc=crc, markers=markers, position=phase)
    ring = bytearray(b"".join(bytes(p) for u in ulpdus for p in encoder.encode(u)))
    for _ in range(draw.octet() % 3):
        if ring:
            ring[draw.number(len(ring)) % len(ring)] ^= draw.octet() | 1
    ring += draw.octets(draw.number(64) % 256)
    end = len(ring) - draw.number(len(ring))
    start = draw.number(end)
    writable: object = window if draw.octet() % 4 != 3 else bytes(size)
    writes: dict[object, object] = {}
    for stag in range(1 + draw.octet() % 4):
        writes[stag] = (writable, base) if draw.octet() % 5 != 4 else ("torn",)
    reads = tuple(
        (draw.number(7), window[: 64 + draw.number(size)], base, draw.number(size))
        for _ in range(1 + draw.octet() % 3)
    )
    sends = [
        _Posted(window if draw.octet() % 4 != 3 else b"read-only")
        for _ in range(1 + draw.octet() % 3)
    ]
    tagged = None
    if draw.octet() & 1:
        tagged = (draw.number(7), (base + draw.number(size)) % 2**64, draw.number(255))
    limit, version = 0xFFFF - draw.number(0xFFFF), 1 ^ draw.number(3)
    controls = [ctl ^ draw.number(255) for ctl in (0x40, 0x41, 0x43, 0x45)]
    before = bytes(memory)
    try:
        result = lane.recv_lane(
            -1, ring, start, end, 0, crc, limit, version, tagged, controls[0], writes,
            controls[1], reads, not draw.octet() & 1, controls[2], controls[3],
            draw.number(2**32 - 1), draw.number(size), sends, markers,
            phase if draw.octet() % 4 else draw.number(2**32), either,
        )  # fmt: skip
    except _ARGUMENT_ERRORS:
        result = None
    if memory[:guard] != before[:guard] or memory[guard + size :] != before[guard + size :]:
        raise AssertionError("recv_lane wrote outside its window")
    if result is not None:
        new_start, new_end, done, _, records, _, took, _, _ = result
        if not 0 <= new_start <= done <= new_end <= len(ring) or not 0 <= took <= new_start:
            raise AssertionError(f"recv_lane returned {result[:3]} for a {len(ring)}-octet ring")
        for record in records:
            if record[0] == 1 and record[3] > size:
                raise AssertionError(f"recv_lane placed {record} past a {size}-octet window")


def _send_lane_call(data: bytes) -> None:
    """The send lane's kernel (``send_lane``, C only) on drawn runs (header
    sizes and field places at the edges, segments of 1 octet to the largest,
    TO/MO bases near 2**64, markers at any phase, CRC on or off), both ways
    of building a batch (iovecs into the payload, or contiguous), copying
    into a buffer of any size from any ``skip`` within any ``limit``: it
    returns or refuses, and what it copied are exactly the octets the pure
    framing (``iwarp._kernels.frame_run``) gives there."""
    try:
        from iwarp import _speedups
    except ImportError:
        return
    from iwarp import _kernels

    lane: Any = _speedups
    draw = _Draw(data[::-1])  # (other draws than the kernels' from the same octets)
    payload = draw.octets(draw.number(3000) % 70_000)
    header = draw.octets(draw.number(32) % 40)
    size = 1 + draw.number(7)
    start = draw.number(len(payload))
    stop = start + draw.number(len(payload) - start)
    room = 1 + draw.number(0xFFFF)
    field_at, base, mask = draw.number(len(header) - size), draw.number(2**64), draw.number(255)
    markers, crc, phase = bool(draw.octet() & 1), bool(draw.octet() & 1), 4 * draw.number(127)
    skip, limit, contiguous = draw.number(200_000), draw.number(200_000), bool(draw.octet() & 1)
    out = bytearray(draw.number(200_000) % 300_000)
    run = (header, payload, start, stop, room, field_at, size, base, mask, markers, crc, phase)
    try:
        copied, total, _, _ = lane.send_lane(out, *run, skip, limit, 0, False, contiguous)
    except _ARGUMENT_ERRORS:
        return
    try:
        framed, _ = _kernels.frame_run(None, *run)
    except _ARGUMENT_ERRORS:
        return  # (frame_run bounds the run its own way)
    assert isinstance(framed, bytes)  # (no output buffer: a bytes object)
    if total != len(framed) or out[:copied] != framed[skip : skip + copied]:
        raise AssertionError("send_lane's octets are not frame_run's")


def kernels(data: bytes) -> None:
    """Each kernel with hostile arguments: offsets, lengths and indexes near
    2**32 and 2**64, misaligned and torn records, outputs overlapping
    inputs, tiny buffers, the small-message lane's frames with octets
    changed; the C module (iwarp._speedups) and its pure twins
    (iwarp._kernels, iwarp._small) must agree on the outcome (result or
    refusal) and on every octet of the buffers. A kernel may refuse arguments (ValueError,
    OverflowError, TypeError, BufferError); reading or writing outside a
    buffer is what the sanitizer build (.ci/sanitize) reports. The same
    octets then draw arguments for one of the analyzer's decode kernels
    (capture records, frames, FPDU views and walks, ULPDU descriptions,
    FPDU JSON lines), for the receive lane's kernel (``recv_lane``, C
    only: no octet outside its windows) and for the send lane's
    (``send_lane``: frame_run's octets)."""
    from iwarp import _kernels, _small

    pure = _kernel_call(_kernels, _small, data)
    try:
        from iwarp import _speedups
    except ImportError:
        return
    accelerated = _kernel_call(_speedups, _speedups, data)
    if accelerated != pure:
        raise AssertionError(f"C {accelerated!r:.300} != pure Python {pure!r:.300}")
    _decode_kernel_call(data)
    _recv_lane_call(data)
    _send_lane_call(data)


def _fast_path_run(kind: Any, settings: tuple[Any, ...], steps: list[Any]) -> list[object]:
    """What one fast-path object (``kind``, the C type or the pure twin)
    does with ``steps``: a sender and a receiver made with ``settings``."""
    from collections import deque

    from iwarp.rdma.events import MessageQueued

    log: list[object] = []
    pair = []
    for _ in range(2):
        messages: deque[bytes] = deque()
        try:
            pair.append((kind(*settings, messages, {}, MessageQueued), messages))
        except _ARGUMENT_ERRORS as exc:
            return [type(exc).__name__]
    (sender, _), (receiver, messages) = pair
    stream = bytearray()
    for step in steps:
        if step[0] == "send":
            frame = sender.send(step[1], step[2])
            log.append(frame)
            stream += frame or b""
            continue
        if step[0] == "raw":
            data = step[1]
        else:
            data = bytearray(stream[: step[1]])
            del stream[: step[1]]
            if data and step[2] >= 0:
                data[step[2] % len(data)] ^= step[3] | 1
        taken = receiver.receive(bytes(data))
        log.append((taken, receiver.octets, receiver.rest) if taken is not None else None)
        if taken is not None:
            stream[:0] = data[len(data) - receiver.rest :]
        log.append(list(messages))
        messages.clear()
    log.append((sender.state(), receiver.state()))
    return log


def fast_path(data: bytes) -> None:
    """The queue pair's fast path (iwarp.rdma.fastpath), the C object and
    its pure twin side by side: settings drawn from the input (markers,
    CRC, marker phase, MSNs near 2**32, ULPDU limit, pool buffer size, some
    out of range), then Sends framed and handed back to a receiver with
    octets changed or cut, and raw octets. Both must make the same FPDUs,
    events, messages, leftovers and state, or refuse the same settings."""
    draw = _Draw(data)
    flags = draw.octet()
    msn = draw.number(3) - 2 if flags & 4 else draw.number(2**32 + 1)
    phase = 4 * draw.number(127) if flags & 8 else draw.number(600)
    send = (1, 0x43, 0x45, msn, flags & 1, flags & 2, phase, draw.number(0x10000))
    receive = (1, 0x43, 0x45, msn, flags & 1, flags & 2, phase, draw.number(0x10000))
    settings = (send, (*receive, draw.number(2100)))
    steps: list[Any] = []
    for _ in range(16):
        if draw.at >= len(data):
            break
        op = draw.octet() % 3
        if op == 0:
            size = draw.number(1200) % 1300
            steps.append(("send", bytes([draw.octet()]) * size, draw.octet() & 1))
        elif op == 1:
            steps.append(("deliver", draw.number(3000), draw.number(3000) - 1, draw.octet()))
        else:
            steps.append(("raw", bytes(draw.octets(draw.octet() % 64))))
    from iwarp.rdma.fastpath import PyFastPath

    pure = _fast_path_run(PyFastPath, settings, steps)
    try:
        from iwarp._speedups import FastPath
    except ImportError:
        return
    accelerated = _fast_path_run(FastPath, settings, steps)
    if accelerated != pure:
        raise AssertionError(f"C {accelerated!r:.300} != pure Python {pure!r:.300}")


TARGETS: dict[str, Target] = {
    "mpa_responder": mpa_responder,
    "mpa_initiator": mpa_initiator,
    "fpdu_decoder": fpdu_decoder,
    "ooo_receiver": ooo_receiver,
    "rdmap_receive": rdmap_receive,
    "queue_pair": queue_pair,
    "vitcp_segment": vitcp_segment,
    "vitcp_connection": vitcp_connection,
    "capture": capture,
    "kernels": kernels,
    "fast_path": fast_path,
}


# -- seeds: valid inputs -------------------------------------------------------------


def _fpdus(markers: bool, crc: bool, ulpdus: list[bytes]) -> bytes:
    encoder = FpduEncoder(markers=markers, crc=crc)
    return b"".join(bytes(p) for u in ulpdus for p in encoder.encode(u))


def _ddp_ulpdus() -> list[bytes]:
    sends = [bytes(s) for s in untagged_segments(b"s" * 150, qn=0, msn=1, rsvdulp=0x40, mulpdu=100)]
    writes = [
        bytes(s)
        for s in tagged_segments(b"w" * 150, stag=0x100, to=0x1000, rsvdulp=0x40, mulpdu=100)
    ]
    read = bytes(
        next(
            iter(
                untagged_segments(
                    struct.pack(">IQIIQ", 0x200, 0, 16, 0x100, 0x1000),
                    qn=1,
                    msn=1,
                    rsvdulp=0x41,
                    mulpdu=100,
                )
            )
        )
    )
    return sends + writes + [read]


def _length_prefixed(ulpdus: list[bytes]) -> bytes:
    return b"".join(struct.pack(">H", len(u)) + u for u in ulpdus)


def _capture_seed() -> bytes:
    cap = TcpCapture()
    flags = FrameFlags.CRC | FrameFlags.MARKERS
    cap.send(Direction.C2S, MpaFrame(True, flags, 1, b"pd").pack())
    cap.send(Direction.S2C, MpaFrame(False, flags, 1).pack())
    cap.send(Direction.C2S, _fpdus(True, True, _ddp_ulpdus()[:3]))
    cap.close()
    return cap.to_bytes()


def seeds() -> dict[str, list[bytes]]:
    ulpdus = _ddp_ulpdus()
    # One-segment Sends (MSN 1, 2, 3: the second and third take the short
    # way), then an RDMA Write in two segments and a Read Request.
    small = [
        bytes(next(iter(untagged_segments(b"m" * 20, qn=0, msn=msn, rsvdulp=0x43, mulpdu=100))))
        for msn in (1, 2, 3)
    ] + ulpdus[2:]
    request = build_request(MpaConfig(markers=True), b"hello").pack()
    reply = MpaFrame(False, FrameFlags.CRC | FrameFlags.MARKERS, 1, b"ok").pack()
    stream = _fpdus(True, True, ulpdus)
    plain = _fpdus(False, True, ulpdus)
    ooo = b"\x03" + b"".join(
        struct.pack(">HB", i, len(stream[i : i + 200])) + stream[i : i + 200]
        for i in range(0, min(len(stream), 0xFF00), 200)
    )
    vi = VitcpConnection(VitcpConfig(), ViRole.ACTIVE)
    vi.connect(0.0)
    vi.tcp_established(0.0)
    vi_request = b"".join(bytes(part) for part in vi.data_to_send())
    assert vi_request
    return {
        "mpa_responder": [bytes([0x0E, 200]) + request + _fpdus(False, True, ulpdus)],
        "mpa_initiator": [bytes([0x0D, 180]) + reply + plain],
        "fpdu_decoder": [bytes([0x03, 230]) + stream, bytes([0x02, 5]) + plain],
        "ooo_receiver": [ooo],
        "rdmap_receive": [b"\x00" + _length_prefixed(ulpdus)],
        "queue_pair": [bytes([k]) + _length_prefixed(u) for k in (2, 3) for u in (small, ulpdus)],
        "vitcp_segment": [b"\x00" + vi_request],
        "vitcp_connection": [b"\x01\xc0" + vi_request],
        "capture": [_capture_seed()],
        "kernels": [bytes([k, 0, 200, 0]) + stream[:600] for k in range(7)],
        # Settings in range (markers, CRC as the first octet's bits; MSN 1,
        # phase 0, payload, ULPDU and buffer limits 200), then Sends (op 0:
        # size, fill, solicited) delivered (op 1: octets, flip at, xor)
        # whole, then one cut with an octet flipped, then the rest.
        "fast_path": [
            bytes([flags | 8, 0, 1, 0, 0, 0, 200, 0, 200, 0, 200])
            + bytes([0, 0, 40, 0x61, 1, 1, 0, 255, 0, 0, 0])
            + bytes([0, 0, 64, 0x62, 0, 0, 0, 30, 0x63, 0])
            + bytes([1, 0, 70, 0, 11, 0x20, 1, 0, 255, 0, 0, 0])
            for flags in range(4)
        ],
    }
