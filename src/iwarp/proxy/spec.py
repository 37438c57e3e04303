"""The fault grammar of ``iwarp proxy --fault SPEC``.

A SPEC is items separated by ``;``::

    spec    := item { ";" item }
    item    := "to=initiator" | "to=responder"    (required: where the octets go)
             | "nth=" N | "every"                  (which match; default nth=1)
             | ACTION                              (exactly one)
             | FILTER                              (at most one: iwarp decode -Y's grammar)
    ACTION  := "corrupt-crc" | "flip-payload" | "drop-fpdu" | "duplicate"
             | "rewrite" FIELD "=" VALUE | "delay" MS | "stall" S | "resegment" N
             | "terminate" LAYER "/" TYPE "/" CODE | "fin" | "rst"

Without a filter a fault matches every FPDU toward its end; MPA frames
(Request, Reply) are matched only by a filter that names them
(``type == mpa_request``) or by a ``rewrite`` of a frame field. A ``;``
inside a double-quoted filter string does not split the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from iwarp.analyze.filter import DisplayFilter, FilterError, compile_filter
from iwarp.errors import TerminateLayer

__all__ = [
    "ACTIONS",
    "FPDU_FIELDS",
    "FRAME_FIELDS",
    "Fault",
    "FaultSpecError",
    "parse_fault",
]

#: Action words and what each takes.
ACTIONS: Final = {
    "corrupt-crc": "",
    "flip-payload": "",
    "drop-fpdu": "",
    "duplicate": "",
    "fin": "",
    "rst": "",
    "rewrite": "FIELD=VALUE",
    "delay": "MS",
    "stall": "S",
    "resegment": "N",
    "terminate": "LAYER/TYPE/CODE",
}
#: Actions that change or remove an FPDU's octets: never applied to a frame.
FPDU_ONLY: Final = frozenset({"corrupt-crc", "flip-payload", "drop-fpdu", "duplicate", "terminate"})
#: Fields ``rewrite`` changes in an FPDU (DDP, RDMAP headers), with their widths in bits.
FPDU_FIELDS: Final = {
    "stag": 32,
    "to": 64,
    "msn": 32,
    "mo": 32,
    "qn": 32,
    "opcode": 4,
    "length": 16,
    "ddp_version": 2,
    "rdmap_version": 2,
}
#: Fields ``rewrite`` changes in an MPA Request or Reply (RFC 5044 §7.1, RFC 6581 §5).
FRAME_FIELDS: Final = {
    "m": 1,
    "c": 1,
    "r": 1,
    "rev": 8,
    "ird": 14,
    "ord": 14,
    "pd_length": 16,
}
#: Longest delay or stall accepted, seconds (a bound: a held FPDU is memory).
MAX_HOLD: Final = 3600.0
#: Largest nth accepted.
MAX_NTH: Final = 1 << 32
_LAYERS: Final = {
    "rdmap": TerminateLayer.RDMAP,
    "rdma": TerminateLayer.RDMAP,
    "ddp": TerminateLayer.DDP,
    "mpa": TerminateLayer.LLP,
    "llp": TerminateLayer.LLP,
}
#: Items the grammar reserves; a filter must not start with one of them.
_TO: Final = {"to=initiator": "initiator", "to=responder": "responder"}


class FaultSpecError(ValueError):
    """A ``--fault`` SPEC that cannot be read: the item, and what is wrong with it."""

    def __init__(self, spec: str, item: str, message: str) -> None:
        self.spec = spec
        self.item = item
        self.message = message
        shown = f"item {item!r}: " if item else ""
        super().__init__(f"--fault {spec!r}: {shown}{message}")


@dataclass(frozen=True, slots=True)
class Fault:
    """One parsed ``--fault``: toward which end, which records, what to do."""

    #: The SPEC as given (named in the summary).
    text: str
    #: "initiator" or "responder": the end the octets travel toward.
    to: str
    #: The action word (a key of :data:`ACTIONS`).
    action: str
    #: The display filter, or None for "every FPDU".
    where: DisplayFilter | None = None
    #: The N-th match (1-based); 0 with ``every``.
    nth: int = 1
    #: rewrite: the field and its new value.
    field: str = ""
    value: int = 0
    #: delay / stall: seconds.
    seconds: float = 0.0
    #: resegment: octets per write.
    size: int = 0
    #: terminate: (layer, error type, code).
    terminate: tuple[int, int, int] = (0, 0, 0)

    @property
    def frames(self) -> bool:
        """Whether the fault may apply to MPA Request/Reply frames."""
        if self.action in FPDU_ONLY:
            return False
        if self.action == "rewrite":
            return self.field in FRAME_FIELDS
        return self.where is not None

    @property
    def fpdus(self) -> bool:
        """Whether the fault may apply to FPDUs."""
        return not (self.action == "rewrite" and self.field in FRAME_FIELDS)


def _split(spec: str) -> list[str]:
    """``spec`` cut at every ``;`` outside a double-quoted string."""
    items: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in spec:
        if quoted:
            current.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
            current.append(char)
        elif char == ";":
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    items.append("".join(current).strip())
    return items


def _number(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def parse_fault(spec: str) -> Fault:
    """Read one ``--fault`` SPEC.

    :raises FaultSpecError: an item is unknown or malformed, ``to=`` or the
        action is missing, or an item is given twice; the message names the item.
    """
    to: str | None = None
    nth: int | None = None
    where: DisplayFilter | None = None
    action: dict[str, object] | None = None
    for item in _split(spec):
        if not item:
            continue
        word, _, rest = item.partition(" ")
        rest = rest.strip()
        lowered = item.lower().replace(" ", "")
        if lowered.startswith("to="):
            if lowered not in _TO:
                raise FaultSpecError(spec, item, "to= takes initiator or responder")
            if to is not None:
                raise FaultSpecError(spec, item, "to= given twice")
            to = _TO[lowered]
        elif lowered.startswith("nth=") or lowered == "every":
            if nth is not None:
                raise FaultSpecError(spec, item, "nth= or every given twice")
            if lowered == "every":
                nth = 0
                continue
            value = _number(lowered[4:])
            if value is None or not 1 <= value <= MAX_NTH:
                raise FaultSpecError(spec, item, f"nth= takes a whole number 1..{MAX_NTH}")
            nth = value
        elif word.lower() in ACTIONS:
            if action is not None:
                raise FaultSpecError(spec, item, "a fault takes exactly one action")
            action = _action(spec, item, word.lower(), rest)
        else:
            if where is not None:
                raise FaultSpecError(spec, item, "a second filter (join them with 'and')")
            try:
                where = compile_filter(item)
            except FilterError as exc:
                known = ", ".join(ACTIONS)
                raise FaultSpecError(
                    spec,
                    item,
                    f"neither an action ({known}) nor a display filter: {exc.message} "
                    f"(column {exc.position + 1})",
                ) from None
    if to is None:
        raise FaultSpecError(spec, "", "to=initiator or to=responder is required")
    if action is None:
        raise FaultSpecError(spec, "", f"no action (one of {', '.join(ACTIONS)})")
    fault = Fault(text=spec, to=to, where=where, nth=1 if nth is None else nth, **action)  # type: ignore[arg-type]
    return fault


def _action(spec: str, item: str, word: str, rest: str) -> dict[str, object]:
    takes = ACTIONS[word]
    if not takes:
        if rest:
            raise FaultSpecError(spec, item, f"{word} takes no argument")
        return {"action": word}
    if not rest:
        raise FaultSpecError(spec, item, f"{word} takes {takes}")
    if word == "rewrite":
        name, equals, value_text = rest.replace(" ", "").partition("=")
        name = name.lower()
        width = FPDU_FIELDS.get(name) or FRAME_FIELDS.get(name)
        if not equals or width is None:
            fields = ", ".join([*FPDU_FIELDS, *FRAME_FIELDS])
            raise FaultSpecError(spec, item, f"rewrite takes FIELD=VALUE, FIELD one of {fields}")
        value = _opcode(value_text) if name == "opcode" else _number(value_text)
        if value is None or not 0 <= value < (1 << width):
            raise FaultSpecError(spec, item, f"{name} takes a number 0..{(1 << width) - 1}")
        return {"action": word, "field": name, "value": value}
    if word in ("delay", "stall"):
        try:
            amount = float(rest)
        except ValueError:
            amount = -1.0
        seconds = amount / 1000 if word == "delay" else amount
        if not 0 <= seconds <= MAX_HOLD:  # also refuses nan
            raise FaultSpecError(
                spec, item, f"{word} takes {takes} (at most {MAX_HOLD:.0f} seconds in all)"
            )
        return {"action": word, "seconds": seconds}
    if word == "resegment":
        size = _number(rest)
        if size is None or not 1 <= size <= 65535:
            raise FaultSpecError(spec, item, "resegment takes N, octets per write, 1..65535")
        return {"action": word, "size": size}
    # terminate LAYER/TYPE/CODE
    parts = rest.replace(" ", "").split("/")
    if len(parts) != 3:
        raise FaultSpecError(spec, item, "terminate takes LAYER/TYPE/CODE, e.g. ddp/1/0")
    layer = _LAYERS.get(parts[0].lower())
    layer_value = int(layer) if layer is not None else _number(parts[0])
    etype, code = _number(parts[1]), _number(parts[2])
    if layer_value is None or not 0 <= layer_value <= 15:
        raise FaultSpecError(spec, item, "LAYER is rdmap, ddp, mpa or a number 0..15")
    if etype is None or not 0 <= etype <= 15 or code is None or not 0 <= code <= 255:
        raise FaultSpecError(spec, item, "TYPE is a number 0..15 and CODE 0..255")
    return {"action": word, "terminate": (layer_value, etype, code)}


def _opcode(text: str) -> int | None:
    value = _number(text)
    if value is not None:
        return value
    try:
        probe = compile_filter(f"opcode == {text}")
    except FilterError:
        return None
    for code in range(16):
        if probe.matches({"opcode": code}):
            return code
    return None
