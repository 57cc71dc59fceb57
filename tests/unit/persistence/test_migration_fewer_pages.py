"""Migration 7: the per-step tables rebuilt so a commit dirties fewer pages.

The rebuild must keep every row, every column, CHECK, foreign key, ON DELETE action, index and
trigger; only the storage (WITHOUT ROWID or not) changes. It is tested on a database written
at schema 6 with rows in every table, and on a store upgraded in the middle of an agent's
life (queued messages, pending calls, turns, the ledger).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

import agentkeep as ak
from agentkeep.persistence import MIGRATIONS, Store, Transaction, schema
from agentkeep.persistence import store as store_module
from agentkeep.providers import script
from agentkeep.types import SystemMessage, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage
from agentkeep.types.records import AgentRow, OwedWork, PendingToolCall, QueuedMessage, QueuedNotice

pytestmark = pytest.mark.sqlite_only(
    "SQLite's page-level table rebuild (migration 7) on a schema-6 database file"
)

TIMEOUT = 30.0
BEFORE = tuple(m for m in MIGRATIONS if m.version <= 6)
# The schema this rebuild produces (the migrations after it add tables of their own).
UP_TO_7 = tuple(m for m in MIGRATIONS if m.version <= 7)

#: The tables the migration moves to WITHOUT ROWID, and the one it moves back to rowid.
WITHOUT_ROWID = {
    "owed_work",
    "context_tokens",
    "queue",
    "notices",
    "pending_calls",
    "tool_result_claims",
}
ROWID = {"session_events"}

# One row (or more) in every table schema 6 has, valid under every constraint.
_ROWS = """
INSERT INTO agents VALUES ('a', '{}', '{}', NULL, 1, NULL);
INSERT INTO agents VALUES ('b', '{}', '{"k": 1}', 'a', 2, NULL);
INSERT INTO records VALUES ('a', 1, '{"r": 1}'), ('a', 2, '{"r": 2}'), ('b', 1, '{"r": 3}');
INSERT INTO message_ids VALUES ('a', 'm1'), ('b', 'm2');
INSERT INTO queue_tails VALUES ('a', 'send', 3), ('a', 'steering', 1);
INSERT INTO queue VALUES ('a', 'send', 2, 'm2', '{"q": 2}'), ('a', 'send', 3, 'm3', '{"q": 3}'),
    ('a', 'steering', 1, 'm4', '{"q": 1}');
INSERT INTO notices VALUES ('a', 1, '{"n": 1}'), ('a', 2, '{"n": 2}'), ('b', 1, '{"n": 3}');
INSERT INTO pending_calls VALUES ('a', 'c1', 0, '{"c": 1}', NULL),
    ('a', 'c2', 1, '{"c": 2}', '{"done": true}'), ('b', 'c1', 0, '{"c": 3}', NULL);
INSERT INTO tool_result_claims VALUES ('a', 'c1', '{"res": 1}'), ('b', 'c1', '{"res": 2}');
INSERT INTO settings VALUES ('a', '{"model": "m"}');
INSERT INTO owed_work VALUES ('a', '{"stage": "tools"}'), ('b', '{"stage": "inference"}');
INSERT INTO context_tokens VALUES ('a', 10), ('b', 20);
INSERT INTO kv VALUES ('x', '1');
INSERT INTO definitions VALUES ('d', 1, 1, 1, NULL);
INSERT INTO definition_revisions VALUES ('r1', 'd', 1, 'h', '{}', 1);
INSERT INTO archived_epochs VALUES ('a', 1, 'compaction', NULL, 1, NULL);
INSERT INTO archived_records VALUES ('a', 1, 1, '{"old": 1}');
INSERT INTO sessions VALUES ('a', 'd', 'r1', 1, NULL, 1, 1, NULL);
INSERT INTO session_events VALUES ('a', 1, 'x', NULL, '{"e": 1}', 1),
    ('a', 2, 'y', 't1', '{"e": 2}', 2), ('b', 1, 'x', NULL, '{"e": 3}', 3);
INSERT INTO turns VALUES
    ('a', 1, 't1', 'k1', 'native', 'completed', '{}', 'm1', '{}', NULL, 1, 1, 2),
    ('a', 2, 't2', 'k2', 'native', 'running', '{}', 'm2', NULL, NULL, 3, 3, NULL);
INSERT INTO turn_inputs VALUES ('a', 'k1', 't1', 'send', 'h1', 'm1'),
    ('a', 'k2', 't2', 'send', 'h2', 'm2'), ('a', 'k3', 't2', 'steer', 'h3', 'm4');
"""


def _connect(path: Path) -> apsw.Connection:
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


def _old_database(path: Path) -> apsw.Connection:
    connection = _connect(path)
    schema.migrate(connection, BEFORE)
    with connection:
        connection.execute(_ROWS)
    return connection


def _tables(connection: apsw.Connection) -> list[str]:
    return [
        str(row[0])
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]


def _contents(connection: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the migration markers, in a storage-independent order."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    for table in _tables(connection):
        if table != "schema_migrations":
            found[table] = sorted(connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
    return found


def _definition(connection: apsw.Connection) -> dict[str, Any]:
    """What each table promises: its DDL (minus its storage), columns, foreign keys and their
    actions, indexes with their columns and uniqueness, and its triggers."""
    found: dict[str, Any] = {}
    for table in _tables(connection):
        (sql,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        # The key columns of every index but the primary key's (table_xinfo names those);
        # what an index stores after its key (a rowid or the primary key) is storage.
        indexes = {
            (name, unique, origin, partial): connection.execute(
                f"PRAGMA index_info('{name}')"
            ).fetchall()
            for _, name, unique, origin, partial in connection.execute(
                f"PRAGMA index_list('{table}')"
            )
            if origin != "pk"
        }
        found[table] = {
            "sql": str(sql).removesuffix(" WITHOUT ROWID"),
            # A key column's NOT NULL follows from the storage (WITHOUT ROWID implies it).
            "columns": [
                (cid, name, kind, None if pk else notnull, default, pk, hidden)
                for cid, name, kind, notnull, default, pk, hidden in connection.execute(
                    f"PRAGMA table_xinfo('{table}')"
                )
            ],
            "foreign_keys": connection.execute(f"PRAGMA foreign_key_list('{table}')").fetchall(),
            "indexes": indexes,
            "triggers": sorted(
                connection.execute(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
                    (table,),
                ).fetchall()
            ),
        }
    return found


def _without_rowid(connection: apsw.Connection, table: str) -> bool:
    row = connection.execute("SELECT wr FROM pragma_table_list WHERE name = ?", (table,)).fetchone()
    return bool(row[0])


def _wal_pages(path: Path, statements: str) -> int:
    """WAL frames (pages) one commit of ``statements`` appends to a fresh database."""
    connection = _connect(path)
    connection.execute("PRAGMA journal_mode = WAL")
    schema.migrate(connection, UP_TO_7)
    with connection:
        connection.execute("INSERT INTO agents VALUES ('a', '{}', '{}', NULL, 1, NULL)")
    frames: list[int] = []

    def hook(_connection: apsw.Connection, _name: str, pages: int) -> int:
        frames.append(pages)
        return apsw.SQLITE_OK

    connection.set_wal_hook(hook)
    connection.execute("SELECT 1")  # the hook sees only commits from here on
    before = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert before[0][0] == 0
    with connection:
        connection.execute(statements)
    connection.close()
    return frames[-1]


def test_the_rebuild_keeps_every_row_of_every_table(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    before = _contents(connection)
    assert all(before.values()), [name for name, rows in before.items() if not rows]
    assert schema.migrate(connection, UP_TO_7) == [7]
    assert _contents(connection) == before
    assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
    connection.close()


def test_the_rebuild_changes_only_the_storage(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    before = _definition(connection)
    storage = {table: _without_rowid(connection, table) for table in _tables(connection)}
    schema.migrate(connection, UP_TO_7)
    assert _definition(connection) == before
    for table, was in storage.items():
        expected = True if table in WITHOUT_ROWID else False if table in ROWID else was
        assert _without_rowid(connection, table) is expected, table
    # The one change beyond storage: the lone TEXT keys that admitted NULL no longer do.
    for table in ("owed_work", "context_tokens"):
        with pytest.raises(apsw.ConstraintError, match="NOT NULL"):
            connection.execute(f"INSERT INTO {table} VALUES (NULL, 1)")
    # A new database ends with the same schema as an upgraded one.
    fresh = _connect(tmp_path / "fresh.db")
    schema.migrate(fresh, UP_TO_7)
    assert _definition(fresh) == before
    master = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
    assert fresh.execute(master).fetchall() == connection.execute(master).fetchall()
    fresh.close()
    connection.close()


def test_the_upgraded_tables_keep_their_constraints_and_triggers(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    schema.migrate(connection, UP_TO_7)
    execute = connection.execute
    with pytest.raises(apsw.ConstraintError, match="CHECK"):
        execute("INSERT INTO queue VALUES ('a', 'other', 9, 'm9', '{}')")
    with pytest.raises(apsw.ConstraintError, match=r"UNIQUE|PRIMARY"):
        execute("INSERT INTO queue VALUES ('a', 'send', 2, 'm9', '{}')")
    with pytest.raises(apsw.ConstraintError, match="FOREIGN KEY"):
        execute("INSERT INTO owed_work VALUES ('nobody', '{}')")
    with pytest.raises(apsw.ConstraintError, match="FOREIGN KEY"):  # no result without its call
        execute("INSERT INTO tool_result_claims VALUES ('a', 'c9', '{}')")
    with pytest.raises(apsw.ConstraintError, match="immutable"):
        execute("UPDATE session_events SET data_json = '{}' WHERE agent_id = 'a'")
    with pytest.raises(apsw.ConstraintError, match="never deleted"):
        execute("DELETE FROM session_events WHERE agent_id = 'a'")
    with pytest.raises(apsw.ConstraintError, match="CHECK"):
        execute("INSERT INTO session_events VALUES ('a', 0, 'x', NULL, '{}', 1)")
    # A claim goes with its call.
    execute("DELETE FROM pending_calls WHERE agent_id = 'a' AND internal_id = 'c1'")
    assert execute("SELECT agent_id FROM tool_result_claims").fetchall() == [("b",)]
    # Deleting an agent row wipes everything it stored (the re-create cascade).
    execute("DELETE FROM agents WHERE id = 'b'")
    for table in WITHOUT_ROWID | ROWID:
        assert execute(f"SELECT count(*) FROM {table} WHERE agent_id = 'b'").fetchone() == (0,)
    assert execute("SELECT count(*) FROM session_events").fetchone() == (2,)
    connection.close()


def test_a_failed_rebuild_leaves_schema_6_and_its_rows_whole(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    before = (_definition(connection), _contents(connection))
    # A name the rebuild needs is taken: it fails after its first statements ran.
    connection.execute("CREATE TABLE pending_calls_v6 (x)")
    with pytest.raises(apsw.SQLError, match="pending_calls_v6"):
        schema.migrate(connection, UP_TO_7)
    assert schema.applied_migrations(connection)[-1][0] == 6
    connection.execute("DROP TABLE pending_calls_v6")
    assert (_definition(connection), _contents(connection)) == before
    assert not _without_rowid(connection, "owed_work")
    # Once the name is free the same migration applies, exactly once.
    assert schema.migrate(connection, UP_TO_7) == [7]
    assert schema.migrate(connection, UP_TO_7) == []
    assert _contents(connection) == before[1]
    connection.close()


@pytest.mark.parametrize(
    ("what", "statements", "old_pages"),
    [
        ("owed work", "INSERT INTO owed_work VALUES ('a', '{}')", 2),
        ("a queued message", "INSERT INTO queue VALUES ('a', 'send', 1, 'm', '{}')", 2),
        ("a notice", "INSERT INTO notices VALUES ('a', 1, '{}')", 2),
        ("context tokens", "INSERT INTO context_tokens VALUES ('a', 5)", 2),
        (
            "a pending call and its claim",
            "INSERT INTO pending_calls VALUES ('a', 'c', 0, '{}', NULL);"
            "INSERT INTO tool_result_claims VALUES ('a', 'c', '{}')",
            5,
        ),
    ],
)
def test_a_per_step_write_dirties_one_page_per_b_tree_it_needs(
    tmp_path: Path, what: str, statements: str, old_pages: int
) -> None:
    pages = _wal_pages(tmp_path / "agents.db", statements)
    # Schema 6 kept each of these rows in a table plus its key's index (old_pages).
    assert pages == old_pages - (2 if "claim" in what else 1), what


def test_an_agent_upgraded_mid_life_keeps_its_state_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "state"
    model = ak.ScriptedModel([script.text(f"reply {n}") for n in range(4)])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")

    def open_system() -> ak.AgentSystem:
        return ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1")

    # Schema 6: the store this code's previous release wrote.
    with monkeypatch.context() as patch:
        patch.setattr(store_module, "migrate", lambda conn: schema.migrate(conn, BEFORE))
        with open_system() as system:
            agent = system.create()
            for n in range(3):
                agent.send(ak.user(f"hello {n}"))
                agent.wait_for_idle(timeout_seconds=TIMEOUT)
            system.internals.store.transact(lambda tx: _in_flight(tx, agent.id))
            before = system.internals.store.read(lambda tx: _state(tx, agent.id))
            assert system.internals.store.read(_storage) == {"owed_work": 0}
    assert len(before["turns"]) == 3
    assert before["pending"]
    assert before["queued"]

    with Store.open(home) as upgraded:
        assert upgraded.read(_storage) == {"owed_work": 1}
        assert upgraded.read(lambda tx: _state(tx, agent.id)) == before
        upgraded.transact(lambda tx: _settle(tx, agent.id))

    with open_system() as system:
        again = system.resolve(agent.id)
        again.send(ak.user("after the upgrade"))
        again.wait_for_idle(timeout_seconds=TIMEOUT)
        after = system.internals.store.read(lambda tx: _state(tx, agent.id))
    assert [t.number for t in after["turns"]] == [1, 2, 3, 4]
    assert after["turns"][-1].status == "completed"
    sequences = [event.sequence for event in after["events"]]
    assert sequences == list(range(1, len(sequences) + 1))
    assert after["events"][: len(before["events"])] == before["events"]
    assert after["records"][: len(before["records"])] == before["records"]
    assert after["pending"] == after["queued"] == after["notices"] == []


def _in_flight(tx: Transaction, agent_id: str) -> None:
    """What an agent holds between steps: queued input, a notice, a tool batch with one
    result claimed, owed work, a token count."""
    tx.queue.enqueue(
        agent_id, QueuedMessage(id="q1", queue="send", message=UserMessage(content=()))
    )
    tx.queue.enqueue(
        agent_id, QueuedMessage(id="q2", queue="steering", message=UserMessage(content=()))
    )
    tx.queue.inject_notice(
        agent_id, QueuedNotice(message=SystemMessage(content=(TextBlock(text="n"),)))
    )
    calls = [
        PendingToolCall(
            internal_id=f"c{n}",
            index=n,
            call=ToolCallBlock(call_id=f"p{n}", name="search", arguments="{}"),
        )
        for n in range(2)
    ]
    tx.calls.put(agent_id, calls)
    result = ToolResultMessage(call_id="p0", content=(TextBlock(text="ok"),))
    assert tx.calls.claim_result(agent_id, "c0", result)
    tx.facts.write_owed(agent_id, OwedWork(stage="tools"))
    tx.facts.write_context_tokens(agent_id, 42)


def _settle(tx: Transaction, agent_id: str) -> None:
    for message in tx.queue.messages(agent_id):
        assert tx.queue.dequeue(agent_id, message.queue, message.seq)
    for notice in tx.queue.notices(agent_id):
        assert tx.queue.remove_notice(agent_id, notice.seq)
    for call in tx.calls.pending(agent_id):
        assert tx.calls.remove(agent_id, call.internal_id)
    assert tx.calls.result_claim(agent_id, "c0") is None  # went with its call
    assert tx.facts.delete_owed(agent_id)


def _state(tx: Transaction, agent_id: str) -> dict[str, Any]:
    return {
        "agent": tx.agents.get(agent_id),
        "records": tx.records.load(agent_id),
        "turns": tx.turns.page(agent_id),
        "events": tx.ledger.events(agent_id, limit=1000),
        "queued": tx.queue.messages(agent_id),
        "notices": tx.queue.notices(agent_id),
        "pending": tx.calls.pending(agent_id),
        "claim": tx.calls.result_claim(agent_id, "c0"),
        "owed": tx.facts.read_owed(agent_id),
        "owing": tx.facts.agents_owing_work(),
        "tokens": tx.facts.read_context_tokens(agent_id),
        "settings": tx.facts.read_settings(agent_id),
    }


def _storage(tx: Transaction) -> dict[str, int]:
    rows = tx.sql.query("SELECT wr FROM pragma_table_list WHERE name = 'owed_work'")
    return {"owed_work": int(rows[0][0])}


def test_agent_rows_survive_the_rebuild_untouched(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    connection.close()
    with Store.open(tmp_path) as opened:
        assert opened.read(lambda tx: tx.agents.get("b")) == AgentRow(
            id="b", config={}, metadata={"k": 1}, parent_id="a", created_at_ms=2
        )
        assert opened.read(lambda tx: tx.agents.children_of("a")) == ["b"]


def test_a_row_no_query_could_reach_does_not_block_the_upgrade(tmp_path: Path) -> None:
    connection = _old_database(tmp_path / "agents.db")
    # Schema 6 admitted a NULL lone TEXT key; every read looks rows up by agent id.
    connection.execute("INSERT INTO owed_work VALUES (NULL, '{}')")
    connection.execute("INSERT INTO context_tokens VALUES (NULL, 1)")
    assert schema.migrate(connection, UP_TO_7) == [7]
    assert connection.execute("SELECT agent_id FROM owed_work ORDER BY 1").fetchall() == [
        ("a",),
        ("b",),
    ]
    assert connection.execute("SELECT count(*) FROM context_tokens").fetchone() == (2,)
    connection.close()
