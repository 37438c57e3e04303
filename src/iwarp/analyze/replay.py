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

from iwarp.analyze.capture import TcpPacket
from iwarp.errors import MpaError
from iwarp.mpa.ooo import OutOfOrderReceiver

__all__ = ["ReceiverReplay", "ReplayFeed", "replay_receiver"]


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


class ReplayFeed:
    """A fresh receiver fed one direction's segments in capture order, as they come."""

    __slots__ = ("ahead", "delivered", "passed", "peak", "receiver")

    def __init__(
        self, start_seq: int, *, markers: bool, crc: bool, either_fpduptr: bool = False
    ) -> None:
        # The default limit (64768, RFC 5044 §5.3) is the analyzer's too.
        self.receiver = OutOfOrderReceiver(
            start=start_seq, markers=markers, crc=crc, either_fpduptr=either_fpduptr
        )
        self.passed = self.ahead = self.delivered = self.peak = 0

    def feed(self, seq: int, payload: bytes) -> None:
        receiver = self.receiver
        if not payload or receiver.error is not None:
            return
        passed, ahead, delivered = receiver.receive_count(seq, payload)
        self.passed += passed
        self.ahead += ahead
        self.delivered += delivered
        buffered = receiver.buffered
        self.peak = max(self.peak, buffered)

    def result(self) -> ReceiverReplay:
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
