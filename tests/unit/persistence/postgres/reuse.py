"""Helpers of the PostgreSQL tests (imported as ``tests.unit.persistence.postgres.reuse``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def sqlite_tests(name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``test_*`` functions of ``tests/unit/persistence/<name>.py``, to run again on
    PostgreSQL through this directory's ``store`` fixture (their fixtures resolve here)."""
    path = Path(__file__).parent.parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_pg_reuse_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {
        key: value
        for key, value in vars(module).items()
        if key.startswith("test_") and callable(value) and key not in skip
    }
