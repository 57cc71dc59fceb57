"""What passes between the writer's callers and the writer: work items, the inbox, counters.

A caller puts a :class:`WorkItem` into the :class:`Inbox` and waits on it; the writer takes
everything queued as one group and answers each item exactly once. The inbox's state says
whether a writer serves it (``open``), whether its writer failed and awaits a restart
(``down``), or whether the store is closed for good.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from opentelemetry.trace import SpanContext

from agentkeep.errors import StoreClosedError, StoreError, StoreUnavailableError
from agentkeep.persistence.histogram import (
    COMMIT_SECONDS_BOUNDS,
    GROUP_SIZE_BOUNDS,
    BucketCounts,
    HistogramSnapshot,
)
from agentkeep.persistence.interface import Transaction
from agentkeep.tracing import current_span


class WriterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the writer's counters.

    Attributes:
        transactions: Work items that ran and committed (their callers got their value).
        failed_transactions: Work items answered with an exception (their own, a rolled-back
            group's, or an unknown commit outcome).
        groups: Groups run (``BEGIN IMMEDIATE`` issued).
        commits: ``COMMIT`` statements that succeeded.
        commit_errors: ``COMMIT`` statements that failed (outcome unknown).
        max_group_size: The most work items one group held.
        checkpoints: WAL checkpoints that finished (the idle ones run in the background,
            ``persistence.checkpointer``; the final one as the store closes).
        checkpoint_errors: Checkpoints that failed (logged; never a caller's error).
        operations: Store operations counted for the fault points.
        wal_pages: Pages in the WAL after the last commit.
    """

    transactions: int = 0
    failed_transactions: int = 0
    groups: int = 0
    commits: int = 0
    commit_errors: int = 0
    max_group_size: int = 0
    checkpoints: int = 0
    checkpoint_errors: int = 0
    operations: int = 0
    wal_pages: int = 0


class WorkItem:
    """One submitted ``work`` and its answer.

    The answer is signalled through a plain lock held from creation until answered: the
    cheapest wake-up CPython has, which matters with many submitters contending for the GIL.
    Only the writer's thread (or the shutdown that drained the item) answers, exactly once.
    ``caller``: the submitting thread's current span when tracing is on (the group commit's
    span links to it), else None.
    """

    __slots__ = ("_answered", "_error", "_signal", "_value", "caller", "work")

    def __init__(self, work: Callable[[Transaction], Any]) -> None:
        self.work = work
        self.caller: SpanContext | None = current_span()
        self._signal = threading.Lock()
        self._signal.acquire()
        self._answered = False
        self._value: Any = None
        self._error: BaseException | None = None

    def succeed(self, value: Any) -> None:
        if not self._answered:
            self._answered = True
            self._value = value
            self._signal.release()

    def fail(self, error: BaseException) -> None:
        if not self._answered:
            self._answered = True
            self._error = error
            self._signal.release()

    def wait(self, timeout_seconds: float | None) -> Any:
        """The work's value; raises its error; raises ``TimeoutError`` on timeout."""
        if not self._signal.acquire(timeout=-1 if timeout_seconds is None else timeout_seconds):
            raise TimeoutError
        self._signal.release()  # answered: later waits return at once
        if self._error is not None:
            raise self._error
        return self._value


class Inbox:
    """Work waiting for the writer, with wake-up coalescing and a state.

    ``open``: work is queued for the writer. ``down``: the writer failed and waits for its
    supervisor to restart it; new work is refused with ``StoreUnavailableError`` (it did not
    run: a caller blocked on a dead writer could hold up the very restart it waits for).
    ``closed``: for good.
    """

    def __init__(self, *, state: Literal["open", "down"] = "open") -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._items: deque[WorkItem] = deque()
        self._wake_pending = False
        self._size_waiters = 0  # threads in wait_for_size (tests, diagnostics)
        self._state: Literal["open", "down", "closed"] = state
        self._closed_because = "The store is closed."
        self._closed_error: type[StoreError] = StoreClosedError
        self.writer_thread: int | None = None

    def put(self, item: WorkItem) -> bool:
        """Queue ``item``; True if the caller must wake the writer."""
        with self._lock:
            if self._state == "closed":
                raise self._closed_error(self._closed_because)
            if self._state == "down":
                raise StoreUnavailableError(
                    "The store writer failed and is being restarted; this transaction did "
                    "not run. Retry it."
                )
            self._items.append(item)
            if self._size_waiters:  # a notify nobody waits for still costs
                self._changed.notify_all()
            wake, self._wake_pending = not self._wake_pending, True
            return wake

    def wait_for_size(self, count: int, timeout_seconds: float | None) -> bool:
        with self._lock:
            # Counted under the lock put() checks it under: no wake-up is lost.
            self._size_waiters += 1
            try:
                return self._changed.wait_for(lambda: len(self._items) >= count, timeout_seconds)
            finally:
                self._size_waiters -= 1

    def take_all(self) -> list[WorkItem]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            # Cleared while holding the lock: anything queued after this wakes us again.
            self._wake_pending = False
            return items

    def is_empty(self) -> bool:
        with self._lock:
            return not self._items

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._state == "closed"

    def open(self) -> None:
        """A (new) writer serves the inbox: admit work again. The first put wakes it."""
        with self._lock:
            if self._state == "closed":
                raise StoreClosedError("The store is closed.")
            self._state = "open"
            self._wake_pending = False

    def go_down(self) -> list[WorkItem]:
        """The writer failed: refuse work until :meth:`open`; returns what was queued."""
        return self._drain("down")

    def close(
        self, because: str = "The store is closed.", error: type[StoreError] = StoreClosedError
    ) -> list[WorkItem]:
        """Refuse new work for good (``because`` tells later callers why, as ``error``);
        returns whatever was still queued."""
        return self._drain("closed", because, error)

    @property
    def refusal(self) -> StoreError | None:
        """Closed for good by a failure (not by ``close()``): the error later callers get."""
        with self._lock:
            if self._state != "closed" or self._closed_error is StoreClosedError:
                return None
            return self._closed_error(self._closed_because)

    def _drain(
        self,
        state: Literal["down", "closed"],
        because: str = "",
        error: type[StoreError] = StoreClosedError,
    ) -> list[WorkItem]:
        with self._lock:
            if self._state != "closed":
                self._state = state
                self._closed_because = because or self._closed_because
                self._closed_error = error
            items = list(self._items)
            self._items.clear()
            return items


_COUNTER_NAMES = tuple(WriterStatistics.__struct_fields__)


class Counters:
    """The writer's counters as plain ``int`` attributes (one per ``WriterStatistics`` field).

    Updated under ``lock`` so a :meth:`snapshot` is consistent; the writer's success path
    uses :meth:`group_committed` (a handful of integer additions, no struct rebuilt per
    group). ``operations`` lives in the fault injector and is filled in by
    ``statistics()``. Each committed group is also observed in two histograms, its size and
    its latency (BEGIN to COMMIT returned), under the same lock (:meth:`histograms`).
    """

    transactions: int
    failed_transactions: int
    groups: int
    commits: int
    commit_errors: int
    max_group_size: int
    checkpoints: int
    checkpoint_errors: int
    operations: int
    wal_pages: int

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Notified when a checkpoint finished (they run in the background: tests wait).
        self._checkpointed = threading.Condition(self.lock)
        for name in _COUNTER_NAMES:
            setattr(self, name, 0)
        self._commit_seconds = BucketCounts(COMMIT_SECONDS_BOUNDS)
        self._group_sizes = BucketCounts(GROUP_SIZE_BOUNDS)

    def add(self, **deltas: int) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
            if "checkpoints" in deltas or "checkpoint_errors" in deltas:
                self._checkpointed.notify_all()

    def group_committed(
        self, transactions: int, failed_transactions: int, seconds: float | None = None
    ) -> None:
        """A group's COMMIT returned: ``transactions`` items answered with their value,
        ``failed_transactions`` that failed alone (their savepoint rolled back), ``seconds``
        from its BEGIN to its COMMIT returning (None: not measured)."""
        with self.lock:
            self.groups += 1
            self.commits += 1
            self.transactions += transactions
            self.failed_transactions += failed_transactions
            self._group_sizes.observe(transactions + failed_transactions)
            if seconds is not None:
                self._commit_seconds.observe(seconds)

    def histograms(self) -> tuple[HistogramSnapshot, HistogramSnapshot]:
        """(commit latency in seconds, group size) over every committed group so far."""
        with self.lock:
            return self._commit_seconds.snapshot(), self._group_sizes.snapshot()

    def group_size(self, size: int) -> None:
        """A group of ``size`` items reached its COMMIT."""
        if size > self.max_group_size:  # only the writer's thread writes it
            with self.lock:
                self.max_group_size = size

    def wait_for_checkpoints(self, count: int, timeout_seconds: float | None) -> bool:
        """Wait until ``count`` checkpoints have finished (or failed); False on timeout."""

        def finished() -> bool:
            return self.checkpoints + self.checkpoint_errors >= count

        with self.lock:
            return self._checkpointed.wait_for(finished, timeout_seconds)

    def set(self, **values: int) -> None:
        with self.lock:
            for name, value in values.items():
                setattr(self, name, value)

    def snapshot(self, operations: int) -> WriterStatistics:
        """The counters as one consistent :class:`WriterStatistics`."""
        with self.lock:
            values = {name: getattr(self, name) for name in _COUNTER_NAMES}
        values["operations"] = operations
        return WriterStatistics(**values)
