"""The lanes are one declared port (iwarp.contract.Lanes).

A driver asks a core's lanes only what the port declares, reads the port
once (no probing of the core with getattr/hasattr), and no layer of the RDMA
stack only forwards lane calls: their core half is iwarp.rdma.port's.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import iwarp
from iwarp import contract
from iwarp.contract import LaneMessage, LaneRing, Lanes
from iwarp.rdma import lanes
from iwarp.rdma.connection import RdmaConnection
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdma.lanes import ReceiveLane, SendLane
from iwarp.rdma.port import LaneOwner, LanePort

PACKAGE = Path(iwarp.__file__).parent
#: Each adapter's driver: its modules.
DRIVERS = {
    "sync": [PACKAGE / "sync" / "_driver.py", PACKAGE / "sync" / "_writer.py"],
    "asyncio": [PACKAGE / "asyncio" / "driver.py", PACKAGE / "asyncio" / "_writer.py"],
}


def _members(protocol: type) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


def test_the_port_is_three_calls() -> None:
    assert _members(Lanes) == {"take_send", "send_done", "receive_ring"}
    assert _members(LaneMessage) == {"total", "sent", "done", "pump", "copy"}
    assert _members(LaneRing) == {
        "eof",
        "filled",
        "got",
        "held",
        "room",
        "arrived",
        "pump",
        "release",
    }


@pytest.mark.parametrize(
    ("protocol", "cls"), [(Lanes, LanePort), (LaneMessage, SendLane), (LaneRing, ReceiveLane)]
)
def test_the_lanes_keep_the_port(protocol: type, cls: type) -> None:
    for name in _members(protocol):
        wanted = getattr(protocol, name, None)
        have = inspect.getattr_static(cls, name, None)
        assert have is not None, f"{cls.__name__}.{name} is missing"
        if inspect.isfunction(wanted):
            want = list(inspect.signature(wanted).parameters)
            got = list(inspect.signature(getattr(cls, name)).parameters)
            assert got[: len(want)] == want, name


def test_the_port_documents_its_rules() -> None:
    doc = inspect.getdoc(Lanes) or ""
    assert "FIN" in doc and "data_to_send" in doc
    assert "FIN" in (inspect.getdoc(LaneRing.pump) or "")
    assert "Lanes" in (contract.__doc__ or "")


def _lane_names(cls: type) -> set[str]:
    return {n for n in vars(cls) if "lane" in n and not n.startswith("__")}


def test_no_layer_forwards_lane_calls() -> None:
    """The RDMA core has no lane calls; the queue pair has only what the
    port asks of its owner (LaneOwner), and its ``lanes``."""
    assert _lane_names(RdmaConnection) == {"lanes"}
    owner = {n for n in vars(LaneOwner) if not n.startswith("_")}
    assert _lane_names(QueuePairEndpoint) <= owner | {"lanes", "_lane"}
    assert not any(n.startswith("take_lane") for n in vars(QueuePairEndpoint))


def _probes(tree: ast.AST) -> list[str]:
    """getattr/hasattr calls on the core."""
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and ast.unparse(node.args[0]) in ("core", "self.core", "self._core")
    ]


#: What the drivers called before the port: the core's lane calls, found by
#: probing it, and the lanes' own classes.
_BEFORE: tuple[str, ...] = (
    "take_lane",
    "lane_sent",
    "lane_target",
    "lane_feed",
    "lane_taker",
    "lane_finished",
    "LaneCore",
    "ReceiveLane",
    "SendLane",
)


@pytest.mark.parametrize("adapter", sorted(DRIVERS))
def test_a_driver_reads_the_port_once_and_probes_nothing(adapter: str) -> None:
    texts = [path.read_text(encoding="utf-8") for path in DRIVERS[adapter]]
    for text in texts:
        assert _probes(ast.parse(text)) == []
        assert [name for name in _BEFORE if re.search(rf"\b{name}\b", text)] == []
    assert sum(len(re.findall(r"\bcore\.lanes\b", text)) for text in texts) == 1


def test_a_queue_pair_without_the_lanes_has_no_port() -> None:
    from iwarp.mpa.config import MpaConfig, Role
    from iwarp.rdmap.memory import MemoryRegistry

    endpoint = QueuePairEndpoint(Role.INITIATOR, MemoryRegistry().alloc_pd(), MpaConfig())
    if lanes.ACTIVE:
        assert isinstance(endpoint.lanes, LanePort)
    else:
        assert endpoint.lanes is None
