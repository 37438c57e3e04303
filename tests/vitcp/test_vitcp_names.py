"""VI/TCP's classes that share a concept's name with MPA or RDMAP are
distinct classes with Vi names; the plain names docs/vitcp.md uses are
aliases of them."""

from __future__ import annotations

import iwarp.mpa.config as mpa_config
import iwarp.mpa.events as mpa_events
import iwarp.rdmap.memory as rdmap_memory
import iwarp.rdmap.work as rdmap_work
import iwarp.vitcp.config as vi_config
import iwarp.vitcp.events as vi_events
import iwarp.vitcp.memory as vi_memory


def test_vi_classes_are_their_own_and_the_plain_names_alias_them() -> None:
    pairs = [
        (vi_config.Role, vi_config.ViRole, mpa_config.Role),
        (vi_events.CompletionStatus, vi_events.ViCompletionStatus, rdmap_work.CompletionStatus),
        (vi_events.ConnectionClosed, vi_events.ViConnectionClosed, mpa_events.ConnectionClosed),
        (
            vi_events.ConnectionRejected,
            vi_events.ViConnectionRejected,
            mpa_events.ConnectionRejected,
        ),
        (vi_memory.MemoryRegion, vi_memory.ViMemoryRegion, rdmap_memory.MemoryRegion),
    ]
    for plain, vi, other in pairs:
        assert plain is vi
        assert vi is not other and vi.__name__ != other.__name__
        assert vi.__name__.startswith("Vi")


def test_a_vi_role_is_not_an_mpa_role() -> None:
    assert set(vi_config.ViRole.__members__) == {"ACTIVE", "PASSIVE"}
    assert set(mpa_config.Role.__members__).isdisjoint(vi_config.ViRole.__members__)
    assert vi_config.peer_role("10.0.0.2", "10.0.0.1") is vi_config.ViRole.ACTIVE
