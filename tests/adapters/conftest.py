"""The fixture of the behavioural suites: every client kind against every server
kind (uvloop, when installed, against itself and the blocking adapter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.sides import PAIRS, Adapter, make_adapter


@pytest.fixture(params=PAIRS, ids=[f"{c}-to-{s}" for c, s in PAIRS])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Adapter, Adapter]]:
    """(client adapter, server adapter); the same object when the kinds agree."""
    client_kind, server_kind = request.param
    server = make_adapter(server_kind)
    client = server if client_kind == server_kind else make_adapter(client_kind)
    try:
        yield client, server
    finally:
        server.finish()
        if client is not server:
            client.finish()
