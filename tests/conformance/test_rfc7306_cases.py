"""The RFC 7306 cases against iwarp itself, in the role that needs care:
with the target as MPA Initiator the tool is the Responder and must not send
before the target's first FPDU (RFC 5044 §7.1.2 rule 4)."""

from __future__ import annotations

import pytest

from iwarp.conformance import all_cases
from iwarp.conformance.model import Status, select
from iwarp.conformance.runner import InitiatorTarget, Runner
from iwarp.interop.profiles import PROFILES, cli_options

from .conftest import TARGET_TIMEOUT, connecting
from .test_against_iwarp import _free_port


@pytest.mark.parametrize("profile", ["rfc", "siw", "irdma"])
def test_unknown_stag_case_waits_for_the_initiator(profile: str) -> None:
    """rfc7306/5.2.1/2 against ``iwarp connect``: its FetchAdd goes after the
    target's first FPDU (its RTR or its first message), and is answered with
    RDMAP remote protection, invalid STag."""
    port = _free_port()
    options = ["--count", "1", *cli_options(PROFILES[profile]()), "--timeout", TARGET_TIMEOUT]
    with connecting(port, options):
        (result,) = Runner(InitiatorTarget(port), timeout=5.0).run(
            select(all_cases(), ["rfc7306/5.2.1/2"], strict=True)
        )
    assert result.status is Status.PASSED, result.reason
    lines = [line.split(" ", 2)[-1] for line in result.observed]
    reply = next(i for i, line in enumerate(lines) if line.startswith("sent MPA Reply"))
    fetch_add = next(i for i, line in enumerate(lines) if line.startswith("sent FetchAdd"))
    assert any(line.startswith("got FPDU") for line in lines[reply:fetch_add]), lines
    assert "Terminate layer 0 type 1 code 0x00" in lines[-1]
