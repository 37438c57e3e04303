"""The error hierarchy: local misuse and remote misbehaviour never share a class."""

from __future__ import annotations

import importlib
import pkgutil

import iwarp
from iwarp.errors import IwarpError, LocalProtocolError, RemoteProtocolError
from iwarp.rdma.errors import ConnectionTerminatedError


def _all_subclasses(cls: type[IwarpError]) -> set[type[IwarpError]]:
    found: set[type[IwarpError]] = set()
    stack = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                stack.append(sub)
    return found


def _import_everything() -> None:
    for module in pkgutil.walk_packages(iwarp.__path__, "iwarp."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)


def test_no_error_is_both_local_and_remote() -> None:
    _import_everything()
    classes = _all_subclasses(IwarpError)
    assert len(classes) > 20  # every module's errors were found
    mixed = [
        c
        for c in classes
        if issubclass(c, LocalProtocolError) and issubclass(c, RemoteProtocolError)
    ]
    assert mixed == []


def test_a_terminated_connection_is_neither_misuse_nor_violation() -> None:
    """A peer's Terminate ends the connection; it is not the caller's fault."""
    assert not issubclass(ConnectionTerminatedError, LocalProtocolError)
    assert not issubclass(ConnectionTerminatedError, RemoteProtocolError)


def test_session_errors_are_not_misuse() -> None:
    from iwarp.cli._rdma_traffic import SessionError

    assert not issubclass(SessionError, LocalProtocolError)
