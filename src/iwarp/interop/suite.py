"""The interop cases against siw, and the runner that plays them in as few boots as possible.

A case names the tool on the siw side, the direction (who is the MPA
Initiator), the options, the siw build (variant) and what it needs from
iwarp. The runner boots the guest once, switches siw builds in place
(``siw-use``) between groups of cases, captures each case's traffic on the
host loopback and has tshark check it. A case whose iwarp side is missing is
reported ``not run`` with the exact reason, never passed.

Directions:

* ``siw→iwarp``: a program in the guest is the client (siw sends the MPA
  Request); iwarp serves on ``127.0.0.1:P``, reached from the guest as
  ``10.0.2.100:P``.
* ``iwarp→siw``: the guest program serves; iwarp connects to the host end of a
  forward (``127.0.0.1:H`` -> guest port).
* ``siw↔siw``: both ends in the guest on siw0 (a control: does the tool itself
  run on siw here?). No iwarp, so nothing to capture on the host.
* ``siw→proxy→siw``: both ends in the guest, their connection routed through
  ``iwarp proxy`` on the host: the guest server behind a host forward
  (``127.0.0.1:H`` -> guest port), the proxy on ``127.0.0.1:P`` reached from the
  guest as ``10.0.2.100:P``, the guest client connecting there. The proxy writes
  both legs to the case's capture (``--pcap``) and its summary is the record.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from iwarp.interop.capture import Capture, CaptureToolError, Verdict, check_capture
from iwarp.interop.guest import VARIANTS, GuestImage
from iwarp.interop.host import (
    CliOptions,
    HostCommand,
    IwarpProcess,
    ProcResult,
    missing,
    port_listening,
)
from iwarp.interop.vm import GUEST_IP, HOST_ALIAS, Guest, GuestError, JobResult


class InteropStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not run"


class InteropDirection(StrEnum):
    SIW_TO_IWARP = "siw→iwarp"
    IWARP_TO_SIW = "iwarp→siw"
    SIW_TO_SIW = "siw↔siw"
    SIW_VIA_PROXY = "siw→proxy→siw"


@dataclass(slots=True)
class Run:
    """What one case produced, for its judge."""

    guest: JobResult | None = None
    guest_server: JobResult | None = None
    iwarp: ProcResult | None = None
    verdict: Verdict | None = None


#: A judge reads a run and returns (passed, reason).
Judge = Callable[[Run], tuple[bool, str]]


@dataclass(frozen=True, slots=True)
class InteropCase:
    """One interop case; ``guest_cmd``/``iwarp_args`` are templates (see
    :meth:`InteropRunner.fill`)."""

    name: str
    tool: str
    direction: InteropDirection
    options: str
    judge: Judge
    variant: str = "default"
    guest_cmd: str = ""
    #: Guest server for a guest-to-guest control case.
    guest_server: str = ""
    iwarp_args: tuple[str, ...] = ()
    needs: tuple[HostCommand, ...] = ()
    #: A reason the case cannot run whatever iwarp offers (e.g. a tool absent from the guest).
    blocked: str = ""
    timeout: float = 60.0
    #: iwarp keeps serving after the guest program ends (no --count): stop it then.
    serves: bool = False
    #: The guest command is a loop that feeds iwarp's run (one connection per case of
    #: ``iwarp conformance --listen``): iwarp's end decides, and the loop is stopped then
    #: instead of running out its count against a closed port.
    guest_feeds: bool = False
    #: Judge the capture with tshark too; off for cases that put broken octets
    #: on the wire on purpose (``iwarp conformance``).
    wire_check: bool = True


@dataclass(slots=True)
class Outcome:
    case: InteropCase
    status: InteropStatus
    reason: str
    seconds: float = 0.0
    capture: str = ""
    tshark: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    #: The case's options with the run's values filled in ({min_size} -> 23).
    options: str = ""
    #: Why a first attempt was set aside and the case run again (see :func:`accept_stall`),
    #: with that attempt's capture; empty when the case ran once.
    retried: str = ""

    @property
    def shown_options(self) -> str:
        return self.options or self.case.options

    def as_dict(self) -> dict[str, Any]:
        c = self.case
        return {
            "case": c.name,
            "tool": c.tool,
            "direction": str(c.direction),
            "variant": c.variant,
            "options": self.shown_options,
            "status": str(self.status),
            "reason": self.reason,
            "seconds": round(self.seconds, 2),
            "capture": self.capture,
            "tshark": self.tshark,
            "commands": self.commands,
            "retried": self.retried,
        }


# --- siw's accept race ------------------------------------------------------------------


#: What the race looks like: siw_accept sends its MPA Reply before it installs the FPDU
#: receive upcall (siw_qp_socket_assoc), and the connection manager's upcall ignores data
#: in RDMA mode, so FPDUs that reach siw in between sit unread in its socket until more data
#: comes. An Initiator that sends its first message right after the Reply, and then waits
#: for the answer, waits for ever (seen with rdma_server: iwarp's Send ACKed by TCP, no
#: FPDU from siw for the 30 s of the case).
ACCEPT_RACE = (
    "siw sent no FPDU after its MPA Reply although TCP took iwarp's FPDUs "
    "(siw's accept race: its FPDU upcall is installed after the Reply is sent)"
)


#: How :func:`iwarp.interop.cases.perftest_measured` starts its reason when both ends exited
#: 0 and perftest printed its table, but a figure in it is not finite: perftest's cycle clock
#: under TCG (seen in siw↔siw controls too, with no iwarp involved). The exchange completed and
#: was checked; only the measurement did not, so the case is worth one more attempt.
NOT_FINITE: Final = "perftest exit 0 but measured nothing finite"

PERFTEST_CLOCK: Final = (
    "perftest printed a figure that is not finite (its cycle clock under TCG; "
    "both ends had exited 0)"
)


def worth_again(case: InteropCase, outcome: Outcome) -> str:
    """Why ``outcome`` deserves one more attempt: siw's accept race (:func:`accept_stall`)
    or perftest's clock (:data:`NOT_FINITE`). Empty for every other outcome, which is a
    verdict; an outcome already retried is never retried again."""
    if outcome.status is not InteropStatus.FAIL or outcome.retried:
        return ""
    if outcome.reason.startswith(NOT_FINITE):
        return PERFTEST_CLOCK
    return accept_stall(case, outcome)


def accept_stall(case: InteropCase, outcome: Outcome) -> str:
    """Why ``outcome`` is worth one more attempt: a failed case where iwarp is the MPA
    Initiator against siw, the handshake completed, iwarp sent FPDUs and siw sent none.
    Empty for any other failure (those are verdicts, never retried)."""
    if outcome.status is not InteropStatus.FAIL or outcome.retried:
        return ""
    if case.direction is not InteropDirection.IWARP_TO_SIW or not case.wire_check:
        return ""
    tshark = outcome.tshark
    fpdus = tshark.get("fpdus") or {}
    if tshark.get("requests") != 1 or tshark.get("replies") != 1:
        return ""
    if fpdus.get("i>r", 0) < 1 or fpdus.get("r>i", 0) != 0 or tshark.get("tcp_gaps"):
        return ""
    return ACCEPT_RACE


# --- judges ---------------------------------------------------------------------------------


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def both_succeed(run: Run) -> tuple[bool, str]:
    """Both programs exit 0 (the iwarp one and the guest one)."""
    parts = []
    for label, rc, out in _ends(run):
        if rc != 0:
            why = "timed out" if rc is None else f"exit {rc}"
            parts.append(f"{label} {why}: {_tail(out)}")
    return (not parts, "; ".join(parts) or "both sides exit 0")


def _ends(run: Run) -> list[tuple[str, int | None, str]]:
    ends = []
    if run.iwarp is not None:
        ends.append(("iwarp", run.iwarp.rc, run.iwarp.output))
    if run.guest_server is not None:
        ends.append(("guest server", run.guest_server.rc, run.guest_server.output))
    if run.guest is not None:
        ends.append(("guest", run.guest.rc, run.guest.output))
    return ends


def negotiated(run: Run) -> dict[str, Any] | None:
    """The first JSON object iwarp printed that reports the negotiated MPA parameters."""
    if run.iwarp is None:
        return None
    objs = run.iwarp.json_lines()
    # iwarp listen/connect print {"type": "established", "rev": ..., "crc": ...}; the
    # "request" line before it shows the peer's frame, not the outcome.
    for obj in objs:
        if obj.get("type") == "established":
            return obj
    for obj in objs:
        if obj.get("type") not in ("request", "reply") and "rev" in obj:
            return obj
    return None


def _get(params: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in params:
            return params[name]
    return None


def mpa_established(**expect: Any) -> Judge:
    """iwarp reports an MPA connection whose parameters match ``expect`` (rev, crc, ...)."""

    def judge(run: Run) -> tuple[bool, str]:
        params = negotiated(run)
        if params is None:
            out = run.iwarp.output if run.iwarp else ""
            return False, f"iwarp reported no negotiated parameters: {_tail(out)}"
        wrong = []
        for key, want in expect.items():
            got = _get(params, key, *_ALIASES.get(key, ()))
            if not _same(got, want):
                wrong.append(f"{key}={got!r} (expected {want!r})")
        if wrong:
            return False, "negotiated " + ", ".join(wrong)
        shown = ", ".join(f"{k}={_get(params, k, *_ALIASES.get(k, ()))}" for k in expect)
        return True, f"MPA established: {shown}"

    return judge


def _same(got: Any, want: Any) -> bool:
    # Enum-valued fields (the RTR type) print as "WRITE", "RtrFlags.WRITE", "write"...
    if isinstance(want, str) and got is not None:
        return str(got).lower().rsplit(".", 1)[-1] == want.lower()
    return bool(got == want)


_ALIASES: Final = {"rev": ("revision",), "peer_to_peer": ("p2p",)}


def refused(*, iwarp_words: Sequence[str] = (), guest_fails: bool = False) -> Judge:
    """The connection is refused cleanly: iwarp exits non-zero (no hang) naming the cause."""

    def judge(run: Run) -> tuple[bool, str]:
        if run.iwarp is None:
            return False, "iwarp did not run"
        if run.iwarp.timed_out:
            return False, f"iwarp hung (stopped after {run.iwarp.seconds:.0f} s)"
        text = run.iwarp.output.lower()
        if run.iwarp.rc == 0 and not guest_fails:
            return False, f"iwarp exit 0, expected a refusal: {_tail(run.iwarp.output)}"
        if iwarp_words and not any(w in text for w in iwarp_words):
            return False, f"iwarp's error does not say {'/'.join(iwarp_words)}: {_tail(text)}"
        if guest_fails and run.guest is not None:
            if run.guest.rc is None:
                return False, "the guest program hung"
            if run.guest.rc == 0:
                return False, "the guest program succeeded, expected it to be refused"
        return True, f"refused in {run.iwarp.seconds:.1f} s: {_tail(run.iwarp.output, 1)}"

    return judge


def terminate_sent(direction: str, layer: int, code: int) -> Judge:
    """tshark saw an RDMAP Terminate with this layer and error code going ``direction``."""

    def judge(run: Run) -> tuple[bool, str]:
        seen = run.verdict.terminates if run.verdict else []
        if (direction, layer, code) in seen:
            return True, f"Terminate {direction} layer {layer} code {code:#04x} on the wire"
        return False, f"no Terminate {direction} layer {layer} code {code:#04x} (seen: {seen})"

    return judge


def all_of(*judges: Judge) -> Judge:
    def judge(run: Run) -> tuple[bool, str]:
        reasons = []
        for j in judges:
            ok, why = j(run)
            if not ok:
                return False, why
            reasons.append(why)
        return True, "; ".join(reasons)

    return judge


# --- the runner -----------------------------------------------------------------------------


@dataclass(slots=True)
class Facts:
    """What the runner learnt about the guest at boot (tools present, rping's size range)."""

    tools: dict[str, bool] = field(default_factory=dict)
    rping_min_size: int = 0
    rping_max_size: int = 0
    info: str = ""


class InteropRunner:
    """Runs cases on one guest boot (rebooting only if the guest dies)."""

    def __init__(
        self,
        image: GuestImage,
        workdir: Path,
        *,
        log: Callable[[str], None] = print,
        siw_debug: bool = False,
    ) -> None:
        self.image = image
        self.workdir = workdir
        self.log = log
        self.siw_debug = siw_debug
        self.guest: Guest | None = None
        self.boots: list[float] = []
        self.facts = Facts()
        self._turn = 0
        self._last_values: dict[str, Any] = {}
        self.commands = CliOptions.load()
        if self.commands is None:  # the CLI of another part may be broken
            self.log("iwarp CLI does not load (iwarp --help failed)")

    # --- guest lifecycle ---

    def ensure_guest(self, variant: str) -> Guest:
        if self.guest is not None:
            try:
                self.guest.check_alive()
                if self.guest.killed_jobs and not self._healthy(self.guest):
                    # A program stopped mid-connection can leave siw's connection
                    # manager stuck (seen: listeners that never answer, rmmod
                    # refused), so later cases get a fresh kernel.
                    raise GuestError("siw no longer completes an rping with itself")
                self.guest.killed_jobs = 0
                if self.guest.variant != variant:
                    res = self.guest.run(f"siw-use {shlex.quote(variant)}", timeout=30)
                    if not res.ok:
                        raise GuestError(f"siw-use {variant} failed: {res.output.strip()}")
                    self.guest.variant = variant
            except GuestError as exc:
                self.log(f"{exc}; booting again")
                self.guest.close()
                self.guest = None
        if self.guest is None:
            guest = Guest(
                self.image,
                variant=variant,
                forwards=4,
                rundir=self.workdir / f"boot{len(self.boots) + 1}",
                siw_debug=self.siw_debug,
            )
            guest.start()
            assert guest.boot_seconds is not None
            self.boots.append(guest.boot_seconds)
            self.log(f"guest booted in {guest.boot_seconds:.1f} s (siw {variant})")
            self.guest = guest
            self._learn(guest)
        return self.guest

    def _healthy(self, guest: Guest) -> bool:
        """One rping between two siw endpoints in the guest still works (about 1 s)."""
        port = 7479
        server = guest.spawn(f"rping -s -a {GUEST_IP} -p {port} -C 1 -S 64 -V", timeout=10)
        client = f"wait-listen {port} 3 && rping -c -a {GUEST_IP} -p {port} -C 1 -S 64 -V"
        ok = guest.run(client, timeout=6).ok
        return server.wait(2, kill=True).ok and ok

    def _learn(self, guest: Guest) -> None:
        info = guest.info()
        self.facts.info = info
        for line in info.splitlines():
            tool, sep, state = line.partition(": ")
            if sep and state in ("yes", "missing"):
                self.facts.tools[tool] = state == "yes"
        # rping states its accepted size range when given one outside it.
        res = guest.run("timeout 3 rping -s -S 1 -a 127.0.0.1 -p 1 2>&1 | head -3", timeout=10)
        m = re.search(r"valid range is (\d+) to (\d+)", res.output)
        if m:
            # rping refuses its own stated maximum (it checks size > max - 1).
            self.facts.rping_min_size = int(m.group(1))
            self.facts.rping_max_size = int(m.group(2)) - 1

    def close(self) -> None:
        if self.guest is not None:
            self.guest.close()
            self.guest = None

    # --- cases ---

    def fill(self, text: str, values: dict[str, Any]) -> str:
        """Substitute ``{port}``, ``{host}``, ``{min_size}``... in a template."""
        return text.format(**values)

    def run_case(self, case: InteropCase) -> Outcome:
        why = case.blocked or missing(case.needs, self.commands)
        if why:
            return Outcome(case, InteropStatus.NOT_RUN, why)
        t0 = time.monotonic()
        try:
            guest = self.ensure_guest(case.variant)
            tools = [w for w in case.tool.replace("/", " ").split() if w in self.facts.tools]
            absent = [t for t in tools if not self.facts.tools[t]]
            if absent:
                return Outcome(case, InteropStatus.NOT_RUN, f"{', '.join(absent)} not in the guest")
            outcome = self._play(guest, case)
            again = worth_again(case, outcome)
            if again:
                outcome = self._again(case, outcome, again)
        except (GuestError, CaptureToolError, OSError) as exc:
            outcome = Outcome(case, InteropStatus.FAIL, f"harness: {exc}")
        outcome.seconds = time.monotonic() - t0
        try:
            outcome.options = case.options.format(**self._last_values)
        except (KeyError, IndexError, ValueError):
            outcome.options = case.options
        return outcome

    def _play(self, guest: Guest, case: InteropCase) -> Outcome:
        """One attempt at ``case``: in the guest alone (controls) or against iwarp."""
        if case.direction is InteropDirection.SIW_TO_SIW:
            return self._guest_only(guest, case)
        if case.direction is InteropDirection.SIW_VIA_PROXY:
            return self._via_proxy(guest, case)
        return self._with_iwarp(guest, case)

    def _again(self, case: InteropCase, first: Outcome, stall: str) -> Outcome:
        """Run ``case`` once more after a first attempt that :func:`worth_again` set aside;
        the first attempt's capture is kept beside the second's."""
        kept = ""
        if first.capture:
            path = Path(first.capture)
            kept_path = path.with_name(path.stem + ".attempt1" + path.suffix)
            path.replace(kept_path)
            kept = str(kept_path)
        self.log(f"{case.name}: {stall}; running it once more")
        outcome = self._play(self.ensure_guest(case.variant), case)
        outcome.retried = f"first attempt: {stall} (capture {kept or 'none'})"
        if outcome.status is InteropStatus.PASS:
            outcome.reason = f"{outcome.reason} (second attempt; {stall})"
        return outcome

    def _values(self, guest: Guest) -> dict[str, Any]:
        self._turn += 1
        i = self._turn % len(guest.hostfwd)
        self._last_values = {
            "host": HOST_ALIAS,
            "guest_ip": GUEST_IP,
            "guest_port": guest.guest_port(i),
            "host_port": guest.hostfwd[i],
            "serve_port": guest.guestfwd[i % len(guest.guestfwd)],
            "min_size": self.facts.rping_min_size or 64,
            "max_size": self.facts.rping_max_size or 65535,
        }
        return self._last_values

    # The host side's three dealings with the world, apart so that a test can script them.

    def _launch(self, args: list[str], log: Path) -> IwarpProcess:
        """Start ``iwarp ARGS`` with its output in ``log``."""
        return IwarpProcess(args, log)

    def _listening(self, port: int) -> bool:
        return port_listening(port)

    def _check(self, pcap: Path) -> Verdict:
        """tshark's verdict on a capture."""
        return check_capture(pcap)

    def _guest_only(self, guest: Guest, case: InteropCase) -> Outcome:
        v = self._values(guest)
        port = v["guest_port"]
        server_cmd, client_cmd = self.fill(case.guest_server, v), self.fill(case.guest_cmd, v)
        server = guest.spawn(server_cmd, timeout=case.timeout)
        listening = guest.run(f"wait-listen {port} 20", timeout=25)
        if not listening.ok:
            srv = server.wait(5, kill=True)
            return Outcome(
                case, InteropStatus.FAIL, f"guest server never listened: {_tail(srv.output)}"
            )
        client = guest.run(client_cmd, timeout=case.timeout)
        run = Run(guest=client, guest_server=server.wait(10, kill=True))
        ok, reason = case.judge(run)
        out = Outcome(case, InteropStatus.PASS if ok else InteropStatus.FAIL, reason)
        out.commands = {"guest server": server_cmd, "guest": client_cmd}
        return out

    def _via_proxy(self, guest: Guest, case: InteropCase) -> Outcome:
        """Both ends in the guest, their connection through ``iwarp proxy`` on the host.

        The guest server listens behind a host forward; the proxy listens on the port
        the guest reaches by its guest forward and connects to the host forward; the
        guest client connects to the proxy. ``{pcap}`` in the proxy's arguments is the
        case's capture (both legs, as the proxy wrote them)."""
        v = self._values(guest)
        safe = case.name.replace("/", "_")
        pcap = self.workdir / "captures" / f"{safe}.pcapng"
        log = self.workdir / "logs" / f"{safe}.proxy.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pcap.parent.mkdir(parents=True, exist_ok=True)
        pcap.unlink(missing_ok=True)
        v = {**v, "pcap": str(pcap)}
        args = [self.fill(a, v) for a in case.iwarp_args]
        server_cmd, client_cmd = self.fill(case.guest_server, v), self.fill(case.guest_cmd, v)
        commands = {
            "guest server": server_cmd,
            "iwarp": "iwarp " + shlex.join(args),
            "guest": client_cmd,
        }
        server = guest.spawn(server_cmd, timeout=case.timeout)
        listening = guest.run(f"wait-listen {v['guest_port']} 20", timeout=25)
        if not listening.ok:
            srv = server.wait(5, kill=True)
            out = Outcome(
                case, InteropStatus.FAIL, f"guest server never listened: {_tail(srv.output)}"
            )
            out.commands = commands
            return out
        proc = self._launch(args, log)
        port = v["serve_port"]
        deadline = time.monotonic() + 15
        while not self._listening(port) and proc.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._listening(port):
            res = proc.wait(1)
            server.wait(3, kill=True)
            out = Outcome(
                case, InteropStatus.FAIL, f"iwarp proxy never listened: {_tail(res.output)}"
            )
            out.commands = commands
            return out
        run = Run()
        run.guest = guest.run(client_cmd, timeout=case.timeout)
        # The proxy ends after its one connection (--connections 1): both ends have closed.
        run.iwarp = proc.wait(10.0 if run.guest.rc is not None else 2.0)
        run.guest_server = server.wait(15.0 if run.guest.rc == 0 else 5.0, kill=True)
        captured = pcap.exists() and pcap.stat().st_size > 0
        if captured and case.wire_check:
            run.verdict = self._check(pcap)
        ok, reason = case.judge(run)
        status = InteropStatus.PASS if ok else InteropStatus.FAIL
        if ok and run.verdict is not None and not run.verdict.ok:
            status, reason = InteropStatus.FAIL, "tshark: " + "; ".join(run.verdict.problems())
        out = Outcome(
            case,
            status,
            reason,
            capture=str(pcap) if captured else "",
            tshark=run.verdict.as_dict() if run.verdict is not None else {},
        )
        out.commands = commands
        return out

    def _with_iwarp(self, guest: Guest, case: InteropCase) -> Outcome:
        v = self._values(guest)
        args = [self.fill(a, v) for a in case.iwarp_args]
        safe = case.name.replace("/", "_")
        pcap = self.workdir / "captures" / f"{safe}.pcapng"
        log = self.workdir / "logs" / f"{safe}.iwarp.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        run = Run()
        guest_cmd = self.fill(case.guest_cmd, v)
        if case.direction is InteropDirection.SIW_TO_IWARP:
            port = v["serve_port"]
            with Capture(pcap, port):
                proc = self._launch(args, log)
                deadline = time.monotonic() + 15
                while not self._listening(port) and proc.running() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self._listening(port):
                    res = proc.wait(1)
                    return Outcome(
                        case, InteropStatus.FAIL, f"iwarp never listened: {_tail(res.output)}"
                    )
                if case.guest_feeds:
                    feeder = guest.spawn(guest_cmd, timeout=case.timeout)
                    run.iwarp = proc.wait(case.timeout)
                    run.guest = feeder.wait(2.0, kill=True)
                else:
                    run.guest = guest.run(guest_cmd, timeout=case.timeout)
                    grace = 1.0 if case.serves or run.guest.rc is None else 10.0
                    run.iwarp = proc.wait(grace)
        else:
            port = v["host_port"]
            server = guest.spawn(guest_cmd, timeout=case.timeout)
            listening = guest.run(f"wait-listen {v['guest_port']} 20", timeout=25)
            if not listening.ok:
                srv = server.wait(5, kill=True)
                return Outcome(
                    case, InteropStatus.FAIL, f"guest server never listened: {_tail(srv.output)}"
                )
            with Capture(pcap, port):
                proc = self._launch(args, log)
                run.iwarp = proc.wait(case.timeout)
                run.guest = server.wait(15 if run.iwarp.rc == 0 else 3, kill=True)
        run.verdict = self._check(pcap)
        ok, reason = case.judge(run)
        status = InteropStatus.PASS if ok else InteropStatus.FAIL
        if not case.wire_check:
            pass
        elif ok and not run.verdict.ok:
            status, reason = InteropStatus.FAIL, "tshark: " + "; ".join(run.verdict.problems())
        elif ok and not run.verdict.decoded:
            status, reason = InteropStatus.FAIL, run.verdict.summary()
        out = Outcome(case, status, reason, capture=str(pcap), tshark=run.verdict.as_dict())
        out.commands = {"iwarp": "iwarp " + shlex.join(args), "guest": guest_cmd}
        return out


def select(
    cases: Iterable[InteropCase], patterns: Sequence[str], variants: Sequence[str]
) -> list[InteropCase]:
    """Cases whose name matches one of ``patterns`` (glob, or substring) and variant is listed."""
    chosen = []
    for case in cases:
        if variants and case.variant not in variants:
            continue
        if patterns and not any(_matches(case.name, p) for p in patterns):
            continue
        chosen.append(case)
    return chosen


def _matches(name: str, pattern: str) -> bool:
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def order_for_boot(cases: Sequence[InteropCase]) -> list[InteropCase]:
    """Group cases by siw build (default first) so the guest switches builds least often."""
    rank = {name: i for i, name in enumerate(VARIANTS)}
    return sorted(cases, key=lambda c: rank.get(c.variant, len(rank)))
