"""``iwarp decode`` on a large generated capture: time, MB/s and peak RSS.

    python bench/decode_bench.py --size 200M [--keep DIR] [-- DECODE ARGS...]

Makes the capture with ``bench/make_capture.py`` in a temporary directory
(deleted afterwards unless ``--keep``), then runs ``iwarp decode`` on it in
a fresh process, once per variant (default: the readable summary with the
receiver replay, the summary with ``--no-receiver``, and ``--json
--no-receiver``, every record as JSON). Reports wall and CPU seconds, MB/s of
capture on both clocks (CPU time is what the machine's other load does not
change), and the process's peak RSS. Checks that the decode found what the
generator sent (FPDU count and no errors).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _make_capture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_capture", HERE / "make_capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_capture", module)
    spec.loader.exec_module(module)
    return module


def decode(path: Path, extra: list[str]) -> dict[str, float]:
    """Run ``iwarp decode`` in a child, its output to a file; FPDUs and errors counted."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        status = subprocess.call(
            [sys.executable, "-m", "iwarp", "decode", "--progress", "no", str(path), *extra],
            stdout=out,
        )
        wall = time.perf_counter() - started
        out.seek(0)
        fpdus = errors = -1
        for line in out:
            if line.startswith('{"type": "capture_summary"'):
                summary = json.loads(line)
                fpdus, errors = summary["fpdus"], summary["errors"]
            elif (found := re.search(r", (\d+) FPDUs \(", line)) and line.startswith(str(path)):
                fpdus = int(found.group(1))
            elif line.endswith(" protocol errors\n"):
                errors = int(line.split()[0])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "status": status,
        "wall": wall,
        "cpu": cpu,
        "rss_mib": after.ru_maxrss / 1024,
        "fpdus": fpdus,
        "errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="200M", help="capture size (K, M, G; default 200M)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR", help="make the capture here and keep it")
    parser.add_argument("decode_args", nargs="*", help="one variant of extra decode arguments")
    args = parser.parse_args()
    maker = _make_capture_module()
    directory = args.keep or tempfile.mkdtemp(prefix="iwarp-bench-")
    path = Path(directory) / f"bench-{args.size}-{args.seed}.pcap"
    try:
        started = time.perf_counter()
        manifest = maker.make_capture(str(path), maker.parse_size(args.size), seed=args.seed)
        made = time.perf_counter() - started
        size = path.stat().st_size
        sent = sum(manifest["total"]["fpdus"].values())
        print(
            f"capture: {size / 1e6:.1f} MB, {manifest['frames']} frames, "
            f"{manifest['connections']} connections, {sent} FPDUs (made in {made:.1f} s)"
        )
        variants = (
            [args.decode_args]
            if args.decode_args
            else [[], ["--no-receiver"], ["--json", "--no-receiver"]]
        )
        for extra in variants:
            result = decode(path, extra)
            print(
                f"iwarp decode {' '.join(extra) or '(summary, receiver replay on)'}: "
                f"{result['wall']:.1f} s wall ({size / 1e6 / result['wall']:.1f} MB/s), "
                f"{result['cpu']:.1f} s CPU ({size / 1e6 / result['cpu']:.1f} MB/s), "
                f"peak RSS {result['rss_mib']:.0f} MiB; {result['fpdus']} FPDUs "
                f"({'as sent' if result['fpdus'] == sent else f'SENT {sent}'}), "
                f"{result['errors']} errors, exit {result['status']}"
            )
        print(json.dumps({"size": size, "os_load": os.getloadavg()}))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
            os.rmdir(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
