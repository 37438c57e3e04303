"""Interop cases through ``iwarp proxy``: rping between two siw endpoints in the guest,
routed through the proxy on the host, cleanly or with a fault (see docs/interop.md).

The proxy's summary record (``--json``, one connection: ``--connections 1``) is what the
judges read: FPDUs forwarded each way, the faults applied, and what each end did after
(``initiator_after``/``responder_after``: a Terminate with its code, a close, a reset,
silence). What siw did is pinned in each case (:class:`SiwAnswer`), as the conformance
records pin verdicts: a change is a failure that says what siw does now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from iwarp.interop.host import HostCommand, ProcResult
from iwarp.interop.suite import InteropCase, InteropDirection, Judge, Run
from iwarp.interop.vm import JobResult

#: The proxy's command line: one connection, JSON records, both legs captured.
PROXY_ARGS: Final = (
    "proxy",
    "--listen",
    "127.0.0.1:{serve_port}",
    "--to",
    "127.0.0.1:{host_port}",
    "--json",
    "--quiet",
    "--connections",
    "1",
    "--idle-timeout",
    "60",
    "--pcap",
    "{pcap}",
)
NEEDS_PROXY: Final = HostCommand(
    "proxy", ("--listen", "--to", "--fault", "--json", "--quiet", "--connections", "--pcap")
)

#: rping's server in the guest (behind the host forward) and its client (to the proxy).
#: ``-v`` prints the data each end holds after each exchange: the server what it read
#: from the client's buffer, the client what the server wrote into its own.
RPING_SERVER: Final = "rping -s -a 0.0.0.0 -p {{guest_port}} -C {count} -S {size} -v -V"
RPING_CLIENT: Final = "rping -c -a {{host}} -p {{serve_port}} -C {count} -S {size} -v -V"

#: What the client and the server print of each exchange's data with ``-v``.
_CLIENT_DATA: Final = "ping data: "
_SERVER_DATA: Final = "server ping data: "


def proxy_summary(run: Run) -> dict[str, Any] | None:
    """The proxy's (last) summary record, or None when it printed none."""
    if run.iwarp is None:
        return None
    found = [o for o in run.iwarp.json_lines() if o.get("type") == "summary"]
    return found[-1] if found else None


def transcript(output: str, prefix: str) -> list[str]:
    """The data lines rping ``-v`` printed (``prefix`` taken off), in order."""
    return [
        line.strip()[len(prefix) :]
        for line in output.splitlines()
        if line.strip().startswith(prefix)
    ]


def _rc(job: JobResult | ProcResult | None) -> str:
    if job is None:
        return "did not run"
    return "hung" if job.rc is None else f"exit {job.rc}"


def siw_did(run: Run) -> str:
    """One line of what happened: both rpings' ends and what the proxy saw each end do."""
    summary = proxy_summary(run) or {}
    return (
        f"rping -c {_rc(run.guest)}, rping -s {_rc(run.guest_server)}; "
        f"initiator_after={summary.get('initiator_after', '?')}, "
        f"responder_after={summary.get('responder_after', '?')}"
    )


def _faults(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    faults = summary.get("faults")
    return [f for f in faults if isinstance(f, Mapping)] if isinstance(faults, list) else []


def forwarded_unchanged(count: int, *, action: str = "") -> Judge:
    """Both rpings exit 0 with the same data at both ends (``-v``'s lines, one for each of
    the ``count`` exchanges: rping exits 0 after a failed exchange too), the proxy
    forwarded FPDUs both ways with no protocol error, and applied ``action`` at least
    once (no fault at all when ``action`` is empty)."""

    def judge(run: Run) -> tuple[bool, str]:
        summary = proxy_summary(run)
        if summary is None:
            return False, f"the proxy printed no summary ({_rc(run.iwarp)}); {siw_did(run)}"
        if run.guest is None or run.guest_server is None:
            return False, siw_did(run)
        if run.guest.rc != 0 or run.guest_server.rc != 0:
            return False, siw_did(run)
        client = transcript(run.guest.output, _CLIENT_DATA)
        server = transcript(run.guest_server.output, _SERVER_DATA)
        if len(client) != count or client != server:
            return False, (
                f"rping's data differ: the client printed {len(client)} lines, the server "
                f"{len(server)}, {'equal' if client == server else 'not equal'}"
            )
        faults = _faults(summary)
        applied = [f for f in faults if f.get("action") == action]
        if action and not applied:
            return False, f"the proxy applied no {action}: {faults}"
        if not action and faults:
            return False, f"the proxy applied faults it was not given: {faults}"
        errors = summary.get("errors")
        if errors:
            return False, f"the proxy decoded {errors} protocol errors"
        ups, downs = summary.get("fpdus_to_responder"), summary.get("fpdus_to_initiator")
        if not ups or not downs:
            return False, f"FPDUs forwarded: {ups} to the responder, {downs} to the initiator"
        shown = f", {action} applied {len(applied)} times" if action else ""
        return True, (
            f"both rpings exit 0, {len(client)} exchanges with the same data at both ends; "
            f"{ups} FPDUs to the responder, {downs} to the initiator, no errors{shown}"
        )

    return judge


@dataclass(frozen=True, slots=True)
class SiwAnswer:
    """What siw did after a fault, as recorded from a run: the start of the proxy's
    ``*_after`` field for each end (``terminate 2/0/2``, ``close``, ``reset``...), and
    whether each rping exited 0. Fields left ``None`` are not judged."""

    initiator_after: str | None = None
    responder_after: str | None = None
    client_ok: bool | None = None
    server_ok: bool | None = None
    #: A line (or its start) rping -c / rping -s printed: a completion's status, an
    #: event. rping exits 0 after most failed exchanges, so its words say more.
    client_says: str | None = None
    server_says: str | None = None


def fault_answered(action: str, answer: SiwAnswer) -> Judge:
    """The proxy applied ``action`` and each end did what :class:`SiwAnswer` recorded;
    the reason says what siw did in either case."""

    def judge(run: Run) -> tuple[bool, str]:
        summary = proxy_summary(run)
        if summary is None:
            return False, f"the proxy printed no summary ({_rc(run.iwarp)}); {siw_did(run)}"
        applied = [f for f in _faults(summary) if f.get("action") == action]
        if not applied:
            return False, f"the proxy applied no {action}; {siw_did(run)}"
        where = ", ".join(f"{f.get('to')} {f.get('at')}" for f in applied)
        wrong = []
        for end in ("initiator_after", "responder_after"):
            want: str | None = getattr(answer, end)
            got = str(summary.get(end, ""))
            if want is not None and not got.startswith(want):
                wrong.append(f"{end}={got!r} (recorded: {want!r}...)")
        for label, job, want_ok in (
            ("rping -c", run.guest, answer.client_ok),
            ("rping -s", run.guest_server, answer.server_ok),
        ):
            rc = job.rc if job is not None else None
            if want_ok is not None and (rc == 0) != want_ok:
                wrong.append(f"{label} {_rc(job)} (recorded: {'0' if want_ok else 'non-zero'})")
        for label, job, words in (
            ("rping -c", run.guest, answer.client_says),
            ("rping -s", run.guest_server, answer.server_says),
        ):
            if words is not None and (job is None or words not in job.output):
                wrong.append(f"{label} did not print {words!r} (recorded)")
        said = f"{action} at {where}; {siw_did(run)}"
        for label, words in (("rping -c", answer.client_says), ("rping -s", answer.server_says)):
            if words is not None and not wrong:
                said += f"; {label} printed {words!r}"
        if wrong:
            return False, f"siw did otherwise than recorded: {'; '.join(wrong)}; {said}"
        return True, said

    return judge


def _case(
    name: str,
    options: str,
    judge: Judge,
    faults: tuple[str, ...] = (),
    *,
    count: int = 1,
    size: int = 64,
    variant: str = "default",
    timeout: float = 60.0,
    wire_check: bool = False,
) -> InteropCase:
    fault_args = tuple(arg for spec in faults for arg in ("--fault", spec))
    return InteropCase(
        name,
        "rping",
        InteropDirection.SIW_VIA_PROXY,
        options,
        judge,
        variant=variant,
        guest_server=RPING_SERVER.format(count=count, size=size),
        guest_cmd=RPING_CLIENT.format(count=count, size=size),
        iwarp_args=(*PROXY_ARGS, *fault_args),
        needs=(NEEDS_PROXY,),
        timeout=timeout,
        wire_check=wire_check,
    )


#: What siw 6.1 did after each fault, recorded from ``iwarp interop siw --case 'proxy*'``
#: (docs/interop.md has the run).
RECORDED: Final[Mapping[str, SiwAnswer]] = {
    # siw's Terminate for the MPA CRC error has its Layer and EType nibbles swapped (as in
    # the conformance records): 0x02 where RFC 5040 §4.8 and RFC 5044 §8 give 0x20
    # (LLP, MPA CRC error); the proxy reads it as RDMAP layer 0, type 2, code 2. rping -s
    # sees its Read fail (IBV_WC_GENERAL_ERR) and still exits 0.
    "proxy/rping/corrupt-crc": SiwAnswer(
        initiator_after="close",
        responder_after="terminate 0/2/2",
        server_says="cq completion failed status 21",
    ),
    # No CRC negotiated: siw ignores the field, and the exchange completes.
    "proxy/rping/corrupt-crc-nocrc": SiwAnswer(
        initiator_after="close", responder_after="close", client_ok=True, server_ok=True
    ),
    # The invalid-STag Terminate as RFC 5041 §7.2 gives it (DDP, tagged buffer, code 0;
    # 0x11 reads the same with its nibbles swapped); rping -c's QP goes to error while it
    # waits for the Write's completion message.
    "proxy/rping/rewrite-stag": SiwAnswer(
        initiator_after="terminate 1/1/0",
        responder_after="close",
        client_says="wait for RDMA_WRITE_COMPLETE state 10",
    ),
    # siw's Initiator gives up waiting for the Reply (ETIMEDOUT, -110) and closes; no
    # Terminate (none is sent before MPA is up); rping -s sees its connection end.
    "proxy/rping/stall-reply": SiwAnswer(
        initiator_after="close",
        responder_after="close",
        client_ok=False,
        client_says="RDMA_CM_EVENT_UNREACHABLE, error -110",
    ),
}

#: rewrite stag's value: an STag neither rping end advertised.
BAD_STAG: Final = "0xdead0100"
#: siw's Initiator waits 10 s for the MPA Reply (docs/interop.md, the siw profile):
#: the stall outlasts it.
STALL_SECONDS: Final = 15


def proxy_cases() -> list[InteropCase]:
    """rping between two siw endpoints through ``iwarp proxy``: clean, re-segmented,
    and with the faults whose answers siw's records hold."""
    clean = "rping -C 3 -S 256 -v -V through iwarp proxy: {}"
    return [
        _case(
            "proxy/rping/clean",
            clean.format("no fault; the same data at both ends"),
            forwarded_unchanged(3),
            count=3,
            size=256,
            wire_check=True,
        ),
        _case(
            "proxy/rping/resegment-1",
            clean.format("every FPDU in 1-octet writes, both ways; nothing changes"),
            forwarded_unchanged(3, action="resegment"),
            ("to=responder; every; resegment 1", "to=initiator; every; resegment 1"),
            count=3,
            size=256,
            timeout=120,
        ),
        _case(
            "proxy/rping/corrupt-crc",
            "siw CRC build (C=1 both ways): the 2nd FPDU to rping -s (the Read Response) "
            "with its CRC corrupted",
            fault_answered("corrupt-crc", RECORDED["proxy/rping/corrupt-crc"]),
            ("to=responder; nth=2; corrupt-crc",),
            variant="crc",
        ),
        _case(
            "proxy/rping/corrupt-crc-nocrc",
            "default siw build (C=0): the same corrupt CRC field, which nobody checks",
            fault_answered("corrupt-crc", RECORDED["proxy/rping/corrupt-crc-nocrc"]),
            ("to=responder; nth=2; corrupt-crc",),
        ),
        _case(
            "proxy/rping/rewrite-stag",
            f"rping -s's RDMA Write to rping -c with its STag rewritten to {BAD_STAG}",
            fault_answered("rewrite", RECORDED["proxy/rping/rewrite-stag"]),
            (f"to=initiator; opcode == rdma_write; rewrite stag={BAD_STAG}",),
        ),
        _case(
            "proxy/rping/stall-reply",
            f"the MPA Reply held {STALL_SECONDS} s (siw's Initiator waits 10 s for it)",
            fault_answered("stall", RECORDED["proxy/rping/stall-reply"]),
            (f"to=initiator; type == mpa_reply; stall {STALL_SECONDS}",),
            timeout=STALL_SECONDS + 45,
        ),
    ]
