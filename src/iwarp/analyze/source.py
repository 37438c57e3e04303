"""Opening a capture: a file (plain, gzip, xz, or zstd where a reader is
installed), or ``-`` for standard input, which may be a live pipe
(``tcpdump -U -w - | iwarp decode -``).

Compression is recognised by the first octets, not the name, so a
``.pcap`` that is really gzip reads too, and standard input may be
compressed.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import sys
from typing import BinaryIO, Final

from iwarp.analyze.capture import CaptureError

__all__ = ["CountingReader", "capture_size", "open_capture"]

_GZIP: Final = b"\x1f\x8b"
_XZ: Final = b"\xfd7zXZ\x00"
_ZSTD: Final = b"\x28\xb5\x2f\xfd"


class CountingReader(io.RawIOBase):
    """A binary stream that counts the octets read from the underlying file
    (compressed octets for compressed captures), for progress reports."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        # read1: what is there now (a live pipe must not wait for a full buffer).
        read1 = getattr(self.raw, "read1", None)
        data = read1(len(buffer)) if read1 is not None else self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def open_capture(path: str, counter: list[CountingReader] | None = None) -> BinaryIO:
    """The capture's octets, decompressed. ``counter``, if given, receives
    the reader that counts the file octets read."""
    if path == "-":
        raw: BinaryIO = sys.stdin.buffer
    else:
        raw = open(path, "rb")  # noqa: SIM115 - handed to the caller
    counting = CountingReader(raw)
    if counter is not None:
        counter.append(counting)
    buffered = io.BufferedReader(counting, 1 << 20)
    head = buffered.peek(6)[:6]
    if head.startswith(_GZIP):
        return gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    if head.startswith(_XZ):
        return lzma.LZMAFile(buffered, "rb")  # type: ignore[return-value]
    if head.startswith(_ZSTD):
        return _zstd(buffered, path)
    return buffered


def _zstd(raw: BinaryIO, path: str) -> BinaryIO:
    """A Zstandard reader from a package already installed, if there is one."""
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            from compression import zstd  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raw.close()
            raise CaptureError(
                f"{path} is Zstandard-compressed and no Zstandard reader is installed; "
                "decompress it first (zstd -d) or pipe it: zstd -dc FILE | iwarp decode -"
            ) from None
        return zstd.ZstdFile(raw, "rb")  # type: ignore[no-any-return]
    reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return io.BufferedReader(reader, 1 << 20)  # type: ignore[arg-type,unused-ignore]


def capture_size(path: str) -> int | None:
    """Size of the capture file in octets, None for pipes and standard input."""
    if path == "-":
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    import stat

    return st.st_size if stat.S_ISREG(st.st_mode) else None
