"""Throughput of FPDU encode + decode, next to the cost floor of CRC + one copy.

Run: python bench/mpa_framing.py [--seconds S] [--batched]

For each ULPDU size, markers on/off and CRC on/off it frames a batch of
ULPDUs (FpduEncoder.encode, then one join, as one sendmsg would), cuts the
stream into 256 KiB reads (as a socket delivers it) and decodes it
(FpduDecoder.feed). The floor is one CRC32C pass plus one copy of the same
octets, measured in the same run.

``--batched`` measures the path the RDMA stack takes instead: a 1 MiB DDP
message (RDMA Write) segmented into ULPDUs of the given size and framed run
by run (FpduEncoder.encode_run), then decoded a read at a time into batches
(FpduDecoder.feed_batch, reads borrowed as the asyncio driver lends them;
with markers each read is first copied into the receive buffer, because
markers are cut out of it in place).
With the C accelerator this is where it works; IWARP_NO_ACCEL=1 gives the
pure-Python figure of the same path. Rates count ULPDU octets per second of
CPU time (``time.process_time``), which other load disturbs less than
wall-clock time.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from iwarp import _accel
from iwarp._crc32c import crc32c
from iwarp.ddp.segmentation import OutgoingMessage
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import MAX_ULPDU, mulpdu

# asyncio reads a socket 256 KiB at a time (selector transport max_size).
READ_SIZE = 256 * 1024


def rate(func: Callable[[], int], seconds: float) -> float:
    """Octets per CPU second that ``func`` (returning octets handled) sustains."""
    func()  # warm up
    done = 0
    # The CPU clock is read only at both ends: reading it costs tens of us
    # on a virtual machine, the wall clock decides when to stop.
    start = time.process_time()
    deadline = time.perf_counter() + seconds
    while True:
        done += func()
        if time.perf_counter() >= deadline:
            return done / (time.process_time() - start)


def batched_round(size: int, markers: bool, crc: bool) -> Callable[[], int]:
    """One 1 MiB RDMA Write message in ULPDUs of ``size`` octets, framed and decoded."""
    payload = memoryview(os.urandom(1 << 20))
    header = 14  # tagged DDP header

    def message() -> OutgoingMessage:
        return OutgoingMessage.tagged(payload, stag=1, to=0, rsvdulp=0x41, mulpdu=size)

    encoder = FpduEncoder(markers=markers, crc=crc)
    stream = b"".join(b"".join(encoder.encode_run(run)) for run in iter(message().next_run, None))
    reads = [bytearray(stream[pos : pos + READ_SIZE]) for pos in range(0, len(stream), READ_SIZE)]
    receive = bytearray(READ_SIZE)

    def run() -> int:
        encoder = FpduEncoder(markers=markers, crc=crc)
        frames = []
        for segments in iter(message().next_run, None):
            frames += encoder.encode_run(segments)
        decoder = FpduDecoder(markers=markers, crc=crc)
        got = 0
        for chunk in reads:
            if markers:
                # The decoder cuts markers out in place: it needs the read
                # fresh each time, as recv_into delivers it (that copy counts).
                receive[: len(chunk)] = chunk
                batch = decoder.feed_batch(memoryview(receive)[: len(chunk)], borrow=True)
            else:  # decoded where it lies
                batch = decoder.feed_batch(chunk, borrow=True)
            if batch.records is not None:
                got += sum(batch.records[1::2]) - header * (len(batch.records) // 2)
            got += sum(len(view) - header for view in batch.views)
        assert decoder.error is None and got == len(payload), (got, decoder.error)
        del frames
        return got

    return run


def codec_round(size: int, markers: bool, crc: bool, count: int) -> Callable[[], int]:
    ulpdus = [os.urandom(size) for _ in range(4)]
    # The receive side gets the stream in socket-sized reads; cutting it is
    # the kernel's copy, not the codec's, so it is done once, untimed.
    encoder = FpduEncoder(markers=markers, crc=crc)
    stream = b"".join(b"".join(encoder.encode(ulpdus[i & 3])) for i in range(count))
    reads = [stream[pos : pos + READ_SIZE] for pos in range(0, len(stream), READ_SIZE)]

    def run() -> int:
        encoder = FpduEncoder(markers=markers, crc=crc)
        pieces = []
        for i in range(count):
            pieces.extend(encoder.encode(ulpdus[i & 3]))
        b"".join(pieces)  # what one sendmsg/writelines copies into the kernel
        decoder = FpduDecoder(markers=markers, crc=crc)
        got = 0
        for chunk in reads:
            for ulpdu in decoder.feed(chunk):
                got += len(ulpdu)
        assert decoder.error is None and got == size * count
        return got

    return run


def floor_round(size: int, count: int) -> Callable[[], int]:
    block = os.urandom(size * count)

    def run() -> int:
        view = memoryview(block)
        for pos in range(0, len(block), size):
            crc32c(view[pos : pos + size])
        bytearray(block)  # one copy of every octet
        return len(block)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    parser.add_argument("--batched", action="store_true", help="the RDMA stack's batched path")
    args = parser.parse_args()
    print(f"path: {_accel.describe()}")
    if args.batched:
        print(f"{'ULPDU':>13} {'markers':>7} {'crc':>4} {'encode+decode':>14}  (1 MiB RDMA Write)")
        for label, size in (("1442", 1442), ("16 KiB", 16384), ("64768", MAX_ULPDU)):
            for markers in (False, True):
                for crc in (False, True):
                    codec = rate(batched_round(size, markers, crc), args.seconds)
                    print(
                        f"{label:>13} {'on' if markers else 'off':>7} {'on' if crc else 'off':>4} "
                        f"{codec / 1e6:>10.0f} MB/s"
                    )
        return
    sizes = [
        ("128", 128),
        ("MULPDU(1460)", mulpdu(1460, markers=True)),
        ("16 KiB", 16384),
        ("64768", MAX_ULPDU),
    ]
    print(
        f"{'ULPDU':>13} {'markers':>7} {'crc':>4} {'encode+decode':>14} {'floor':>10} {'ratio':>6}"
    )
    for label, size in sizes:
        count = max(8, (1 << 20) // size)
        floor = rate(floor_round(size, count), args.seconds)
        for markers in (False, True):
            for crc in (False, True):
                codec = rate(codec_round(size, markers, crc, count), args.seconds)
                print(
                    f"{label:>13} {'on' if markers else 'off':>7} {'on' if crc else 'off':>4} "
                    f"{codec / 1e6:>10.0f} MB/s {floor / 1e6:>6.0f} MB/s {floor / codec:>5.2f}x"
                )


if __name__ == "__main__":
    main()
