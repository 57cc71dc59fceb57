"""concurrency: senders, steerers, aborts and starts all at once, no crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from agentkeep.chaos.campaigns import CampaignResult, concurrency, first_caught
from agentkeep.persistence.queue_statements import QueueStatements
from agentkeep.types.records import QueuedMessage


def test_concurrency(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(concurrency(seed))


def test_checker_catches_colliding_queue_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: a queue key is derived from how many entries are queued (not from the durable
    tail) and written with upsert, so an accepted message can silently replace another whose
    ``send`` already returned (invariants I1, I3)."""

    def enqueue(self: Any, agent_id: str, message: QueuedMessage) -> QueuedMessage:
        seq = 1 + len(self.messages(agent_id, message.queue))
        stored = msgspec.structs.replace(message, seq=seq)
        self._write(
            "INSERT OR REPLACE INTO queue (agent_id, queue, seq, message_id, envelope_json) "
            "VALUES (?, ?, ?, ?, ?)",
            (agent_id, stored.queue, stored.seq, stored.id, msgspec.json.encode(stored).decode()),
        )
        return stored

    monkeypatch.setattr(QueueStatements, "enqueue", enqueue)
    caught = first_caught(concurrency, range(80), {1})
    assert caught is not None, "the checker never noticed an accepted message overwritten"
