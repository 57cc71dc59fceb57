"""Reading a store without owning it: no lock, no migrations, never a write."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.errors import (
    SchemaTooNewError,
    SchemaTooOldError,
    StoreDamagedError,
    StoreError,
)
from agentkeep.persistence import DATABASE_NAME, MIGRATIONS, Migration, Store
from agentkeep.persistence.readonly import ReadOnlyStore
from agentkeep.persistence.transaction import ReadOnlyTransactionError
from agentkeep.types.records import AgentRow

from .damage import flip_bytes, make_store

# Owns the store in another process, commits one more agent when told, waits to be released.
_OWNER = """
import sys
from agentkeep.persistence import Store
from agentkeep.types.records import AgentRow
store = Store.open(sys.argv[1])
print("owned", flush=True)
sys.stdin.readline()
store.transact(lambda tx: tx.agents.create(AgentRow(id="late", config={})))
print("committed", flush=True)
sys.stdin.readline()
store.close()
"""


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    make_store(tmp_path, agents=1)
    process = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "owned"
    try:
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)
        process.stdout.close()


def ids(store: ReadOnlyStore) -> list[str]:
    return [row.id for row in store.read(lambda tx: tx.agents.live())]


def test_reads_see_committed_state_while_another_process_owns_the_store(
    tmp_path: Path, owner: subprocess.Popen[str]
) -> None:
    assert owner.stdin is not None
    assert owner.stdout is not None
    with ReadOnlyStore.open(tmp_path) as store:
        assert ids(store) == ["agent0"]
        owner.stdin.write("\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "committed"
        # Each read is a new snapshot: the owner's commit is visible to the next one.
        assert ids(store) == ["agent0", "late"]
    assert owner.poll() is None  # the owner was never disturbed


def test_a_read_only_store_refuses_writes(tmp_path: Path) -> None:
    make_store(tmp_path, agents=1)
    with ReadOnlyStore.open(tmp_path) as store:
        with pytest.raises(ReadOnlyTransactionError):
            store.read(lambda tx: tx.agents.create(AgentRow(id="nope", config={})))
        assert ids(store) == ["agent0"]


def test_opening_read_only_changes_nothing_on_disk(tmp_path: Path) -> None:
    database = make_store(tmp_path, agents=2)
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    with ReadOnlyStore.open(tmp_path) as store:
        assert ids(store) == ["agent0", "agent1"]
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
    # No lock was taken: the owning opening works at once, also while a reader is open.
    with ReadOnlyStore.open(tmp_path) as reader, Store.open(tmp_path) as owner:
        owner.transact(lambda tx: tx.agents.create(AgentRow(id="more", config={})))
        assert ids(reader) == ["agent0", "agent1", "more"]


def _applied_versions(home: Path) -> list[int]:
    with ReadOnlyStore.open(home) as reader:
        rows = reader.read(
            lambda tx: tx.sql.query("SELECT version FROM schema_migrations ORDER BY version")
        )
    return [int(version) for (version,) in rows]


def test_a_schema_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    make_store(tmp_path, agents=0)
    with Store.open(tmp_path) as store:  # the marker a newer agentkeep's migration leaves
        store.transact(
            lambda tx: tx.sql.execute(
                "INSERT INTO schema_migrations (version, name, applied_at_ms) "
                "VALUES (99, 'future', 0)"
            )
        )
    with pytest.raises(SchemaTooNewError, match="schema version 99"):
        ReadOnlyStore.open(tmp_path)


def test_a_schema_older_than_the_code_is_refused_not_migrated(tmp_path: Path) -> None:
    make_store(tmp_path, agents=0)
    extended = (*MIGRATIONS, Migration(version=2, name="later", sql="CREATE TABLE later (x)"))
    with pytest.raises(SchemaTooOldError, match="Open it for writing once"):
        ReadOnlyStore.open(tmp_path, migrations=extended)
    assert _applied_versions(tmp_path) == [m.version for m in MIGRATIONS]


@pytest.mark.sqlite_only(
    "an empty SQLite database file (a schema without a store: its twin in postgres/)"
)
def test_an_empty_file_is_not_mistaken_for_a_store(tmp_path: Path) -> None:
    (tmp_path / DATABASE_NAME).write_bytes(b"")
    with pytest.raises(SchemaTooOldError, match="schema version 0"):
        ReadOnlyStore.open(tmp_path)
    with pytest.raises(StoreError, match="no agentkeep store"):
        ReadOnlyStore.open(tmp_path / "absent")


@pytest.mark.sqlite_only("a damaged page of SQLite's database file (the server owns its pages)")
def test_a_damaged_page_met_while_reading_is_a_store_damaged_error(tmp_path: Path) -> None:
    database = make_store(tmp_path, agents=2)
    flip_bytes(database, table="agents")
    with ReadOnlyStore.open(tmp_path) as store, pytest.raises(StoreDamagedError) as raised:
        ids(store)
    assert raised.value.path == str(database)
