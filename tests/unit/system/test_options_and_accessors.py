"""``AgentSystem.open``'s ``database_path`` and ``now`` options, and ``feature(name)``."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.postgres_server import on_sqlite

import agentkeep as ak

TIMEOUT = 30.0
#: 2023-11-14T22:13:20.250Z: no test runs at this moment, so a stamp equal to it was injected.
FIXED_SECONDS = 1_700_000_000.25
FIXED_MS = 1_700_000_000_250


class Goal(ak.Feature):
    name = "goal"

    def __init__(self) -> None:
        self.paused = False


class Other(ak.Feature):
    name = "other"


def _open(home: Path, **options: Any) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("demo", ak.DemoModel(), kind="gym")
    return ak.AgentSystem.open(home, providers=providers, provider="demo", **options)


# -- feature(name) ---------------------------------------------------------------------------


def test_feature_returns_the_running_instance(tmp_path: Path) -> None:
    goal = Goal()
    with _open(tmp_path, features=[goal, Other()]) as system:
        assert system.feature("goal") is goal
        agent = system.create()
        assert agent.feature("goal") is goal
        with pytest.raises(ak.UnknownFeatureError, match=r'no feature "goa" .*goal, other') as e:
            system.feature("goa")
        assert (e.value.code, e.value.name, e.value.known) == (
            "unknown_feature",
            "goa",
            ("goal", "other"),
        )


# -- database_path ---------------------------------------------------------------------------


@pytest.mark.sqlite_only("database_path places SQLite's database file (a server's store is a URL)")
def test_database_path_puts_the_database_there_and_reopens_it(tmp_path: Path) -> None:
    home = tmp_path / "state"
    database = tmp_path / "elsewhere" / "nested" / "mine.sqlite"
    with _open(home, database_path=database) as system:
        agent = system.create(ak.AgentConfig(metadata={"title": "kept"}))
        agent.send(ak.user("hello"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert system.internals.store.path == database
        with pytest.raises(ak.StoreLockedError):  # one owner per database, wherever it is
            _open(tmp_path / "another-home", database_path=database)

    assert database.is_file()
    assert (database.parent / "mine.sqlite.lock").exists()
    assert not (home / "agents.db").exists()
    with _open(home, database_path=str(database)) as system:
        assert system.metadata(agent.id) == {"title": "kept"}
        assert len(system.transcript(agent.id)) == 2
    # The state directory's own database is another one.
    with _open(home) as system, pytest.raises(ak.UnknownAgentError):
        system.resolve(agent.id)


def test_database_path_must_be_a_path(tmp_path: Path) -> None:
    with pytest.raises(ak.InvalidConfigError, match="database_path must be a path"):
        _open(tmp_path, database_path=3)  # type: ignore[typeddict-item]


# -- now -------------------------------------------------------------------------------------


def _stamps(store: Any) -> dict[str, list[int]]:
    """Every timestamp column of the store (either backend), by ``table.column``."""
    if on_sqlite():
        catalog = (
            "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table'"
        )
    else:
        catalog = (
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema()"
        )

    def read(tx: Any) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for table, column in tx.sql.query(catalog):
            if str(column).endswith("_at_ms"):
                rows = tx.sql.query(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")
                if rows:
                    found[f"{table}.{column}"] = [int(row[0]) for row in rows]
        return found

    found: dict[str, list[int]] = store.read(read)
    return found


@pytest.mark.parametrize(
    "now",
    [
        lambda: FIXED_SECONDS,
        lambda: datetime.datetime.fromtimestamp(FIXED_SECONDS, tz=datetime.UTC),
    ],
    ids=["seconds", "datetime"],
)
def test_every_timestamp_written_comes_from_the_injected_clock(tmp_path: Path, now: Any) -> None:
    with _open(tmp_path, now=now) as system:
        system.registry.create({"id": "reviewer"})
        session = system.sessions.start("reviewer")
        turn = system.sessions.send(session.id, "hello").wait(timeout_seconds=TIMEOUT)
        assert turn.status == "completed"
        agent = system.create()
        agent.send(ak.user("hi"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        system.compact(agent.id, wait=True, timeout_seconds=TIMEOUT)
        system.sessions.archive(session.id)
        events = system.events(session.id, limit=1000)
        record = system.sessions.get(session.id)
        definition = system.registry.get("reviewer")
        stamps = _stamps(system.internals.store)

    assert {event.created_at_ms for event in events} == {FIXED_MS}
    assert (turn.created_at_ms, turn.started_at_ms, turn.completed_at_ms) == (FIXED_MS,) * 3
    assert (record.created_at_ms, record.updated_at_ms, record.archived_at_ms) == (FIXED_MS,) * 3
    assert (definition.created_at_ms, definition.updated_at_ms) == (FIXED_MS, FIXED_MS)
    expected_columns = {
        "agents.created_at_ms",
        "schema_migrations.applied_at_ms",
        "turns.created_at_ms",
        "sessions.archived_at_ms",
        "definitions.created_at_ms",
    }
    assert expected_columns <= set(stamps)
    assert {column: set(values) for column, values in stamps.items()} == {
        column: {FIXED_MS} for column in stamps
    }


def test_now_must_be_a_function(tmp_path: Path) -> None:
    with pytest.raises(ak.InvalidConfigError, match="now must be a function"):
        _open(tmp_path, now=FIXED_SECONDS)  # type: ignore[typeddict-item]
