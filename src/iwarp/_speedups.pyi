"""Types of the optional C accelerator, ``iwarp._speedups``: every function
it exports, declared once, here, as a method of its family's protocol; the
module's names are bound from those at the end (tests/accel/test_stub.py
holds them to what the extension exports, and the pure-Python twins to
these names and signatures; mypy checks each twin module against its
family's protocol where :mod:`iwarp._accel` chooses). The protocol classes
exist for type checkers only: import them under ``TYPE_CHECKING``.

Four families, each chosen once, by :mod:`iwarp._accel`:

* FPDU kernels (src/iwarp/_speedups.c): ``crc32c``, ``describe``,
  ``frame_run``, ``scan``, ``segment_run``, ``place_run``; pure twin
  :mod:`iwarp._kernels`, whose docstrings are the contract of both.
* small-message lane (src/iwarp/_small.c): ``small_send``,
  ``small_receive``; pure twin :mod:`iwarp._small`.
* whole-message lanes (src/iwarp/_lanes.c): ``send_lane``, ``recv_lane``;
  no twin: without them the drivers read and write through the cores
  (:mod:`iwarp.rdma.lanes` documents both).
* capture decoding (src/iwarp/_decode.c): ``pcap_batch``, ``pcapng_batch``,
  ``tcp_packet``, ``fpdu_view``, ``fpdu_walk``, ``fpdu_count``, ``describe_table``,
  ``describe_ulpdu``, ``json_table``, ``fpdu_json``, ``new_record``; pure
  twin :mod:`iwarp._decode` (chosen by :mod:`iwarp.analyze.kernels`), whose
  docstrings are the contract of both.
"""

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from iwarp._typing import Buffer

_P = TypeVar("_P", bound=tuple[Any, ...])
_R = TypeVar("_R")

#: A frame the capture loops leave to Python: (linktype, time, data).
_Frame = tuple[int, float, bytes]
#: A marker taken apart: (offset in the FPDU, reserved, fpduptr, expected fpduptr).
_Marker = tuple[int, int, int, int]

class Kernels(Protocol):
    """The FPDU kernels (_speedups.c); twin :mod:`iwarp._kernels`."""

    def crc32c(self, data: Buffer, value: int = 0, /) -> int: ...
    def describe(self) -> str: ...
    def frame_run(
        self,
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
        self,
        buffer: Buffer,
        start: int,
        end: int,
        markers: bool,
        crc: bool,
        phase: int,
        limit: int,
        either: bool,
        /,
    ) -> tuple[bytes, int, int, int, int, int, int]: ...
    def segment_run(
        self,
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
        self,
        buffer: Buffer,
        records: Buffer,
        index: int,
        count: int,
        header_size: int,
        target: Buffer,
        /,
    ) -> None: ...

class SmallKernels(Protocol):
    """The small-message lane (_small.c); twin :mod:`iwarp._small`."""

    def small_send(
        self, header: Buffer, payload: Buffer, markers: bool, crc: bool, phase: int, /
    ) -> tuple[bytes, int]: ...
    def small_receive(
        self,
        data: Buffer,
        markers: bool,
        crc: bool,
        phase: int,
        limit: int,
        version: int,
        msn: int,
        send: int,
        send_se: int,
        head: Buffer,
        /,
    ) -> tuple[int, int, int] | None: ...

class LaneKernels(Protocol):
    """The whole-message lanes (_lanes.c); no twin."""

    def send_lane(
        self,
        fd: int | Buffer,
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
        skip: int,
        limit: int,
        wait_ms: int,
        watch_input: bool,
        contiguous: bool = False,
        /,
    ) -> tuple[int, int, int, int]: ...
    def recv_lane(
        self,
        fd: int,
        ring: Buffer,
        start: int,
        end: int,
        wait_ms: int,
        crc: bool,
        limit: int,
        version: int,
        tagged: tuple[int, int, int] | None,
        write_ctl: int,
        writes: dict[int, tuple[memoryview, int]],
        read_ctl: int,
        reads: tuple[tuple[int, memoryview, int, int], ...],
        send_ok: bool,
        send_ctl: int,
        send_se_ctl: int,
        msn: int,
        received: int,
        sends: Sequence[Any],
        markers: bool = False,
        phase: int = 0,
        either: bool = False,
        /,
    ) -> tuple[int, int, int, int, list[tuple[int, int, int, int, int]], int, int, int, int]: ...

class DecodeKernels(Protocol):
    """Capture decoding (_decode.c); twins: the pure paths of ``iwarp.analyze``."""

    def pcap_batch(
        self,
        buffer: bytes,
        pos: int,
        big_endian: bool,
        resolution: float,
        linktype: int,
        frame_cap: int,
        frames_before: int,
        cls: type[_P],
        cache: dict[int, str],
        /,
    ) -> tuple[list[_P | _Frame], int]: ...
    def pcapng_batch(
        self,
        buffer: bytes,
        pos: int,
        big_endian: bool,
        interfaces: list[tuple[int, float]],
        frame_cap: int,
        block_cap: int,
        frames_before: int,
        cls: type[_P],
        cache: dict[int, str],
        /,
    ) -> tuple[list[_P | _Frame], int]: ...
    def tcp_packet(
        self,
        frame: int,
        linktype: int,
        time: float,
        data: bytes,
        cls: type[_P],
        cache: dict[int, str],
        /,
    ) -> _P | None: ...
    def fpdu_view(
        self,
        chunk: bytearray,
        at: int,
        phase: int,
        markers: bool,
        either_fpduptr: bool,
        ddp: bool,
        /,
    ) -> (
        tuple[int, bytes, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None] | None
    ): ...
    def fpdu_walk(
        self,
        chunk: bytearray,
        at: int,
        phase: int,
        markers: bool,
        either_fpduptr: bool,
        ddp: bool,
        crc: bool,
        max_ulpdu: int,
        count: int,
        /,
    ) -> tuple[
        list[tuple[int, int, int, bytes, int, int, tuple[_Marker, ...], dict[str, object] | None]],
        int,
        int,
    ]: ...
    def fpdu_count(
        self,
        chunk: Buffer,
        at: int,
        phase: int,
        markers: bool,
        either_fpduptr: bool,
        ddp: bool,
        crc: bool,
        max_ulpdu: int,
        count: int,
        /,
    ) -> tuple[int, int, int]: ...
    def describe_table(
        self, names: tuple[str | None, ...], tagged: tuple[int, ...], queue: tuple[int, ...], /
    ) -> None: ...
    def describe_ulpdu(self, ulpdu: bytes, /) -> dict[str, object] | None: ...
    def json_table(
        self,
        fpdu: type[Any],
        marker: type[Any],
        ddp_keys: tuple[str, ...],
        rdmap_keys: tuple[str, ...],
        /,
    ) -> None: ...
    def fpdu_json(self, record: object, /) -> str | None: ...
    def new_record(self, cls: type[_R], slots: tuple[object, ...], /, *values: object) -> _R: ...

class Extension(Kernels, SmallKernels, LaneKernels, DecodeKernels, Protocol):
    """The whole extension: every family."""

# What the extension exports: each function once, as its family declares it.
_kernels: Kernels
_small: SmallKernels
_lanes: LaneKernels
_decode: DecodeKernels
crc32c = _kernels.crc32c
describe = _kernels.describe
frame_run = _kernels.frame_run
scan = _kernels.scan
segment_run = _kernels.segment_run
place_run = _kernels.place_run
small_send = _small.small_send
small_receive = _small.small_receive
send_lane = _lanes.send_lane
recv_lane = _lanes.recv_lane
pcap_batch = _decode.pcap_batch
pcapng_batch = _decode.pcapng_batch
tcp_packet = _decode.tcp_packet
fpdu_view = _decode.fpdu_view
fpdu_walk = _decode.fpdu_walk
fpdu_count = _decode.fpdu_count
describe_table = _decode.describe_table
describe_ulpdu = _decode.describe_ulpdu
json_table = _decode.json_table
fpdu_json = _decode.fpdu_json
new_record = _decode.new_record

# The one type it exports: the fast-path object of one queue pair (_fastpath.c),
# whose methods are those of its pure-Python twin.
from iwarp.rdma.fastpath import PyFastPath as _PyFastPath  # noqa: E402

FastPath = _PyFastPath

# The base of the queue pair (_qpbase.c): its per-message calls, the fast
# path's own while it runs, whose methods are those of its pure-Python twin.
from iwarp.rdma.qpbase import PyQueuePairBase as _PyQueuePairBase  # noqa: E402

QueuePairBase = _PyQueuePairBase
