"""Display filters (``iwarp decode -Y EXPR``): which records are shown.

A filter tests the fields of a record (:mod:`iwarp.analyze.fields`: the
same names as the listing and ``-T fields``, and tshark's ``ip.addr``,
``tcp.stream``... as aliases). The grammar, loosest binding first::

    expr       := and_expr { ("or" | "||") and_expr }
    and_expr   := unary { ("and" | "&&") unary }
    unary      := ("not" | "!") unary | "(" expr ")" | test
    test       := FIELD
                | FIELD ("==" | "!=" | "<" | "<=" | ">" | ">=") VALUE
                | FIELD ("eq" | "ne" | "lt" | "le" | "gt" | "ge") VALUE
                | FIELD "contains" VALUE
                | FIELD "in" "{" VALUE { [","] VALUE } "}"
    VALUE      := a word (number, name, address) or a "quoted string"

Numbers are decimal or ``0x`` hex (``0o``, ``0b`` too); ``opcode`` also
takes the RDMAP opcode names (``send``, ``rdma_write`` or ``write``,
``read_request``, ``terminate``, ...) and ``aopcode`` ``fetch_add`` and
``cmp_swap``, flags take ``true``/``false``
(``1``/``0``, ``yes``/``no``), addresses an IPv4 or IPv6 address or a
network (``10.0.0.0/8``: any address in it). Text fields compare exactly
(``opcode_name`` in capitals whatever was typed) and ``contains`` finds a
piece of one. Keywords are not case-sensitive.

A field alone is true when the record has it, and for a flag when it is
also true (``crc_ok``, ``last``, ``tagged``). A test of a field the record
does not have is false, whatever the operator (``stag != 5`` is false for
an untagged FPDU: write ``not stag == 5`` for "everything else"). The
two-valued ``addr`` and ``port`` match when either value does (``==``,
``in``, ``contains``, orderings), and ``!=`` when neither does.

Every fault in an expression is a :class:`FilterError` with its position;
nothing else is raised, whatever the text.
"""

from __future__ import annotations

import ipaddress
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from iwarp.analyze.fields import Field, Kind, Row, field_named
from iwarp.rdmap.wire import AtomicOpcode, RdmapOpcode

__all__ = ["DisplayFilter", "FilterError", "compile_filter"]

#: Nesting of parentheses and ``not`` allowed (deeper is an error, not a crash).
MAX_DEPTH: Final = 64
#: Longest expression accepted.
MAX_LENGTH: Final = 4096

Test = Callable[[Row], bool]


class FilterError(ValueError):
    """A display filter that cannot be read: what is wrong, and where."""

    def __init__(self, message: str, expression: str, position: int) -> None:
        self.message = message
        self.expression = expression
        self.position = position
        super().__init__(self.describe())

    def describe(self) -> str:
        """The message, the expression, and a caret under the fault."""
        text = self.expression.replace("\t", " ").replace("\n", " ")
        return f"{self.message} (column {self.position + 1})\n  {text}\n  {' ' * self.position}^"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "string", "op", "end"
    text: str
    position: int


_SINGLE: Final = frozenset("(){},")
_OPERATORS: Final = ("==", "!=", "<=", ">=", "&&", "||", "<", ">", "!")
_WORD_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-/"
)


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    at, end = 0, len(text)
    while at < end:
        char = text[at]
        if char.isspace():
            at += 1
            continue
        if char in _SINGLE:
            out.append(_Token("op", char, at))
            at += 1
            continue
        op = next((o for o in _OPERATORS if text.startswith(o, at)), None)
        if op is not None:
            out.append(_Token("op", op, at))
            at += len(op)
            continue
        if char == "=":
            raise FilterError("'=' is not an operator: write '=='", text, at)
        if char in "\"'":
            value, at = _string(text, at)
            out.append(_Token("string", value, at - 1))
            continue
        if char in _WORD_CHARS:
            start = at
            while at < end and text[at] in _WORD_CHARS:
                at += 1
            out.append(_Token("word", text[start:at], start))
            continue
        raise FilterError(f"unexpected character {char!r}", text, at)
    out.append(_Token("end", "", end))
    return out


def _string(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    at = start + 1
    value: list[str] = []
    while at < len(text):
        char = text[at]
        if char == "\\" and at + 1 < len(text):
            value.append(text[at + 1])
            at += 2
            continue
        if char == quote:
            return "".join(value), at + 1
        value.append(char)
        at += 1
    raise FilterError("string not closed", text, start)


_COMPARE: Final[dict[str, str]] = {
    "==": "==",
    "eq": "==",
    "!=": "!=",
    "ne": "!=",
    "<": "<",
    "lt": "<",
    "<=": "<=",
    "le": "<=",
    ">": ">",
    "gt": ">",
    ">=": ">=",
    "ge": ">=",
}
_ORDER: Final[dict[str, Callable[[float, float], bool]]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_KEYWORDS: Final = frozenset({"and", "or", "not", "in", "contains", *_COMPARE})
_FLAGS: Final = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def _opcode_names() -> dict[str, int]:
    names: dict[str, int] = {}
    for opcode in RdmapOpcode:
        name = opcode.name.lower()
        names[name] = int(opcode)
        names.setdefault(name.removeprefix("rdma_"), int(opcode))
    return names


#: Fields whose numbers have names: field -> lower-case name -> number.
_NAMED: Final[dict[str, dict[str, int]]] = {
    "opcode": _opcode_names(),
    "aopcode": {code.name.lower(): int(code) for code in AtomicOpcode},
}


@dataclass(frozen=True)
class DisplayFilter:
    """A compiled display filter: :meth:`matches` tests a record's row."""

    expression: str
    _test: Test

    def matches(self, row: Row) -> bool:
        """Whether the record whose fields are ``row`` is shown."""
        return self._test(row)


def compile_filter(expression: str) -> DisplayFilter:
    """Read ``expression`` (the grammar above).

    :raises FilterError: the expression is empty, malformed, names a field
        that does not exist or compares a field with a value of the wrong kind.
    """
    if len(expression) > MAX_LENGTH:
        raise FilterError(f"longer than {MAX_LENGTH} characters", expression[:40] + "...", 0)
    tokens = _tokens(expression)
    parser = _Parser(expression, tokens)
    test = parser.expression(0)
    last = parser.peek()
    if last.kind != "end":
        raise FilterError(f"unexpected {_shown(last)}", expression, last.position)
    return DisplayFilter(expression, test)


def _shown(token: _Token) -> str:
    if token.kind == "end":
        return "end of the expression"
    if token.kind == "string":
        return "string"
    return repr(token.text)


class _Parser:
    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.at = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        if token.kind != "end":
            self.at += 1
        return token

    def error(self, message: str, token: _Token) -> FilterError:
        return FilterError(message, self.text, token.position)

    def _is(self, token: _Token, *words: str) -> bool:
        if token.kind == "op":
            return token.text in words
        return token.kind == "word" and token.text.lower() in words

    def expression(self, depth: int) -> Test:
        if depth > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} deep", self.peek())
        tests = [self.conjunction(depth)]
        while self._is(self.peek(), "or", "||"):
            self.take()
            tests.append(self.conjunction(depth))
        if len(tests) == 1:
            return tests[0]
        return lambda row: any(t(row) for t in tests)

    def conjunction(self, depth: int) -> Test:
        tests = [self.unary(depth)]
        while self._is(self.peek(), "and", "&&"):
            self.take()
            tests.append(self.unary(depth))
        if len(tests) == 1:
            return tests[0]
        return lambda row: all(t(row) for t in tests)

    def unary(self, depth: int) -> Test:
        if depth > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} deep", self.peek())
        token = self.peek()
        if self._is(token, "not", "!"):
            self.take()
            inner = self.unary(depth + 1)
            return lambda row: not inner(row)
        if token.kind == "op" and token.text == "(":
            self.take()
            inner = self.expression(depth + 1)
            close = self.take()
            if not (close.kind == "op" and close.text == ")"):
                raise self.error(f"expected ')', found {_shown(close)}", close)
            return inner
        return self.test()

    def test(self) -> Test:
        token = self.take()
        if token.kind != "word" or token.text.lower() in _KEYWORDS:
            raise self.error(f"expected a field name, found {_shown(token)}", token)
        found = field_named(token.text)
        if found is None:
            raise self.error(f"no field {token.text!r} (iwarp decode --fields lists them)", token)
        name = found.name
        following = self.peek()
        if following.kind == "word" and following.text.lower() in _COMPARE:
            op = _COMPARE[following.text.lower()]
        elif following.kind == "op" and following.text in _COMPARE:
            op = _COMPARE[following.text]
        elif self._is(following, "contains"):
            self.take()
            value = self.value(found, self.take(), contains=True)
            return _contains(name, str(value))
        elif self._is(following, "in"):
            self.take()
            return self.member(found)
        else:
            if found.kind == Kind.FLAG:
                return lambda row: row.get(name) is True
            return lambda row: name in row
        self.take()
        value_token = self.take()
        value = self.value(found, value_token)
        if op in _ORDER and found.kind not in (Kind.INT, Kind.FLOAT):
            raise self.error(
                f"{found.name} is {found.kind.value}: only ==, != and contains apply", following
            )
        return _compare(name, found, op, value)

    def member(self, found: Field) -> Test:
        opening = self.take()
        if not (opening.kind == "op" and opening.text == "{"):
            raise self.error(f"expected '{{' after 'in', found {_shown(opening)}", opening)
        values: list[object] = []
        while True:
            token = self.take()
            if token.kind == "op" and token.text == "}":
                break
            if token.kind == "op" and token.text == ",":
                continue
            if token.kind == "end":
                raise self.error("expected '}'", token)
            values.append(self.value(found, token))
        if not values:
            raise self.error("an empty set matches nothing", opening)
        tests = [_compare(found.name, found, "==", v) for v in values]
        return lambda row: any(t(row) for t in tests)

    def value(self, found: Field, token: _Token, *, contains: bool = False) -> object:
        if token.kind not in ("word", "string"):
            raise self.error(f"expected a value for {found.name}, found {_shown(token)}", token)
        text = token.text
        kind = found.kind
        if contains:
            if kind not in (Kind.TEXT,):
                raise self.error(f"{found.name} is {kind.value}: 'contains' applies to text", token)
            return text
        if kind == Kind.INT:
            number = _integer(text)
            names = _NAMED.get(found.name)
            if number is None and names is not None:
                number = names.get(text.lower())
            if number is None:
                what = f"a number or a name ({', '.join(names)})" if names else "a number"
                raise self.error(f"{found.name} takes {what}, not {text!r}", token)
            return number
        if kind == Kind.FLOAT:
            try:
                return float(text)
            except ValueError:
                raise self.error(f"{found.name} takes a number, not {text!r}", token) from None
        if kind == Kind.FLAG:
            flag = _FLAGS.get(text.lower())
            if flag is None:
                raise self.error(f"{found.name} takes true or false, not {text!r}", token)
            return flag
        if kind == Kind.ADDRESS:
            try:
                if "/" in text:
                    return ipaddress.ip_network(text, strict=False)
                return ipaddress.ip_address(text)
            except ValueError:
                raise self.error(f"{text!r} is not an IP address or network", token) from None
        return text.upper() if found.name == "opcode_name" else text


def _integer(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return int(text, 10)  # leading zeros: "010" is ten
    except ValueError:
        return None


def _values(row: Row, name: str) -> tuple[object, ...] | None:
    if name not in row:
        return None
    value = row[name]
    return value if isinstance(value, tuple) else (value,)


def _compare(name: str, found: Field, op: str, wanted: object) -> Test:
    if op in _ORDER:
        compare = _ORDER[op]
        # (the parser orders numbers only)
        limit = wanted if isinstance(wanted, (int, float)) else float("nan")

        def ordered(row: Row) -> bool:
            return any(
                isinstance(v, (int, float)) and not isinstance(v, bool) and compare(v, limit)
                for v in _values(row, name) or ()
            )

        return ordered
    same = _equality(found, wanted)
    if op == "!=":

        def differs(row: Row) -> bool:
            values = _values(row, name)
            return values is not None and not any(map(same, values))

        return differs

    def equals(row: Row) -> bool:
        return any(map(same, _values(row, name) or ()))

    return equals


def _equality(found: Field, wanted: object) -> Callable[[object], bool]:
    """Whether one value of the field is ``wanted``."""
    if isinstance(wanted, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        text = str(wanted)
        return lambda v: _normal(v) == text
    if isinstance(wanted, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        network = wanted
        return lambda v: _within(v, network)
    if found.kind == Kind.FLAG:
        return lambda v: v is wanted
    return lambda v: v == wanted and not isinstance(v, bool)


def _normal(value: object) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def _within(value: object, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(str(value)) in network
    except ValueError:
        return False


def _contains(name: str, piece: str) -> Test:
    return lambda row: any(piece in str(v) for v in _values(row, name) or ())
