"""``iwarp listen``/``connect`` options that model peers: --refuse-markers (siw),
--require-p2p and --refuse-rev0 (irdma), --rtr-prefer (siw/irdma order)."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys

import pytest

from iwarp.cli import build_parser
from iwarp.cli._mpa_options import config_from
from iwarp.mpa.config import Rev0Profile
from iwarp.mpa.wire import REQUEST_KEY, RtrFlags

IWARP = [sys.executable, "-m", "iwarp"]
#: Linux siw's Request: Rev 2, S set, IRD/ORD 1/1, no peer-to-peer bit.
SIW_REQUEST = REQUEST_KEY + bytes.fromhex("10020004 00010001")


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["listen", *argv])


def test_options_set_the_knobs() -> None:
    cfg = config_from(
        parse("--refuse-markers", "--require-p2p", "--refuse-rev0", "--rtr-prefer", "read,write")
    )
    assert cfg.refuse_markers and cfg.require_peer_to_peer
    assert cfg.rev0_profile is Rev0Profile.REFUSE
    assert cfg.rtr_preference == (RtrFlags.READ, RtrFlags.WRITE)


def test_defaults_are_unchanged() -> None:
    cfg = config_from(parse())
    assert not cfg.refuse_markers and not cfg.require_peer_to_peer
    assert cfg.rev0_profile is Rev0Profile.NON_PERMISSIVE
    assert cfg.rtr_preference == (RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND)


def test_bad_mixes_are_refused() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        config_from(parse("--permissive", "--refuse-rev0"))
    with pytest.raises(ValueError, match="mean nothing"):
        config_from(parse("--op", "mpa", "--mpa-mode", "culley", "--refuse-markers"))


@pytest.mark.parametrize("order", ["", "read,read", "write,bogus", ","])
def test_bad_rtr_order_is_a_usage_error(order: str) -> None:
    with pytest.raises(SystemExit):
        parse("--rtr-prefer", order)


def run_listen(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*IWARP, "listen", "--port", "0", "--json", "--connections", "1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_line(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    record: dict[str, object] = json.loads(proc.stdout.readline())
    assert record["type"] == "listening"
    return record


def finish(proc: subprocess.Popen[str]) -> tuple[int, list[dict[str, object]]]:
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, [json.loads(line) for line in out.splitlines() if line.strip()]


def received_until_closed(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(100):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_require_p2p_listener_closes_on_siws_request_without_a_reply() -> None:
    """What irdma does to siw's default Request (no A bit): no Reply, a close."""
    proc = run_listen("--op", "mpa", "--require-p2p")
    port = first_line(proc)["port"]
    assert isinstance(port, int)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as siw:
        siw.sendall(SIW_REQUEST)
        assert received_until_closed(siw) == b""
    rc, lines = finish(proc)
    errors = [line for line in lines if line["type"] == "error"]
    assert rc == 1 and errors and errors[0]["code"] == 4
    assert "peer-to-peer" in str(errors[0]["message"])


def test_refuse_markers_listener_rejects_connect_markers() -> None:
    proc = run_listen("--op", "mpa", "--refuse-markers")
    port = first_line(proc)["port"]
    done = subprocess.run(
        [*IWARP, "connect", "127.0.0.1", str(port), "--json", "--op", "mpa", "--markers"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    rc, lines = finish(proc)
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1
    rejected = [line for line in out if line["type"] == "rejected"]
    assert rejected and rejected[0]["reject"] is True and rejected[0]["markers"] is False
    assert rc == 0 and any(line["type"] == "rejected" for line in lines)
