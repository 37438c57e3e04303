"""``iwarp demo``: frame and unframe messages with the MPA core, and say what happened."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import mulpdu


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="frame messages into MPA FPDUs and back, verifying every byte",
        description="Frame messages into MPA FPDUs (RFC 5044) with markers and CRC32C, "
        "cut the stream into odd-sized reads, decode it and verify every byte.",
    )
    parser.add_argument("--count", type=int, default=1000, help="messages to frame (default 1000)")
    parser.add_argument("--emss", type=int, default=1460, help="effective MSS (default 1460)")
    parser.add_argument("--no-markers", action="store_true", help="frame without markers")
    parser.add_argument("--no-crc", action="store_true", help="send zero CRCs")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.count < 1 or args.emss < 1:
        raise SystemExit("iwarp demo: --count and --emss must be positive")
    markers = not args.no_markers
    crc = not args.no_crc
    limit = mulpdu(args.emss, markers=markers)
    rng = os.urandom(limit * 4)
    messages = [rng[i % 997 : i % 997 + 1 + (i * 7919) % limit] for i in range(args.count)]
    start = time.perf_counter()
    encoder = FpduEncoder(markers=markers, crc=crc, max_ulpdu=limit)
    stream = b"".join(b"".join(encoder.encode(m)) for m in messages)
    decoder = FpduDecoder(markers=markers, crc=crc)
    received: list[bytes] = []
    reads = [1, 7, 333, 4096, 65536]
    pos = 0
    turn = 0
    while pos < len(stream):
        size = reads[turn % len(reads)]
        received.extend(bytes(u) for u in decoder.feed(stream[pos : pos + size]))
        pos += size
        turn += 1
    elapsed = time.perf_counter() - start
    octets = sum(len(m) for m in messages)
    verified = received == messages and decoder.error is None
    digest = hashlib.sha256(b"".join(received)).hexdigest()
    summary = {
        "type": "summary",
        "operation": "mpa_framing",
        "messages": len(received),
        "octets": octets,
        "wire_octets": len(stream),
        "mulpdu": limit,
        "markers": markers,
        "crc": crc,
        "verified": verified,
        "sha256": digest,
        "seconds": round(elapsed, 6),
        "error": None if decoder.error is None else str(decoder.error),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        overhead = len(stream) - octets
        print(f"MPA framing demo: EMSS {args.emss} -> MULPDU {limit} octets")
        print(f"  markers {'on' if markers else 'off'}, CRC32C {'on' if crc else 'off'}")
        print(f"  framed {len(messages)} messages, {octets} octets -> {len(stream)} on the wire")
        print(f"  (length fields, PAD, CRCs and markers: {overhead} octets)")
        print(f"  decoded from reads of {reads} octets: {len(received)} messages")
        print(f"  every byte verified: {'yes' if verified else 'NO'}  sha256 {digest[:16]}...")
        rate = 2 * octets / elapsed / 1e6 if elapsed else float("inf")
        print(f"  encode + decode: {elapsed * 1e3:.1f} ms ({rate:.0f} MB/s counting both)")
    return 0 if verified else 1
