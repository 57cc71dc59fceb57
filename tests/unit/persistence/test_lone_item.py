"""A group of one work item runs without a savepoint: two statements fewer per
transaction, the same outcomes, the memo kept true, the counters reporting the same figures."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentkeep.persistence import FaultPlan, InjectedFaultError, Store, Transaction
from agentkeep.persistence.codec import Statements
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.store import DATABASE_NAME
from agentkeep.types.records import AgentRow

TIMEOUT = 30.0
A, B = "a", "b"


class BoomError(Exception):
    pass


def _write(key: str, value: int) -> Callable[[Transaction], int]:
    def work(tx: Transaction) -> int:
        tx.kv.write(key, value)
        return value

    return work


def _fails_after(key: str) -> Callable[[Transaction], None]:
    def work(tx: Transaction) -> None:
        tx.kv.write(key, 1)
        tx.ledger.append(A, "note", {"key": key})
        raise BoomError

    return work


def _one_group(store: Store, works: list[Callable[[Transaction], Any]]) -> list[Any]:
    """Run ``works`` as one group (the writer held until all are queued); their outcomes."""
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    holder = threading.Thread(target=store.transact, args=(blocker,))
    holder.start()
    assert started.wait(TIMEOUT)
    outcomes: list[Any] = [None] * len(works)

    def submit(index: int) -> None:
        try:
            outcomes[index] = store.transact(works[index])
        except BaseException as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(works))]
    for index, thread in enumerate(threads):
        thread.start()
        assert store.handle.wait_for_queued(index + 1, timeout_seconds=TIMEOUT)
    release.set()
    for thread in [holder, *threads]:
        thread.join(TIMEOUT)
    return outcomes


def test_a_lone_item_runs_without_a_savepoint(store: Store, executed: list[str]) -> None:
    assert store.transact(_write("k", 1)) == 1
    assert executed[0] == "BEGIN IMMEDIATE"
    assert executed[-1] == "COMMIT"
    assert not [sql for sql in executed if sql.startswith(("SAVEPOINT", "RELEASE"))]
    assert store.read(lambda tx: tx.kv.read("k")) == 1


def test_a_lone_item_that_fails_rolls_back_its_transaction_without_a_commit(
    store: Store, executed: list[str]
) -> None:
    before = store.statistics()
    with pytest.raises(BoomError):
        store.transact(_fails_after("k"))
    assert "COMMIT" not in executed
    after = store.statistics()
    assert after.commits == before.commits
    assert (after.groups, after.failed_transactions) == (before.groups + 1, 1)
    assert store.read(lambda tx: (tx.kv.read("k"), tx.ledger.last_sequence(A))) == (None, 0)
    # The writer goes on, and what the failed item remembered is gone with it.
    sequence = store.transact(lambda tx: tx.ledger.append(A, "note", {}))
    assert sequence == 1
    assert store.read(lambda tx: tx.ledger.last_sequence(A)) == 1


def test_a_group_of_several_items_still_isolates_a_failing_one(
    store: Store, executed: list[str]
) -> None:
    outcomes = _one_group(store, [_write("x", 1), _fails_after("y"), _write("z", 3)])
    assert outcomes[0] == 1
    assert outcomes[2] == 3
    assert isinstance(outcomes[1], BoomError)
    assert executed.count("SAVEPOINT agentkeep_work_item") == 3
    assert store.read(lambda tx: tx.kv.scan("")) == [("x", 1), ("z", 3)]
    assert store.read(lambda tx: tx.ledger.last_sequence(A)) == 0


def _appends_events(tx: Transaction) -> int:
    tx.kv.write("k", 1)
    return tx.ledger.append(A, "note", {"n": 1})


def test_a_lone_items_buffered_events_that_fail_to_write_fail_the_item_not_the_commit(
    tmp_path: Path,
) -> None:
    # Find the operation of the INSERT writing the item's buffered event (after its work
    # returned, where the RELEASE used to be), then fail exactly that operation.
    with Store.open(tmp_path / "count") as store:
        store.transact(lambda tx: tx.agents.create(AgentRow(id=A, config={})))
        seen: list[str] = []
        original = Statements.execute

        def execute(self: Statements, sql: str, params: tuple[Any, ...] = ()) -> Any:
            seen.append(sql)
            return original(self, sql, params)

        start = store.statistics().operations
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Statements, "execute", execute)
            store.transact(_appends_events)
        at = start + 1 + seen.index(next(s for s in seen if "INTO session_events" in s))
        assert seen[-1] == "COMMIT"
        assert "INTO session_events" in seen[-2]  # the flush, where RELEASE used to run
    with Store.open(tmp_path / "fault", faults=FaultPlan(at=at, mode="flaky")) as store:
        store.transact(lambda tx: tx.agents.create(AgentRow(id=A, config={})))
        assert store.statistics().operations == start
        with pytest.raises(InjectedFaultError):  # known outcome: nothing committed
            store.transact(_appends_events)
        assert store.statistics().commit_errors == 0
        assert store.read(lambda tx: (tx.kv.read("k"), tx.ledger.last_sequence(A))) == (None, 0)
        assert store.transact(_appends_events) == 1


def test_statistics_report_every_outcome(store: Store) -> None:
    before = store.statistics()
    store.transact(_write("a", 1))
    store.transact(_write("b", 2))
    with pytest.raises(BoomError):
        store.transact(_fails_after("c"))
    _one_group(store, [_write("d", 4), _fails_after("e"), _write("f", 6)])
    after = store.statistics()
    # Lone: 2 committed, 1 rolled back (no commit). The holder, then a group of three.
    assert after.transactions - before.transactions == 2 + 1 + 2
    assert after.failed_transactions - before.failed_transactions == 1 + 1
    assert after.groups - before.groups == 3 + 1 + 1
    assert after.commits - before.commits == 2 + 1 + 1
    assert after.max_group_size == 3
    assert after.commit_errors == 0


def test_one_transaction_announces_its_events_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.transact(lambda tx: tx.agents.create(AgentRow(id=B, config={})))
    announced: list[dict[str, int]] = []
    original = LedgerHub.committed_marks

    def committed_marks(self: LedgerHub, marks: dict[str, int]) -> None:
        announced.append(dict(marks))
        original(self, marks)

    monkeypatch.setattr(LedgerHub, "committed_marks", committed_marks)

    def appends(tx: Transaction) -> None:
        for n in range(3):
            tx.ledger.append(A, "note", {"n": n})
        tx.ledger.append(B, "note", {})

    store.transact(appends)
    assert announced == [{A: 3, B: 1}]
    # A waiter wakes on the next transaction's announcement.
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(store.ledger.wait_past(A, 3, TIMEOUT)))
    waiter.start()
    store.transact(lambda tx: tx.ledger.append(A, "note", {}))
    waiter.join(TIMEOUT)
    assert woke == [4]


def test_a_lone_item_failing_after_a_read_leaves_the_final_checkpoint_unlocked(
    tmp_path: Path,
) -> None:
    # Found by the CLI (`create --id alpha` twice): the existence check's read was left
    # mid-result on the writer's reused cursor, the failed lone item rolled back without any
    # later statement on that cursor, and the closing TRUNCATE checkpoint failed with
    # SQLITE_LOCKED ("database table is locked"), logged on the CLI's stderr.
    def create_again(tx: Transaction) -> None:
        if not tx.agents.create(AgentRow(id=A, config={})):
            raise BoomError

    with Store.open(tmp_path) as store:
        store.transact(lambda tx: tx.agents.create(AgentRow(id=A, config={})))
        with pytest.raises(BoomError):
            store.transact(create_again)
        store.close()
        assert store.statistics().checkpoint_errors == 0
    wal = tmp_path / f"{DATABASE_NAME}-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # the TRUNCATE checkpoint ran
