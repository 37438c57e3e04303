"""Instructions per 64-octet Send/Send round trip, counted by callgrind (repeatable).

Run: python bench/rtt_instructions.py [--rounds N] [--mode MODE ...]

Each mode runs both ends of a ping-pong in one process, so the count is the
code's and not the scheduler's (the kernel's work in system calls is not
counted: callgrind sees user space only):

* ``sync``: two iwarp.sync queue pairs over loopback TCP, both driven by
  this thread (``a.send``, ``b.send(b.receive())``, ``a.receive()``);
* ``sync-raw``: the same ping-pong on two plain TCP sockets (``sendall``,
  ``recv_into``);
* ``asyncio`` / ``uvloop``: an iwarp.asyncio client and an echo server
  (``await qp.send(await qp.receive())``) on one event loop;
* ``asyncio-raw`` / ``uvloop-raw``: bench/async_rtt.py's raw
  ``BufferedProtocol`` ping-pong on one loop;
* ``core``: the two sans-IO endpoints wired in memory (bench/sync_rtt.py's
  ``core_cost``: the protocol's share).

Each mode is run twice under ``valgrind --tool=callgrind`` (which must be
installed), with N/4 and N + N/4 round trips after 200 to warm up; the
difference of the two totals over N is the count per round trip (start-up,
imports and connection setup cancel out). Prints one line per mode.
Both runs use one string-hash seed (``--hash-seed``, 0 unless told):
with Python's random seed per process, dictionaries probe differently in
each run and the same code counted 65,600-68,700 per round trip in
``core`` mode; with one seed, runs agree to a few instructions, so two
trees can be compared exactly (a change that moves the count by less
than the spread between seeds is still only that seed's verdict).
``--top K`` also prints, per mode, where they go: the K functions with the
most instructions of their own per round trip and the total of each
object file (the interpreter, the accelerator, libc...), by the same
difference of the two runs (``callgrind_annotate``, installed with
valgrind).
``--run MODE --count K`` is what valgrind runs. Numbers only: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

_MODES = ("sync", "sync-raw", "asyncio", "asyncio-raw", "uvloop", "uvloop-raw", "core")
_SIZE = 64
_WARM = 200


def _sync(count: int) -> None:
    import iwarp.sync as rdma
    from iwarp.mpa.config import MpaConfig

    config = MpaConfig(crc=True)
    with rdma.listen(
        "127.0.0.1", 0, config=config, receive_buffers=4, receive_size=_SIZE
    ) as listener:
        accepted: list[rdma.QueuePair] = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept(timeout=30)))
        thread.start()  # only to accept: both ends then run in this thread
        a = rdma.connect(
            "127.0.0.1",
            listener.port,
            config=config,
            receive_buffers=4,
            receive_size=_SIZE,
            timeout=30,
        )
        thread.join(30)
    b = accepted[0]
    payload = os.urandom(_SIZE)
    for _ in range(_WARM + count):
        a.send(payload)
        b.send(b.receive())
        if a.receive() != payload:
            raise AssertionError("echo mismatch")
    a.close()
    b.close()


def _sync_raw(count: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        s1 = socket.create_connection(server.getsockname())
        s2, _ = server.accept()
    for sock in (s1, s2):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = os.urandom(_SIZE)
    view = memoryview(bytearray(_SIZE))

    def receive(sock: socket.socket) -> None:
        got = 0
        while got < _SIZE:
            n = sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("peer closed")
            got += n

    for _ in range(_WARM + count):
        s1.sendall(payload)
        receive(s2)
        s2.sendall(view)
        receive(s1)
    s1.close()
    s2.close()


async def _asyncio(count: int, raw: bool) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from async_rtt import _Echo, _Pinger

    from iwarp.asyncio.rdma import ConnectionTerminatedError, QueuePair, connect, serve

    loop = asyncio.get_running_loop()
    payload = os.urandom(_SIZE)
    if raw:
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, pinger = await loop.create_connection(lambda: _Pinger(_SIZE), "127.0.0.1", port)
        for _ in range(_WARM + count):
            pinger.back = loop.create_future()
            transport.write(payload)
            await pinger.back
        transport.close()
        server.close()
        return

    async def echo(qp: QueuePair) -> None:
        try:
            while True:
                await qp.send(await qp.receive())
        except ConnectionTerminatedError:
            pass

    rdma = await serve(echo, "127.0.0.1", 0, receive_buffers=4, receive_size=_SIZE)
    port = rdma.sockets[0].getsockname()[1]
    qp = await connect("127.0.0.1", port, receive_buffers=4, receive_size=_SIZE)
    for _ in range(_WARM + count):
        await qp.send(payload)
        if await qp.receive() != payload:
            raise AssertionError("echo mismatch")
    await qp.close()
    rdma.close()


def _core(count: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from sync_rtt import core_cost

    core_cost(count, _SIZE, True)


def run(mode: str, count: int) -> None:
    """``count`` round trips (after the warm-up) of ``mode``."""
    if mode == "sync":
        _sync(count)
    elif mode == "sync-raw":
        _sync_raw(count)
    elif mode == "core":
        _core(count)
    else:
        coro = _asyncio(count, mode.endswith("-raw"))
        if mode.startswith("uvloop"):
            import uvloop

            uvloop.run(coro)
        else:
            asyncio.run(coro)


def _instructions(mode: str, count: int, seed: int, out: str = os.devnull) -> int:
    """User-space instructions of one run of ``mode`` under callgrind, with
    string-hash seed ``seed`` (its profile written to ``out``)."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--run",
            mode,
            "--count",
            str(count),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        tail = "\n".join(done.stderr.splitlines()[-5:])
        raise SystemExit(f"{mode}: the run under valgrind failed:\n{tail}")
    return int(found.group(1))


#: A function's line in ``callgrind_annotate``'s table: count, share, file:function [object].
_ANNOTATED = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S.*?)(?: \[(.*)\])?$")


def _own_counts(path: str) -> Counter[tuple[str, str]]:
    """Instructions of each (function, object file) itself in a profile.
    Code inlined from a header is listed under the header's name and
    without its object file: it is counted with its function's."""
    table = subprocess.run(
        ["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", path],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    by_function: Counter[str] = Counter()
    objects: dict[str, str] = {}
    for line in table.splitlines():
        found = _ANNOTATED.match(line)
        if found is None or "PROGRAM TOTALS" in line:
            continue
        function = found.group(2).rsplit(":", 1)[-1]
        by_function[function] += int(found.group(1).replace(",", ""))
        if found.group(3):
            objects[function] = Path(found.group(3)).name
    counts: Counter[tuple[str, str]] = Counter()
    for function, count in by_function.items():
        counts[function, objects.get(function, "?")] += count
    return counts


def _print_top(low: str, high: str, rounds: int, top: int) -> None:
    """Per round trip: the ``top`` functions by their own instructions, then
    each object file's total (the difference of the two profiles)."""
    diff = _own_counts(high)
    diff.subtract(_own_counts(low))
    total = sum(diff.values()) or 1
    for (function, where), count in diff.most_common(top):
        print(f"    {count / rounds:>10,.0f} {count / total:6.1%}  {function} ({where})")
    objects: Counter[str] = Counter()
    for (_, where), count in diff.items():
        objects[where] += count
    for where, count in objects.most_common():
        if abs(count) / total >= 0.005:
            print(f"    {count / rounds:>10,.0f} {count / total:6.1%}  all of {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="round trips counted (2000)")
    parser.add_argument(
        "--mode", action="append", choices=_MODES, help="what to count (repeatable; all)"
    )
    parser.add_argument(
        "--top",
        type=int,
        default=0,
        metavar="K",
        help="also print the K functions with the most instructions, and each object file's",
    )
    parser.add_argument(
        "--hash-seed",
        type=int,
        default=0,
        metavar="S",
        help="PYTHONHASHSEED of the counted runs (0): one seed makes counts repeatable",
    )
    parser.add_argument("--run", choices=_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run(args.run, args.count)
        return
    if not 4 <= args.rounds <= 1_000_000:
        parser.error("--rounds must be 4 .. 1000000")
    if not 0 <= args.top <= 1000:
        parser.error("--top must be 0 .. 1000")
    if not 0 <= args.hash_seed <= 4294967295:
        parser.error("--hash-seed must be 0 .. 4294967295")
    modes = args.mode or list(_MODES)
    if any(m.startswith("uvloop") for m in modes):
        try:
            import uvloop  # noqa: F401
        except ImportError:
            if args.mode:
                parser.error("uvloop is not installed (pip install 'iwarp[uvloop]')")
            modes = [m for m in modes if not m.startswith("uvloop")]
    low = args.rounds // 4
    print(
        f"instructions per {_SIZE}-octet round trip"
        f" (callgrind, {args.rounds} round trips, PYTHONHASHSEED={args.hash_seed})"
    )
    with tempfile.TemporaryDirectory() as scratch:
        profiles = (os.path.join(scratch, "low"), os.path.join(scratch, "high"))
        outs = profiles if args.top else (os.devnull, os.devnull)
        for mode in modes:
            high = _instructions(mode, low + args.rounds, args.hash_seed, outs[1])
            per = (high - _instructions(mode, low, args.hash_seed, outs[0])) / args.rounds
            print(f"  {mode:<12} {per:>10,.0f}")
            if args.top:
                _print_top(*profiles, args.rounds, args.top)


if __name__ == "__main__":
    main()
