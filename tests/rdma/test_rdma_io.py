"""The asyncio queue pair's I/O helpers: what is left after a partial ``sendmsg``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.asyncio.rdma import _unsent_part


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    st.data(),
)
def test_unsent_part_is_the_tail(pieces: list[bytes], data: st.DataObject) -> None:
    chunks: list[bytes | bytearray | memoryview] = [
        bytearray(p) if i % 3 == 1 else memoryview(p) if i % 3 == 2 else p
        for i, p in enumerate(pieces)
    ]
    whole = b"".join(pieces)
    sent = data.draw(st.integers(0, len(whole)))
    rest = _unsent_part(chunks, sent)
    assert b"".join(bytes(c) for c in rest) == whole[sent:]


def test_unsent_part_keeps_untouched_buffers() -> None:
    a, b = b"abcd", bytearray(b"efgh")
    assert _unsent_part([a, b], 0)[0] is a
    assert _unsent_part([a, b], 4)[0] is b
    assert bytes(_unsent_part([a, b], 6)[0]) == b"gh"
    assert _unsent_part([a, b], 8) == []
