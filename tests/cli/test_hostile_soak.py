"""A bounded hostile-peer soak between the CLI ends, for every ``--op``.

``iwarp connect`` talks to ``iwarp listen`` through a relay that cuts the
streams at random points (many small TCP segments), stalls at random, and
flips one bit of chosen connections after MPA startup. With CRC on:

* a clean connection moves every message, none lost, duplicated or
  reordered (both summaries' SHA-256 of the messages in order agree);
* every flip is detected (the side that receives it reports an error) and
  the connector never reports success for a connection that was corrupted;
* the listener counts none of the corrupted data as received: at most the
  messages before the flipped one.
"""

from __future__ import annotations

import random

import pytest

from cli.hostile import Flip, HostileRelay
from cli.test_listen_connect import expected_sha
from clitools import by_type, connect, listen

# A soak: many connections through a hostile relay.
pytestmark = pytest.mark.slow

COUNT, SIZE = 100, 1000
#: Connection 0 is clean; the others get one flip each: (direction, offset range).
PLANS: dict[str, list[tuple[str, tuple[int, int]]]] = {
    # c2s carries the messages (and notices); s2c the advertisements / receipt.
    "send": [("c2s", (200, 80_000)), ("s2c", (60, 400))],
    "write": [("c2s", (200, 80_000)), ("s2c", (60, 400))],
    # Read Responses flow s2c; Read Requests and notices c2s.
    "read": [("s2c", (400, 80_000)), ("c2s", (100, 3000))],
    # Bare ULPDUs c2s; the receipt s2c (after the Reply).
    "mpa": [("c2s", (200, 80_000)), ("s2c", (48, 60))],
}


@pytest.mark.parametrize("op", sorted(PLANS))
def test_hostile_relay_for_every_op(op: str) -> None:
    rng = random.Random(f"soak/{op}")
    plan = {1 + i: (direction, rng.randint(*span)) for i, (direction, span) in enumerate(PLANS[op])}

    def flips(index: int, direction: str) -> list[int]:
        chosen = plan.get(index)
        return [chosen[1]] if chosen is not None and chosen[0] == direction else []

    runs: list[tuple[int, list[dict[str, object]]]] = []
    connections = 1 + len(plan)
    with listen("--op", op, "--connections", str(connections)) as listener:
        with HostileRelay(listener.port, seed=rng.randrange(1 << 30), flips=flips) as relay:
            for _ in range(connections):
                runs.append(
                    connect(relay.port, "--op", op, "--count", str(COUNT), "--size", str(SIZE))
                )
        _, lines = listener.finish(timeout=60)
    made = {flip.connection: flip for flip in relay.made}

    # Connection 0: everything arrives, in order, once.
    rc, out = runs[0]
    assert rc == 0, out
    summary = out[-1]
    assert summary["type"] == "summary" and summary["messages"] == COUNT
    assert summary["sha256"] == expected_sha(COUNT, SIZE)

    closed = {str(record["peer"]): record for record in by_type(lines, "closed")}
    assert len(closed) == connections
    assert closed[relay.upstream[0]]["messages"] == COUNT
    errors = by_type(lines, "error")
    for index in range(1, connections):
        rc, out = runs[index]
        flip: Flip | None = made.get(index)
        if flip is None:  # the stream ended before the offset: nothing to detect
            assert rc == 0, out
            continue
        # No success reported for a corrupted connection.
        assert rc != 0 and not by_type(out, "summary"), (op, flip, out)
        peer = relay.upstream[index]
        theirs = [e for e in errors if e.get("peer") == peer]
        if flip.direction == "c2s":
            # The listener received the flip: it detected it ...
            assert theirs, (op, flip, lines)
            # ... and took no corrupted message (only those before it).
            assert int(str(closed[peer]["messages"])) < COUNT
        else:
            # The connector received the flip and reported an error for it.
            assert by_type(out, "error"), (op, flip, out)
    assert len(made) == len(plan), made  # every planned flip was made
