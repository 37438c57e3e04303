"""``iwarp listen`` / ``iwarp connect``: the CLI contract, run as processes."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import time

import pytest

from clitools import IWARP, by_type, connect, listen, mpa_peer, read_terminate, send_header
from iwarp.apps.rping import ADVERT
from iwarp.cli import _rdma_traffic, main
from iwarp.mpa.framing import FpduEncoder
from iwarp.mpa.wire import REQUEST_KEY


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--mpa-rev", "1", "--markers"],
        ["--mpa-rev", "1", "--no-crc"],
        # A Rev 0 pair with bare MPA ULPDUs (no DDP/RDMAP).
        ["--mpa-rev", "0", "--markers", "--no-crc", "--op", "mpa"],
    ],
)
def test_messages_arrive_and_summaries_agree(options: list[str]) -> None:
    with listen("--count", "20", *options) as listener:
        rc, out = connect(listener.port, "--count", "20", "--size", "1500", *options)
        lrc, lines = listener.finish()
    assert rc == 0 and lrc == 0, (out, lines)
    (sent,) = by_type(out, "summary")
    received = lines[-1]
    assert received["type"] == "summary"  # the summary is the last line
    for key in ("messages", "octets", "sha256"):
        assert received[key] == sent[key]
    assert sent["messages"] == 20 and sent["octets"] == 20 * 1500
    (established,) = by_type(out, "established")
    rev = int(options[1]) if options else 2
    assert established["rev"] == rev
    assert established["markers_receive"] == ("--markers" in options)
    assert established["crc"] == ("--no-crc" not in options)
    (server_side,) = by_type(lines, "established")
    assert server_side["markers_send"] == ("--markers" in options)


def test_parameters_private_data_and_rfc6581() -> None:
    with listen(
        "--count", "1", "--private-data", "cafe", "--ird", "4", "--ord", "2", "--rtr", "read"
    ) as listener:
        rc, out = connect(
            listener.port,
            "--private-data",
            "0102",
            "--ird",
            "0x3fff",
            "--ord",
            "8",
            "--p2p",
            "--rtr",
            "write,read",
            "--size",
            "0",
        )
        lrc, lines = listener.finish()
    assert rc == 0 and lrc == 0, (out, lines)
    (est,) = by_type(out, "established")
    assert est["peer_private_data"] == "cafe"
    assert est["peer_ird"] == 4 and est["peer_ord"] == 0x3FFF  # §9.1: 0x3FFF echoed
    assert est["ord"] == 4 and est["rtr"] == "read" and est["peer_to_peer"] is True
    (request,) = by_type(lines, "request")
    assert request["private_data"] == "0102" and request["ird"] == 0x3FFF
    assert request["rtr"] == ["write", "read"] and request["p2p"] is True


def test_reject() -> None:
    with listen("--reject", "--private-data", "6e6f", "--connections", "1") as listener:
        rc, out = connect(listener.port, "--mpa-rev", "1")
        lrc, lines = listener.finish()
    assert rc == 1
    (rejected,) = by_type(out, "rejected")
    assert rejected["private_data"] == "6e6f" and rejected["reject"] is True
    assert lrc == 0 and by_type(lines, "rejected")
    assert lines[-1]["type"] == "summary" and lines[-1]["messages"] == 0


@pytest.mark.slow
def test_errors_have_codes_and_nonzero_status() -> None:
    with listen("--connections", "2", "--timeout", "0.5") as listener:
        # An enhanced Request to a Rev 1 peer is closed (RFC 6581 §10) ...
        with listen("--mpa-rev", "1", "--connections", "1") as rev1:
            rc, out = connect(rev1.port)
            rev1_rc, rev1_lines = rev1.finish()
        assert rc == 1 and by_type(out, "error")[0]["code"] == 1
        assert rev1_rc == 1 and by_type(rev1_lines, "error")[0]["code"] == 4
        # ... garbage gets error 4, silence error 1 after the timeout.
        with socket.create_connection(("127.0.0.1", listener.port)) as bad:
            bad.sendall(b"NOT MPA AT ALL, JUST TEXT")
            assert bad.recv(100) == b""
        with socket.create_connection(("127.0.0.1", listener.port)) as quiet:
            start = time.monotonic()
            assert quiet.recv(100) == b""
            assert time.monotonic() - start < 3
        lrc, lines = listener.finish()
    assert lrc == 1
    assert sorted(int(str(e["code"])) for e in by_type(lines, "error")) == [1, 4]
    assert lines[-1]["type"] == "summary" and lines[-1]["errors"] == 2


@pytest.mark.slow
def test_connection_refused_and_bad_options() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out = connect(port)
    assert rc == 1 and out[-1]["type"] == "error" and out[-1]["code"] == 1
    rc, out = connect(port, "--pd-limit", "600")
    assert rc == 2 and "bad options" in str(out[-1]["message"])
    # culley-02 has no frames to carry these, and its CRC is always on.
    for extra in (["--no-crc"], ["--private-data", "ab"], ["--reject"], ["--p2p"]):
        rc, out = connect(port, "--op", "mpa", "--mpa-mode", "culley", *extra)
        assert rc == 2 and f"{extra[0]} mean nothing" in str(out[-1]["message"]), out
    proc = subprocess.run(
        [*IWARP, "connect", "127.0.0.1", str(port), "--private-data", "xyz"],
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 2  # argparse usage error


def test_siw_request_accepted_by_listen() -> None:
    """Linux siw's Request ("MPA ID Req Frame" 10 02 00 04 | 00 01 00 01)."""
    with listen("--connections", "1") as listener:
        with socket.create_connection(("127.0.0.1", listener.port)) as siw:
            siw.sendall(REQUEST_KEY + bytes.fromhex("10020004 00010001"))
            reply = b""
            while len(reply) < 24:
                chunk = siw.recv(100)
                assert chunk
                reply += chunk
            assert reply[:16] == b"MPA ID Rep Frame"
            # Rev 2, S echoed, C set (we want CRC), no reject; IRD/ORD 1/1
            # (clamped to the Initiator's values, RFC 6581 §9.1).
            assert (
                reply[16] == 0x50
                and reply[17] == 2
                and reply[18:24] == bytes.fromhex("0004 00010001")
            )
        lrc, lines = listener.finish()
    (request,) = by_type(lines, "request")
    assert request["rev"] == 2 and request["ird"] == 1 and request["ord"] == 1
    (est,) = by_type(lines, "established")
    assert est["crc"] is True and est["ird"] == 1 and est["ord"] == 1
    assert lrc == 0


def test_siw_compatible_request_from_connect() -> None:
    """iwarp connect can send what siw accepts: Rev 2, PD <= 256 in total."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            [
                *IWARP,
                "connect",
                "127.0.0.1",
                str(port),
                "--pd-limit",
                "256",
                "--ird",
                "1",
                "--ord",
                "1",
                "--private-data",
                "ab" * 252,
                "--timeout",
                "1",
                "--json",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        conn, _ = server.accept()
        with conn:
            data = b""
            while len(data) < 20 + 256:
                chunk = conn.recv(1000)
                assert chunk
                data += chunk
        proc.communicate(timeout=10)
    assert data[:16] == REQUEST_KEY and data[17] == 2 and data[18:20] == b"\x01\x00"
    assert data[20:24] == bytes.fromhex("00010001") and data[24:] == b"\xab" * 252
    assert proc.returncode == 1  # no Reply came: error 1
    rc, out2 = connect(port, "--pd-limit", "256", "--private-data", "ab" * 253)
    assert rc == 1 and "exceeds the limit of 256" in str(out2[-1]["message"])


# -- --op send|write|read: RDMAP over the composed stack ---------------------------

#: Record types the commands print (the JSON-lines contract).
TYPES = {"listening", "request", "established", "rejected", "error", "closed", "summary"}


def check_contract(lines: list[dict[str, object]]) -> None:
    """Every line is a typed record; errors carry a code; the summary is last."""
    assert lines, "no output"
    for line in lines:
        assert line["type"] in TYPES, line
        if line["type"] == "error":
            assert "code" in line and line["message"], line
    assert [line["type"] for line in lines].count("summary") <= 1
    if any(line["type"] == "summary" for line in lines):
        summary = lines[-1]
        assert summary["type"] == "summary"
        assert isinstance(summary["messages"], int) and isinstance(summary["octets"], int)
        assert isinstance(summary["sha256"], str) and len(summary["sha256"]) == 64


def expected_sha(count: int, size: int) -> str:
    """SHA-256 of the messages the commands move, computed here from the
    documented message pattern: SHA-256(i as 8 octets) repeated, cut to size."""
    sha = hashlib.sha256()
    for i in range(count):
        block = hashlib.sha256(i.to_bytes(8, "big")).digest()
        sha.update((block * (size // 32 + 1))[:size])
    return sha.hexdigest()


@pytest.mark.parametrize("op", ["send", "write", "read"])
@pytest.mark.parametrize(
    "options",
    [[], ["--markers"], ["--no-crc"], ["--mpa-rev", "1", "--markers", "--no-crc"]],
    ids=["crc", "crc+markers", "nothing", "rev1+markers"],
)
def test_each_op_moves_the_messages(op: str, options: list[str]) -> None:
    count, size = 5, 40_000  # larger than MULPDU: several DDP segments per message
    with listen("--count", str(count), "--op", op, *options) as listener:
        rc, out = connect(
            listener.port, "--count", str(count), "--size", str(size), "--op", op, *options
        )
        lrc, lines = listener.finish()
    check_contract(out)
    check_contract(lines)
    assert rc == 0 and lrc == 0, (out, lines)
    sent, received = out[-1], lines[-1]
    assert sent["type"] == received["type"] == "summary"
    assert sent["op"] == received["op"] == op
    for summary in (sent, received):
        assert summary["messages"] == count and summary["octets"] == count * size
        assert summary["sha256"] == expected_sha(count, size)
    (est,) = by_type(out, "established")
    (server_side,) = by_type(lines, "established")
    assert est["ddp_version"] == 1 and est["crc"] == ("--no-crc" not in options)
    assert est["markers_receive"] == server_side["markers_send"] == ("--markers" in options)
    (closed,) = by_type(lines, "closed")
    assert closed["messages"] == count and closed["octets"] == count * size


@pytest.mark.slow
@pytest.mark.parametrize("op", ["send", "write", "read"])
def test_many_connections_at_once(op: str) -> None:
    per, clients, size = 6, 4, 100
    sizes = ["--count", str(per), "--size", str(size)]
    with listen("--count", str(per * clients), "--op", op) as listener:
        procs = [
            subprocess.Popen(
                [*IWARP, "connect", "127.0.0.1", str(listener.port), "--json", "--op", op, *sizes],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(clients)
        ]
        outs = [p.communicate(timeout=30)[0] for p in procs]
        lrc, lines = listener.finish()
    check_contract(lines)
    assert lrc == 0 and all(p.returncode == 0 for p in procs), (outs, lines)
    for text in outs:
        summary = json.loads(text.splitlines()[-1])
        assert summary["sha256"] == expected_sha(per, size)
    summary = lines[-1]
    assert summary["messages"] == per * clients and summary["octets"] == per * clients * size
    assert summary["accepted"] == clients and summary["errors"] == 0
    assert sorted(int(str(c["messages"])) for c in by_type(lines, "closed")) == [per] * clients


@pytest.mark.slow
def test_zero_octet_messages_and_peer_to_peer_rtr() -> None:
    for op, rtr in (("write", "write"), ("read", "read"), ("send", "send")):
        with listen("--count", "3", "--op", op, "--rtr", rtr) as listener:
            rc, out = connect(
                listener.port, "--count", "3", "--size", "0", "--op", op, "--p2p", "--rtr", rtr
            )
            lrc, lines = listener.finish()
        assert rc == 0 and lrc == 0, (out, lines)
        assert by_type(out, "established")[0]["rtr"] == rtr
        assert out[-1]["messages"] == lines[-1]["messages"] == 3
        assert out[-1]["sha256"] == lines[-1]["sha256"] == expected_sha(0, 0)


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [("write", "send"), ("send", "read"), ("read", "write"), ("mpa", "send"), ("mpa", "read")],
)
def test_different_ops_are_refused_and_both_ends_name_them(theirs: str, ours: str) -> None:
    with listen("--connections", "1", "--op", theirs) as listener:
        rc, out = connect(listener.port, "--op", ours)
        lrc, lines = listener.finish()
    check_contract(out)
    check_contract(lines)
    assert rc == 1 and lrc == 1
    (error,) = by_type(out, "error")
    assert error["message"] == f"the listener runs --op {theirs}, we run --op {ours}"
    (logged,) = by_type(lines, "error")
    assert logged["message"] == f"the peer runs --op {ours}, this listener --op {theirs}"
    assert lines[-1]["errors"] == 1


def test_write_into_a_read_buffer_is_terminated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The region a read listener advertises has no remote write right: the
    RDMA Write is refused with a Terminate (RFC 5040 §7.2) on both sides.
    (The connector's hello does not name its op, as older ones did not, so
    the listener's op check lets it through to the stack's protection.)"""
    monkeypatch.setitem(_rdma_traffic.OP_TAGS, "write", 0)
    with listen("--connections", "1", "--op", "read") as listener:
        argv = ["connect", "127.0.0.1", str(listener.port), "--json", "--op", "write"]
        rc = main([*argv, "--count", "2"])
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        lrc, lines = listener.finish()
    check_contract(out)
    check_contract(lines)
    assert rc == 1 and lrc == 1, (out, lines)
    (sent,) = by_type(lines, "error")
    assert sent["terminate"] == "sent" and sent["layer"] in (0, 1)  # RDMAP or DDP protection
    assert sent["code"] is not None
    (received,) = by_type(out, "error")
    if "terminate" in received:
        assert received["terminate"] == "received" and received["code"] == sent["code"]
    else:  # our next write met the listener's close before the Terminate was read
        assert received["code"] == 1, received


def test_rev0_rdmap() -> None:
    """Rev 0 peers negotiate DDP/RDMAP version 0 (RDMAC mode). Where the
    stack implements it, the messages flow with version 0 reported; where
    it does not, it answers with a Terminate carrying the RFC 6581 code 5
    (local catastrophic) and both commands say to use --op mpa."""
    with listen("--connections", "1", "--mpa-rev", "0") as listener:
        rc, out = connect(listener.port, "--mpa-rev", "0", "--count", "3")
        lrc, lines = listener.finish()
    check_contract(out)
    check_contract(lines)
    for records in (out, lines):
        assert by_type(records, "established")[0]["ddp_version"] == 0
    if rc == 0:
        assert lrc == 0 and out[-1]["sha256"] == lines[-1]["sha256"] == expected_sha(3, 64)
        return
    assert rc == 1 and lrc == 1
    for records in (out, lines):
        (error,) = by_type(records, "error")
        assert error["code"] == 5 and "--op mpa" in str(error["message"])


def test_message_larger_than_max_size() -> None:
    with listen("--connections", "1", "--max-size", "1000") as listener:
        rc, _ = connect(listener.port, "--size", "1001")
        lrc, lines = listener.finish()
    assert rc == 1 and lrc == 1
    assert "exceed --max-size 1000" in str(by_type(lines, "error")[0]["message"])


@pytest.mark.parametrize("op", ["send", "write", "mpa"])
def test_reject_each_op(op: str) -> None:
    with listen("--reject", "--private-data", "6e6f", "--connections", "1", "--op", op) as lst:
        rc, out = connect(lst.port, "--op", op, "--private-data", "0102")
        lrc, lines = lst.finish()
    check_contract(out)
    check_contract(lines)
    assert rc == 1 and lrc == 0
    (rejected,) = by_type(out, "rejected")
    assert rejected["private_data"] == "6e6f" and rejected["reject"] is True
    assert by_type(lines, "request")[0]["private_data"] == "0102"
    assert by_type(lines, "rejected") and lines[-1]["messages"] == 0


@pytest.mark.parametrize("fault", ["crc", "ddp", "crc-first"])
def test_bad_peer_gets_a_terminate(fault: str) -> None:
    """A peer that breaks MPA (CRC) or DDP (queue number 5) after a good
    start gets the Terminate RFC 5040 §7 prescribes; listen reports it and
    goes on serving. A bad first FPDU cannot be answered (the Responder is
    still fenced, RFC 5044 §7.1.2 rule 4): the connection is just closed."""
    encoder = FpduEncoder(crc=True)
    with listen("--connections", "2") as listener:
        with mpa_peer(listener.port) as peer:
            if fault != "crc-first":  # a good hello: 5 messages of 16 octets
                peer.sendall(encoder.encode_bytes(send_header(0) + ADVERT.pack(5, 0, 16)))
            qn = 5 if fault == "ddp" else 0
            fpdu = bytearray(encoder.encode_bytes(send_header(qn, msn=2) + b"x" * 16))
            if fault != "ddp":
                fpdu[-1] ^= 0xFF
            peer.sendall(fpdu)
            term = read_terminate(peer)
        layer = 2 if fault != "ddp" else 1  # LLP (MPA) or DDP
        if fault == "crc-first":
            assert term is None
        else:
            assert term is not None
            assert term[0] & 0x80 == 0 and int.from_bytes(term[6:10], "big") == 2  # queue 2
            assert term[18] >> 4 == layer  # RFC 5040 §4.8: Layer, then EType
        # The listener goes on serving others.
        rc, _ = connect(listener.port, "--count", "3")
        lrc, lines = listener.finish()
    assert rc == 0
    check_contract(lines)
    assert lrc == 1 and lines[-1]["errors"] == 1 and lines[-1]["messages"] == 3
    (error,) = by_type(lines, "error")
    assert error["layer"] == layer
    if fault != "ddp":
        assert error["code"] == 2  # RFC 5044 §8: CRC mismatch


# -- --delayed and --mpa-mode culley (bare MPA) ---------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        ["--delayed"],
        ["--delayed", "--mpa-rev", "1", "--markers", "--no-crc"],
        ["--mpa-mode", "culley"],
    ],
)
def test_streaming_first_then_mpa(options: list[str]) -> None:
    culley = "culley" in options
    private = [] if culley else ["--private-data", "aa"]  # culley-02 has no frame to carry it
    with listen("--count", "4", "--op", "mpa", *private, *options) as listener:
        rc, out = connect(listener.port, "--count", "4", "--size", "700", "--op", "mpa", *options)
        lrc, lines = listener.finish()
    check_contract(out)
    check_contract(lines)
    assert rc == 0 and lrc == 0, (out, lines)
    assert out[-1]["sha256"] == lines[-1]["sha256"] == expected_sha(4, 700)
    (est,) = by_type(out, "established")
    if culley:  # seed 002: no frames, markers and CRC always on
        assert est["markers_send"] and est["markers_receive"] and est["crc"]
        assert not by_type(lines, "request")
    else:
        assert est["peer_private_data"] == "aa"
        assert est["markers_receive"] == ("--markers" in options)
        assert by_type(lines, "request")


def test_delayed_reject_and_mismatch() -> None:
    with listen("--connections", "1", "--op", "mpa", "--delayed", "--reject") as listener:
        rc, out = connect(listener.port, "--op", "mpa", "--delayed")
        lrc, lines = listener.finish()
    assert rc == 1 and by_type(out, "rejected") and lrc == 0 and by_type(lines, "rejected")
    # A plain Initiator to a --delayed listener: its Request is not the hello.
    with listen("--connections", "1", "--op", "mpa", "--delayed") as listener:
        rc, out = connect(listener.port, "--op", "mpa", "--timeout", "2")
        lrc, lines = listener.finish()
    check_contract(lines)
    assert rc == 1 and lrc == 1
    assert "unexpected streaming message" in str(by_type(lines, "error")[0]["message"])
    assert by_type(out, "error")[0]["code"] == 1


def test_streaming_modes_need_bare_mpa() -> None:
    rc, out = connect(1, "--delayed")
    assert rc == 2 and "--op mpa" in str(out[-1]["message"])
    rc, out = connect(1, "--mpa-mode", "culley", "--op", "write")
    assert rc == 2 and "--op mpa" in str(out[-1]["message"])
