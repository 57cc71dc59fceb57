"""compaction: the one operation that destroys history, interrupted by crashes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from agentkeep.actors import agent_actor
from agentkeep.chaos.campaigns import CampaignResult, compaction, first_caught
from agentkeep.loop.events import CommitFailed
from agentkeep.loop.plans import Plan, ReplaceWithCompaction
from agentkeep.persistence.interface import Transaction
from agentkeep.types.records import UserRecord


def test_compaction(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(compaction(seed))


def test_checker_catches_a_compaction_in_two_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: compaction erases the summarised history in one transaction and writes the
    summary in a second; a crash between them leaves a half-erased history (invariant I21)."""
    commit = agent_actor.AgentActor._commit

    def two_step(self: Any, plan: Plan) -> Any:
        if not isinstance(plan, ReplaceWithCompaction):
            return commit(self, plan)
        agent_id = self._agent_id

        def erase(tx: Transaction) -> None:
            records = tx.records.load(agent_id)
            erased = records[: plan.through_position]
            tx.queue.release_message_ids(
                agent_id, [r.message_id for r in erased if isinstance(r, UserRecord)]
            )
            tx.records.rewrite(agent_id, records[plan.through_position :])

        try:
            self._store.transact(erase)
        except Exception as error:
            return CommitFailed(plan=plan, message=str(error))
        return commit(self, msgspec.structs.replace(plan, through_position=0))

    monkeypatch.setattr(agent_actor.AgentActor, "_commit", two_step)
    caught = first_caught(compaction, range(80), {1, 14, 16})
    assert caught is not None, "the checker never noticed a half-erased history"
