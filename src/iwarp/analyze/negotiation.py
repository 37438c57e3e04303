"""Rules that tie the Reply to the Request, and the first FPDU to both.

RFC 6581 §9 (IRD/ORD), §9.2 and §10 (connection model, RTR indication):
each frame is well formed on its own (see :func:`iwarp.analyze.mpa.read_frame`),
but the Responder's answer must also fit the Initiator's question, and in
the peer-to-peer model the Initiator's first FPDU must be one of the RTR
indications the Reply allowed. Each rule broken becomes a ``(code, message)``
pair, with the MPA error code the spec gives for it where there is one.
"""

from __future__ import annotations

from iwarp.analyze.records import FpduRecord
from iwarp.errors import MpaErrorCode
from iwarp.mpa.wire import IRD_ORD_NONE, RTR_TYPES, MpaFrame, RtrFlags
from iwarp.rdmap.wire import RdmapOpcode

__all__ = ["check_reply", "check_rtr", "rtr_kind"]

Problem = tuple[int | None, str]

_INSUFFICIENT_IRD = int(MpaErrorCode.INSUFFICIENT_IRD)
_NO_MATCHING_RTR = int(MpaErrorCode.NO_MATCHING_RTR)


def check_reply(request: MpaFrame, reply: MpaFrame) -> list[Problem]:
    """What the accepted Reply gets wrong about the Request (RFC 6581 §9-§10)."""
    problems: list[Problem] = []
    for frame in (request, reply):
        enhanced = frame.enhanced
        name = "Request" if frame.is_request else "Reply"
        # §9.2: with A = 0, B, C and D MUST be 0 (and are ignored on receipt).
        if (
            enhanced is not None
            and RtrFlags.PEER_TO_PEER not in enhanced.flags
            and enhanced.flags & RTR_TYPES
        ):
            problems.append((None, f"{name} sets RTR flags without A (peer-to-peer)"))
    if reply.reject:
        return problems
    # §10: an enhanced Request gets an enhanced Reply, an unenhanced one not.
    if request.is_enhanced != reply.is_enhanced:
        problems.append(
            (
                None,
                f"{'an un' if not reply.is_enhanced else 'an '}enhanced Reply to "
                f"{'an enhanced' if request.is_enhanced else 'an unenhanced'} Request",
            )
        )
        return problems
    asked, answered = request.enhanced, reply.enhanced
    if asked is None or answered is None:
        return problems
    p2p = RtrFlags.PEER_TO_PEER
    if (p2p in asked.flags) != (p2p in answered.flags):
        problems.append(
            (
                _NO_MATCHING_RTR,
                f"Request {'sets' if p2p in asked.flags else 'clears'} A (peer-to-peer) "
                "and the Reply does not follow",
            )
        )
    elif p2p in answered.flags and not answered.flags & RTR_TYPES:
        problems.append((_NO_MATCHING_RTR, "peer-to-peer Reply offers no RTR indication"))
    # §9.1: responder ORD at most the initiator IRD; 0x3FFF means "the ULP
    # negotiates" and must be answered with 0x3FFF.
    if asked.ird == IRD_ORD_NONE:
        if answered.ord != IRD_ORD_NONE:
            problems.append((None, "Request IRD is 0x3FFF but the Reply ORD is not"))
    elif answered.ord != IRD_ORD_NONE and answered.ord > asked.ird:
        problems.append(
            (
                _INSUFFICIENT_IRD,
                f"Reply ORD {answered.ord} exceeds the Request IRD {asked.ird}",
            )
        )
    if asked.ord == IRD_ORD_NONE and answered.ird != IRD_ORD_NONE:
        problems.append((None, "Request ORD is 0x3FFF but the Reply IRD is not"))
    return problems


def rtr_kind(fpdu: FpduRecord) -> RtrFlags | None:
    """Which RTR indication the FPDU is, if any (RFC 6581 §9.2): a zero-length
    Send, a zero-length RDMA Write, or an RDMA Read Request of zero octets."""
    ulp = fpdu.ulp
    opcode = ulp.get("opcode")
    empty = ulp.get("payload_length") == 0
    if opcode == RdmapOpcode.SEND and empty:
        return RtrFlags.SEND
    if opcode == RdmapOpcode.RDMA_WRITE and empty:
        return RtrFlags.WRITE
    request = ulp.get("read_request")
    if opcode == RdmapOpcode.RDMA_READ_REQUEST and isinstance(request, dict):
        return RtrFlags.READ if request.get("size") == 0 else None
    return None


def check_rtr(reply: MpaFrame, first: FpduRecord) -> Problem | None:
    """The Initiator's first FPDU after a peer-to-peer Reply (RFC 6581 §9.2)."""
    answered = reply.enhanced
    if reply.reject or answered is None or RtrFlags.PEER_TO_PEER not in answered.flags:
        return None
    kind = rtr_kind(first)
    if kind is not None and kind in answered.flags:
        return None
    terminate = first.ulp.get("terminate")
    if isinstance(terminate, dict) and terminate.get("code") == _NO_MATCHING_RTR:
        return None  # §9.2: the Initiator could not match and says so
    offered = ", ".join(
        flag.name.lower()
        for flag in (RtrFlags.SEND, RtrFlags.WRITE, RtrFlags.READ)
        if flag in answered.flags and flag.name
    )
    what = "not an RTR indication" if kind is None else f"a {str(kind.name).lower()} RTR"
    return (
        _NO_MATCHING_RTR,
        f"first FPDU after a peer-to-peer Reply is {what}; the Reply offered: {offered}",
    )
