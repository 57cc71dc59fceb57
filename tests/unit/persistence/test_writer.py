"""The StoreWriter: group commit, per-item savepoints, commit errors, lifecycle."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkeep.chaos.faultpoints import expect_label, find_label, recording_labels
from agentkeep.errors import CommitOutcomeUnknownError, StoreClosedError, StoreError
from agentkeep.persistence import FaultPlan, InjectedFaultError, Store, Transaction

TIMEOUT = 30.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        yield opened


class BoomError(Exception):
    pass


def _hold_writer(store: Store) -> tuple[threading.Event, threading.Thread]:
    """Occupy the writer with a work item until the returned event is set."""
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    thread = threading.Thread(target=store.transact, args=(blocker,))
    thread.start()
    assert started.wait(TIMEOUT)
    return release, thread


def _submit_all(store: Store, works: list[Callable[[Transaction], Any]]) -> list[tuple[str, Any]]:
    """Submit ``works`` concurrently while the writer is held, so they form one group."""
    release, blocker = _hold_writer(store)
    outcomes: list[tuple[str, Any]] = [("pending", None)] * len(works)

    def submit(index: int) -> None:
        try:
            outcomes[index] = ("ok", store.transact(works[index]))
        except BaseException as exc:
            outcomes[index] = ("error", exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(works))]
    for thread in threads:
        thread.start()
    assert store.handle.wait_for_queued(len(works), timeout_seconds=TIMEOUT)
    release.set()
    for thread in [blocker, *threads]:
        thread.join(TIMEOUT)
    return outcomes


def _write(key: str, value: int) -> Callable[[Transaction], int]:
    def work(tx: Transaction) -> int:
        tx.kv.write(key, value)
        return value

    return work


def test_concurrent_submitters_share_commits(store: Store) -> None:
    outcomes = _submit_all(store, [_write(f"k{i}", i) for i in range(16)])
    assert outcomes == [("ok", i) for i in range(16)]
    stats = store.statistics()
    # The blocker's group, then one group for all 16.
    assert stats.transactions == 17
    assert stats.commits == 2 < stats.transactions
    assert stats.max_group_size == 16
    assert len(store.read(lambda tx: tx.kv.scan("k"))) == 16


def test_a_failing_item_rolls_back_alone(store: Store) -> None:
    def failing(tx: Transaction) -> None:
        tx.kv.write("bad", 1)
        raise BoomError("no")

    outcomes = _submit_all(store, [_write("a", 1), failing, _write("b", 2)])
    assert outcomes[0] == ("ok", 1)
    assert outcomes[2] == ("ok", 2)
    assert outcomes[1][0] == "error"
    assert isinstance(outcomes[1][1], BoomError)
    assert store.read(lambda tx: tx.kv.scan("")) == [("a", 1), ("b", 2)]
    assert store.statistics().failed_transactions == 1


def test_work_exception_reaches_the_caller_and_the_writer_continues(store: Store) -> None:
    def failing(tx: Transaction) -> None:
        raise BoomError("mine")

    with pytest.raises(BoomError, match="mine"):
        store.transact(failing)
    assert store.transact(_write("after", 1)) == 1


def test_after_commit_runs_after_durability_and_not_on_rollback(store: Store) -> None:
    seen: list[Any] = []

    def work(tx: Transaction) -> None:
        tx.kv.write("k", 1)
        # Runs only once the COMMIT is durable: a reader sees the write.
        tx.after_commit(lambda: seen.append(store.read(lambda r: r.kv.read("k"))))

    store.transact(work)
    assert seen == [1]

    def rolled_back(tx: Transaction) -> None:
        tx.after_commit(lambda: seen.append("never"))
        raise BoomError

    with pytest.raises(BoomError):
        store.transact(rolled_back)
    assert seen == [1]


def test_a_failing_after_commit_callback_does_not_unanswer_the_caller(store: Store) -> None:
    def work(tx: Transaction) -> int:
        tx.after_commit(lambda: 1 / 0)  # type: ignore[func-returns-value]
        return 7

    assert store.transact(work) == 7


def _one_write_labels(tmp_path: Path) -> list[str]:
    """The store operations of one fault-free ``_write`` in a fresh store, in order."""
    with recording_labels() as recording, Store.open(tmp_path / "dry") as store:
        store.transact(_write("k", 1))
        return list(recording.labels)


def test_commit_error_makes_every_group_member_outcome_unknown(tmp_path: Path) -> None:
    labels = _one_write_labels(tmp_path)
    commit = expect_label(labels, find_label(labels, "COMMIT"), "COMMIT")
    with Store.open(tmp_path, faults=FaultPlan(at=commit, mode="flaky")) as store:
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            store.transact(_write("k", 1))
        assert isinstance(caught.value.__cause__, InjectedFaultError)
        assert store.statistics().commit_errors == 1
        # The writer stays usable; the failed group rolled back.
        assert store.transact(_write("j", 2)) == 2
        assert store.read(lambda tx: tx.kv.scan("")) == [("j", 2)]


def test_fault_after_commit_is_durable_but_reported_unknown(tmp_path: Path) -> None:
    labels = _one_write_labels(tmp_path)
    after_commit = expect_label(labels, find_label(labels, "after_commit"), "after_commit")
    with Store.open(tmp_path, faults=FaultPlan(at=after_commit, mode="flaky")) as store:
        with pytest.raises(CommitOutcomeUnknownError):
            store.transact(_write("k", 1))
        assert store.read(lambda tx: tx.kv.read("k")) == 1


def test_crash_mode_keeps_failing_until_reopened(tmp_path: Path) -> None:
    labels = _one_write_labels(tmp_path)
    write = expect_label(labels, find_label(labels, "INSERT INTO kv"), "INSERT INTO kv")
    with Store.open(tmp_path, faults=FaultPlan(at=write, mode="crash")) as store:
        with pytest.raises(InjectedFaultError):
            store.transact(_write("k", 1))
        with pytest.raises(InjectedFaultError):
            store.transact(_write("k", 2))
    with Store.open(tmp_path) as store:
        assert store.read(lambda tx: tx.kv.read("k")) is None
        assert store.transact(_write("k", 3)) == 3


def test_transact_from_inside_the_writer_is_refused(store: Store) -> None:
    def nested(tx: Transaction) -> None:
        store.transact(_write("k", 1))

    with pytest.raises(StoreError, match="inside a transaction"):
        store.transact(nested)


def test_work_after_close_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosedError):
        store.transact(_write("k", 1))
    with pytest.raises(StoreClosedError):
        store.read(lambda tx: tx.kv.read("k"))


def test_close_commits_work_already_accepted(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    release, blocker = _hold_writer(store)
    result: list[int] = []
    submitter = threading.Thread(target=lambda: result.append(store.transact(_write("k", 1))))
    submitter.start()
    assert store.handle.wait_for_queued(1, timeout_seconds=TIMEOUT)
    closer = threading.Thread(target=store.close)
    closer.start()
    release.set()
    for thread in (blocker, submitter, closer):
        thread.join(TIMEOUT)
    assert result == [1]
    with Store.open(tmp_path) as reopened:
        assert reopened.read(lambda tx: tx.kv.read("k")) == 1


@pytest.mark.sqlite_only("SQLite's WAL checkpoints (the server checkpoints its own WAL)")
def test_idle_writer_checkpoints_the_wal(tmp_path: Path) -> None:
    with Store.open(tmp_path, checkpoint_pages=2) as store:
        for i in range(5):
            store.transact(_write(f"k{i}", i))
        assert store.statistics().checkpoints >= 1


def test_statistics_count_operations(store: Store) -> None:
    before = store.statistics().operations
    with recording_labels() as recording:
        store.transact(_write("k", 1))
    # Every operation the fault injector counts (BEGIN … INSERT … COMMIT, after_commit), as
    # many as it ticked: not a fixed number, which each cut to the transaction moves.
    labels = recording.labels
    assert store.statistics().operations - before == len(labels), labels
    assert labels[0].startswith("BEGIN"), labels
    assert labels[-2:] == ["COMMIT", "after_commit"], labels
    assert sum(label.startswith("INSERT INTO kv") for label in labels) == 1, labels


def test_a_failure_resting_on_a_group_mates_write_is_answered_after_the_commit(
    store: Store,
) -> None:
    # Found by the daemon's concurrent session starts (a 404 after "already exists"): an
    # item that failed because a group-mate wrote a key was answered before the group's
    # COMMIT, so its caller, reading the key back at once, did not find it.
    seen_after_failure: list[object] = []

    def claim(tx: Transaction) -> str:
        if tx.kv.read("owner") is not None:
            raise BoomError("taken")
        tx.kv.write("owner", "first")
        return "claimed"

    def claim_and_look(tx: Transaction) -> str:
        return claim(tx)

    release, blocker = _hold_writer(store)
    outcomes: list[object] = []

    def first() -> None:
        outcomes.append(store.transact(claim))

    def second() -> None:
        try:
            store.transact(claim_and_look)
        except BoomError:
            # Acting on the failure: the owner it rests on must be readable now.
            seen_after_failure.append(store.read(lambda tx: tx.kv.read("owner")))

    one = threading.Thread(target=first)
    one.start()
    assert store.handle.wait_for_queued(1, timeout_seconds=TIMEOUT)
    two = threading.Thread(target=second)
    two.start()
    assert store.handle.wait_for_queued(2, timeout_seconds=TIMEOUT)
    release.set()
    for thread in (blocker, one, two):
        thread.join(TIMEOUT)
    assert outcomes == ["claimed"]
    assert seen_after_failure == ["first"]
