"""The import graph of ``src/iwarp``: layers in order, no circle, nothing back up.

The graph is built from the source (``ast``): every module is a node (a
package's ``__init__.py`` is its *face*, the node named after the package;
the C extension ``iwarp._speedups`` is a node without edges), every import
statement an edge, wherever it stands: at the top, inside a function, or
under ``if TYPE_CHECKING:`` (a circle of type-only imports still ties two
modules together for a reader and for the type checker). What an import
statement names is what it imports:

* ``import a.b.c`` and ``import a.b.c as x``: the module ``a.b.c``;
* ``from a.b import name``: the face ``a.b`` (Python looks ``name`` up
  there first, through its ``__getattr__`` if it has one), and the module
  ``a.b.name`` too when that is a module;
* ``importlib.import_module("a.b")`` with a constant string: ``a.b``.

Python also runs every parent package's face before a submodule; that is
no edge (else every module would depend on its package's face), which is
why the faces import eagerly only what lies below every module of their
package. Imports built at run time from a pattern (the CLI's and the
conformance suite's ``import_module(f"...{name}")``) are not seen.

:data:`LAYERS` is the order, lowest first, written down here once
(docs/design.md shows the same table; a test keeps the two equal). A
module may import modules of its own unit (package or top-level module)
and of lower layers; the units of one layer are siblings and import none
of each other. Any cycle of modules, within a package too, is a circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import pytest

import iwarp

SRC: Final = Path(iwarp.__file__).resolve().parent
ROOT: Final = Path(__file__).resolve().parents[1]

#: The layers of ``iwarp``, lowest first: (what the layer is, its units).
#: A unit is a package (its modules and face) or a top-level module.
LAYERS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("foundations", ("iwarp._typing", "iwarp.errors", "iwarp._speedups", "iwarp._face")),
    ("shared machinery", ("iwarp.statemachine", "iwarp.contract", "iwarp._kernels")),
    ("kernel choice", ("iwarp._accel",)),
    ("checksum", ("iwarp._crc32c",)),
    ("lowest protocols", ("iwarp.mpa", "iwarp.vitcp")),
    ("placement", ("iwarp.ddp",)),
    ("RDMA protocol", ("iwarp.rdmap",)),
    ("pure kernel twins", ("iwarp._small", "iwarp._decode")),
    ("composed stack", ("iwarp.rdma",)),
    ("driver support", ("iwarp.sockets", "iwarp.serving")),
    ("adapters", ("iwarp.asyncio", "iwarp.sync")),
    ("package face", ("iwarp",)),
    ("shared applications", ("iwarp.apps",)),
    ("applications", ("iwarp.analyze", "iwarp.conformance")),
    ("protocol proxy", ("iwarp.proxy",)),
    ("interop suite", ("iwarp.interop",)),
    ("command line", ("iwarp.cli",)),
    ("entry point", ("iwarp.__main__",)),
)

#: Modules without Python source.
EXTENSIONS: Final = ("iwarp._speedups",)


# -- building the graph ------------------------------------------------------------


def modules_under(src: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under ``src`` (the directory of
    ``package``); a package's ``__init__.py`` is named after the package."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = [package, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _module(name: str, known: set[str]) -> str:
    """``name``, which an import statement names as a module, if it is one."""
    if name not in known:
        raise LookupError(f"import of {name!r}: no such module")
    return name


def imports_of(module: str, path: Path, known: Iterable[str], root_package: str) -> set[str]:
    """The modules of ``root_package`` that ``module`` (source at ``path``) imports."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    prefix = root_package + "."
    found: set[str] = set()

    def ours(name: str) -> bool:
        return name == root_package or name.startswith(prefix)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_module(a.name, known) for a in node.names if ours(a.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if not ours(source):
                continue
            found.add(_module(source, known))
            found.update(f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ours(node.args[0].value)
        ):
            found.add(_module(node.args[0].value, known))
    found.discard(module)
    return found


def import_graph(src: Path, package: str, extensions: Iterable[str] = ()) -> dict[str, set[str]]:
    """Module -> the modules it imports, for the package whose source is ``src``."""
    files = modules_under(src, package)
    known = set(files) | set(extensions)
    graph = {name: imports_of(name, path, known, package) for name, path in files.items()}
    for name in extensions:
        graph[name] = set()
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def unit_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[int, str]:
    """(layer number, unit) of ``module``: the longest unit that names it or a
    package holding it (the root package's unit is its face alone)."""
    best: tuple[int, str] | None = None
    root = layers[0][1][0].partition(".")[0]
    for number, (_, units) in enumerate(layers):
        for unit in units:
            inside = unit != root and module.startswith(unit + ".")
            if (module == unit or inside) and (best is None or len(unit) > len(best[1])):
                best = (number, unit)
    if best is None:
        raise LookupError(f"{module} is in no layer: add it to LAYERS")
    return best


def wrong_way(
    graph: Mapping[str, Iterable[str]], layers: tuple[tuple[str, tuple[str, ...]], ...]
) -> list[str]:
    """Every import of a higher layer's module, or of a sibling unit's, as text."""
    found = []
    for module in sorted(graph):
        number, unit = unit_of(module, layers)
        for target in sorted(graph[module]):
            target_number, target_unit = unit_of(target, layers)
            if target_unit == unit or target_number < number:
                continue
            how = "up" if target_number > number else "sideways"
            found.append(
                f"{module} ({layers[number][0]}) imports {target} "
                f"({layers[target_number][0]}): {how}"
            )
    return found


def layer_table(layers: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    """The layers as docs/design.md shows them, highest first."""
    width = max(len(name) for name, _ in layers)
    return "\n".join(f"{name:<{width}}  {'  '.join(units)}" for name, units in reversed(layers))


GRAPH: Final = import_graph(SRC, "iwarp", EXTENSIONS)


# -- the package ------------------------------------------------------------------


def test_the_graph_sees_the_package() -> None:
    # Sanity: the walk found the modules and the edges everyone knows about.
    assert len(GRAPH) > 120
    assert "iwarp.mpa.wire" in GRAPH["iwarp.mpa.framing"]
    assert "iwarp.asyncio.rdma" in GRAPH["iwarp"]  # type-only and lazy, still an edge


def test_every_module_is_in_a_layer() -> None:
    for module in GRAPH:
        unit_of(module, LAYERS)
    named = [unit for _, units in LAYERS for unit in units]
    assert len(named) == len(set(named))
    for unit in named:
        assert any(m == unit or m.startswith(unit + ".") for m in GRAPH), f"{unit}: no module"


def test_no_circle() -> None:
    assert circles(GRAPH) == []


def test_no_import_up_or_sideways() -> None:
    assert wrong_way(GRAPH, LAYERS) == []


def test_design_doc_shows_the_layers() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert layer_table(LAYERS) in text


# -- the graph builder itself, on a small package ---------------------------------------


def _package(tmp_path: Path, files: Mapping[str, str]) -> Path:
    src = tmp_path / "pkg"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "import importlib\nimportlib.import_module('pkg.lazy')\n",
            "lazy.py": "",
            "low.py": "X = 1\n",
            "sub/__init__.py": "",
            "sub/a.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.sub.b import B\n"
                "def f():\n    import pkg.low as low\n    return low\n"
            ),
            "sub/b.py": "from . import a\nfrom ..low import X\nclass B: ...\n",
            "sub/c.py": "from pkg.sub import b\nimport os\n",
        },
    )
    graph = import_graph(src, "pkg", ["pkg._ext"])
    assert graph["pkg"] == {"pkg.lazy"}
    assert graph["pkg.sub.a"] == {"pkg.sub.b", "pkg.low"}
    assert graph["pkg.sub.b"] == {"pkg.sub", "pkg.sub.a", "pkg.low"}
    assert graph["pkg.sub.c"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg._ext"] == set()
    assert circles(graph) == [["pkg.sub.a", "pkg.sub.b"]]


def test_an_import_of_nothing_is_reported(tmp_path: Path) -> None:
    src = _package(tmp_path, {"__init__.py": "", "a.py": "import pkg.gone\n"})
    with pytest.raises(LookupError, match=r"pkg\.gone"):
        import_graph(src, "pkg")


def test_up_and_sideways_are_found_and_down_is_not() -> None:
    layers = (
        ("low", ("pkg.base",)),
        ("middle", ("pkg.left", "pkg.right")),
        ("face", ("pkg",)),
    )
    graph = {
        "pkg": {"pkg.left"},
        "pkg.base": {"pkg.left.x"},
        "pkg.left.x": {"pkg.base", "pkg.left"},
        "pkg.left": {"pkg.right"},
        "pkg.right": set(),
    }
    assert wrong_way(graph, layers) == [
        "pkg.base (low) imports pkg.left.x (middle): up",
        "pkg.left (middle) imports pkg.right (middle): sideways",
    ]
    with pytest.raises(LookupError, match="pkg_other"):
        unit_of("pkg_other", layers)
