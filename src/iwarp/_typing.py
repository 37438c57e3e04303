"""Type aliases shared by the cores."""

from __future__ import annotations

from typing import TypeAlias

#: Anything the cores accept as octets. ``collections.abc.Buffer`` would do on
#: Python 3.12+; this union keeps 3.11 and mypy precise.
Buffer: TypeAlias = bytes | bytearray | memoryview
