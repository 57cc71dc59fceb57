"""The ``writer_failures`` campaign: the store writer itself fails mid-work and the system
supervisor restarts it and the agents after it, within the process.

Seeds: ``CHAOS_SEEDS=N`` runs seeds 0..N-1, ``CHAOS_SEED=S`` replays one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka
import pytest

from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.supervisor import start_supervisor
from agentkeep.chaos.campaigns import SUITES, CampaignResult, first_caught, writer_failures


def test_writer_failures(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(writer_failures(seed))


def test_the_suite_is_registered() -> None:
    assert SUITES["writer_failures"] is writer_failures


def test_the_campaign_catches_a_tier_restart_that_forgets_the_owed_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutant restarts the agent tier after the writer but resumes nobody: an agent
    stopped mid-turn stays owed until some later open."""

    def start_tier(self: AgentTier) -> pykka.ActorRef[Any]:
        supervisor = start_supervisor(
            "agents", strategy="one_for_one", intensity=self._intensity, backoff=self._backoff
        )
        self._directory.start_over_all(set())
        self._supervisor = supervisor
        return supervisor.actor_ref

    monkeypatch.setattr(AgentTier, "start_tier", start_tier)
    caught = first_caught(writer_failures, range(60), {6})
    assert caught is not None, "the campaign never noticed an owed agent left unresumed"
    assert "not resumed" in caught.describe()
