"""``iwarp decode`` at scale: counts match the traffic that made the capture, and
memory stays bounded by what is outstanding, not by the file.

The captures come from ``bench/make_capture.py`` (deterministic, never
committed), made in a temporary directory.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from iwarp.analyze.analyzer import ConnectionReport, Options, analyze_stream
from iwarp.analyze.capture import read_tcp_packets
from iwarp.analyze.records import ErrorRecord, NoteRecord

ROOT = Path(__file__).resolve().parents[2]


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
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("scale") / "big.pcap"
    manifest = make_capture_module().make_capture(str(path), 50 << 20, seed=7, concurrent=12)
    return path, manifest


def test_counts_match_the_traffic_that_made_the_capture(
    capture: tuple[Path, dict[str, Any]],
) -> None:
    path, manifest = capture
    reports: dict[int, ConnectionReport] = {}
    errors = []
    with path.open("rb") as f:
        for out in analyze_stream(read_tcp_packets(f), Options()):
            if isinstance(out, ConnectionReport):
                reports[out.index] = out
            elif isinstance(out, ErrorRecord):
                errors.append(out)
    assert errors == []
    assert len(reports) == manifest["connections"]
    # The generator made some of everything the statistics count.
    total = manifest["total"]
    assert total["reads"] and total["terminates"] and total["retransmitted"] and total["reordered"]
    for planned in manifest["per_connection"]:
        report = reports[planned["stream"]]
        assert report.protocol == "mpa"
        assert report.setup_seconds is not None and report.setup_seconds > 0
        for summary, sent in zip(report.directions, planned["directions"], strict=True):
            stats = summary.stats
            assert stats is not None
            assert summary.framing is not None
            assert (
                summary.framing.markers
                is planned["markers"][0 if summary.direction == "initiator" else 1]
            )
            assert dict(summary.messages) == sent["fpdus"]
            assert {k: c.messages for k, c in stats.opcodes.items()} == sent["messages"]
            assert {k: c.octets for k, c in stats.opcodes.items()} == sent["octets"]
            assert summary.octets == sent["tcp_octets"]
            assert summary.retransmissions == sent["retransmitted"]
            assert summary.out_of_order == sent["reordered"]
            assert summary.gaps == 0
            assert stats.read_latency.count == sent["reads"]
            assert not stats.outstanding_reads
            assert stats.terminate_count == sent["terminates"]
            replay = summary.receiver
            assert replay is not None and replay.error is None
            assert replay.delivered == summary.fpdus


def peak_rss_decoding(path: Path) -> int:
    """Peak RSS (octets) of ``iwarp decode`` on ``path``, in a fresh process."""
    code = (
        "import sys\n"
        "from iwarp.cli import main\n"
        "status = main(['decode', '--progress', 'no', sys.argv[1]])\n"
        "sys.stdout.flush()\n"
        # VmHWM is this process's own peak; ru_maxrss would carry the parent's
        # over exec (a child of a large pytest worker reported the worker's).
        "hwm = [x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM:')]\n"
        "print('RSS', hwm[0], file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("RSS "))
    return int(line.split()[1]) * 1024


@pytest.mark.slow
def test_memory_does_not_follow_the_file(
    capture: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = capture
    small = tmp_path / "small.pcap"
    make_capture_module().make_capture(str(small), 6 << 20, seed=7, concurrent=12)
    rss_small, rss_big = peak_rss_decoding(small), peak_rss_decoding(path)
    size_small, size_big = small.stat().st_size, path.stat().st_size
    growth = (rss_big - rss_small) / (size_big - size_small)
    print(
        f"\npeak RSS {rss_small / 2**20:.1f} MiB for {size_small / 1e6:.1f} MB, "
        f"{rss_big / 2**20:.1f} MiB for {size_big / 1e6:.1f} MB; linear extrapolation "
        f"to 2 GB: {(rss_big + growth * (2e9 - size_big)) / 2**20:.0f} MiB"
    )
    # Four times the file, (nearly) the same memory: what is held is what is
    # outstanding (open connections, one FPDU each), not what was read.
    assert rss_big - rss_small < 16 << 20
    assert rss_big < 160 << 20


def test_a_pathological_capture_is_bounded_by_the_limits(tmp_path: Path) -> None:
    # A window that never closes (the first segment never comes) and many
    # connections that never end: the analyzer gives up, says so, and holds little.
    from iwarp.analyze.capture import TcpPacket
    from iwarp.analyze.tcp import Limits

    limits = Limits(open_connections=100, reassembly=64 << 10)
    packets = [
        TcpPacket(
            i + 1,
            i * 1e-3,
            "10.0.0.1",
            1000,
            "10.0.0.2",
            2000,
            5000 + 1400 * i,
            0,
            0x18,
            b"x" * 1400,
            1400,
        )
        for i in [1, *range(3, 200)]  # segment 2 never comes
    ]
    packets += [
        TcpPacket(1000 + i, 1.0, "10.0.1.1", 1024 + i, "10.0.0.2", 2000, 1, 0, 0x02, b"", 0)
        for i in range(1000)
    ]
    outputs = list(analyze_stream(packets, Options(), limits))
    notes = [
        o.message for o in outputs if not isinstance(o, ConnectionReport) and hasattr(o, "message")
    ]
    assert any("reassembly limit" in n for n in notes)
    assert sum("connections open at once" in n for n in notes) >= 900
    reports = [o for o in outputs if isinstance(o, ConnectionReport)]
    assert len(reports) == 1001
    (first,) = [r for r in reports if r.index == 0]
    assert first.directions[0].gaps == 1
    assert first.directions[0].gap_octets == 1400


def test_the_total_held_in_all_connections_is_bounded() -> None:
    # Fifty connections, each with a hole that never fills: none reaches its
    # own reassembly limit, but together they pass the total.
    from iwarp.analyze.capture import TcpPacket
    from iwarp.analyze.tcp import Limits

    limits = Limits(total=1 << 20)
    packets = [
        TcpPacket(
            k * 100 + i,
            i * 1e-3,
            f"10.0.2.{k}",
            3000,
            "10.0.0.2",
            2000,
            7000 + 1000 * i,
            0,
            0x18,
            b"y" * 1000,
            1000,
        )
        for i in [1, *range(3, 100)]
        for k in range(50)
    ]
    outputs = list(analyze_stream(packets, Options(), limits))
    notes = [o.message for o in outputs if isinstance(o, NoteRecord)]
    assert any("octets held in all connections" in n for n in notes)
    reports = [o for o in outputs if isinstance(o, ConnectionReport)]
    assert len(reports) == 50
    assert all(r.directions[0].gaps == 1 for r in reports)
