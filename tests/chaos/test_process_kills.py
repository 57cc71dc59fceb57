"""Real process kills: a child process running an AgentSystem is SIGKILLed again and again.

Seeds: ``CHAOS_SEEDS=N`` runs seeds 0..N-1 (default 6), ``CHAOS_SEED=S`` replays one. The
campaign is :func:`agentkeep.chaos.process_kills.run_campaign`; a sweep runs with
``python -m agentkeep.chaos.process_kills --seeds 300 --jobs 2``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkeep.agent_system import AgentSystem
from agentkeep.agent_system._internals import SystemInternals
from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.process_kills import DEFAULT_SEEDS, Kill, plan, run_campaign
from agentkeep.chaos.process_worker import RERUN_FRAGILE
from agentkeep.persistence.store import Store
from agentkeep.providers.catalog import Providers

MUTANT_SEEDS = range(8, 14)


@pytest.mark.slow
@pytest.mark.parametrize("kill_seed", seeds_from_env(DEFAULT_SEEDS))
def test_an_agent_killed_again_and_again_answers_everything_once(kill_seed: int) -> None:
    result = run_campaign(kill_seed)
    if not result.ok:
        pytest.fail(result.describe(), pytrace=False)


def test_the_plan_is_one_to_five_kills_then_a_process_left_alone() -> None:
    for seed in range(50):
        kills = plan(seed)
        assert kills == plan(seed), "one seed, one plan"
        assert 1 <= len(kills) - 1 <= 5
        assert kills[-1] == Kill(None)
        assert all(kill.kind is not None for kill in kills[:-1])


@pytest.mark.slow
def test_a_kill_between_a_side_effect_and_its_result_leaves_the_call_answered_once() -> None:
    # The second tool call is the fragile one (the RespondingModel alternates).
    result = run_campaign(0, kills=[Kill("tool", at=2), Kill("store", at=1), Kill(None)])
    assert result.runs[0].killed, result.describe()
    assert result.runs[0].tool_gap, result.describe()
    assert result.ok, result.describe()


@pytest.mark.slow
def test_the_checker_catches_a_runtime_that_reruns_a_fragile_tool_on_resume() -> None:
    """The mutant treats every resumed call as fresh: some seed must catch it re-running."""
    caught = []
    for seed in MUTANT_SEEDS:
        result = run_campaign(seed, mutant=RERUN_FRAGILE)
        if any("§7.12" in problem for problem in result.problems):
            caught.append(seed)
            break
    assert caught, f"no seed in {list(MUTANT_SEEDS)} caught the re-run fragile tool"


@pytest.mark.slow
def test_the_mutant_is_caught_by_a_kill_between_side_effect_and_result() -> None:
    result = run_campaign(0, kills=[Kill("tool", at=2), Kill(None)], mutant=RERUN_FRAGILE)
    assert any("non-durable fragile_tool ran 2 times for call-1" in p for p in result.problems), (
        result.describe()
    )


def test_a_system_that_fails_to_construct_releases_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the process-kill sweep: while the runtime's constructor raised (a half-landed
    change), every worker process hung forever instead of exiting with the error."""
    opened: list[Store] = []

    def failing_init(self: AgentSystem, parts: SystemInternals, **_options: object) -> None:
        opened.append(parts.store)
        raise RuntimeError("the constructor failed")

    monkeypatch.setattr(AgentSystem, "__init__", failing_init)
    try:
        with pytest.raises(RuntimeError, match="constructor failed"):
            AgentSystem.open(tmp_path, providers=Providers())
        assert opened, "the constructor was reached"
        assert opened[0].closed, "the store is still open after open() failed"
    finally:
        for store in opened:
            store.close()  # never leave a non-daemon writer thread behind
