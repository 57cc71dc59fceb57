"""The StoreWriter actor: the only connection that writes, with group commit.

Callers submit ``work(tx)`` through a :class:`StoreWriterHandle`; the work item goes into an
inbox and the actor is woken (at most one wake-up is outstanding). The actor drains the
whole inbox and runs it as one group:

1. ``BEGIN IMMEDIATE``;
2. each work item inside its own ``SAVEPOINT``: an item that raises rolls back alone and its
   caller gets that exception, its group-mates are unaffected. A group of one item needs no
   savepoint (two statements fewer per transaction): if it raises, the whole transaction,
   which holds nothing else, rolls back instead (no COMMIT);
3. one ``COMMIT`` (one fsync under ``synchronous=FULL``) for the whole group;
4. the ``after_commit`` callbacks, then every caller is answered.

Invariant: no caller is told "done" before the COMMIT that made its work durable returned.
A COMMIT that reports an error may still have committed, so every caller whose work was in
that group gets :class:`~agentkeep.errors.CommitOutcomeUnknownError` and must re-read. The
writer rolls back whatever is left and stays usable for the next group.

Supervised (``Store.open(start_writer=False)`` then ``Store.start_writer()`` from a supervisor's
child spec), a writer that fails answers its callers, closes its connection and leaves the inbox
``down``: new work is refused with :class:`~agentkeep.errors.StoreUnavailableError` until the
supervisor starts the next incarnation on a fresh connection. Unsupervised, a failure closes
the store.

A file system that refuses a write (full, read-only: ``SQLITE_FULL``, ``SQLITE_READONLY``,
an I/O error with ``ENOSPC``/``EDQUOT``/``EROFS``) is not a writer failure: the callers get
:class:`~agentkeep.errors.StoreNotWritableError` (before COMMIT: not written) or
:class:`~agentkeep.errors.CommitNotWritableError` (COMMIT itself: outcome unknown), both
saying why, and the next group tries again, so writes resume by themselves once space is back.

Before each COMMIT the writer checks that the database path still names the file it opened
(device and inode). Deleted or replaced, the group is rolled back and the store stops for
good with :class:`~agentkeep.errors.StoreReplacedError`: acknowledging a write into an
unlinked file would lose it at the next start.

Automatic checkpoints are off (``wal_autocheckpoint=0``) so a checkpoint error can never
surface as a COMMIT error; the writer checkpoints when its inbox is empty, the bulk of it in
the background (:mod:`agentkeep.persistence.checkpointer`, see ``_maybe_checkpoint``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import apsw
import pykka
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Tracer

from agentkeep.errors import (
    CommitNotWritableError,
    CommitOutcomeUnknownError,
    StoreClosedError,
    StoreError,
    StoreReplacedError,
    StoreUnavailableError,
)
from agentkeep.logs import get_logger
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.checkpointer import Checkpointer
from agentkeep.persistence.constraints import constraint_refusal
from agentkeep.persistence.disk import REFUSALS, disk_refusal, file_identity, refused_by_disk
from agentkeep.persistence.faults import FaultInjector, InjectedWriterCrashError
from agentkeep.persistence.handle import WAKE, StoreWriterHandle, mark_writer_thread
from agentkeep.persistence.inbox import Counters, Inbox, WorkItem, WriterStatistics
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.transaction import SqliteTransaction, Statements
from agentkeep.tracing import names as span_names
from agentkeep.tracing import tracer as configured_tracer

if TYPE_CHECKING:
    from pykka._actor import ActorInbox

log = get_logger(__name__)

_SAVEPOINT = "agentkeep_work_item"
#: Background checkpoints asked for before the writer copies a tail that raced them itself.
_BACKGROUND_ROUNDS = 1
_BEGIN_ITEM = f"SAVEPOINT {_SAVEPOINT}"
_END_ITEM = f"RELEASE {_SAVEPOINT}"

__all__ = ["RefusedAtCommitError", "StoreWriter", "StoreWriterHandle", "WriterStatistics"]


class RefusedAtCommitError(Exception):
    """Raised by a backend's COMMIT when a lone item's own write failed in the round trip
    its COMMIT was sent in (PostgreSQL's batch): the server skipped the COMMIT, so the
    outcome is known (nothing written). The item fails with ``refusal``, as if the write
    had failed before the COMMIT: not a commit error."""

    def __init__(self, refusal: BaseException) -> None:
        super().__init__(f"not committed: {refusal!r}")
        self.refusal = refusal


def _end_writer_if_injected(error: BaseException) -> None:
    """A ``writer`` fault is not one item's failure: let it end the actor (chaos testing)."""
    if isinstance(error, InjectedWriterCrashError):
        raise error


class StoreWriter(pykka.ThreadingActor):
    """The actor owning the writing connection (see the module docstring).

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
        connection: apsw.Connection,
        inbox: Inbox,
        counters: Counters,
        faults: FaultInjector,
        *,
        checkpoint_pages: int,
        restartable: bool = False,
        on_failure: Callable[[], None] | None = None,
        ledger: LedgerHub | None = None,
        database: str | None = None,
        identity: tuple[int, int] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__()
        # The store's clock: every timestamp this writer's transactions write reads it.
        self._clock = clock
        self._ledger = ledger
        # The file this writer's connection opened, checked before each COMMIT.
        self._database = database
        self._identity = identity
        self._on_failure = on_failure
        self._connection = connection
        self._connection_open = True
        self._inbox = inbox
        self._counters = counters
        self._faults = faults
        self._statements = Statements(connection, faults)
        self._checkpoint_pages = checkpoint_pages
        self._restartable = restartable
        self._wal_pages = 0  # frames in the WAL after the last commit (the WAL hook)
        self._checkpointed_at = 0  # frames in the WAL when the last checkpoint began
        self._rounds = 0  # background checkpoints since then, the WAL not restarted yet
        self._checkpointer = Checkpointer(connection, counters)
        self._began = 0.0  # perf_counter() at the current group's BEGIN (its commit latency)
        connection.set_wal_hook(self._on_wal_commit)

    def _on_wal_commit(self, _connection: apsw.Connection, _name: str, pages: int) -> int:
        self._wal_pages = pages
        return apsw.SQLITE_OK

    def on_start(self) -> None:
        self._inbox.writer_thread = threading.get_ident()
        mark_writer_thread()
        store_clock.install(self._clock)

    def on_receive(self, message: Any) -> None:
        if message is WAKE:
            self._serve()

    def on_stop(self) -> None:
        self._shut_down()

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
                self._counters.wal_pages = self._wal_pages  # one int: atomic
                self._maybe_checkpoint()
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
        if not self._connection_open:
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
        self._rollback()
        self._close_connection()

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
        self._began = time.perf_counter()
        try:
            self._begin()
        except BaseException as exc:
            _end_writer_if_injected(exc)
            # Nothing ran, so nothing committed: the outcome is known, hand back the cause.
            self._rollback()
            failed = list(pending)
            pending.clear()
            refused = self._refused(exc)
            for item in failed:
                item.fail(refused)
            self._counters.add(failed_transactions=len(failed))
            log.warning("store_begin_failed", error=repr(exc), callers=len(failed))
            return
        if len(pending) == 1:
            self._run_alone(pending.popleft())
            return
        done: list[tuple[WorkItem, Any, list[Callable[[], None]]]] = []
        failed_alone: list[tuple[WorkItem, BaseException]] = []
        while pending:
            item = pending.popleft()
            tx = SqliteTransaction(self._statements, ledger=self._ledger)
            try:
                self._begin_item(alone=False)
                value = item.work(tx)
                self._end_item(alone=False)
            except BaseException as exc:
                tx.expire()
                _end_writer_if_injected(exc)
                refused = self._refused(exc)
                if self._roll_back_item():
                    failed_alone.append((item, refused))
                    continue
                # SQLite abandoned the whole transaction: the group-mates' work is gone
                # too (not committed, a known outcome). Unrun items stay in ``pending``.
                self._rollback()
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

    def _begin(self) -> None:
        """Open the group's transaction (a backend's writer may first make sure it still
        owns the store)."""
        self._statements.execute("BEGIN IMMEDIATE")

    def _begin_item(self, *, alone: bool) -> None:
        """Start a work item: its ``SAVEPOINT``, none for a group's lone item (a backend
        whose statements are round trips may start sending them without waiting)."""
        if not alone:
            self._statements.execute(_BEGIN_ITEM)

    def _end_item(self, *, alone: bool) -> None:
        """End a work item whose work returned: its ``RELEASE`` (a lone item: what its
        ``RELEASE`` would do). Raises what the item's statements raised."""
        if alone:
            self._statements.end_item()
        else:
            self._statements.execute(_END_ITEM)

    def _run_alone(self, item: WorkItem) -> None:
        """Run a group's only item without a savepoint: if it fails, the whole transaction
        (nothing but its own work) rolls back, so no group-mate can lose anything."""
        tx = SqliteTransaction(self._statements, ledger=self._ledger)
        try:
            self._begin_item(alone=True)
            value = item.work(tx)
            self._end_item(alone=True)
        except BaseException as exc:
            tx.expire()
            _end_writer_if_injected(exc)
            refused = self._refused(exc)
            self._rollback()
            item.fail(refused)
            self._counters.add(groups=1, failed_transactions=1)
            return
        self._commit([(item, value, tx.expire())], [])

    def _commit(
        self,
        done: list[tuple[WorkItem, Any, list[Callable[[], None]]]],
        failed_alone: list[tuple[WorkItem, BaseException]],
    ) -> None:
        self._counters.group_size(len(done) + len(failed_alone))
        if self._file_replaced(done, failed_alone):
            return
        try:
            self._commit_statement()
        except RefusedAtCommitError as refused:  # the item's own write: as in _run_alone
            self._rollback()
            _answer_failed(failed_alone)
            for item, _value, _callbacks in done:
                item.fail(refused.refusal)
            self._counters.add(groups=1, failed_transactions=len(done) + len(failed_alone))
            return
        except BaseException as exc:
            _end_writer_if_injected(exc)
            self._rollback()
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
            self._statements.tick("after_commit")
        except BaseException as exc:
            _end_writer_if_injected(exc)
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

    def _commit_statement(self) -> None:
        """Send the group's COMMIT (a backend's writer may wrap it with its fault hooks)."""
        self._statements.execute("COMMIT")

    def _file_replaced(
        self,
        done: list[tuple[WorkItem, Any, list[Callable[[], None]]]],
        failed_alone: list[tuple[WorkItem, BaseException]],
    ) -> bool:
        """Before COMMIT: is the database path still the file this connection opened?

        If not (deleted, or replaced by another file), roll the group back (a known
        outcome: nothing written), close the inbox for good with ``StoreReplacedError``
        and answer every caller with it; True then.
        """
        if self._database is None or self._identity is None:
            return False
        try:
            now = file_identity(self._database)
        except OSError:
            return False  # cannot tell (a permission change): the COMMIT itself will say
        if now == self._identity:
            return False
        what = "deleted" if now is None else "replaced by another file"
        because = (
            f"The database file {self._database} was {what} while the store was open; "
            "writes into the old file would be lost at the next start, so the store stopped "
            "accepting them. Restart the owner."
        )
        self._rollback()
        queued = self._inbox.close(because, StoreReplacedError)
        log.error("store_file_replaced", path=self._database, deleted=now is None)
        error = StoreReplacedError(because)
        for item, _value, _callbacks in done:
            item.fail(error)
        for item, _error in failed_alone:
            item.fail(error)
        for item in queued:
            item.fail(error)
        self._counters.add(groups=1, failed_transactions=len(done) + len(failed_alone))
        return True

    def _fail_unknown(
        self, done: list[tuple[WorkItem, Any, list[Callable[[], None]]]], cause: BaseException
    ) -> None:
        reason = self._disk_refusal(cause)
        for item, _value, _callbacks in done:
            unknown: CommitOutcomeUnknownError
            if reason is not None:
                unknown = CommitNotWritableError(
                    f"COMMIT failed: {REFUSALS[reason]} ({cause}). The transaction may or "
                    "may not be durable: re-read by identity (or retry with the same "
                    "idempotency key) once writes succeed again; they resume by themselves.",
                    reason=reason,
                )
            else:
                unknown = CommitOutcomeUnknownError(
                    f"COMMIT reported {cause!r}; the transaction may or may not be durable. "
                    "Re-read by identity before acting on it."
                )
            unknown.__cause__ = cause
            item.fail(unknown)

    def _refused(self, error: BaseException) -> BaseException:
        """``error`` as the caller hears it: a file system's refusal says why, a broken
        rule of the schema is a :class:`~agentkeep.errors.StoreConstraintError` (a backend
        with another driver overrides this)."""
        if isinstance(error, apsw.ConstraintError):
            return constraint_refusal(error, str(error))
        return refused_by_disk(self._connection, error)

    def _disk_refusal(self, error: BaseException) -> str | None:
        return disk_refusal(self._connection, error)

    def _roll_back_item(self) -> bool:
        """Undo the current item's savepoint; False if the outer transaction is gone."""
        connection = self._connection
        if connection.get_autocommit():
            return False
        try:
            connection.execute(f"ROLLBACK TO {_SAVEPOINT}")
            connection.execute(f"RELEASE {_SAVEPOINT}")
        except apsw.SQLError as exc:
            # The fault hit SAVEPOINT itself: nothing of this item exists to undo.
            if "no such savepoint" not in str(exc):
                return False
        except apsw.Error:
            return False
        return not connection.get_autocommit()

    def _rollback(self) -> None:
        # Cleanup is not a counted operation: after a fault it must still run.
        self._statements.reset()  # a failed item may have left a read unfinished
        if self._connection.get_autocommit():
            return
        try:
            self._connection.execute("ROLLBACK")
        except apsw.Error as exc:
            log.error("store_rollback_failed", error=repr(exc))

    def _maybe_checkpoint(self) -> None:
        """Between groups, outside any COMMIT: checkpoint once the WAL grew by the threshold.

        Idle (nothing queued), it is handed to the background checkpointer, so the commit
        that arrives meanwhile does not wait for it (it nearly always arrived, and
        waited 2–10 ms, about one step in 33). The WAL restarts only at a commit that began
        with every frame copied; commits racing the checkpointer leave a tail, so it is
        asked again at the next idle moments until the WAL restarted — after
        ``_BACKGROUND_ROUNDS`` rounds the writer copies the tail itself, with no commit
        racing. Under unbroken load the WAL would grow forever, so past 4x the threshold
        the writer checkpoints itself anyway. One checkpoint at a time.
        """
        pages, threshold = self._wal_pages, self._checkpoint_pages
        if pages < self._checkpointed_at:  # the WAL restarted
            self._checkpointed_at = 0
            self._rounds = 0
        if self._checkpointer.busy:
            return
        if pages >= 4 * threshold:
            self._checkpointed_at = pages
            self._rounds = 0
            self._checkpoint()
        elif not self._inbox.is_empty():
            return
        elif self._rounds >= _BACKGROUND_ROUNDS:
            self._rounds = 0
            self._checkpoint()
        elif self._rounds > 0 or pages - self._checkpointed_at >= threshold:
            if self._rounds == 0:
                self._checkpointed_at = pages
            if self._checkpoint(background=True):
                self._rounds += 1

    def _checkpoint(
        self,
        mode: int = apsw.SQLITE_CHECKPOINT_PASSIVE,
        *,
        final: bool = False,
        background: bool = False,
    ) -> bool:
        """Checkpoint here, or hand it to the background checkpointer (which counts it once
        it finished); the fault point is counted here either way, in the writer's own
        sequence of operations. False if it failed (or was not handed over)."""
        try:
            self._statements.tick("checkpoint")
            if background:
                return self._checkpointer.request()
            self._statements.reset()  # no statement left open under the checkpoint
            self._connection.wal_checkpoint(mode=mode)
        except Exception as exc:
            if not final:  # the last checkpoint of a closing store ends nothing
                _end_writer_if_injected(exc)
            self._counters.add(checkpoint_errors=1)
            log.warning("store_checkpoint_failed", error=repr(exc))
            return False
        self._counters.add(checkpoints=1)
        return True

    def _shut_down(self) -> None:
        for item in self._inbox.close():
            item.fail(StoreClosedError("The store closed before this transaction ran."))
        if not self._connection_open:
            return
        self._checkpointer.close()  # a background checkpoint under way finishes first
        if not self._faults.crashed:
            self._checkpoint(apsw.SQLITE_CHECKPOINT_TRUNCATE, final=True)
        self._rollback()
        self._close_connection()

    def _close_connection(self) -> None:
        self._checkpointer.close()  # idempotent; before the connection it copies from goes
        self._connection_open = False
        try:
            self._connection.close()
        except apsw.Error as exc:
            log.error("store_writer_close_failed", error=repr(exc))


def _answer_failed(failed_alone: list[tuple[WorkItem, BaseException]]) -> None:
    """Answer the items that failed alone (their savepoint rolled back, nothing of theirs is
    written) only once the group's COMMIT has returned: a failure can rest on what a
    group-mate wrote (``AgentExistsError`` for an id a mate created), and a caller acting on
    it — reading that id back — must find the mate's write committed."""
    for item, error in failed_alone:
        item.fail(error)
