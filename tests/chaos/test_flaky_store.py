"""flaky_store: single store operations fail and the process keeps running."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.actors import agent_actor
from agentkeep.chaos.campaigns import CampaignResult, first_caught, flaky_store
from agentkeep.loop.events import CommitLanded
from agentkeep.loop.plans import CommitToolResult, Plan
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans


def test_flaky_store(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(flaky_store(seed))


class _KeepPendingCalls:
    """``tx.calls`` whose ``remove`` reports success and removes nothing."""

    def __init__(self, calls: Any) -> None:
        self._calls = calls

    def remove(self, agent_id: str, internal_id: str) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._calls, name)


class _KeepPending:
    """A transaction whose ``calls.remove`` reports success and removes nothing."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx
        self.calls = _KeepPendingCalls(tx.calls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


def test_checker_catches_a_result_and_its_pending_entry_in_two_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: a tool result lands in one transaction and its pending entry is removed in a
    second; when that second write fails the call is both answered and pending, and a
    restart answers it again (invariants I14, I15)."""
    commit_result = commit_plans._commit_tool_result
    monkeypatch.setattr(
        commit_plans,
        "_commit_tool_result",
        lambda tx, *args: commit_result(_KeepPending(tx), *args),
    )
    commit = agent_actor.AgentActor._commit

    def two_step(self: Any, plan: Plan) -> Any:
        event = commit(self, plan)
        if isinstance(plan, CommitToolResult) and isinstance(event, CommitLanded):
            agent_id, internal_id = self._agent_id, plan.pending.internal_id
            with contextlib.suppress(Exception):
                self._store.transact(lambda tx: tx.calls.remove(agent_id, internal_id))
        return event

    monkeypatch.setattr(agent_actor.AgentActor, "_commit", two_step)
    caught = first_caught(flaky_store, range(150), {9, 10})
    assert caught is not None, "the checker never noticed a call answered and still pending"
