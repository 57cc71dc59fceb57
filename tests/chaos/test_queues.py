"""queues: mixed steering and send messages, each offered just before a crash."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.actors import agent_actor
from agentkeep.chaos.campaigns import CampaignResult, first_caught, queues
from agentkeep.loop.events import CommitLanded
from agentkeep.loop.plans import ConsumeQueue, Plan
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans
from agentkeep.types.records import UserRecord


def test_queues(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(queues(seed))


class _NoClaimQueue:
    """``tx.queue`` whose ``dequeue`` claims without deleting (the delete comes later)."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def dequeue(self, agent_id: str, queue: str, seq: int) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _NoClaim:
    """A transaction whose ``queue.dequeue`` claims without deleting (the delete comes
    later)."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx
        self.queue = _NoClaimQueue(tx.queue)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


def test_checker_catches_a_consumption_in_two_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: a consumed message joins the conversation in one transaction and leaves its
    queue in a second; a crash between them consumes it again after the restart
    (invariants I1, I4)."""
    consume = commit_plans.consume_queue
    monkeypatch.setattr(
        commit_plans, "consume_queue", lambda tx, *args: consume(_NoClaim(tx), *args)
    )
    commit = agent_actor.AgentActor._commit

    def two_step(self: Any, plan: Plan) -> Any:
        event = commit(self, plan)
        if isinstance(plan, ConsumeQueue) and isinstance(event, CommitLanded):
            agent_id = self._agent_id
            ids = {r.message_id for r in event.value.records if isinstance(r, UserRecord)}

            def delete(tx: Transaction) -> None:
                for entry in tx.queue.messages(agent_id, plan.queue):
                    if entry.id in ids:
                        tx.queue.dequeue(agent_id, plan.queue, entry.seq)

            with contextlib.suppress(Exception):
                self._store.transact(delete)
        return event

    monkeypatch.setattr(agent_actor.AgentActor, "_commit", two_step)
    caught = first_caught(queues, range(80), {1})
    assert caught is not None, "the checker never noticed a message consumed twice"
