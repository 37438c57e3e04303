"""draft-culley-iwarp-mpa-02 framing (the seed ``002``): no MPA Request or Reply.

Each direction frames from its start: markers every 512 octets (the first
at the first octet, FPDUPTR 0) and a CRC in every FPDU. The draft leaves to
DDP's ULP where the start is: at once after the TCP connection (§8.1), or
after a streaming exchange of the ULP (``iwarp listen --mpa-mode culley``
sends a streaming line first each way: ``--culley-line``).

These cases run only when the run selects ``--mpa-mode culley`` (every
other case then skips: it would send an MPA Request). The target answers
the tool's FPDUs only when it speaks iwarp's receipts
(:data:`iwarp.apps.receipt.RECEIPT_REQUEST`, as ``iwarp listen --op mpa``):
without one the cases that need its FPDUs skip, saying so.
"""

from __future__ import annotations

import time
from typing import Final

from iwarp.apps.receipt import RECEIPT_KEY, RECEIPT_REQUEST
from iwarp.conformance.model import case
from iwarp.conformance.session import Session
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.mpa.framing import FpduDecoder, FpduEncoder

__all__ = ["NO_RECEIPT"]

#: Skip reason: the target sent no FPDU back to read.
NO_RECEIPT: Final = (
    "the target answered no receipt request with an FPDU; a target that answers iwarp's "
    "receipt requests (iwarp listen --mpa-mode culley --op mpa) enables the case"
)
#: The test message the tool frames before its receipt request.
MESSAGE: Final = b"conformance: culley-02 framing\n" * 4
SECTION_81: Final = (
    "draft-culley-iwarp-mpa-02 §8.1: \"DDP's ULP MAY require DDP on MPA startup immediately "
    'after TCP connection setup ... In this case the marker MUST be the first four octets sent"'
)
SECTION_71: Final = (
    'draft-culley-iwarp-mpa-02 §7.1: "MPA senders MUST insert a marker into the data stream '
    "at a 512 octet periodic interval ... FPDUPTR MUST contain the number of octets in the "
    'TCP stream from the beginning of the current FPDU to the first octet of the marker"'
)
SECTION_72: Final = (
    'draft-culley-iwarp-mpa-02 §7.2: "When sending an FPDU, the sender MUST include a valid '
    'CRC field"'
)
SECTION_72_RX: Final = (
    'draft-culley-iwarp-mpa-02 §7.2: "If not, the receiver MUST treat the FPDU as an invalid '
    'FPDU"; §9: "Once MPA delivers an error of any type, it MUST NOT pass or deliver any '
    'additional FPDUs on that half connection"'
)


def _start(s: Session) -> FpduEncoder:
    """Both directions start framing: after the streaming line when the run names one."""
    line = s.culley_line
    if line:
        s.link.send(line)
        s.note(f"sent the streaming line {line!r}")
        if not s.link.fill(len(line), s.deadline):
            raise CaseFailed(f"no streaming line from the target ({s.link.ended or 'silence'})")
        theirs = s.link.take(len(line))
        if theirs != line:
            raise CaseFailed(f"the target's streaming line is {theirs!r}, not {line!r}")
    return FpduEncoder(markers=True, crc=True)


def _frame(encoder: FpduEncoder, ulpdu: bytes) -> bytes:
    return b"".join(bytes(piece) for piece in encoder.encode(ulpdu))


def _ask(s: Session, encoder: FpduEncoder, *, bad_crc: bool = False) -> None:
    """Frame the test message (its CRC broken when ``bad_crc``), then a receipt request."""
    first = bytearray(_frame(encoder, MESSAGE))
    if bad_crc:
        first[-1] ^= 0x01
    s.link.send(bytes(first) + _frame(encoder, RECEIPT_REQUEST))
    what = "with a wrong CRC" if bad_crc else "markers and CRC right"
    s.note(f"sent a {len(MESSAGE)}-octet message ({what}), then a receipt request")


def _next_ulpdu(s: Session, decoder: FpduDecoder, deadline: float) -> bytes | None:
    """The target's next ULPDU (markers and CRC checked); None at the end or the deadline.

    :raises CaseFailed: a marker or CRC of the target's is wrong.
    """
    while True:
        if not s.link.fill(1, deadline):
            return None
        got = decoder.feed(s.link.take(len(s.link.inbox)))
        if decoder.error is not None:
            raise CaseFailed(f"the target's FPDU is invalid: {decoder.error}")
        if got:
            return bytes(got[0])


def _receipt(s: Session, decoder: FpduDecoder) -> tuple[bytes, bytes, FpduEncoder]:
    """One valid exchange: the target's first octets, its answer to a receipt request (read
    by ``decoder``: markers always checked, the CRC when the case judges it) and the tool's
    encoder (to frame more on the same stream).

    :raises CaseSkipped: the target sent nothing back (it speaks no receipts).
    :raises CaseFailed: it sent octets that do not decode as FPDUs with markers.
    """
    encoder = _start(s)
    _ask(s, encoder)
    if not s.link.fill(4, s.deadline):
        raise CaseSkipped(NO_RECEIPT)
    head = bytes(s.link.inbox[:4])
    ulpdu = _next_ulpdu(s, decoder, s.deadline)
    if ulpdu is None:
        sent = len(s.link.received) - len(s.culley_line)
        raise CaseFailed(
            f"the target framed {sent} octets, in which no FPDU decodes with a marker at its "
            "first octet and every 512th after it"
        )
    if not ulpdu.startswith(RECEIPT_KEY):
        raise CaseSkipped(NO_RECEIPT)
    return head, ulpdu, encoder


def _markers_only() -> FpduDecoder:
    """A decoder that checks the markers and leaves the CRC to draft-culley/7.2/1."""
    return FpduDecoder(markers=True, crc=False)


@case(
    "draft-culley/8.1/1",
    "the target's framed direction starts with a marker, FPDUPTR 0",
    SECTION_81,
    roles=(TargetRole.RESPONDER,),
    needs=(Need.CULLEY,),
    covers=("markers",),
)
def first_marker(s: Session) -> None:
    head, _, _ = _receipt(s, _markers_only())
    if head != bytes(4):
        raise CaseFailed(f"the first four octets are {head.hex()}, not a marker 00000000")
    s.note("the first four octets are the marker 00000000")


@case(
    "draft-culley/7.1/1",
    "the target's FPDUs carry a marker every 512 octets with the right FPDUPTR",
    SECTION_71,
    roles=(TargetRole.RESPONDER,),
    needs=(Need.CULLEY,),
    covers=("markers",),
)
def markers(s: Session) -> None:
    _, ulpdu, _ = _receipt(s, _markers_only())
    s.note(f"the target's {len(ulpdu)}-octet ULPDU decoded with its markers checked")


@case(
    "draft-culley/7.2/1",
    "the target's FPDUs carry a valid CRC",
    SECTION_72,
    roles=(TargetRole.RESPONDER,),
    needs=(Need.CULLEY,),
    covers=("markers", "crc-sent-marked"),
)
def crc_sent(s: Session) -> None:
    _, ulpdu, _ = _receipt(s, FpduDecoder(markers=True, crc=True))
    s.note(f"the target's {len(ulpdu)}-octet ULPDU came with a valid CRC")


@case(
    "draft-culley/7.2/2",
    "an FPDU with a wrong CRC is not delivered, nor any FPDU after it",
    SECTION_72_RX,
    roles=(TargetRole.RESPONDER,),
    needs=(Need.CULLEY,),
    covers=("crc",),
)
def crc_checked(s: Session) -> None:
    decoder = _markers_only()
    try:  # proves the target answers receipt requests at all
        _, _, encoder = _receipt(s, decoder)
    except CaseFailed as exc:
        raise CaseSkipped(f"{exc}: its answers cannot be read (draft-culley/7.1/1)") from None
    _ask(s, encoder, bad_crc=True)
    wait = min(s.deadline, time.monotonic() + 2.0)
    while True:
        got = _next_ulpdu(s, decoder, wait)
        if got is None:
            s.note(f"no receipt after the wrong CRC ({s.link.ended or 'silence'})")
            return
        if got.startswith(RECEIPT_KEY):
            raise CaseFailed(
                "the target answered the receipt request that followed an FPDU with a wrong "
                "CRC: it delivered FPDUs after the error"
            )
        s.note(f"the target sent a {len(got)}-octet ULPDU (no receipt)")
