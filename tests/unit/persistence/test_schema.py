"""Migrations: append-only, atomic with their marker, newer databases refused."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from agentkeep.errors import SchemaTooNewError, StoreError
from agentkeep.persistence import MIGRATIONS, SCHEMA_VERSION, Migration, Store
from agentkeep.persistence.schema import PAGE_SIZE, applied_migrations, migrate
from agentkeep.types.records import AgentRow


def _connect(path: Path) -> apsw.Connection:
    return apsw.Connection(str(path))


def test_a_new_database_gets_every_migration_once(tmp_path: Path) -> None:
    connection = _connect(tmp_path / "x.db")
    assert migrate(connection) == [m.version for m in MIGRATIONS]
    assert migrate(connection) == []
    assert applied_migrations(connection) == [(m.version, m.name) for m in MIGRATIONS]
    connection.close()


def test_a_failing_migration_leaves_no_marker_and_no_partial_schema(tmp_path: Path) -> None:
    connection = _connect(tmp_path / "x.db")
    broken = Migration(
        version=SCHEMA_VERSION + 1,
        name="broken",
        sql="CREATE TABLE half (x); INSERT INTO no_such_table VALUES (1);",
    )
    with pytest.raises(apsw.SQLError):
        migrate(connection, (*MIGRATIONS, broken))
    assert applied_migrations(connection)[-1][0] == SCHEMA_VERSION
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert "half" not in tables
    connection.close()


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    newer = SCHEMA_VERSION + 1
    with Store.open(tmp_path) as store:  # the marker a newer agentkeep's migration leaves
        store.transact(
            lambda tx: tx.sql.execute(
                "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, 0)",
                (newer, "future"),
            )
        )
    with pytest.raises(SchemaTooNewError, match="newer"):
        Store.open(tmp_path)
    # The refusal released the lock (refused again for the same reason, not as locked) and
    # wrote nothing (the marker is still there to refuse it).
    with pytest.raises(SchemaTooNewError, match=f"schema version {newer}"):
        Store.open(tmp_path)


def test_a_diverging_history_is_refused(tmp_path: Path) -> None:
    connection = _connect(tmp_path / "x.db")
    migrate(connection)
    renamed = tuple(Migration(version=m.version, name=m.name + "_x", sql=m.sql) for m in MIGRATIONS)
    with pytest.raises(StoreError, match="do not match"):
        migrate(connection, renamed)
    connection.close()


@pytest.mark.sqlite_only("SQLite's pragmas (WAL journal, synchronous=FULL, foreign_keys)")
def test_the_store_opens_with_wal_full_sync_and_foreign_keys(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        pragmas = store.transact(
            lambda tx: [
                tx._x.statements.connection.execute(f"PRAGMA {name}").fetchall()[0][0]  # type: ignore[attr-defined]
                for name in ("journal_mode", "synchronous", "foreign_keys", "wal_autocheckpoint")
            ]
        )
    assert pragmas == ["wal", 2, 1, 0]


def _page_size(store: Store) -> int:
    rows = store.read(lambda tx: tx.sql.query("PRAGMA page_size"))
    return int(rows[0][0])


@pytest.mark.sqlite_only("the page size of SQLite's database file")
def test_a_new_store_gets_the_smaller_page_size(tmp_path: Path) -> None:
    # A commit appends each dirtied page whole; smaller pages, fewer bytes to fsync.
    with Store.open(tmp_path) as store:
        assert _page_size(store) == PAGE_SIZE == 2048


@pytest.mark.sqlite_only("the page size of SQLite's database file")
def test_an_existing_store_keeps_its_page_size_and_works(tmp_path: Path) -> None:
    connection = _connect(tmp_path / "agents.db")
    connection.execute("PRAGMA page_size = 4096")
    connection.execute("PRAGMA journal_mode = WAL")
    migrate(connection)
    connection.close()
    with Store.open(tmp_path) as store:
        assert _page_size(store) == 4096
        store.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={})))
        assert store.read(lambda tx: tx.agents.get("a")) is not None
    connection = _connect(tmp_path / "agents.db")
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    connection.close()
