"""Power loss: the writer runs over a disk whose unsynced writes are dropped, torn or
partially applied at a seeded point; the surviving image must be whole.

Seeds: ``CHAOS_SEEDS=N`` runs seeds 0..N-1 (default 6), ``CHAOS_SEED=S`` replays one. The
campaign is :func:`agentkeep.chaos.power.run_campaign`; a sweep runs with
``python -m agentkeep.chaos.power --seeds 300 --jobs 2``.
"""

from __future__ import annotations

import random

import pytest

from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.power import DEFAULT_SEEDS, LYING_SYNC, plan, run_campaign
from agentkeep.chaos.powervfs import SECTOR_BYTES, FileImage, PowerGrid, PowerOffError, _Write

MUTANT_SEEDS = range(4)
POWER_CUT = pytest.mark.sqlite_only(
    "a power cut of the database file through the power-loss VFS (unsynced writes dropped or "
    "torn); a PostgreSQL store has no file under it: its crash is the server's immediate stop "
    "(pg_server_faults' restart)"
)


@POWER_CUT
@pytest.mark.parametrize("cut_seed", seeds_from_env(DEFAULT_SEEDS))
def test_acknowledged_transactions_survive_a_power_cut_whole(cut_seed: int) -> None:
    result = run_campaign(cut_seed)
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)


def test_every_cut_mode_and_round_shape_is_planned_and_one_seed_gives_one_plan() -> None:
    plans = [plan(seed) for seed in range(60)]
    assert plans == [plan(seed) for seed in range(60)]
    assert {p.mode for p in plans} == {"keep", "drop", "torn", "subset"}
    assert any(max(p.rounds) > 1 for p in plans), "group commits of several transactions"
    assert {p.checkpoint_every for p in plans} == {0, 1, 2, 3}


def test_unsynced_writes_are_volatile_and_a_sync_makes_them_durable() -> None:
    image = FileImage()
    image.pending.append(_Write(0, b"x" * 1024))
    image.sync()
    image.pending.append(_Write(0, b"y" * 1024))
    rng = random.Random(0)
    assert image.survive("drop", rng) == b"x" * 1024
    assert image.survive("keep", rng) == b"y" * 1024
    torn = {image.survive("torn", random.Random(seed)) for seed in range(40)}
    # Torn at a sector boundary: nothing, the first sector, or everything.
    assert torn == {
        b"x" * 1024,
        b"y" * SECTOR_BYTES + b"x" * (1024 - SECTOR_BYTES),
        b"y" * 1024,
    }


def test_after_the_cut_the_disk_refuses_every_operation() -> None:
    grid = PowerGrid(seed=0, mode="drop")
    grid.track("/nonexistent/agentkeep-power-test.db")
    grid.cut()
    path = "/nonexistent/agentkeep-power-test.db"
    for operation in (None, _Write(0, b"late")):
        with pytest.raises(PowerOffError, match="power is off"):
            grid.operate(path, operation, lambda: None)
    assert grid.surviving() == {path: b""}


@POWER_CUT
def test_the_checker_catches_a_disk_that_acknowledges_syncs_it_never_made() -> None:
    caught = [seed for seed in MUTANT_SEEDS if not run_campaign(seed, mutant=LYING_SYNC).ok]
    assert caught, f"no seed in {list(MUTANT_SEEDS)} caught the lying disk"
    lost = run_campaign(caught[0], mutant=LYING_SYNC)
    assert any("lost" in p or "integrity" in p for p in lost.problems), lost.describe()
