"""Types of the optional C accelerator (src/iwarp/_speedups.c)."""

from iwarp._typing import Buffer

def crc32c(data: Buffer, value: int = 0, /) -> int: ...
def frame_run(
    out: Buffer | None,
    header: Buffer,
    payload: Buffer,
    start: int,
    stop: int,
    room: int,
    field_at: int,
    field_size: int,
    base: int,
    last_mask: int,
    markers: bool,
    crc: bool,
    phase: int,
    /,
) -> tuple[bytes | int, int]: ...
def scan(
    buffer: Buffer, start: int, end: int, markers: bool, crc: bool, phase: int, limit: int, /
) -> tuple[bytes, int, int, int, int, int, int]: ...
def segment_run(
    buffer: Buffer,
    records: Buffer,
    index: int,
    tagged: bool,
    control_mask: int,
    control: int,
    rdmap: int,
    key: int,
    msn: int,
    offset: int,
    /,
) -> tuple[int, int, bool]: ...
def place_run(
    buffer: Buffer, records: Buffer, index: int, count: int, header_size: int, target: Buffer, /
) -> None: ...
def describe() -> str: ...
