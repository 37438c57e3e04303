"""``iwarp decode``'s output in every mode, as digests, to compare two trees or two paths.

    python bench/decode_golden.py write REF.json [--dir DIR] [--size 4M] [--src SRC]
    python bench/decode_golden.py check REF.json [--dir DIR] [--size 4M] [--src SRC]
                                 [--modes M,...] [--paths c,pure] [--decode-args ARGS]

A change to the analyzer's hot path must not change one octet of what it
prints. This makes a corpus of captures in ``--dir`` (kept there; made once,
deterministic): the three bench captures of ``bench/make_capture.py``
(``default``, ``marked``, ``ethernet``) at ``--size`` each, and the test
corpus's conversations (tests/analyze/analyze_traffic.py: markers each way
or not, CRC or not, FPDUs aligned, coalesced or cut anywhere, a lost
segment, a retransmitted and a reordered one). It then runs ``iwarp decode``
on each in every mode (the summary, ``--no-receiver``, ``-V``, ``--json``,
``-T text``, ``-T fields``, ``--csv``, ``--parquet``), with the C accelerator
and with ``IWARP_NO_ACCEL=1``, and digests standard output, the exit status
and every file written (the elapsed time and rate the closing line
states are masked). ``write`` stores the digests, ``check`` compares with
them and names each difference (exit 1 when there is one).

``--decode-args`` adds arguments to every run: ``check REF.json
--decode-args '--jobs 2'`` holds one capture split across two workers to a
reference written without. ``--src`` runs another tree's code (its ``src`` directory
on PYTHONPATH, this interpreter), e.g. to write the reference from the main
branch's tree and check a branch against it. Generated captures are never
committed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Modes: name, decode arguments; "{out}" is a fresh directory for tables.
MODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("summary", ()),
    ("no-receiver", ("--no-receiver",)),
    ("verbose", ("-V",)),
    ("json", ("--json",)),
    ("text", ("-T", "text")),
    (
        "fields",
        (
            *("-T", "fields", "-E", "header=y"),
            *("-e", "frame", "-e", "tcp.stream", "-e", "opcode", "-e", "stag"),
            *("-e", "msn", "-e", "crc_ok", "-e", "error"),
        ),
    ),
    ("csv", ("--csv", "{out}")),
    ("parquet", ("--parquet", "{out}")),
)
PATHS: tuple[tuple[str, dict[str, str]], ...] = (("c", {}), ("pure", {"IWARP_NO_ACCEL": "1"}))


def test_corpus(directory: Path) -> list[Path]:
    """The test corpus's conversations written as captures."""
    # The tests' own builders (a directory of test modules, not a package).
    sys.path.insert(0, str(ROOT / "tests" / "analyze"))
    t: Any = importlib.import_module("analyze_traffic")

    def lose(name: str, pieces: list[bytes]) -> list[bytes]:
        return pieces[:1] + pieces[2:] if name == "initiator" else pieces

    def again(name: str, pieces: list[bytes]) -> list[bytes]:
        return pieces[:3] + pieces[1:2] + pieces[3:] if name == "initiator" else pieces

    def swap(name: str, pieces: list[bytes]) -> list[bytes]:
        return [pieces[1], pieces[0], *pieces[2:]] if name == "responder" else pieces

    made = []
    cuts = {"aligned": t.aligned, "coalesced": t.coalesced(3), "cut": t.resegmented([7, 300, 1])}
    for i2r in (False, True):
        for r2i in (False, True):
            for crc in (True, False):
                for cut_name, cut in cuts.items():
                    cap, _ = t.standard(i2r, r2i, crc=crc).capture(cut)
                    name = f"corpus-m{int(i2r)}{int(r2i)}-crc{int(crc)}-{cut_name}.pcap"
                    made.append((name, cap.to_bytes()))
    for label, mutate in (("lost", lose), ("again", again), ("swapped", swap)):
        cap, _ = t.standard(True, False).capture(t.resegmented([50, 700]), mutate=mutate)
        made.append((f"corpus-{label}.pcap", cap.to_bytes()))
    paths = []
    for name, data in made:
        path = directory / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def bench_captures(directory: Path, size: str) -> list[Path]:
    """The bench captures (made once; kept in ``directory``)."""
    sys.path.insert(0, str(HERE))
    import make_capture as m

    paths = []
    for mix, concurrent in (("default", 16), ("marked", 40), ("ethernet", 40)):
        path = directory / f"bench-{mix}-{size}.pcap"
        if not path.exists():
            m.make_capture(str(path), m.parse_size(size), concurrent=concurrent, mix=mix)
        paths.append(path)
    return paths


#: The closing line's elapsed time and rate, text and JSON: the one thing
#: of the output that changes from run to run.
_CLOCK = re.compile(
    rb" in [0-9.]+ s, [0-9.]+ [KMG]?i?B/s\)|\"seconds\": [0-9.e+-]+, \"mib_per_s\": [0-9.e+-]+"
)


def unclocked(output: bytes) -> bytes:
    """``output`` with its elapsed time and rate masked."""
    return _CLOCK.sub(b"<clock>", output)


def digest_run(
    capture: Path, args: tuple[str, ...], env: dict[str, str], extra: tuple[str, ...] = ()
) -> dict[str, str]:
    """Digests of one decode: its output, exit status and the files it wrote."""
    with tempfile.TemporaryDirectory(prefix="iwarp-golden-") as out:
        argv = [a.replace("{out}", out) for a in args]
        # Run beside the capture and name it alone: its name appears in the
        # output and in the tables, the directory it is in does not matter.
        done = subprocess.run(
            [
                *(sys.executable, "-m", "iwarp", "decode", "--progress", "no"),
                *(*argv, *extra, capture.name),
            ],
            capture_output=True,
            env=env,
            cwd=capture.parent,
            check=False,
        )
        stdout = unclocked(done.stdout)
        result = {
            "stdout": hashlib.sha256(stdout).hexdigest(),
            "status": str(done.returncode),
        }
        for path in sorted(Path(out).iterdir()):
            result[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("write", "check"))
    parser.add_argument("reference", help="the digests (JSON) to write or check against")
    parser.add_argument("--dir", default=None, help="where the captures are made and kept")
    parser.add_argument("--size", default="4M", help="size of each bench capture (default 4M)")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the tree's src to run")
    parser.add_argument("--modes", default=",".join(m for m, _ in MODES), help="modes to run")
    parser.add_argument(
        "--paths", default=",".join(p for p, _ in PATHS), help="c, pure or both (default)"
    )
    parser.add_argument(
        "--decode-args",
        default="",
        metavar="ARGS",
        help="more decode arguments for every run, e.g. '--jobs 2' to check one capture "
        "split across two workers against a reference written without",
    )
    args = parser.parse_args()
    more = tuple(shlex.split(args.decode_args))
    directory = Path(args.dir or tempfile.mkdtemp(prefix="iwarp-golden-"))
    directory.mkdir(parents=True, exist_ok=True)
    captures = bench_captures(directory, args.size) + test_corpus(directory)
    wanted = set(args.modes.split(","))
    digests: dict[str, dict[str, str]] = {}
    paths = set(args.paths.split(","))
    for capture in captures:
        for path_name, extra in PATHS:
            if path_name not in paths:
                continue
            env = {**os.environ, "PYTHONPATH": str(Path(args.src).resolve()), **extra}
            for mode, mode_args in MODES:
                if mode in wanted:
                    key = f"{capture.name} {path_name} {mode}"
                    digests[key] = digest_run(capture, mode_args, env, more)
    if args.action == "write":
        Path(args.reference).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"{len(digests)} runs written to {args.reference}")
        return 0
    reference = json.loads(Path(args.reference).read_text())
    differ = [key for key, value in digests.items() if reference.get(key) != value]
    for key in differ:
        print(f"DIFFERS: {key}: {reference.get(key)} != {digests[key]}")
    print(f"{len(digests) - len(differ)} of {len(digests)} runs as the reference")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
