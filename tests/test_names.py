"""One name per concept: every public class name of ``iwarp`` is defined once.

The names are read from the source (``ast``): each module's top-level
classes and type aliases whose names do not start with ``_`` (a module's
``X = Y`` of a class counts as a second definition of ``Y``'s concept under
the name ``X``). A name defined in two modules is a clash unless it is one
of the deliberate cases below, each named explicitly.
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import iwarp

SRC: Final = Path(iwarp.__file__).resolve().parent

#: The asyncio/sync twins: the same verbs-shaped class once per adapter,
#: in modules of the same name (``iwarp.asyncio.rdma.QueuePair`` and
#: ``iwarp.sync.rdma.QueuePair``); an application picks the adapter, the
#: names stay.
TWINS: Final = frozenset(
    {"CompletionQueue", "MpaSocket", "MpaStream", "QueuePair", "VitcpEndpoint", "VitcpListener"}
)
#: Further definitions allowed beside a twin (none: the core's completion
#: list is ``iwarp.rdma.endpoint.CompletionRecord``).
BESIDE_TWINS: Final[dict[str, frozenset[str]]] = {}
#: A name every package's ``events.py`` defines for the union of its events
#: (``iwarp.mpa.events.Event``, ``iwarp.rdma.events.Event``...).
PER_PACKAGE: Final = frozenset({"Event"})
PER_PACKAGE_MODULE: Final = "events"


def _module_name(path: Path, src: Path, package: str) -> str:
    parts = [package, *path.relative_to(src).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_alias(node: ast.stmt, classes: set[str]) -> str | None:
    """The name ``node`` gives a class or type alias, if it does."""
    if (
        isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.annotation, ast.Name)
        and node.annotation.id == "TypeAlias"
    ):
        return node.target.id
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Name)
        and node.value.id in classes
    ):
        return node.targets[0].id
    return None


def class_names(src: Path, package: str) -> dict[str, list[str]]:
    """Public class (and class alias) name -> the modules that define it."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(src.rglob("*.py")):
        module = _module_name(path, src, package)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        for node in tree.body:
            name = node.name if isinstance(node, ast.ClassDef) else _is_alias(node, classes)
            if name is not None and not name.startswith("_"):
                found[name].append(module)
    return dict(found)


def clashes(names: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The names defined more than once that no rule above allows."""
    bad = {}
    for name, modules in sorted(names.items()):
        if len(modules) == 1:
            continue
        if name in PER_PACKAGE and all(m.rpartition(".")[2] == PER_PACKAGE_MODULE for m in modules):
            continue
        if name in TWINS:
            rest = [m for m in modules if m not in BESIDE_TWINS.get(name, ())]
            adapters = sorted(m.split(".")[1] for m in rest)
            stems = {m.split(".", 2)[2] for m in rest if m.count(".") >= 2}
            if adapters == ["asyncio", "sync"] and len(stems) == 1:
                continue
        bad[name] = modules
    return bad


NAMES: Final = class_names(SRC, "iwarp")


def test_the_walk_sees_the_classes() -> None:
    assert NAMES["MpaConnection"] == ["iwarp.mpa.connection"]
    assert NAMES["ViRole"] == ["iwarp.vitcp.config"]
    assert len(NAMES) > 300


def test_no_name_is_defined_twice_except_the_deliberate_ones() -> None:
    assert clashes(NAMES) == {}


def test_the_allowed_twins_are_real_twins() -> None:
    # The allow-list may not rot: each twin is defined in both adapters.
    for name in TWINS:
        adapters = {m.split(".")[1] for m in NAMES[name] if m not in BESIDE_TWINS.get(name, ())}
        assert adapters == {"asyncio", "sync"}, (name, NAMES[name])
    for name, modules in BESIDE_TWINS.items():
        assert modules <= set(NAMES[name]), (name, modules)


def test_a_clash_is_found(tmp_path: Path) -> None:
    files = {
        "a.py": "class Thing: ...\nclass _Private: ...\nOther = Thing\n",
        "b.py": "from typing import TypeAlias\nThing: TypeAlias = int\n",
        "asyncio/x.py": "class QueuePair: ...\n",
        "sync/x.py": "class QueuePair: ...\n",
        "sync/y.py": "class MpaSocket: ...\n",
        "rdma/y.py": "class MpaSocket: ...\n",
        "m/events.py": "class Event: ...\n",
        "n/events.py": "Event = int\nclass Event2: ...\n",
        "n/other.py": "class Event2: ...\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    names = class_names(tmp_path, "pkg")
    assert names["Other"] == ["pkg.a"] and "_Private" not in names
    assert clashes(names) == {
        "Event2": ["pkg.n.events", "pkg.n.other"],
        "MpaSocket": ["pkg.rdma.y", "pkg.sync.y"],
        "Thing": ["pkg.a", "pkg.b"],
    }
