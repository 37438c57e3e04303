"""Helpers shared by the test suites."""

from __future__ import annotations

from collections.abc import Iterator


def all_splits(data: bytes) -> Iterator[list[bytes]]:
    """Every way of cutting ``data`` into two chunks, and one octet at a time."""
    for cut in range(len(data) + 1):
        yield [data[:cut], data[cut:]]
    yield [data[i : i + 1] for i in range(len(data))]


def chunked(data: bytes, sizes: list[int]) -> list[bytes]:
    """Cut ``data`` into chunks of the given sizes, cycling through them."""
    out: list[bytes] = []
    pos = 0
    turn = 0
    while pos < len(data):
        step = max(1, sizes[turn % len(sizes)]) if sizes else len(data)
        out.append(data[pos : pos + step])
        pos += step
        turn += 1
    return out
