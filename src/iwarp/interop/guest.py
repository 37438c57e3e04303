"""Build the siw guest: Debian's kernel, siw.ko built from Debian's source, an initramfs.

Debian's kernels do not build the soft-iWARP driver (``# CONFIG_RDMA_SIW is
not set`` in bookworm's 6.1), so the builder takes ``drivers/infiniband/sw/siw``
from the ``linux-source-X.Y`` package that matches the guest kernel and
compiles it out of tree against ``linux-headers-$KVER``. siw 6.1 has no module
parameters: its knobs are ``const`` globals, so each *variant* (peer-to-peer,
CRC required, MPA Rev 1, ...) is a separate build of the same source with
other constants. All builds go into one initramfs; the guest loads one at boot
and can swap it (``siw-use NAME``) without rebooting.

Everything comes from Debian packages fetched with ``apt-get download`` at run
time and is kept in the cache (``$XDG_CACHE_HOME/iwarp/siw``), never in a git
tree. Host tools needed: apt, dpkg-deb, tar, xz, gcc, make, kmod (depmod,
modprobe), cpio, gzip, and ``linux-headers-$KVER`` installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final

#: Packages the guest runs, with their Depends closure (pruned, see below).
GUEST_PACKAGES: Final = (
    "busybox-static",
    "kmod",
    "iproute2",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "libc-bin",
)

#: Depends that only matter to a full system (maintainer scripts, init
#: systems, perl and python, base utilities busybox replaces). No maintainer
#: script ever runs in the guest: packages are only unpacked.
_PRUNE: Final = re.compile(
    r"^(<.*>|adduser|base-files|bsdutils|cdebconf|coreutils|debconf|debianutils|dpkg|"
    r"init-system-helpers|install-info|libaudit.*|libdebian-installer.*|libgdbm.*|libnewt.*|"
    r"libpam.*|libperl.*|lib.*-perl|libsemanage.*|libsepol.*|libslang.*|libsystemd.*|"
    r"libtextwrap.*|libelogind.*|login|lsb-base|mawk|media-types|mount|netbase|passwd|perl.*|"
    r"python3.*|readline-common|sensible-utils|systemd.*|sysvinit-utils|tar|tzdata|ucf|udev|"
    r"usr-is-merged|usrmerge|util-linux.*)$"
)

#: Kernel modules the guest loads besides siw (their dependencies follow).
GUEST_MODULES: Final = (
    "virtio_pci",
    "virtio_net",
    "9pnet_virtio",
    "9p",
    "crc32c_generic",
    "crc32c-intel",
    "libcrc32c",
    "ib_core",
    "iw_cm",
    "rdma_cm",
    "rdma_ucm",
    "ib_uverbs",
)

#: Host tools the build runs, with the Debian package that has each.
HOST_TOOLS: Final = {
    "apt-get": "apt",
    "apt-cache": "apt",
    "dpkg-deb": "dpkg",
    "tar": "tar",
    "xz": "xz-utils",
    "make": "make",
    "gcc": "gcc",
    "depmod": "kmod",
    "modprobe": "kmod",
    "cpio": "cpio",
    "gzip": "gzip",
}


@dataclass(frozen=True, slots=True)
class SiwVariant:
    """One build of siw: the values of its compile-time knobs (siw_main.c, siw_cm.c)."""

    name: str
    summary: str
    crc_required: bool = False
    crc_strict: bool = False
    peer_to_peer: bool = False
    mpa_version: int = 2
    #: RTR types offered as peer-to-peer initiator: "READ", "WRITE" or "READ|WRITE".
    rtr_types: str = "READ|WRITE"
    relaxed_ird: bool = True

    def substitutions(self) -> dict[str, list[tuple[str, str]]]:
        """Line rewrites per source file: (regex of the declaration, new declaration)."""
        rtr = " | ".join(f"MPA_V2_RDMA_{t.strip()}_RTR" for t in self.rtr_types.split("|"))
        main = [
            _bool_const("mpa_crc_required", self.crc_required),
            _bool_const("mpa_crc_strict", self.crc_strict),
            _bool_const("peer_to_peer", self.peer_to_peer),
            (r"^u_char mpa_version = .*;", f"u_char mpa_version = {self.mpa_version};"),
        ]
        cm = [
            (r"^static __be16 rtr_type = .*;", f"static __be16 rtr_type = {rtr};"),
            _bool_const("relaxed_ird_negotiation", self.relaxed_ird, prefix="static const bool"),
        ]
        return {"siw_main.c": main, "siw_cm.c": cm}


def _bool_const(name: str, value: bool, prefix: str = "const bool") -> tuple[str, str]:
    # Matches both "const bool x;" (zero-initialised) and "const bool x = ...;".
    return rf"^{prefix} {name}( = .*)?;", f"{prefix} {name} = {'true' if value else 'false'};"


#: The builds every guest carries. ``default`` is siw as Linux ships it.
VARIANTS: Final[dict[str, SiwVariant]] = {
    v.name: v
    for v in (
        SiwVariant("default", "siw as shipped: Rev 2, CRC accepted not requested, no P2P"),
        SiwVariant(
            "p2p", "RFC 6581 peer-to-peer initiator offering Write and Read RTR", peer_to_peer=True
        ),
        SiwVariant(
            "p2p-write",
            "peer-to-peer initiator offering only Write RTR",
            peer_to_peer=True,
            rtr_types="WRITE",
        ),
        SiwVariant(
            "p2p-read",
            "peer-to-peer initiator offering only Read RTR",
            peer_to_peer=True,
            rtr_types="READ",
        ),
        SiwVariant(
            "crc", "CRC required: requests C=1, refuses a peer without CRC", crc_required=True
        ),
        SiwVariant("v1", "MPA Rev 1 initiator (RFC 5044 without RFC 6581)", mpa_version=1),
    )
}


class GuestBuildError(RuntimeError):
    """The guest could not be built; the message says what to install or fix."""


def cache_root() -> Path:
    """Where guest builds live: ``$XDG_CACHE_HOME/iwarp/siw`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iwarp" / "siw"


def git_tree_containing(path: Path) -> Path | None:
    """The git work tree that ``path`` (or its nearest existing parent) is in, if any."""
    p = path.resolve()
    while not p.exists():
        p = p.parent
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


@dataclass(frozen=True, slots=True)
class GuestImage:
    """A built guest: kernel, initramfs and what went into them."""

    root: Path
    kver: str
    variants: tuple[str, ...]
    packages: dict[str, str] = field(default_factory=dict)

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @classmethod
    def load(cls, root: Path | None = None) -> GuestImage | None:
        """The guest built under ``root`` (default: the cache), or None if none is usable.

        Usable means its manifest names the kernel and initramfs that are there, octet for
        octet: a build that stopped half way (a new kernel beside the old modules, say) would
        boot a guest that cannot load a module and powers off. :meth:`problem` says why not.
        """
        found = cls._inspect(root or cache_root())
        return found if isinstance(found, GuestImage) else None

    @classmethod
    def problem(cls, root: Path | None = None) -> str:
        """Why :meth:`load` finds no usable guest under ``root`` ('' when it finds one)."""
        found = cls._inspect(root or cache_root())
        return "" if isinstance(found, GuestImage) else found

    @classmethod
    def _inspect(cls, root: Path) -> GuestImage | str:
        out = root / "guest"
        try:
            manifest = json.loads((out / "manifest.json").read_text())
        except (OSError, ValueError):
            return f"the siw guest is not built (run: iwarp interop build; looked in {out})"
        image = cls(
            out,
            manifest["kver"],
            tuple(manifest["variants"]),
            dict(manifest.get("packages", {})),
        )
        digests = manifest.get("files")
        if not isinstance(digests, dict):
            return f"the siw guest in {out} predates file digests (run: iwarp interop build)"
        for path in (image.kernel, image.initrd):
            if _digest(path) != digests.get(path.name):
                return (
                    f"{path} does not match its manifest, as when a build stopped half way "
                    "(run: iwarp interop build)"
                )
        return image


def _digest(path: Path) -> str | None:
    """The SHA-256 of ``path`` as hex, None when it is missing."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _swap_into_place(staging: Path, out: Path) -> None:
    """Replace ``out`` by ``staging``: a reader sees the old guest, none, or the new one."""
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def _guest_file(name: str) -> bytes:
    return resources.files("iwarp.interop").joinpath("guest", name).read_bytes()


GUEST_FILES: Final = ("init", "siw-use", "wait-listen")


class GuestBuilder:
    """Builds (or reuses) the guest under a cache folder; ``log`` receives progress lines."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        kver: str | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.root = (root or cache_root()).resolve()
        tree = git_tree_containing(self.root)
        if tree is not None:
            raise GuestBuildError(
                f"cache {self.root} is inside the git tree {tree}; set XDG_CACHE_HOME elsewhere"
            )
        self.debs = self.root / "debs"
        self._kver = kver
        self.log = log

    # --- entry point ---------------------------------------------------------

    def build(self, *, force: bool = False) -> GuestImage:
        """Build kernel + initramfs with every variant; reuse them when nothing changed."""
        t0 = time.monotonic()
        self.check_host()
        kver = self.kver()
        series = ".".join(kver.split(".")[:2])
        packages = self.resolve_packages()
        wanted = {
            "kver": kver,
            "variants": list(VARIANTS),
            "knobs": {n: asdict(v) for n, v in VARIANTS.items()},
            "packages": packages,
            "guest_files": {n: hashlib.sha256(_guest_file(n)).hexdigest() for n in GUEST_FILES},
        }
        out = self.root / "guest"
        existing = GuestImage.load(self.root)
        if existing and not force:
            old = json.loads((out / "manifest.json").read_text())
            if {k: old.get(k) for k in wanted} == wanted:
                self.log(f"guest up to date in {out}")
                return existing
        elif existing is None and out.exists():
            self.log(f"rebuilding: {GuestImage.problem(self.root)}")
        self.download({**packages, f"linux-image-{kver}": None, f"linux-source-{series}": None})
        kroot = self.unpack_kernel(kver)
        src = self.unpack_siw_source(series)
        modules = {name: self.build_siw(src, kver, v) for name, v in VARIANTS.items()}
        rootfs = self.make_rootfs(packages, kroot, kver, modules)
        # Built beside the guest in use and swapped in whole, the manifest (with the
        # files' digests) written last: a build that stops half way leaves the old
        # guest, or none, never a new kernel beside old modules.
        staging = out.with_name(out.name + ".new")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copyfile(kroot / "boot" / f"vmlinuz-{kver}", staging / "vmlinuz")
        self.pack_initrd(rootfs, staging / "initrd.img")
        files = {n: _digest(staging / n) for n in ("vmlinuz", "initrd.img")}
        manifest = {**wanted, "files": files}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        _swap_into_place(staging, out)
        size = (out / "initrd.img").stat().st_size / 1e6
        self.log(f"guest built in {time.monotonic() - t0:.0f} s: {out} (initrd {size:.1f} MB)")
        image = GuestImage.load(self.root)
        assert image is not None
        return image

    # --- steps -----------------------------------------------------------------

    def check_host(self) -> None:
        missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
        if missing:
            raise GuestBuildError(
                f"missing host tools; run: apt-get install -y {' '.join(missing)}"
            )

    def kver(self) -> str:
        """The guest kernel ABI: the one ``linux-image-amd64`` depends on now."""
        if self._kver is None:
            out = self._run(["apt-cache", "depends", "linux-image-amd64"])
            m = re.search(r"Depends: linux-image-(\S+-amd64)$", out, re.MULTILINE)
            if not m:
                raise GuestBuildError(
                    "cannot find the kernel linux-image-amd64 depends on (run apt-get update)"
                )
            self._kver = m.group(1)
        headers = Path("/usr/src") / f"linux-headers-{self._kver}"
        if not headers.is_dir():
            raise GuestBuildError(
                f"{headers} missing; run: apt-get install -y linux-headers-{self._kver}"
            )
        return self._kver

    def resolve_packages(self) -> dict[str, str]:
        """Guest packages (top ones and their Depends closure, pruned) -> candidate version."""
        names: set[str] = set()
        todo = list(GUEST_PACKAGES)
        while todo:
            # One apt-cache call per level of the dependency graph.
            out = self._run(
                ["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts",
                 "--no-breaks", "--no-replaces", "--no-enhances", "--no-pre-depends", *todo]
            )  # fmt: skip
            names.update(todo)
            found: set[str] = set()
            for line in out.splitlines():
                m = re.match(r"\s+\|?(?:Pre)?Depends: (\S+)", line)
                if m and not _PRUNE.match(m.group(1)):
                    found.add(m.group(1))
            todo = sorted(found - names)
        policy = self._run(["apt-cache", "policy", *sorted(names)])
        versions: dict[str, str] = {}
        for block in re.split(r"^(?=\S)", policy, flags=re.MULTILINE):
            m = re.match(r"(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", block)
            if m and m.group(2) != "(none)":
                versions[m.group(1)] = m.group(2)
        unknown = sorted(set(GUEST_PACKAGES) - set(versions))
        if unknown:
            raise GuestBuildError(f"no candidate for {unknown} (run apt-get update)")
        return dict(sorted(versions.items()))

    def download(self, packages: dict[str, str | None]) -> None:
        """Fetch the .debs not in the cache yet (``None``: any version will do)."""
        self.debs.mkdir(parents=True, exist_ok=True)
        need = [p for p, v in packages.items() if self._find_deb(p, v) is None]
        if need:
            self.log(f"downloading {len(need)} Debian packages: {' '.join(need)}")
            self._run(["apt-get", "download", "-q", *need], cwd=self.debs)

    def unpack_kernel(self, kver: str) -> Path:
        kroot = self.root / "kernel" / kver
        if not (kroot / "boot" / f"vmlinuz-{kver}").exists():
            self.log(f"unpacking linux-image-{kver}")
            shutil.rmtree(kroot, ignore_errors=True)
            kroot.mkdir(parents=True)
            self._run(["dpkg-deb", "-x", str(self._deb(f"linux-image-{kver}")), str(kroot)])
            self._run(["depmod", "-b", str(kroot), kver])
        return kroot

    def unpack_siw_source(self, series: str) -> Path:
        """``drivers/infiniband/sw/siw`` from the linux-source tarball, and nothing else."""
        deb = self._deb(f"linux-source-{series}")
        src = self.root / "src" / deb.stem
        siw = src / f"linux-source-{series}" / "drivers/infiniband/sw/siw"
        if not siw.is_dir():
            self.log(f"unpacking siw from {deb.name}")
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir(parents=True)
            inner = f"./usr/src/linux-source-{series}.tar.xz"
            script = (
                'dpkg-deb --fsys-tarfile "$1" | tar -xO "$2" | '
                'tar -xJ -C "$3" "linux-source-$4/drivers/infiniband/sw/siw"'
            )
            self._run(["sh", "-ec", script, "sh", str(deb), inner, str(src), series])
        return siw

    def build_siw(self, src: Path, kver: str, variant: SiwVariant) -> tuple[Path, str]:
        """Compile siw.ko with the variant's knobs; returns the module and the knob lines."""
        build = self.root / "build" / kver / variant.name
        stamp = build / "iwarp-build.json"
        key = json.dumps({"source": str(src), "variant": asdict(variant)}, sort_keys=True)
        if (build / "siw.ko").exists() and stamp.exists() and stamp.read_text() == key:
            return build / "siw.ko", (build / "iwarp-knobs.txt").read_text()
        shutil.rmtree(build, ignore_errors=True)
        shutil.copytree(src, build)
        knobs: list[str] = []
        for fname, subs in variant.substitutions().items():
            path = build / fname
            text = path.read_text()
            for pattern, replacement in subs:
                text, n = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
                if n != 1:
                    raise GuestBuildError(f"{fname}: no line matches {pattern!r}; siw changed")
                knobs.append(replacement)
            path.write_text(text)
        self.log(f"building siw.ko ({variant.name}: {variant.summary})")
        self._run(
            ["make", "-s", "-C", f"/usr/src/linux-headers-{kver}", f"M={build}",
             "CONFIG_RDMA_SIW=m", "modules"]
        )  # fmt: skip
        (build / "iwarp-knobs.txt").write_text("\n".join(knobs) + "\n")
        stamp.write_text(key)
        return build / "siw.ko", "\n".join(knobs) + "\n"

    def make_rootfs(
        self,
        packages: dict[str, str],
        kroot: Path,
        kver: str,
        modules: dict[str, tuple[Path, str]],
    ) -> Path:
        rootfs = self.root / "rootfs"
        self.log(f"assembling the guest root from {len(packages)} packages")
        shutil.rmtree(rootfs, ignore_errors=True)
        for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64"):
            (rootfs / d).mkdir(parents=True)
        for d in ("bin", "sbin", "lib", "lib64"):  # merged /usr, as Debian 12 has it
            (rootfs / d).symlink_to(f"usr/{d}")
        script = 'dpkg-deb --fsys-tarfile "$1" | tar -x --keep-directory-symlink -C "$2"'
        for pkg, version in packages.items():
            self._run(["sh", "-ec", script, "sh", str(self._deb(pkg, version)), str(rootfs)])
        for junk in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
                     "usr/share/lintian", "usr/lib/x86_64-linux-gnu/gconv"):  # fmt: skip
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        self._busybox_links(rootfs)
        self._copy_modules(rootfs, kroot, kver)
        siwdir = rootfs / "usr/lib/iwarp-siw"
        siwdir.mkdir(parents=True)
        for name, (ko, knobs) in modules.items():
            shutil.copyfile(ko, siwdir / f"{name}.ko")
            (siwdir / f"{name}.knobs").write_text(knobs)
        sbin = rootfs / "usr/local/sbin"
        sbin.mkdir(parents=True)
        for name in GUEST_FILES:
            target = rootfs / "init" if name == "init" else sbin / name
            target.write_bytes(_guest_file(name))
            target.chmod(0o755)
        (rootfs / "etc").mkdir(exist_ok=True)
        (rootfs / "etc/iwarp-guest.json").write_text(
            json.dumps({"kver": kver, "packages": packages}, indent=1) + "\n"
        )
        for d in ("proc", "sys", "dev", "tmp", "run", "host", "root", "var/run"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        self._run(["ldconfig", "-r", str(rootfs)], check=False)
        return rootfs

    def pack_initrd(self, rootfs: Path, dest: Path) -> None:
        self.log("packing the initramfs")
        tmp = dest.with_suffix(".tmp")
        script = 'cd "$1" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1 > "$2"'
        self._run(["sh", "-ec", script, "sh", str(rootfs), str(tmp)])
        tmp.replace(dest)

    # --- helpers ---------------------------------------------------------------

    def _busybox_links(self, rootfs: Path) -> None:
        """Link every busybox applet that no unpacked package provides."""
        busybox = rootfs / "usr/bin/busybox"
        applets = self._run([str(busybox), "--list-full"]).split()
        for rel in applets:
            path = rootfs / rel
            if rel.startswith(("bin/", "sbin/")):
                path = rootfs / "usr" / rel
            if not os.path.lexists(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to("/usr/bin/busybox")

    def _copy_modules(self, rootfs: Path, kroot: Path, kver: str) -> None:
        moddir = kroot / "lib/modules" / kver
        dest = rootfs / "lib/modules" / kver
        files: set[Path] = set()
        for mod in GUEST_MODULES:
            out = self._run(
                ["modprobe", "-d", str(kroot), "-S", kver, "--show-depends", mod], check=False
            )
            files.update(
                Path(line.split()[1]) for line in out.splitlines() if line.startswith("insmod ")
            )
        for f in sorted(files):
            rel = f.relative_to(moddir)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest / rel)
        for meta in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            shutil.copyfile(moddir / meta, dest / meta)
        self._run(["depmod", "-b", str(rootfs), kver])

    def _find_deb(self, package: str, version: str | None = None) -> Path | None:
        # Debian file names spell the epoch colon as %3a.
        pattern = f"{package}_{version.replace(':', '%3a') if version else '*'}_*.deb"
        found = sorted(self.debs.glob(pattern)) if self.debs.is_dir() else []
        return found[-1] if found else None

    def _deb(self, package: str, version: str | None = None) -> Path:
        deb = self._find_deb(package, version)
        if deb is None:
            raise GuestBuildError(f"{package}: .deb not downloaded")
        return deb

    def _run(self, cmd: list[str], *, cwd: Path | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, errors="replace", check=False
        )
        if check and proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
            raise GuestBuildError(
                f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n" + "\n".join(tail)
            )
        return proc.stdout
