"""compaction_under_load: compaction while both queues hold messages and calls are in flight,
under crashes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.chaos.campaigns import CampaignResult, compaction_under_load, first_caught
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans


def test_compaction_under_load(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(compaction_under_load(seed))


def test_checker_catches_a_compaction_that_swallows_the_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: the compaction's replacement also clears both queues, so messages accepted
    (and acknowledged) but not yet consumed vanish (invariants I1, I21)."""
    replace = commit_plans._replace_with_compaction

    def greedy(tx: Transaction, agent_id: str, plan: Any, *rest: Any) -> None:
        replace(tx, agent_id, plan, *rest)
        for entry in tx.queue.messages(agent_id):
            tx.queue.dequeue(agent_id, entry.queue, entry.seq)

    monkeypatch.setattr(commit_plans, "_replace_with_compaction", greedy)
    caught = first_caught(compaction_under_load, range(80), {1})
    assert caught is not None, "the checker never noticed queued messages lost by compaction"
