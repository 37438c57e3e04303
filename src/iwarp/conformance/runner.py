"""Runs cases against a target, one fresh connection per case.

Two kinds of target:

* :class:`ResponderTarget` (``iwarp conformance HOST PORT``): the tool
  connects once per case and plays the MPA Initiator;
* :class:`InitiatorTarget` (``--listen PORT --peer-cmd CMD``): the tool
  listens, starts the peer command once per case (``{port}`` substituted)
  so that it connects, and plays the Responder. Without a command the
  target is expected to connect by itself, once per case (a loop of
  ``rping -c`` in a guest, for example).

Before the cases, a Responder target is probed once: if it refuses a plain
Rev 2 Request but takes a peer-to-peer one (irdma), every case's default
startup offers peer-to-peer.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import socket
import subprocess
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Final

from iwarp.conformance.link import Link
from iwarp.conformance.model import Case, Result, Status
from iwarp.conformance.pace import Pace, StartupWait
from iwarp.conformance.session import NEED_HINTS, Session, StartupStyle, ToolValues
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.mpa.wire import Revision
from iwarp.sockets import connect_failure_reason

__all__ = [
    "DEFAULT_TIMEOUT",
    "MPA_MODES",
    "InitiatorTarget",
    "Launcher",
    "ResponderTarget",
    "Runner",
    "ShellLauncher",
    "NotAnMpaResponderError",
    "STAGGER",
    "TargetUnavailableError",
]

#: Seconds a case may take unless it says otherwise.
DEFAULT_TIMEOUT: Final = 5.0
#: How the target starts MPA: RFC 5044's Request/Reply, or draft-culley-iwarp-mpa-02 (none).
MPA_MODES: Final = ("rfc", "culley")
#: Skip reason of the RFC cases in a draft-culley-02 run.
CULLEY_ONLY: Final = (
    "the run selected --mpa-mode culley (no MPA Request/Reply); this case needs an RFC 5044 "
    "target: run without --mpa-mode culley"
)
#: Seconds a new connection to a Responder is watched before use (is it closed at once?).
SETTLE: Final = 0.02
#: Seconds between the idle cases' connections at the start of a run, and after the last of
#: them before the other cases start. A Responder may take only so many new connections at
#: once before it has handled them: Linux siw 6.1 queues one accept work item per TCP
#: connection from a pool the size of the listen backlog (rping -s listens with 3); a
#: fourth connection arriving within the same 3 ms was never accepted, and its close later
#: reached siw's listener as the listener's own peer closing, which closed it for good.
STAGGER: Final = 0.25
#: Seconds an Initiator target may take to make its first connection (it may be starting up).
FIRST_CONNECT: Final = 30.0
#: Seconds it may take to connect for a later case (a program per case starts, or one that a
#: previous case left hanging runs into its own timeout first).
NEXT_CONNECT: Final = 15.0


class TargetUnavailableError(Exception):
    """The target could not be reached at all (nothing to test)."""


class NotAnMpaResponderError(TargetUnavailableError):
    """The target took the TCP connection but answered a valid MPA Request with no MPA
    frame within the startup timeout: silence, or octets that cannot begin one (an HTTP
    server, an SSH banner). No case could judge it; each would wait out its whole timeout.
    """


#: How every MPA startup frame begins (both keys, RFC 5044 §7.1.1); what a target sent
#: that starts otherwise is not a broken MPA frame but another protocol.
MPA_KEY_START: Final = b"MPA "


def not_mpa(received: bytes, ended: str | None) -> str:
    """Why the target's answer to a valid Request is no MPA frame at all, or "".

    A close is an MPA answer (a Rev 1 Responder closes on Rev 2), and so is any
    frame that begins like one, whatever its key's other octets (a wrong key is a
    verdict the cases report).
    """
    head = received[: len(MPA_KEY_START)]
    if not received:
        return "" if ended else "it stayed silent"
    if head.upper() != MPA_KEY_START[: len(head)]:
        return f"it sent octets that begin no MPA frame: {received[:24]!r}"
    return ""


@dataclass(frozen=True, slots=True)
class ResponderTarget:
    host: str
    port: int

    role = TargetRole.RESPONDER

    def describe(self) -> str:
        return f"MPA Responder at {self.host}:{self.port}"


class Launched:
    """A started peer command; :meth:`stop` ends it (and its children) if still running."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, command: str) -> None:
        self.proc = proc
        self.command = command
        self._tail: str | None = None

    def stop(self) -> str:
        """End the command; returns the tail of its output."""
        proc = self.proc
        if proc is None:
            return ""
        if self._tail is not None:
            return self._tail
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(2.0)
        out = proc.stdout.read() if proc.stdout else b""
        if proc.stdout:
            proc.stdout.close()
        lines = out.decode(errors="replace").strip().splitlines()[-3:]
        self._tail = f"exit {proc.returncode}" + (": " + " | ".join(lines) if lines else "")
        return self._tail

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


Launcher = Callable[[int], Launched]


class ShellLauncher:
    """Runs a shell command per case, ``{port}`` replaced by the listening port."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __call__(self, port: int) -> Launched:
        line = self.command.replace("{port}", str(port))
        proc = subprocess.Popen(
            ["/bin/sh", "-c", line],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return Launched(proc, line)


def no_launch(port: int) -> Launched:
    """The target connects by itself."""
    return Launched(None, "")


@dataclass
class InitiatorTarget:
    """The tool listens on ``port``; ``launch`` makes the target connect once."""

    port: int
    launch: Launcher = no_launch
    host: str = "127.0.0.1"
    command: str = ""

    role = TargetRole.INITIATOR

    def describe(self) -> str:
        peer = f" started by `{self.command}`" if self.command else ""
        return f"MPA Initiator{peer}, connecting to {self.host}:{self.port}"


Target = ResponderTarget | InitiatorTarget


class Runner:
    """Runs cases against one target, one connection each (several at once with ``jobs``)."""

    def __init__(
        self,
        target: Target,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        cooperation_wait: float = 1.0,
        on_result: Callable[[Result], None] | None = None,
        mpa_mode: str = "rfc",
        culley_line: bytes = b"",
        settle: float = 0.0,
        seed: int | None = None,
        startup_wait: StartupWait | None = None,
    ) -> None:
        if mpa_mode not in MPA_MODES:
            raise ValueError(f"mpa_mode is one of {', '.join(MPA_MODES)}, not {mpa_mode!r}")
        #: "rfc" (RFC 5044 Request/Reply) or "culley" (draft-culley-iwarp-mpa-02: no frames).
        self.mpa_mode = mpa_mode
        #: culley: the streaming line each side sends before framing ("" frames at once).
        self.culley_line = culley_line
        #: Seconds to wait after a Responder target's Reply before the first FPDU: a target
        #: that installs its FPDU receive path only after it sent the Reply (Linux siw 6.1's
        #: siw_accept) leaves FPDUs that arrive in between unread until more data comes, so
        #: a case that sends all it has at once would meet silence whatever the rule.
        self.settle = settle
        #: The seed of the tool's free values (see :class:`ToolValues`): drawn unless given,
        #: so that a run can be replayed octet for octet (``--seed``).
        self.seed = secrets.randbelow(1 << 32) if seed is None else seed
        self.values = ToolValues.draw(self.seed)
        #: How fast the target answers, shared by every case: bounds waits for silence.
        self.pace = Pace()
        #: How long the cases on the target's own startup timer wait for its close.
        self.startup_wait = StartupWait() if startup_wait is None else startup_wait
        self.target = target
        self.timeout = timeout
        self.cooperation_wait = cooperation_wait
        self.on_result = on_result
        self.style = StartupStyle()
        #: Whether the probe found a Request the target accepts with a Reply.
        self.answered = True
        #: Why not, for the report.
        self.probe_note = ""
        self._listener: socket.socket | None = None
        #: Whether :meth:`probe` ran (the command probes before its heading; run() after).
        self._probed = False
        self._accepted = 0
        self._lock = threading.Lock()
        #: Why the remaining cases are skipped (the target died), else "".
        self._dead = ""
        #: Cases in a row the Initiator target did not connect for, and the last it did.
        self._silent = 0
        self._last = "the start"
        #: Whole data-phase waits in which each kind of cooperation did not come.
        self._missed: dict[Need, int] = {}
        #: The connections cases opened, while they are open (see :meth:`close`).
        self._links: weakref.WeakSet[Link] = weakref.WeakSet()

    # --- connections ------------------------------------------------------

    def _connect(self, deadline: float) -> Link:
        """A fresh connection to the Responder target.

        A connection the target ends before anything was sent is not used: a
        target that restarts its listener per connection (a loop of single-shot
        servers, or qemu's port forward while the guest has no listener) is
        tried again until the deadline.
        """
        assert isinstance(self.target, ResponderTarget)
        while True:
            left = max(0.1, deadline - time.monotonic())
            try:
                sock = socket.create_connection((self.target.host, self.target.port), timeout=left)
            except OSError as exc:
                host, port = self.target.host, self.target.port
                address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                raise TargetUnavailableError(
                    f"cannot reach {address}: {connect_failure_reason(exc)} (tried: TCP "
                    "connect); hint: start the MPA Responder under test there, e.g. "
                    f"iwarp listen --host {host} --port {port}"
                ) from None
            link = self._track(Link(sock))
            link.settle(SETTLE)
            if link.ended is None or link.received or time.monotonic() + 0.2 > deadline:
                link.started = time.monotonic()
                return link
            link.close()
            time.sleep(0.1)

    def listener(self) -> socket.socket:
        if self._listener is None:
            assert isinstance(self.target, InitiatorTarget)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.target.host, self.target.port))
            except OSError as exc:
                sock.close()
                raise TargetUnavailableError(
                    f"cannot listen on {self.target.host}:{self.target.port}: {exc.strerror or exc}"
                ) from None
            sock.listen(8)
            self.target.port = sock.getsockname()[1]
            self._listener = sock
        return self._listener

    def _accept(self, deadline: float, launched: Launched) -> Link:
        listener = self.listener()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CaseFailed(
                    "the target did not connect within the case's timeout"
                    + (f" (peer command {launched.stop()})" if launched.proc else "")
                )
            listener.settimeout(min(left, 0.2))
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                if launched.exited() is not None:
                    raise CaseFailed(
                        f"the peer command ended without connecting ({launched.stop()})"
                    ) from None
                continue
            return self._track(Link(sock))

    # --- the probe ------------------------------------------------------------

    def probe(self) -> None:
        """Learn how a Responder target wants to be started: plain Rev 2, peer-to-peer, Rev 1.

        A target that answers none of them with a well-formed Reply is still
        tested (with plain Rev 2 Requests): the cases that need a Reply fail
        with the frame it sent, decoded. Only a target that accepts no TCP
        connection raises :class:`TargetUnavailableError`.
        """
        if not isinstance(self.target, ResponderTarget) or self.mpa_mode == "culley":
            return
        styles = (
            StartupStyle(),
            StartupStyle(peer_to_peer=True),
            StartupStyle(revision=int(Revision.REV1)),
        )
        if self._probed:
            return
        self._probed = True
        first = ""
        for style in styles:
            deadline = time.monotonic() + self.timeout
            link = self._connect(deadline)
            session = Session(link, TargetRole.RESPONDER, deadline=deadline, style=style)
            session.pace = self.pace
            try:
                reply = session.initiate()
            except CaseFailed as exc:
                why = not_mpa(bytes(link.received), link.ended)
                if why and not first:
                    raise NotAnMpaResponderError(self._not_mpa(why)) from None
                first = first or str(exc)
                continue
            finally:
                link.close()
            if reply.reject:
                first = first or f"a Reply with R=1 to {style.describe()}"
                continue
            self.style = style
            self.answered = True
            return
        self.style = StartupStyle()
        self.answered = False
        self.probe_note = f"no start-up style was accepted: {first}"

    def _not_mpa(self, why: str) -> str:
        assert isinstance(self.target, ResponderTarget)
        host, port = self.target.host, self.target.port
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return (
            f"{address} is not an MPA Responder: it took the TCP connection but did not "
            f"answer a valid MPA Request (Rev 2) with an MPA frame within {self.timeout:g} s; "
            f"{why} (no case run; --timeout sets the wait)"
        )

    # --- cases -------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether a Responder target still answers a valid Request with a Reply.

        A case whose target ends the connection passes many checks ("closes
        without a Reply"); a target that crashed or stopped listening would
        pass them all. So after such a case the target must prove it is alive.
        """
        if not isinstance(self.target, ResponderTarget):
            return True
        deadline = time.monotonic() + self.timeout
        try:
            link = self._connect(deadline)
        except TargetUnavailableError:
            return False
        if not self.answered or self.mpa_mode == "culley":
            # It never gave a valid Reply: still taking connections is all it can prove.
            link.close()
            return True
        session = Session(link, TargetRole.RESPONDER, deadline=deadline, style=self.style)
        session.pace = self.pace
        try:
            session.initiate()
        except CaseFailed:
            return False
        finally:
            link.close()
        return True

    def run(
        self, cases: Iterable[Case], *, jobs: int = 1, overlap_idle: bool = True
    ) -> list[Result]:
        """Run ``cases``; results come (and ``on_result`` is called) in case order.

        ``jobs`` > 1 runs that many cases at once against a Responder target
        (each case has its own connection, so cases are independent); an
        Initiator target connects once per case and runs one case at a time.
        ``overlap_idle``: the idle cases (see below) run beside the others; without
        it they take their turn like any case.
        """
        items = list(cases)
        results: list[Result] = []
        try:
            self.probe()
            if not isinstance(self.target, ResponderTarget):
                for item in items:
                    self._emit(results, self._run_one(item))
                return results
            # The idle cases (a connection left alone until the target's startup timer
            # closes it) wait beside the others from the start: they send nothing the
            # target must process and no application sees their connections (no valid
            # Request completes), so even a target that serves one connection at a time
            # is not held up, and their long waits overlap the run instead of adding to it.
            # Their connections open STAGGER apart, never in one burst.
            idle = [item for item in items if item.idle and overlap_idle]
            pool = ThreadPoolExecutor(max_workers=max(1, jobs))
            waiting = ThreadPoolExecutor(max_workers=max(1, len(idle)))
            try:
                futures = {}
                for item in idle:  # one new connection at a time (see STAGGER)
                    futures[id(item)] = waiting.submit(self._run_one, item)
                    self._pause(STAGGER)
                for item in items:
                    if id(item) not in futures:
                        futures[id(item)] = pool.submit(self._run_one, item)
                for item in items:
                    self._emit(results, futures[id(item)].result())
            finally:
                # Interrupted: no case starts any more, and close() ends the running ones.
                for executor in (pool, waiting):
                    executor.shutdown(wait=False, cancel_futures=True)
        finally:
            self.close()
        return results

    def _pause(self, seconds: float) -> None:
        """Let ``seconds`` pass before the next case starts (a test may count them)."""
        time.sleep(seconds)

    def _emit(self, results: list[Result], result: Result) -> None:
        results.append(result)
        if self.on_result is not None:
            self.on_result(result)

    def _run_one(self, item: Case) -> Result:
        """One case, then (if the target ended its connection) the proof that it still lives."""
        with self._lock:
            dead = self._dead
        if dead:
            return Result(item, Status.SKIPPED, dead)
        result, ended = self.run_case_ended(item)
        with self._lock:
            if "did not connect" in result.reason:
                self._silent += 1
                if self._silent == 2 and not self._dead:
                    # an Initiator that no longer connects at all
                    self._dead = f"the target stopped connecting (after {self._last})"
            else:
                self._silent, self._last = 0, item.id
        if ended and not self.alive():
            dead = f"the target stopped answering valid MPA Requests after {item.id}"
            with self._lock:
                self._dead = self._dead or dead
            if result.status is Status.PASSED:
                result.status = Status.FAILED
                result.reason = dead + " (crashed, or stopped listening)"
        return result

    def run_case(self, item: Case) -> Result:
        """Run one case on a fresh connection."""
        return self.run_case_ended(item)[0]

    def run_case_ended(self, item: Case) -> tuple[Result, bool]:
        """Run one case; also whether the target ended the connection (or could not be
        reached)."""
        started = time.monotonic()
        ended = False
        if self.target.role not in item.roles:
            other = "Initiator" if self.target.role is TargetRole.RESPONDER else "Responder"
            reason = f"the case needs the target as MPA {other}"
            return Result(item, Status.SKIPPED, reason), False
        if Need.ENHANCED in item.needs and self.style.revision < Revision.REV2:
            return Result(item, Status.SKIPPED, NEED_HINTS[Need.ENHANCED]), False
        if (Need.CULLEY in item.needs) != (self.mpa_mode == "culley"):
            reason = NEED_HINTS[Need.CULLEY] if self.mpa_mode == "rfc" else CULLEY_ONLY
            return Result(item, Status.SKIPPED, reason), False
        deadline = started + self._case_time(item)
        launched = Launched(None, "")
        session: Session | None = None
        status, reason = Status.PASSED, ""
        try:
            if isinstance(self.target, ResponderTarget):
                link = self._connect(deadline)
            else:
                self.listener()
                launched = self.target.launch(self.target.port)
                grace = NEXT_CONNECT if self._accepted else FIRST_CONNECT
                deadline = max(deadline, time.monotonic() + grace)
                link = self._accept(deadline, launched)
                self._accepted += 1
                # The case's own time starts once the target is connected.
                deadline = time.monotonic() + self._case_time(item)
            session = Session(
                link,
                self.target.role,
                deadline=deadline,
                style=self.style,
                cooperation_wait=self.cooperation_wait,
            )
            session.wants = item.needs
            session.culley_line = self.culley_line
            session.settle = self.settle
            session.values = self.values
            session.pace = self.pace
            session.startup_wait = self.startup_wait
            if isinstance(self.target, ResponderTarget):
                session.opener = lambda: self._connect(deadline)
            item.run(session)
        except CaseFailed as exc:
            status, reason = Status.FAILED, str(exc)
        except CaseSkipped as exc:
            status, reason = Status.SKIPPED, str(exc)
        except TargetUnavailableError as exc:
            status, reason = Status.FAILED, str(exc)
            ended = True
        except Exception as exc:  # a bug in the case: report it, keep going
            where = traceback.extract_tb(exc.__traceback__)[-1]
            status = Status.FAILED
            reason = f"internal error in the case: {exc!r} at {where.filename}:{where.lineno}"
        observed: list[str] = []
        ended |= session is not None and session.link.ended is not None
        if session is not None and session.waited_out:
            self._learn_unoffered(session)
        if session is not None:
            observed = list(session.observed)
            if status is Status.FAILED:
                observed += session.summary()
            session.link.close()
            for extra in session.others:
                extra.link.close()
        if launched.proc is not None:
            tail = launched.stop()
            if status is Status.FAILED:
                observed.append(f"peer command `{launched.command}`: {tail}")
        return Result(item, status, reason, observed, time.monotonic() - started), ended

    def _case_time(self, item: Case) -> float:
        """Seconds ``item`` may take once connected: a case on the target's startup timer
        waits the run's startup wait, and the runner's timeout more for what it sends."""
        if item.timer:
            return self.startup_wait.seconds + self.timeout
        return item.timeout or self.timeout

    def _learn_unoffered(self, session: Session) -> None:
        """After a data phase that waited in vain: a target that did not answer the hello
        is not waited for again; cooperation missing in two whole waits is not either."""
        missing = {n for n in session.waited_for if not session.cooperation.has(n)}
        with self._lock:
            style = self.style
            if Need.TALKS in missing and not session.cooperation.talks:
                style = replace(style, answers_hello=False)
            for need in missing - {Need.TALKS}:
                self._missed[need] = self._missed.get(need, 0) + 1
            given_up = {n for n, count in self._missed.items() if count >= 2}
            self.style = replace(style, unoffered=style.unoffered | given_up)

    def close(self) -> None:
        """Stop listening, and end the connections of cases still running (an interrupted
        run): their waits end at once instead of at their deadlines."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            links = list(self._links)
        for link in links:
            with contextlib.suppress(OSError):
                link.sock.shutdown(socket.SHUT_RDWR)

    def _track(self, link: Link) -> Link:
        with self._lock:
            self._links.add(link)
        return link


def split_command(command: str) -> list[str]:
    """The words of a peer command (for messages)."""
    return shlex.split(command)
