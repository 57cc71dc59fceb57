"""What the writer remembers of a session's last event sequence, running turn, turn rows and
settings (persistence/memo.py): read once, kept current by the writes that change
them, carried into the writer's later transactions once committed, never out of a rolled-back
item (a group-mate's transaction does not see it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep.persistence import Store, Transaction
from agentkeep.types import Settings
from agentkeep.types.records import AgentRow
from agentkeep.types.turns import TurnFailure

TIMEOUT = 30.0
SESSION = "s1"
MAX_SEQUENCE = "SELECT coalesce(max(sequence), 0) FROM session_events"
RUNNING_TURN = "SELECT id FROM turns WHERE agent_id = ? AND status IN"
SETTINGS = "SELECT settings_json FROM settings"
TURN_ROW = "SELECT agent_id, number, id, idempotency_key"


class BoomError(Exception):
    pass


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        opened.transact(lambda tx: tx.agents.create(AgentRow(id=SESSION, config={})))
        yield opened


def _count(executed: list[str], prefix: str) -> int:
    return sum(sql.startswith(prefix) for sql in executed)


def _sequences(store: Store) -> list[int]:
    return [e.sequence for e in store.read(lambda tx: tx.ledger.events(SESSION, 0, 1000))]


def test_appends_are_dense_and_read_the_tail_only_once(store: Store, executed: list[str]) -> None:
    executed.clear()
    store.transact(lambda tx: tx.ledger.append(SESSION, "note", {"n": 0}))
    assert _count(executed, MAX_SEQUENCE) == 1

    def three(tx: Transaction) -> list[int]:
        appended = [tx.ledger.append(SESSION, "note", {"n": n}) for n in (1, 2, 3)]
        return [*appended, tx.ledger.last_sequence(SESSION)]

    executed.clear()
    assert store.transact(three) == [2, 3, 4, 4]
    # The committed tail of the first transaction is remembered by the writer.
    assert _count(executed, MAX_SEQUENCE) == 0
    assert _sequences(store) == [1, 2, 3, 4]


def test_a_rolled_back_group_item_leaves_no_hole_for_its_mates(store: Store) -> None:
    store.transact(lambda tx: tx.ledger.append(SESSION, "note", {"n": 0}))
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    def fails(tx: Transaction) -> None:
        tx.ledger.append(SESSION, "note", {"lost": 1})
        tx.ledger.append(SESSION, "note", {"lost": 2})
        raise BoomError

    def appends(tx: Transaction) -> list[int]:
        return [tx.ledger.append(SESSION, "note", {"kept": n}) for n in (1, 2)]

    # Hold the writer so the three items below form one group (one BEGIN … COMMIT).
    holder = threading.Thread(target=store.transact, args=(blocker,))
    holder.start()
    assert started.wait(TIMEOUT)
    outcomes: dict[str, Any] = {}

    def submit(name: str, work: Any) -> None:
        try:
            outcomes[name] = store.transact(work)
        except BoomError as exc:
            outcomes[name] = exc

    order = [("first", appends), ("fails", fails), ("after", appends)]
    threads = []
    for queued, (name, work) in enumerate(order, start=1):
        thread = threading.Thread(target=submit, args=(name, work))
        thread.start()
        threads.append(thread)
        assert store.handle.wait_for_queued(queued, timeout_seconds=TIMEOUT)
    release.set()
    for thread in [holder, *threads]:
        thread.join(TIMEOUT)

    assert store.statistics().max_group_size == 3
    assert outcomes["first"] == [2, 3]
    assert isinstance(outcomes["fails"], BoomError)
    # The failed item's appends (4, 5) were rolled back: its mate starts right after "first".
    assert outcomes["after"] == [4, 5]
    assert store.transact(lambda tx: tx.ledger.append(SESSION, "note", {})) == 6
    assert _sequences(store) == [1, 2, 3, 4, 5, 6]


def test_the_running_turn_is_read_once_and_follows_the_transactions_moves(
    store: Store, executed: list[str]
) -> None:
    def scenario(tx: Transaction) -> list[str | None]:
        turn, _ = tx.turns.open(
            SESSION, key=None, driver="native", delivery="send", input={}, message_id=None
        )
        seen = [tx.turns.running_id(SESSION), tx.turns.running_id(SESSION)]
        tx.turns.move(SESSION, turn.id, "running")
        seen += [tx.turns.running_id(SESSION), tx.turns.running_id(SESSION)]
        tx.turns.move(SESSION, turn.id, "cancelling")
        seen.append(tx.turns.running_id(SESSION))
        tx.turns.move(SESSION, turn.id, "cancelled")
        seen.append(tx.turns.running_id(SESSION))
        return [turn.id, *seen]

    executed.clear()
    turn_id, *seen = store.transact(scenario)
    assert seen == [None, None, turn_id, turn_id, turn_id, None]
    # Read once while none ran, and again only after the turn ended (another might run).
    assert _count(executed, RUNNING_TURN) == 2
    # A later transaction of the writer is answered from what it committed.
    executed.clear()
    assert store.transact(lambda tx: tx.turns.running_id(SESSION)) is None
    assert _count(executed, RUNNING_TURN) == 0
    assert store.read(lambda tx: tx.turns.running_id(SESSION)) is None


def test_the_returned_turns_equal_the_stored_rows_without_reading_them(
    store: Store, executed: list[str]
) -> None:
    def scenario(tx: Transaction) -> list[Any]:
        turn, _ = tx.turns.open(
            SESSION,
            key="k1",
            driver="native",
            delivery="send",
            input={"role": "user", "content": [{"type": "text", "text": "hi"}]},
            message_id="m1",
        )
        pairs = [(turn, tx.turns.read(SESSION, turn.id))]
        running = tx.turns.move(SESSION, turn.id, "running")
        pairs.append((running, tx.turns.read(SESSION, turn.id)))
        failure = TurnFailure(code="x", message="y", details={"a": [1, 2]})
        failed = tx.turns.move(SESSION, turn.id, "failed", error=failure)
        pairs.append((failed, tx.turns.read(SESSION, turn.id)))
        other, _ = tx.turns.open(
            SESSION, key=None, driver="native", delivery="send", input={}, message_id=None
        )
        tx.turns.move(SESSION, other.id, "running")
        done = tx.turns.move(SESSION, other.id, "completed", result={"message": {"n": 1}})
        pairs.append((done, tx.turns.read(SESSION, other.id)))
        return pairs

    executed.clear()
    pairs = store.transact(scenario)
    # Opening, moving and reading back a turn the writer knows reads no turn row ...
    assert _count(executed, TURN_ROW) == 0
    for returned, known in pairs:
        assert returned == known
    # ... and what it returned is what the store holds (read back on a reader's snapshot).
    assert store.read(lambda tx: tx.turns.read(SESSION, pairs[-1][0].id)) == pairs[-1][0]
    first = store.read(lambda tx: tx.turns.read(SESSION, pairs[0][0].id))
    assert first == pairs[2][0]


def test_settings_are_read_once_and_follow_the_transactions_writes(
    store: Store, executed: list[str]
) -> None:
    def scenario(tx: Transaction) -> list[Settings | None]:
        seen = [tx.facts.read_settings(SESSION), tx.facts.read_settings(SESSION)]
        tx.facts.write_settings(SESSION, Settings(provider="p", model="m1"))
        seen.append(tx.facts.read_settings(SESSION))
        return seen

    executed.clear()
    assert store.transact(scenario) == [None, None, Settings(provider="p", model="m1")]
    assert _count(executed, SETTINGS) == 1
    # A committed change is what the writer's next transaction sees, without a read.
    store.transact(lambda tx: tx.facts.write_settings(SESSION, Settings(provider="p", model="m2")))
    executed.clear()
    assert store.transact(lambda tx: tx.facts.read_settings(SESSION)) == Settings(
        provider="p", model="m2"
    )
    assert _count(executed, SETTINGS) == 0

    # A rolled-back change is not.
    def changes_then_fails(tx: Transaction) -> None:
        tx.facts.write_settings(SESSION, Settings(provider="p", model="lost"))
        raise BoomError

    with pytest.raises(BoomError):
        store.transact(changes_then_fails)
    assert store.transact(lambda tx: tx.facts.read_settings(SESSION)) == Settings(
        provider="p", model="m2"
    )


def test_live_turns_tell_the_running_turn_without_another_read(
    store: Store, executed: list[str]
) -> None:
    def scenario(tx: Transaction) -> list[str]:
        ids = []
        for _ in range(3):
            turn, _new = tx.turns.open(
                SESSION, key=None, driver="native", delivery="send", input={}, message_id=None
            )
            ids.append(turn.id)
        tx.turns.move(SESSION, ids[0], "running")
        tx.turns.move(SESSION, ids[1], "running")
        tx.turns.move(SESSION, ids[1], "cancelling")
        return ids

    ids = store.transact(scenario)
    executed.clear()

    def read(tx: Transaction) -> tuple[list[str], str | None]:
        return [t.id for t in tx.turns.live(SESSION)], tx.turns.running_id(SESSION)

    assert store.transact(read) == (ids, ids[1])
    assert _count(executed, RUNNING_TURN) == 0
