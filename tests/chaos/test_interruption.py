"""interruption: turns aborted at a random stream event, sometimes while crashing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.actors import agent_actor
from agentkeep.chaos.campaigns import CampaignResult, first_caught, interruption
from agentkeep.loop.events import AbortRequested
from agentkeep.persistence.interface import Transaction


def test_interruption(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(interruption(seed))


def test_checker_catches_an_abort_that_drops_the_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: an abort clears the agent's queues along with its turn, losing messages whose
    ``send`` already returned (invariant I24: an abort keeps the queues; seen as I1)."""
    receive = agent_actor.AgentActor.on_receive

    def dropping(self: Any, message: Any) -> None:
        if isinstance(message, AbortRequested):
            agent_id = self._agent_id

            def clear(tx: Transaction) -> None:
                for entry in tx.queue.messages(agent_id):
                    tx.queue.dequeue(agent_id, entry.queue, entry.seq)

            with contextlib.suppress(Exception):
                self._store.transact(clear)
        receive(self, message)

    monkeypatch.setattr(agent_actor.AgentActor, "on_receive", dropping)
    caught = first_caught(interruption, range(60), {1})
    assert caught is not None, "the checker never noticed queued messages lost to an abort"
