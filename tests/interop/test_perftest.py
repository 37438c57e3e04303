"""iwarp's side of perftest -R: the key message codec, the report parser, the server over loopback.

The loopback tests play perftest's client with the asyncio verbs API, in
perftest's order (channel, data connection, key messages, test, report);
the siw test runs the real ib_write_bw in the guest against the server.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.asyncio.rdma import QueuePair, connect
from iwarp.errors import LocalProtocolError
from iwarp.interop.perftest import (
    CREDIT,
    DEST_SIZE,
    REGION_BASE,
    PerftestError,
    PerftestResult,
    PingpongDest,
    answer,
    credit_interval,
    parse_report,
    perftest_client,
    perftest_server,
    receive_depth,
    summarize,
)
from iwarp.mpa.config import MpaConfig
from iwarp.rdmap.memory import Access, ProtectionDomain

# Column widths and tabs as ib_write_bw / ib_send_lat 4.5 print them.
BW_OUTPUT = """\
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 4096       100              4.90               4.28   		   0.001096
---------------------------------------------------------------------------------------
"""
LAT_OUTPUT = """\
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\x20
 4096    100          313.95         13649.77      595.07   	       2443.47     \
	2927.15		13649.77 		13649.77
---------------------------------------------------------------------------------------
"""


def test_key_message_layout_is_perftests() -> None:
    """Big-endian fields at the C struct's x86-64 offsets, 4 padding octets before vaddr."""
    key = PingpongDest(
        lid=0x0102,
        out_reads=128,
        qpn=0x000002,
        psn=0xABCDEF,
        rkey=0xDEADBEEF,
        vaddr=0x0000_7F00_1234_5678,
        gid=bytes(range(16)),
        srqn=7,
        gid_index=-1,
    )
    wire = key.pack()
    assert len(wire) == DEST_SIZE == 56
    assert wire[0:4] == b"\x00\x00\x01\x02"
    assert wire[4:8] == (128).to_bytes(4, "big")
    assert wire[12:16] == b"\x00\xab\xcd\xef"
    assert wire[16:20] == b"\xde\xad\xbe\xef"
    assert wire[20:24] == bytes(4)
    assert wire[24:32] == (0x7F00_1234_5678).to_bytes(8, "big")
    assert wire[32:48] == bytes(range(16))
    assert wire[48:52] == (7).to_bytes(4, "big")
    assert wire[52:56] == b"\xff\xff\xff\xff"
    assert PingpongDest.unpack_from(b"xx" + wire, 2) == key


@settings(max_examples=50)
@given(
    st.builds(
        PingpongDest,
        lid=st.integers(-(2**31), 2**31 - 1),
        out_reads=st.integers(-(2**31), 2**31 - 1),
        qpn=st.integers(0, 2**24 - 1),
        psn=st.integers(0, 2**24 - 1),
        rkey=st.integers(0, 2**32 - 1),
        vaddr=st.integers(0, 2**64 - 1),
        gid=st.binary(min_size=16, max_size=16),
        srqn=st.integers(0, 2**32 - 1),
        gid_index=st.integers(-1, 255),
    )
)
def test_key_message_round_trip(key: PingpongDest) -> None:
    assert PingpongDest.unpack_from(key.pack()) == key


@settings(max_examples=100)
@given(st.binary(max_size=80), st.integers(0, 90))
def test_arbitrary_bytes_parse_or_raise_perftest_error(data: bytes, offset: int) -> None:
    try:
        key = PingpongDest.unpack_from(data, offset)
    except PerftestError:
        assert len(data) - offset < DEST_SIZE
    else:
        assert key.pack() == data[offset : offset + DEST_SIZE]


def test_channel_answers() -> None:
    mine = PingpongDest(rkey=5, vaddr=REGION_BASE)
    assert answer(bytes(DEST_SIZE), mine) == mine.pack()
    version = b"6.10".ljust(16, b"\0")
    assert answer(version, mine) == version  # the version, sizes, MTU, reports: echoed
    assert answer(b"4\0", mine) == b"4\0"


def test_credit_rule_matches_perftest_depths() -> None:
    assert receive_depth(100) == 100 and credit_interval(100) == 33
    assert receive_depth(5000) == 512 and credit_interval(5000) == 170
    assert credit_interval(2) == 1
    assert CREDIT.pack(33) == b"\x21\x00\x00\x00"  # the receiver's host order (x86)


def test_reports_parse() -> None:
    bw = parse_report(BW_OUTPUT)
    assert bw is not None
    assert bw["BW average[MB/sec]"] == 4.28 and bw["#iterations"] == 100
    assert summarize(bw).startswith("4096 B x 100: BW average 4.28 MB/s, peak 4.90 MB/s")
    lat = parse_report(LAT_OUTPUT)
    assert lat is not None
    assert lat["t_typical[usec]"] == 595.07 and lat["99.9% percentile[usec]"] == 13649.77
    assert "latency typical 595.07 us" in summarize(lat)
    assert parse_report("Couldn't connect to 10.0.2.100:18515\n") is None
    assert parse_report(BW_OUTPUT.split("\n 4096", maxsplit=1)[0] + "\n Killed\n") is None


def test_case_judge_needs_exit_0_and_finite_numbers() -> None:
    from iwarp.interop.cases import perftest_measured
    from iwarp.interop.host import ProcResult
    from iwarp.interop.suite import NOT_FINITE, Run
    from iwarp.interop.vm import JobResult

    iwarp = ProcResult(0, '{"type": "summary"}', 1.0)
    ok, why = perftest_measured(Run(guest=JobResult(0, LAT_OUTPUT, 5.0), iwarp=iwarp))
    assert ok and "latency typical 595.07 us" in why
    no_table = perftest_measured(Run(guest=JobResult(0, "done\n", 5.0), iwarp=iwarp))
    assert no_table == (False, "perftest exit 0 but printed no result table")
    killed = perftest_measured(Run(guest=JobResult(137, BW_OUTPUT, 5.0), iwarp=iwarp))
    assert not killed[0] and "guest exit 137" in killed[1]
    iwarp_failed = ProcResult(1, '{"errors": ["x"]}', 1.0)
    assert not perftest_measured(Run(guest=JobResult(0, BW_OUTPUT, 5.0), iwarp=iwarp_failed))[0]
    inf = LAT_OUTPUT.replace("595.07", "inf")
    ok, why = perftest_measured(Run(guest=JobResult(0, inf, 5.0), iwarp=iwarp))
    # The reason names the figure that is not finite; the suite knows it by its start.
    assert not ok and why.startswith(NOT_FINITE) and "t_typical[usec] inf" in why


# -- the server over loopback, against a perftest-shaped client ----------------------------


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _xchg(channel: QueuePair, message: bytes) -> bytes:
    """One lockstep exchange: the client Sends first, the server answers."""
    await channel.send(message)
    return await asyncio.wait_for(channel.receive(), 5)


async def _client_setup(
    port: int, my_key: PingpongDest, pd: ProtectionDomain, config: MpaConfig | None = None
) -> tuple[QueuePair, QueuePair, PingpongDest]:
    """perftest's client up to its test: channel, data connection, key messages."""
    channel = await connect("127.0.0.1", port, receive_buffers=2, receive_size=64)
    version = b"6.10".ljust(16, b"\0")
    assert await _xchg(channel, version) == version
    for word in (struct.pack(">i", 4096), struct.pack(">i", 64), b"4\0"):
        assert await _xchg(channel, word) == word
    empty = PingpongDest()
    theirs = PingpongDest.unpack_from(await _xchg(channel, empty.pack()))
    data = await connect("127.0.0.1", port, pd=pd, config=config)
    for _ in range(4):
        theirs = PingpongDest.unpack_from(await _xchg(channel, my_key.pack()))
    return channel, data, theirs


async def _client_end(channel: QueuePair, data: QueuePair, my_key: PingpongDest) -> None:
    await _xchg(channel, my_key.pack())  # "client is done"
    for value in (4096, 100, 1.5, 1.25, 0.001):  # bw report: echoed
        word = struct.pack(">d" if isinstance(value, float) else ">Q", value)
        assert await _xchg(channel, word) == word
    await _xchg(channel, my_key.pack())  # ctx_close_connection
    await data.close()
    await channel.close()


async def _write_read_run(port: int) -> tuple[PerftestResult, bytes]:
    server = asyncio.create_task(
        perftest_server("127.0.0.1", port, test="write_bw", size=4096, iterations=3, timeout=10)
    )
    await asyncio.sleep(0.2)
    pd = ProtectionDomain()
    sink = pd.register(bytearray(4096), Access.LOCAL_WRITE)
    mine = PingpongDest(qpn=2, psn=9, rkey=0, vaddr=0, out_reads=16)
    channel, data, theirs = await _client_setup(port, mine, pd)
    assert (theirs.rkey, theirs.vaddr, theirs.out_reads) != (0, 0, 0)
    assert theirs.vaddr == REGION_BASE and theirs.out_reads == 16
    for i in range(3):
        await data.rdma_write(bytes([i + 1]) * 4096, theirs.rkey, theirs.vaddr)
    read = await data.rdma_read(sink, theirs.rkey, theirs.vaddr)
    got = bytes(sink.view[:read])
    await _client_end(channel, data, mine)
    return await server, got


def test_write_bw_server_over_loopback() -> None:
    result, read_back = asyncio.run(asyncio.wait_for(_write_read_run(_port()), 20))
    assert result.ok, result.errors
    assert read_back == b"\x03" * 4096  # the last Write is in the region the key names
    assert result.data_connections == 1
    assert len(result.keys) == 7 and result.channel_messages == 4 + 7 + 5


async def _send_bw_run(port: int, sends: int) -> tuple[PerftestResult, int]:
    server = asyncio.create_task(
        perftest_server("127.0.0.1", port, test="send_bw", size=256, iterations=sends, timeout=10)
    )
    await asyncio.sleep(0.2)
    pd = ProtectionDomain()
    credit = bytearray(4)
    word = pd.register(credit, Access.LOCAL_WRITE | Access.REMOTE_WRITE, address=0x1000)
    # ib_send_bw on iWARP names its credit word in its key messages.
    mine = PingpongDest(qpn=2, rkey=word.stag, vaddr=0x1000)
    channel, data, _ = await _client_setup(port, mine, pd)
    window = receive_depth(sends)
    for sent in range(sends):
        # perftest's sender: at most one receive depth beyond the last credit.
        while sent + 1 - CREDIT.unpack(credit)[0] >= window:
            await asyncio.sleep(0.001)
        await data.send(bytes(256))
    await asyncio.sleep(0.2)
    last_credit: int = CREDIT.unpack(credit)[0]
    await _client_end(channel, data, mine)
    return await server, last_credit


def test_send_bw_server_writes_credits() -> None:
    result, credit = asyncio.run(asyncio.wait_for(_send_bw_run(_port(), 12), 20))
    assert result.ok, result.errors
    assert result.data_messages == 12
    assert credit == 12  # every credit_interval(12) == 4 Sends: 4, 8, 12


async def _client_against_server(
    port: int, test: str
) -> tuple[PerftestResult, PerftestResult, float]:
    server = asyncio.create_task(
        perftest_server("127.0.0.1", port, test=test, size=1024, iterations=20, timeout=10)
    )
    await asyncio.sleep(0.2)
    client, bandwidth = await perftest_client(
        "127.0.0.1", port, test=test, size=1024, iterations=20, timeout=10
    )
    return client, await server, bandwidth


@pytest.mark.slow
@pytest.mark.parametrize("test", ["write_bw", "read_bw"])
def test_bw_client_against_the_server(test: str) -> None:
    """iwarp's perftest client keeps perftest's order: the (echoing) server sees all of it."""
    client, server, bandwidth = asyncio.run(
        asyncio.wait_for(_client_against_server(_port(), test), 20)
    )
    assert client.ok and server.ok, (client.errors, server.errors)
    assert client.data_messages == 20 and bandwidth > 0
    # version, 2 sizes, MTU, 7 key messages, 5 report values
    assert client.channel_messages == server.channel_messages == 16
    assert len(server.keys) == 7 and all(k.vaddr == REGION_BASE for k in client.keys)
    with pytest.raises(LocalProtocolError):
        asyncio.run(perftest_client("127.0.0.1", 1, test="send_lat", size=1, iterations=1))


# -- the real perftest in the siw guest ----------------------------------------------------


@pytest.mark.siw
def test_ib_write_bw_in_the_guest_against_iwarp(tmp_path: Path) -> None:
    from iwarp.interop.cases import all_cases
    from iwarp.interop.guest import GuestImage
    from iwarp.interop.suite import InteropRunner, InteropStatus

    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("SIW GUEST NOT RUN: qemu-system-x86_64 missing")
    image = GuestImage.load()
    if image is None:
        pytest.skip(f"SIW GUEST NOT RUN: {GuestImage.problem()}")
    (case,) = [c for c in all_cases() if c.name == "perftest/ib_write_bw"]
    runner = InteropRunner(image, tmp_path, log=lambda _: None)
    try:
        outcome = runner.run_case(case)
    finally:
        runner.close()
    assert outcome.status is InteropStatus.PASS, outcome.reason
    assert "BW average" in outcome.reason and "MB/s" in outcome.reason
