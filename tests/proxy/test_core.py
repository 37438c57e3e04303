"""The proxy's sans-IO core: every action on made-up conversations, markers
on and off, Rev 1 and 2, fed whole and octet by octet."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.analyze.mpa import PLAIN_OPCODES
from iwarp.analyze.records import ErrorRecord, FpduRecord
from iwarp.analyze.tcp import StreamWindow
from iwarp.ddp.wire import QueueNumber, TaggedHeader, UntaggedHeader
from iwarp.errors import MpaError, MpaErrorCode
from iwarp.mpa.framing import FpduDecoder, FpduEncoder
from iwarp.mpa.wire import ENHANCED_SIZE, EnhancedData, FrameFlags, MpaFrame
from iwarp.proxy.core import Close, ProxyConnection, Role, Send
from iwarp.proxy.spec import parse_fault
from iwarp.rdmap.wire import OPCODE_QUEUE, RdmapOpcode, TerminateHeader, rdmap_control

SEND = rdmap_control(RdmapOpcode.SEND)
WRITE = rdmap_control(RdmapOpcode.RDMA_WRITE)


def frames(rev: int, markers: bool) -> tuple[bytes, bytes]:
    flags = FrameFlags.CRC | (FrameFlags.MARKERS if markers else 0)
    pd = b""
    if rev == 2:
        flags |= FrameFlags.ENHANCED
        pd = EnhancedData(16, 16).pack()
    request = MpaFrame(is_request=True, flags=FrameFlags(flags), revision=rev, private_data=pd)
    reply = MpaFrame(is_request=False, flags=FrameFlags(flags), revision=rev, private_data=pd)
    return request.pack(), reply.pack()


def ulpdus(count: int, size: int = 700) -> list[bytes]:
    """Sends and tagged Writes in turn, payloads that differ."""
    out = []
    for i in range(count):
        payload = bytes((i + k) & 0xFF for k in range(size))
        if i % 2:
            out.append(TaggedHeader(stag=0x100, to=i * size, rsvdulp=WRITE).pack() + payload)
        else:
            out.append(UntaggedHeader(qn=0, msn=i // 2 + 1, rsvdulp=SEND).pack() + payload)
    return out


def stream(items: list[bytes], markers: bool) -> bytes:
    encoder = FpduEncoder(markers=markers, crc=True)
    return b"".join(encoder.encode_bytes(u) for u in items)


class Pair:
    """A core with both frames through it."""

    def __init__(
        self, specs: list[str], *, rev: int = 2, markers: bool = False, fpdu_records: bool = True
    ) -> None:
        faults = [parse_fault(s) for s in specs]
        self.core = ProxyConnection(1, faults, 0.0, fpdu_records=fpdu_records)
        self.markers = markers
        self.request, self.reply = frames(rev, markers)
        self.out: dict[Role, bytearray] = {"initiator": bytearray(), "responder": bytearray()}
        self.closes: list[Close] = []
        self.records: list[object] = []
        self.feed("initiator", self.request)
        self.feed("responder", self.reply)
        self.start = {role: len(data) for role, data in self.out.items()}

    def feed(self, sender: Role, data: bytes, *, now: float = 0.0, step: int = 0) -> None:
        pieces = [data] if not step else [data[i : i + step] for i in range(0, len(data), step)]
        for piece in pieces:
            self.core.receive(sender, piece, now)
            self.collect()

    def collect(self) -> list[Send]:
        sends = []
        for item in self.core.take_output():
            if isinstance(item, Send):
                self.out[item.to] += item.data
                sends.append(item)
            else:
                self.closes.append(item)
        self.records += self.core.take_records()
        return sends

    def received(self, role: Role) -> list[bytes]:
        """The ULPDUs ``role`` would decode (raises MpaError like a receiver)."""
        got, error = self.decoded(role)
        if error is not None:
            raise error
        return got

    def decoded(self, role: Role) -> tuple[list[bytes], MpaError | None]:
        """The ULPDUs before the first error, and the error."""
        decoder = FpduDecoder(markers=self.markers, crc=True)
        got = [bytes(u) for u in decoder.feed(bytes(self.out[role][self.start[role] :]))]
        return got, decoder.error


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("rev", [1, 2])
def test_clean_forwarding_is_octet_exact(markers: bool, rev: int) -> None:
    items = ulpdus(6)
    pair = Pair([], rev=rev, markers=markers)
    data = stream(items, markers)
    pair.feed("initiator", data, step=333)
    assert bytes(pair.out["responder"]) == pair.request + data
    assert bytes(pair.out["initiator"]) == pair.reply
    fpdus = [r for r in pair.records if isinstance(r, FpduRecord)]
    assert len(fpdus) == 6 and all(r.crc_ok for r in fpdus)
    assert pair.core.summary()["fpdus_to_responder"] == 6


@pytest.mark.parametrize("markers", [False, True])
def test_corrupt_crc_hits_only_the_nth(markers: bool) -> None:
    items = ulpdus(4)
    pair = Pair(["to=responder; nth=2; corrupt-crc"], markers=markers)
    pair.feed("initiator", stream(items, markers))
    got, error = pair.decoded("responder")
    assert error is not None and error.mpa_code == MpaErrorCode.CRC_MISMATCH
    assert got == items[:1]
    faults = pair.core.summary()["faults"]
    assert isinstance(faults, list) and len(faults) == 1
    applied = faults[0]
    assert applied["action"] == "corrupt-crc" and applied["at"] == "fpdu 2"


@pytest.mark.parametrize("markers", [False, True])
def test_flip_payload_keeps_the_sent_crc(markers: bool) -> None:
    items = ulpdus(3)
    pair = Pair(["to=responder; nth=3; flip-payload"], markers=markers)
    pair.feed("initiator", stream(items, markers))
    raw = bytes(pair.out["responder"][pair.start["responder"] :])
    assert len(raw) == len(stream(items, markers))
    with pytest.raises(MpaError) as caught:
        pair.received("responder")
    assert caught.value.mpa_code == MpaErrorCode.CRC_MISMATCH


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize(
    ("spec", "check"),
    [
        ("rewrite stag=0xdead", lambda u: TaggedHeader.unpack_from(u).stag == 0xDEAD),
        ("rewrite to=7", lambda u: TaggedHeader.unpack_from(u).to == 7),
        ("rewrite opcode=send", lambda u: u[1] & 0x0F == RdmapOpcode.SEND),
        ("rewrite rdmap_version=0", lambda u: u[1] >> 6 == 0),
        ("rewrite ddp_version=2", lambda u: u[0] & 3 == 2),
    ],
)
def test_rewrite_recomputes_the_crc(markers: bool, spec: str, check: object) -> None:
    items = ulpdus(4)
    pair = Pair([f"to=responder; tagged; {spec}"], markers=markers)
    pair.feed("initiator", stream(items, markers), step=100)
    got = pair.received("responder")  # CRC and markers right: no MpaError
    assert len(got) == 4
    assert callable(check) and check(got[1])
    assert got[0] == items[0] and got[2:] == items[2:]


def test_rewrite_msn_mo_qn_only_on_untagged() -> None:
    items = ulpdus(4)
    pair = Pair(["to=responder; rewrite msn=9; every"])
    pair.feed("initiator", stream(items, False))
    got = pair.received("responder")
    assert [UntaggedHeader.unpack_from(u).msn for u in got[::2]] == [9, 9]
    assert got[1::2] == items[1::2]


def test_rewrite_length_draws_a_framing_error() -> None:
    pair = Pair(["to=responder; rewrite length=100"])
    pair.feed("initiator", stream(ulpdus(2), False))
    got, error = pair.decoded("responder")
    assert got == [] and error is not None and error.mpa_code == MpaErrorCode.CRC_MISMATCH


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("rev", [1, 2])
def test_drop_and_duplicate_keep_markers_and_crc_consistent(markers: bool, rev: int) -> None:
    items = ulpdus(8, size=900)
    pair = Pair(
        ["to=responder; nth=2; drop-fpdu", "to=responder; nth=5; duplicate"],
        rev=rev,
        markers=markers,
    )
    pair.feed("initiator", stream(items, markers), step=97)
    got = pair.received("responder")
    assert got == [items[0], *items[2:5], items[5], *items[5:]]


@pytest.mark.parametrize("markers", [False, True])
def test_resegment_changes_no_octet(markers: bool) -> None:
    items = ulpdus(3)
    pair = Pair(["to=responder; every; resegment 1"], markers=markers)
    data = stream(items, markers)
    pair.core.receive("initiator", data, 0.0)
    sends = pair.collect()
    assert all(len(s.data) == 1 for s in sends)
    assert bytes(pair.out["responder"]) == pair.request + data


@pytest.mark.parametrize("markers", [False, True])
def test_terminate_is_injected_and_the_rest_withheld(markers: bool) -> None:
    items = ulpdus(4)
    pair = Pair(["to=initiator; nth=1; terminate ddp/1/0"], markers=markers)
    pair.feed("responder", stream(items, markers))
    got = pair.received("initiator")
    assert len(got) == 1
    header = UntaggedHeader.unpack_from(got[0])
    assert header.qn == 2 and header.msn == 1 and got[0][1] & 0x0F == RdmapOpcode.TERMINATE
    terminate = TerminateHeader.unpack_from(got[0], 18)
    assert (terminate.layer, terminate.etype, terminate.code) == (1, 1, 0)


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_fin_and_rst_close_toward_that_end(how: str) -> None:
    items = ulpdus(3)
    pair = Pair([f"to=responder; nth=2; {how}"])
    pair.feed("initiator", stream(items, False))
    assert pair.received("responder") == items[:1]
    assert Close("responder", how) in pair.closes  # type: ignore[arg-type]
    if how == "rst":
        assert Close("initiator", "close") in pair.closes


def test_delay_holds_that_direction_and_sets_the_timer() -> None:
    items = ulpdus(3)
    pair = Pair(["to=responder; nth=2; delay 250"])
    pair.feed("initiator", stream(items, False), now=10.0)
    assert pair.received("responder") == items[:1]
    assert pair.core.reading_paused("initiator")
    assert pair.core.get_timer() == pytest.approx(10.25)
    pair.feed("responder", stream(ulpdus(1), False), now=10.1)  # the other way flows
    assert len(pair.received("initiator")) == 1
    pair.core.handle_timer(10.25)
    pair.collect()
    assert pair.received("responder") == items
    assert not pair.core.reading_paused("initiator")


def test_stall_holds_both_directions() -> None:
    pair = Pair(["to=responder; stall 2"])
    pair.feed("initiator", stream(ulpdus(1), False), now=1.0)
    pair.feed("responder", stream(ulpdus(1), False), now=1.5)
    assert pair.received("responder") == [] and pair.received("initiator") == []
    pair.core.handle_timer(3.0)
    pair.collect()
    assert len(pair.received("responder")) == 1 and len(pair.received("initiator")) == 1


def test_frame_rewrite_and_the_framing_that_follows() -> None:
    """M=1 written into the Request: the Responder then sends markers, and
    the proxy follows that direction with markers."""
    core = ProxyConnection(1, [parse_fault("to=responder; rewrite m=1")], 0.0)
    request, reply = frames(2, False)
    core.receive("initiator", request, 0.0)
    (sent,) = [o for o in core.take_output() if isinstance(o, Send)]
    assert sent.data[16] & FrameFlags.MARKERS
    core.receive("responder", reply, 0.0)
    core.receive("responder", stream(ulpdus(3), True), 0.0)
    records = core.take_records()
    assert [r.crc_ok for r in records if isinstance(r, FpduRecord)] == [True] * 3
    assert not [r for r in records if isinstance(r, ErrorRecord)]


def test_frame_rewrite_ird() -> None:
    core = ProxyConnection(1, [parse_fault("to=initiator; rewrite ird=3")], 0.0)
    request, reply = frames(2, False)
    core.receive("initiator", request, 0.0)
    core.receive("responder", reply, 0.0)
    sent = b"".join(
        o.data for o in core.take_output() if isinstance(o, Send) and o.to == "initiator"
    )
    assert EnhancedData.unpack_from(sent, 20).ird == 3
    assert len(sent) == 20 + ENHANCED_SIZE


def test_malformed_stream_is_forwarded_as_it_is_and_marked() -> None:
    pair = Pair(["to=responder; every; rewrite stag=1"])
    junk = bytes(range(256)) * 40
    pair.feed("initiator", junk, step=500)
    pair.core.end("initiator", "close", 1.0)
    pair.collect()
    assert bytes(pair.out["responder"]) == pair.request + junk
    assert any(isinstance(r, ErrorRecord) for r in pair.records)


def test_not_mpa_is_forwarded() -> None:
    core = ProxyConnection(1, [], 0.0)
    core.receive("initiator", b"GET / HTTP/1.1\r\nHost: example\r\n\r\n", 0.0)
    (sent,) = core.take_output()
    assert isinstance(sent, Send) and sent.data.startswith(b"GET")


def test_a_terminate_and_the_ends_are_reported() -> None:
    pair = Pair(["to=responder; nth=1; corrupt-crc"])
    pair.feed("initiator", stream(ulpdus(1), False))
    term = UntaggedHeader(qn=2, msn=1, rsvdulp=rdmap_control(RdmapOpcode.TERMINATE)).pack()
    pair.feed("responder", stream([term + TerminateHeader(2, 0, 2).pack()], False))
    pair.core.end("responder", "reset", 1.0)
    summary = pair.core.summary()
    assert str(summary["responder_after"]).startswith("terminate 2/0/2")
    assert str(summary["responder_after"]).endswith("reset")
    assert summary["initiator_after"] == "silence"


def _terminate_ulpdu(msn: int) -> bytes:
    header = UntaggedHeader(qn=2, msn=msn, rsvdulp=rdmap_control(RdmapOpcode.TERMINATE))
    return header.pack() + TerminateHeader(1, 1, 0).pack()


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("step", [0, 1, 1000, 4096])
def test_counting_without_records_sees_what_records_see(markers: bool, step: int) -> None:
    """Without FPDU records (``--quiet``, no fault) clean FPDUs are counted in
    bulk: the summary, errors and notes are those of the full decode, and
    the octets go on as they came."""
    items = ulpdus(40, size=1400)
    items[17] = _terminate_ulpdu(1)  # amid clean FPDUs: still the end's answer
    data = bytearray(stream(items, markers))
    data[len(stream(items[:30], markers)) - 1] ^= 0x10  # the 30th FPDU's CRC: an error
    full = Pair([], markers=markers)
    quiet = Pair([], markers=markers, fpdu_records=False)
    for pair in (full, quiet):
        pair.feed("initiator", bytes(data), step=step)
        pair.core.end("initiator", "close", 1.0)
    assert quiet.out == full.out
    assert bytes(quiet.out["responder"]) == full.request + bytes(data)
    assert quiet.core.summary() == full.core.summary()
    summary = quiet.core.summary()
    assert summary["fpdus_to_responder"] == 40 and summary["errors"] == 1
    assert str(summary["initiator_after"]).startswith("terminate 1/1/0")
    others = [r for r in full.records if not isinstance(r, FpduRecord)]
    assert quiet.records == others and any(isinstance(r, ErrorRecord) for r in others)


def _read_request_ulpdu(msn: int) -> bytes:
    header = UntaggedHeader(qn=1, msn=msn, rsvdulp=rdmap_control(RdmapOpcode.RDMA_READ_REQUEST))
    return header.pack() + bytes(28)  # not counted in bulk: decoded in full


@settings(max_examples=80, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 9000), min_size=1, max_size=20),
    markers=st.booleans(),
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=12),
    damage=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=2),
    odd=st.lists(st.integers(0, 11), max_size=3),
)
def test_counting_reads_in_place_holds_one_fpdu_and_sees_what_records_see(
    cuts: list[int],
    markers: bool,
    sizes: list[int],
    damage: list[tuple[int, int]],
    odd: list[int],
) -> None:
    """Counting (no FPDU records, no fault) takes clean FPDUs from each read
    as it came, not from a copy: the window holds at most the FPDU a read
    ends inside, or what does not count as clean; and the summary, errors
    and notes are those of the full decode, at any segmentation, on damaged
    streams and among FPDUs that are not counted in bulk."""
    items = [u for size in sizes for u in ulpdus(1, size)]
    for i in odd:  # a Terminate or a Read Request where the walk must stop
        if i < len(items):
            items[i] = _terminate_ulpdu(9) if i % 2 else _read_request_ulpdu(i)
    data = bytearray(stream(items, markers))
    for at, change in damage:
        data[at % len(data)] ^= change
    largest = max(len(stream([u], markers)) for u in items) + 2 * 4 + 8
    full = Pair([], markers=markers)
    quiet = Pair([], markers=markers, fpdu_records=False)
    full.feed("initiator", bytes(data))
    at = 0
    window = quiet.core.flows["initiator"].window
    for cut in [*cuts, len(data)]:
        quiet.feed("initiator", bytes(data[at : at + cut]))
        at += cut
        if not damage:
            assert window.held <= largest
    for pair in (full, quiet):
        pair.core.end("initiator", "close", 1.0)
    assert quiet.out == full.out
    assert quiet.core.summary() == full.core.summary()
    assert quiet.records == [r for r in full.records if not isinstance(r, FpduRecord)]


@pytest.mark.parametrize("markers", [False, True])
def test_clean_reads_are_counted_in_place_not_copied(
    monkeypatch: pytest.MonkeyPatch, markers: bool
) -> None:
    """A quiet proxy's clean reads are not copied into the window to be
    counted (copying and cutting off a read's size per read cost more than
    the forwarding): only the FPDU a read ends inside goes in."""
    appended: list[int] = []
    append = StreamWindow.append

    def spy(self: StreamWindow, offset: int, data: bytes | memoryview, frame: int) -> None:
        appended.append(len(data))
        append(self, offset, data, frame)

    quiet = Pair([], markers=markers, fpdu_records=False)
    monkeypatch.setattr(StreamWindow, "append", spy)
    data = stream(ulpdus(200, size=1400), markers)
    reads = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    for read in reads:
        quiet.feed("initiator", read)
    assert bytes(quiet.out["responder"]) == quiet.request + data
    assert quiet.core.summary()["fpdus_to_responder"] == 200
    assert sum(appended) <= len(reads) * 1600 < len(data) // 20


def test_bulk_counting_never_hides_a_terminate() -> None:
    """Clean FPDUs counted in bulk are only those of PLAIN_OPCODES: a
    Terminate always comes back from the walker as a record, whose code the
    summary reports."""
    for opcode in PLAIN_OPCODES:
        assert opcode != RdmapOpcode.TERMINATE
        assert OPCODE_QUEUE.get(opcode) != QueueNumber.TERMINATE


def test_idle_timeout_closes_both_ends() -> None:
    core = ProxyConnection(1, [], 0.0, idle_timeout=5.0)
    assert core.get_timer() == 5.0
    core.handle_timer(5.0)
    assert {o.to for o in core.take_output() if isinstance(o, Close)} == {"initiator", "responder"}
    assert core.summary()["idle_timeout"] is True


def test_at_most_one_fpdu_is_held() -> None:
    """A fault still armed holds octets to FPDU boundaries, never more."""
    pair = Pair(["to=responder; opcode == terminate; corrupt-crc"])
    data = stream(ulpdus(20, size=5000), False)
    most = 0
    for i in range(0, len(data), 1460):
        pair.feed("initiator", data[i : i + 1460])
        flow = pair.core.flows["initiator"]
        most = max(most, flow.window.held, flow.window.end - flow.sent)
    assert most < 5000 + 1460 + 64
    assert bytes(pair.out["responder"]) == pair.request + data


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    markers=st.booleans(),
    drop=st.integers(1, 6),
)
def test_any_segmentation_gives_the_same_output(cuts: list[int], markers: bool, drop: int) -> None:
    items = ulpdus(6, size=600)
    data = stream(items, markers)
    whole = Pair([f"to=responder; nth={drop}; drop-fpdu"], markers=markers)
    whole.feed("initiator", data)
    pieces = Pair([f"to=responder; nth={drop}; drop-fpdu"], markers=markers)
    at = 0
    for cut in cuts:
        pieces.feed("initiator", data[at : at + cut])
        at += cut
    pieces.feed("initiator", data[at:])
    assert pieces.out == whole.out
    assert whole.received("responder") == items[: drop - 1] + items[drop:]


FAULTS = [
    "to=responder; every; corrupt-crc",
    "to=responder; nth=2; drop-fpdu",
    "to=responder; every; duplicate",
    "to=responder; every; rewrite length=3",
    "to=responder; tagged; rewrite stag=5",
    "to=responder; every; resegment 3",
    "to=responder; nth=3; terminate ddp/1/0",
    "to=responder; nth=2; delay 5",
]


@settings(max_examples=60, deadline=None)
@given(
    damage=st.lists(
        st.tuples(st.integers(0, 6000), st.binary(min_size=1, max_size=40)), max_size=6
    ),
    cuts=st.lists(st.integers(1, 2000), min_size=1, max_size=12),
    markers=st.booleans(),
    specs=st.lists(st.sampled_from(FAULTS), max_size=3),
    ending=st.sampled_from(["close", "reset", None]),
)
def test_damaged_streams_never_crash_and_stay_bounded(
    damage: list[tuple[int, bytes]],
    cuts: list[int],
    markers: bool,
    specs: list[str],
    ending: str | None,
) -> None:
    """Whatever a sender sends after the frames, the core forwards, marks
    and ends without an exception, holding at most the bound."""
    data = bytearray(stream(ulpdus(8, size=500), markers))
    for at, junk in damage:
        data[at : at + len(junk)] = junk
    pair = Pair(specs, markers=markers)
    at = 0
    for cut in [*cuts, len(data)]:
        pair.feed("initiator", bytes(data[at : at + cut]), now=at / 1e6)
        flow = pair.core.flows["initiator"]
        assert flow.window.held <= 2 * 66_000 + 2000
        at += cut
    if ending == "close":
        pair.core.end("initiator", "close", 1.0)
    elif ending == "reset":
        pair.core.end("initiator", "reset", 1.0)
    pair.core.handle_timer(100.0)
    pair.collect()
    assert pair.core.summary()["connection"] == 1
    if not specs:  # no fault: every octet went on unchanged
        assert bytes(pair.out["responder"][pair.start["responder"] :]) == bytes(data)


CULLEY_LINE = b"iwarp culley-02 framing follows\n"


@pytest.mark.parametrize("prefix", [CULLEY_LINE, b"", b"hello\n"])
def test_culley_streams_are_followed_after_their_streaming_part(prefix: bytes) -> None:
    """draft-culley-02: no frames; streaming, then FPDUs with markers and
    CRCs from the first FPDU on. Once found, FPDUs are counted and faults
    apply to them."""
    core = ProxyConnection(
        1, [parse_fault("to=responder; nth=3; corrupt-crc")], 0.0, startup="culley"
    )
    items = ulpdus(5)
    data = stream(items, True)
    first = len(stream(items[:1], True))
    out = bytearray()
    for piece in (prefix, data[:first], data[first:]):
        core.receive("initiator", piece, 0.0)
        out += b"".join(o.data for o in core.take_output() if isinstance(o, Send))
    core.end("initiator", "close", 1.0)
    out += b"".join(o.data for o in core.take_output() if isinstance(o, Send))
    assert out[: len(prefix)] == prefix
    decoder = FpduDecoder(markers=True, crc=True)
    got = [bytes(u) for u in decoder.feed(bytes(out[len(prefix) :]))]
    assert got == items[:2]
    assert decoder.error is not None and decoder.error.mpa_code == MpaErrorCode.CRC_MISMATCH
    summary = core.summary()
    assert summary["fpdus_to_responder"] == 5
    faults = summary["faults"]
    assert isinstance(faults, list) and faults[0]["at"] == "fpdu 3"


def test_culley_stream_without_fpdus_is_forwarded_as_it_is() -> None:
    core = ProxyConnection(1, [], 0.0, startup="culley")
    core.receive("initiator", b"plain streaming text\n" * 10, 0.0)
    core.end("initiator", "close", 1.0)
    sent = b"".join(o.data for o in core.take_output() if isinstance(o, Send))
    assert sent == b"plain streaming text\n" * 10
    notes = [r for r in core.take_records() if "no culley-02 FPDUs" in getattr(r, "message", "")]
    assert notes and core.summary()["fpdus_to_responder"] == 0
