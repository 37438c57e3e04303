"""``--pcap FILE``: the process's own traffic as pcapng, read back by
``iwarp decode`` and by Wireshark's tshark."""

from __future__ import annotations

import io
import socket
import subprocess
from pathlib import Path

import pytest

from clitools import IWARP, by_type, connect, listen
from iwarp.analyze.analyzer import analyze_file
from iwarp.analyze.capture import CaptureStats, read_tcp_packets
from iwarp.analyze.pcapng import FpduAligner, PcapngWriter, TcpFlow
from iwarp.analyze.records import ErrorRecord, FpduRecord, FrameRecord
from iwarp.mpa.framing import FpduEncoder
from tsharkutil import decode, needs_tshark


def _run_pair(tmp_path: Path, op: str, *extra: str) -> tuple[Path, Path, int, int]:
    listener_pcap, connector_pcap = tmp_path / "listen.pcapng", tmp_path / "connect.pcapng"
    with listen("--count", "3", "--op", op, "--pcap", str(listener_pcap), *extra) as listener:
        rc, out = connect(
            listener.port,
            "--count",
            "3",
            "--size",
            "40K",
            "--op",
            op,
            "--pcap",
            str(connector_pcap),
            *extra,
        )
        lrc, _ = listener.finish()
    assert (rc, lrc) == (0, 0), out
    (established,) = by_type(out, "established")
    return listener_pcap, connector_pcap, listener.port, int(str(established["emss"]))


@pytest.mark.parametrize("op", ["send", "write", "read"])
def test_both_ends_capture_what_iwarp_decode_reads(tmp_path: Path, op: str) -> None:
    captures = _run_pair(tmp_path, op)[:2]
    for path in captures:
        analysis = analyze_file(str(path))
        records = list(analysis.records())
        assert analysis.error_count == 0
        assert not [r for r in records if isinstance(r, ErrorRecord)]
        frames = [r for r in records if isinstance(r, FrameRecord)]
        assert [f.mpa.is_request for f in frames] == [True, False]
        fpdus = [r for r in records if isinstance(r, FpduRecord)]
        directions = {f.direction for f in fpdus}
        assert len(directions) == 2  # both directions are in the file
        assert all(f.crc == f.crc_expected for f in fpdus)
        # 3 messages of 40000 octets travel (besides the control messages).
        assert sum(f.ulpdu_length for f in fpdus) > 3 * 40000


def test_the_capture_has_the_real_ports(tmp_path: Path) -> None:
    listener_pcap, connector_pcap, port, _ = _run_pair(tmp_path, "send")
    for path in (listener_pcap, connector_pcap):
        with open(path, "rb") as f:
            packets = list(read_tcp_packets(f, CaptureStats()))
        assert packets
        assert {port} <= {p.sport for p in packets} | {p.dport for p in packets}
        times = [p.time for p in packets]
        assert times == sorted(times) and times[-1] > 1_000_000_000  # real clock


def test_iwarp_decode_reads_the_capture(tmp_path: Path) -> None:
    connector_pcap = _run_pair(tmp_path, "write")[1]
    proc = subprocess.run(
        [*IWARP, "decode", str(connector_pcap)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RDMA_WRITE" in proc.stdout and "0 protocol errors" in proc.stdout


@pytest.mark.slow
@needs_tshark
@pytest.mark.tshark
@pytest.mark.parametrize("op", ["send", "write"])
def test_tshark_reads_the_capture(tmp_path: Path, op: str) -> None:
    connector_pcap = _run_pair(tmp_path, op)[1]
    result = decode(str(connector_pcap))
    assert not result.malformed
    kinds = [pdu.kind for pdu in result.pdus]
    assert kinds[:2] == ["request", "reply"]
    fpdus = result.fpdus
    assert fpdus and all(pdu.crc_status == "good" for pdu in fpdus)
    assert len({pdu.src_port for pdu in fpdus}) == 2


@pytest.mark.slow
def test_ping_and_demo_take_pcap(tmp_path: Path) -> None:
    path = tmp_path / "demo.pcapng"
    proc = subprocess.run(
        [*IWARP, "demo", "--size", "10K", "--count", "2", "--json", "--pcap", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # One process, both ends: the connection is recorded once.
    analysis = analyze_file(str(path))
    assert analysis.error_count == 0
    assert len(analysis.connections) == 1
    assert sum(1 for r in analysis.records() if isinstance(r, FpduRecord)) > 0

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    server = subprocess.Popen(
        [*IWARP, "ping", "-s", "-a", "127.0.0.1", "-p", port, "-C", "2", "-d"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline()
        ping_pcap = tmp_path / "ping.pcapng"
        client = subprocess.run(
            [
                *IWARP,
                "ping",
                "-c",
                "-a",
                "127.0.0.1",
                "-p",
                port,
                "-C",
                "2",
                "--delay",
                "0",
                "--pcap",
                str(ping_pcap),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert client.returncode == 0, client.stderr
    finally:
        server.kill()
        server.communicate()
    analysis = analyze_file(str(ping_pcap))
    assert analysis.error_count == 0
    assert sum(1 for r in analysis.records() if isinstance(r, FpduRecord)) >= 6


def test_fpdus_are_cut_into_one_segment_each() -> None:
    encoder = FpduEncoder(crc=True)
    fpdus = [b"".join(bytes(p) for p in encoder.encode(bytes([n]) * (n * 37))) for n in range(1, 6)]
    aligner = FpduAligner()
    frame = b"MPA ID Req Frame" + bytes([0x40, 1, 0, 3]) + b"abc"
    stream = frame + b"".join(fpdus)
    units: list[bytes] = []
    for split in range(0, len(stream), 7):  # arbitrary pieces in
        units += aligner.feed(stream[split : split + 7])
    assert units == [frame, *fpdus]


def test_a_flow_without_data_is_a_handshake_and_fins() -> None:
    out = io.BytesIO()
    flow = TcpFlow(PcapngWriter(out), ("10.0.0.1", 4000), ("10.0.0.2", 5000), initiator=False)
    flow.close()
    out.seek(0)
    packets = list(read_tcp_packets(out, CaptureStats()))
    assert [p.sport for p in packets] == [5000, 4000, 5000, 4000, 5000]


@pytest.mark.slow
@needs_tshark
def test_ping_sync_takes_pcap_at_both_ends(tmp_path: Path) -> None:
    """``iwarp ping --sync --pcap``: the blocking adapter's connections are
    recorded too, at the server (accepted) and at the client (connected);
    ``iwarp decode`` and tshark read both files the same way."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    server_pcap, client_pcap = tmp_path / "server.pcapng", tmp_path / "client.pcapng"
    common = ["-a", "127.0.0.1", "-p", port, "--sync", "-C", "3", "-S", "100"]
    server = subprocess.Popen(
        [*IWARP, "ping", "-s", *common, "-d", "--pcap", str(server_pcap)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert "listening" in server.stdout.readline()
        client = subprocess.run(
            [*IWARP, "ping", "-c", *common, "--delay", "0", "--pcap", str(client_pcap)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert client.returncode == 0, client.stderr
        _, err = server.communicate(timeout=30)
        assert server.returncode == 0, err
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    counts = []
    for path in (server_pcap, client_pcap):
        analysis = analyze_file(str(path))
        assert analysis.error_count == 0
        assert len(analysis.connections) == 1
        fpdus = sum(1 for r in analysis.records() if isinstance(r, FpduRecord))
        result = decode(str(path))
        assert not result.malformed
        assert [pdu.kind for pdu in result.pdus][:2] == ["request", "reply"]
        assert len(result.fpdus) == fpdus
        assert all(pdu.crc_status == "good" for pdu in result.fpdus)
        counts.append(fpdus)
    # 3 pings: each a Send and a Read Request one way, a Read Response, a
    # Write and two Sends the other, plus the RTR if any: the same at both ends.
    assert counts[0] == counts[1] >= 18
