"""Migrations on PostgreSQL (the same keys as SQLite's, each with its marker in one
transaction, a newer store refused) and the read-only reader used while another process
owns the store."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from agentkeep.errors import SchemaTooNewError, StoreError
from agentkeep.persistence.executor import ReadOnlyTransactionError
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.opening import open_store
from agentkeep.persistence.postgres import PostgresReadOnlyStore, open_postgres_store, parse_url
from agentkeep.persistence.postgres.schema import POSTGRES_MIGRATIONS
from agentkeep.persistence.schema import MIGRATIONS, Migration
from agentkeep.types.records import AgentRow


def _query(url: str, sql: str) -> list[tuple[object, ...]]:
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as connection:
        connection.execute(f'SET search_path = "{target.schema}"')
        return connection.execute(sql).fetchall()


def _open_with(tmp_path: Path, url: str, migrations: tuple[Migration, ...]) -> None:
    open_postgres_store(
        url, tmp_path, faults=None, start_writer=True, ledger=LedgerHub(), migrations=migrations
    ).close()


def test_the_markers_are_sqlites_keys(tmp_path: Path, pg_url: str) -> None:
    open_store(tmp_path, database=pg_url).close()
    applied = _query(pg_url, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert applied == [(m.version, m.name) for m in MIGRATIONS]
    assert [(m.version, m.name) for m in POSTGRES_MIGRATIONS] == applied
    open_store(tmp_path, database=pg_url).close()  # reopening applies nothing twice
    assert len(_query(pg_url, "SELECT 1 FROM schema_migrations")) == len(MIGRATIONS)


def test_a_newer_store_is_refused_before_anything_is_migrated(tmp_path: Path, pg_url: str) -> None:
    newer = (
        *POSTGRES_MIGRATIONS,
        Migration(version=99, name="from_the_future", sql="CREATE TABLE future (id BIGINT)"),
    )
    _open_with(tmp_path, pg_url, newer)
    with pytest.raises(SchemaTooNewError, match="99"):
        open_store(tmp_path, database=pg_url)
    with pytest.raises(SchemaTooNewError):
        PostgresReadOnlyStore.open(pg_url, tmp_path)


def test_a_failing_migration_leaves_neither_its_tables_nor_its_marker(
    tmp_path: Path, pg_url: str
) -> None:
    broken = (
        *POSTGRES_MIGRATIONS,
        Migration(
            version=POSTGRES_MIGRATIONS[-1].version + 1,
            name="broken",
            sql="CREATE TABLE half (id BIGINT); SELECT 1/0",
        ),
    )
    with pytest.raises(psycopg.errors.DivisionByZero):
        _open_with(tmp_path, pg_url, broken)
    assert _query(pg_url, "SELECT to_regclass('half')") == [(None,)]
    last = POSTGRES_MIGRATIONS[-1].version
    assert _query(pg_url, "SELECT max(version) FROM schema_migrations") == [(last,)]
    open_store(tmp_path, database=pg_url).close()  # the store itself is intact


def test_a_session_dropped_while_migrating_fails_the_open_with_a_store_error(
    tmp_path: Path, pg_url: str
) -> None:
    """The owner's backend terminated while a migration runs (the chaos campaign's
    ``terminate`` fault found this): the open fails with a ``StoreError`` naming the store,
    not a bare psycopg error, and the lock is free for the next open."""
    cut = (
        *POSTGRES_MIGRATIONS,
        Migration(
            version=POSTGRES_MIGRATIONS[-1].version + 1,
            name="cut",
            sql="SELECT pg_terminate_backend(pg_backend_pid())",
        ),
    )
    with pytest.raises(StoreError, match="the connection dropped"):
        _open_with(tmp_path, pg_url, cut)
    open_store(tmp_path, database=pg_url).close()  # nothing half-applied, the lock free


def test_a_reader_sees_what_the_owner_committed_and_cannot_write(
    tmp_path: Path, pg_url: str
) -> None:
    with pytest.raises(StoreError, match="no agentkeep store"):
        PostgresReadOnlyStore.open(pg_url, tmp_path)
    with open_store(tmp_path, database=pg_url) as owner:
        owner.transact(lambda tx: tx.agents.create(AgentRow(id="seen", config={})))
        with PostgresReadOnlyStore.open(pg_url, tmp_path) as reader:
            assert reader.read(lambda tx: tx.agents.get("seen")) is not None
            owner.transact(lambda tx: tx.agents.create(AgentRow(id="later", config={})))
            assert reader.read(lambda tx: tx.agents.get("later")) is not None
            with pytest.raises(ReadOnlyTransactionError):
                reader.read(lambda tx: tx.agents.create(AgentRow(id="no", config={})))
