"""Shared fixtures: every test starts from a clean world."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings

import agentkeep as ak
from agentkeep.persistence.codec import Statements

# The backend the suite runs on (AGENTKEEP_TEST_DATABASE=sqlite|postgres): the fixtures
# database_url and postgres_url, the sqlite_only marker, the session's PostgreSQL cluster.
pytest_plugins = ("tests.postgres_server",)

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Every test starts and ends on structlog's defaults. The CLI, a daemon and the chaos
    campaigns configure structlog for the whole process (a level filter, a sink); a test
    after one of them in the same worker would inherit it (an access-log test capturing
    ``info`` lines then sees none, dropped by the CLI's ``warning`` filter). This fixture
    is set up before, and torn down after, every other fixture of the test."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def system(tmp_path: Path) -> Iterator[ak.AgentSystem]:
    """An open system over a scripted model with nothing scripted (for tests that run no
    turn), closed after the test."""
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    ) as opened:
        yield opened


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement any store executor (writer or reader) runs from now on, in order."""
    seen: list[str] = []
    original = Statements.execute

    def execute(self: Statements, sql: str, params: tuple[Any, ...] = ()) -> Any:
        seen.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(Statements, "execute", execute)
    return seen
