"""Spec §7.9 — a batch's results land in call order — checked by every in-process suite.

The campaigns' model asks for batches of 1–3 calls and their calls finish in a seeded order
(:mod:`agentkeep.chaos.batches`), so a later call often finishes first. Under the mutant
:func:`~agentkeep.chaos.mutants.results_in_finish_order` the runtime commits each result as
its call finishes; every in-process suite must catch that within the CI seed count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.chaos import BatchingModel, CompletionOrder, Offer
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, SUITES, first_caught
from agentkeep.chaos.invariants import check_state
from agentkeep.chaos.mutants import results_in_finish_order
from agentkeep.chaos.world import ChaosWorld
from agentkeep.persistence.records import BlockRecord, ToolRecord
from agentkeep.providers.types import Context, ToolCallBlock


@pytest.mark.parametrize("suite", list(SUITES))
def test_each_suite_catches_results_committed_in_finish_order(suite: str) -> None:
    with results_in_finish_order():
        caught = first_caught(SUITES[suite], range(DEFAULT_SEEDS), {9})
    assert caught is not None, (
        f"{suite} never noticed results committed in finish order in {DEFAULT_SEEDS} seeds"
    )
    assert "results land in call order" in caught.describe()


def test_the_mutant_is_undone_when_it_leaves() -> None:
    with results_in_finish_order():
        pass
    assert SUITES["crash_recovery"](0).ok


def test_the_checker_names_a_result_that_overtook_an_earlier_call(tmp_path: Path) -> None:
    """One healthy process under the mutant: the seeded order holds ``call-0`` until
    ``call-2`` told its result, so ``call-2``'s result lands first: a §7.9 violation
    naming the call it overtook."""
    seed = _seed_holding("call-0", "call-2")
    world = ChaosWorld(tmp_path / "state", seed)
    world.create_agent()
    with results_in_finish_order():
        world.run_process(messages=_first_batch_of_three(seed))
    found = check_state(world, world.durable(), process=1)
    assert any(
        v.invariant == 9 and "'call-2'" in v.detail and "call-0" in v.detail for v in found
    ), found


def test_without_the_mutant_the_same_batch_lands_in_call_order(tmp_path: Path) -> None:
    seed = _seed_holding("call-0", "call-2")
    world = ChaosWorld(tmp_path / "state", seed)
    world.create_agent()
    world.run_process(messages=_first_batch_of_three(seed))
    state = world.durable()
    calls = [
        r.block.call_id
        for r in state.records
        if isinstance(r, BlockRecord) and isinstance(r.block, ToolCallBlock)
    ]
    results = [r.message.call_id for r in state.records if isinstance(r, ToolRecord)]
    assert calls == results == ["call-0", "call-1", "call-2"]
    assert check_state(world, state, process=1) == []
    assert world.completion is not None
    assert world.completion.timeouts == []


# -- helpers ---------------------------------------------------------------------------------


def _first_batch_of_three(seed: int) -> list[Offer]:
    assert _first_batch_size(seed) == 3
    return [Offer(id="m0", text="m0")]


def _first_batch_size(seed: int) -> int:
    context = Context(instructions="", messages=(ak.user("m0"),))
    return BatchingModel(seed=seed).batch_size(context)


def _seed_holding(held: str, target: str) -> int:
    """The first seed whose first message gets a batch of three calls in which ``held``
    finishes after ``target``."""
    batch = ["call-0", "call-1", "call-2"]
    for seed in range(1000):
        if _first_batch_size(seed) == 3 and CompletionOrder(seed).after(batch, held) == target:
            return seed
    raise AssertionError("no seed holds the call")
