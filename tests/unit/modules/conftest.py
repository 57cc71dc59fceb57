"""A store in ``tmp_path`` opened and reopened with modules; a scripted model per open."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak

TIMEOUT = 10.0


class World:
    """Opens systems over one store; each open gets a fresh scripted model (``model``)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ak.ScriptedModel()
        self.systems: list[ak.AgentSystem] = []

    def open(self, **options: Any) -> ak.AgentSystem:
        """A system over the store, serving ``self.model`` as ``local``/``gym-1``."""
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        system = ak.AgentSystem.open(
            self.home, providers=providers, provider="local", model="gym-1", **options
        )
        self.systems.append(system)
        return system

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of a read on a store no system holds open now (a fresh system, closed)."""
        system = self.open(resume=False)
        try:
            return system.internals.store.read(lambda tx: tx.sql.query(sql))
        finally:
            system.close(timeout_seconds=TIMEOUT)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state")
    yield w
    for system in w.systems:
        system.close(timeout_seconds=TIMEOUT)


def threads_now() -> set[threading.Thread]:
    return set(threading.enumerate())
