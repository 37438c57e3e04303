"""Every core keeps :class:`iwarp.contract.Connection`, found by walking the package.

A core is any class of ``src/iwarp`` that defines both ``receive_data`` and
``data_to_send`` (read from the source, so a new core cannot be missed).
Each must have every member of the contract: its methods with the
contract's parameters (same names and kinds; ``now`` without a default:
time is always passed in; extra parameters only with defaults), its
properties (``lanes`` may be a class-level None instead: a core without
lanes) and ``borrows_input`` as a class-level bool.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any, Final

import pytest

import iwarp
from iwarp.contract import Connection

SRC: Final = Path(iwarp.__file__).resolve().parent


def core_classes(src: Path, package: str) -> list[tuple[str, str]]:
    """(module, class) of every class under ``src`` defining ``data_to_send``
    itself, the contract excepted (its ``receive_data`` may be a base's:
    the queue pair's is :class:`iwarp.rdma.qpbase.QueuePairBase`'s)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        parts = [package, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            if "data_to_send" in methods:
                found.append((module, node.name))
    return [item for item in found if item != ("iwarp.contract", "Connection")]


def _members(protocol: type) -> tuple[dict[str, Any], set[str], set[str]]:
    """The protocol's methods (name -> function), properties and data attributes."""
    methods, properties = {}, set()
    for name, value in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            properties.add(name)
        elif inspect.isfunction(value):
            methods[name] = value
    attributes = {name for name in protocol.__annotations__ if not name.startswith("_")}
    return methods, properties, attributes


_MISSING: Final = object()


def contract_problems(cls: type, protocol: type = Connection) -> list[str]:
    """What ``cls`` lacks or gets wrong of ``protocol``, as sentences."""
    methods, properties, attributes = _members(protocol)
    problems = []
    for name, wanted in methods.items():
        have = getattr(cls, name, None)
        if not callable(have):
            problems.append(f"{name}: missing")
            continue
        want_params = list(inspect.signature(wanted).parameters.values())
        have_params = {p.name: p for p in inspect.signature(have).parameters.values()}
        for param in want_params:
            got = have_params.pop(param.name, None)
            if param.name == "self" and got is not None:
                continue  # (a C method's self is positional-only: nobody names it)
            if got is None or got.kind is not param.kind:
                problems.append(f"{name}: parameter {param.name!r} missing or of another kind")
            elif (got.default is inspect.Parameter.empty) != (
                param.default is inspect.Parameter.empty
            ):
                has = "no default" if got.default is inspect.Parameter.empty else "a default"
                problems.append(f"{name}: {param.name!r} has {has}, unlike the contract")
        for extra in have_params.values():
            if extra.default is inspect.Parameter.empty and extra.kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                problems.append(f"{name}: extra parameter {extra.name!r} without a default")
    for name in sorted(properties):
        value = inspect.getattr_static(cls, name, _MISSING)
        if name == "lanes" and value is None:  # a core without lanes: None at class level
            continue
        if not isinstance(value, property):
            problems.append(f"{name}: not a property")
    for name in sorted(attributes):
        if not isinstance(inspect.getattr_static(cls, name, None), bool):
            problems.append(f"{name}: not a class-level bool")
    return problems


CORES: Final = core_classes(SRC, "iwarp")


def test_the_walk_finds_the_cores() -> None:
    names = {name for _, name in CORES}
    assert {"MpaConnection", "RdmaConnection", "QueuePairEndpoint", "VitcpConnection"} <= names


@pytest.mark.parametrize(("module", "name"), CORES, ids=[name for _, name in CORES])
def test_every_core_keeps_the_contract(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert contract_problems(cls) == []


def test_the_contract_names_what_drivers_rely_on() -> None:
    methods, properties, attributes = _members(Connection)
    assert set(methods) == {
        "receive_data",
        "data_to_send",
        "take_events",
        "get_timer",
        "handle_timer",
        "connection_lost",
        "set_emss",
        "settled",
    }
    assert properties == {"has_data_to_send", "must_close", "lanes"}
    assert attributes == {"borrows_input"}
    doc = importlib.import_module("iwarp.contract").__doc__ or ""
    assert "send_now" in doc and "Input borrowing" in doc


def test_a_core_that_breaks_the_contract_is_told_how() -> None:
    class Loose:
        borrows_input = 1  # not a bool

        def receive_data(self, data: bytes, now: float | None = None) -> list[object]:
            return []

        def data_to_send(self, limit: int) -> list[bytes]:
            return []

        def connection_lost(self, now: float, reason: str) -> list[object]:
            return []

        must_close = False

    problems = contract_problems(Loose)
    assert "receive_data: 'now' has a default, unlike the contract" in problems
    assert "data_to_send: extra parameter 'limit' without a default" in problems
    assert "connection_lost: 'reason' has no default, unlike the contract" in problems
    assert "handle_timer: missing" in problems
    assert "must_close: not a property" in problems
    assert "borrows_input: not a class-level bool" in problems


def test_the_walk_finds_a_core_anywhere(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "sub" / "x.py").write_text(
        "class Outer:\n    class Core:\n        def receive_data(self): ...\n"
        "        def data_to_send(self): ...\n"
        "class Half:\n    def receive_data(self): ...\n",
        encoding="utf-8",
    )
    assert core_classes(tmp_path, "pkg") == [("pkg.sub.x", "Core")]
