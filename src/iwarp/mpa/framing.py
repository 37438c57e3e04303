"""FPDU framing: ULPDUs to FPDUs and back (RFC 5044 §4-§6), sans-IO.

:class:`FpduEncoder` turns one ULPDU into one FPDU; :class:`FpduDecoder` takes
the in-order byte stream in chunks of any size and returns complete ULPDUs.
Both know where Markers go because they track the stream position relative
to the *marker origin*: the first octet of MPA full operation (RFC 5044
§4.3), given as any 32-bit value (a TCP sequence number, or 0).

Layout of one FPDU on the wire, with the positions the code below relies on::

    [marker]  ULPDU_Length  ULPDU ... [marker] ... ULPDU  PAD  [marker]  CRC
     ^ only when the FPDU starts on a marker position (FPDUPTR 0)

Everything is a multiple of 4 octets from the marker origin on (FPDUs are
padded to 4, markers are 4 long and 512 apart), so a marker never splits the
ULPDU_Length field, the PAD or the CRC: it sits before the length field
(FPDUPTR 0), inside the ULPDU, or right before the CRC. The CRC covers every
octet of the FPDU before the CRC field, markers included (RFC 5044 §6.1).
"""

from __future__ import annotations

from iwarp._crc32c import crc32c
from iwarp._typing import Buffer
from iwarp.errors import LocalProtocolError, MpaError, MpaErrorCode
from iwarp.mpa.wire import (
    CRC_FIELD,
    FPDUPTR_MASK,
    MARKER,
    MARKER_INTERVAL,
    MAX_ULPDU,
    ULPDU_LENGTH,
    ZERO_MARKER,
)

__all__ = ["FpduDecoder", "FpduEncoder", "fpdu_wire_size"]

_SEQ_MASK = 0xFFFFFFFF
_PHASE_MASK = MARKER_INTERVAL - 1
#: Content octets between two markers (512 on the wire minus the marker).
_MARKER_STRIDE = MARKER_INTERVAL - 4
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ZERO_CRC = bytes(4)
_pack_length = ULPDU_LENGTH.pack
_pack_crc = CRC_FIELD.pack
_pack_marker_into = MARKER.pack_into
_pack_crc_into = CRC_FIELD.pack_into
_unpack_length = ULPDU_LENGTH.unpack_from
_unpack_crc = CRC_FIELD.unpack_from
_unpack_marker = MARKER.unpack_from


def _check_position(origin: int, position: int | None) -> tuple[int, int]:
    for name, value in (("origin", origin), ("position", position)):
        if value is not None and not 0 <= value <= _SEQ_MASK:
            raise ValueError(f"{name} must be a 32-bit stream position, got {value}")
    if position is None:
        position = origin
    offset = (position - origin) & _SEQ_MASK
    if offset & 3:
        raise ValueError("FPDUs start at multiples of 4 octets from the marker origin")
    return position, offset & _PHASE_MASK


def fpdu_wire_size(ulpdu_length: int, phase: int, *, markers: bool) -> int:
    """Octets on the wire of an FPDU carrying ``ulpdu_length`` octets.

    ``phase`` is the FPDU's first octet relative to the marker origin, modulo
    512 (0: it starts on a marker position, so a leading marker is counted).
    Markers, PAD and CRC are included (RFC 5044 §4.1, §4.3).
    """
    content = 6 + ulpdu_length + (-(2 + ulpdu_length) & 3)
    if not markers:
        return content
    lead = 4 if phase == 0 else 0
    at = MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)
    if at >= content:
        return lead + content
    return lead + content + 4 * ((content - at + _MARKER_STRIDE - 1) // _MARKER_STRIDE)


class FpduEncoder:
    """Frames ULPDUs into FPDUs for one direction of one MPA connection.

    :param markers: insert a Marker at every 512th octet of the stream.
    :param crc: compute the CRC; otherwise the field is sent as zero.
    :param origin: stream position (e.g. TCP sequence number) of the first
        octet of MPA full operation; markers are placed relative to it.
    :param position: stream position of the next octet this encoder emits
        (defaults to ``origin``); ``position - origin`` must be a multiple of 4.
    :param max_ulpdu: refuse larger ULPDUs (the current MULPDU, at most 64768).
    """

    __slots__ = ("_phase", "_position", "crc", "markers", "max_ulpdu")

    def __init__(
        self,
        *,
        markers: bool = False,
        crc: bool = True,
        origin: int = 0,
        position: int | None = None,
        max_ulpdu: int = MAX_ULPDU,
    ) -> None:
        if not 0 <= max_ulpdu <= MAX_ULPDU:
            raise ValueError(f"max_ulpdu must be 0..{MAX_ULPDU}, got {max_ulpdu}")
        self.markers = markers
        self.crc = crc
        self.max_ulpdu = max_ulpdu
        self._position, self._phase = _check_position(origin, position)

    @property
    def position(self) -> int:
        """Stream position (mod 2**32) of the next octet to be sent."""
        return self._position

    def encode(self, ulpdu: Buffer) -> list[Buffer]:
        """Frame one ULPDU; returns the FPDU as a list of buffers, in order.

        The ULPDU itself is not copied: the list holds it (or memoryview
        slices of it), ready for ``writelines``/``sendmsg``. The caller must
        not modify ``ulpdu`` until those buffers are sent.

        :raises LocalProtocolError: the ULPDU is larger than ``max_ulpdu``.
        """
        n = len(ulpdu)
        if n > self.max_ulpdu:
            raise LocalProtocolError(
                f"ULPDU of {n} octets exceeds the maximum of {self.max_ulpdu} (MULPDU); "
                "DDP must segment it"
            )
        pad = -(2 + n) & 3
        content = 6 + n + pad  # length + ULPDU + PAD + CRC
        head = _pack_length(n)
        if not self.markers:
            self._position = (self._position + content) & _SEQ_MASK
            if not self.crc:
                return [head, ulpdu, _PADS[pad] + _ZERO_CRC]
            value = crc32c(ulpdu, crc32c(head))
            if pad:
                value = crc32c(_PADS[pad], value)
            return [head, ulpdu, _PADS[pad] + _pack_crc(value)]

        # With markers the FPDU is assembled in one buffer: one copy of the
        # ULPDU, then one CRC pass, is cheaper than many small pieces.
        phase = self._phase
        lead = 4 if phase == 0 else 0  # RFC 5044 §4.3: a marker between FPDUs
        # is 0 and belongs to (and is CRC'd with) the FPDU that follows it.
        at = MARKER_INTERVAL - ((phase + lead) & _PHASE_MASK)  # first inner marker
        count = (content - at + _MARKER_STRIDE - 1) // _MARKER_STRIDE if at < content else 0
        wire = lead + content + 4 * count
        frame = bytearray(wire)  # zeroed: PAD and marker Reserved fields stay 0
        header = lead
        frame[header : header + 2] = head
        src = 0  # next ULPDU octet to copy
        dst = header + 2
        marker = header + at  # wire index of the next inner marker
        for _ in range(count):
            if marker < dst + n - src:  # the marker splits the ULPDU
                take = marker - dst
                frame[dst:marker] = ulpdu[src : src + take]
                src += take
            _pack_marker_into(frame, marker, 0, marker - header)
            dst = marker + 4
            marker += MARKER_INTERVAL
        if src < n:
            frame[dst : dst + n - src] = ulpdu[src:]
        if self.crc:
            _pack_crc_into(frame, wire - 4, crc32c(memoryview(frame)[: wire - 4]))
        self._phase = (phase + wire) & _PHASE_MASK
        self._position = (self._position + wire) & _SEQ_MASK
        return [frame]

    def encode_bytes(self, ulpdu: Buffer) -> bytes:
        """Frame one ULPDU and return the FPDU as one ``bytes`` object."""
        return b"".join(self.encode(ulpdu))


class FpduDecoder:
    """Recovers ULPDUs from the in-order byte stream of one MPA half connection.

    Feed it the received octets in chunks of any size with :meth:`feed`; it
    returns the ULPDUs completed by each chunk, markers removed and checked,
    PAD dropped, CRC verified when on.

    After the first error (:attr:`error`) the half connection is dead: RFC
    5044 §8 says MPA "MUST NOT pass or deliver any additional FPDUs", so
    later octets are discarded and :meth:`feed` returns nothing.

    Memory stays bounded: an FPDU whose ULPDU_Length exceeds ``max_ulpdu`` is
    an error, not an allocation, and at most one incomplete FPDU is kept
    between calls.
    """

    __slots__ = ("_pending", "_phase", "_position", "crc", "error", "markers", "max_ulpdu")

    def __init__(
        self,
        *,
        markers: bool = False,
        crc: bool = True,
        origin: int = 0,
        position: int | None = None,
        max_ulpdu: int = MAX_ULPDU,
    ) -> None:
        if not 0 <= max_ulpdu <= 0xFFFF:
            raise ValueError(f"max_ulpdu must be 0..65535, got {max_ulpdu}")
        self.markers = markers
        self.crc = crc
        self.max_ulpdu = max_ulpdu
        self._position, self._phase = _check_position(origin, position)
        self._pending = bytearray()
        #: The first error seen, or None. Set once, never cleared.
        self.error: MpaError | None = None

    @property
    def position(self) -> int:
        """Stream position (mod 2**32) of the next octet expected."""
        return (self._position + len(self._pending)) & _SEQ_MASK

    @property
    def buffered(self) -> int:
        """Octets held back as the start of an incomplete FPDU."""
        return len(self._pending)

    def feed(self, data: Buffer) -> list[memoryview]:
        """Consume received octets; return the ULPDUs they complete.

        ULPDUs are read-only memoryviews. When ``data`` is ``bytes`` they may
        be views into it (no copy); other buffers are copied once first, so
        the caller may reuse its buffer after the call.

        Check :attr:`error` after each call: when set, the ULPDUs returned are
        those that preceded the error, and nothing after it is delivered.
        """
        out: list[memoryview] = []
        if self.error is not None or not data:
            return out
        chunk = data if isinstance(data, bytes) else bytes(data)
        view = memoryview(chunk)
        start = 0
        try:
            if self._pending:
                start = self._complete_pending(view, out)
                if self._pending:
                    return out
            end = len(view)
            size = self._fpdu_size
            parse = self._parse
            while start < end:
                wire = size(view, start, end)
                if not wire or start + wire > end:
                    break
                parse(view, start, wire, out)
                start += wire
            if start < end:
                self._pending += view[start:]
        except MpaError as exc:
            self.error = exc
            self._pending.clear()
        return out

    # -- internals ----------------------------------------------------------

    def _lead(self) -> int:
        """Octets of a leading marker before the next FPDU's length field."""
        return 4 if self.markers and self._phase == 0 else 0

    def _fpdu_size(self, view: memoryview, start: int, end: int) -> int:
        """Wire size of the FPDU at ``start``, or 0 if its header is not here."""
        lead = 4 if self.markers and self._phase == 0 else 0
        if end - start < lead + 2:
            return 0
        n: int = _unpack_length(view, start + lead)[0]
        if n > self.max_ulpdu:
            raise MpaError(
                MpaErrorCode.MARKER_MISMATCH,
                f"ULPDU_Length {n} exceeds the receive limit of {self.max_ulpdu} octets; "
                "the length field cannot delimit a valid FPDU",
                stream_offset=(self._position + lead) & _SEQ_MASK,
            )
        return fpdu_wire_size(n, self._phase, markers=self.markers)

    def _complete_pending(self, view: memoryview, out: list[memoryview]) -> int:
        """Top up the held-back FPDU from ``view``; returns octets consumed."""
        pending = self._pending
        used = 0
        header = self._lead() + 2
        if len(pending) < header:
            used = min(header - len(pending), len(view))
            pending += view[:used]
            if len(pending) < header:
                return used
        frame = memoryview(pending)
        try:
            wire = self._fpdu_size(frame, 0, len(pending))
        finally:
            frame.release()
        take = min(wire - len(pending), len(view) - used)
        pending += view[used : used + take]
        used += take
        if len(pending) == wire:
            whole = bytes(pending)
            pending.clear()
            self._parse(memoryview(whole), 0, wire, out)
        return used

    def _parse(self, view: memoryview, start: int, wire: int, out: list[memoryview]) -> None:
        """Check the complete FPDU ``view[start:start+wire]`` and append its ULPDU."""
        end = start + wire
        if self.crc:
            (received,) = _unpack_crc(view, end - 4)
            computed = crc32c(view[start : end - 4])
            if received != computed:
                raise MpaError(
                    MpaErrorCode.CRC_MISMATCH,
                    f"CRC field {received:#010x}, computed {computed:#010x}",
                    stream_offset=self._position,
                )
        if not self.markers:
            (n,) = _unpack_length(view, start)
            out.append(view[start + 2 : start + 2 + n])
        else:
            self._demarker(view, start, wire, out)
        self._phase = (self._phase + wire) & _PHASE_MASK
        self._position = (self._position + wire) & _SEQ_MASK

    def _demarker(self, view: memoryview, start: int, wire: int, out: list[memoryview]) -> None:
        """Check the FPDU's markers (RFC 5044 §4.3) and append its ULPDU."""
        phase = self._phase
        header = start
        if phase == 0:
            (_, ptr) = _unpack_marker(view, start)
            if ptr & FPDUPTR_MASK:
                self._marker_error(ptr, 0, 0)
            header += 4
            phase = 4
        (n,) = _unpack_length(view, header)
        data_start = header + 2
        data_end = data_start + n  # grows by 4 for every marker inside
        pieces: list[memoryview] = []
        marker = header + MARKER_INTERVAL - phase  # wire index of first inner marker
        limit = start + wire - 4  # markers stop before the CRC field
        cursor = data_start
        while marker + 4 <= limit:
            (_, ptr) = _unpack_marker(view, marker)
            if ptr & FPDUPTR_MASK != marker - header:
                self._marker_error(ptr, marker - header, marker - start)
            if marker < data_end:
                pieces.append(view[cursor:marker])
                cursor = marker + 4
                data_end += 4
            marker += MARKER_INTERVAL
        if not pieces:
            out.append(view[data_start:data_end])
        else:
            pieces.append(view[cursor:data_end])
            out.append(memoryview(b"".join(pieces)))

    def _marker_error(self, found: int, expected: int, where: int) -> None:
        raise MpaError(
            MpaErrorCode.MARKER_MISMATCH,
            f"marker FPDUPTR {found:#06x} disagrees with ULPDU_Length framing "
            f"(expected {expected:#06x})",
            stream_offset=(self._position + where) & _SEQ_MASK,
        )
