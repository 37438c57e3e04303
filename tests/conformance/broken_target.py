"""iwarp with one rule broken on purpose, for the conformance suite's own tests.

``python broken_target.py RULE listen ARGS...`` runs ``iwarp listen ARGS``;
``python broken_target.py RULE connect ARGS...`` runs ``iwarp connect ARGS``
again and again (see initiator_loop.py). RULE is one of:

* ``crc``: FPDUs are never CRC-checked (the decoder is built with CRC off);
* ``pd-length``: any PD_Length up to 65535 is accepted in Rev 1/2 frames;
* ``terminate``: errors end the stream without sending the Terminate;
* ``no-rfc7306``: a stack without RFC 7306, which answers its four
  opcodes with "Unexpected OpCode" (not a broken rule: an older stack).

Test-only: these are monkeypatches, not options of the product.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import iwarp.mpa.framing
import iwarp.mpa.handshake
import iwarp.rdmap.stream
from iwarp.rdmap.state import StreamState


def break_crc() -> None:
    decoder = iwarp.mpa.framing.FpduDecoder
    original = decoder.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["crc"] = False
        original(self, *args, **kwargs)

    decoder.__init__ = init  # type: ignore[method-assign]


def break_pd_length() -> None:
    iwarp.mpa.handshake.private_data_limit = lambda config, revision: 0xFFFF


def break_terminate() -> None:
    stream = iwarp.rdmap.stream.RdmapStream
    # Every way out of the stream (ulpdus_to_send too) goes through runs_to_send.
    original = stream.runs_to_send

    def runs_to_send(self: Any, limit: int | None = None) -> list[Any]:
        terminating = self.state is StreamState.TERMINATING
        out = original(self, limit)
        return [] if terminating else out  # the Terminate is built, then never sent

    stream.runs_to_send = runs_to_send  # type: ignore[method-assign]


def without_rfc7306() -> None:
    stream = iwarp.rdmap.stream.RdmapStream
    original = stream.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        # The opcodes it accepts: RFC 5040's only.
        self._opcode_tagged = {op: t for op, t in self._opcode_tagged.items() if op < 8}

    stream.__init__ = init  # type: ignore[method-assign]


RULES = {
    "crc": break_crc,
    "pd-length": break_pd_length,
    "terminate": break_terminate,
    "no-rfc7306": without_rfc7306,
}

if __name__ == "__main__":
    RULES[sys.argv[1]]()
    if sys.argv[2] == "listen":
        from iwarp.cli import main

        sys.exit(main(["listen", *sys.argv[3:]]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from initiator_loop import run  # type: ignore[import-not-found]

    run(sys.argv[3:])
