"""The StoreWriter actor: the only connection that writes, with group commit.

Callers submit ``work(tx)`` through a :class:`StoreWriterHandle`; the work item goes into an
inbox and the actor is woken (at most one wake-up is outstanding). The actor drains the
whole inbox and runs it as one group:

1. ``BEGIN``;
2. each work item inside its own ``SAVEPOINT``: an item that raises rolls back alone and its
   caller gets that exception, its group-mates are unaffected. A group of one item needs no
   savepoint (two statements fewer per transaction): if it raises, the whole transaction,
   which holds nothing else, rolls back instead (no COMMIT);
3. one ``COMMIT`` (one fsync) for the whole group;
4. the ``after_commit`` callbacks, then every caller is answered.

Invariant: no caller is told "done" before the COMMIT that made its work durable returned.
A COMMIT that reports an error may still have committed, so every caller whose work was in
that group gets :class:`~agentkeep.errors.CommitOutcomeUnknownError` and must re-read (unless
the backend found out what became of it). The writer rolls back whatever is left and stays
usable for the next group.

The actor owns a :class:`~agentkeep.persistence.writer_backend.WriterBackend`, the part
that differs per database: its connection, how a transaction and an item begin and end, what
an error means to the caller, what to do between groups
(:class:`~agentkeep.persistence.sqlite_writer.SqliteWriterBackend`, and
:class:`~agentkeep.persistence.postgres.writer.PostgresWriterBackend`). The actor keeps what
is the same on every database: the inbox, the groups, the order of answers, supervision.

Supervised (``Store.open(start_writer=False)`` then ``Store.start_writer()`` from a supervisor's
child spec), a writer that fails answers its callers, closes its connection and leaves the inbox
``down``: new work is refused with :class:`~agentkeep.errors.StoreUnavailableError` until the
supervisor starts the next incarnation on a fresh connection. Unsupervised, a failure closes
the store.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pykka
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Tracer

from agentkeep.errors import (
    CommitOutcomeUnknownError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentkeep.logs import get_logger
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.faults import end_writer_if_injected
from agentkeep.persistence.handle import WAKE, StoreWriterHandle, mark_writer_thread
from agentkeep.persistence.inbox import Counters, Inbox, WorkItem, WriterStatistics
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.transaction import SqliteTransaction
from agentkeep.persistence.writer_backend import RefusedAtCommitError, StopForGood, WriterBackend
from agentkeep.tracing import names as span_names
from agentkeep.tracing import tracer as configured_tracer

if TYPE_CHECKING:
    from pykka._actor import ActorInbox

log = get_logger(__name__)

__all__ = ["StoreWriter", "StoreWriterHandle", "WriterStatistics"]

#: Items that ran and await the COMMIT: the item, what its work returned, its callbacks.
Done = list[tuple[WorkItem, Any, list[Callable[[], None]]]]
#: Items whose savepoint rolled back: answered with their error once the COMMIT returned.
FailedAlone = list[tuple[WorkItem, BaseException]]


class StoreWriter(pykka.ThreadingActor):
    """The actor owning the writing connection, through its backend (see the module).

    ``restartable``: a supervisor restarts this writer when it fails (``Store.start_writer``),
    so a failure leaves the inbox ``down`` rather than closed. Either way the failure's
    cleanup (answer every caller, close the connection) finishes in the actor's own thread
    *before* pykka marks it stopped, so a restart never overlaps the incarnation it replaces.
    """

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        # A C mailbox: woken on every commit, and pykka only puts, gets and asks
        # ``empty`` on it — see ``agentkeep.actors.supervision.inbox`` (not imported: layering).
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        return inbox

    def __init__(
        self,
        backend: WriterBackend,
        inbox: Inbox,
        counters: Counters,
        *,
        restartable: bool = False,
        on_failure: Callable[[], None] | None = None,
        ledger: LedgerHub | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__()
        self._backend = backend
        # The store's clock: every timestamp this writer's transactions write reads it.
        self._clock = clock
        self._ledger = ledger
        self._on_failure = on_failure
        self._open = True  # the backend's connection is open (closed once, by either end)
        self._inbox = inbox
        self._counters = counters
        self._restartable = restartable
        self._began = 0.0  # perf_counter() at the current group's BEGIN (its commit latency)

    def on_start(self) -> None:
        self._inbox.writer_thread = threading.get_ident()
        mark_writer_thread()
        store_clock.install(self._clock)

    def on_receive(self, message: Any) -> None:
        if message is WAKE:
            self._serve()

    def on_stop(self) -> None:
        for item in self._inbox.close():
            item.fail(StoreClosedError("The store closed before this transaction ran."))
        self._close(clean=True)

    def on_failure(self, *exc_info: Any) -> None:
        # Normally done already, in _serve, before pykka saw the failure.
        self._fail_over(exc_info[1])

    # -- serving -----------------------------------------------------------------------------
    def _serve(self) -> None:
        items: list[WorkItem] = []
        try:
            while items := self._inbox.take_all():
                pending = deque(items)
                tracer = configured_tracer()  # None: no provider, no span (docs/observability.md)
                while pending:
                    if tracer is None:
                        self._run_group(pending)
                    else:
                        self._run_group_traced(tracer, pending)
                items = []
                self._backend.between_groups()
        except BaseException as exc:
            self._fail_over(exc, in_flight=items)
            raise

    def _fail_over(self, cause: BaseException | None, in_flight: Sequence[WorkItem] = ()) -> None:
        """After a failure (a bug in the writer itself): refuse new work, tell the listener a
        restart is coming, answer every caller, close the connection. Idempotent.

        Order matters: the inbox refuses work and the listener hears *before* any caller is
        answered, so no caller can act on its answer while the runtime still looks healthy.
        ``in_flight`` (taken for the group that failed) may or may not have committed: outcome
        unknown; what was still queued never ran. Restartable: the inbox waits ``down`` for
        the next incarnation; otherwise the store is closed for good.
        """
        if not self._open:
            return
        if self._restartable:
            queued = self._inbox.go_down()
            message = "The store writer failed before this transaction ran; retry it."
            error: StoreError = StoreUnavailableError(message)
        else:
            because = f"The store writer failed ({cause!r}); the store is closed: reopen it."
            queued = self._inbox.close(because)
            error = StoreClosedError(because)
        log.error("store_writer_failed", error=repr(cause), restartable=self._restartable)
        if self._on_failure is not None:
            try:
                self._on_failure()
            except Exception as exc:  # the listener's bug must not stop the restart
                log.exception("store_writer_failure_listener_failed", error=repr(exc))
        for item in in_flight:  # items already answered ignore this
            unknown = CommitOutcomeUnknownError(f"The store writer failed: {cause!r}")
            unknown.__cause__ = cause
            item.fail(unknown)
        error.__cause__ = cause
        for item in queued:
            item.fail(error)
        self._counters.add(failed_transactions=len(queued))
        self._close(clean=False)

    def _close(self, *, clean: bool) -> None:
        if self._open:
            self._open = False
            self._backend.close(clean=clean)

    def _run_group_traced(self, tracer: Tracer, pending: deque[WorkItem]) -> None:
        """:meth:`_run_group` in one span: a group commit, with its size (one span per
        group, never per statement or work item)."""
        before = len(pending)
        callers = [item.caller for item in pending if item.caller is not None]
        # A group of one is a child of its caller's span (a turn's commit sits in the turn's
        # tree); a larger group serves many callers: it links to each. Never the writer
        # thread's current context.
        if before == 1 and callers:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(callers[0]))
        else:
            parent = otel_context.Context()
        links = [trace.Link(caller) for caller in callers]
        span = tracer.start_span(span_names.STORE_COMMIT, context=parent, links=links)
        try:
            self._run_group(pending)
        finally:
            span.set_attribute(span_names.STORE_GROUP_SIZE, before - len(pending))
            span.end()

    def _run_group(self, pending: deque[WorkItem]) -> None:
        """Run items from ``pending`` as one transaction; leaves unrun items in ``pending``."""
        backend = self._backend
        self._began = time.perf_counter()
        try:
            backend.begin()
        except BaseException as exc:
            end_writer_if_injected(exc)
            # Nothing ran, so nothing committed: the outcome is known, hand back the cause.
            backend.rollback()
            failed = list(pending)
            pending.clear()
            if isinstance(exc, StopForGood):
                self._stop_for_good(exc.error, [], [(item, exc.error) for item in failed])
                return
            refused = backend.refused(exc)
            for item in failed:
                item.fail(refused)
            self._counters.add(failed_transactions=len(failed))
            log.warning("store_begin_failed", error=repr(exc), callers=len(failed))
            return
        if len(pending) == 1:
            self._run_alone(pending.popleft())
            return
        done: Done = []
        failed_alone: FailedAlone = []
        while pending:
            item = pending.popleft()
            tx = SqliteTransaction(backend.statements, ledger=self._ledger)
            try:
                backend.begin_item(alone=False)
                value = item.work(tx)
                backend.end_item(alone=False)
            except BaseException as exc:
                tx.expire()
                end_writer_if_injected(exc)
                refused = backend.refused(exc)
                if backend.roll_back_item():
                    failed_alone.append((item, refused))
                    continue
                # The database abandoned the whole transaction: the group-mates' work is gone
                # too (not committed, a known outcome). Unrun items stay in ``pending``.
                backend.rollback()
                item.fail(refused)
                for mate, _value, _callbacks in done:
                    lost = StoreError("The transaction was rolled back with a failing group-mate.")
                    lost.__cause__ = refused
                    mate.fail(lost)
                for mate, error in failed_alone:
                    mate.fail(error)
                self._counters.add(groups=1, failed_transactions=1 + len(done) + len(failed_alone))
                log.warning("store_group_rolled_back", error=repr(exc), callers=1 + len(done))
                return
            done.append((item, value, tx.expire()))
        self._commit(done, failed_alone)

    def _run_alone(self, item: WorkItem) -> None:
        """Run a group's only item without a savepoint: if it fails, the whole transaction
        (nothing but its own work) rolls back, so no group-mate can lose anything."""
        backend = self._backend
        tx = SqliteTransaction(backend.statements, ledger=self._ledger)
        try:
            backend.begin_item(alone=True)
            value = item.work(tx)
            backend.end_item(alone=True)
        except BaseException as exc:
            tx.expire()
            end_writer_if_injected(exc)
            refused = backend.refused(exc)
            backend.rollback()
            item.fail(refused)
            self._counters.add(groups=1, failed_transactions=1)
            return
        self._commit([(item, value, tx.expire())], [])

    def _commit(self, done: Done, failed_alone: FailedAlone) -> None:
        backend = self._backend
        self._counters.group_size(len(done) + len(failed_alone))
        try:
            backend.commit()
        except StopForGood as stop:  # nothing was sent: nothing written
            backend.rollback()
            self._counters.add(groups=1)
            self._stop_for_good(stop.error, done, failed_alone)
            return
        except RefusedAtCommitError as refused:  # the item's own write: as in _run_alone
            backend.rollback()
            _answer_failed(failed_alone)
            for item, _value, _callbacks in done:
                item.fail(refused.refusal)
            self._counters.add(groups=1, failed_transactions=len(done) + len(failed_alone))
            return
        except BaseException as exc:
            end_writer_if_injected(exc)
            backend.rollback()
            _answer_failed(failed_alone)
            self._fail_unknown(done, exc)
            self._counters.add(
                groups=1, commit_errors=1, failed_transactions=len(done) + len(failed_alone)
            )
            log.error("store_commit_failed", error=repr(exc), callers=len(done))
            return
        seconds = time.perf_counter() - self._began
        try:
            # Fault point: durable, but no caller has heard yet (a crash here is the case
            # where callers must re-read by identity).
            backend.statements.tick("after_commit")
        except BaseException as exc:
            end_writer_if_injected(exc)
            _answer_failed(failed_alone)
            self._fail_unknown(done, exc)
            self._counters.add(
                groups=1, commits=1, failed_transactions=len(done) + len(failed_alone)
            )
            return
        for _item, _value, callbacks in done:
            for callback in callbacks:
                try:
                    callback()
                except Exception as exc:  # committed already: report, never un-answer
                    log.exception("store_after_commit_callback_failed", error=repr(exc))
        _answer_failed(failed_alone)
        for item, value, _callbacks in done:
            item.succeed(value)
        self._counters.group_committed(len(done), len(failed_alone), seconds)

    def _stop_for_good(self, error: StoreError, done: Done, failed_alone: FailedAlone) -> None:
        """Nothing of this group was written: close the inbox for good with ``error`` and
        answer every caller with it, this group's and those still queued."""
        queued = self._inbox.close(str(error), type(error))
        for item, _value, _callbacks in done:
            item.fail(error)
        for item, _error in failed_alone:
            item.fail(error)
        for item in queued:
            item.fail(error)
        self._counters.add(failed_transactions=len(done) + len(failed_alone) + len(queued))

    def _fail_unknown(self, done: Done, cause: BaseException) -> None:
        for item, _value, _callbacks in done:
            error = self._backend.commit_failed(cause)
            if error.__cause__ is None:  # a backend may name a deeper cause
                error.__cause__ = cause
            item.fail(error)


def _answer_failed(failed_alone: FailedAlone) -> None:
    """Answer the items that failed alone (their savepoint rolled back, nothing of theirs is
    written) only once the group's COMMIT has returned: a failure can rest on what a
    group-mate wrote (``AgentExistsError`` for an id a mate created), and a caller acting on
    it — reading that id back — must find the mate's write committed."""
    for item, error in failed_alone:
        item.fail(error)
