"""Real traffic: the project's asyncio MPA stack talking to itself over
loopback, captured by ``dumpcap`` and decoded by ``iwarp decode``.

The capture must decode with zero errors and hold exactly the messages the
test sent; where tshark can decode it, tshark must agree on every FPDU.
Needs root (or capture rights) and Wireshark's ``dumpcap``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from analyze_traffic import payload, send
from tshark_fields import agree_all

from iwarp.analyze.analyzer import Options, analyze_file
from iwarp.analyze.records import ErrorRecord, FpduRecord, FrameRecord
from iwarp.apps.receipt import RECEIPT_REQUEST, RECEIPT_SIZE
from iwarp.asyncio.mpa import MpaSocket, connect, serve
from iwarp.mpa.config import MpaConfig
from iwarp.mpa.wire import Revision

DUMPCAP = shutil.which("dumpcap")

pytestmark = [
    pytest.mark.tshark,
    pytest.mark.skipif(
        DUMPCAP is None or os.geteuid() != 0,
        reason="needs dumpcap and the right to capture on loopback (root)",
    ),
]

SIZES = [0, 1, 100, 1000, 3000, 7, 511, 512, 513, 2048]


class Capture:
    """dumpcap on an interface, filtered to one TCP port, until stopped."""

    def __init__(self, path: Path, port: int, interface: str, *, pcapng: bool) -> None:
        assert DUMPCAP is not None
        # A UDP port of our own proves the capture is live: probes are sent
        # until one reaches the file (the analyzer skips them: not TCP).
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        probe_port = probe.getsockname()[1]
        bpf = f"tcp port {port} or udp port {probe_port}"
        cmd = [DUMPCAP, "-q", "-i", interface, "-f", bpf, "-w", str(path)]
        if not pcapng:
            cmd.append("-P")
        self.path = path
        log = path.with_suffix(".log")
        with log.open("w") as err:
            self.proc = subprocess.Popen(cmd, stderr=err)
        try:
            deadline = time.monotonic() + 20
            empty = -1
            while True:
                if self.proc.poll() is not None:
                    # No capture rights here (a container without CAP_NET_RAW).
                    pytest.skip(f"dumpcap cannot capture: {log.read_text().strip()}")
                assert time.monotonic() < deadline, "dumpcap did not start capturing"
                size = path.stat().st_size if path.exists() else 0
                if size:
                    if empty < 0:
                        empty = size
                    elif size > empty:
                        break
                probe.sendto(b"probe", ("127.0.0.1", probe_port))
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        time.sleep(0.3)  # let the last segments reach the ring buffer
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


async def exchange(port_box: list[int], config: MpaConfig, started: asyncio.Event) -> None:
    """Serve an echo on loopback, connect, send every size, read the echoes."""

    async def echo(sock: MpaSocket) -> None:
        async for ulpdu in sock:
            sock.send(ulpdu)
            await sock.drain()

    server = await serve(echo, "127.0.0.1", 0, config=config)
    port_box.append(server.sockets[0].getsockname()[1])
    started.set()
    await asyncio.sleep(0)  # the capture starts in the test thread
    while len(port_box) < 2:
        await asyncio.sleep(0.01)
    sock = await asyncio.wait_for(connect("127.0.0.1", port_box[0], config=config), 10)
    for msn, size in enumerate(SIZES, 1):
        sock.send(send(msn, payload(size, msn)))
        await sock.drain()
        echoed = await asyncio.wait_for(sock.receive(), 10)
        assert echoed == send(msn, payload(size, msn))
    await asyncio.wait_for(sock.close(), 10)
    server.close()
    await asyncio.wait_for(server.wait_closed(), 10)


def run_exchange(tmp_path: Path, config: MpaConfig, interface: str, pcapng: bool) -> Path:
    path = tmp_path / ("lo.pcapng" if pcapng else "lo.pcap")
    ports: list[int] = []
    capture: list[Capture] = []

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(exchange(ports, config, started))
        await asyncio.wait_for(started.wait(), 10)
        capture.append(await asyncio.to_thread(Capture, path, ports[0], interface, pcapng=pcapng))
        ports.append(0)
        await asyncio.wait_for(task, 60)

    try:
        asyncio.run(main())
    finally:
        for c in capture:
            c.stop()
    return path


@pytest.mark.parametrize(
    ("markers", "revision", "interface", "pcapng"),
    [
        (False, Revision.REV1, "lo", True),
        (True, Revision.REV2, "lo", False),
        (True, Revision.REV1, "any", True),
    ],
)
def test_loopback_exchange_decodes_cleanly(
    tmp_path: Path, markers: bool, revision: int, interface: str, pcapng: bool
) -> None:
    config = MpaConfig(markers=markers, revision=revision)
    path = run_exchange(tmp_path, config, interface, pcapng)
    analysis = analyze_file(str(path))
    assert [r for r in analysis.records() if isinstance(r, ErrorRecord)] == []
    (connection,) = [c for c in analysis.connections if c.protocol == "mpa"]
    frames = [r for r in connection.records if isinstance(r, FrameRecord)]
    assert [(f.mpa.is_request, f.mpa.revision, f.mpa.markers) for f in frames] == [
        (True, revision, markers),
        (False, revision, markers),
    ]
    expected = [len(send(msn, payload(size, msn))) for msn, size in enumerate(SIZES, 1)]
    for direction in ("initiator", "responder"):
        found = [
            r
            for r in connection.records
            if isinstance(r, FpduRecord)
            and r.direction == direction
            and r.ulp.get("opcode_name") == "SEND"
        ]
        assert [r.ulpdu_length for r in found] == expected
        assert [r.ulp["msn"] for r in found] == list(range(1, len(SIZES) + 1))
        assert all(r.crc_ok for r in found)
        assert all(m.ok for r in found for m in r.markers)
        assert any(r.markers for r in found) is markers
    if not markers:
        # Real segmentation, no markers: tshark decodes it too and must agree.
        agree_all([r for r in connection.records if isinstance(r, FpduRecord)], path)


# -- the project's command line tools, as separate processes -------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Until something listens on ``port`` (read from /proc: no probe connection)."""
    deadline = time.monotonic() + 20
    needle = f":{port:04X} "
    while True:
        assert proc.poll() is None, "the listener exited"
        assert time.monotonic() < deadline, "nothing listens"
        with open("/proc/net/tcp") as table:
            if any(needle in line and line.split()[3] == "0A" for line in table):
                return
        time.sleep(0.02)


def run_cli(tmp_path: Path, server: list[str], client: list[str], port: int) -> Path:
    """Capture a listener and a client of ``python -m iwarp`` talking over loopback."""
    path = tmp_path / "cli.pcapng"
    capture = Capture(path, port, "lo", pcapng=True)
    iwarp = [sys.executable, "-m", "iwarp"]
    listener = subprocess.Popen([*iwarp, *server], stdout=subprocess.DEVNULL)
    try:
        wait_listening(port, listener)
        done = subprocess.run([*iwarp, *client], capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert listener.wait(timeout=30) == 0
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait(timeout=10)
        capture.stop()
    return path


@pytest.mark.parametrize("markers", [False, True])
def test_iwarp_ping_over_loopback(tmp_path: Path, markers: bool) -> None:
    port, pings = free_port(), 3
    common = ["-a", "127.0.0.1", "-p", str(port), "-C", str(pings), "-S", "100"]
    client = ["ping", "-c", *common, "-V", "--p2p", "write", "--delay", "0"]
    if markers:
        client.append("--markers")
    path = run_cli(tmp_path, ["ping", "-s", *common], client, port)
    analysis = analyze_file(str(path))
    assert [r for r in analysis.records() if isinstance(r, ErrorRecord)] == []
    (connection,) = analysis.connections
    initiator, responder = connection.directions
    # rping, per ping: the client advertises its source buffer (Send), the
    # server RDMA-Reads it, says so (Send), the client advertises its sink
    # (Send), the server RDMA-Writes it and says so (Send). The client's
    # first FPDU is the zero-length RDMA Write RTR (RFC 6581).
    assert initiator.messages == {"SEND": 2 * pings, "RDMA_READ_RESPONSE": pings, "RDMA_WRITE": 1}
    assert responder.messages == {
        "SEND": 2 * pings,
        "RDMA_READ_REQUEST": pings,
        "RDMA_WRITE": pings,
    }
    assert responder.framing is not None and responder.framing.markers is markers
    first = next(r for r in connection.records if isinstance(r, FpduRecord))
    assert (first.direction, first.ulp["opcode_name"], first.ulp["payload_length"]) == (
        "initiator",
        "RDMA_WRITE",
        0,
    )
    if not markers:
        agree_all([r for r in connection.records if isinstance(r, FpduRecord)], path)


@pytest.mark.parametrize("op", ["mpa", "send", "write", "read"])
def test_iwarp_listen_and_connect_over_loopback(tmp_path: Path, op: str) -> None:
    port, count, size = free_port(), 5, 3000
    mpa = ["--markers", "--mpa-rev", "1", "--op", op]
    path = run_cli(
        tmp_path,
        ["listen", "--port", str(port), "--count", str(count), *mpa],
        ["connect", "127.0.0.1", str(port), "--count", str(count), "--size", str(size), *mpa],
        port,
    )
    # --op mpa sends bare ULPDUs (MPA only), not DDP segments.
    analysis = analyze_file(str(path), Options(ddp=op != "mpa"))
    assert [r for r in analysis.records() if isinstance(r, ErrorRecord)] == []
    (connection,) = analysis.connections
    found = [r for r in connection.records if isinstance(r, FpduRecord)]
    assert found
    assert all(r.crc_ok and all(m.ok for m in r.markers) for r in found)
    assert all(r.markers for r in found if r.wire_length > 512)
    if op == "mpa":
        # The messages, then connect's receipt request and listen's receipt.
        sent = [r.ulpdu_length for r in found if r.direction == "initiator"]
        answered = [r.ulpdu_length for r in found if r.direction == "responder"]
        assert sent == [size] * count + [len(RECEIPT_REQUEST)]
        assert answered == [RECEIPT_SIZE]
        return
    # The messages themselves (credit advertisements and the like aside):
    # one FPDU each, the loopback MULPDU being far above their size.
    opcode, direction = {
        "send": ("SEND", "initiator"),
        "write": ("RDMA_WRITE", "initiator"),
        "read": ("RDMA_READ_RESPONSE", "responder"),
    }[op]
    carrying = [
        r
        for r in found
        if r.ulp.get("opcode_name") == opcode and r.ulp.get("payload_length") == size
    ]
    assert [r.direction for r in carrying] == [direction] * count
    if op == "read":
        requests = [r for r in found if r.ulp.get("opcode_name") == "RDMA_READ_REQUEST"]
        sizes = [r.ulp["read_request"]["size"] for r in requests]  # type: ignore[index]
        assert (sizes, {r.direction for r in requests}) == ([size] * count, {"initiator"})
