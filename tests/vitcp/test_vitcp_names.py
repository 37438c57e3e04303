"""VI/TCP's classes whose concept has a namesake in MPA or RDMAP are
distinct classes with Vi names, and have no other name."""

from __future__ import annotations

import iwarp.mpa.config as mpa_config
import iwarp.mpa.events as mpa_events
import iwarp.rdmap.memory as rdmap_memory
import iwarp.rdmap.work as rdmap_work
import iwarp.vitcp.config as vi_config
import iwarp.vitcp.events as vi_events
import iwarp.vitcp.memory as vi_memory


def test_vi_classes_have_one_name_each_distinct_from_mpa_and_rdmap() -> None:
    pairs = [
        (vi_config, "ViRole", mpa_config.Role),
        (vi_events, "ViCompletionStatus", rdmap_work.CompletionStatus),
        (vi_events, "ViConnectionClosed", mpa_events.ConnectionClosed),
        (vi_events, "ViConnectionRejected", mpa_events.ConnectionRejected),
        (vi_memory, "ViMemoryRegion", rdmap_memory.MemoryRegion),
    ]
    for module, name, other in pairs:
        vi = getattr(module, name)
        assert vi is not other and vi.__name__ == name
        # No second, plain name that reads like MPA's or RDMAP's class.
        assert not hasattr(module, other.__name__), (module.__name__, other.__name__)
        assert other.__name__ not in module.__all__


def test_a_vi_role_is_not_an_mpa_role() -> None:
    assert set(vi_config.ViRole.__members__) == {"ACTIVE", "PASSIVE"}
    assert set(mpa_config.Role.__members__).isdisjoint(vi_config.ViRole.__members__)
    assert vi_config.peer_role("10.0.0.2", "10.0.0.1") is vi_config.ViRole.ACTIVE
