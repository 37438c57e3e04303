"""Wireshark's tshark decodes an ``iwarp connect`` / ``iwarp listen`` session.

The session runs as two processes on loopback. As root the test captures
the real traffic with ``dumpcap``; otherwise it relays the connection
through a recording proxy and writes the two byte streams as a pcap (one
TCP segment per chunk received) with :mod:`iwarp.analyze.synth`. tshark's
MPA dissector, written by others, must find the Request, the Reply and
every FPDU, with good CRCs and markers where they belong.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from iwarp.analyze.synth import Direction, TcpCapture
from iwarp.apps.receipt import RECEIPT_REQUEST
from iwarp.apps.rping import ADVERT
from iwarp.mpa.framing import fpdu_wire_size
from tsharkutil import MpaPdu, decode, needs_tshark

pytestmark = [pytest.mark.tshark, needs_tshark]

IWARP = [sys.executable, "-m", "iwarp"]
DUMPCAP = shutil.which("dumpcap")
COUNT, SIZE = 6, 1300  # several markers per FPDU (every 512 octets)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_session(port: int, connect_port: int, options: list[str]) -> None:
    listener = subprocess.Popen(
        [*IWARP, "listen", "--port", str(port), "--count", str(COUNT), "--json", *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        assert json.loads(listener.stdout.readline())["type"] == "listening"
        proc = subprocess.run(
            [
                *IWARP,
                "connect",
                "127.0.0.1",
                str(connect_port),
                "--count",
                str(COUNT),
                "--size",
                str(SIZE),
                "--json",
                *options,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout
        out, _ = listener.communicate(timeout=15)
        assert listener.returncode == 0, out
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.communicate()


def live_capture(path: Path, options: list[str]) -> None:
    port = free_port()
    assert DUMPCAP is not None
    cap = subprocess.Popen(
        [DUMPCAP, "-q", "-i", "lo", "-f", f"tcp port {port}", "-w", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cap.stderr is not None
        deadline = time.monotonic() + 10
        while "Capturing on" not in cap.stderr.readline():  # dumpcap is ready
            assert time.monotonic() < deadline and cap.poll() is None, "dumpcap failed"
        run_session(port, port, options)
        time.sleep(0.3)
    finally:
        cap.send_signal(signal.SIGTERM)
        cap.communicate(timeout=10)


class RecordingRelay(threading.Thread):
    """Accepts one connection and relays it to ``target``, recording every
    chunk received, in order, as (direction, octets)."""

    def __init__(self, target: int) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.chunks: list[tuple[Direction, bytes]] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        client, _ = self.server.accept()
        upstream = socket.create_connection(("127.0.0.1", self.target))
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=self.pipe, args=(upstream, client, Direction.S2C))
        back.start()
        self.pipe(client, upstream, Direction.C2S)
        back.join()
        client.close()
        upstream.close()

    def pipe(self, src: socket.socket, dst: socket.socket, direction: Direction) -> None:
        while data := src.recv(1 << 16):
            with self.lock:
                self.chunks.append((direction, data))
                dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)


def relayed_capture(path: Path, options: list[str]) -> None:
    port = free_port()
    relay = RecordingRelay(port)
    relay.start()
    run_session(port, relay.port, options)
    relay.join(10)
    streams = {d: b"".join(c for k, c in relay.chunks if k is d) for d in Direction}
    c2s, s2c = streams[Direction.C2S], streams[Direction.S2C]
    capture = TcpCapture()
    capture.send(Direction.C2S, c2s[:20])  # the Request
    capture.send(Direction.S2C, s2c[:20])  # the Reply
    # One FPDU per segment, as the live sender writes them (tshark needs
    # that with markers); the cut points come from the known message sizes.
    offset = 0
    rest = c2s[20:]
    while offset < len(rest):
        size = fpdu_wire_size(SIZE, offset % 512, markers="--markers" in options)
        capture.send(Direction.C2S, rest[offset : offset + size])
        offset += size
    capture.close()
    capture.write(str(path))


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
def test_tshark_decodes_a_cli_session(tmp_path: Path, markers: bool, crc: bool) -> None:
    options = ["--mpa-rev", "1", "--op", "mpa"]  # bare ULPDUs: MPA framing only
    options += ["--markers"] if markers else []  # both ends: tshark assumes symmetry
    options += [] if crc else ["--no-crc"]
    path = tmp_path / "session.pcapng"
    if DUMPCAP is not None and os.geteuid() == 0:
        live_capture(path, options)
    else:
        relayed_capture(path, options)

    result = decode(str(path))
    assert result.malformed == []
    kinds = [p.kind for p in result.pdus]
    assert kinds[:2] == ["request", "reply"] and set(kinds[2:]) == {"fpdu"}, kinds
    request, reply = result.pdus[:2]
    # The messages, then connect's receipt request (iwarp.cli._receipt); a
    # live capture also has the receipt the other way.
    c2s = [p for p in result.fpdus if p.src_port == request.src_port]
    assert len(c2s) == COUNT + 1
    assert c2s[-1].fields["iwarp_mpa.ulpdulength"] == str(len(RECEIPT_REQUEST))
    for frame in (request, reply):
        assert frame.fields["iwarp_mpa.rev"] == "1"
        assert frame.fields["iwarp_mpa.marker_flag"] == ("1" if markers else "0")
        assert frame.fields["iwarp_mpa.crc_flag"] == ("1" if crc else "0")
        assert frame.fields["iwarp_mpa.res"] == "0x00"
    position = 0  # stream offset from the first octet of full operation
    for fpdu in c2s[:COUNT]:
        assert fpdu.fields["iwarp_mpa.ulpdulength"] == str(SIZE)
        assert fpdu.crc_status == ("good" if crc else None)
        # Markers every 512 octets of the stream (RFC 5044 §4.3), FPDUPTR
        # pointing back to the FPDU's ULPDU_Length field.
        lead = 4 if markers and position % 512 == 0 else 0
        content = 2 + SIZE + (-(2 + SIZE) % 4) + 4
        wire = lead + content
        if markers:
            expected = []
            k = lead
            at = position + lead
            while k < wire:
                if at % 512 == 0 and k > 0:
                    expected.append((0, k - lead))
                    wire += 4
                    k += 4
                    at += 4
                    continue
                k += 1
                at += 1
            if lead:
                expected.insert(0, (0, 0))
            assert fpdu.markers == expected, (position, fpdu.markers)
        else:
            assert fpdu.markers == []
        position += wire


def relayed_chunks_capture(path: Path, options: list[str]) -> None:
    """Relay one session; each chunk read becomes one TCP segment (no markers)."""
    port = free_port()
    relay = RecordingRelay(port)
    relay.start()
    run_session(port, relay.port, options)
    relay.join(10)
    capture = TcpCapture()
    for direction, chunk in relay.chunks:
        capture.send(direction, chunk)
    capture.close()
    capture.write(str(path))


def _ddp(pdu: MpaPdu, name: str) -> int:
    return int(pdu.ddp[name], 0)


@pytest.mark.parametrize("op", ["send", "write", "read"])
def test_tshark_decodes_the_rdmap_messages_of_each_op(tmp_path: Path, op: str) -> None:
    """Send, RDMA Write, Read Request and Read Response carry the DDP/RDMAP
    fields of the conversation in iwarp.cli._rdma_traffic, as tshark decodes them."""
    path = tmp_path / "ops.pcapng"
    options = ["--op", op]
    if DUMPCAP is not None and os.geteuid() == 0:
        live_capture(path, options)
    else:
        relayed_chunks_capture(path, options)
    result = decode(str(path))
    assert result.malformed == []
    assert [p.kind for p in result.pdus[:2]] == ["request", "reply"]
    client = result.pdus[0].src_port
    c2s = [p for p in result.fpdus if p.src_port == client]
    s2c = [p for p in result.fpdus if p.src_port != client]
    for pdu in result.fpdus:
        assert pdu.crc_status == "good"
        assert _ddp(pdu, "iwarp_ddp.dv") == 1 and _ddp(pdu, "iwarp_rdma.version") == 1
        assert _ddp(pdu, "iwarp_ddp.last_flag") == 1  # every message fits one segment
    for side in (c2s, s2c):  # RFC 5041 §5.1: MSNs count from 1 per queue
        for qn in (0, 1):
            untagged = [
                p for p in side if "iwarp_ddp.qn" in p.ddp and _ddp(p, "iwarp_ddp.qn") == qn
            ]
            assert [_ddp(p, "iwarp_ddp.msn") for p in untagged] == list(range(1, len(untagged) + 1))
            assert all(_ddp(p, "iwarp_ddp.mo") == 0 for p in untagged)
    opcodes = [_ddp(p, "iwarp_rdma.opcode") for p in c2s]
    control = int(ADVERT.size) + 18  # a 16-octet Send: untagged header + payload
    # The listener's advertisements, one Send per message, and its receipt.
    adverts = [p for p in s2c if _ddp(p, "iwarp_rdma.opcode") == 3]
    assert [p.fields["iwarp_mpa.ulpdulength"] for p in adverts] == [str(control)] * (COUNT + 1)
    region_tos = {0x1000_0000 + k * SIZE for k in range(COUNT)}
    if op == "send":
        assert opcodes == [3] * (1 + COUNT)
        assert [int(p.fields["iwarp_mpa.ulpdulength"]) for p in c2s] == [control] + [
            18 + SIZE
        ] * COUNT
    elif op == "write":
        assert opcodes == [3] + [0, 3] * COUNT  # hello, then (Write, notice) per message
        for write in c2s[1::2]:
            assert _ddp(write, "iwarp_ddp.tagged_flag") == 1
            assert int(write.fields["iwarp_mpa.ulpdulength"]) == 14 + SIZE
            assert _ddp(write, "iwarp_ddp.stag") > 1
            assert _ddp(write, "iwarp_ddp.tagged_offset") in region_tos
    else:
        assert opcodes == [3] + [1, 3] * COUNT  # hello, then (Read Request, notice)
        requests = c2s[1::2]
        responses = [p for p in s2c if _ddp(p, "iwarp_rdma.opcode") == 2]
        assert len(responses) == COUNT
        for request, response in zip(requests, responses, strict=True):
            assert _ddp(request, "iwarp_ddp.qn") == 1
            assert _ddp(request, "iwarp_rdma.rdmardsz") == SIZE
            assert _ddp(request, "iwarp_rdma.srcstag") > 1
            assert _ddp(request, "iwarp_rdma.srcto") in region_tos
            # RFC 5040 §4.4: the Read Response targets the Request's sink.
            assert _ddp(response, "iwarp_ddp.tagged_flag") == 1
            assert _ddp(response, "iwarp_ddp.stag") == _ddp(request, "iwarp_rdma.sinkstag")
            assert _ddp(response, "iwarp_ddp.tagged_offset") == _ddp(request, "iwarp_rdma.sinkto")
            assert int(response.fields["iwarp_mpa.ulpdulength"]) == 14 + SIZE
