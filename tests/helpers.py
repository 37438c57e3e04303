"""Helpers shared by the test suites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from iwarp._typing import Buffer
from iwarp.mpa.connection import MpaConnection
from iwarp.mpa.events import Event


def all_splits(data: bytes) -> Iterator[list[bytes]]:
    """Every way of cutting ``data`` into two chunks, and one octet at a time."""
    for cut in range(len(data) + 1):
        yield [data[:cut], data[cut:]]
    yield [data[i : i + 1] for i in range(len(data))]


def chunked(data: bytes, sizes: list[int]) -> list[bytes]:
    """Cut ``data`` into chunks of the given sizes, cycling through them."""
    out: list[bytes] = []
    pos = 0
    turn = 0
    while pos < len(data):
        step = max(1, sizes[turn % len(sizes)]) if sizes else len(data)
        out.append(data[pos : pos + step])
        pos += step
        turn += 1
    return out


class MpaConn(MpaConnection):
    """An MpaConnection that also keeps the events its input methods return,
    for :meth:`take_events`: a test feeds several chunks (or a timer) and
    then looks at everything that happened, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._kept: list[Event] = []
        super().__init__(*args, **kwargs)

    def receive_data(self, data: Buffer, now: float) -> list[Event]:
        events = super().receive_data(data, now)
        self._kept.extend(events)
        return events

    def handle_timer(self, now: float) -> list[Event]:
        events = super().handle_timer(now)
        self._kept.extend(events)
        return events

    def connection_lost(self, now: float, reason: str = "connection reset") -> list[Event]:
        events = super().connection_lost(now, reason)
        self._kept.extend(events)
        return events

    def take_events(self) -> list[Event]:
        kept, self._kept = self._kept, []
        return kept + super().take_events()


def out(conn: Any) -> bytes:
    """Everything ``conn`` (any core) has to send, joined."""
    return b"".join(bytes(chunk) for chunk in conn.data_to_send())


class RecordingDriver:
    """A :class:`iwarp.contract.FrontDriver` without I/O for a front under
    test: it counts what the front asks of it; ``flush`` and ``write`` keep
    nothing (the test moves the core's octets itself)."""

    def __init__(self) -> None:
        self.gone = False
        self.calls: list[str] = []
        self.written: list[bytes] = []
        self.woken: list[object] = []
        self.reading = True

    def now(self) -> float:
        return 0.0

    def flush(self) -> None:
        self.calls.append("flush")

    def write(self, data: Buffer) -> None:
        self.written.append(bytes(data))

    def wake(self, key: object = None) -> None:
        self.woken.append(key)

    def started(self) -> None:
        self.calls.append("started")

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.calls.append("close")
