"""Package faces that import their names on first use.

A face (a package's ``__init__.py``) that re-exports names from its modules
declares them once as a table, name -> defining module, and takes its
module ``__getattr__`` and ``__dir__`` from :func:`lazy_face`: nothing is
imported until a name is used, ``dir()`` and completion list every name
before that, and a used name is kept in the face's namespace so the next
use costs a dictionary look-up. ``iwarp``, ``iwarp.asyncio`` and
``iwarp.sync`` are such faces.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping

__all__ = ["lazy_face"]


def lazy_face(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, object]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the face of ``package``, whose public
    names are ``exports`` (name -> module that defines it) and whose module
    dictionary is ``namespace`` (its ``globals()``).

    A name not in ``exports`` raises :class:`AttributeError` (Python's
    ``from package import submodule`` relies on that to import the
    submodule).
    """

    def attribute(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted({*namespace, *exports})

    return attribute, names
