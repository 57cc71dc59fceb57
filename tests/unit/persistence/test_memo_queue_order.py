"""The writer's remembered queue keeps SQL's order through any mix of steering and send
entries, added and removed anywhere, within and across transactions (persistence/
queue_statements.py: it is kept by bisection and slices, never re-sorted)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkeep.persistence import Store, Transaction
from agentkeep.persistence.codec import decode_message
from agentkeep.types import UserMessage
from agentkeep.types.records import QueuedMessage, QueueName

A = "a"

# One step: add to a queue, or remove the k-th entry (modulo the queue's length) of one.
Step = tuple[str, QueueName, int]
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]),
        st.sampled_from(["steering", "send"]),
        st.integers(0, 50),
    ),
    max_size=40,
)


def _from_sql(tx: Transaction) -> dict[str, list[QueuedMessage]]:
    rows = tx.sql.query(  # type: ignore[attr-defined]
        "SELECT queue, envelope_json FROM queue WHERE agent_id = ? ORDER BY seq", (A,)
    )
    found: dict[str, list[QueuedMessage]] = {"steering": [], "send": []}
    for queue, envelope in rows:
        found[queue].append(decode_message(envelope))
    return found


def _check(tx: Transaction) -> None:
    expected = _from_sql(tx)
    assert tx.queue.messages(A, "steering") == expected["steering"]
    assert tx.queue.messages(A, "send") == expected["send"]
    assert (
        tx.queue.messages(A) == expected["steering"] + expected["send"]
    )  # steering outranks sends


def _play(tx: Transaction, steps: list[Step], start: int) -> None:
    tx.queue.messages(A)  # remembered from here on: every step below changes the remembered queue
    for n, (action, queue, k) in enumerate(steps):
        if action == "add":
            message = UserMessage(content=())
            tx.queue.enqueue(A, QueuedMessage(id=f"m{start + n}", queue=queue, message=message))
        else:
            entries = tx.queue.messages(A, queue)
            if entries:
                assert tx.queue.dequeue(A, queue, entries[k % len(entries)].seq)
        _check(tx)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=STEPS, second=STEPS)
def test_the_remembered_queue_is_the_queue_in_order(
    store: Store, first: list[Step], second: list[Step]
) -> None:
    base = store.read(lambda tx: len(tx.queue.messages(A)))
    store.transact(lambda tx: _play(tx, first, 10_000 + base * 1_000))
    # A later transaction starts from what the first one left remembered (the committed layer).
    store.transact(lambda tx: _play(tx, second, 500_000 + base * 1_000))
    store.read(_check)
