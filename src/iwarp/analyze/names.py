"""Names of Terminate layers, error types and codes (RFC 5040 §7.2, RFC 5041 §7.2,
RFC 5044 §8, RFC 6581 §6), for reports that say what went wrong in words."""

from __future__ import annotations

from typing import Final

__all__ = ["terminate_reason"]

_LAYERS: Final = {0: "RDMAP", 1: "DDP", 2: "LLP (MPA)"}

#: ``(layer, error type) -> (type name, spec section, {code: name})``; a None
#: code table means the type has no codes (any value is acceptable).
_TYPES: Final[dict[tuple[int, int], tuple[str, str, dict[int, str] | None]]] = {
    (0, 0): ("local catastrophic error", "RFC 5040 §7.2", None),
    (0, 1): (
        "remote protection error",
        "RFC 5040 §7.2",
        {
            0x00: "invalid STag",
            0x01: "base or bounds violation",
            0x02: "access rights violation",
            0x03: "STag not associated with RDMAP Stream",
            0x04: "TO wrap",
            0x09: "STag cannot be invalidated",
            0xFF: "unspecified error",
        },
    ),
    (0, 2): (
        "remote operation error",
        "RFC 5040 §7.2",
        {
            0x05: "invalid RDMAP version",
            0x06: "unexpected OpCode",
            0x07: "catastrophic error, localized to RDMAP Stream",
            0x08: "catastrophic error, global",
            0x09: "STag cannot be invalidated",
            0xFF: "unspecified error",
        },
    ),
    (1, 0): ("local catastrophic error", "RFC 5041 §7.2", None),
    (1, 1): (
        "tagged buffer error",
        "RFC 5041 §7.2",
        {
            0x00: "invalid STag",
            0x01: "base or bounds violation",
            0x02: "STag not associated with DDP Stream",
            0x03: "TO wrap",
            0x04: "invalid DDP version",
        },
    ),
    (1, 2): (
        "untagged buffer error",
        "RFC 5041 §7.2",
        {
            0x01: "invalid QN",
            0x02: "invalid MSN - no buffer available",
            0x03: "invalid MSN - MSN range is not valid",
            0x04: "invalid MO",
            0x05: "DDP Message too long for available buffer",
            0x06: "invalid DDP version",
        },
    ),
    (2, 0): (
        "MPA error",
        "RFC 5044 §8, RFC 6581 §6",
        {
            1: "TCP connection closed, terminated or lost",
            2: "received MPA CRC does not match the calculated value",
            3: "marker and ULPDU Length fields do not agree on the FPDU start",
            4: "invalid MPA Request or Reply frame",
            5: "local catastrophic error",
            6: "insufficient IRD resources",
            7: "no matching RTR option",
        },
    ),
}


def terminate_reason(layer: int, etype: int, code: int) -> str:
    """The Terminate control field in words, e.g. ``"DDP tagged buffer error:
    invalid STag (RFC 5041 §7.2)"``; unknown values are named as numbers."""
    layer_name = _LAYERS.get(layer, f"layer {layer}")
    known = _TYPES.get((layer, etype))
    if known is None:
        return f"{layer_name} error type {etype}, code {code:#04x} (not defined)"
    type_name, section, codes = known
    if codes is None:
        return f"{layer_name} {type_name} ({section})"
    code_name = codes.get(code, f"code {code:#04x} (not defined)")
    return f"{layer_name} {type_name}: {code_name} ({section})"
