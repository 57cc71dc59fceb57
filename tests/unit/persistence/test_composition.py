"""The transaction's shape: one statement object per table over one executor, the protocol
typed by those classes (a statement is declared once), SQL reaching a connection only through
the dialect, nobody outside ``persistence`` downcasting to the SQLite class, and the call-site
migration script's mapping pointing at statements that exist.

Its examples of old calls stay as written: migrate_tx_calls: skip
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import typing
from pathlib import Path
from types import ModuleType

import apsw
import pytest

from agentkeep.persistence import interface
from agentkeep.persistence.codec import Statements
from agentkeep.persistence.executor import Executor, TableStatements
from agentkeep.persistence.schema import MIGRATIONS, migrate
from agentkeep.persistence.transaction import SqliteTransaction
from agentkeep.types.records import AgentRow

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "agentkeep"


def _script() -> ModuleType:
    path = ROOT / "scripts" / "migrate_tx_calls.py"
    spec = importlib.util.spec_from_file_location("migrate_tx_calls", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _statement_attributes() -> dict[str, type]:
    hints = typing.get_type_hints(
        interface.Transaction, vars(sys.modules["agentkeep.persistence.transaction"])
    )
    return {name: hint for name, hint in hints.items() if isinstance(hint, type)}


def test_the_protocol_declares_tables_not_statements() -> None:
    attributes = _statement_attributes()
    assert set(attributes) == {
        "agents", "records", "archive", "ledger", "turns", "queue", "calls", "facts", "kv", "sql"
    }  # fmt: skip
    assert all(issubclass(cls, TableStatements) for cls in attributes.values())
    # Besides the tables, only the transaction's own scope: no statement is declared twice.
    methods = {
        name
        for name, value in vars(interface.Transaction).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    assert methods == {"active", "after_commit"}


def test_a_transaction_composes_one_object_per_table_over_one_executor() -> None:
    connection = apsw.Connection(":memory:")
    migrate(connection, MIGRATIONS)
    tx = SqliteTransaction(Statements(connection))
    executors = set()
    for name, cls in _statement_attributes().items():
        table = getattr(tx, name)
        assert type(table) is cls, name
        executors.add(id(table._x))
    assert len(executors) == 1
    assert isinstance(tx._x, Executor)


class _Recording:
    """A dialect that translates (so the executor calls it) by returning the text as is."""

    name = "recording"
    translates = True

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, sql: str) -> str:
        self.prepared.append(sql)
        return sql


def test_every_statement_goes_through_the_dialect() -> None:
    connection = apsw.Connection(":memory:")
    migrate(connection, MIGRATIONS)
    dialect = _Recording()
    executed: list[str] = []
    connection.exec_trace = lambda _cursor, sql, _bindings: executed.append(sql) or True
    tx = SqliteTransaction(Statements(connection, dialect=dialect))
    tx.agents.create(AgentRow(id="a", config={}, metadata={}))
    tx.ledger.append("a", "note", {"n": 1})
    tx.kv.write("k", 1)
    assert tx.sql.query("SELECT count(*) FROM agents") == [(1,)]
    assert executed
    assert executed == dialect.prepared


def test_nothing_outside_persistence_downcasts_a_transaction() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        if "persistence" in path.relative_to(SRC).parts[:1]:
            continue
        tree = ast.parse(path.read_text())
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        if "SqliteTransaction" in names:
            offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


def test_the_migration_scripts_mapping_names_statements_that_exist() -> None:
    script = _script()
    tables = _statement_attributes()
    for old, (table, new) in script.MOVES.items():
        assert table in tables, old
        assert hasattr(tables[table], new), f"{old} -> tx.{table}.{new}"
        assert script.CLASSES[table][0] == tables[table].__name__


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("tx.append_event(a, 't', {})", "tx.ledger.append(a, 't', {})"),
        ("lambda tx: tx.kv_read(k)", "lambda tx: tx.kv.read(k)"),
        ("self._tx.queued(a)", "self._tx.queue.messages(a)"),
        ("ctx.queued(a)", "ctx.queued(a)"),  # not a transaction
        ("patched(SqliteTransaction, 'move_turn', f)", "patched(TurnStatements, 'move', f)"),
        ("Transaction.started_turns", "TurnStatements.started"),
    ],
)
def test_the_migration_script_rewrites_once(before: str, after: str) -> None:
    script = _script()
    once, _ = script.rewrite(before)
    twice, changes = script.rewrite(once)
    assert (once, twice, changes) == (after, after, [])


def test_no_call_of_an_old_transaction_method_is_left() -> None:
    """After a merge, run ``python scripts/migrate_tx_calls.py`` (it lists what it rewrote)."""
    script = _script()
    left = {
        str(path): changes
        for path in script.files([str(ROOT / root) for root in script.DEFAULT_ROOTS])
        if (changes := script.rewrite(path.read_text())[1])
    }
    assert left == {}
