"""The fault-point finder tests use instead of hard-coded operation numbers
(``agentkeep.chaos.faultpoints``): it lists what each operation is, and fails loudly when the
operation a test meant is not where it looks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentkeep.chaos.faultpoints import expect_label, find_label, recording_labels
from agentkeep.persistence import FaultPlan, InjectedFaultError, Store
from agentkeep.persistence.faults import FaultInjector


def test_a_recording_lists_one_stores_operations_in_order(tmp_path: Path) -> None:
    original = FaultInjector.tick
    with recording_labels() as recording, Store.open(tmp_path) as store:
        store.transact(lambda tx: tx.kv.write("k", 1))
        labels = list(recording.labels)
    assert FaultInjector.tick is original  # the wrapper is gone after the block
    write = find_label(labels, "INSERT INTO kv")
    commit = find_label(labels, "COMMIT", after=write)
    assert labels.index("after_commit") + 1 == find_label(labels, "after_commit", after=commit)
    assert labels[0].startswith("BEGIN")


def test_a_picked_operation_is_the_one_the_fault_hits(tmp_path: Path) -> None:
    with recording_labels() as recording, Store.open(tmp_path / "dry") as store:
        store.transact(lambda tx: tx.kv.write("k", 1))
        labels = list(recording.labels)
    at = expect_label(labels, find_label(labels, "INSERT INTO kv"), "INSERT")
    plan = FaultPlan(at=at, mode="flaky")
    with (
        Store.open(tmp_path / "run", faults=plan) as store,
        pytest.raises(InjectedFaultError) as caught,
    ):
        store.transact(lambda tx: tx.kv.write("k", 1))
    assert (caught.value.operation, caught.value.label) == (at, "INSERT")


def test_a_shifted_operation_fails_loudly() -> None:
    labels = ["BEGIN IMMEDIATE", "INSERT INTO kv (key) VALUES (?)", "COMMIT", "after_commit"]
    assert expect_label(labels, 2, "INSERT INTO kv") == 2
    with pytest.raises(AssertionError, match="operation 3 is 'COMMIT', not 'INSERT'"):
        expect_label(labels, 3, "INSERT")
    with pytest.raises(AssertionError, match="beyond the 4 recorded"):
        expect_label(labels, 5, "after_commit")
    with pytest.raises(AssertionError, match="no match #2"):
        find_label(labels, "COMMIT", nth=2)
    assert find_label(labels, lambda label: label == "after_commit") == 4
