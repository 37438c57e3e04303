"""Writing live TCP traffic as a pcapng file, without root or tcpdump.

A process that knows what it sent and received on its own connections
(``iwarp ... --pcap FILE``) records it here: each connection becomes a
:class:`TcpFlow` with its real addresses and ports, a synthesized
handshake, one segment per write or read at the real stream offsets (both
directions, acknowledging what the other side sent), real timestamps and a
FIN per direction at the end. The Ethernet/IP/TCP headers are those of
:func:`iwarp.analyze.synth.tcp_frame`. Blocks follow the pcapng
specification (draft-ietf-opsawg-pcapng): a Section Header, one Interface
Description (Ethernet, microsecond timestamps) and an Enhanced Packet Block
per frame, written as they happen so that memory stays bounded.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from ipaddress import ip_address
from typing import BinaryIO, Final

from iwarp._typing import Buffer
from iwarp.analyze.synth import ACK, FIN, PSH, SYN, Endpoint, tcp_frame
from iwarp.mpa.wire import (
    FRAME_HEADER,
    FRAME_HEADER_SIZE,
    REPLY_KEY,
    REQUEST_KEY,
    ULPDU_LENGTH,
    FrameFlags,
    fpdu_length,
)

__all__ = ["MAX_SEGMENT", "FpduAligner", "PcapngWriter", "TcpFlow"]

_BLOCK_SHB: Final = 0x0A0D0D0A
_BLOCK_IDB: Final = 0x00000001
_BLOCK_EPB: Final = 0x00000006
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
_LINKTYPE_ETHERNET: Final = 1
_OPT_END: Final = 0
_OPT_SHB_USERAPPL: Final = 4
_OPT_IF_NAME: Final = 2
#: Block type, total length; then each block's own fixed fields.
_BLOCK_HEAD: Final = struct.Struct("<II")
_SHB_BODY: Final = struct.Struct("<IHHq")
_IDB_BODY: Final = struct.Struct("<HHI")
_EPB_BODY: Final = struct.Struct("<IIIII")
_OPTION: Final = struct.Struct("<HH")
_U32: Final = struct.Struct("<I")
#: Most payload octets per synthesized segment (IPv4's total length is 16 bits).
MAX_SEGMENT: Final = 65000
_MASK32: Final = 0xFFFFFFFF
_KEYS: Final = (REQUEST_KEY, REPLY_KEY)


def _options(*options: tuple[int, bytes]) -> bytes:
    out = bytearray()
    for code, value in options:
        out += _OPTION.pack(code, len(value)) + value + bytes(-len(value) % 4)
    return bytes(out + _OPTION.pack(_OPT_END, 0))


def _block(kind: int, body: bytes) -> bytes:
    length = _BLOCK_HEAD.size + len(body) + _U32.size
    return _BLOCK_HEAD.pack(kind, length) + body + _U32.pack(length)


class PcapngWriter:
    """Appends Ethernet frames to a pcapng stream as they happen."""

    def __init__(
        self,
        out: BinaryIO,
        *,
        application: str = "iwarp",
        on_error: Callable[[OSError], None] | None = None,
    ) -> None:
        self._out: BinaryIO | None = out
        self._on_error = on_error
        #: The write that failed (the file is written no more), or None.
        self.error: OSError | None = None
        self.frames = 0
        shb = _SHB_BODY.pack(_BYTE_ORDER_MAGIC, 1, 0, -1)
        shb += _options((_OPT_SHB_USERAPPL, application.encode()))
        idb = _IDB_BODY.pack(_LINKTYPE_ETHERNET, 0, 0)
        idb += _options((_OPT_IF_NAME, b"iwarp (synthesized from the process's own sockets)"))
        self._write(_block(_BLOCK_SHB, shb) + _block(_BLOCK_IDB, idb))

    def frame(self, frame: bytes, timestamp: float | None = None, *, flush: bool = True) -> None:
        """One frame, stamped ``timestamp`` (``time.time()`` seconds) or now;
        written through at once, so the file can be read while it grows
        (``flush=False``: a frame more is coming at once, which flushes both)."""
        if self._out is None:
            return
        stamp = round((time.time() if timestamp is None else timestamp) * 1e6)
        size = len(frame)
        pad = -size % 4
        length = _BLOCK_HEAD.size + _EPB_BODY.size + size + pad + _U32.size
        # One join, not a concatenation per layer: the frame is copied once.
        block = b"".join(
            (
                _BLOCK_HEAD.pack(_BLOCK_EPB, length),
                _EPB_BODY.pack(0, stamp >> 32, stamp & _MASK32, size, size),
                frame,
                bytes(pad),
                _U32.pack(length),
            )
        )
        if self._write(block, flush=flush):
            self.frames += 1

    def _write(self, block: bytes, *, flush: bool = True) -> bool:
        """Write and flush ``block``; a failure (a full disk, an I/O error) is
        kept in :attr:`error`, ends the writing and goes to ``on_error``
        rather than to whoever recorded the frame (a protocol's callback,
        which must not fail for it); without ``on_error`` it is raised."""
        if self._out is None:
            return False
        try:
            self._out.write(block)
            if flush:
                self._out.flush()
        except OSError as exc:
            self._out = None
            self.error = exc
            if self._on_error is None:
                raise
            self._on_error(exc)
            return False
        return True

    def close(self) -> None:
        """Write no more frames (the caller closes the file)."""
        if self._out is not None:
            self._write(b"")
            self._out = None


class FpduAligner:
    """Cuts one direction of a stream into segments the way MPA senders
    align them (RFC 5044 §4.1: one FPDU per TCP segment), so decoders that
    expect aligned FPDUs (Wireshark's) read the capture: an MPA Request or
    Reply frame is one segment, then each FPDU. Without markers only: with
    markers, or data that is not MPA (VI/TCP, streaming lines), each piece
    becomes segments as it was written.
    """

    def __init__(self) -> None:
        self._pending = bytearray()
        self._framed = False
        #: Set when either side asked for markers (a frame's M bit).
        self.raw = False

    def feed(self, data: Buffer) -> list[bytes]:
        """The whole segments that ``data`` completes."""
        self._pending += data
        units: list[bytes] = []
        at = 0
        # Each unit is copied once, out of a view; the consumed octets are cut
        # off once at the end.
        with memoryview(self._pending) as view:
            while at < len(view):
                size = self._unit_size(view[at:])
                if size is None:
                    break
                size = min(size, MAX_SEGMENT)
                units.append(bytes(view[at : at + size]))
                at += size
        del self._pending[:at]
        return units

    def flush(self) -> list[bytes]:
        """What is left (the connection ended mid-unit)."""
        rest = bytes(self._pending)
        self._pending.clear()
        return [rest[i : i + MAX_SEGMENT] for i in range(0, len(rest), MAX_SEGMENT)]

    def _unit_size(self, data: memoryview) -> int | None:
        if self.raw:
            return len(data)
        if not self._framed:
            head = bytes(data[:16])
            if len(data) < FRAME_HEADER_SIZE:
                is_key_prefix = any(key.startswith(head) for key in _KEYS)
                return None if is_key_prefix else len(data)
            if head not in _KEYS:
                return len(data)  # streaming data before MPA
            pd_length: int = FRAME_HEADER.unpack_from(data)[3]
            size = FRAME_HEADER_SIZE + pd_length
            if len(data) < size:
                return None
            self._framed = True
            if data[16] & FrameFlags.MARKERS:
                self.raw = True  # the peer's direction has markers (TcpFlow tells it)
            return size
        if len(data) < ULPDU_LENGTH.size:
            return None
        ulpdu: int = ULPDU_LENGTH.unpack_from(data)[0]
        size = fpdu_length(ulpdu)
        return size if len(data) >= size else None


class TcpFlow:
    """One TCP connection seen from one of its ends.

    ``local`` and ``remote`` are socket addresses (host, port, ...);
    ``initiator`` says whether the local end connected. The handshake is
    written at once; :meth:`sent` and :meth:`received` add segments at the
    stream offsets that follow, :meth:`close` the FINs.
    """

    def __init__(
        self,
        writer: PcapngWriter,
        local: tuple[object, ...],
        remote: tuple[object, ...],
        *,
        initiator: bool,
    ) -> None:
        self._writer = writer
        #: (local, remote) as (host, port) pairs.
        self.key = ((local[0], local[1]), (remote[0], remote[1]))
        self._local = Endpoint(ip_address(str(local[0])), int(str(local[1])), b"\x02" + bytes(5))
        self._remote = Endpoint(
            ip_address(str(remote[0])), int(str(remote[1])), b"\x02" + bytes(4) + b"\x01"
        )
        # Sequence numbers: distinct, fixed initial ones per side (the real
        # ones are not visible to the process; offsets are what matter).
        self._next = {True: 0x10000000, False: 0x20000000}  # keyed by "local sends"
        self._closed = {True: False, False: False}
        self._aligners = {True: FpduAligner(), False: FpduAligner()}
        if initiator:
            self._segment(True, SYN, b"", ack=False)
            self._segment(False, SYN | ACK, b"")
            self._segment(True, ACK, b"")
        else:
            self._segment(False, SYN, b"", ack=False)
            self._segment(True, SYN | ACK, b"")
            self._segment(False, ACK, b"")

    def sent(self, data: Buffer) -> None:
        """Octets the local end wrote."""
        self._data(True, data)

    def received(self, data: Buffer) -> None:
        """Octets the local end read."""
        self._data(False, data)

    def close(self) -> None:
        """Both directions end (the capture's last word on this flow)."""
        for local_sends in (True, False):
            for unit in self._aligners[local_sends].flush():
                self._segment(local_sends, PSH | ACK, unit)
            if not self._closed[local_sends]:
                self._closed[local_sends] = True
                self._segment(local_sends, FIN | ACK, b"")

    def _data(self, local_sends: bool, data: Buffer) -> None:
        aligner = self._aligners[local_sends]
        units = aligner.feed(data)
        last = len(units) - 1
        for i, unit in enumerate(units):
            # One flush per read, not per FPDU (a system call each).
            self._segment(local_sends, PSH | ACK, unit, flush=i == last)
        if aligner.raw:
            self._aligners[not local_sends].raw = True

    def _segment(
        self,
        local_sends: bool,
        flags: int,
        payload: Buffer,
        *,
        ack: bool = True,
        flush: bool = True,
    ) -> None:
        src, dst = (self._local, self._remote) if local_sends else (self._remote, self._local)
        seq = self._next[local_sends]
        acknowledged = self._next[not local_sends] if ack else 0
        self._writer.frame(tcp_frame(src, dst, seq, acknowledged, flags, payload), flush=flush)
        length = len(memoryview(payload))
        self._next[local_sends] = (seq + length + (1 if flags & (SYN | FIN) else 0)) & _MASK32
