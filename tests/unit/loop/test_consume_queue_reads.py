"""A send's consumption reads the queue table once to learn both what it consumes and
whether steering outranks it (one statement, where reading the send queue and then the
steering queue would be two in every step's transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.loop.plans import Consumed, ConsumeQueue
from agentkeep.persistence import Store
from agentkeep.runtime import commit_plans, plan_ports
from agentkeep.types import Settings
from agentkeep.types.records import AgentRow, OwedWork, QueuedMessage, UserRecord

AGENT = "a1"
QUEUE_READ = "SELECT envelope_json FROM queue"
QUEUE_DELETE = "DELETE FROM queue"
DEFAULTS = Settings(provider="local", model="gym-1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        opened.transact(lambda tx: tx.agents.create(AgentRow(id=AGENT, config={})))
        yield opened


def _queue(store: Store, queue: str, message_id: str) -> None:
    entry = QueuedMessage(id=message_id, queue=queue, message=ak.user(message_id))  # type: ignore[arg-type]
    store.transact(lambda tx: tx.queue.enqueue(AGENT, entry))


def _consume(store: Store, queue: str) -> Consumed:
    owed = OwedWork(stage="inference", loop_id="l1", turn_id="t1")
    plan = ConsumeQueue(
        queue=queue,  # type: ignore[arg-type]
        mode="one-at-a-time",
        defaults=DEFAULTS,
        owed=owed,
        call_id="c1",
    )
    policy = plan_ports.KeepEverything()
    value = store.transact(lambda tx: commit_plans.execute(tx, AGENT, plan, policy))
    assert isinstance(value, Consumed)
    return value


def test_a_send_consumption_reads_both_queues_in_one_statement(
    store: Store, executed: list[str]
) -> None:
    _queue(store, "send", "m1")
    _queue(store, "send", "m2")
    executed.clear()
    value = _consume(store, "send")
    assert [r.message_id for r in value.records if isinstance(r, UserRecord)] == ["m1"]
    assert [e.id for e in value.remaining] == ["m2"]
    # One statement reads what the consumption takes and the steering that would outrank it:
    # the only queue read before the consumption's DELETE, and it covers both queues (no
    # ``queue = ?``). What remains afterwards may come from the writer memo or from a read,
    # but never from a read of one queue (a separate steering read).
    reads = [(i, sql) for i, sql in enumerate(executed) if sql.startswith(QUEUE_READ)]
    deleted = next(i for i, sql in enumerate(executed) if sql.startswith(QUEUE_DELETE))
    assert [sql for i, sql in reads if i < deleted] == [reads[0][1]], executed
    assert not [sql for _, sql in reads if "queue = ?" in sql], executed


def test_queued_steering_still_outranks_a_send(store: Store) -> None:
    _queue(store, "send", "m1")
    _queue(store, "steering", "s1")
    value = _consume(store, "send")
    assert value.records == ()
    assert [e.id for e in value.remaining] == ["m1"]
    assert [e.id for e in value.outranked] == ["s1"]
    steered = _consume(store, "steering")
    assert [r.message_id for r in steered.records if isinstance(r, UserRecord)] == ["s1"]
    assert steered.remaining == ()
