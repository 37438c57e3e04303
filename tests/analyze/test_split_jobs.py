"""``iwarp decode --jobs N`` on one capture: its connections split across
worker processes give what one process gives, record for record and octet
for octet (iwarp.analyze.shards)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import multiprocessing
import re
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest
from analyze_traffic import pcap_records, resegmented, standard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_analyzer import to_pcapng
from test_capture_limits import record_starts

from iwarp.analyze.analyzer import ConnectionReport, Options, Output, analyze_stream
from iwarp.analyze.capture import CaptureStats, read_tcp_packets
from iwarp.analyze.records import json_line
from iwarp.analyze.render import summary_json
from iwarp.analyze.shards import SplitAnalysis, shard_of
from iwarp.analyze.source import open_capture
from iwarp.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: One connection's frames: (seconds, micros, frame octets) as captured.
Frames = list[tuple[int, int, bytes]]


def conversation(
    port: int, markers: bool, crc: bool, *, close: bool = True, isn: int = 0x1000
) -> Frames:
    """The standard conversation from client port ``port``, its frames."""
    conv = standard(markers, not markers, crc=crc)
    cap, _ = conv.capture(client=("10.0.0.1", port), client_isn=isn)
    _, frames = pcap_records(cap.to_bytes())
    return frames if close else frames[:-3]  # without the FINs and the last ACK


def interleave(connections: list[Frames], order: list[int], gaps: list[float]) -> bytes:
    """The connections' frames in one capture: each connection's in its own
    order, ``order`` saying whose frame comes next, new times from ``gaps``."""
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    queues = [list(frames) for frames in connections]
    chosen: list[bytes] = []
    turn = 0
    while any(queues):
        live = [q for q in queues if q]
        queue = live[order[turn % len(order)] % len(live)] if order else live[0]
        turn += 1
        chosen.append(queue.pop(0)[2])
    out = [header]
    now = 10.0
    for i, frame in enumerate(chosen):
        now += gaps[i % len(gaps)] if gaps else 0.001
        seconds = int(now)
        micros = min(999_999, round((now - seconds) * 1e6))
        out.append(struct.pack("<IIII", seconds, micros, len(frame), len(frame)) + frame)
    return b"".join(out)


def rendered(output: Output) -> str:
    if isinstance(output, ConnectionReport):
        return json.dumps(summary_json(output))
    return json_line(output)


def decoded(path: Path, jobs: int, *, records: bool = True, in_step: bool = False) -> list[str]:
    """The outputs as JSON lines: one analyzer, or ``jobs`` workers (the
    segments read here too, in step with them, or not)."""
    stats = CaptureStats()
    with open_capture(str(path)) as f:
        packets = read_tcp_packets(f, stats)
        if jobs == 1:
            lines = [rendered(output) for output in analyze_stream(packets, Options())]
        else:
            split = SplitAnalysis(str(path), Options(), None, jobs, records=records)
            outputs = split.outputs(packets if in_step else None)
            lines = [rendered(output) for output in outputs]
            assert split.stats == stats if in_step else split.stats.frames > 0
    return lines


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(
        st.tuples(
            st.booleans(), st.booleans(), st.sampled_from(["closed", "open", "reused", "late"])
        ),
        min_size=2,
        max_size=6,
    ),
    order=st.lists(st.integers(0, 5), max_size=40),
    gaps=st.lists(st.sampled_from([0.0001, 0.01, 0.6, 1.5]), min_size=1, max_size=8),
    jobs=st.integers(2, 3),
)
def test_split_gives_what_one_process_gives(
    tmp_path: Path,
    kinds: list[tuple[bool, bool, str]],
    order: list[int],
    gaps: list[float],
    jobs: int,
) -> None:
    """Connections that close, linger and expire at any point (gaps past the
    one-second linger), stay open to the end, reuse their address pair, or
    see a segment again after they were reported; outputs in the same order
    with the same connection numbers."""
    connections = []
    for i, (markers, crc, kind) in enumerate(kinds):
        frames = conversation(40000 + i, markers, crc, close=kind != "open")
        if kind == "reused":  # the same ports again, after the first one closed
            frames += conversation(40000 + i, not markers, crc, isn=0x7000_0000)
        elif kind == "late":  # a data segment sent again after the close
            frames.append(frames[len(frames) // 2])
        connections.append(frames)
    path = tmp_path / "mixed.pcap"
    path.write_bytes(interleave(connections, order, gaps))
    alone = decoded(path, 1)
    assert len([line for line in alone if '"stream_summary"' in line]) == len(kinds) + sum(
        kind == "reused" for _, _, kind in kinds
    )
    assert decoded(path, jobs) == alone
    assert decoded(path, jobs, in_step=True) == alone
    reports = [line for line in alone if '"stream_summary"' in line]
    assert decoded(path, jobs, records=False) == reports


def timed(plan: list[tuple[float, bytes]]) -> bytes:
    """A capture of ``(seconds after the frame before, frame)``."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    now = 10.0
    for gap, frame in plan:
        now += gap
        seconds = int(now)
        micros = min(999_999, round((now - seconds) * 1e6))
        out.append(struct.pack("<IIII", seconds, micros, len(frame), len(frame)) + frame)
    return b"".join(out)


def test_a_late_segment_moves_the_clock(tmp_path: Path) -> None:
    """A segment of a connection already reported moves the clock as any
    other: a connection whose linger ran out by then is reported at it,
    before the next segment's records. (One process used to wait for the
    next segment; a worker cannot tell another's late segment from a live
    one.)"""
    ports = iter(range(40000, 40100))
    # Three connections on different workers of two: C reported early, then
    # a late segment of it after A's linger ran out, in the middle of B.
    late = next(p for p in ports if shard_of("10.0.0.1", p, "127.0.0.1", 4000, 2) == 0)
    lingering = next(p for p in ports if shard_of("10.0.0.1", p, "127.0.0.1", 4000, 2) == 1)
    busy = next(p for p in ports if shard_of("10.0.0.1", p, "127.0.0.1", 4000, 2) == 0)
    c, a = conversation(late, False, True), conversation(lingering, False, True)
    b = [frame for _, _, frame in conversation(busy, True, True)]
    # The late segment right before a data segment of B (one FPDU each).
    half = next(i for i in range(len(b) // 2, len(b)) if len(b[i]) > 54)
    plan = [(0.001, frame) for _, _, frame in c]
    plan += [(1.5, a[0][2])] + [(0.001, frame) for _, _, frame in a[1:]]
    plan += [(0.001, frame) for frame in b[:half]]
    plan += [(1.5, c[len(c) // 2][2])] + [(0.001, frame) for frame in b[half:]]
    path = tmp_path / "late.pcap"
    path.write_bytes(timed(plan))
    alone = decoded(path, 1)
    frame = len(c) + len(a) + half + 1  # the late segment's frame number
    kinds = [(line["type"], line["stream"], line.get("frame")) for line in map(json.loads, alone)]
    reported = kinds.index(("stream_summary", 1, None))
    before, after = kinds[reported - 1], kinds[reported + 1]
    assert before[1] == 2 and before[2] < frame  # after B's records before it ...
    assert after[1:] == (2, frame + 1)  # ... before B's next one
    assert decoded(path, 2) == alone  # as the workers put it


def test_pairs_go_to_one_shard_both_ways() -> None:
    for port in range(40000, 40100):
        for shards in (2, 3, 7):
            there = shard_of("10.0.0.1", port, "10.0.0.2", 4000, shards)
            assert there == shard_of("10.0.0.2", 4000, "10.0.0.1", port, shards)
            assert 0 <= there < shards
    spread = {shard_of("10.0.0.1", port, "10.0.0.2", 4000, 4) for port in range(40000, 40100)}
    assert spread == {0, 1, 2, 3}


# -- the command ---------------------------------------------------------------------


def make_capture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_capture", ROOT / "bench" / "make_capture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_capture", module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated capture: 12 connections at once, retransmissions, reordering."""
    path = tmp_path_factory.mktemp("split") / "mix.pcap"
    make_capture_module().make_capture(str(path), 3 << 20, seed=5, concurrent=12, mix="ethernet")
    return path


_ELAPSED = re.compile(rb"in [0-9.]+ s, [0-9.]+ MiB/s|\"seconds\": [0-9.]+, \"mib_per_s\": [0-9.]+")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, bytes, str]:
    status = main(["decode", "--progress", "no", *argv])
    captured = capsys.readouterr()
    return status, _ELAPSED.sub(b"T", captured.out.encode()), captured.err


@pytest.mark.parametrize(
    "mode",
    [
        (),
        ("--json",),
        ("-T", "text"),
        ("-V",),
        ("-T", "fields", "-e", "frame", "-e", "tcp.stream", "-e", "opcode_name", "-e", "crc_ok"),
        ("-c", "500"),
        ("-T", "text", "-x", "-c", "40"),
        (
            "-Y",
            "tcp.stream == 3 or error",
        ),
        ("--no-receiver", "--stream", "4"),
    ],
)
def test_jobs_on_one_capture_prints_the_same(
    bench_capture: Path, capsys: pytest.CaptureFixture[str], mode: tuple[str, ...]
) -> None:
    alone = run(capsys, str(bench_capture), *mode)
    assert alone[0] in (0, 1)
    assert run(capsys, str(bench_capture), "--jobs", "3", *mode) == alone
    assert not multiprocessing.active_children()  # every worker stopped, -c too


def test_jobs_on_one_capture_writes_the_same_tables(
    bench_capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for jobs in ("1", "2"):
        status, _, _ = run(
            capsys, str(bench_capture), "--jobs", jobs, "--csv", str(tmp_path / jobs)
        )
        assert status in (0, 1)
    for table in sorted((tmp_path / "1").iterdir()):
        assert (tmp_path / "2" / table.name).read_bytes() == table.read_bytes(), table.name


def test_jobs_on_a_cut_off_or_bad_capture(
    bench_capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bench_capture.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) // 2 + 7])
    alone = run(capsys, str(cut), "--json")
    assert alone[0] == 3
    assert run(capsys, str(cut), "--json", "--jobs", "2") == alone
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    alone = run(capsys, str(bad))
    assert alone[0] == 2
    assert run(capsys, str(bad), "--jobs", "2") == alone
    assert not multiprocessing.active_children()


def test_jobs_on_a_capture_broken_in_the_middle(
    bench_capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pcapng block with an impossible length half-way, and a gzip
    stream damaged half-way: the same records before the error, the same
    message and exit status, whether the main process reads in step (-T
    text) or only the workers read (--json, the summary)."""
    data = to_pcapng(bench_capture.read_bytes())
    at = record_starts(data, pcapng=True)[len(record_starts(data, pcapng=True)) // 2]
    broken = tmp_path / "broken.pcapng"
    broken.write_bytes(data[:at] + struct.pack("<II", 6, 7) + data[at + 8 :])
    packed = gzip.compress(bench_capture.read_bytes())
    damaged = tmp_path / "damaged.pcap.gz"
    middle = len(packed) // 2
    damaged.write_bytes(packed[:middle] + bytes(64) + packed[middle + 64 :])
    for path in (broken, damaged):
        for mode in ((), ("--json",), ("-T", "text")):
            alone = run(capsys, str(path), *mode)
            assert alone[0] == 2 and alone[2], (path.name, mode)
            assert run(capsys, str(path), "--jobs", "2", *mode) == alone, (path.name, mode)
    assert not multiprocessing.active_children()


def test_jobs_with_the_receiver_replay_stopped_by_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lost segment: the receiver replay's summary holds the MPA error it
    stopped at, which crosses from the worker as it is (it did not unpickle)."""

    def lose(name: str, pieces: list[bytes]) -> list[bytes]:
        return pieces[:1] + pieces[2:] if name == "initiator" else pieces

    cap, _ = standard(True, False).capture(resegmented([50, 700]), mutate=lose)
    path = tmp_path / "lost.pcap"
    cap.write(str(path))
    for mode in ((), ("--json",), ("-T", "text")):
        alone = run(capsys, str(path), *mode)
        assert alone[0] == 1
        assert run(capsys, str(path), "--jobs", "2", *mode) == alone
