"""Guest builder and VM runner pieces that need no qemu: knobs, cache place, qemu line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iwarp.interop.guest import (
    GUEST_FILES,
    VARIANTS,
    GuestBuilder,
    GuestBuildError,
    GuestImage,
    cache_root,
    git_tree_containing,
)
from iwarp.interop.vm import GUEST_PORTS, Guest, GuestError, free_ports

# The declarations as siw 6.1 has them (siw_main.c, siw_cm.c).
SIW_MAIN = """\
const bool zcopy_tx = true;
const bool try_gso;
const bool loopback_enabled = true;
const bool mpa_crc_required;
const bool mpa_crc_strict;
const bool siw_tcp_nagle;
u_char mpa_version = MPA_REVISION_2;
const bool peer_to_peer;
"""
SIW_CM = """\
static __be16 rtr_type = MPA_V2_RDMA_READ_RTR | MPA_V2_RDMA_WRITE_RTR;
static const bool relaxed_ird_negotiation = true;
"""


def _apply(variant: str) -> dict[str, str]:
    import re

    files = {"siw_main.c": SIW_MAIN, "siw_cm.c": SIW_CM}
    for name, subs in VARIANTS[variant].substitutions().items():
        for pattern, line in subs:
            files[name], n = re.subn(pattern, line, files[name], count=1, flags=re.MULTILINE)
            assert n == 1, (variant, pattern)
    return files


def test_default_variant_keeps_siw_as_shipped() -> None:
    files = _apply("default")
    assert "const bool mpa_crc_required = false;" in files["siw_main.c"]
    assert "const bool peer_to_peer = false;" in files["siw_main.c"]
    assert "u_char mpa_version = 2;" in files["siw_main.c"]
    assert "MPA_V2_RDMA_READ_RTR | MPA_V2_RDMA_WRITE_RTR" in files["siw_cm.c"]


@pytest.mark.parametrize(
    ("variant", "line"),
    [
        ("p2p", "const bool peer_to_peer = true;"),
        ("crc", "const bool mpa_crc_required = true;"),
        ("v1", "u_char mpa_version = 1;"),
        ("p2p-read", "static __be16 rtr_type = MPA_V2_RDMA_READ_RTR;"),
        ("p2p-write", "static __be16 rtr_type = MPA_V2_RDMA_WRITE_RTR;"),
    ],
)
def test_variant_knobs(variant: str, line: str) -> None:
    files = _apply(variant)
    assert line in files["siw_main.c"] + files["siw_cm.c"]


def test_cache_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "iwarp" / "siw"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "iwarp" / "siw"


def test_cache_inside_a_git_tree_is_refused(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert git_tree_containing(tmp_path / "a" / "b") == tmp_path
    with pytest.raises(GuestBuildError, match="inside the git tree"):
        GuestBuilder(tmp_path / "cache")


def test_guest_files_ship_with_the_package() -> None:
    from importlib import resources

    for name in GUEST_FILES:
        text = resources.files("iwarp.interop").joinpath("guest", name).read_text()
        assert text.startswith("#!/bin/sh\n"), name


def test_no_image_when_nothing_built(tmp_path: Path) -> None:
    assert GuestImage.load(tmp_path) is None


def _image(tmp_path: Path) -> GuestImage:
    root = tmp_path / "guest"
    return GuestImage(root, "6.1.0-0-amd64", tuple(VARIANTS))


def test_qemu_command_is_loopback_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IWARP_QEMU_ACCEL", "tcg")
    guest = Guest(_image(tmp_path), variant="p2p", forwards=2, rundir=tmp_path / "run")
    cmd = guest.qemu_command()
    net = cmd[cmd.index("-netdev") + 1]
    assert net.startswith("user,") and "restrict=on" in net
    for host_port, guest_port in zip(guest.hostfwd, GUEST_PORTS, strict=False):
        assert f"hostfwd=tcp:127.0.0.1:{host_port}-:{guest_port}" in net
    for port in guest.guestfwd:
        assert f"TCP4:127.0.0.1:{port}" in net
    assert "iwarp.siw=p2p" in cmd[cmd.index("-append") + 1]
    assert "tcg,thread=multi" in cmd and "-enable-kvm" not in cmd


def test_unknown_variant_refused(tmp_path: Path) -> None:
    with pytest.raises(GuestError, match="no siw variant"):
        Guest(_image(tmp_path), variant="nope")


def test_free_ports_differ() -> None:
    ports = free_ports(4)
    assert len(set(ports)) == 4
