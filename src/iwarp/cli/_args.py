"""Argument types and number formats every ``iwarp`` subcommand shares.

One parser per kind of value, so ``--size 64K`` means the same in every
command and a bad value is an ``argparse`` usage error (exit 2, no
traceback). Units follow one convention everywhere, in input and output:
binary, as perftest and dd count: K = KiB = 1024 octets, M = MiB = 1024^2,
G = GiB = 1024^3 (T too); rates are MiB/s, printed and in ``mib_per_s``.
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = [
    "SIZE_HELP",
    "count",
    "format_octets",
    "format_rate",
    "parse_size",
    "port",
    "rate_mib_per_s",
    "size",
]

#: Largest TCP port number.
MAX_PORT: Final = 0xFFFF
_SUFFIXES: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_MIB: Final = float(1 << 20)

#: Appended to the help of every option that takes a size.
SIZE_HELP: Final = "K, M, G = KiB, MiB, GiB"


def port(text: str) -> int:
    """A TCP port number, 0 to 65535 (0 lets the system choose, where it may)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port {value} is out of range 0..{MAX_PORT}")
    return value


def parse_size(text: str) -> int:
    """Octets from ``4096``, ``64K``, ``16M``, ``4G`` (binary units; a
    trailing ``B``/``iB`` is allowed: ``16MiB``, ``64KB``).

    :raises ValueError: not a size.
    """
    spec = text.strip().upper().removesuffix("B").removesuffix("I")
    suffix = spec[-1:] if spec[-1:] in _SUFFIXES else ""
    number = spec.removesuffix(suffix).strip()
    if not number.isdigit():
        raise ValueError(f"{text!r} is not a size (octets, or a whole number with K, M, G or T)")
    return int(number) * _SUFFIXES[suffix]


def size(text: str) -> int:
    """:func:`parse_size` as an ``argparse`` type (a bad value is a usage error)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count(text: str) -> int:
    """A count of messages or connections, >= 0; K/M/G suffixes allowed."""
    try:
        return size(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a count >= 0: {text!r}") from None


def rate_mib_per_s(octets: int, seconds: float) -> float | None:
    """Octets per second in MiB/s, rounded to 0.1; None when no time passed."""
    return round(octets / seconds / _MIB, 1) if seconds > 0 else None


def format_octets(octets: int) -> str:
    """``octets`` with a binary unit: ``512 B``, ``1.50 MiB``, ``2.00 GiB``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _SUFFIXES[unit[0]]
        if octets >= scale:
            return f"{octets / scale:.2f} {unit}"
    return f"{octets} B"


def format_rate(octets: int, seconds: float) -> str:
    """``12.3 MiB/s``, or ``- MiB/s`` when no time passed."""
    rate = rate_mib_per_s(octets, seconds)
    return "- MiB/s" if rate is None else f"{rate:.1f} MiB/s"
