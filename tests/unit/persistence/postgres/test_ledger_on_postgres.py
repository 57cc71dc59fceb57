"""The session event ledger on PostgreSQL: the SQLite ledger suites (every fact in order,
dense sequences across a restart, paging, idempotent repeats, immutability) run again with
the system's store in a PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.persistence.postgres.reuse import load, reused

import agentkeep as ak

_world = load("ledger/conftest.py")


class PostgresLedgerWorld(_world.LedgerWorld):  # type: ignore[name-defined,misc]
    def __init__(self, home: Path, url: str) -> None:
        super().__init__(home)
        self.url = url

    def open(self, **options: Any) -> ak.AgentSystem:
        options.setdefault("database", self.url)
        system: ak.AgentSystem = super().open(**options)
        return system


@pytest.fixture
def world(tmp_path: Path, pg_url: str) -> Iterator[Any]:
    w = PostgresLedgerWorld(tmp_path / "state", pg_url)
    yield w
    for system in w.systems:
        system.close()


_SUITES = ("test_subscribe", "test_same_transaction", "test_untouched", "test_both_sides")
for _suite in (*_SUITES, "test_facts"):
    globals().update(reused(f"ledger/{_suite}.py"))
