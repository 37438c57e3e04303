"""One capture on several cores: its connections split across worker processes.

``iwarp decode --jobs N FILE`` starts N workers. Each reads the whole
capture itself (reading is a small part of the cost; sending the segments
over would cost more) and decodes the connections of its *shard*: a TCP
address pair, both directions, belongs to shard ``crc32(pair) % N``, so
every connection of a pair (port reuse included) is decoded by the same
worker, exactly as one :class:`StreamAnalyzer` decodes it. For the other
segments a worker only moves its clock (:meth:`StreamAnalyzer.tick`), so
that its connections stop lingering at the same segment as in one process.

A worker tags what its analyzer puts out with the segment it came out at
(its position in the capture) and, within that segment, with the order one
analyzer would give: the segment's own connection first, then the
connections whose linger ran out, in the order they started lingering; at
the end of the capture, by connection. It numbers connections itself; it
also says at which segment each one started. The parent merges the
workers' outputs by those tags (:class:`SplitAnalysis`), renumbering
connections in the order they started across all workers: ``tcp.stream``
numbers, records and reports come out as from
:func:`~iwarp.analyze.analyzer.analyze_stream`. When the caller needs the
segments too (a frame index, a progress line), the parent reads the capture
in step, each output after its segment; a capture error then comes from
that reader where one process meets it, else from the first worker's, after
the outputs before it.

The limits on all connections together (``Limits.total``, the open and the
remembered connections) apply per worker; outputs differ from one process
only where one of them is reached, or where capture times go backwards
around a connection's end.
"""

from __future__ import annotations

import heapq
import multiprocessing
import signal
import zlib
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Final, TypeAlias

from iwarp.analyze.analyzer import ConnectionReport, Options, Output, StreamAnalyzer
from iwarp.analyze.capture import CaptureError, CaptureStats, TcpPacket, read_tcp_packets
from iwarp.analyze.records import Record
from iwarp.analyze.source import CountingReader, open_capture
from iwarp.analyze.tcp import Limits

if TYPE_CHECKING:
    from iwarp.analyze.analyzer import _Connection

__all__ = ["SplitAnalysis", "shard_of"]

#: The position of what :meth:`StreamAnalyzer.finish` puts out (past every segment).
END: Final = 1 << 62
#: A worker sends what it has after this many segments (the merge waits
#: for every worker to pass a segment before putting its outputs out) ...
BATCH_SEGMENTS: Final = 2048
#: ... or this many outputs, whichever comes first.
BATCH_OUTPUTS: Final = 256
#: Address pairs whose shard is remembered (the table is cleared when full).
PAIR_TABLE: Final = 1 << 16

#: ``(position, order, output)``: order 0 for the segment's own connection,
#: else the position where a lingering connection started to linger, or its
#: number at the end.
_Item: TypeAlias = tuple[int, int, Output]


def shard_of(src: str, sport: int, dst: str, dport: int, shards: int) -> int:
    """The worker of a TCP address pair, the same both ways."""
    a, b = f"{src} {sport}", f"{dst} {dport}"
    pair = f"{a}|{b}" if a < b else f"{b}|{a}"
    return zlib.crc32(pair.encode()) % shards


class _Shards:
    """Whether a segment is of one shard's connections, remembered per
    address pair and direction (:attr:`known`, looked up first)."""

    def __init__(self, shard: int, shards: int) -> None:
        self.shard, self.shards = shard, shards
        self.known: dict[tuple[str, int, str, int], bool] = {}

    def learn(self, key: tuple[str, int, str, int]) -> bool:
        known = self.known
        if len(known) >= PAIR_TABLE:
            known.clear()
        mine = known[key] = shard_of(*key, self.shards) == self.shard
        return mine


class _ShardAnalyzer(StreamAnalyzer):
    """A :class:`StreamAnalyzer` that marks where each connection closed by
    the clock, and each one reported at the end, begins in :attr:`out`."""

    def __init__(self, options: Options, limits: Limits) -> None:
        super().__init__(options, limits)
        #: ``(index in out, order)``.
        self.marks: list[tuple[int, int]] = []

    def _close_lingered(self, position: int, connection: _Connection) -> None:
        self.marks.append((len(self.out), position))
        super()._close_lingered(position, connection)

    def _close_at_end(self, connection: _Connection) -> None:
        self.marks.append((len(self.out), connection.index))
        super()._close_at_end(connection)


@dataclass
class _Ending:
    """How a worker's reading ended: at ``position``, after the end of the
    capture (``END``) or a capture error; what the reader counted."""

    position: int
    stats: CaptureStats
    octets: int
    #: What stopped the reading (raised again by the parent, where one
    #: process raises it), or a worker's own failure.
    error: CaptureError | OSError | None = None
    failure: str | None = None


def _work(
    path: str,
    options: Options,
    limits: Limits,
    shard: int,
    shards: int,
    records: bool,
    pipe: Connection,
) -> None:
    """A worker: the connections of one shard, its outputs sent in batches
    of ``(up to position, starts, items, ending or None)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    stats = CaptureStats()
    counter: list[CountingReader] = []
    ending = _Ending(0, stats, 0)
    starts: list[tuple[int, int]] = []
    items: list[_Item] = []
    try:
        analyzer = _ShardAnalyzer(options, limits)
        out, marks = analyzer.out, analyzer.marks
        owner = _Shards(shard, shards)
        known = owner.known
        with open_capture(path, counter) as f:
            for packet in read_tcp_packets(f, stats):
                key = (packet.src, packet.sport, packet.dst, packet.dport)
                mine = known.get(key)
                if mine is None:
                    mine = owner.learn(key)
                if mine:
                    count = analyzer.count
                    analyzer.feed(packet)
                    if analyzer.count != count:
                        starts.append((analyzer.position, count))
                else:
                    analyzer.tick(packet.time)
                position = ending.position = analyzer.position
                if out:
                    _take(out, marks, position, 0, records, items)
                if len(items) >= BATCH_OUTPUTS or not position % BATCH_SEGMENTS:
                    pipe.send((position, starts, items, None))
                    starts, items = [], []
        analyzer.finish()
        _take(out, marks, END, -1, records, items)
        ending.position = END
    except (CaptureError, OSError) as exc:
        ending.error = exc
    except Exception as exc:  # said by the parent, which stops
        ending.failure = f"{type(exc).__name__}: {exc}"
    ending.octets = counter[0].count if counter else 0
    try:
        pipe.send((ending.position, starts, items, ending))
        pipe.close()
    except OSError:
        pass  # the parent went away (stopped by -c, or interrupted)


def _take(
    out: list[Output],
    marks: list[tuple[int, int]],
    position: int,
    first: int,
    records: bool,
    items: list[_Item],
) -> None:
    """Tag the analyzer's outputs at ``position``: those before the first
    mark with ``first``, the rest with their mark's order."""
    order = first
    ends = [*marks, (len(out), 0)]
    begin = 0
    for at, mark in ends:
        for output in out[begin:at]:
            if records or type(output) is ConnectionReport:
                items.append((position, order, output))
        begin, order = at, mark
    out.clear()
    marks.clear()


#: What the parent merges: ``(position, rank, order, worker, sequence,
#: output)``; rank 0 a connection's start (order: its number in the worker),
#: 1 an output, 2 a worker's mark that it got this far (output None).
_Entry: TypeAlias = tuple[int, int, int, int, int, "Output | None"]
_START, _OUTPUT, _REACHED = 0, 1, 2


class SplitAnalysis:
    """One capture decoded by ``jobs`` worker processes, connections split
    by address pair: :meth:`outputs` gives what
    :func:`~iwarp.analyze.analyzer.analyze_stream` gives for the capture.

    ``records=False``: only the connection reports are wanted (all that is
    sent over then).
    """

    def __init__(
        self,
        path: str,
        options: Options,
        limits: Limits | None,
        jobs: int,
        *,
        records: bool = True,
    ) -> None:
        self.path, self.options, self.limits = path, options, limits or Limits()
        self.jobs, self.records = jobs, records
        #: What worker 0's reader saw (every worker reads the whole capture).
        self.stats = CaptureStats()
        #: Octets of the file worker 0 read.
        self.octets_read = 0
        self._numbers = _Numbers()

    def outputs(self, packets: Iterable[TcpPacket] | None = None) -> Generator[Output, None, None]:
        """Records and reports in the order one analyzer gives them.

        ``packets``: the capture's TCP segments, read here in step with the
        outputs (for the caller's frame index or progress line), each
        output after the segment it came out at, and a capture error
        raised by that reader where one process meets it; None: the
        workers' readers only (a capture error is raised after the outputs
        before it).
        """
        workers: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        endings: list[_Ending | None] = [None] * self.jobs
        try:
            for shard in range(self.jobs):
                receiver, sender = multiprocessing.Pipe(duplex=False)
                process = multiprocessing.Process(
                    target=_work,
                    args=(
                        self.path,
                        self.options,
                        self.limits,
                        shard,
                        self.jobs,
                        self.records,
                        sender,
                    ),
                    daemon=True,
                )
                process.start()
                sender.close()
                workers.append((process, receiver))
            reader = iter(packets) if packets is not None else None
            read = 0
            numbers = self._numbers
            streams = [self._entries(i, pipe, endings) for i, (_, pipe) in enumerate(workers)]
            ending: list[tuple[int, int, Output]] = []
            for position, rank, order, worker, _, output in heapq.merge(*streams):
                if position == END:
                    assert output is not None
                    ending.append((numbers.of(worker, order), worker, output))
                elif rank == _START:
                    numbers.start(worker, order)
                elif output is not None:
                    if reader is not None and read < position:
                        # A capture error is raised here, as in one process.
                        for _ in islice(reader, position - read):
                            pass
                        read = position
                    yield numbers.renumber(output, worker)
            if reader is not None:
                for _ in reader:
                    pass
            first = endings[0]
            if first is not None:
                self.stats, self.octets_read = first.stats, first.octets
            for found in endings:
                if found is not None and found.failure is not None:
                    raise CaptureError(f"a --jobs worker failed: {found.failure}")
            if first is not None and first.error is not None and reader is None:
                raise first.error
            ending.sort(key=lambda entry: entry[0])  # the end: connection by connection
            for _, worker, output in ending:
                yield numbers.renumber(output, worker)
        finally:
            for started, pipe in workers:
                pipe.close()
                if started.is_alive():
                    started.terminate()
                started.join()

    @staticmethod
    def _entries(worker: int, pipe: Connection, endings: list[_Ending | None]) -> Iterator[_Entry]:
        """One worker's starts and outputs in its order, with a mark after
        each batch (so that the merge never waits for a worker that has
        nothing to say)."""
        sequence = 0
        while True:
            try:
                reached, starts, items, ending = pipe.recv()
            except EOFError:
                endings[worker] = _Ending(0, CaptureStats(), 0, failure="it stopped unexpectedly")
                return
            except Exception as exc:  # a batch that cannot be read back: said, not a traceback
                failure = f"its batch cannot be read back ({type(exc).__name__}: {exc})"
                endings[worker] = _Ending(0, CaptureStats(), 0, failure=failure)
                return
            merged = heapq.merge(
                [(position, _START, local, None) for position, local in starts],
                [(position, _OUTPUT, order, output) for position, order, output in items],
                key=lambda entry: entry[:3],
            )
            for position, rank, order, output in merged:
                yield position, rank, order, worker, sequence, output
                sequence += 1
            if ending is not None:
                endings[worker] = ending
                return
            yield reached, _REACHED, 0, worker, sequence, None
            sequence += 1


class _Numbers:
    """Connection numbers across all workers, in the order the connections
    started; a number is forgotten when its connection is reported."""

    def __init__(self) -> None:
        self.started = 0
        self.known: dict[tuple[int, int], int] = {}

    def start(self, worker: int, local: int) -> None:
        self.known[(worker, local)] = self.started
        self.started += 1

    def of(self, worker: int, local: int) -> int:
        return self.known[(worker, local)]

    def renumber(self, output: Output, worker: int) -> Output:
        """The output with its connection's number across all workers."""
        if type(output) is ConnectionReport:
            number = output.index = self.known.pop((worker, output.index))
            for kept in (*output.kept_errors, *output.kept_notes, *output.records):
                _set_stream(kept, number)
            return output
        assert not isinstance(output, ConnectionReport)
        _set_stream(output, self.known[(worker, output.stream)])
        return output


def _set_stream(record: Record, stream: int) -> None:
    object.__setattr__(record, "stream", stream)  # a frozen record, made by unpickling
