"""Failover and fencing: real ``agentkeep serve --partitions`` workers SIGKILLed and SIGSTOPped
past their lease while clients send with idempotency keys (:mod:`agentkeep.chaos.worker_failover`).

Runs on the PostgreSQL pass's server, or ``CHAOS_DATABASE`` / ``AGENTKEEP_TEST_POSTGRES_URL``;
skipped without one. Sweeps: ``python -m agentkeep.chaos.worker_failover --seeds N``.
"""

from __future__ import annotations

import os

import pytest

from agentkeep.chaos import failover_clients
from agentkeep.chaos.backend import chaos_database
from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.worker_failover import KEEP_WRITING_AFTER_LOST, plan, run_campaign
from agentkeep.chaos.worker_fence import FenceWrite, judge_fence_log


@pytest.fixture
def chaos_server(request: pytest.FixtureRequest) -> str:
    """The server the campaign runs on (see the module)."""
    if os.environ.get("AGENTKEEP_TEST_DATABASE") == "postgres":
        return str(request.getfixturevalue("postgres_server"))
    url = chaos_database() or os.environ.get("AGENTKEEP_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("needs a PostgreSQL server: the PostgreSQL pass, or CHAOS_DATABASE=URL")
    return url


@pytest.mark.slow
@pytest.mark.parametrize("failover_seed", seeds_from_env(1))
def test_workers_killed_and_stopped_past_their_lease_lose_nothing(
    chaos_server: str, failover_seed: int
) -> None:
    result = run_campaign(failover_seed, database=chaos_server)
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)
    assert {record.fault.kind for record in result.faults} == {"kill", "stop"}
    assert all(record.takeover is not None for record in result.faults), result.describe()
    assert result.accepted > 0
    assert result.writes > 0, "the fence log saw the workers' writes"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_writer_that_keeps_writing_after_it_lost_its_partition_is_caught(
    chaos_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant's writer reconnects after its worker was reaped without retaking its
    partition's lock: the resumed worker writes over the new owner, and ``F1``/``F2`` say so
    (seeds 0-4 catch it in 4 or 5 runs of 5: the stop lands while the stopped worker runs
    turns). A mutant's broken partition can leave a key that is never accepted; its client
    gives up after 20 s instead of the campaign's 120 (under load a seed took 140-260 s, and
    one seed hit the test's former 120 s timeout in CI): the fence log is judged either way."""
    monkeypatch.setattr(failover_clients, "SEND_SECONDS", 20.0)
    for seed in (0, 1, 2):
        result = run_campaign(
            seed, database=chaos_server, mutant=KEEP_WRITING_AFTER_LOST, settle=15.0
        )
        if any(p.startswith(("F1", "F2")) for p in result.problems):
            return
    pytest.fail("no seed of 0-2 caught a writer that writes on after losing its partition")


def test_the_fence_check_names_a_write_by_a_replaced_owner_and_an_epoch_going_back() -> None:
    def write(writer: str, owner: str, sequence: int) -> FenceWrite:
        return FenceWrite(f"agentkeep pid=1 host=h w={writer}", "a1", sequence, 2, owner, 0)

    epochs = {"old": 2, "new": 3}
    fine = [write("old", "old", 1), write("old", "old", 2), write("new", "new", 3)]
    assert judge_fence_log(fine, epochs) == []
    late = [*fine, write("old", "new", 4)]
    first, second = judge_fence_log(late, epochs)
    assert first.startswith("F1: write #4 (a1 seq 4, partition 2) by old")
    assert second.startswith("F2: write #4 (a1 seq 4) on partition 2 under epoch 2 by old")


def test_the_fault_plan_is_seeded_and_has_a_kill_and_a_stop() -> None:
    for seed in range(30):
        faults = plan(seed)
        assert faults == plan(seed)
        assert {"kill", "stop"} <= {f.kind for f in faults}
        assert all(f.stopped > 2.0 for f in faults if f.kind == "stop"), "past the lease"
