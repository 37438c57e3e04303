"""Boot the siw guest under qemu and run jobs in it.

Networking is qemu user mode only, with ``restrict=on``: the guest reaches
nothing but the forwards set up here, and every host end is on 127.0.0.1.

* ``hostfwd``: host ``127.0.0.1:H`` -> guest ``10.0.2.15:G`` (iwarp connects to a guest server).
* ``guestfwd``: guest ``10.0.2.100:P`` -> host ``127.0.0.1:P`` through one ``socat`` per
  connection that qemu starts (a guest client reaches an iwarp server; the server
  may start after the guest).

Jobs go through a 9p share (see ``guest/init``): several per boot, run
concurrently, each with its own output and exit status, so one boot serves
many cases. Every wait has a deadline; the qemu started here is the only
process ever stopped, through its own handle.

``/dev/kvm`` is used only when a hardware KVM module (``kvm_intel``/``kvm_amd``)
backs it; some hosts expose ``kvm_pvm`` there, which cannot boot a stock
kernel, so TCG emulation is the fallback (set ``IWARP_QEMU_ACCEL`` to force).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from iwarp.interop.guest import GuestImage, cache_root
from iwarp.interop.host import end_process

GUEST_IP: Final = "10.0.2.15"
#: The address a guest program uses to reach a host server (guestfwd).
HOST_ALIAS: Final = "10.0.2.100"
#: Guest ports behind the host forwards, in order.
GUEST_PORTS: Final = (7471, 7472, 7473, 7474)


class GuestError(RuntimeError):
    """The guest did not boot, died, or a job did not finish in time."""


def pick_accel() -> str:
    """``kvm`` on hardware KVM, else ``tcg``; ``IWARP_QEMU_ACCEL`` overrides."""
    forced = os.environ.get("IWARP_QEMU_ACCEL")
    if forced:
        return forced
    hardware = any(Path("/sys/module", m).exists() for m in ("kvm_intel", "kvm_amd"))
    return "kvm" if hardware and os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (bound all at once so they differ)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a guest job left: exit status (None if it did not finish), output, duration."""

    rc: int | None
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Job:
    """A command running in the guest."""

    def __init__(self, guest: Guest, job_id: str, started: float) -> None:
        self.guest = guest
        self.id = job_id
        self.started = started

    @property
    def _rc_file(self) -> Path:
        return self.guest.jobs / f"{self.id}.rc"

    def done(self) -> bool:
        return self._rc_file.exists()

    def output(self) -> str:
        out = self.guest.jobs / f"{self.id}.out"
        return out.read_text(errors="replace") if out.exists() else ""

    def kill(self) -> None:
        """Stop the job and everything it started (its own session in the guest)."""
        if not self.done():
            self.guest.killed_jobs += 1
            self.guest.run(f"kill -KILL -$(cat /run/jobs/{self.id}.pid)", timeout=10)

    def wait(self, timeout: float, *, kill: bool = False) -> JobResult:
        """Wait for the job; on timeout ``rc`` is None and, with ``kill``, the job is stopped."""
        deadline = time.monotonic() + timeout
        while not self.done():
            self.guest.check_alive()
            if time.monotonic() > deadline:
                if kill:
                    self.kill()
                return JobResult(None, self.output(), time.monotonic() - self.started)
            time.sleep(0.05)
        text = self._rc_file.read_text().strip()
        return JobResult(
            int(text) if text.isdigit() else None, self.output(), time.monotonic() - self.started
        )


def last_words(console: Path) -> str:
    """The guest's last say before it stopped: its init's last line, or a kernel panic.

    A guest that powers off early (qemu exits 0) has said why on its console; the
    error names it so a CI log shows the cause without the console file.
    """
    try:
        lines = console.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        for mark in ("iwarp-guest:", "Kernel panic"):
            at = line.find(mark)
            if at >= 0:
                return line[at:].strip()[:300]
    return ""


class Guest:
    """One boot of the siw guest.

    ``hostfwd`` ports (host side) map to :data:`GUEST_PORTS`; ``guestfwd`` ports are
    the same number on both sides. Use as a context manager; ``close()`` halts the
    guest and, after ``halt_timeout``, stops qemu.
    """

    def __init__(
        self,
        image: GuestImage,
        *,
        variant: str = "default",
        forwards: int = 2,
        rundir: Path | None = None,
        memory_mb: int = 512,
        cpus: int = 2,
        siw_debug: bool = False,
        boot_timeout: float = 90.0,
    ) -> None:
        if variant not in image.variants:
            raise GuestError(
                f"no siw variant {variant!r} in the guest ({', '.join(image.variants)})"
            )
        self.image = image
        self.variant = variant
        self.hostfwd = free_ports(min(forwards, len(GUEST_PORTS)))
        self.guestfwd = free_ports(forwards)
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{variant}"
        self.rundir = rundir or cache_root() / "runs" / stamp
        self.share = self.rundir / "share"
        self.jobs = self.share / "jobs"
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.siw_debug = siw_debug
        self.boot_timeout = boot_timeout
        self.boot_seconds: float | None = None
        #: Jobs stopped by :meth:`Job.kill`: siw may keep state from them.
        self.killed_jobs = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._console: int | None = None
        self._next_job = 0
        self._t0 = 0.0

    def guest_port(self, index: int) -> int:
        """The guest port reached through host port ``hostfwd[index]``."""
        return GUEST_PORTS[index]

    def qemu_command(self) -> list[str]:
        net = "user,id=n0,net=10.0.2.0/24,host=10.0.2.2,restrict=on"
        for host_port, guest_port in zip(self.hostfwd, GUEST_PORTS, strict=False):
            net += f",hostfwd=tcp:127.0.0.1:{host_port}-:{guest_port}"
        for port in self.guestfwd:
            net += f",guestfwd=tcp:{HOST_ALIAS}:{port}-cmd:socat STDIO TCP4:127.0.0.1:{port}"
        append = f"console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init iwarp.siw={self.variant}"
        if self.siw_debug:
            append += " iwarp.debug=1"
        if pick_accel() == "kvm":
            accel = ["-enable-kvm", "-cpu", "host"]
        else:
            accel = ["-accel", "tcg,thread=multi", "-cpu", "max"]
        return [
            "qemu-system-x86_64", *accel,
            "-m", str(self.memory_mb), "-smp", str(self.cpus),
            "-nographic", "-nodefaults", "-no-reboot", "-serial", "stdio",
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd),
            "-append", append,
            "-netdev", net, "-device", "virtio-net-pci,netdev=n0,romfile=",
            "-fsdev", f"local,id=fs0,path={self.share},security_model=none",
            "-device", "virtio-9p-pci,fsdev=fs0,mount_tag=host",
        ]  # fmt: skip

    def start(self) -> Guest:
        """Boot and wait until siw0 is up; records ``boot_seconds``."""
        for tool in ("qemu-system-x86_64", "socat"):
            if shutil.which(tool) is None:
                raise GuestError(f"{tool} not found (apt-get install qemu-system-x86 socat)")
        if self.rundir.exists():
            shutil.rmtree(self.rundir)
        self.jobs.mkdir(parents=True)
        cmd = self.qemu_command()
        (self.rundir / "qemu.cmdline").write_text(shlex.join(cmd) + "\n")
        self._console = os.open(self.rundir / "console.log", os.O_WRONLY | os.O_CREAT, 0o644)
        self._t0 = time.monotonic()
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._console, stderr=subprocess.STDOUT
        )
        deadline = self._t0 + self.boot_timeout
        while not (self.share / "ready").exists():
            self.check_alive()
            if time.monotonic() > deadline:
                self.close()
                raise GuestError(
                    f"guest not ready after {self.boot_timeout:.0f} s; see {self.console_path}"
                )
            time.sleep(0.05)
        self.boot_seconds = time.monotonic() - self._t0
        return self

    @property
    def console_path(self) -> Path:
        return self.rundir / "console.log"

    def info(self) -> str:
        """What the guest wrote about itself at boot (kernel, siw knobs, devices, tools)."""
        path = self.share / "info.txt"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        if self._proc is None:
            raise GuestError("guest not started")
        if self._proc.poll() is not None:
            said = last_words(self.console_path)
            why = f": {said}" if said else ""
            raise GuestError(f"qemu exited ({self._proc.returncode}){why}; see {self.console_path}")

    def spawn(self, script: str, *, timeout: float | None = None) -> Job:
        """Start ``script`` (sh) in the guest; with ``timeout`` the guest kills it after that."""
        self.check_alive()
        self._next_job += 1
        job_id = f"{self._next_job:04d}"
        body = script
        if timeout is not None:
            body = f"timeout -s KILL {max(1, round(timeout))} sh -c {shlex.quote(script)}"
        tmp = self.jobs / f"{job_id}.tmp"
        tmp.write_text(f"cd /tmp\n{body}\n")
        tmp.rename(self.jobs / f"{job_id}.sh")
        return Job(self, job_id, time.monotonic())

    def run(self, script: str, *, timeout: float = 60.0) -> JobResult:
        """Run ``script`` to its end (killed in the guest after ``timeout``)."""
        return self.spawn(script, timeout=timeout).wait(timeout + 10.0)

    def close(self, halt_timeout: float = 8.0) -> None:
        """Ask the guest to power off; stop our qemu if it does not in time."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                (self.share / "halt").write_text("halt\n")
                proc.wait(timeout=halt_timeout)
            except (OSError, subprocess.TimeoutExpired):
                end_process(proc, grace=5.0)
        if self._console is not None:
            os.close(self._console)
            self._console = None

    def __enter__(self) -> Guest:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
