"""A writer that fails: supervised, it leaves the store ``down`` until its next incarnation
(work is refused, never lost or left waiting); unsupervised, the store is closed."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from agentkeep.errors import (
    CommitOutcomeUnknownError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.persistence.writer import StoreWriter


class WriterBugError(RuntimeError):
    pass


def break_next_group(monkeypatch: pytest.MonkeyPatch) -> None:
    original = StoreWriter._run_group
    armed = [True]

    def run_group(writer: StoreWriter, pending: deque[Any]) -> None:
        if armed[0]:
            armed[0] = False
            raise WriterBugError("a bug in the writer")
        original(writer, pending)

    monkeypatch.setattr(StoreWriter, "_run_group", run_group)


def write(key: str, value: int) -> Any:
    def work(tx: Transaction) -> None:
        tx.kv.write(key, value)

    return work


def wait_until_stopped(ref: Any) -> None:
    assert ref.actor_stopped.wait(10)


def test_a_supervised_writer_that_fails_is_down_until_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path, start_writer=False)
    try:
        with pytest.raises(StoreUnavailableError):
            store.transact(write("before", 0))  # no writer yet
        first = store.start_writer()
        with pytest.raises(StoreError, match="already running"):
            store.start_writer()
        store.transact(write("a", 1))

        break_next_group(monkeypatch)
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            store.transact(write("b", 2))
        assert isinstance(caught.value.__cause__, WriterBugError)
        wait_until_stopped(first)
        with pytest.raises(StoreUnavailableError, match="did not run"):
            store.transact(write("c", 3))

        second = store.start_writer()  # what the supervisor does: a fresh connection
        assert second is not first
        store.transact(write("d", 4))
        values = store.read(lambda tx: [tx.kv.read(k) for k in ("a", "b", "c", "d")])
        assert values == [1, None, None, 4]
    finally:
        store.close()
    with pytest.raises(StoreClosedError):
        store.start_writer()


def test_an_unsupervised_writer_that_fails_closes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(tmp_path) as store:
        break_next_group(monkeypatch)
        with pytest.raises(CommitOutcomeUnknownError):
            store.transact(write("a", 1))
        # Queued before the failure's cleanup or refused after it: the same answer.
        with pytest.raises(StoreClosedError, match="writer failed"):
            store.transact(write("b", 2))
