"""MPA startup: RFC 5044 §7.1 (frames, startup rules), §8 (errors), Appendix C (Rev 0)."""

from __future__ import annotations

from typing import Final

from iwarp.apps.rping import ADVERT
from iwarp.conformance import craft
from iwarp.conformance.model import Level, case
from iwarp.conformance.session import NO_FPDU, Received, Session, describe_terminate
from iwarp.conformance.terms import CaseFailed, CaseSkipped, Need, TargetRole
from iwarp.errors import MpaErrorCode
from iwarp.mpa.wire import (
    FRAME_HEADER_SIZE,
    REPLY_KEY,
    REQUEST_KEY,
    RESERVED_FLAGS,
    FrameFlags,
    Revision,
)
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest

R = (TargetRole.RESPONDER,)
I = (TargetRole.INITIATOR,)  # noqa: E741

KEY_QUOTE = (
    '§7.1.1 Key: "Responder mode receivers MUST check this field for the same value, '
    'and close the connection"'
)
KEY_QUOTE_I = (
    '§7.1.1 Key: "Initiator mode receivers MUST check this field for the same value, '
    'and close the connection"'
)
REV_QUOTE = (
    '§7.1.1 Rev: "If the MPA receiver cannot interoperate with the received version, '
    'then it MUST close the connection"'
)
PD_QUOTE = (
    '§7.1.1 PD_Length: "if the length of the Private Data field exceeds 512 octets, '
    'the receiver MUST close the connection"'
)


def _accepted(s: Session, request: bytes, what: str) -> None:
    """The Responder answers ``request`` with a Reply that accepts (R=0)."""
    reply = s.initiate(request)
    if reply.reject:
        raise CaseFailed(f"{what}: the target rejected the Request (R=1)")


# --- §7.1.1: the Reply the target sends ----------------------------------------


@case(
    "rfc5044/7.1.1/1",
    'the Reply carries the key "MPA ID Rep Frame"',
    '§7.1.1 Key: "Responder mode senders MUST set this field to the fixed value '
    '"MPA ID Rep Frame""',
    roles=R,
    covers=("reply-key",),
)
def reply_key(s: Session) -> None:
    s.initiate()


@case(
    "rfc5044/7.1.1/2",
    "the Reply's reserved flag bits are zero",
    '§7.1.1 Res: "It MUST be set to zero when sending"',
    roles=R,
    covers=("reply-flags",),
)
def reply_res_zero(s: Session) -> None:
    reply = s.initiate()
    if reply.reserved & RESERVED_FLAGS:
        raise CaseFailed(f"Reply reserved bits {reply.reserved & RESERVED_FLAGS:#x}")


@case(
    "rfc5044/7.1.1/3",
    "a Request with reserved bits set is accepted, and the Reply's are zero",
    '§7.1.1 Res: "MUST be set to zero when sending, and not checked on reception"',
    roles=R,
    covers=("reply-reserved", "reply-flags"),
)
def request_res_set(s: Session) -> None:
    req = s.default_request(flags=s.base_flags() | RESERVED_FLAGS)
    reply = s.initiate(req)
    if reply.reject:
        raise CaseFailed("the target rejected a Request whose only oddity is reserved bits")
    if reply.reserved & RESERVED_FLAGS:
        raise CaseFailed(
            f"the Reply's reserved bits are {reply.reserved & RESERVED_FLAGS:#x} "
            "(echoed from the Request?)"
        )


@case(
    "rfc5044/7.1.1/4",
    "a Request with the R bit set is accepted",
    '§7.1.1 R: "This bit is set to zero, and not checked on reception in the MPA Request Frame"',
    roles=R,
    covers=("request-r",),
)
def request_r_set(s: Session) -> None:
    _accepted(
        s,
        s.default_request(flags=s.base_flags() | FrameFlags.REJECT),
        "R bit in a Request",
    )


@case(
    "rfc5044/7.1.1/5",
    "a Rev 1 Request is answered with Rev 1",
    '§7.1.1 Rev: "For this version of the specification, senders MUST set this field to one"',
    roles=R,
    covers=("reply-rev", "rev1"),
)
def rev1_reply(s: Session) -> None:
    reply = s.initiate(craft.request(revision=Revision.REV1))
    if reply.revision != Revision.REV1:
        raise CaseFailed(f"a Rev 1 Request was answered with Rev {reply.revision}")


@case(
    "rfc5044/7.1.1/6",
    "the Reply's PD_Length stays within 512 octets",
    '§7.1.1 Private Data: "The Private Data field MUST be between 0 and 512 octets in length"',
    roles=R,
    covers=("reply-pd",),
)
def reply_pd_limit(s: Session) -> None:
    reply = s.initiate()
    if len(reply.private_data) > 512:
        raise CaseFailed(f"Reply private data of {len(reply.private_data)} octets")


@case(
    "rfc5044/7.1.1/7",
    "an accepting Reply has R=0 and the connection stays open",
    '§7.1.2 rule 2: "the implementation SHOULD return an MPA Reply Frame with the Rejected '
    "Connection bit set to '0'\"",
    level=Level.SHOULD,
    roles=R,
)
def reply_r_zero(s: Session) -> None:
    reply = s.initiate()
    if reply.reject:
        raise CaseFailed("the default Request (Rev 2, C=1, IRD/ORD 16) was rejected")
    s.expect_no_fpdu(0.3, "after the Reply", close_ok=False)


# --- §7.1.1 Key: one wrong octet at a time ---------------------------------------


def _bad_key_case(number: int, index: int) -> None:
    key = bytearray(REQUEST_KEY)
    key[index] ^= 0x20 if chr(key[index]).isalpha() else 0x01

    @case(
        f"rfc5044/7.1.1/{number}",
        f"a Request whose key octet {index} is {key[index]:#04x} is closed without a Reply",
        KEY_QUOTE,
        roles=R,
        covers=("key", "reply-to-invalid"),
    )
    def run(s: Session) -> None:
        s.send_raw(s.default_request(key=bytes(key)), f"Request with key {bytes(key)!r}")
        s.expect_closed("a wrong Request key")


for _i in range(16):
    _bad_key_case(8 + _i, _i)


@case(
    "rfc5044/7.1.1/24",
    "a Request with an all-zero key is closed without a Reply",
    KEY_QUOTE,
    roles=R,
    covers=("key", "reply-to-invalid"),
)
def zero_key(s: Session) -> None:
    s.send_raw(s.default_request(key=bytes(16)), "Request with a zero key")
    s.expect_closed("a zero key")


@case(
    "rfc5044/7.1.1/25",
    "a Request with a lower-case key is closed without a Reply",
    KEY_QUOTE,
    roles=R,
    covers=("key", "reply-to-invalid"),
)
def lower_key(s: Session) -> None:
    s.send_raw(s.default_request(key=REQUEST_KEY.lower()), "Request with a lower-case key")
    s.expect_closed("a lower-case key")


@case(
    "rfc5044/7.1.1/26",
    "a Request of Rev 3 is not accepted: the connection is closed",
    REV_QUOTE,
    roles=R,
    covers=("rev",),
)
def rev3(s: Session) -> None:
    s.send_raw(craft.request(revision=3), "Rev 3 Request")
    s.expect_closed("an unknown revision", allow_reply=True)


@case(
    "rfc5044/7.1.1/27",
    "a Request of Rev 255 is not accepted: the connection is closed",
    REV_QUOTE,
    roles=R,
    covers=("rev",),
)
def rev255(s: Session) -> None:
    s.send_raw(craft.request(revision=255), "Rev 255 Request")
    s.expect_closed("an unknown revision", allow_reply=True)


@case(
    "rfc5044/7.1.1/28",
    "a Request with 513 octets of private data is closed without a Reply",
    PD_QUOTE,
    roles=R,
    covers=("pd-length", "reply-to-invalid"),
)
def pd_513(s: Session) -> None:
    s.send_raw(
        craft.request(
            enhanced=None, flags=FrameFlags.CRC, revision=1, private_data=s.values.private_data(513)
        ),
        "Rev 1 Request, PD_Length 513",
    )
    s.expect_closed("PD_Length 513", within=1.0)


@case(
    "rfc5044/7.1.1/29",
    "a Rev 2 Request with PD_Length 513 is closed without a Reply",
    PD_QUOTE,
    roles=R,
    # A Rev 1-only Responder may close any Rev 2 Request; it would pass for the wrong
    # reason, and a Rev 1 Request of this size is /28's.
    needs=(Need.ENHANCED,),
    covers=("pd-length", "reply-to-invalid"),
)
def pd_513_rev2(s: Session) -> None:
    # 4 octets of enhanced data (RFC 6581 §5) and 509 of the ULP's: PD_Length 513.
    s.send_raw(
        s.default_request(private_data=s.values.private_data(509)), "Rev 2 Request, PD_Length 513"
    )
    s.expect_closed("PD_Length 513", within=1.0)


@case(
    "rfc5044/7.1.1/30",
    "a Request with PD_Length 65535 is closed without a Reply",
    PD_QUOTE,
    roles=R,
    covers=("pd-length", "reply-to-invalid"),
)
def pd_65535(s: Session) -> None:
    data = craft.request(revision=1, private_data=s.values.private_data(1024), pd_length=0xFFFF)
    s.send_raw(data, "Rev 1 Request, PD_Length 65535, 1024 octets follow")
    s.expect_closed("PD_Length 65535", within=1.0)


@case(
    "rfc5044/7.1.1/31",
    "a Request with PD_Length 600 is refused on its header alone",
    '§7.1.2 rule 9: "MPA implementations MUST validate the PD_Length field"',
    roles=R,
    covers=("pd-length", "reply-to-invalid"),
)
def pd_600_header(s: Session) -> None:
    s.send_raw(craft.request(revision=1, pd_length=600), "Rev 1 Request header, PD_Length 600")
    s.expect_closed("PD_Length 600 (no private data sent)", within=1.0)


@case(
    "rfc5044/7.1.1/32",
    "a Request carrying 512 octets of private data is accepted",
    '§7.1.1 Private Data: "The Private Data field MUST be between 0 and 512 octets in length"',
    level=Level.SHOULD,
    roles=R,
)
def pd_512(s: Session) -> None:
    _accepted(
        s, craft.request(revision=1, private_data=s.values.private_data(512)), "PD_Length 512"
    )


@case(
    "rfc5044/7.1.1/33",
    "a Request with private data is answered (the data is passed up)",
    '§7.1.1 PD_Length: "the MPA receiver should pass the PD_Length value and Private Data to '
    'the ULP"; §7.1.2 rule 2: "the implementation SHOULD return an MPA Reply Frame"',
    level=Level.SHOULD,
    roles=R,
)
def pd_small(s: Session) -> None:
    reply = s.initiate(s.default_request(private_data=s.values.private_data(17)))
    del reply


# --- §7.1.1, the Initiator side: the Request and its handling of Replies ---------


@case(
    "rfc5044/7.1.1/40",
    'the Request carries the key "MPA ID Req Frame"',
    '§7.1.1 Key: "Initiator mode senders MUST set this field to the fixed value '
    '"MPA ID Req Frame""',
    roles=I,
    covers=("request-key",),
)
def request_key(s: Session) -> None:
    s.read_request()


@case(
    "rfc5044/7.1.1/41",
    "the Request's reserved bits and R bit are zero",
    '§7.1.1 Res: "It MUST be set to zero when sending"; R: "This bit is set to zero"',
    roles=I,
    covers=("request-flags",),
)
def request_res(s: Session) -> None:
    s.read_request()
    flags = s.link.received[16]
    if flags & (RESERVED_FLAGS | FrameFlags.REJECT):
        raise CaseFailed(f"the Request's flag octet is {flags:#04x}")


@case(
    "rfc5044/7.1.1/42",
    "the Request is Rev 1 or Rev 2",
    '§7.1.1 Rev: "senders MUST set this field to one" (RFC 6581 §6: two)',
    roles=I,
    covers=("request-rev",),
)
def request_rev(s: Session) -> None:
    req = s.read_request()
    if req.revision not in (1, 2):
        raise CaseSkipped(f"the target sent a Rev {req.revision} Request (Appendix C peer)")


@case(
    "rfc5044/7.1.1/43",
    "the Request's private data is at most 512 octets",
    '§7.1.1 Private Data: "MUST be between 0 and 512 octets in length"',
    roles=I,
    covers=("request-pd",),
)
def request_pd(s: Session) -> None:
    req = s.read_request()
    if len(req.private_data) > 512:
        raise CaseFailed(f"{len(req.private_data)} octets of private data")


def _bad_reply_case(
    number: int, title: str, quote: str, make: object, what: str, covers: tuple[str, ...] = ()
) -> None:
    @case(f"rfc5044/7.1.1/{number}", title, quote, roles=I, covers=covers)
    def run(s: Session) -> None:
        request = s.read_request()
        data = make(s, request)  # type: ignore[operator]
        s.send_raw(data, what)
        # Validation needs no timeout: the close must follow the frame at once.
        s.expect_closed(what, within=1.0)


def _reply_key(index: int) -> object:
    def make(s: Session, request: object) -> bytes:
        key = bytearray(REPLY_KEY)
        key[index] ^= 0x20 if chr(key[index]).isalpha() else 0x01
        return s.default_reply(request, key=bytes(key))  # type: ignore[arg-type]

    return make


for _n, _i in enumerate((0, 4, 8, 12, 15)):
    _bad_reply_case(
        44 + _n,
        f"a Reply whose key octet {_i} is wrong makes the Initiator close",
        KEY_QUOTE_I,
        _reply_key(_i),
        f"Reply with key octet {_i} changed",
        ("key",),
    )
_bad_reply_case(
    49,
    "a Reply with a zero key makes the Initiator close",
    KEY_QUOTE_I,
    lambda s, r: s.default_reply(r, key=bytes(16)),
    "Reply with a zero key",
    ("key",),
)
_bad_reply_case(
    50,
    "a Reply of Rev 3 makes the Initiator close",
    REV_QUOTE,
    lambda s, r: s.default_reply(r, revision=3),
    "Rev 3 Reply",
    ("rev",),
)
_bad_reply_case(
    51,
    "a Reply with PD_Length 513 makes the Initiator close",
    PD_QUOTE,
    lambda s, r: s.default_reply(r, private_data=s.values.private_data(513 - 4 * r.is_enhanced)),
    "Reply with PD_Length 513",
    ("pd-length",),
)
_bad_reply_case(
    52,
    "a Reply with PD_Length 65535 makes the Initiator close",
    PD_QUOTE,
    lambda s, r: s.default_reply(r, pd_length=0xFFFF) + bytes(1024),
    "Reply with PD_Length 65535",
    ("pd-length",),
)


@case(
    "rfc5044/7.1.1/53",
    "a Reply with reserved bits set is accepted: no close, the first FPDU (if any) follows",
    '§7.1.1 Res: "not checked on reception"',
    roles=I,
    covers=("reply-reserved-checked",),
)
def reply_res_set(s: Session) -> None:
    request = s.read_request()
    base = s.default_reply(request)
    flags = base[16] | RESERVED_FLAGS
    s.send_raw(base[:16] + bytes([flags]) + base[17:], "Reply with reserved bits 0x0f")
    s.crc = True
    got = s.next_fpdu()
    if got is None:
        if s.link.ended:
            raise CaseFailed(
                f"the target closed the connection ({s.link.ended}) after a Reply whose only "
                "oddity is reserved bits"
            )
        # An Initiator in Full Operation may have nothing to say first.
        raise CaseSkipped(NO_FPDU)


# --- §7.1.2 startup rules ----------------------------------------------------------


@case(
    "rfc5044/7.1.2/1",
    "the Initiator's Request is valid",
    '§7.1.2 rule 1: "the MPA implementation MUST send a valid MPA Request Frame"',
    roles=I,
    covers=("request-enhanced", "request-key", "request-pd", "request-rev"),
)
def valid_request(s: Session) -> None:
    req = s.read_request()
    if req.is_enhanced and req.enhanced is None:
        raise CaseFailed("S bit set without room for the enhanced data")


@case(
    "rfc5044/7.1.2/2",
    "the Responder sends no FPDU before receiving one",
    '§7.1.2 rule 4: "MPA Responder mode implementations MUST receive and validate at least one '
    'FPDU before sending any FPDUs or Markers"',
    roles=R,
    covers=("responder-first",),
)
def responder_fence(s: Session) -> None:
    reply = s.initiate()
    if reply.reject:
        raise CaseSkipped("the target rejected the default Request")
    s.expect_no_fpdu(s.answer_wait(1.0), "before the Initiator's first FPDU")


@case(
    "rfc5044/7.1.2/3",
    "the Initiator exits MPA on a Reply with R=1: it sends no FPDU",
    "§7.1.2 rule 3: \"if the Rejected Connection bit is set to '1', the implementation MUST "
    'exit MPA"',
    roles=I,
    covers=("reply-r",),
)
def initiator_rejected(s: Session) -> None:
    request = s.read_request()
    data = s.default_reply(
        request,
        flags=FrameFlags.CRC
        | FrameFlags.REJECT
        | (FrameFlags.ENHANCED if request.is_enhanced else 0),
    )
    s.send_raw(data, "Reply with R=1")
    s.expect_no_fpdu(s.answer_wait(1.0), "after a rejecting Reply")


@case(
    "rfc5044/7.1.2/4",
    "a Responder receiving a Reply key closes without a Reply",
    '§7.1.2 rule 8: "MPA implementations MUST use the difference between the MPA Request Frame '
    "and the MPA Reply Frame to check for incorrect 'Initiator/Initiator' startups\"",
    roles=R,
    covers=("reply-to-invalid",),
)
def responder_gets_reply(s: Session) -> None:
    s.send_raw(craft.reply(), "a Reply frame instead of a Request")
    s.expect_closed("a Reply sent to a Responder")


@case(
    "rfc5044/7.1.2/5",
    "an Initiator receiving a Request key closes (Initiator/Initiator)",
    '§7.1.2 rule 8: "MUST use the difference between the MPA Request Frame and the MPA Reply '
    'Frame"',
    roles=I,
    covers=("request-as-reply",),
)
def initiator_gets_request(s: Session) -> None:
    s.read_request()
    s.send_raw(craft.request(), "a Request frame instead of a Reply")
    s.expect_closed("a Request sent to an Initiator")


@case(
    "rfc5044/7.1.2/6",
    "garbage instead of a Request is closed without a Reply",
    '§7.1.2 rule 2: "If the MPA Request Frame is improperly formatted, the implementation MUST '
    'close the TCP connection and exit MPA"',
    roles=R,
    covers=("reply-to-invalid",),
)
def garbage_request(s: Session) -> None:
    s.send_raw(b"GET / HTTP/1.1\r\nHost: iwarp\r\n\r\n", "an HTTP request")
    s.expect_closed("an HTTP request instead of an MPA Request")


@case(
    "rfc5044/7.1.2/7",
    "an FPDU instead of a Request is closed without a Reply",
    '§7.1.2 rule 2: "MUST wait until an MPA Request Frame is received and validated before '
    'entering Full MPA/DDP Operation"',
    roles=R,
    covers=("key", "reply-to-invalid"),
)
def fpdu_first(s: Session) -> None:
    s.send_raw(
        craft.fpdu(craft.send(b"hello", msn=s.values.free_msn).octets) * 4, "FPDUs, no Request"
    )
    s.expect_closed("FPDUs before a Request")


@case(
    "rfc5044/7.1.2/8",
    "a Responder given no Request closes after a timeout",
    '§7.1.2 rule 8: "Implementations SHOULD put a timeout on waiting for the MPA Request Frame '
    'when started in Responder mode"',
    level=Level.SHOULD,
    roles=R,
    timer=True,
)
def request_timeout(s: Session) -> None:
    s.expect_closed("waiting for a Request that never comes", on_timer=True)


@case(
    "rfc5044/7.1.2/9",
    "a Responder given half a Request closes after a timeout",
    '§7.1.2 rule 10: "MPA implementations SHOULD implement a reasonable timeout while waiting '
    'for the entire set of startup frames"',
    level=Level.SHOULD,
    roles=R,
    timer=True,
)
def partial_request(s: Session) -> None:
    s.send_raw(craft.request()[:10], "the first 10 octets of a Request")
    s.expect_closed("half a Request", on_timer=True)


@case(
    "rfc5044/7.1.2/10",
    "a Responder given less private data than PD_Length closes after a timeout",
    '§7.1.1 PD_Length: "If the receiver detects that the PD_Length field does not '
    'match the length of the Private Data field ... the receiver MUST close the connection"',
    level=Level.SHOULD,
    roles=R,
    timer=True,
)
def short_private_data(s: Session) -> None:
    s.send_raw(
        craft.request(revision=1, private_data=s.values.private_data(8), pd_length=100),
        "a Request with PD_Length 100 and 8 octets of private data",
    )
    s.expect_closed("a short private data field", on_timer=True)


@case(
    "rfc5044/7.1.2/11",
    "an Initiator given no Reply closes after a timeout",
    '§7.1.2 rule 10: "SHOULD implement a reasonable timeout while waiting for the entire set of '
    'startup frames"',
    level=Level.SHOULD,
    roles=I,
    timer=True,
)
def reply_timeout(s: Session) -> None:
    s.read_request()
    s.expect_closed("waiting for a Reply that never comes", on_timer=True)


@case(
    "rfc5044/7.1.2/12",
    "an Initiator given half a Reply closes after a timeout",
    '§7.1.2 rule 10: "SHOULD implement a reasonable timeout while waiting for the entire set of '
    'startup frames"',
    level=Level.SHOULD,
    roles=I,
    timer=True,
)
def partial_reply(s: Session) -> None:
    request = s.read_request()
    s.send_raw(s.default_reply(request)[:12], "the first 12 octets of a Reply")
    s.expect_closed("half a Reply", on_timer=True)


#: RFC 5044 §7.1.2 rule 7, what the first octets after the startup frames are.
FIRST_OCTETS_QUOTE = (
    '§7.1.2 rule 7: "If Markers are not enabled, the first octets sent are the start of the '
    "FPDU (the FPDU's ULPDU Length field)\""
)


def _first_fpdu_framed(s: Session, got: Received, after: str) -> None:
    """The first FPDU after the Reply starts at the first octet: with CRC on, a CRC that
    does not match shows the octets are not an FPDU where one must start."""
    if s.crc and not got.crc_ok:
        raise CaseFailed(
            f"the target's first octets after {after} are not the start of an FPDU "
            f"(read as one, its CRC {got.crc:#010x} does not match): {got.describe()}"
        )


@case(
    "rfc5044/7.1.2/13",
    "the Initiator's first FPDU follows the Reply, starting at its first octet",
    '§7.1.2 rule 3: "the implementation SHOULD enter Full MPA/DDP Operation Phase; ... sending '
    'DDP ULPDUs as FPDUs"; ' + FIRST_OCTETS_QUOTE,
    roles=I,
    needs=(Need.TALKS,),
    covers=("first-octets",),
)
def first_fpdu(s: Session) -> None:
    s.accept()
    got = s.next_fpdu()
    if got is None:
        raise CaseSkipped("the target sent no FPDU after the Reply (it has nothing to say first)")
    _first_fpdu_framed(s, got, "the Reply")


@case(
    "rfc5044/7.1.2/14",
    "a Reply with private data the Initiator does not expect leads to FPDUs, a close or "
    "quiet Full Operation, never octets that are not FPDUs",
    '§7.1.2 rule 3: "If the MPA Reply Frame is properly formatted and the Private Data is '
    "acceptable ... the implementation SHOULD enter Full MPA/DDP Operation Phase; ... sending "
    'DDP ULPDUs as FPDUs"; rule 6: "The Initiator ULP MAY close the TCP/MPA/DDP connection as '
    'a result of validating the Private Data fields"',
    level=Level.SHOULD,
    roles=I,
)
def reply_private_data(s: Session) -> None:
    # Rule 6 lets the Initiator close, rule 3 lets it leave MPA with the connection open,
    # and an Initiator in Full Operation may have nothing to send: a close, silence and
    # FPDUs all pass. Only octets that do not frame as FPDUs fail.
    request = s.read_request()
    s.send_raw(
        s.default_reply(request, private_data=s.values.private_data(10)), "Reply with private data"
    )
    s.crc = True
    deadline = s.within(1.0)
    while s.next_fpdu(deadline) is not None:
        pass
    if s.link.inbox and not s.link.ended:
        raise CaseFailed(
            f"{len(s.link.inbox)} octets after the Reply that do not frame as an FPDU: "
            f"{bytes(s.link.inbox[:24]).hex(' ')}"
        )


# --- §8 error semantics: the Responder's own frame errors ----------------------------


@case(
    "rfc5044/8/1",
    "a Request cut short by FIN ends the connection without a Reply",
    '§8 code 4: "Invalid MPA Request Frame or MPA Response Frame received. In this case, the TCP '
    'connection MUST be immediately closed"',
    roles=R,
    covers=("fin-startup",),
)
def request_then_fin(s: Session) -> None:
    s.send_raw(craft.request()[: FRAME_HEADER_SIZE - 2], "18 octets of a Request")
    import socket as _socket

    s.link.sock.shutdown(_socket.SHUT_WR)
    s.note("sent FIN")
    # "immediately closed": not left to the Responder's startup timeout.
    s.expect_closed("a truncated Request", within=1.0)


# --- Appendix C: Rev 0 peers -----------------------------------------------------------


@case(
    "rfc5044/C/1",
    "a Rev 0 Request gets a Reply of another revision and a close, or a close",
    'RFC 5044 Appendix C.2.1: the Non-permissive IETF RNIC "would send an MPA Reply Frame with '
    'the Rev field equal to one and then gracefully close the connection"',
    roles=R,
    covers=("rev0",),
)
def rev0_request(s: Session) -> None:
    s.send_raw(
        craft.request(revision=0, flags=FrameFlags.MARKERS | FrameFlags.CRC),
        "Rev 0 Request (M=1, C=1)",
    )
    wait = s.answer_wait(3.0)
    s.link.wait_end(s.within(wait))
    data = bytes(s.link.received)
    if len(data) >= FRAME_HEADER_SIZE and data[:16] == REPLY_KEY:
        rev, flags = data[17], data[16]
        if rev == 0:
            # A Rev 0 Reply is no Non-permissive answer, so this case has nothing to judge.
            # Appendix C (informational, "NOT part of the standard") has a permissive RNIC
            # reply M=1 and C=1; the Rev 0 drafts leave M to negotiation. Neither is a MUST,
            # so the flags are reported, never failed.
            if flags & FrameFlags.MARKERS and flags & FrameFlags.CRC:
                raise CaseSkipped(
                    "the target runs Rev 0 peers in RDMAC mode (permissive), which this case "
                    "does not judge: rfc5044/C/4 and /5 test that mode"
                )
            raise CaseSkipped(
                f"the target answers as a Rev 0 (draft) peer, flags {flags:#04x}: not the "
                "RDMAC mode of RFC 5044 Appendix C.2.4 (M=1 and C=1; informational), which "
                "rfc5044/C/4 and /5 test, and not the Non-permissive answer this case judges"
            )
        if s.link.ended is None:
            raise CaseFailed(f"a Rev {rev} Reply to a Rev 0 Request, and the connection stays open")
        return
    if s.link.ended is None:
        raise CaseFailed(f"neither a Reply nor a close within {wait:.2f}s of a Rev 0 Request")
    if data:
        raise CaseFailed(f"{len(data)} octets that are not a Reply, then a close")


@case(
    "rfc5044/C/2",
    "a Reply of Rev 0 to a Rev 1 Request ends the connection, or the Initiator runs RDMAC mode",
    'RFC 5044 Appendix C.2.2: "The Non-permissive IETF RNIC will gracefully close the connection '
    'after it reads the incompatible Rev field in the MPA Reply Frame"; C.2.5: the Permissive '
    'Initiator "should generate version zero DDP/RDMAP messages and enable MPA Markers and CRC"',
    roles=I,
    covers=("rev0-reply",),
)
def rev0_reply(s: Session) -> None:
    s.read_request()
    s.send_raw(
        craft.reply(revision=0, flags=FrameFlags.MARKERS | FrameFlags.CRC, enhanced=None),
        "Rev 0 Reply (M=1, C=1)",
    )
    # A permissive Initiator goes on in RDMAC mode: markers and CRC on, DDP version 0.
    s.markers_receive = s.crc = True
    got = s.next_fpdu(s.within(3.0))
    if got is None:
        if s.link.ended is None:
            raise CaseSkipped(
                "the target kept the connection after a Rev 0 Reply and sent nothing "
                "(a permissive Initiator with nothing to say first)"
            )
        return
    version = got.ulpdu[0] & 0x03 if got.ulpdu else None
    if not got.crc_ok or version != 0:
        raise CaseFailed(
            "the target kept the connection after a Rev 0 Reply but does not run RDMAC "
            f"mode (markers, CRC, DDP version 0): {got.describe()}"
            + ("" if got.crc_ok else " with a wrong CRC")
        )


@case(
    "rfc5044/C/3",
    "a Rev 2 Request with a Rev 1 Reply leads to Full Operation: FPDUs from the first octet",
    'RFC 6581 §10: "All responders are REQUIRED to issue unenhanced RDMA connection '
    'establishment responses in response to unenhanced ... requests"; an Initiator accepts the '
    "lower revision; " + FIRST_OCTETS_QUOTE,
    roles=I,
    needs=(Need.TALKS,),
    covers=("first-octets",),
)
def rev1_reply_to_rev2(s: Session) -> None:
    request = s.read_request()
    if request.revision != 2:
        raise CaseSkipped(f"the target sent Rev {request.revision}")
    if request.enhanced and request.enhanced.flags:
        raise CaseSkipped("the target asks for peer-to-peer; a Rev 1 Reply cannot grant it")
    s.send_raw(craft.reply(revision=1, enhanced=None), "Rev 1 Reply (C=1)")
    s.crc = True
    got = s.next_fpdu()
    if got is None:
        if s.link.ended:
            raise CaseSkipped("the target closed after a Rev 1 Reply to its Rev 2 Request")
        raise CaseSkipped("the target sent no FPDU after the Reply")
    _first_fpdu_framed(s, got, "a Rev 1 Reply")


# --- Rev 0 data transfer (RFC 5044 Appendix C, draft-ietf-rddp-mpa-02 §5) --------------

REV0_QUOTE = (
    'RFC 5044 Appendix C.2.1: a permissive Responder "would send an MPA Reply Frame with the '
    'Rev field equal to zero and then run in RDMAC mode"; draft-ietf-rddp-mpa-02 §5.1: "the MPA '
    "markers MUST be inserted immediately following MPA connection establishment, and at every "
    '512th octet of the TCP octet stream thereafter"'
)
#: Why a Rev 0 data transfer case skips a target that does not run Rev 0.
NO_REV0: Final = (
    "the target does not run Rev 0 (RDMAC mode): {why}; a permissive or Rev 0 Responder "
    "(iwarp listen --permissive, iwarp listen --mpa-rev 0) enables the case"
)
#: The sink STag of the zero-length Read Request a Rev 0 FPDU with a bad CRC carries.
REV0_SINK = 0x52_30_00_01


def _rev0_start(s: Session) -> None:
    """A Rev 0 Request (M=1, C=1); the target must answer Rev 0 (draft-ietf-rddp-mpa-02 or
    RFC 5044 Appendix C's RDMAC mode). Our M=1 asks for its markers, our C=1 makes CRCs
    generated and checked both ways (§6.1.1); its own M bit asks for ours. Then the tool's
    hello, in DDP and RDMAP version 0."""
    s.require(TargetRole.RESPONDER)
    try:
        reply = s.initiate(
            craft.request(revision=0, flags=FrameFlags.MARKERS | FrameFlags.CRC, enhanced=None)
        )
    except CaseFailed:
        if s.link.ended and not s.link.received:
            # RFC 5044 Appendix C: a close without a Reply refuses Rev 0 (rfc5044/C/1).
            why = f"it closed the connection ({s.link.ended}) on a Rev 0 Request"
            raise CaseSkipped(NO_REV0.format(why=why)) from None
        raise
    if reply.revision != 0:
        raise CaseSkipped(
            NO_REV0.format(why=f"it answered a Rev 0 Request with Rev {reply.revision}")
        )
    if reply.reject:
        raise CaseSkipped(NO_REV0.format(why="it rejected the Rev 0 Request (R=1)"))
    hello = craft.send(ADVERT.pack(64, 0, 4096), msn=s.next_msn(0), rdmap_version=0, ddp_version=0)
    s.send_ulpdu(hello.octets, "hello Send, DDP and RDMAP version 0, markers as asked")


@case(
    "rfc5044/C/4",
    "Rev 0: the target's FPDUs start with a zero Marker, carry a Marker every 512 octets, "
    "a CRC that covers them and DDP version 0",
    REV0_QUOTE,
    roles=R,
    needs=(Need.TALKS,),
    covers=("markers", "crc-sent-marked"),
)
def rev0_target_fpdus(s: Session) -> None:
    _rev0_start(s)
    deadline = s.within(1.0)
    while s.next_fpdu(deadline) is not None:
        pass
    if not s.received:
        raise CaseSkipped(NO_FPDU)
    first = s.received[0]
    if not first.markers or first.markers[0] != (0, 0):
        raise CaseFailed(f"first marker {first.markers[:1]} (expected FPDUPTR 0 at offset 0)")
    for got in s.received:
        if not got.crc_ok:
            raise CaseFailed(f"{got.describe()} (the CRC covers the FPDU's markers)")
        if got.ulpdu and got.ulpdu[0] & 0x03:
            raise CaseFailed(f"DDP version {got.ulpdu[0] & 0x03} in RDMAC mode: {got.describe()}")
        for offset, ptr in got.markers:
            expect = offset - got.offset if offset > got.offset else 0
            if ptr & 0xFFFC != expect:
                raise CaseFailed(
                    f"marker at {offset}: FPDUPTR {ptr}, expected {expect} (FPDU at {got.offset})"
                )


@case(
    "rfc5044/C/5",
    "Rev 0: a marked FPDU with a wrong CRC is refused: TERM code 2, a close or a silent drop",
    'draft-ietf-rddp-mpa-02 §5.2: CRCs "MUST be generated and checked by both endpoints" when '
    "C=1, the marker included in the CRC; RFC 5044 §8 code 2",
    roles=R,
    covers=("crc",),
)
def rev0_bad_crc(s: Session) -> None:
    _rev0_start(s)
    request = ReadRequest(REV0_SINK, 0, 0, 0x7E57_005A, 0)
    carrier = craft.send(
        request.pack(),
        msn=s.next_msn(1),
        opcode=RdmapOpcode.RDMA_READ_REQUEST,
        rdmap_version=0,
        ddp_version=0,
    )
    s.send_ulpdu(
        carrier.octets, "zero-length Read Request (version 0), wrong CRC", corrupt_crc=True
    )
    while True:
        got = s.next_fpdu()
        if got is None:
            return  # a close or silence: the FPDU was not taken
        if got.is_terminate:
            term = got.terminate()
            if (term.layer, term.etype, term.code) != (2, 0, MpaErrorCode.CRC_MISMATCH):
                raise CaseFailed(
                    f"the FPDU with a wrong CRC was taken: {describe_terminate(term)}, not "
                    "layer 2 type 0 code 0x02"
                )
            return
        info = got.info
        if info.get("opcode") == RdmapOpcode.RDMA_READ_RESPONSE and info.get("stag") == REV0_SINK:
            raise CaseFailed(f"the FPDU with a wrong CRC was taken: {got.describe()}")
