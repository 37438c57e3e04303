"""What every ``iwarp`` command prints, one way: records, errors, exit statuses.

A command's output is a sequence of *records*, each a ``type`` and fields:
``listening``, ``established``, ``operation``, ``summary``, ``error``...
:class:`RecordPrinter` prints them as one line each, either ``type: key=value
key=value`` for people (values with spaces in double quotes) or, with
``--json``, as one JSON object per line for scripts. Every hash is printed
in full, next to a ``sha256_of`` field that says what it covers. Errors go
to standard error as ``iwarp COMMAND: error: message (key=value ...)``
(with ``--json`` they stay records in the one stream).

A peer that is not there is reported by :func:`unreachable` in every
command alike: the address, what was tried, why it failed and a hint, with
the exit status :data:`EXIT_FAILED`.
"""

from __future__ import annotations

import json
import sys
from typing import Final, TextIO

from iwarp.sockets import connect_failure_reason

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "RecordPrinter",
    "format_error",
    "format_record",
    "unreachable",
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
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    text = str(value)
    if not text or any(c.isspace() or c in "\"'=" for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def format_record(record: dict[str, object]) -> str:
    """``record`` as ``type: key=value ...`` (values with spaces quoted)."""
    kind = record.get("type", "")
    fields = " ".join(f"{k}={_show(v)}" for k, v in record.items() if k != "type")
    return f"{kind}: {fields}"


#: Fields of an error record that its human line adds to the message.
_ERROR_DETAILS = ("code", "terminate", "terminate_name", "peer")


def format_error(prog: str, record: dict[str, object]) -> str:
    """An ``error`` record for people: ``PROG: error: message (key=value ...)``."""
    message = str(record.get("message", ""))
    details = " ".join(
        f"{k}={_show(record[k])}"
        for k in _ERROR_DETAILS
        if record.get(k) is not None and str(record[k]) not in message
    )
    return f"{prog}: error: {message}" + (f" ({details})" if details else "")


class RecordPrinter:
    """Prints records as JSON lines or as ``type: key=value`` lines.

    With ``--json`` every record is a line on standard output (errors too:
    scripts read one stream); without it, error records go to standard
    error.
    """

    def __init__(
        self,
        json_lines: bool,
        stream: TextIO | None = None,
        errors: TextIO | None = None,
        *,
        prog: str = "iwarp",
    ) -> None:
        self.json = json_lines
        #: The command, as its error lines begin (``iwarp connect``).
        self.prog = prog
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
        error = record.get("type") == "error"
        if self.json:
            line = json.dumps(record)
        else:
            line = format_error(self.prog, record) if error else format_record(record)
        stream = self.errors if error else self.stream
        print(line, file=stream, flush=True)


def unreachable(
    host: str, port: int, error: BaseException, *, tried: str, hint: str, code: int | None = None
) -> dict[str, object]:
    """The ``error`` record of a peer that is not there.

    :param tried: what was attempted, e.g. ``"TCP connect"``.
    :param hint: what the user may do, e.g. ``"start iwarp listen --port 5000 there"``.
    :param code: the protocol's error code for it, if it has one (MPA: 1,
        the TCP connection failed, RFC 5044 §8).
    """
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = connect_failure_reason(error)
    return {
        "type": "error",
        "code": code,
        "error": "unreachable",
        "address": address,
        "tried": tried,
        "reason": reason,
        "hint": hint,
        "message": f"cannot reach {address}: {reason} (tried: {tried}); hint: {hint}",
    }
