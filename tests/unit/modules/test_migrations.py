"""Module migrations: each key runs exactly once, in module then key order, each in its own
transaction with its key recorded; a failing one aborts ``open`` naming module and key,
leaving the keys before it recorded and nothing of itself."""

from __future__ import annotations

import pytest
from tests.unit.modules.conftest import TIMEOUT, World, threads_now

import agentkeep as ak
from agentkeep.modules import ModuleContext


def notes_module(runs: list[str], *, extra: bool = False) -> ak.Module:
    def create(ctx: ModuleContext) -> None:
        runs.append("notes:v1")
        assert ctx.db.in_transaction
        # Portable SQL (it runs on either backend): ids given, not SQLite's implicit rowid.
        ctx.db.execute("CREATE TABLE notes_items (id INTEGER PRIMARY KEY, body TEXT)")

    def seed(ctx: ModuleContext) -> None:
        runs.append("notes:v2")
        ctx.db.execute("INSERT INTO notes_items (id, body) VALUES (?, ?)", (1, "first"))
        ctx.shared_kv.write("seeded", True)

    def more(ctx: ModuleContext) -> None:
        runs.append("notes:v3")
        ctx.db.execute("INSERT INTO notes_items (id, body) VALUES (?, ?)", (2, "second"))

    migrations = [("v1", create), ("v2", seed)] + ([("v3", more)] if extra else [])
    return ak.Module("notes", migrations=migrations)


def test_each_key_runs_once_in_module_then_key_order_across_reopens(world: World) -> None:
    runs: list[str] = []

    def other(ctx: ModuleContext) -> None:
        runs.append("audit:a")

    audit = ak.Module("audit", migrations=[("a", other)])
    world.open(modules=[notes_module(runs), audit]).close(timeout_seconds=TIMEOUT)
    assert runs == ["notes:v1", "notes:v2", "audit:a"]

    world.open(modules=[notes_module(runs), audit]).close(timeout_seconds=TIMEOUT)
    assert runs == ["notes:v1", "notes:v2", "audit:a"]  # nothing again

    system = world.open(modules=[notes_module(runs, extra=True), audit])
    assert runs[3:] == ["notes:v3"]  # only the new key
    store = system.internals.store
    assert store.read(lambda tx: tx.sql.query("SELECT body FROM notes_items ORDER BY id")) == [
        ("first",),
        ("second",),
    ]
    recorded = store.read(
        lambda tx: tx.sql.query("SELECT module, key FROM module_migrations ORDER BY module, key")
    )
    assert recorded == [("audit", "a"), ("notes", "v1"), ("notes", "v2"), ("notes", "v3")]
    assert store.read(lambda tx: tx.kv.scan("system.feature.notes.")) == [
        ("system.feature.notes.seeded", True)
    ]


def test_a_failing_migration_aborts_open_naming_it_and_runs_again_next_open(
    world: World,
) -> None:
    runs: list[str] = []
    broken = True

    def create(ctx: ModuleContext) -> None:
        runs.append("v1")
        ctx.db.execute("CREATE TABLE jobs_items (id INTEGER PRIMARY KEY)")

    def fill(ctx: ModuleContext) -> None:
        runs.append("v2")
        ctx.db.execute("INSERT INTO jobs_items (id) VALUES (1)")
        ctx.db.execute("CREATE TABLE jobs_extra (id INTEGER)")
        ctx.shared_kv.write("filled", True)
        if broken:
            raise RuntimeError("the migration broke half way")

    def jobs() -> ak.Module:
        return ak.Module("jobs", migrations=[("v1", create), ("v2", fill)])

    before = threads_now()
    with pytest.raises(ak.ModuleMigrationError) as raised:
        world.open(modules=[jobs()])
    error = raised.value
    assert (error.module, error.key, error.code) == ("jobs", "v2", "module_migration_failed")
    assert "jobs" in str(error)
    assert "v2" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
    assert threads_now() - before == set()  # open stopped everything it started

    # v1 stays recorded; nothing of v2 was kept (its rows, its table, its KV, its key).
    assert world.rows("SELECT module, key FROM module_migrations") == [("jobs", "v1")]
    assert world.rows("SELECT count(*) FROM jobs_items") == [(0,)]
    with pytest.raises(Exception, match="jobs_extra"):  # the table it created is gone too
        world.rows("SELECT count(*) FROM jobs_extra")
    assert world.rows("SELECT key FROM kv WHERE key LIKE 'system.feature.jobs.%'") == []

    broken = False
    system = world.open(modules=[jobs()])
    assert runs == ["v1", "v2", "v2"]  # v1 once; v2 again, whole, once it succeeds
    assert system.internals.store.read(
        lambda tx: tx.sql.query("SELECT module, key FROM module_migrations ORDER BY key")
    ) == [("jobs", "v1"), ("jobs", "v2")]


def test_migrations_run_before_any_before_start(world: World) -> None:
    order: list[str] = []

    def first_start(ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
        order.append("first.before_start")

    def second_migration(ctx: ModuleContext) -> None:
        order.append("second.m1")

    world.open(
        modules=[
            ak.Module(
                "first",
                migrations=[("m1", lambda ctx: order.append("first.m1"))],
                before_start=first_start,
            ),
            ak.Module("second", migrations=[("m1", second_migration)]),
        ]
    )
    assert order == ["first.m1", "second.m1", "first.before_start"]


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ([ak.Module("dup"), ak.Module("dup")], "unique"),
        ([ak.Module("")], "non-empty name"),
        ([ak.Module("m", migrations=[("k", print), ("k", print)])], "repeated"),
        ([ak.Module("m", migrations=[("", print)])], "non-empty string key"),
        (["not a module"], "not an ak.Module"),
    ],
)
def test_bad_modules_are_refused_before_the_store_is_touched(
    world: World, modules: list[ak.Module], message: str
) -> None:
    with pytest.raises(ak.InvalidConfigError, match=message):
        world.open(modules=modules)
    assert not world.home.exists()


def test_a_module_may_not_take_a_features_name(world: World) -> None:
    class Tagger(ak.Feature):
        name = "tagger"

    with pytest.raises(ak.InvalidConfigError, match='module "tagger" has the name of a feature'):
        world.open(features=[Tagger()], modules=[ak.Module("tagger")])
