"""iwarp's side of perftest's rdma_cm tests (``ib_{send,write,read}_{bw,lat} -R``).

What perftest 4.5 does with ``-R`` (facts from its source, checked against
siw in the guest):

* **Two rdma_cm connections to the same port.** The first is perftest's
  *communication channel*: an RC queue pair with one receive posted at a
  time; every exchange is lockstep, the client Sends first, the server
  answers with a Send of the same size (``ctx_xchg_data``/``ctx_hand_shake``).
  The second carries the test itself (one per ``-q`` queue pair).
* On the channel, in order: the version string (16 octets, NUL padded), the
  page and cache line sizes (4 octets each, big-endian), the MTU as text
  (2 octets), then its **key message** (``struct pingpong_dest``, 56 octets,
  below) several times around the data connection's setup and before the
  test; after the test, one more key message, the bandwidth report (8-octet
  big-endian values, ``_bw`` tests) and a last key message that ends it.
* The key message's integers are all big-endian (``rdma_write_keys`` with
  ``HAVE_ENDIAN``) in the C struct's x86-64 layout: ``lid, out_reads, qpn,
  psn, rkey`` (4 octets each), 4 octets of padding, ``vaddr`` (8), ``gid``
  (16 raw octets), ``srqn``, ``gid_index`` (4 each). Only ``rkey`` and
  ``vaddr`` matter on iWARP: they are the STag and tagged offset the client
  Writes to or Reads from.

The server here answers every key message with its own (the STag and base
of one region registered for remote Write and Read), echoes every other
message (so the version, sizes and MTU agree with the client's own, and the
report the client receives is its own) and plays the test's data phase:

* ``write_bw``, ``read_bw``, ``read_lat``: nothing to do, the client's Writes
  and Reads are placed and answered by the RDMAP stack;
* ``send_bw``: a pool of posted receives, consumed as Sends arrive; on
  iWARP (no receiver-not-ready retry) ib_send_bw uses *credits*: both key
  messages name a 4-octet credit word instead of the data buffer, and the
  receiver RDMA Writes its count of received Sends there every third of its
  receive depth; the sender stops one depth ahead of the last credit;
* ``send_lat``: each Send received is answered with a Send of ``size``;
* ``write_lat``: the *server* Writes first (``size`` octets, the last one
  counting 1, 2, ...), then waits for the client's Write with the same count
  in its own buffer; so this needs siw's peer-to-peer build (an MPA
  Responder may not send first, RFC 5044 §7.1.2).

:func:`perftest_client` plays the same exchange from the client's side for
``write_bw`` and ``read_bw`` against perftest's server, measures the
bandwidth itself and sends it in the report, which perftest's server prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import random
import re
import struct
import termios
import time
from dataclasses import dataclass, field
from typing import Final

from iwarp._typing import Buffer
from iwarp.asyncio.rdma import ConnectionTerminatedError, QueuePair, connect, serve
from iwarp.errors import IwarpError, LocalProtocolError, RemoteProtocolError
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap.memory import Access, MemoryRegion, ProtectionDomain
from iwarp.rdmap.work import Sge

#: The tests whose rdma_cm exchange the server plays (perftest's program names without ``ib_``).
TESTS: Final = ("send_bw", "write_bw", "read_bw", "send_lat", "write_lat", "read_lat")

# perftest_resources.h ``struct pingpong_dest`` as rdma_write_keys() sends it:
# every integer big-endian, x86-64 alignment (4 octets of padding before vaddr).
_DEST: Final = struct.Struct(">iiiiI4xQ16sIi")
#: Size of the key message on the wire.
DEST_SIZE: Final = _DEST.size

#: The tagged offset of the server's region (any value works; perftest prints it).
REGION_BASE: Final = 0x7F00_0000_0000
#: Receives posted on each connection (the client keeps up to ``-t`` 128 Sends in flight).
RECEIVE_POOL: Final = 512


_COLUMN: Final = re.compile(r"#\w+|[^\s#\[\]][^#\[\]]*?\[[^\]]*\]")


#: ib_write_lat's key messages before its test: two around the data connection's
#: setup, three after its buffers are set up, one "after moving the QP to RTR".
WRITE_LAT_KEYS_BEFORE_TEST: Final = 6
#: perftest's receive depth for Send tests (``DEF_RX_SEND``).
DEFAULT_RX_DEPTH: Final = 512
#: ib_send_bw's credit on iWARP (no receiver-not-ready retry there): the count of
#: Sends received, written by the receiver as a host-order (x86: little-endian)
#: uint32 into the sender's credit word, named by the sender's key message.
CREDIT: Final = struct.Struct("<I")


class PerftestError(RemoteProtocolError):
    """perftest sent a message that does not fit its own exchange."""


@dataclass(frozen=True, slots=True)
class PingpongDest:
    """perftest's key message: where a queue pair's buffer is and how to reach it."""

    lid: int = 0
    out_reads: int = 0
    qpn: int = 0
    psn: int = 0
    rkey: int = 0
    vaddr: int = 0
    gid: bytes = bytes(16)
    srqn: int = 0
    gid_index: int = -1

    def pack(self) -> bytes:
        """The 56 octets perftest's ``rdma_read_keys`` expects."""
        return _DEST.pack(
            self.lid,
            self.out_reads,
            self.qpn,
            self.psn,
            self.rkey,
            self.vaddr,
            self.gid,
            self.srqn,
            self.gid_index,
        )

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> PingpongDest:
        """Parse a key message at ``offset``.

        :raises PerftestError: fewer than :data:`DEST_SIZE` octets there.
        """
        view = memoryview(buf).cast("B")
        if offset < 0 or len(view) - offset < DEST_SIZE:
            raise PerftestError(
                f"perftest key message needs {DEST_SIZE} octets, got {max(len(view) - offset, 0)}"
            )
        fields = _DEST.unpack_from(view, offset)
        return cls(*fields)


@dataclass(slots=True)
class PerftestResult:
    """What the server saw: channel messages, key messages, data connections and messages."""

    test: str
    channel_messages: int = 0
    keys: list[PingpongDest] = field(default_factory=list)
    data_connections: int = 0
    #: Sends received (send tests) or Writes answered (write_lat).
    data_messages: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and self.channel_messages > 0 and self.data_connections > 0


def receive_depth(iterations: int) -> int:
    """perftest's receive queue depth for a Send test: 512, or ``-n`` when smaller."""
    return max(1, min(iterations, DEFAULT_RX_DEPTH))


def credit_interval(iterations: int) -> int:
    """How many Sends the receiver takes between two credit Writes (a third of its depth)."""
    return max(1, receive_depth(iterations) // 3)


def answer(message: bytes, mine: PingpongDest) -> bytes:
    """The channel's answer to one client message: our key message for a key message, else an echo.

    Echoing is what makes the other exchanges agree: the client compares
    versions (ours then equals its own), takes the larger page and cache
    line size and the smaller MTU (all equal to its own).
    """
    if len(message) == DEST_SIZE:
        return mine.pack()
    return message


async def perftest_server(
    host: str,
    port: int,
    *,
    test: str,
    size: int,
    iterations: int,
    config: MpaConfig | None = None,
    timeout: float = 120.0,
) -> PerftestResult:
    """Serve one perftest ``-R`` client (channel + data connection) until it disconnects."""
    if test not in TESTS:
        raise LocalProtocolError(f"unknown perftest test {test!r}")
    result = PerftestResult(test)
    pd = ProtectionDomain()
    # Room for Writes that cycle through perftest's page-sized buffer, or one of -s.
    buffer = bytearray(max(2 * size, 1 << 20))
    region = pd.register(
        buffer, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ, address=REGION_BASE
    )
    mine = PingpongDest(
        qpn=1, psn=random.getrandbits(24), rkey=region.stag, vaddr=REGION_BASE, gid_index=-1
    )
    channel_done = asyncio.Event()
    keys_done = asyncio.Event()
    data_tasks: list[asyncio.Task[None]] = []
    order = 0

    async def channel(qp: QueuePair) -> None:
        nonlocal mine
        try:
            while True:
                message = await qp.receive()
                result.channel_messages += 1
                if len(message) == DEST_SIZE:
                    theirs = PingpongDest.unpack_from(message)
                    result.keys.append(theirs)
                    # perftest sizes its Read queue from out_reads: answer with the client's.
                    mine = PingpongDest(
                        qpn=mine.qpn,
                        psn=mine.psn,
                        out_reads=theirs.out_reads,
                        rkey=mine.rkey,
                        vaddr=mine.vaddr,
                        gid_index=theirs.gid_index,
                    )
                await qp.send(answer(message, mine))
                if len(result.keys) == WRITE_LAT_KEYS_BEFORE_TEST:
                    keys_done.set()
        except ConnectionTerminatedError:
            pass
        except (IwarpError, OSError) as exc:
            result.errors.append(f"channel: {exc}")
        finally:
            channel_done.set()

    async def data(qp: QueuePair) -> None:
        result.data_connections += 1
        try:
            if test == "send_bw":
                every = credit_interval(iterations)
                window = receive_depth(iterations)
                while True:
                    await qp.receive()
                    result.data_messages += 1
                    if result.data_messages % window % every == 0:
                        # The client stops a window short of its receiver's depth
                        # until told how many Sends were received.
                        theirs = result.keys[-1]
                        credit = CREDIT.pack(result.data_messages & 0xFFFFFFFF)
                        await qp.rdma_write(credit, theirs.rkey, theirs.vaddr)
            elif test == "send_lat":
                reply = bytes(size)
                while True:
                    await qp.receive()
                    result.data_messages += 1
                    await qp.send(reply)
            elif test == "write_lat":
                # The client's buffer is named by its later key messages.
                await keys_done.wait()
                await _write_pingpong(qp, buffer, size, iterations, result)
            await qp.closed
        except ConnectionTerminatedError:
            pass
        except (IwarpError, OSError) as exc:
            result.errors.append(f"data: {exc}")

    async def handler(qp: QueuePair) -> None:
        nonlocal order
        order += 1
        if order == 1:
            await channel(qp)
            return
        task = asyncio.current_task()
        assert task is not None
        data_tasks.append(task)
        await data(qp)

    server = await serve(
        handler,
        host,
        port,
        pd=pd,
        config=config,
        receive_buffers=RECEIVE_POOL,
        receive_size=max(size, DEST_SIZE),
    )
    async with server:
        try:
            await asyncio.wait_for(channel_done.wait(), timeout)
        except TimeoutError:
            result.errors.append(
                f"after {timeout:.0f} s: {result.channel_messages} channel messages, "
                f"{result.data_connections} data connections"
            )
        # The client ends its data connection with the channel; give it a moment.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*data_tasks, return_exceptions=True), 5.0)
    if test in ("send_bw", "send_lat") and result.data_messages < iterations and not result.errors:
        result.errors.append(f"{result.data_messages} of {iterations} Sends received")
    if test == "write_lat" and result.data_messages < iterations and not result.errors:
        result.errors.append(f"{result.data_messages} of {iterations} Writes answered")
    return result


async def _write_pingpong(
    qp: QueuePair, buffer: bytearray, size: int, iterations: int, result: PerftestResult
) -> None:
    """ib_write_lat's server: Write n (last octet n), then wait for the client's Write n.

    perftest's server Writes first; an MPA Responder may not send before the
    Initiator's first FPDU (RFC 5044 §7.1.2), so this needs a peer-to-peer
    Initiator (siw's p2p build: its RTR comes first).
    """
    # The client Writes at our vaddr (the region's start); its last octet counts.
    poll = size - 1
    reply = bytearray(size)
    for n in range(1, iterations + 1):
        expected = n & 0xFF
        theirs = result.keys[-1]
        reply[-1] = expected
        await qp.rdma_write(bytes(reply), theirs.rkey, theirs.vaddr)
        # No completion exists for an inbound Write (RFC 5040 §5.1): poll the octet.
        while buffer[poll] != expected:
            if qp.closed.done():
                return
            await asyncio.sleep(0.0002)
        result.data_messages += 1


def parse_report(output: str) -> dict[str, float] | None:
    """perftest's result table: the column names and values of its first result line.

    perftest prints a header (``#bytes  #iterations  BW peak[MB/sec] ...`` or
    ``... t_typical[usec] ...``, columns two or more spaces apart) and the
    numbers on the next line. ``None`` when there is no such table.
    """
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "#bytes" not in line:
            continue
        # Names are "#word" or end with a bracketed unit ("BW peak[MB/sec]",
        # "99% percentile[usec]"); some are one space apart.
        names = _COLUMN.findall(line)
        for row in lines[i + 1 :]:
            cells = row.split()
            if not cells:
                continue
            try:
                values = [float(c) for c in cells]
            except ValueError:
                return None
            if len(values) < len(names):
                return None
            return dict(zip(names, values, strict=False))
        return None
    return None


def summarize(report: dict[str, float]) -> str:
    """One line for the suite report: size, iterations, then bandwidth or latency."""
    size = int(report.get("#bytes", 0))
    iters = int(report.get("#iterations", 0))
    head = f"{size} B x {iters}"
    if "BW average[MB/sec]" in report:
        return (
            f"{head}: BW average {report['BW average[MB/sec]']:.2f} MB/s, "
            f"peak {report.get('BW peak[MB/sec]', 0.0):.2f} MB/s, "
            f"{report.get('MsgRate[Mpps]', 0.0):.6f} Mpps"
        )
    if "t_typical[usec]" in report:
        return (
            f"{head}: latency typical {report['t_typical[usec]']:.2f} us, "
            f"avg {report.get('t_avg[usec]', 0.0):.2f} us, "
            f"min {report.get('t_min[usec]', 0.0):.2f} us, "
            f"max {report.get('t_max[usec]', 0.0):.2f} us"
        )
    return head + ": " + ", ".join(f"{k} {v:g}" for k, v in report.items())


#: The version iwarp's client announces (perftest 4.5's own is 6.06; the server
#: refuses anything below 5.70 and picks message formats by it).
CLIENT_VERSION: Final = b"6.06"
#: Tests :func:`perftest_client` plays.
CLIENT_TESTS: Final = ("write_bw", "read_bw")
#: Reads the client keeps outstanding at most (perftest's -o, bounded by the server's).
READ_WINDOW: Final = 16
# xchg_bw_reports: size and iterations as uint64, then peak, average and
# message rate as IEEE doubles, all big-endian (hton_long / hton_double).
_U64: Final = struct.Struct(">Q")
_DOUBLE: Final = struct.Struct(">d")
_INT: Final = struct.Struct(">i")


#: Seconds the client waits for perftest's server to disconnect before it does.
CLOSE_GRACE = 2.0


async def _exchange(channel: QueuePair, message: bytes, timeout: float) -> bytes:
    """One lockstep exchange on perftest's channel: the client Sends, the server answers."""
    await channel.send(message)
    return await asyncio.wait_for(channel.receive(), timeout)


async def perftest_client(
    host: str,
    port: int,
    *,
    test: str,
    size: int,
    iterations: int,
    config: MpaConfig | None = None,
    timeout: float = 120.0,
) -> tuple[PerftestResult, float]:
    """Play perftest's ``-R`` client against a perftest server; return what it saw and MB/s.

    The bandwidth (MiB/s, perftest's "MB/sec") is measured here and sent in the
    report the server prints.
    """
    if test not in CLIENT_TESTS:
        raise LocalProtocolError(f"perftest client plays only {', '.join(CLIENT_TESTS)}")
    result = PerftestResult(test)
    pd = ProtectionDomain()
    buffer = bytearray(max(size, 4096))
    region = pd.register(buffer, Access.LOCAL_WRITE | Access.REMOTE_WRITE, address=REGION_BASE)
    mine = PingpongDest(
        qpn=1,
        psn=random.getrandbits(24),
        out_reads=READ_WINDOW,
        rkey=region.stag,
        vaddr=REGION_BASE,
    )
    # siw as Responder may miss an FPDU right after its Reply (see iwarp.asyncio.rdma.connect).
    delay = 0.5
    channel = await connect(
        host, port, config=config, receive_buffers=2, receive_size=64, first_send_delay=delay
    )
    data: QueuePair | None = None
    bandwidth = 0.0
    step = min(timeout, 30.0)
    try:
        version = await _exchange(channel, CLIENT_VERSION.ljust(16, b"\0"), step)
        theirs_version = version.split(b"\0", 1)[0].decode("ascii", "replace")
        result.channel_messages += 1
        if _version(theirs_version) < 5.70:
            raise PerftestError(f"perftest server version {theirs_version!r} is below 5.70")
        for word in (_INT.pack(4096), _INT.pack(64), b"3\0"):  # page, cache line, MTU (1024)
            await _exchange(channel, word, step)
            result.channel_messages += 1

        async def key() -> PingpongDest:
            theirs = PingpongDest.unpack_from(await _exchange(channel, mine.pack(), step))
            result.channel_messages += 1
            result.keys.append(theirs)
            return theirs

        await key()
        # The server listens for the data connection only after answering that key.
        data = await _connect_retrying(host, port, pd, config, delay)
        result.data_connections += 1
        for _ in range(4):
            theirs = await key()
        started = await _timed_phase(data, test, theirs, region, size, iterations, result, step)
        seconds = max(time.perf_counter() - started, 1e-9)
        bandwidth = size * iterations / seconds / (1 << 20)
        rate = iterations / seconds / 1e6
        await key()  # the client is done
        report = (
            _U64.pack(size),
            _U64.pack(iterations),
            _DOUBLE.pack(bandwidth),
            _DOUBLE.pack(bandwidth),
            _DOUBLE.pack(rate),
        )
        for word in report:
            await _exchange(channel, word, step)
            result.channel_messages += 1
        await key()  # ctx_close_connection
        # The server disconnects first: siw fails its last Send's completion
        # ("Bad wc status 2") when our FIN arrives within a millisecond of
        # it, as it does once the answer is processed quickly.
        ends = [channel.closed, data.closed]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*map(asyncio.shield, ends)), CLOSE_GRACE)
    except (IwarpError, OSError, TimeoutError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        for qp in (data, channel):
            if qp is not None:
                with contextlib.suppress(IwarpError, OSError, TimeoutError):
                    await asyncio.wait_for(qp.close(), 5.0)
    return result, bandwidth


async def _timed_phase(
    data: QueuePair,
    test: str,
    theirs: PingpongDest,
    region: MemoryRegion,
    size: int,
    iterations: int,
    result: PerftestResult,
    step: float,
) -> float:
    """One warm-up operation, then ``iterations`` timed ones; returns the start time."""
    if test == "write_bw":
        payload = bytes(size)
        # A warm-up Write, as perftest's own: it also waits out first_send_delay.
        await data.rdma_write(payload, theirs.rkey, theirs.vaddr)
        started = time.perf_counter()
        for _ in range(iterations):
            await data.rdma_write(payload, theirs.rkey, theirs.vaddr)
            result.data_messages += 1
        await data.drain()
        # A Write completes when TCP has it (as on siw): count until the peer
        # acknowledged every octet, not until the socket buffer took them.
        await _drained(data, step)
        return started
    sink = Sge(region, 0, size)
    await data.rdma_read(sink, theirs.rkey, theirs.vaddr)
    started = time.perf_counter()
    window = asyncio.Semaphore(max(1, min(theirs.out_reads, READ_WINDOW)))

    async def one() -> None:
        async with window:
            await data.rdma_read(sink, theirs.rkey, theirs.vaddr)
            result.data_messages += 1

    # A Read completes when its Response arrived: no draining needed.
    await asyncio.gather(*(one() for _ in range(iterations)))
    return started


async def _drained(qp: QueuePair, timeout: float) -> None:
    """Wait until the connection's TCP send queue is empty (all octets acknowledged)."""
    sock = qp.get_extra_info("socket")
    if sock is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            unacked = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))
        except OSError:
            return
        if unacked[0] == 0:
            return
        await asyncio.sleep(0.0005)


async def _connect_retrying(
    host: str, port: int, pd: ProtectionDomain, config: MpaConfig | None, delay: float
) -> QueuePair:
    """The data connection; perftest's own client retries it too (10 times, 100 ms apart)."""
    for attempt in range(10):
        try:
            return await connect(host, port, pd=pd, config=config, first_send_delay=delay)
        except (IwarpError, OSError):
            if attempt == 9:
                raise
            await asyncio.sleep(0.3)
    raise AssertionError("unreachable")


def _version(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
