"""What every ``iwarp`` command prints, one way: records, errors, exit statuses.

A command's output is a sequence of *records*, each a ``type`` and fields:
``listening``, ``established``, ``operation``, ``summary``, ``error``...
:class:`Output` prints them as one line each, either ``type: key=value
key=value`` for people (values with spaces in double quotes) or, with
``--json``, as one JSON object per line for scripts. Every hash is printed
in full, next to a ``sha256_of`` field that says what it covers.
"""

from __future__ import annotations

import json
import sys
from typing import Final, TextIO

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Output",
    "format_record",
]

#: Exit statuses every command shares: success; a failure (an error record
#: says which, a peer that is not there included); a usage error (bad
#: options, found before anything was sent). Interrupts exit 128 + the
#: signal number (130 for Ctrl-C, 143 for SIGTERM).
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    text = str(value)
    if not text or any(c.isspace() or c in "\"'=" for c in text):
        return json.dumps(text)
    return text


def format_record(record: dict[str, object]) -> str:
    """``record`` as ``type: key=value ...`` (values with spaces quoted)."""
    kind = record.get("type", "")
    fields = " ".join(f"{k}={_show(v)}" for k, v in record.items() if k != "type")
    return f"{kind}: {fields}"


class Output:
    """Prints records as JSON lines or as ``type: key=value`` lines.

    With ``--json`` every record is a line on standard output (errors too:
    scripts read one stream); without it, error records go to standard
    error.
    """

    def __init__(
        self, json_lines: bool, stream: TextIO | None = None, errors: TextIO | None = None
    ) -> None:
        self.json = json_lines
        self.stream = stream if stream is not None else sys.stdout
        self.errors = errors if errors is not None else (self.stream if json_lines else sys.stderr)
        #: Set before the summary: one more record (the summary) is printed,
        #: nothing after it.
        self.closed = False
        self._finished = False

    def emit(self, record: dict[str, object]) -> None:
        """Print ``record`` (nothing once the summary after :attr:`closed` is out)."""
        if self._finished:
            return
        self._finished = self.closed
        line = json.dumps(record) if self.json else format_record(record)
        stream = self.errors if record.get("type") == "error" else self.stream
        print(line, file=stream, flush=True)
