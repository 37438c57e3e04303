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


def _built(root: Path, kernel: bytes = b"kernel", initrd: bytes = b"initrd") -> Path:
    """A guest folder as a finished build leaves it (the manifest names the files' digests)."""
    import hashlib
    import json

    out = root / "guest"
    out.mkdir(parents=True)
    (out / "vmlinuz").write_bytes(kernel)
    (out / "initrd.img").write_bytes(initrd)
    files = {"vmlinuz": hashlib.sha256(kernel).hexdigest()}
    files["initrd.img"] = hashlib.sha256(initrd).hexdigest()
    manifest = {"kver": "6.1.0-0-amd64", "variants": list(VARIANTS), "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_a_guest_whose_files_match_its_manifest_loads(tmp_path: Path) -> None:
    _built(tmp_path)
    image = GuestImage.load(tmp_path)
    assert image is not None and image.kver == "6.1.0-0-amd64"
    assert GuestImage.problem(tmp_path) == ""


def test_a_kernel_from_another_build_is_refused(tmp_path: Path) -> None:
    """A build that stopped after writing the new kernel, before the initramfs with its
    modules: that guest cannot mount its share and powers off. It must not load."""
    out = _built(tmp_path)
    (out / "vmlinuz").write_bytes(b"another kernel")
    assert GuestImage.load(tmp_path) is None
    assert "vmlinuz does not match its manifest" in GuestImage.problem(tmp_path)


def test_a_guest_without_digests_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    import json

    out = _built(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["files"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert GuestImage.load(tmp_path) is None
    assert "predates file digests" in GuestImage.problem(tmp_path)
    assert "not built" in GuestImage.problem(tmp_path / "elsewhere")


class _FakeBuilder(GuestBuilder):
    """Every step of a build stubbed: what build() does with their results is the test."""

    def __init__(self, root: Path, kernel: bytes, *, fail_packing: bool = False) -> None:
        super().__init__(root, kver="6.1.0-1-amd64", log=lambda _: None)
        self.kernel = kernel
        self.fail_packing = fail_packing

    def check_host(self) -> None:
        pass

    def kver(self) -> str:
        return "6.1.0-1-amd64"

    def resolve_packages(self) -> dict[str, str]:
        return {"busybox-static": "1"}

    def download(self, packages: object) -> None:
        pass

    def unpack_kernel(self, kver: str) -> Path:
        kroot = self.root / "kroot"
        (kroot / "boot").mkdir(parents=True, exist_ok=True)
        (kroot / "boot" / f"vmlinuz-{kver}").write_bytes(self.kernel)
        return kroot

    def unpack_siw_source(self, series: str) -> Path:
        return self.root

    def build_siw(self, src: Path, kver: str, variant: object) -> tuple[Path, str]:
        return self.root, ""

    def make_rootfs(self, *args: object) -> Path:
        return self.root

    def pack_initrd(self, rootfs: Path, dest: Path) -> None:
        if self.fail_packing:
            raise GuestBuildError("stopped while packing")
        dest.write_bytes(b"initrd for " + self.kernel)


def test_a_build_that_stops_half_way_leaves_the_old_guest(tmp_path: Path) -> None:
    _built(tmp_path)
    with pytest.raises(GuestBuildError):
        _FakeBuilder(tmp_path, b"new kernel", fail_packing=True).build()
    image = GuestImage.load(tmp_path)
    assert image is not None and image.kernel.read_bytes() == b"kernel"
    # The next build replaces the guest whole, and knows it up to date afterwards.
    built = _FakeBuilder(tmp_path, b"new kernel").build()
    assert built.kver == "6.1.0-1-amd64"
    assert built.kernel.read_bytes() == b"new kernel"
    assert built.initrd.read_bytes() == b"initrd for new kernel"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("guest")) == ["guest"]
    again = _FakeBuilder(tmp_path, b"other kernel")
    assert again.build().kernel.read_bytes() == b"new kernel"  # up to date: not rebuilt


def test_an_early_power_off_is_explained_by_the_guests_last_words(tmp_path: Path) -> None:
    from iwarp.interop.vm import last_words

    console = tmp_path / "console.log"
    assert last_words(console) == ""
    console.write_text(
        "Booting from ROM...\n"
        "mount: mounting host on /host failed: No such device\n"
        "iwarp-guest: cannot mount the host share (kernel 6.1.0-57-amd64; modprobe: x)\n"
        "[    7.3] reboot: Power down\n"
    )
    assert last_words(console).startswith("iwarp-guest: cannot mount the host share")
    console.write_text("[ 1.0] Kernel panic - not syncing: VFS\n[ 1.1] reboot\n")
    assert last_words(console) == "Kernel panic - not syncing: VFS"
