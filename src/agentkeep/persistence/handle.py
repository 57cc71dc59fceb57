"""The handle the rest of the runtime writes and reads through (a ``StoreHandle``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pykka

from agentkeep.errors import CommitOutcomeUnknownError, TransactionScopeError
from agentkeep.persistence.faults import FaultInjector
from agentkeep.persistence.histogram import HistogramSnapshot
from agentkeep.persistence.inbox import Counters, Inbox, WorkItem, WriterStatistics
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readers import ReaderPool

T = TypeVar("T")


#: Marks the threads of store writers (each writer incarnation's own pykka thread).
_THREAD = threading.local()


def mark_writer_thread() -> None:
    """Mark the calling thread as a store writer's: every transaction's work, and its
    after-commit callbacks, run in it."""
    _THREAD.writer = True


def in_store_transaction() -> bool:
    """True in a store writer's thread: inside some transaction's work (or its after-commit
    callbacks), where nothing may wait for a writer, an agent or the system — the caller
    holds the only writer. Commands that would are refused there
    (:class:`~agentkeep.errors.TransactionScopeError`)."""
    return bool(getattr(_THREAD, "writer", False))


class _Wake:
    """The only message the writer actor receives: "your inbox has work"."""


WAKE = _Wake()


class StoreWriterHandle:
    """Submits work to the :class:`StoreWriter`; implements ``StoreHandle``."""

    def __init__(
        self,
        actor_ref: pykka.ActorRef[Any] | None,
        inbox: Inbox,
        counters: Counters,
        readers: ReaderPool,
        faults: FaultInjector,
    ) -> None:
        self._actor_ref = actor_ref
        self._inbox = inbox
        self._counters = counters
        self._readers = readers
        self._faults = faults

    def attach(self, actor_ref: pykka.ActorRef[Any]) -> None:
        """Route wake-ups to a new writer incarnation (its supervisor restarted it)."""
        self._actor_ref = actor_ref

    def transact(
        self, work: Callable[[Transaction], T], *, timeout_seconds: float | None = None
    ) -> T:
        """Run ``work`` in the writer's transaction; see ``StoreHandle.transact``.

        Raises:
            CommitOutcomeUnknownError: COMMIT failed, or ``timeout_seconds`` passed before
                the writer answered (the work may still commit).
            StoreClosedError: the store is closed.
            StoreUnavailableError: the writer failed and is being restarted; the work did
                not run.
            TransactionScopeError: calling from inside a transaction (a writer's thread),
                which would wait for itself: use the lent transaction.
        """
        if self._inbox.writer_thread == threading.get_ident() or in_store_transaction():
            raise TransactionScopeError("transact()", "Use the Transaction your work was given.")
        item = WorkItem(work)
        if self._inbox.put(item) and (writer := self._actor_ref) is not None:
            # If the writer is dead its shutdown drained the inbox: the item is answered.
            with contextlib.suppress(pykka.ActorDeadError):
                writer.tell(WAKE)
        try:
            result: T = item.wait(timeout_seconds)
        except TimeoutError:
            raise CommitOutcomeUnknownError(
                f"No answer from the store writer within {timeout_seconds} s; the work may "
                "still commit. Re-read by identity before acting on it."
            ) from None
        return result

    @property
    def in_transaction(self) -> bool:
        """True when called from the writer's thread (inside a transaction's work), where
        :meth:`transact` is refused."""
        return self._inbox.writer_thread == threading.get_ident()

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run read-only ``work`` on a snapshot of committed state, in this thread."""
        return self._readers.read(work)

    def wait_for_queued(self, count: int, *, timeout_seconds: float | None = None) -> bool:
        """Wait until at least ``count`` work items wait in the writer's inbox.

        For tests and diagnostics: with the writer held busy, this is how a test knows its
        submitters have all queued (no sleeping). Returns False on timeout.
        """
        return self._inbox.wait_for_size(count, timeout_seconds)

    def wait_for_checkpoints(self, count: int, *, timeout_seconds: float | None = None) -> bool:
        """Wait until at least ``count`` checkpoints have finished or failed (they run in the
        background). For tests and diagnostics; returns False on timeout."""
        return self._counters.wait_for_checkpoints(count, timeout_seconds)

    def statistics(self) -> WriterStatistics:
        """A snapshot of the writer's counters."""
        return self._counters.snapshot(self._faults.operations)

    def commit_histograms(self) -> tuple[HistogramSnapshot, HistogramSnapshot]:
        """(commit latency in seconds, group size) of every group committed so far."""
        return self._counters.histograms()
