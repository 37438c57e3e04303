"""The package faces: ``iwarp``, ``iwarp.asyncio`` and ``iwarp.sync``.

The two adapters' faces export the same names, except each one's own way
of waiting (:data:`ONLY`, documented in their docstrings and docs/sync.md);
a name that is no adapter's own is the same object in both. Every face
imports its names on first use and lists them before that.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType
from typing import Final

import pytest

import iwarp
import iwarp._face
import iwarp.asyncio
import iwarp.sync

#: What one adapter's face exports and the other's does not.
ONLY: Final = {
    "iwarp.asyncio": {"serve"},
    "iwarp.sync": {"BUSY_POLL", "Listener", "listen"},
}
#: The adapter's own class of each concept (the asyncio/sync twins).
OWN: Final = {"CompletionQueue", "QueuePair", "connect"}
FACES: Final = (iwarp, iwarp.asyncio, iwarp.sync)


def test_the_adapters_faces_export_the_same_names_but_the_documented_ones() -> None:
    asyncio_names, sync_names = set(iwarp.asyncio.__all__), set(iwarp.sync.__all__)
    assert asyncio_names - sync_names == ONLY["iwarp.asyncio"]
    assert sync_names - asyncio_names == ONLY["iwarp.sync"]
    for face in (iwarp.asyncio, iwarp.sync):
        assert face.__doc__ is not None
        for name in ONLY[face.__name__]:
            assert name in face.__doc__, (face.__name__, name)


def test_shared_names_are_the_same_objects_and_the_adapters_own_are_not() -> None:
    for name in set(iwarp.asyncio.__all__) & set(iwarp.sync.__all__):
        mine, theirs = getattr(iwarp.asyncio, name), getattr(iwarp.sync, name)
        if name in OWN:
            assert mine is not theirs, name
            assert mine.__module__.startswith("iwarp.asyncio."), name
            assert theirs.__module__.startswith("iwarp.sync."), name
        else:
            assert mine is theirs, name


@pytest.mark.parametrize("face", FACES, ids=[face.__name__ for face in FACES])
def test_every_exported_name_resolves_and_dir_lists_it(face: ModuleType) -> None:
    assert len(face.__all__) == len(set(face.__all__))
    for name in face.__all__:
        assert getattr(face, name) is not None, name
    assert set(face.__all__) <= set(dir(face))


@pytest.mark.parametrize("face", ["iwarp", "iwarp.asyncio", "iwarp.sync"])
def test_a_face_imports_nothing_until_a_name_is_used(face: str) -> None:
    code = (
        f"import json, sys, {face} as face\n"
        "before = sorted(m for m in sys.modules if m.startswith(('iwarp.rdma', 'iwarp.mpa')))\n"
        "listed = sorted(set(face.__all__) - set(dir(face)))\n"
        "face.ProtectionDomain\n"
        "print(json.dumps([before, listed, 'iwarp.rdmap.memory' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, not_listed, loaded = json.loads(out.stdout)
    assert before == [] and not_listed == [] and loaded is True


def test_an_unknown_name_is_an_attribute_error_and_submodules_still_import() -> None:
    with pytest.raises(AttributeError, match=r"'iwarp.sync' has no attribute 'Nothing'"):
        iwarp.sync.Nothing  # noqa: B018
    from iwarp.sync import mpa

    assert mpa.__name__ == "iwarp.sync.mpa"


def test_lazy_face_keeps_a_used_name() -> None:
    namespace: dict[str, object] = {}
    attribute, names = iwarp._face.lazy_face("pkg", {"dumps": "json"}, namespace)
    assert names() == ["dumps"]
    assert attribute("dumps") is json.dumps and namespace == {"dumps": json.dumps}
    with pytest.raises(AttributeError, match="'pkg' has no attribute 'loads'"):
        attribute("loads")
