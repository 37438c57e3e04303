"""The receiver replay hands over runs of in-order segments in one call
(iwarp.analyze.replay.ReplayFeed, OutOfOrderReceiver.receive_run); its
figures must be those of one call per segment, on whole generated
captures, intact and with octets changed (the receiver then stops at an
error, in the middle of a run)."""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from analyze_traffic import pcap_records
from test_capture_scale import make_capture_module

from iwarp.analyze import analyzer, replay
from iwarp.analyze.analyzer import ConnectionReport, Options, analyze_stream
from iwarp.analyze.capture import read_tcp_packets
from iwarp.analyze.render import summary_json
from iwarp.analyze.tcp import Limits


class OneByOne(replay.ReplayFeed):
    """The replay as one call per segment: receive_count, then buffered."""

    def feed(self, seq: int, payload: bytes) -> None:
        receiver = self.receiver
        if not payload or receiver.error is not None:
            return
        passed, ahead, delivered = receiver.receive_count(seq, payload)
        self.passed += passed
        self.ahead += ahead
        self.delivered += delivered
        self.peak = max(self.peak, receiver.buffered)


def receivers(path: Path) -> Iterator[str]:
    """Each connection's report, its receiver figures included, as JSON."""
    with path.open("rb") as f:
        for out in analyze_stream(read_tcp_packets(f), Options()):
            if isinstance(out, ConnectionReport):
                yield json.dumps(summary_json(out), sort_keys=True)


def damaged(data: bytes, seed: int, count: int) -> bytes:
    """The capture with one octet changed in ``count`` frames' last octets
    (TCP payloads: CRCs, markers, lengths and headers go wrong)."""
    header, records = pcap_records(data)
    rnd = random.Random(seed)
    for _ in range(count):
        i = rnd.randrange(len(records))
        sec, usec, frame = records[i]
        if len(frame) > 80:
            at = len(frame) - 1 - rnd.randrange(min(len(frame) - 80, 2000))
            frame = frame[:at] + bytes([frame[at] ^ (1 << rnd.randrange(8))]) + frame[at + 1 :]
            records[i] = (sec, usec, frame)
    return header + b"".join(struct.pack("<IIII", s, u, len(f), len(f)) + f for s, u, f in records)


@pytest.mark.parametrize("mix", ["default", "marked"])
@pytest.mark.parametrize("damage", [0, 3, 40])
def test_runs_give_the_figures_of_one_call_per_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mix: str, damage: int
) -> None:
    path = tmp_path / f"{mix}.pcap"
    make_capture_module().make_capture(str(path), 2 << 20, seed=7, concurrent=6, mix=mix)
    if damage:
        path.write_bytes(damaged(path.read_bytes(), damage, damage))
    by_runs = list(receivers(path))
    monkeypatch.setattr(analyzer, "ReplayFeed", OneByOne)
    assert list(receivers(path)) == by_runs
    figures = [json.loads(line) for line in by_runs]
    directions = [d for c in figures for d in c["directions"] if d.get("receiver")]
    assert directions
    if damage:  # some receiver stopped at an error, in the middle of a run or not
        assert any(d["receiver"]["error_code"] is not None for d in directions)


def test_a_run_is_bounded() -> None:
    feed = replay.ReplayFeed(0, markers=False, crc=True)
    for i in range(100):
        feed.feed(1000 * i, bytes(1000))  # in order, never a whole FPDU
        assert feed.run_size <= replay.RUN_OCTETS + 1000
    assert feed.result().passed == 0


def test_what_a_run_holds_is_counted_and_handed_over_when_memory_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The octets a replay gathers count in what a connection holds (the
    # limit on all connections together); shedding hands them over, which
    # changes no figure.
    feed = replay.ReplayFeed(0, markers=False, crc=True)
    feed.feed(0, (1000).to_bytes(2, "big") + bytes(98))  # an FPDU of 1008 octets begins
    feed.feed(100, bytes(50))
    assert feed.held == 150
    feed.hand_over()
    assert feed.held == 0 and feed.receiver.buffered == 150

    path = tmp_path / "many.pcap"
    make_capture_module().make_capture(str(path), 12 << 20, seed=9, concurrent=8, mix="default")
    handed: list[int] = []
    shed = analyzer._Connection.shed

    def shedding(self: analyzer._Connection, why: str) -> None:
        handed.extend(d.replay.held for d in self.dirs if d.replay is not None)
        held = self.held()
        shed(self, why)
        assert all(d.replay is None or d.replay.held == 0 for d in self.dirs)
        assert self.held() <= held

    monkeypatch.setattr(analyzer._Connection, "shed", shedding)

    def reports(limits: Limits) -> list[object]:
        with path.open("rb") as f:
            outs = analyze_stream(read_tcp_packets(f), Options(), limits)
            return [
                [d.receiver for d in out.directions]
                for out in outs
                if isinstance(out, ConnectionReport)
            ]

    usual = reports(Limits())
    handed.clear()
    tight = reports(Limits(total=200 << 10))
    assert tight == usual
    assert any(handed)  # shedding handed gathered octets over
