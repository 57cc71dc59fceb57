"""Helpers of the PostgreSQL tests (imported as ``tests.unit.persistence.postgres.reuse``):
loading a SQLite suite's module by path, so its tests run again here, their fixtures
resolved by this directory's (``store``, ``world``: PostgreSQL)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_UNIT = Path(__file__).resolve().parents[2]
#: The fixtures this directory's conftest (or a test module here) defines on PostgreSQL.
_OURS = frozenset(
    {"store", "world", "pg_url", "server", "systems_on_postgres", "stores_on_postgres"}
)


def load(relative: str) -> ModuleType:
    """The module ``tests/unit/<relative>``, loaded once under a private package named
    after its directory (so its relative imports, ``from .conftest import …``, resolve)."""
    path = _UNIT / relative
    package = "_pg_reuse_" + path.parent.name
    if package not in sys.modules:
        parent = ModuleType(package)
        parent.__path__ = [str(path.parent)]
        sys.modules[package] = parent
    name = f"{package}.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def reused(relative: str, *, skip: tuple[str, ...] = (), own_store: bool = False) -> dict[str, Any]:
    """The ``test_*`` functions of ``tests/unit/<relative>`` (but ``skip``), with the
    fixtures the module itself defines."""
    module = load(relative)
    tests = {
        key: value
        for key, value in vars(module).items()
        if key.startswith("test_") and callable(value) and key not in skip
    }
    # Its own fixtures, but never one of the names this directory defines for PostgreSQL
    # (a suite's module-level ``store`` would put its tests back on SQLite).
    # ``own_store``: the suite's own ``store`` fixture is kept (under ``stores_on_postgres``
    # its ``Store.open`` opens PostgreSQL too).
    ours = _OURS - {"store"} if own_store else _OURS
    fixtures = {k: v for k, v in _fixtures(module).items() if k not in ours}
    return {**fixtures, **tests}


def sqlite_tests(name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``test_*`` functions of ``tests/unit/persistence/<name>.py``."""
    return reused(f"persistence/{name}.py", skip=skip)


def fixtures_of(relative: str) -> dict[str, Any]:
    """The fixtures ``tests/unit/<relative>`` (a conftest) defines, to define them here."""
    return _fixtures(load(relative))


def _fixtures(module: ModuleType) -> dict[str, Any]:
    return {
        key: value
        for key, value in vars(module).items()
        if type(value).__name__ == "FixtureFunctionDefinition"
        or getattr(value, "_pytestfixturefunction", None) is not None
    }
