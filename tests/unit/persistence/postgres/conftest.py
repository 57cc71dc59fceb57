"""PostgreSQL stores for the tests: one fresh schema per test on the session's server
(``tests/postgres_server.py``: skipped on the SQLite pass, saying so).

``pg_url`` is the store's URL (``…?schema=t_<random>``), dropped after the test; ``store``
is an open store there holding the agent ``"a"``, as the SQLite persistence tests start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentkeep.persistence import Store
from agentkeep.persistence.opening import open_store
from agentkeep.types.records import AgentRow


@pytest.fixture
def server(postgres_server: str) -> str:
    """The server's URL (no schema): the session's server (``tests/postgres_server.py``)."""
    return postgres_server


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    """A fresh schema's URL, dropped after the test (``tests/postgres_server.py``)."""
    return postgres_url


@pytest.fixture
def store(tmp_path: Path, pg_url: str) -> Iterator[Store]:
    with open_store(tmp_path, database=pg_url) as opened:
        opened.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={"role": "main"})))
        yield opened


@pytest.fixture
def systems_on_postgres(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> str:
    """Every ``AgentSystem.open`` of the test that names no database opens ``pg_url``
    (how a SQLite system suite runs again on PostgreSQL unchanged)."""
    from agentkeep.agent_system import _facade

    real = _facade.open_store

    def on_postgres(path: Any, *, database: str | None = None, **options: Any) -> Store:
        return real(path, database=database or pg_url, **options)

    monkeypatch.setattr(_facade, "open_store", on_postgres)
    return pg_url


@pytest.fixture
def stores_on_postgres(monkeypatch: pytest.MonkeyPatch, server: str) -> Iterator[str]:
    """Every ``Store.open(home, …)`` of the test opens a PostgreSQL schema of its own for
    that ``home`` (the same one each time the home is reopened) instead of ``home``'s
    ``agents.db``: how a SQLite writer suite runs again on PostgreSQL unchanged."""
    prefix = f"h_{uuid.uuid4().hex[:8]}_"
    schemas: dict[str, str] = {}
    separator = "&" if "?" in server else "?"

    def on_postgres(cls: type[Store], home: Any = None, **options: Any) -> Store:
        schema = schemas.setdefault(str(home), f"{prefix}{len(schemas)}")
        return open_store(home, database=f"{server}{separator}schema={schema}", **options)

    monkeypatch.setattr(Store, "open", classmethod(on_postgres))
    yield prefix
    with psycopg.connect(server, autocommit=True) as admin:
        for schema in schemas.values():
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
