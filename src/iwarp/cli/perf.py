"""``iwarp perf``: bandwidth and latency of RDMA Write, Read and Send, as perftest measures.

``iwarp perf -s`` serves; ``iwarp perf HOST`` connects and runs one test
over the public asyncio verbs API (the same path an application takes):

* bandwidth (default): ``--iters`` messages of ``--size`` octets (or as many
  as ``--duration`` seconds allow), kept in flight; the time runs until the
  server confirms that every octet was placed. Printed like ib_write_bw:
  octets, iterations, peak and average MiB/s, messages per second.
* ``--latency``: one message at a time; min, median, p99 and max in us. A
  Send is answered by a Send of the same size; a Read completes when its
  data arrived; a Write is followed by a zero-length Send that the server
  answers (RDMA gives a Write's target no completion to answer from).
* ``--compare-raw``: the same octets (or the same ping-pong) over plain TCP
  between the same two ends, in the same run, and the ratio.
* ``--op atomic``: RFC 7306 FetchAdds of 1 on one 64-bit word of the
  server's (as perftest's ib_atomic_bw / ib_atomic_lat): 8 octets each,
  the rate in messages per second, or each one's round trip.

The client tells the server the test in its first Send (JSON); the server
needs no per-test flags, but asks for markers and CRC as its own
``--markers``/``--no-crc`` say (MPA: each receiver asks for markers in what
it receives), and the client refuses a mismatch with a clear message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iwarp import _accel
from iwarp.asyncio.rdma import Access, QueuePair, connect, serve
from iwarp.cli._args import port, size
from iwarp.cli._capture import add_pcap_option, captured
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap.memory import MemoryRegion
from iwarp.rdmap.work import (
    Completion,
    CompletionStatus,
    FetchAddWR,
    ReadWR,
    RecvWR,
    SendWR,
    Sge,
    WriteWR,
)

DEFAULT_PORT = 18515  # perftest's default port, so firewalls set up for it fit
#: Messages kept in flight in bandwidth mode (perftest's default tx depth is 128).
WINDOW = 64
#: Receive buffers the server keeps posted for Send bandwidth, at most, and
#: the memory they may take together (fewer buffers for large messages); it
#: returns credits as it reposts them (a Send needs a posted buffer, RFC 5040).
SEND_RECEIVES = 64
SEND_MEMORY = 256 << 20
#: Control messages (JSON) fit this.
CONTROL_SIZE = 4096
MIB = float(1 << 20)
#: Largest message size accepted (a test buffer is allocated on both ends).
MAX_SIZE = 1 << 30
#: What one RFC 7306 Atomic Operation moves: a 64-bit word.
ATOMIC_SIZE = 8


def parse_size(text: str) -> int:
    """``64``, ``4K``, ``1M``, ``1G`` (powers of 1024, the CLI's one size
    parser) to octets, 1 to 1G."""
    value = size(text)
    if not 0 < value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size must be 1 octet to 1G, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("must be 0 to 3600 seconds")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "perf",
        help="bandwidth and latency of RDMA Write/Read/Send (like perftest)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("host", nargs="?", help="server to test (omit with -s)")
    parser.add_argument("-s", "--server", action="store_true", help="serve tests")
    parser.add_argument("--bind", default="0.0.0.0", help="server: address to bind")
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"TCP port ({DEFAULT_PORT})"
    )
    parser.add_argument(
        "--count", type=_positive, help="server: exit after this many tests (default: serve on)"
    )
    parser.add_argument(
        "--op",
        choices=("write", "read", "send", "atomic"),
        default="write",
        help="what to measure: RDMA Write (default), RDMA Read, Send or FetchAdd (atomic: "
        "8 octets, --size is ignored)",
    )
    parser.add_argument(
        "--size", type=parse_size, default=1 << 16, help="message size, K/M/G suffixes (64K)"
    )
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--iters", type=_positive, help="messages (default 1000)")
    runs.add_argument("--duration", type=_seconds, help="seconds to run instead of --iters")
    parser.add_argument("--markers", action="store_true", help="ask for MPA markers")
    parser.add_argument("--no-crc", action="store_true", help="do not ask for MPA CRC")
    parser.add_argument("--latency", action="store_true", help="latency instead of bandwidth")
    parser.add_argument(
        "--compare-raw", action="store_true", help="also measure plain TCP, print the ratio"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    add_pcap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = MpaConfig(markers=args.markers, crc=not args.no_crc)
    try:
        if args.server:
            if args.host:
                print("iwarp perf: -s takes no HOST (use --bind)", file=sys.stderr)
                return 2
            asyncio.run(captured(args.pcap, _serve(args.bind, args.port, config, args.count)))
            return 0
        if not args.host:
            print("iwarp perf: give HOST, or -s to serve", file=sys.stderr)
            return 2
        result = asyncio.run(captured(args.pcap, _client(args, config)))
    except (OSError, IwarpError, PerfError) as exc:
        print(f"iwarp perf: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"iwarp perf: not enough memory for {args.size}-octet messages", file=sys.stderr)
        return 1
    _report(result, args.json)
    return 0


class PerfError(Exception):
    """The test could not run (mismatched options, a failed operation)."""


# --- the server -------------------------------------------------------------------

#: wr_id of the server's control receive buffer (data buffers count from 0).
CONTROL_ID = 1 << 40


async def _serve(bind: str, port: int, config: MpaConfig, count: int | None) -> None:
    done = asyncio.Event()
    served = 0

    async def handler(qp: QueuePair) -> None:
        nonlocal served
        try:
            await _serve_one(qp)
        except (IwarpError, PerfError, OSError, ValueError, KeyError) as exc:
            print(f"iwarp perf: test failed: {exc}", file=sys.stderr, flush=True)
        served += 1
        if count is not None and served >= count:
            done.set()

    server = await serve(handler, bind, port, config=config, setup=_post_control)
    where = server.sockets[0].getsockname()
    print(f"iwarp perf: serving on {where[0]}:{where[1]} ({_accel.describe()})", flush=True)
    async with server:
        await done.wait()


#: Each server queue pair's control receive buffer.
_CONTROL_BUFFERS: weakref.WeakKeyDictionary[QueuePair, MemoryRegion] = weakref.WeakKeyDictionary()


def _post_control(qp: QueuePair) -> None:
    """Before the first FPDU: the buffer the client's test description lands in."""
    region = qp.register(bytearray(CONTROL_SIZE), Access.LOCAL_WRITE)
    _CONTROL_BUFFERS[qp] = region
    qp.post_recv(RecvWR(Sge(region), wr_id=CONTROL_ID))


async def _receive(qp: QueuePair) -> Completion:
    done = await qp.recv_cq.wait()
    if done.status is not CompletionStatus.SUCCESS:
        raise PerfError(f"receive failed: {done.status.value}")
    return done


def _control(qp: QueuePair, done: Completion) -> dict[str, Any]:
    """Decode the control message of ``done`` and repost its buffer."""
    region = _CONTROL_BUFFERS[qp]
    data = bytes(region.view[: done.byte_len])
    qp.post_recv(RecvWR(Sge(region), wr_id=CONTROL_ID))
    message: dict[str, Any] = json.loads(data) if data else {}
    return message


async def _send_json(qp: QueuePair, message: dict[str, Any]) -> None:
    await qp.send(json.dumps(message).encode())


async def _serve_one(qp: QueuePair) -> None:
    first = await _receive(qp)
    if first.wr_id != CONTROL_ID:
        raise PerfError("the first message is not a test description")
    region = _CONTROL_BUFFERS[qp]
    test = json.loads(bytes(region.view[: first.byte_len]))
    op, size, latency = test["op"], int(test["size"]), bool(test["latency"])
    if not 0 < size <= MAX_SIZE or op not in ("write", "read", "send", "atomic"):
        raise PerfError(f"bad test {test!r}")
    receives = 2 if latency else max(2, min(SEND_RECEIVES, SEND_MEMORY // size))
    sinks = []
    stag = 0
    try:
        if op == "send":  # data Sends (and the last, solicited one) land in these
            for i in range(receives):
                sinks.append(qp.register(bytearray(size), Access.LOCAL_WRITE))
                qp.post_recv(RecvWR(Sge(sinks[i]), wr_id=i))
        else:
            access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
            if op == "atomic":
                access |= Access.REMOTE_ATOMIC
            stag = qp.register(bytearray(size), access).stag
            # control messages (and Write-latency pings) land in the control buffer
            qp.post_recv(RecvWR(Sge(region), wr_id=CONTROL_ID))
    except MemoryError:
        raise PerfError(f"cannot allocate buffers for {size}-octet messages") from None
    cpu = time.process_time()
    params = qp.params
    await _send_json(
        qp,
        {
            "stag": stag,
            "credits": receives,
            "markers": params.markers_receive,
            "crc": params.crc,
            "accel": _accel.describe(),
        },
    )
    if op == "send":
        answer = qp.register(bytearray(size), Access.LOCAL_WRITE) if latency else None
        credits = 0
        while True:
            done = await _receive(qp)
            qp.post_recv(RecvWR(Sge(sinks[done.wr_id]), wr_id=done.wr_id))
            if done.solicited:  # the client's last Send: every data Send is in
                break
            if answer is not None:
                await qp.send(Sge(answer))
                continue
            credits += 1
            if credits >= max(1, receives // 4):
                await _send_json(qp, {"credits": credits})
                credits = 0
    else:
        while True:
            done = await _receive(qp)
            if done.byte_len:  # "done"
                _control(qp, done)
                break
            _control(qp, done)  # a zero-length Send after a Write: answer it
            await qp.send(b"")
    cpu = time.process_time() - cpu
    if not test.get("raw"):
        await _send_json(qp, {"cpu": cpu})
    else:
        raw_port, raw = _raw_server(size, latency)
        await _send_json(qp, {"cpu": cpu, "raw_port": raw_port})
        await _send_json(qp, await raw)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(qp.closed), timeout=60)


# --- raw TCP, for --compare-raw ------------------------------------------------------


def _raw_server(size: int, latency: bool) -> tuple[int, asyncio.Future[dict[str, Any]]]:
    """A plain TCP receiver (or echo) in a thread; its port and its result."""
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[str, Any]] = loop.create_future()

    def work() -> None:
        try:
            result = _raw_serve(listener, size, latency)
        except OSError as exc:
            result = {"error": str(exc)}
        finally:
            listener.close()
        loop.call_soon_threadsafe(future.set_result, result)

    threading.Thread(target=work, daemon=True).start()
    return port, future


def _raw_serve(listener: socket.socket, size: int, latency: bool) -> dict[str, Any]:
    listener.settimeout(30)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(60)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(max(size, 1 << 16))
        view = memoryview(buf)
        total = int.from_bytes(_recv_exactly(conn, view, 8), "big")
        cpu = time.thread_time()
        if latency:
            for _ in range(total):
                _recv_exactly(conn, view, size)
                conn.sendall(view[:size])
        else:
            left = total
            while left:
                n = conn.recv_into(view[: min(len(view), left)])
                if not n:
                    raise OSError("raw TCP peer closed early")
                left -= n
            conn.sendall(b"k")
        return {"cpu": time.thread_time() - cpu}


def _recv_exactly(conn: socket.socket, view: memoryview, n: int) -> memoryview:
    got = 0
    while got < n:
        k = conn.recv_into(view[got:n])
        if not k:
            raise OSError("raw TCP peer closed early")
        got += k
    return view[:n]


def _raw_client(host: str, port: int, size: int, iters: int, latency: bool) -> dict[str, Any]:
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = bytes(size)
        cpu = time.process_time()
        if latency:
            sock.sendall(iters.to_bytes(8, "big"))
            buf = memoryview(bytearray(size))
            times = []
            for _ in range(iters):
                start = time.perf_counter()
                sock.sendall(data)
                _recv_exactly(sock, buf, size)
                times.append(time.perf_counter() - start)
            return {"times": times, "cpu": time.process_time() - cpu}
        sock.sendall((size * iters).to_bytes(8, "big"))
        start = time.perf_counter()
        for _ in range(iters):
            sock.sendall(data)
        if sock.recv(1) != b"k":
            raise OSError("raw TCP server did not confirm")
        elapsed = time.perf_counter() - start
        return {"elapsed": elapsed, "cpu": time.process_time() - cpu}


# --- the client -------------------------------------------------------------------------


@dataclass
class Result:
    """What one test measured."""

    op: str
    size: int
    iterations: int
    latency: bool
    markers: bool
    crc: bool
    accel: str
    peer_accel: str
    elapsed: float = 0.0
    peak: float = 0.0  # octets per second
    times: list[float] = field(default_factory=list)
    cpu_client: float = 0.0
    cpu_server: float = 0.0
    raw: dict[str, Any] | None = None


class _Progress:
    """Peak rate over quarter-second windows; one line a second on stderr."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.start = self.window = self.printed = time.perf_counter()
        self.window_count = 0
        self.peak = 0.0

    def tick(self, count: int) -> None:
        now = time.perf_counter()
        if now - self.window < 0.25:
            return
        rate = (count - self.window_count) * self.size / (now - self.window)
        self.peak = max(self.peak, rate)
        self.window, self.window_count = now, count
        if now - self.printed >= 1.0:
            self.printed = now
            print(
                f"  {now - self.start:6.1f} s  {count:>10} messages  {rate / MIB:10.1f} MiB/s",
                file=sys.stderr,
                flush=True,
            )


async def _client(args: argparse.Namespace, config: MpaConfig) -> Result:
    size: int = ATOMIC_SIZE if args.op == "atomic" else args.size
    iters: int = args.iters or (0 if args.duration else 1000)
    echo = args.op == "send" and args.latency
    qp = await connect(
        args.host,
        args.port,
        config=config,
        receive_buffers=8,
        receive_size=max(CONTROL_SIZE, size if echo else 0),
    )
    try:
        await _send_json(
            qp, {"op": args.op, "size": size, "latency": args.latency, "raw": args.compare_raw}
        )
        answer = json.loads(await qp.receive())
        params = qp.params
        if bool(answer["markers"]) != args.markers:
            raise PerfError(
                "markers differ: give the server the same --markers setting "
                "(an MPA receiver asks for markers in what it receives)"
            )
        result = Result(
            args.op,
            size,
            iters,
            args.latency,
            args.markers,
            params.crc,
            _accel.describe(),
            str(answer.get("accel", "?")),
        )
        region = qp.register(bytearray(size), Access.LOCAL_WRITE)
        deadline = None if args.duration is None else time.perf_counter() + args.duration
        cpu = time.process_time()
        stag = int(answer["stag"])
        if args.latency:
            await _latency(qp, args.op, region, stag, iters, deadline, result)
            report = json.loads(await qp.receive())
        else:
            report = await _bandwidth(
                qp, args.op, region, stag, iters, deadline, result, int(answer["credits"])
            )
        result.cpu_client = time.process_time() - cpu
        result.cpu_server = float(report["cpu"])
        if args.compare_raw:
            raw = await asyncio.to_thread(
                _raw_client,
                args.host,
                int(report["raw_port"]),
                size,
                result.iterations,
                args.latency,
            )
            server_side = json.loads(await qp.receive())
            if "error" in server_side:
                raise PerfError(f"raw TCP on the server: {server_side['error']}")
            raw["cpu_server"] = server_side.get("cpu", 0.0)
            result.raw = raw
    finally:
        await qp.close()
    return result


async def _bandwidth(
    qp: QueuePair,
    op: str,
    region: MemoryRegion,
    stag: int,
    iters: int,
    deadline: float | None,
    result: Result,
    receives: int,
) -> dict[str, Any]:
    """Keep WINDOW messages in flight; returns the server's report.

    ``receives``: the buffers the server posted for Sends (the first credits).
    """
    posted = completed = 0
    credits = receives if op == "send" else 1 << 62
    window = min(WINDOW, max(1, qp.params.ord)) if op == "read" else WINDOW
    more_credits = asyncio.Event()
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def read_control() -> None:
        nonlocal credits
        with contextlib.suppress(IwarpError):
            while True:
                message = json.loads(await qp.receive())
                if "credits" in message:
                    credits += int(message["credits"])
                    more_credits.set()
                else:
                    messages.put_nowait(message)

    reader = asyncio.create_task(read_control())
    progress = _Progress(result.size)
    clock = time.perf_counter
    sge = Sge(region)
    start = clock()
    try:
        while True:
            while posted - completed < window and credits > 0:
                if (posted >= iters) if deadline is None else (clock() >= deadline):
                    break
                if op == "write":
                    qp.post_send(WriteWR(sge, stag, 0, wr_id=posted))
                elif op == "read":
                    qp.post_send(ReadWR(sge, stag, 0, wr_id=posted))
                elif op == "atomic":
                    qp.post_send(FetchAddWR(stag, 0, 1, wr_id=posted))
                else:
                    qp.post_send(SendWR(sge, wr_id=posted))
                    credits -= 1
                posted += 1
            if completed == posted:
                if credits > 0:
                    break  # nothing in flight and nothing more to post
                more_credits.clear()
                await more_credits.wait()
                continue
            done = await qp.send_cq.wait()
            if done.status is not CompletionStatus.SUCCESS:
                raise PerfError(f"{op} failed: {done.status.value}")
            completed += 1
            progress.tick(completed)
        end = clock()
        if op == "send":
            while credits <= 0:
                more_credits.clear()
                await more_credits.wait()
            await qp.send(b"", solicited=True)  # lands after every data Send
        else:
            await _send_json(qp, {"done": True})  # a Send arrives after the Writes
        report = await messages.get()
        if op != "read":
            end = clock()  # the server saw every octet placed
    finally:
        reader.cancel()
    result.iterations = completed
    result.elapsed = end - start
    result.peak = progress.peak
    return report


async def _latency(
    qp: QueuePair,
    op: str,
    region: MemoryRegion,
    stag: int,
    iters: int,
    deadline: float | None,
    result: Result,
) -> None:
    times: list[float] = []
    clock = time.perf_counter
    sge = Sge(region)
    progress = _Progress(result.size)
    while (len(times) < iters) if deadline is None else (clock() < deadline):
        start = clock()
        if op == "read":
            await qp.rdma_read(sge, stag, 0)
        elif op == "atomic":
            await qp.fetch_add(stag, 0, 1)
        elif op == "send":
            await qp.send(sge)
            await qp.receive()
        else:
            await qp.rdma_write(sge, stag, 0)
            await qp.send(b"")
            await qp.receive()
        times.append(clock() - start)
        progress.tick(len(times))
    if op == "send":
        await qp.send(b"", solicited=True)
    else:
        await _send_json(qp, {"done": True})
    result.times = times
    result.iterations = len(times)
    result.elapsed = sum(times)


# --- output -------------------------------------------------------------------------------


def summary(result: Result) -> dict[str, Any]:
    """The result as a JSON-ready dict (what ``--json`` prints)."""
    mib = result.size * result.iterations / (1 << 20)
    out: dict[str, Any] = {
        "op": result.op,
        "bytes": result.size,
        "iterations": result.iterations,
        "markers": result.markers,
        "crc": result.crc,
        "accel": result.accel,
        "peer_accel": result.peer_accel,
    }
    if result.latency:
        times = sorted(result.times)
        out.update(_latency_stats(times))
    else:
        average = result.size * result.iterations / result.elapsed if result.elapsed else 0.0
        out.update(
            seconds=result.elapsed,
            average_mib_s=average / MIB,
            peak_mib_s=max(result.peak, average) / MIB,
            messages_per_s=result.iterations / result.elapsed if result.elapsed else 0.0,
        )
    if mib:
        out["cpu_us_per_mib"] = {
            "client": result.cpu_client / mib * 1e6,
            "server": result.cpu_server / mib * 1e6,
        }
    raw = result.raw
    if raw is not None:
        if result.latency:
            stats = _latency_stats(sorted(raw["times"]))
            out["raw_tcp"] = stats
            out["added_median_us"] = out["median_us"] - stats["median_us"]
            out["ratio"] = out["median_us"] / stats["median_us"] if stats["median_us"] else None
        else:
            rate = result.size * result.iterations / raw["elapsed"]
            out["raw_tcp"] = {"average_mib_s": rate / MIB}
            out["ratio"] = out["average_mib_s"] * MIB / rate
        if mib:
            out["raw_tcp"]["cpu_us_per_mib"] = {
                "client": raw["cpu"] / mib * 1e6,
                "server": raw.get("cpu_server", 0.0) / mib * 1e6,
            }
    return out


def _latency_stats(times: list[float]) -> dict[str, float]:
    if not times:
        return {"min_us": 0.0, "median_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
    return {
        "min_us": times[0] * 1e6,
        "median_us": statistics.median(times) * 1e6,
        "p99_us": times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6,
        "max_us": times[-1] * 1e6,
    }


def _report(result: Result, as_json: bool, write: Callable[[str], None] = print) -> None:
    data = summary(result)
    if as_json:
        write(json.dumps(data))
        return
    flags = f"markers {'on' if result.markers else 'off'}, CRC {'on' if result.crc else 'off'}"
    write(f"RDMA {result.op.title()} {'latency' if result.latency else 'bandwidth'} ({flags})")
    write(f"this end: {result.accel}; server: {result.peer_accel}")
    if result.latency:
        write(
            f" {'#bytes':>10} {'#iterations':>12} {'t_min[us]':>10} {'t_median[us]':>13} "
            f"{'t_p99[us]':>10} {'t_max[us]':>10}"
        )
        write(
            f" {data['bytes']:>10} {data['iterations']:>12} {data['min_us']:>10.2f} "
            f"{data['median_us']:>13.2f} {data['p99_us']:>10.2f} {data['max_us']:>10.2f}"
        )
    else:
        write(
            f" {'#bytes':>10} {'#iterations':>12} {'BW peak[MiB/s]':>15} "
            f"{'BW average[MiB/s]':>18} {'MsgRate[msg/s]':>15}"
        )
        write(
            f" {data['bytes']:>10} {data['iterations']:>12} {data['peak_mib_s']:>15.2f} "
            f"{data['average_mib_s']:>18.2f} {data['messages_per_s']:>15.1f}"
        )
    cpu = data.get("cpu_us_per_mib")
    if cpu:
        write(f"CPU per MiB: client {cpu['client']:.0f} us, server {cpu['server']:.0f} us")
    if "raw_tcp" in data:
        raw = data["raw_tcp"]
        if result.latency:
            write(
                f"raw TCP ping-pong: median {raw['median_us']:.2f} us, p99 {raw['p99_us']:.2f} us; "
                f"RDMA adds {data['added_median_us']:.2f} us ({data['ratio']:.2f}x)"
            )
        else:
            write(f"raw TCP: {raw['average_mib_s']:.2f} MiB/s; RDMA/raw = {data['ratio']:.2f}x")
        raw_cpu = raw.get("cpu_us_per_mib")
        if raw_cpu:
            write(
                f"raw TCP CPU per MiB: client {raw_cpu['client']:.0f} us, "
                f"server {raw_cpu['server']:.0f} us"
            )


__all__ = ["Result", "parse_size", "register", "run", "summary"]
