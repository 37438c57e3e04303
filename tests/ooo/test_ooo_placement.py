"""DDP on the out-of-order receiver: place on passing, complete on delivery.

Seed 000 Appendix 11.1.1.4: "out-of-order placement but NO out-of-order
delivery". Each DDP segment is self-describing (RFC 5041 §4): a tagged one
names its buffer and offset (STag, TO), an untagged one its queue, message
and offset (QN, MSN, MO). So a segment the receiver passes out of order can
be placed at once; a message is complete when the FPDU carrying its last
segment (L=1) is *delivered*, i.e. everything before it has arrived.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iwarp.ddp.segmentation import tagged_segments, untagged_segments
from iwarp.ddp.wire import (
    LAST_FLAG,
    TAGGED_FLAG,
    TAGGED_HEADER_SIZE,
    UNTAGGED_HEADER_SIZE,
    TaggedHeader,
    UntaggedHeader,
)
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.ooo import OutOfOrderReceiver, UlpduDelivered, UlpduPassed
from iwarp.mpa.wire import mulpdu
from iwarp.rdmap.wire import RdmapOpcode, rdmap_control

START = 0xFFFFF000  # the stream wraps the sequence space
#: ("tagged", STag) or ("untagged", (QN, MSN)).
Message = tuple[str, object]
MULPDU = mulpdu(1460, markers=True)


class Placer:
    """A minimal data sink: tagged buffers by STag, untagged ones by (QN, MSN)."""

    def __init__(self, tagged: dict[int, int], untagged: dict[tuple[int, int], int]) -> None:
        self.tagged = {stag: bytearray(size) for stag, size in tagged.items()}
        self.untagged = {key: bytearray(size) for key, size in untagged.items()}
        self.lasts: dict[int, Message] = {}  # FPDU offset -> message it ends
        self.completed: list[Message] = []

    def buffer(self, message: Message) -> bytearray:
        kind, key = message
        return self.tagged[key] if kind == "tagged" else self.untagged[key]  # type: ignore[index]

    def passed(self, event: UlpduPassed) -> None:
        ulpdu = event.ulpdu
        if ulpdu[0] & TAGGED_FLAG:
            header = TaggedHeader.unpack_from(ulpdu)
            data = ulpdu[TAGGED_HEADER_SIZE:]
            self.tagged[header.stag][header.to : header.to + len(data)] = data
            message: Message = ("tagged", header.stag)
        else:
            untagged = UntaggedHeader.unpack_from(ulpdu)
            data = ulpdu[UNTAGGED_HEADER_SIZE:]
            buffer = self.untagged[(untagged.qn, untagged.msn)]
            buffer[untagged.mo : untagged.mo + len(data)] = data
            message = ("untagged", (untagged.qn, untagged.msn))
        if ulpdu[0] & LAST_FLAG:
            self.lasts[event.offset] = message

    def delivered(self, event: UlpduDelivered) -> None:
        message = self.lasts.pop(event.offset, None)
        if message is not None:
            self.completed.append(message)


def messages() -> tuple[list[bytearray], dict[Message, bytes], Placer]:
    """A Write of 9000 octets, three Sends and another Write, as DDP segments.

    Returns the segments, what each message's buffer must hold at the end
    (in the order the messages were sent), and a sink ready for them.
    """
    rnd = random.Random(7)
    write1 = rnd.randbytes(9000)
    sends = [rnd.randbytes(n) for n in (10, 3000, 0)]
    write2 = rnd.randbytes(2500)
    rdma_write = rdmap_control(RdmapOpcode.RDMA_WRITE)
    send = rdmap_control(RdmapOpcode.SEND)
    segments = list(tagged_segments(write1, stag=0x100, to=0, rsvdulp=rdma_write, mulpdu=MULPDU))
    expected: dict[Message, bytes] = {("tagged", 0x100): write1}
    for msn, data in enumerate(sends, 1):
        segments += untagged_segments(data, qn=0, msn=msn, rsvdulp=send, mulpdu=MULPDU)
        expected[("untagged", (0, msn))] = data
    segments += tagged_segments(write2, stag=0x200, to=100, rsvdulp=rdma_write, mulpdu=MULPDU)
    expected[("tagged", 0x200)] = bytes(100) + write2
    placer = Placer(
        {0x100: 9000, 0x200: 2600}, {(0, msn): len(d) for msn, d in enumerate(sends, 1)}
    )
    return segments, expected, placer


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(100, 3000), min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    aligned=st.booleans(),
)
def test_out_of_order_placement_in_order_completion(
    sizes: list[int], seed: int, aligned: bool
) -> None:
    segments, expected, placer = messages()
    encoder = FpduEncoder(markers=True, crc=True, origin=START)
    fpdus = [encoder.encode_bytes(s) for s in segments]
    stream = b"".join(fpdus)
    pieces: list[tuple[int, bytes]] = []
    pos = 0
    if aligned:  # one FPDU per segment, as an MPA-aware sender sends them
        for fpdu in fpdus:
            pieces.append((pos, fpdu))
            pos += len(fpdu)
    else:  # a re-segmenting middle box
        turn = 0
        while pos < len(stream):
            step = sizes[turn % len(sizes)]
            pieces.append((pos, stream[pos : pos + step]))
            pos += step
            turn += 1
    random.Random(seed).shuffle(pieces)
    receiver = OutOfOrderReceiver(start=START, markers=True, crc=True)
    for offset, piece in pieces:
        for event in receiver.receive((START + offset) & 0xFFFFFFFF, piece):
            if isinstance(event, UlpduPassed):
                placer.passed(event)
            elif isinstance(event, UlpduDelivered):
                placer.delivered(event)
    assert receiver.error is None
    assert placer.completed == list(expected)  # completions in the order sent
    for message, data in expected.items():
        assert bytes(placer.buffer(message)) == data


def test_aligned_segments_in_reverse_are_all_placed_before_anything_completes() -> None:
    segments, expected, placer = messages()
    encoder = FpduEncoder(markers=True, crc=True, origin=START)
    fpdus = [encoder.encode_bytes(s) for s in segments]
    offsets = [sum(len(f) for f in fpdus[:i]) for i in range(len(fpdus))]
    receiver = OutOfOrderReceiver(start=START, markers=True, crc=True)
    kinds = []
    for offset, fpdu in reversed(list(zip(offsets, fpdus, strict=True))):
        for event in receiver.receive((START + offset) & 0xFFFFFFFF, fpdu):
            kinds.append(type(event).__name__)
            if isinstance(event, UlpduPassed):
                placer.passed(event)
            elif isinstance(event, UlpduDelivered):
                placer.delivered(event)
    # Each FPDU holds a marker or follows, by its length, one that does: all
    # are placed before the first FPDU arrives, which then completes them all.
    first_delivery = kinds.index("UlpduDelivered")
    assert kinds[:first_delivery].count("UlpduPassed") == len(fpdus)
    assert placer.completed == list(expected)
    for message, data in expected.items():
        assert bytes(placer.buffer(message)) == data
