"""iwarp.serving: what a server reports and when it collects, without I/O."""

from __future__ import annotations

import gc
import logging

import pytest

from iwarp import serving
from iwarp.serving import BurstRelease, handler_failed, report


def test_reports_go_to_the_hook_once_else_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[BaseException, object]] = []
    error = ValueError("boom")
    report(lambda exc, peer: seen.append((exc, peer)), error, ("10.0.0.1", 5))
    handler_failed(lambda exc, peer: seen.append((exc, peer)), error, "p")
    assert seen == [(error, ("10.0.0.1", 5)), (error, "p")]
    with caplog.at_level(logging.INFO, logger="iwarp"):
        report(None, error, "peer-a")
        handler_failed(None, error, "peer-b")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "connection from peer-a ended: boom"),
        ("ERROR", "handler for peer-b failed: ValueError('boom')"),
    ]


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def counting(generation: int = 2) -> int:
        calls.append(generation)
        return 0

    monkeypatch.setattr(gc, "collect", counting)
    return calls


def burst(release: BurstRelease, count: int) -> list[bool]:
    """Open ``count`` connections, then end them all; what each end decided."""
    for n in range(1, count + 1):
        release.opened(n)
    return [release.ended(left) for left in range(count - 1, -1, -1)]


def test_a_burst_collects_at_a_quarter_a_quarter_of_that_and_none(
    collections: list[int],
) -> None:
    release = BurstRelease(8)
    due = burst(release, 16)
    left = [15 - i for i, d in enumerate(due) if d]
    assert left == [4, 1, 0]
    assert collections == [2, 2, 2]
    # After the last collection at none, a small load is no burst.
    assert burst(release, 7) == [False] * 7
    assert burst(release, 8).count(True) == 2  # a new burst: at 2 and at 0


def test_below_the_threshold_or_switched_off_never_collects(collections: list[int]) -> None:
    assert burst(BurstRelease(8), 7) == [False] * 7
    assert burst(BurstRelease(0), 100) == [False] * 100
    assert collections == []


def test_with_the_cyclic_gc_off_nothing_is_collected_but_the_schedule_runs(
    collections: list[int],
) -> None:
    gc.disable()
    try:
        assert burst(BurstRelease(4), 4).count(True) == 2  # at 1 (a quarter of 4) and 0
    finally:
        gc.enable()
    assert collections == []


def test_the_default_threshold_is_read_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BurstRelease().threshold == 1024
    monkeypatch.setattr(serving, "RELEASE_AFTER", 3)
    assert BurstRelease().threshold == 3
