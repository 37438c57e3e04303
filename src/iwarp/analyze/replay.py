"""Replaying a captured direction through the out-of-order MPA receiver.

The segments go to :class:`~iwarp.mpa.ooo.OutOfOrderReceiver` in capture
order, as an MPA-aware receiver at the capture point would have taken them:
the replay says how many ULPDUs it could pass before their turn (thanks to
markers), how many it delivered, the most octets it had to hold, and the
error it stopped at. It is a second, independent opinion on the stream: the
analyzer's walk and the receiver must find the same FPDUs and the same
first error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from iwarp.analyze.capture import TcpPacket
from iwarp.errors import MpaError
from iwarp.mpa.ooo import OutOfOrderReceiver

__all__ = ["RUN_OCTETS", "ReceiverReplay", "ReplayFeed", "replay_receiver"]


@dataclass(frozen=True, slots=True)
class ReceiverReplay:
    """What the out-of-order receiver made of one captured direction."""

    passed: int
    #: ULPDUs passed while an earlier part of the stream was still missing.
    passed_ahead: int
    delivered: int
    #: The most payload octets held between two segments.
    peak_buffered: int
    error: MpaError | None

    def to_json(self) -> dict[str, object]:
        error = self.error
        return {
            "passed": self.passed,
            "passed_ahead": self.passed_ahead,
            "delivered": self.delivered,
            "peak_buffered": self.peak_buffered,
            "error_code": None if error is None else int(error.mpa_code),
            "error_seq": None if error is None else error.stream_offset,
        }


#: Octets of in-order segments a replay gathers before handing them to the
#: receiver in one step (per direction: bounds what it holds).
RUN_OCTETS: Final = 32 << 10


class ReplayFeed:
    """A fresh receiver fed one direction's segments in capture order.

    Segments that continue each other are gathered (up to :data:`RUN_OCTETS`)
    and handed over as one run (:meth:`OutOfOrderReceiver.receive_run`),
    which gives the figures one call per segment would; any other segment
    first hands over what was gathered."""

    __slots__ = ("ahead", "delivered", "passed", "peak", "receiver", "run", "run_next", "run_size")

    def __init__(
        self, start_seq: int, *, markers: bool, crc: bool, either_fpduptr: bool = False
    ) -> None:
        # The default limit (64768, RFC 5044 §5.3) is the analyzer's too.
        self.receiver = OutOfOrderReceiver(
            start=start_seq, markers=markers, crc=crc, either_fpduptr=either_fpduptr
        )
        self.passed = self.ahead = self.delivered = self.peak = 0
        #: The segments gathered, the sequence number right after them, their octets.
        self.run: list[bytes] = []
        self.run_next = 0
        self.run_size = 0

    def feed(self, seq: int, payload: bytes) -> None:
        if not payload or self.receiver.error is not None:
            return
        run = self.run
        if run and seq == self.run_next and self.run_size < RUN_OCTETS:
            run.append(payload)
            self.run_size += len(payload)
            self.run_next = (seq + len(payload)) & 0xFFFFFFFF
            return
        self.hand_over()
        self.run = [payload]
        self.run_size = len(payload)
        self.run_next = (seq + len(payload)) & 0xFFFFFFFF

    @property
    def held(self) -> int:
        """Octets gathered and not handed over yet."""
        return self.run_size

    def hand_over(self) -> None:
        """Give the receiver the segments gathered so far."""
        run = self.run
        if not run:
            return
        first = (self.run_next - self.run_size) & 0xFFFFFFFF
        passed, ahead, delivered, peak = self.receiver.receive_run(first, run)
        self.passed += passed
        self.ahead += ahead
        self.delivered += delivered
        self.peak = max(self.peak, peak)
        self.run = []
        self.run_size = 0

    def result(self) -> ReceiverReplay:
        self.hand_over()
        return ReceiverReplay(
            self.passed, self.ahead, self.delivered, self.peak, self.receiver.error
        )


def replay_receiver(
    packets: Iterable[TcpPacket], start_seq: int, *, markers: bool, crc: bool
) -> ReceiverReplay:
    """Feed ``packets`` (one direction, capture order) to a fresh receiver."""
    feed = ReplayFeed(start_seq, markers=markers, crc=crc)
    for packet in packets:
        feed.feed(packet.seq, packet.payload)
    return feed.result()
