"""The proxy's core alone on a fixed transfer: CPU (or instructions) a MiB.

Run: python bench/proxy_core_bench.py [MIB] [--decode]

Feeds one ``ProxyConnection`` (no fault; ``--decode``: a record for every
FPDU, as ``iwarp proxy`` without ``--quiet`` makes) MIB MiB (default 32) of
RDMA Write FPDUs of 1448 octets (MTU 1500), CRCs on, in 64 KiB reads, and
prints the CPU time a MiB. For instruction counts, which a shared machine
does not disturb, run it under callgrind twice (MIB 0 and 16, say) and
subtract::

    valgrind --tool=callgrind python bench/proxy_core_bench.py 16

Numbers only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

from iwarp.ddp.wire import TaggedHeader
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import EnhancedData, FrameFlags, MpaFrame
from iwarp.proxy.core import ProxyConnection
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control

#: ULPDU octets of a 1448-octet FPDU: MPA's length field and CRC (6) and
#: the tagged DDP/RDMAP header (14) come off.
PAYLOAD = 1448 - 6 - 14
READ = 64 * 1024


def conversation() -> tuple[bytes, bytes, list[bytes]]:
    """The Request, the Reply, and 16 reads' worth of FPDUs cut into reads."""
    flags = FrameFlags(FrameFlags.CRC | FrameFlags.ENHANCED)
    pd = EnhancedData(16, 16).pack()
    request = MpaFrame(is_request=True, flags=flags, revision=2, private_data=pd).pack()
    reply = MpaFrame(is_request=False, flags=flags, revision=2, private_data=pd).pack()
    encoder = FpduEncoder(markers=False, crc=True)
    control = rdmap_control(RdmapOpcode.RDMA_WRITE)
    payload = bytes(range(256)) * (PAYLOAD // 256 + 1)
    fpdus = [
        encoder.encode_bytes(
            TaggedHeader(stag=0x100, to=i * PAYLOAD, rsvdulp=control).pack() + payload[:PAYLOAD]
        )
        for i in range(16 * READ // (PAYLOAD + 20))
    ]
    blob = b"".join(fpdus)
    return request, reply, [blob[i : i + READ] for i in range(0, len(blob), READ)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mib", nargs="?", type=int, default=32, help="MiB to feed (default 32)")
    parser.add_argument("--decode", action="store_true", help="a record for every FPDU")
    args = parser.parse_args()
    request, reply, reads = conversation()
    core = ProxyConnection(1, [], 0.0, fpdu_records=args.decode)
    core.receive("initiator", request, 0.0)
    core.receive("responder", reply, 0.0)
    core.take_output()
    total = 0
    started = time.process_time()
    while total < args.mib << 20:
        for data in reads:  # whole FPDUs in each pass: the passes join up
            core.receive("initiator", data, 0.0)
            core.take_output()
            core.take_records()
            total += len(data)
    used = time.process_time() - started
    mib = total / (1 << 20)
    fpdus = core.summary()["fpdus_to_responder"]
    per = used * 1000 / mib if mib else 0.0
    print(f"{mib:.1f} MiB, {fpdus} FPDUs: {used:.3f} s of CPU, {per:.3f} ms/MiB")


if __name__ == "__main__":
    main()
