"""The writer's histograms: each committed group's size and latency (BEGIN to COMMIT
returned), observed once per group under the counters' lock, read as cumulative buckets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.persistence import Store, Transaction
from agentkeep.persistence.histogram import BucketCounts

TIMEOUT = 30.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        yield opened


def test_buckets_are_cumulative_and_a_bound_holds_its_own_value() -> None:
    counts = BucketCounts((1.0, 2.0, 4.0))
    for value in (0.5, 1.0, 1.5, 4.0, 9.0):
        counts.observe(value)
    snapshot = counts.snapshot()
    assert snapshot.bounds == (1.0, 2.0, 4.0)
    assert snapshot.cumulative == (2, 3, 4, 5)  # le=1, le=2, le=4, +Inf
    assert snapshot.count == 5
    assert snapshot.total == 16.0


def test_each_committed_group_is_observed_with_its_size_and_latency(store: Store) -> None:
    _, before = store.commit_histograms()
    assert before.count == 0
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    held = threading.Thread(target=store.transact, args=(blocker,))
    held.start()
    assert started.wait(TIMEOUT)
    began = time.perf_counter()

    def write(key: str) -> None:
        store.transact(lambda tx: tx.kv.write(key, 1))

    def fail(tx: Transaction) -> None:
        raise ValueError("this item alone rolls back")

    def failing() -> None:
        with pytest.raises(ValueError, match="alone rolls back"):
            store.transact(fail)

    threads = [threading.Thread(target=write, args=(f"k{i}",)) for i in range(7)]
    threads.append(threading.Thread(target=failing))
    for thread in threads:
        thread.start()
    assert store.handle.wait_for_queued(8, timeout_seconds=TIMEOUT)
    held_for = time.perf_counter() - began
    release.set()
    for thread in [held, *threads]:
        thread.join(TIMEOUT)

    latency, sizes = store.commit_histograms()
    # The blocker's group of one, then one group of eight (the failed item was in it).
    assert sizes.count == latency.count == store.statistics().commits == 2
    assert sizes.total == 9
    assert dict(zip(sizes.bounds, sizes.cumulative, strict=False))[1.0] == 1
    assert dict(zip(sizes.bounds, sizes.cumulative, strict=False))[8.0] == 2
    # The held group's latency covers at least the time the test held it.
    assert latency.total >= held_for
    assert latency.cumulative[-1] == 2
