"""The loop tests' world (a fresh store per test, a scripted model, gated tools), for the
transactions an embedder opens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.loop.conftest import World


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state")
    yield w
    for gate in w.gates.values():
        gate.release.set()
    for system in w.systems:
        system.close(timeout_seconds=10)
