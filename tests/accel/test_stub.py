"""The C API is declared once (``_speedups.pyi``) and chosen once (``iwarp._accel``).

The stub names exactly what the extension exports; every function is
declared by one family's protocol; the pure-Python twins have the names and
signatures their family declares; and no module but :mod:`iwarp._accel`
imports the extension or reads the switches that choose it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import iwarp
from iwarp import _accel

PACKAGE = Path(iwarp.__file__).parent
STUB = PACKAGE / "_speedups.pyi"
#: Each family's protocol in the stub and its pure twin module (None: no
#: module twin; see the stub's docstring).
FAMILIES = {
    "Kernels": "iwarp._kernels",
    "SmallKernels": "iwarp._small",
    "LaneKernels": None,
    "DecodeKernels": "iwarp._decode",
}


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"))


def _protocols() -> dict[str, dict[str, ast.FunctionDef]]:
    found: dict[str, dict[str, ast.FunctionDef]] = {}
    for node in _stub().body:
        if isinstance(node, ast.ClassDef) and node.name in FAMILIES:
            found[node.name] = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    return found


def _exported() -> dict[str, str]:
    """The stub's module-level names: function name -> the family instance it is bound from."""
    names: dict[str, str] = {}
    for node in _stub().body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
        ):
            (target,) = node.targets
            assert isinstance(target, ast.Name)
            assert target.id == node.value.attr, ast.unparse(node)
            names[target.id] = node.value.value.id
    return names


def test_every_function_is_declared_by_one_family() -> None:
    protocols = _protocols()
    assert set(protocols) == set(FAMILIES)
    declared = [name for methods in protocols.values() for name in methods]
    assert len(declared) == len(set(declared)), "a function declared by two families"
    assert set(_exported()) == set(declared)


def _types() -> dict[str, str]:
    """The stub's exported types: name -> the pure twin class it is declared as."""
    aliases = {}
    for node in _stub().body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return {
        target.id: aliases[node.value.id]
        for node in _stub().body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
        for target in node.targets
        if isinstance(target, ast.Name) and node.value.id in aliases
    }


def test_the_stub_names_exactly_what_the_extension_exports() -> None:
    speedups = pytest.importorskip("iwarp._speedups")
    exported = {
        name
        for name in dir(speedups)
        if not name.startswith("_") and callable(getattr(speedups, name))
    }
    assert exported == set(_exported()) | set(_types())


def test_each_exported_type_has_its_twins_methods() -> None:
    speedups = pytest.importorskip("iwarp._speedups")
    assert _types(), "the stub declares the fast path's type"
    for name, twin_path in _types().items():
        module, _, cls = twin_path.rpartition(".")
        twin = getattr(importlib.import_module(module), cls)
        ours = getattr(speedups, name)
        assert isinstance(ours, type), name
        public = {m for m in vars(twin) if not m.startswith("_")}
        assert public <= set(dir(ours)), (name, public - set(dir(ours)))


def _stub_parameters(function: ast.FunctionDef) -> list[tuple[str, str, bool, str]]:
    """(name, kind, has a default, annotation) of each parameter after self."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    kinds = ["POSITIONAL_ONLY"] * len(args.posonlyargs) + ["POSITIONAL_OR_KEYWORD"] * len(args.args)
    rows = [
        (a.arg, kind, default, ast.unparse(a.annotation) if a.annotation else "")
        for a, kind, default in zip(positional, kinds, defaults, strict=True)
    ]
    if args.vararg is not None:
        annotation = args.vararg.annotation
        rows.append(
            (
                args.vararg.arg,
                "VAR_POSITIONAL",
                False,
                ast.unparse(annotation) if annotation else "",
            )
        )
    assert rows[0][0] == "self"
    return rows[1:]


def _twin_parameters(function: object) -> list[tuple[str, str, bool, str]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [
        (p.name, p.kind.name, p.default is not p.empty, str(p.annotation))
        for p in signature.parameters.values()
    ]


@pytest.mark.parametrize("family", [f for f, twin in FAMILIES.items() if twin is not None])
def test_the_pure_twins_have_the_declared_names_and_signatures(family: str) -> None:
    twin = importlib.import_module(str(FAMILIES[family]))
    methods = _protocols()[family]
    assert set(methods) <= set(twin.__all__)
    for name, function in methods.items():
        ours = getattr(twin, name)
        if name == "crc32c" and not inspect.isfunction(ours):
            continue  # the crc32c package's C function: no signature to read
        assert _twin_parameters(ours) == _stub_parameters(function), name
        returns = ast.unparse(function.returns) if function.returns else ""
        assert inspect.signature(ours).return_annotation == returns, name


def _runtime_imports_of_the_extension(tree: ast.Module) -> list[int]:
    """Lines importing iwarp._speedups outside ``if TYPE_CHECKING:``."""
    lines: list[int] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for otherwise in node.orelse:
                visit(otherwise)
            return
        if isinstance(node, ast.Import) and any(a.name == "iwarp._speedups" for a in node.names):
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and (
            node.module == "iwarp._speedups"
            or (node.module == "iwarp" and any(a.name == "_speedups" for a in node.names))
        ):
            lines.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return lines


def test_the_kernels_are_chosen_in_one_place() -> None:
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_accel.py" and path.parent == PACKAGE:
            continue
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(PACKAGE)
        if _runtime_imports_of_the_extension(ast.parse(text)):
            elsewhere.append(f"{relative} imports iwarp._speedups")
        for switch in ("IWARP_NO_ACCEL", "IWARP_NO_LANES", "IWARP_NO_RECEIVE_LANE"):
            if f'"{switch}"' in text:
                elsewhere.append(f"{relative} reads {switch}")
    assert elsewhere == []


def test_the_choice_is_one_answer() -> None:
    speedups = _accel.speedups
    from iwarp.analyze import kernels as decode

    if speedups is None:
        assert _accel.kernels is importlib.import_module("iwarp._kernels")
        assert decode.kernels is importlib.import_module("iwarp._decode") is decode.pure
        assert _accel.lanes is None
        assert not _accel.LANES and not _accel.RECEIVE_LANE
    else:
        assert _accel.kernels is speedups and decode.kernels is speedups
        assert _accel.lanes is (speedups if _accel.LANES else None)
