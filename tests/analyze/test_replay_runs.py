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
