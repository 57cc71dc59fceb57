"""Chaos on PostgreSQL: the in-process suites, the process-kill campaign and the server faults.

Every test here takes ``chaos_server``: on the PostgreSQL pass the session's server
(``postgres_server``: ``AGENTKEEP_TEST_POSTGRES_URL`` or a throwaway cluster); on the SQLite
pass the server ``CHAOS_DATABASE`` or ``AGENTKEEP_TEST_POSTGRES_URL`` names, else skipped. Each
seed runs on a fresh schema (:mod:`agentkeep.chaos.backend`). Seeds: ``CHAOS_SEEDS`` /
``CHAOS_SEED`` as for every chaos suite, with small defaults; sweeps run with
``python -m agentkeep.chaos --database URL``, ``python -m agentkeep.chaos.process_kills
--database URL`` and ``python -m agentkeep.chaos.pg_server_faults``.
"""

from __future__ import annotations

import os

import pytest

from agentkeep.chaos.backend import SQLITE_ONLY, chaos_database, fresh_database, use_database
from agentkeep.chaos.campaigns import SUITES, seeds_from_env
from agentkeep.chaos.pg_server import judge_write_log
from agentkeep.chaos.pg_server_faults import (
    RECONNECT_WITHOUT_LOCK,
    OwnCluster,
    plan,
    run_campaign,
)
from agentkeep.chaos.process_kills import run_campaign as run_kills

PG_SUITES = [name for name in SUITES if name not in SQLITE_ONLY]


@pytest.fixture
def chaos_server(request: pytest.FixtureRequest) -> str:
    """The server the campaigns run on (see the module)."""
    if os.environ.get("AGENTKEEP_TEST_DATABASE") == "postgres":
        return str(request.getfixturevalue("postgres_server"))
    url = chaos_database() or os.environ.get("AGENTKEEP_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("needs a PostgreSQL server: the PostgreSQL pass, or CHAOS_DATABASE=URL")
    return url


@pytest.mark.slow
@pytest.mark.parametrize("suite", PG_SUITES)
@pytest.mark.parametrize("pg_seed", seeds_from_env(1))
def test_in_process_suites_hold_on_postgres(chaos_server: str, suite: str, pg_seed: int) -> None:
    with use_database(chaos_server):
        result = SUITES[suite](pg_seed)
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)


def test_each_seed_runs_on_a_fresh_schema_of_the_server(chaos_server: str) -> None:
    import psycopg

    from agentkeep.chaos.backend import server_url

    with fresh_database(chaos_server) as first, fresh_database(chaos_server) as second:
        assert first is not None
        assert second is not None
        assert first != second
        assert "schema=chaos_" in first
    with psycopg.connect(server_url(chaos_server), autocommit=True) as admin:
        names = [first.split("schema=")[1], second.split("schema=")[1]]
        left = admin.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", (names,)
        ).fetchall()
    assert left == [], "a seed's schema is dropped after it"
    with use_database(None), fresh_database() as none:
        assert none is None, "no server selected: SQLite"


@pytest.mark.slow
@pytest.mark.parametrize("kill_seed", seeds_from_env(1))
def test_process_kills_hold_on_postgres(chaos_server: str, kill_seed: int) -> None:
    with use_database(chaos_server):
        result = run_kills(kill_seed)
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)
    assert any(run.killed for run in result.runs), "a seed kills at least one process"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["terminate", "takeover"])
@pytest.mark.parametrize("fault_seed", seeds_from_env(1))
def test_server_faults_on_the_sessions_server(
    chaos_server: str, kind: str, fault_seed: int
) -> None:
    result = run_campaign(fault_seed, database=chaos_server, kinds=(kind,))  # type: ignore[arg-type]
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)
    assert result.writes > 0, "the write log saw the workers' writes"


@pytest.mark.slow
@pytest.mark.parametrize("fault_seed", seeds_from_env(1))
def test_server_stopped_immediately_and_restarted_mid_run(
    chaos_server: str, fault_seed: int
) -> None:
    cluster = OwnCluster()
    try:
        result = run_campaign(fault_seed, kinds=("restart",), cluster=cluster)
    finally:
        cluster.close()
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)
    assert sum(record.hits for record in result.faults) > 0, "the server was restarted"


@pytest.mark.slow
def test_a_writer_reconnecting_without_the_lock_is_caught(chaos_server: str) -> None:
    """The mutant replaces a dropped session without taking the lock or checking the owner
    row: once a thief took the store, the cut-off owner writes again, and ``O1``/``O2``
    (no write after ownership was lost, one owner at a time) must say so."""
    for seed in range(6):
        result = run_campaign(
            seed, database=chaos_server, kinds=("takeover",), mutant=RECONNECT_WITHOUT_LOCK
        )
        if any(p.startswith(("O1", "O2")) for p in result.problems):
            return
    pytest.fail("no seed of 0-5 caught a writer that reconnects without the lock")


def test_the_write_log_check_names_a_write_after_another_owner() -> None:
    app = "agentkeep pid=1 host=h w={}".format
    assert judge_write_log([app("a"), app("a"), app("b"), app("b")]) == []
    [problem] = judge_write_log([app("a"), app("b"), app("a")])
    assert problem.startswith("O1: owner a wrote again (write #3) after owner b")


def test_the_fault_plan_is_seeded() -> None:
    for seed in range(30):
        faults = plan(seed)
        assert faults == plan(seed)
        assert 1 <= len(faults) <= 3
        assert {f.kind for f in faults} <= {"terminate", "restart", "takeover"}
    assert {f.kind for seed in range(30) for f in plan(seed)} == {
        "terminate",
        "restart",
        "takeover",
    }
