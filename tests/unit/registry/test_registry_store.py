"""The registry in the store: concurrent writers, the tables' own guards, and the migration."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.errors import ExpiredScopeError, StoreConstraintError
from agentkeep.persistence import MIGRATIONS, ReadOnlyTransactionError
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readers import open_connection
from agentkeep.persistence.schema import applied_migrations, migrate
from agentkeep.persistence.store import DATABASE_NAME
from agentkeep.registry import DefinitionExistsError, DefinitionRecord, Registry

from .conftest import Opener


def _race(callers: list[threading.Thread]) -> None:
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(timeout=30)
        assert not thread.is_alive()


def _create_twice_at_once(
    registry: Registry, identity: str
) -> tuple[list[DefinitionRecord], list[DefinitionExistsError]]:
    start = threading.Barrier(2)
    won: list[DefinitionRecord] = []
    lost: list[DefinitionExistsError] = []

    def create(name: str) -> None:
        start.wait()
        try:
            won.append(registry.create({"id": identity, "name": name}))
        except DefinitionExistsError as exc:
            lost.append(exc)

    _race([threading.Thread(target=create, args=(name,)) for name in ("left", "right")])
    return won, lost


def test_two_creates_of_one_id_have_exactly_one_winner(registry: Registry) -> None:
    for round_ in range(10):
        identity = f"race-{round_}"
        won, lost = _create_twice_at_once(registry, identity)
        assert len(won) == 1
        assert len(lost) == 1
        assert registry.get(identity) == won[0]
        assert [r.number for r in registry.revisions(identity)] == [1]


def test_concurrent_updates_lose_nothing_and_number_densely(registry: Registry) -> None:
    registry.create({"id": "shared"})
    patches = [
        {"resources": {"files": ["f"]}},
        {"resources": {"skills": ["s"]}},
        {"resources": {"subagents": ["a"]}},
        {"toolbox": {"toolIds": ["t"]}},
        {"toolbox": {"actionIds": ["x"]}},
        {"workspace": {"cwd": "/w"}},
        {"instructions": "i"},
        {"authRef": "r"},
    ]
    start = threading.Barrier(len(patches))
    changed: list[bool] = []

    def update(patch: dict[str, object]) -> None:
        start.wait()
        changed.append(registry.update("shared", patch).changed)

    _race([threading.Thread(target=update, args=(patch,)) for patch in patches])
    assert changed == [True] * len(patches)
    # Each update read the pointer and moved it in one transaction: every field survived.
    definition = registry.get("shared").definition
    assert definition.resources == ak.registry.Resources(files=["f"], skills=["s"], subagents=["a"])
    assert definition.toolbox == ak.registry.Toolbox(tool_ids=["t"], action_ids=["x"])
    assert (definition.workspace.cwd, definition.instructions, definition.auth_ref) == (
        "/w",
        "i",
        "r",
    )
    numbers = [r.number for r in registry.revisions("shared")]
    assert numbers == list(range(1, len(patches) + 2))


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("UPDATE definition_revisions SET hash = 'forged'", "immutable"),
        ("DELETE FROM definition_revisions", "never deleted"),
        ("DELETE FROM definitions", "never deleted"),
        ("UPDATE definitions SET current_revision = 7", "its own revisions"),
    ],
)
def test_the_tables_refuse_to_rewrite_history(
    open_system: Opener, statement: str, message: str
) -> None:
    system = open_system()
    system.registry.create({"id": "kept"})
    before = system.registry.get("kept")

    def rewrite(tx: Transaction) -> int:
        return tx.sql.execute(statement)

    with pytest.raises(StoreConstraintError, match=message):
        system.internals.store.transact(rewrite)
    assert system.registry.get("kept") == before


def test_a_database_from_before_the_registry_gains_it_on_open(tmp_path: Path) -> None:
    home = tmp_path / "state"
    home.mkdir()
    names = [m.name for m in MIGRATIONS]
    older = MIGRATIONS[: names.index("definition_registry")]
    connection = open_connection(str(home / DATABASE_NAME))
    migrate(connection, older)
    assert "definition_registry" not in dict(applied_migrations(connection)).values()
    connection.close()

    with ak.AgentSystem.open(home, providers=ak.Providers()) as system:
        assert system.registry.create({"id": "first"}).current_revision == 1
        applied = system.internals.store.read(_applied_migration_names)
    assert "definition_registry" in applied


def _applied_migration_names(tx: Transaction) -> list[str]:
    return [str(row[0]) for row in tx.sql.query("SELECT name FROM schema_migrations")]


def test_the_registrys_statements_keep_the_transactions_scope_rules(open_system: Opener) -> None:
    system = open_system()
    kept: list[Transaction] = []

    def write_in_a_read(tx: Transaction) -> int:
        kept.append(tx)
        return tx.sql.execute("UPDATE definitions SET updated_at_ms = 0")

    with pytest.raises(ReadOnlyTransactionError):
        system.internals.store.read(write_in_a_read)
    with pytest.raises(ExpiredScopeError):
        kept[0].sql.query("SELECT 1")
