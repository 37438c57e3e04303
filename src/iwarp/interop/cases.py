"""The catalogue of interop cases against siw (see docs/interop.md for what each proves).

Templates are filled per case by the runner: ``{host}`` is the address a guest
program uses to reach iwarp (10.0.2.100), ``{serve_port}`` the port iwarp
serves on, ``{host_port}``/``{guest_port}`` the two ends of a host-to-guest
forward, ``{min_size}``/``{max_size}`` rping's accepted buffer sizes as the
guest's rping states them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from iwarp.conformance import all_cases as all_conformance_cases
from iwarp.conformance.expected import compare, unjudged
from iwarp.conformance.expected import load as load_expected
from iwarp.conformance.model import select as select_cases
from iwarp.conformance.terms import TargetRole
from iwarp.interop.host import HostCommand
from iwarp.interop.perftest import CLIENT_TESTS as PERFTEST_CLIENT_TESTS
from iwarp.interop.perftest import TESTS as PERFTEST_TESTS
from iwarp.interop.perftest import parse_report, summarize
from iwarp.interop.profiles import PROFILES, cli_options
from iwarp.interop.proxied import proxy_cases
from iwarp.interop.suite import (
    NOT_FINITE,
    InteropCase,
    InteropDirection,
    Judge,
    Run,
    all_of,
    both_succeed,
    mpa_established,
    refused,
    terminate_sent,
)

D = InteropDirection

_LISTEN: Final = ("listen", "--host", "127.0.0.1", "--port", "{serve_port}", "--json")
#: Bare MPA: count siw's first FPDU as a message, send nothing back.
_LISTEN_MPA: Final = (*_LISTEN, "--op", "mpa")
_CONNECT: Final = ("connect", "127.0.0.1", "{host_port}", "--json")
_NEED_LISTEN: Final = HostCommand("listen", ("--host", "--port", "--count", "--json", "--op"))
_NEED_CONNECT: Final = HostCommand("connect", ("--count", "--json"))

#: rping as siw's MPA Initiator (client) or Responder (server), one exchange.
_RPING_CLIENT_1: Final = "rping -c -a {host} -p {serve_port} -C 1 -S 64"
_RPING_SERVER_1: Final = "rping -s -a 0.0.0.0 -p {guest_port} -C 1 -S 64"


def guest_refused(run: Run) -> tuple[bool, str]:
    """The guest program fails cleanly (exits non-zero, no hang): siw or iwarp refused it."""
    if run.guest is None:
        return False, "the guest program did not run"
    if run.guest.rc is None:
        return False, "the guest program hung"
    if run.guest.rc == 0:
        return False, "the guest program succeeded, expected a refusal"
    last = run.guest.output.strip().splitlines()[-1:] or ["(no output)"]
    return True, f"refused, guest exit {run.guest.rc}: {last[0].strip()}"


def guest_succeeds(run: Run) -> tuple[bool, str]:
    if run.guest is None or run.guest.rc != 0:
        rc = None if run.guest is None else run.guest.rc
        tail = run.guest.output.strip().splitlines()[-2:] if run.guest else []
        return False, f"guest program exit {rc}: {' | '.join(tail)}"
    return True, "guest program exit 0"


#: perftest -n against iwarp: TCG is slow, the numbers are for the report, not a benchmark.
PERFTEST_ITERS: Final = 100


def perftest_measured(run: Run) -> tuple[bool, str]:
    """Both sides exit 0 and perftest printed its result table; the reason carries its numbers."""
    ok, why = both_succeed(run)
    if not ok:
        return False, why
    assert run.guest is not None
    report = parse_report(run.guest.output)
    if report is None:
        return False, "perftest exit 0 but printed no result table"
    odd = [f"{name} {value}" for name, value in report.items() if not math.isfinite(value)]
    if odd:
        # Seen in siw↔siw controls too: perftest's cycle clock under TCG (the suite plays
        # such a case once more, see worth_again).
        return False, f"{NOT_FINITE} ({', '.join(odd)}): {summarize(report)}"
    return True, summarize(report)


def _mpa_cases() -> list[InteropCase]:
    """MPA connection setup: siw's own frames against iwarp listen/connect."""
    est: Judge
    cases: list[InteropCase] = []
    for crc in (True, False):
        flag = () if crc else ("--no-crc",)
        est = mpa_established(rev=2, crc=True) if crc else mpa_established(rev=2, crc=False)
        cases.append(
            InteropCase(
                f"mpa/siw-request/listen-{'crc' if crc else 'nocrc'}",
                "rping",
                D.SIW_TO_IWARP,
                f"siw Rev 2 Request (C=0) to iwarp listen {'offering CRC' if crc else '--no-crc'}",
                est,
                guest_cmd=_RPING_CLIENT_1,
                iwarp_args=(*_LISTEN_MPA, "--count", "1", *flag),
                needs=(HostCommand(_NEED_LISTEN.command, _NEED_LISTEN.options + flag),),
                timeout=30,
            )
        )
        cases.append(
            InteropCase(
                f"mpa/connect/rev2-{'crc' if crc else 'nocrc'}",
                "rping",
                D.IWARP_TO_SIW,
                f"iwarp connect Rev 2 {'C=1' if crc else 'C=0'} to siw rping -s",
                est,
                guest_cmd=_RPING_SERVER_1,
                iwarp_args=(*_CONNECT, "--count", "0", *flag),
                needs=(HostCommand(_NEED_CONNECT.command, _NEED_CONNECT.options + flag),),
                timeout=30,
            )
        )
    for rev in (1, 0):
        cases.append(
            InteropCase(
                f"mpa/connect/rev{rev}",
                "rping",
                D.IWARP_TO_SIW,
                f"iwarp connect --mpa-rev {rev}: siw echoes the Request's Rev",
                mpa_established(rev=rev),
                guest_cmd=_RPING_SERVER_1,
                iwarp_args=(*_CONNECT, "--count", "0", "--mpa-rev", str(rev)),
                needs=(HostCommand("connect", (*_NEED_CONNECT.options, "--mpa-rev")),),
                timeout=30,
            )
        )
    cases += [
        InteropCase(
            "mpa/connect/markers-refused",
            "rping",
            D.IWARP_TO_SIW,
            "iwarp connect --markers (M=1): siw answers R=1, iwarp exits with a clear error",
            refused(iwarp_words=("reject",)),
            guest_cmd=_RPING_SERVER_1,
            iwarp_args=(*_CONNECT, "--count", "0", "--markers"),
            needs=(HostCommand("connect", (*_NEED_CONNECT.options, "--markers")),),
            timeout=30,
        ),
        InteropCase(
            "mpa/listen/markers-refused",
            "rping",
            D.SIW_TO_IWARP,
            "iwarp listen --markers: siw refuses a Reply with M=1 (rping fails, no hang)",
            guest_refused,
            serves=True,
            guest_cmd=_RPING_CLIENT_1,
            iwarp_args=(*_LISTEN_MPA, "--count", "1", "--markers"),
            needs=(HostCommand("listen", (*_NEED_LISTEN.options, "--markers")),),
            timeout=30,
        ),
        InteropCase(
            "mpa/listen/crc-required",
            "rping",
            D.SIW_TO_IWARP,
            "iwarp listen --crc-required vs siw's C=0 Request: iwarp rejects, rping fails",
            guest_refused,
            serves=True,
            guest_cmd=_RPING_CLIENT_1,
            iwarp_args=(*_LISTEN_MPA, "--count", "1", "--crc-required"),
            needs=(HostCommand("listen", (*_NEED_LISTEN.options, "--crc-required")),),
            timeout=30,
        ),
        InteropCase(
            "mpa/siw-crc/listen-nocrc",
            "rping",
            D.SIW_TO_IWARP,
            "siw CRC-required build (C=1) to iwarp listen --no-crc: CRC used both ways",
            mpa_established(rev=2, crc=True),
            variant="crc",
            guest_cmd=_RPING_CLIENT_1,
            iwarp_args=(*_LISTEN_MPA, "--count", "1", "--no-crc"),
            needs=(HostCommand("listen", (*_NEED_LISTEN.options, "--no-crc")),),
            timeout=30,
        ),
        InteropCase(
            "mpa/siw-crc/connect-nocrc",
            "rping",
            D.IWARP_TO_SIW,
            # siw's mpa_crc_required governs only its own Request: as Responder it
            # answers a C=0 Request with C=0 (seen on the wire, siw 6.1).
            "iwarp connect --no-crc to the siw CRC-required build: C=0 both ways",
            mpa_established(rev=2, crc=False),
            variant="crc",
            guest_cmd=_RPING_SERVER_1,
            iwarp_args=(*_CONNECT, "--count", "0", "--no-crc"),
            needs=(HostCommand("connect", (*_NEED_CONNECT.options, "--no-crc")),),
            timeout=30,
        ),
        InteropCase(
            "mpa/siw-v1/listen",
            "rping",
            D.SIW_TO_IWARP,
            "siw Rev 1 build's Request (no RFC 6581 data) to iwarp listen",
            mpa_established(rev=1),
            variant="v1",
            guest_cmd=_RPING_CLIENT_1,
            iwarp_args=(*_LISTEN_MPA, "--count", "1"),
            needs=(_NEED_LISTEN,),
            timeout=30,
        ),
    ]
    # RFC 6581 §9.2: siw as peer-to-peer Initiator; iwarp (responder) echoes A and picks one RTR.
    for variant, rtr in (("p2p", "write"), ("p2p-write", "write"), ("p2p-read", "read")):
        cases.append(
            InteropCase(
                f"p2p/siw-{variant}/listen",
                "rping",
                D.SIW_TO_IWARP,
                f"siw {variant} build offers RTR {VARIANT_RTRS[variant]}; iwarp picks {rtr}",
                mpa_established(rev=2, peer_to_peer=True, rtr=rtr),
                variant=variant,
                guest_cmd=_RPING_CLIENT_1,
                iwarp_args=(*_LISTEN_MPA, "--count", "1"),
                needs=(_NEED_LISTEN,),
                timeout=30,
            )
        )
    return cases


VARIANT_RTRS: Final = {"p2p": "Write+Read", "p2p-write": "Write", "p2p-read": "Read"}

#: RFC 6581 with siw as Responder: what siw chooses for each RTR type iwarp offers.
#: siw prefers Write, then Read; it never accepts a Send RTR (B), so an offer of
#: only Send gets a Reply choosing Write that the Initiator must refuse (TERM 7).
P2P_RESPONDER: Final = {"write": "write", "read": "read", "send": None}


def _p2p_initiator_cases() -> list[InteropCase]:
    # Write and Read RTRs are covered with real RTR messages and data by
    # rping/iwarp-client/p2p-*; here only the negotiation that must fail.
    return [
        InteropCase(
            "p2p/connect-rtr-send",
            "rping",
            D.IWARP_TO_SIW,
            "iwarp connect --p2p --rtr send: siw has no Send RTR and picks Write; iwarp refuses",
            refused(iwarp_words=("rtr",)),
            guest_cmd=_RPING_SERVER_1,
            iwarp_args=(*_CONNECT, "--count", "0", "--p2p", "--rtr", "send"),
            needs=(HostCommand("connect", (*_NEED_CONNECT.options, "--p2p", "--rtr")),),
            timeout=30,
        )
    ]


def _ping(role: str, port: str, *options: str) -> tuple[str, ...]:
    """``iwarp ping`` as client (-c, to the forward) or server (-s, on loopback)."""
    return ("ping", role, "-a", "127.0.0.1", "-p", port, *options)


def _rping_cases() -> list[InteropCase]:
    """rping both ways against iwarp ping: counts 1 and 100, smallest to largest buffer."""
    cases = []
    shapes = (
        ("1", "{min_size}"),
        ("1", "{max_size}"),
        ("100", "{min_size}"),
        ("100", "{max_size}"),
    )
    for count, size in shapes:
        for crc in (False, True):
            crc_flag = () if crc else ("--no-crc",)  # iwarp asks for CRC by default
            label = f"c{count}-{'min' if 'min' in size else 'max'}-{'crc' if crc else 'nocrc'}"
            common = ("-C", count, "-S", size, "-V", *crc_flag)
            iwarp_opts = " ".join(crc_flag)
            cases.append(
                InteropCase(
                    f"rping/iwarp-client/{label}",
                    "rping",
                    D.IWARP_TO_SIW,
                    f"rping -s -V -C {count} -S {size} | iwarp ping -c {iwarp_opts}".strip(),
                    both_succeed,
                    guest_cmd=f"rping -s -a 0.0.0.0 -p {{guest_port}} -C {count} -S {size} -V",
                    iwarp_args=_ping("-c", "{host_port}", *common),
                    needs=(HostCommand("ping", ("-c", "-a", "-p", "-C", "-S", "-V", *crc_flag)),),
                    timeout=120,
                )
            )
            cases.append(
                InteropCase(
                    f"rping/iwarp-server/{label}",
                    "rping",
                    D.SIW_TO_IWARP,
                    f"rping -c -V -C {count} -S {size} | iwarp ping -s {iwarp_opts}".strip(),
                    both_succeed,
                    guest_cmd=f"rping -c -a {{host}} -p {{serve_port}} -C {count} -S {size} -V",
                    iwarp_args=_ping("-s", "{serve_port}", *common),
                    needs=(HostCommand("ping", ("-s", "-a", "-p", "-C", "-S", "-V", *crc_flag)),),
                    timeout=120,
                )
            )
    # RFC 6581 peer-to-peer under a real rping exchange, both roles.
    for rtr, outcome in P2P_RESPONDER.items():
        judge = both_succeed if outcome else all_of(refused(), terminate_sent("i>r", 2, 7))
        cases.append(
            InteropCase(
                f"rping/iwarp-client/p2p-{rtr}",
                "rping",
                D.IWARP_TO_SIW,
                f"iwarp ping -c --p2p {rtr} to rping -s -V -C 10: "
                + (
                    f"siw accepts the {rtr} RTR"
                    if outcome
                    else "siw has no Send RTR, iwarp sends TERM (LLP, no matching RTR)"
                ),
                judge,
                guest_cmd="rping -s -a 0.0.0.0 -p {guest_port} -C 10 -S 1024 -V",
                iwarp_args=_ping("-c", "{host_port}", "-C", "10", "-S", "1024", "-V", "--p2p", rtr),
                needs=(HostCommand("ping", ("-c", "-C", "-S", "-V", "--p2p")),),
                timeout=60,
            )
        )
    for variant in ("p2p", "p2p-read"):
        cases.append(
            InteropCase(
                f"rping/iwarp-server/siw-{variant}",
                "rping",
                D.SIW_TO_IWARP,
                f"rping -c -V -C 10 on the siw {variant} build (RTR first) to iwarp ping -s",
                both_succeed,
                variant=variant,
                guest_cmd="rping -c -a {host} -p {serve_port} -C 10 -S 1024 -V",
                iwarp_args=_ping("-s", "{serve_port}", "-C", "10", "-S", "1024", "-V"),
                needs=(HostCommand("ping", ("-s", "-C", "-S", "-V")),),
                timeout=60,
            )
        )
    cases.append(
        InteropCase(
            "rping/iwarp-client/markers-refused",
            "rping",
            D.IWARP_TO_SIW,
            "iwarp ping -c --markers to rping -s: siw refuses M=1, iwarp exits with an error",
            refused(iwarp_words=("reject",)),
            guest_cmd="rping -s -a 0.0.0.0 -p {guest_port} -C 1 -S 64 -V",
            iwarp_args=_ping("-c", "{host_port}", "-C", "1", "--markers"),
            needs=(HostCommand("ping", ("-c", "-a", "-p", "-C", "--markers")),),
            timeout=30,
        )
    )
    return cases


#: Connections per ucmatose run. One ucmatose process on this siw gets "unable
#: to create CQ" (ENOMEM) from about its 37th connection on (both with two
#: processes in the guest and with siw as one end against iwarp), so -c 50
#: cannot run here; 36 is the most that does.
UCMA_CONNECTIONS: Final = 36


def _peer(name: str, port: str, *options: str) -> tuple[str, ...]:
    """``iwarp interop peer NAME``: iwarp's side of a librdmacm example."""
    return ("interop", "peer", name, "--port", port, *options)


def _rdmacm_cases() -> list[InteropCase]:
    """ucmatose, rdma_server/rdma_client and perftest: siw↔siw controls, then against iwarp."""
    cases = [
        InteropCase(
            "control/rping",
            "rping",
            D.SIW_TO_SIW,
            "rping -s / rping -c -V -C 10 -S 1024, both on siw0 in the guest",
            all_of(both_succeed),
            guest_server="rping -s -a {guest_ip} -p {guest_port} -C 10 -S 1024 -V",
            guest_cmd="rping -c -a {guest_ip} -p {guest_port} -C 10 -S 1024 -V",
        ),
        InteropCase(
            f"control/ucmatose-c{UCMA_CONNECTIONS}",
            "ucmatose",
            D.SIW_TO_SIW,
            f"ucmatose -c {UCMA_CONNECTIONS} (10 Sends of 100 octets each way per connection)",
            both_succeed,
            guest_server=f"ucmatose -b {{guest_ip}} -p {{guest_port}} -c {UCMA_CONNECTIONS}",
            guest_cmd=f"ucmatose -s {{guest_ip}} -p {{guest_port}} -c {UCMA_CONNECTIONS}",
            timeout=120,
        ),
        InteropCase(
            "control/rdma_server",
            "rdma_server/rdma_client",
            D.SIW_TO_SIW,
            "rdma_client sends 16 octets, rdma_server sends them back",
            both_succeed,
            guest_server="rdma_server -s {guest_ip} -p {guest_port}",
            guest_cmd="rdma_client -s {guest_ip} -p {guest_port}",
        ),
    ]
    for test in ("send_bw", "write_bw", "read_bw", "send_lat", "write_lat", "read_lat"):
        opts = "-R -d siw0 -F -n 50 -s 4096 -p {guest_port}"
        cases.append(
            InteropCase(
                f"control/ib_{test}",
                f"ib_{test}",
                D.SIW_TO_SIW,
                f"ib_{test} {opts.replace('{guest_port}', 'P')}",
                both_succeed,
                guest_server=f"ib_{test} {opts}",
                # perftest's rdma_cm connect is sometimes refused right after the
                # server started listening (seen 1 run in 4): try up to 3 times.
                guest_cmd=(
                    f"for try in 1 2 3; do sleep 1; ib_{test} {opts} {{guest_ip}} && exit 0; "
                    "done; exit 1"
                ),
                timeout=90,
            )
        )
    cases += [
        InteropCase(
            f"ucmatose/siw-client/c{UCMA_CONNECTIONS}-p2p",
            "ucmatose",
            D.SIW_TO_IWARP,
            # ucmatose's server sends first; an MPA Responder may not before the
            # Initiator's first FPDU (RFC 5044 §7.1.2), so only siw's peer-to-peer
            # build (its RTR comes first) can run ucmatose against an iwarp server.
            f"ucmatose -c {UCMA_CONNECTIONS} (10 Sends of 100 octets each way per connection) "
            "on the siw p2p build to iwarp interop peer ucmatose-server",
            both_succeed,
            variant="p2p",
            guest_cmd=f"ucmatose -s {{host}} -p {{serve_port}} -c {UCMA_CONNECTIONS}",
            iwarp_args=_peer("ucmatose-server", "{serve_port}", "-c", str(UCMA_CONNECTIONS)),
            needs=(HostCommand("interop", ("peer",)),),
            timeout=120,
        ),
        InteropCase(
            f"ucmatose/siw-server/c{UCMA_CONNECTIONS}",
            "ucmatose",
            D.IWARP_TO_SIW,
            f"ucmatose -b 0.0.0.0 -c {UCMA_CONNECTIONS} against iwarp interop peer "
            f"ucmatose-client: {UCMA_CONNECTIONS} connections at once, 10 Sends each way",
            both_succeed,
            guest_cmd=f"ucmatose -b 0.0.0.0 -p {{guest_port}} -c {UCMA_CONNECTIONS}",
            iwarp_args=_peer("ucmatose-client", "{host_port}", "-c", str(UCMA_CONNECTIONS)),
            needs=(HostCommand("interop", ("peer",)),),
            timeout=120,
        ),
        InteropCase(
            "rdma_server/iwarp-client",
            "rdma_server",
            D.IWARP_TO_SIW,
            "iwarp connect --op send, 16 octets: rdma_server receives and answers",
            guest_succeeds,
            guest_cmd="rdma_server -s 0.0.0.0 -p {guest_port}",
            iwarp_args=(*_CONNECT, "--op", "send", "--count", "0"),
            needs=(HostCommand("connect", ("--json", "--count", "--size", "--op")),),
            timeout=30,
        ),
        InteropCase(
            "rdma_client/iwarp-server",
            "rdma_client",
            D.SIW_TO_IWARP,
            "rdma_client sends 16 octets, iwarp interop peer echo-server sends them back",
            both_succeed,
            guest_cmd="rdma_client -s {host} -p {serve_port}",
            iwarp_args=_peer("echo-server", "{serve_port}", "-C", "1"),
            needs=(HostCommand("interop", ("peer",)),),
            timeout=30,
        ),
    ]
    for test in PERFTEST_TESTS:
        size = 4096
        opts = f"-R -d siw0 -F -n {PERFTEST_ITERS} -s {size}"
        cases.append(
            InteropCase(
                f"perftest/ib_{test}",
                f"ib_{test}",
                D.SIW_TO_IWARP,
                f"ib_{test} {opts} (client on siw) against iwarp interop peer "
                f"perftest-{test.replace('_', '-')}",
                perftest_measured,
                # ib_write_lat's server Writes first: an MPA Responder may not
                # send before the Initiator's first FPDU (RFC 5044 §7.1.2), so
                # only siw's peer-to-peer build (its RTR comes first) can run it.
                variant="p2p" if test == "write_lat" else "default",
                guest_cmd=f"ib_{test} {opts} -p {{serve_port}} {{host}}",
                iwarp_args=_peer(
                    f"perftest-{test.replace('_', '-')}",
                    "{serve_port}",
                    "-s",
                    str(size),
                    "-n",
                    str(PERFTEST_ITERS),
                ),
                needs=(HostCommand("interop", ("peer",)),),
                timeout=120,
            )
        )
    opts = f"-R -d siw0 -F -n {PERFTEST_ITERS} -s 4096"
    for test in PERFTEST_CLIENT_TESTS:
        peer = f"perftest-{test.replace('_', '-')}-client"
        cases.append(
            InteropCase(
                f"perftest/ib_{test}/siw-server",
                f"ib_{test}",
                D.IWARP_TO_SIW,
                f"ib_{test} {opts} (server on siw) against iwarp interop peer {peer}; "
                "the table is iwarp's measurement, printed by perftest",
                perftest_measured,
                guest_cmd=f"ib_{test} {opts} -p {{guest_port}}",
                iwarp_args=_peer(peer, "{host_port}", "-s", "4096", "-n", str(PERFTEST_ITERS)),
                needs=(HostCommand("interop", ("peer",)),),
                timeout=120,
            )
        )
    return cases


def _profile_cases() -> list[InteropCase]:
    """iwarp configured as each peer profile, against siw, both roles."""
    cases = []
    # What siw does with each profile's Request (it echoes Rev 2, follows C,
    # picks Write over Read) and what each profile answers siw's Request with.
    connect_expect: dict[str, dict[str, object]] = {
        "siw": {"rev": 2, "crc": False, "peer_to_peer": False},
        "cxgb4": {"rev": 2, "crc": True, "peer_to_peer": True, "rtr": "read"},
        "irdma": {"rev": 2, "crc": True, "peer_to_peer": True, "rtr": "write"},
        "rfc": {"rev": 2, "crc": True, "peer_to_peer": False},
    }
    listen_expect: dict[str, dict[str, object]] = {
        "siw": {"rev": 2, "crc": False, "peer_to_peer": False},
        "cxgb4": {"rev": 2, "crc": True, "peer_to_peer": False},
        "irdma": {},  # refused, see below
        "rfc": {"rev": 2, "crc": True, "peer_to_peer": False},
    }
    for name, make in PROFILES.items():
        opts = cli_options(make())
        shown = " ".join(opts)
        cases.append(
            InteropCase(
                f"profile/{name}/connect",
                "rping",
                D.IWARP_TO_SIW,
                f"iwarp connect as {name} ({shown}) to siw rping -s",
                mpa_established(**connect_expect[name]),
                guest_cmd=_RPING_SERVER_1,
                iwarp_args=(*_CONNECT, "--count", "0", *opts),
                needs=(HostCommand("connect", (*_NEED_CONNECT.options, *_option_names(opts))),),
                timeout=30,
            )
        )
        listen_judge = mpa_established(**listen_expect[name])
        until = ("--count", "1")
        if name == "irdma":
            # A real irdma refuses siw's Rev 2 Request (no peer-to-peer bit):
            # no Reply, the connection reset; siw's rping fails.
            listen_judge = all_of(refused(iwarp_words=("peer-to-peer",)), guest_refused)
            until = ("--connections", "1")
        cases.append(
            InteropCase(
                f"profile/{name}/listen",
                "rping",
                D.SIW_TO_IWARP,
                f"siw rping -c to iwarp listen as {name} ({shown})",
                listen_judge,
                guest_cmd=_RPING_CLIENT_1,
                iwarp_args=(*_LISTEN_MPA, *until, *opts),
                needs=(
                    HostCommand("listen", (*_NEED_LISTEN.options, until[0], *_option_names(opts))),
                ),
                timeout=30,
            )
        )
    opts = cli_options(PROFILES["cxgb4"]())
    cases.append(
        InteropCase(
            "profile/cxgb4/listen-siw-p2p",
            "rping",
            D.SIW_TO_IWARP,
            "siw p2p build offers Write+Read RTR to iwarp as cxgb4 (Read only): Read chosen",
            mpa_established(rev=2, crc=True, peer_to_peer=True, rtr="read"),
            variant="p2p",
            guest_cmd=_RPING_CLIENT_1,
            iwarp_args=(*_LISTEN_MPA, "--count", "1", *opts),
            needs=(HostCommand("listen", (*_NEED_LISTEN.options, *_option_names(opts))),),
            timeout=30,
        )
    )
    return cases


def _sync_ping_cases() -> list[InteropCase]:
    """rping both ways against ``iwarp ping --sync``: the blocking adapter
    (iwarp.sync) carrying the same conversation as the asyncio one."""
    cases = []
    for count, size, crc in (("100", "{min_size}", True), ("100", "{max_size}", False)):
        crc_flag = () if crc else ("--no-crc",)
        label = f"c{count}-{'min' if 'min' in size else 'max'}-{'crc' if crc else 'nocrc'}"
        common = ("-C", count, "-S", size, "-V", "--sync", *crc_flag)
        opts = " ".join(("--sync", *crc_flag))
        cases += [
            InteropCase(
                f"rping/sync-client/{label}",
                "rping",
                D.IWARP_TO_SIW,
                f"rping -s -V -C {count} -S {size} | iwarp ping -c {opts}",
                both_succeed,
                guest_cmd=f"rping -s -a 0.0.0.0 -p {{guest_port}} -C {count} -S {size} -V",
                iwarp_args=_ping("-c", "{host_port}", *common),
                needs=(HostCommand("ping", ("-c", "-C", "-S", "-V", "--sync", *crc_flag)),),
                timeout=120,
            ),
            InteropCase(
                f"rping/sync-server/{label}",
                "rping",
                D.SIW_TO_IWARP,
                f"rping -c -V -C {count} -S {size} | iwarp ping -s {opts}",
                both_succeed,
                guest_cmd=f"rping -c -a {{host}} -p {{serve_port}} -C {count} -S {size} -V",
                iwarp_args=_ping("-s", "{serve_port}", *common),
                needs=(HostCommand("ping", ("-s", "-C", "-S", "-V", "--sync", *crc_flag)),),
                timeout=120,
            ),
        ]
    return cases


def conformance_matches(record: str) -> Judge:
    """``iwarp conformance --json`` ran and every verdict equals the committed record."""

    def judge(run: Run) -> tuple[bool, str]:
        if run.iwarp is None:
            return False, "iwarp conformance did not run"
        reports = [o for o in run.iwarp.json_lines() if "results" in o]
        if not reports:
            return False, f"no conformance report (exit {run.iwarp.rc}): {run.iwarp.output[-300:]}"
        report = reports[-1]
        summary = (
            f"{report['passed']} passed, {report['failed']} failed, {report['skipped']} skipped"
        )
        try:
            expected = load_expected(record)
        except FileNotFoundError:
            return False, f"{summary}; no record {record}.json to compare with"
        diff = compare(expected, report["results"])
        probe = atomic_probe(report["results"])
        if diff:
            more = f" (+{len(diff) - 6} more)" if len(diff) > 6 else ""
            return (
                False,
                f"{summary}; differs from {record}.json: {'; '.join(diff[:6])}{more}{probe}",
            )
        skipped = unjudged(expected, report["results"])
        note = f"; not judged this run: {', '.join(skipped)}" if skipped else ""
        return True, f"{summary}, verdicts as recorded in {record}.json{note}{probe}"

    return judge


#: The conformance case whose FetchAdd (of 0, at an STag never advertised) is the
#: RFC 7306 §1.1 probe: a target without RFC 7306 answers "Unexpected OpCode".
ATOMIC_PROBE: Final = "rfc7306/5.2.1/2"


def atomic_probe(results: Sequence[Mapping[str, Any]]) -> str:
    """What the target answered to the RFC 7306 FetchAdd probe, as the report
    says it (``""`` when the probe case did not run)."""
    for result in results:
        if result.get("id") == ATOMIC_PROBE:
            reason = result.get("reason") or "the target answered as RFC 7306 requires"
            return f"; RFC 7306 FetchAdd probe ({ATOMIC_PROBE}): {result.get('status')}, {reason}"
    return ""


#: Replies after which siw 6.1 as Initiator makes no more connections (rping -c hangs in
#: every later run, twice in two runs): left out, docs/conformance.md has the evidence.
_WEDGES_SIW: Final = (
    "rfc5044/7.1.1/51",
    "rfc5044/7.1.1/52",
    # Statuses that changed between two runs (siw under TCG): not comparable with a record.
    "rfc5044/8/3",
    "rfc5041/7.2/14",
    "rfc5040/5.2.1/1",
    "rfc5040/5.5/1",
    # Passed in three runs, then siw answered the IRD overrun with its (nibble-swapped)
    # Terminate in a fourth: not comparable with a record either.
    "rfc5040/6.1/1",
)
#: Requests after which siw 6.1's persistent rping -s -P stops listening (two runs): a
#: Request cut short by FIN, a Rev 0 Request (rfc5044/C/1, and the Rev 0 data cases C/4 and
#: C/5, which start with one); and the peer-to-peer (A=1) Requests, after
#: one of which the default siw build stopped completing connections (1 run in 3; the
#: runner had to boot a fresh guest). Left out, docs/conformance.md says why.
_KILLS_RPING_P: Final = (
    "rfc5044/8/1",
    "rfc5044/C/1",
    "rfc5044/C/4",
    "rfc5044/C/5",
    *(f"rfc6581/9.2/{n}" for n in (1, 2, 3, 4, 5, 8, 9)),
)


#: Seconds the tool waits after siw's MPA Reply before its first FPDU (``--settle``): siw
#: 6.1's siw_accept sends the Reply before it installs its FPDU receive upcall, and FPDUs
#: that arrive in between stay unread until more data comes (see docs/interop.md).
SIW_SETTLE: Final = "0.05"
#: Cases whose verdict against rping -s -P changed between runs of the same code, with the
#: tool waiting ``SIW_SETTLE`` after the Reply (two runs each of the MUST and the --strict
#: cases): rfc5040/5.2.1/1: siw answers the zero-length Read Request with a Read Response in
#: one run and a Terminate (layer 1 type 0 code 0x01) in another (its inbound and outbound
#: Read state cross with rping's own Read); rfc5040/5.4/2: rping -s closes after the tool's
#: second Send, racing siw's Terminate. Left out, docs/conformance.md has the evidence. (Before
#: the tool waited after the Reply, siw's accept race made rfc5044/8/2, 8/3, 8/5, 8/7,
#: rfc5040/5.4/1 and rfc5041/7.2/10 vary too; with the wait each gave one verdict in every run.)
_VARIES_RESPONDER: Final = (
    "rfc5040/5.2.1/1",
    "rfc5040/5.4/2",
)
#: The same for siw's Initiator (rping -c): its application closes after the tool's Send,
#: racing siw's Terminate for the message after it (rfc5041/7.2/12 and rfc5040/5.4/1: a FIN
#: without the Terminate in one CI run each, the recorded Terminate in the others).
_VARIES_INITIATOR: Final = (
    "rfc5040/1.2/1",
    "rfc5040/5.4/1",
    "rfc5040/5.4/2",
    "rfc5041/7.2/12",
)
#: SHOULD cases whose verdict against the guest's rping -c loop is the loop's, not siw's: each
#: waits for the Initiator's own startup timeout, and ``timeout 8`` ends rping -c first.
_LOOP_TIMEOUTS: Final = ("rfc5044/7.1.2/11", "rfc5044/7.1.2/12")


def _conformance_cases() -> list[InteropCase]:
    """``iwarp conformance`` against siw: rping -s as Responder, a loop of rping -c as Initiator,
    the MUST cases and (``-strict``) the SHOULD cases too."""
    cases = []
    for strict in (False, True):
        suffix = "-strict" if strict else ""
        level = "MUST and SHOULD" if strict else "MUST"
        flag = ("--strict",) if strict else ()
        runs = len(select_cases(all_conformance_cases(), strict=strict, role=TargetRole.INITIATOR))
        wedges = (*_WEDGES_SIW, *_VARIES_INITIATOR, *(_LOOP_TIMEOUTS if strict else ()))
        cases += [
            InteropCase(
                f"conformance/siw-responder{suffix}",
                "rping",
                D.IWARP_TO_SIW,
                f"iwarp conformance ({level} cases) against rping -s -P on siw, compared with "
                f"conformance/expected/siw-responder{suffix}.json",
                conformance_matches(f"siw-responder{suffix}"),
                guest_cmd="rping -s -P -a 0.0.0.0 -p {guest_port}",
                iwarp_args=(
                    "conformance",
                    "127.0.0.1",
                    "{host_port}",
                    "--json",
                    "--settle",
                    SIW_SETTLE,
                    # The startup-timer cases run beside the others: their connections
                    # open apart (iwarp.conformance.runner.STAGGER), as siw's listener needs.
                    *flag,
                    *(
                        arg
                        for case_id in (*_KILLS_RPING_P, *_VARIES_RESPONDER)
                        for arg in ("--exclude", case_id)
                    ),
                ),
                needs=(HostCommand("conformance", ("--json", "--settle", "--exclude", *flag)),),
                timeout=600 if strict else 400,
                wire_check=False,
            ),
            InteropCase(
                f"conformance/siw-initiator{suffix}",
                "rping",
                D.SIW_TO_IWARP,
                f"iwarp conformance --listen ({level} cases) against rping -c on siw, once per "
                f"case, compared with conformance/expected/siw-initiator{suffix}.json",
                conformance_matches(f"siw-initiator{suffix}"),
                guest_cmd=(
                    f"i=0; while [ $i -lt {runs + 1} ]; do i=$((i+1)); "
                    "timeout 8 rping -c -a {host} -p {serve_port} -C 1 -S 64 >/dev/null 2>&1; "
                    "done; exit 0"
                ),
                iwarp_args=(
                    "conformance",
                    "--listen",
                    "{serve_port}",
                    "--json",
                    *flag,
                    *(arg for case_id in wedges for arg in ("--exclude", case_id)),
                ),
                needs=(HostCommand("conformance", ("--listen", "--json", "--exclude", *flag)),),
                timeout=600 if strict else 400,
                wire_check=False,
                guest_feeds=True,
            ),
        ]
    return cases


def _option_names(options: list[str]) -> tuple[str, ...]:
    return tuple(o for o in options if o.startswith("--"))


def all_cases() -> list[InteropCase]:
    """Every case, in report order."""
    return [
        *_mpa_cases(),
        *_p2p_initiator_cases(),
        *_profile_cases(),
        *_rping_cases(),
        *_sync_ping_cases(),
        *_rdmacm_cases(),
        *_conformance_cases(),
        *proxy_cases(),
    ]
