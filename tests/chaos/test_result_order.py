"""Invariant I14 — a batch's results land in call order — checked by every in-process suite.

The campaigns' model asks for batches of 1–3 calls and their calls finish in a seeded order
(:mod:`agentkeep.chaos.batches`), so a later call often finishes first. Under the mutant
:func:`~agentkeep.chaos._mutants.runtime.results_in_finish_order` the runtime commits each result as
its call finishes; every in-process suite must catch that within the CI seed count.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos import BatchingModel, CompletionOrder, Offer
from agentkeep.chaos._mutants.runtime import results_in_finish_order
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, SUITES, first_caught
from agentkeep.chaos.invariants import check_state
from agentkeep.chaos.world import ChaosWorld
from agentkeep.providers.protocol import CancelToken
from agentkeep.types import Context, ToolCallBlock
from agentkeep.types.records import BlockRecord, ToolRecord


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
    ``call-2`` told its result, so ``call-2``'s result lands first: an invariant I14 violation
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


# -- the completion order itself ---------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """What :meth:`CompletionOrder.hold` reads of a tool's context."""

    provider_call_id: str
    agent_id: str = "a"
    cancel: CancelToken = field(default_factory=CancelToken)


BATCH = ("call-0", "call-1", "call-2")


def _always(**options: Any) -> CompletionOrder:
    return CompletionOrder(0, hold_rate=1.0, durable=lambda call_id: True, timeout=5, **options)


def test_holds_point_forward_and_are_a_function_of_the_seed() -> None:
    for seed in range(50):
        order = CompletionOrder(seed, durable=lambda call_id: True)
        for position, call_id in enumerate(BATCH):
            target = order.after(BATCH, call_id)
            assert target is None or BATCH.index(target) > position
            assert CompletionOrder(seed, durable=lambda c: True).after(BATCH, call_id) == target
    assert CompletionOrder(0).after(BATCH, "call-2") is None  # the last call is never held


def test_a_held_call_finishes_after_the_later_call_told_its_result() -> None:
    order = _always()
    held = _Call("call-1")
    finished: list[str] = []

    def first() -> None:
        order.hold(1, held, ("call-1", "call-2"))
        finished.append("call-1")

    def second() -> None:
        finished.append("call-2")
        order.finished(1, "a", "call-2")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert finished == ["call-2", "call-1"]
    assert order.timeouts == []


def test_a_cancelled_call_stops_waiting_and_an_undispatched_call_is_not_waited_for() -> None:
    cancelled = _Call("call-1")
    cancelled.cancel.cancel()
    order = _always()
    order.hold(1, cancelled, ("call-1", "call-2"))  # call-2 never finishes
    cut_short = _always(dispatched=lambda agent_id: frozenset({"call-1"}))
    cut_short.hold(1, _Call("call-1"), ("call-1", "call-2"))  # call-2 never dispatched
    assert order.timeouts == cut_short.timeouts == []
