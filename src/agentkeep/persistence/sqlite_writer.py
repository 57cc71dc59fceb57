"""The store writer's backend on SQLite: one apsw connection to the database file.

The :class:`~agentkeep.persistence.writer.StoreWriter` actor owns one
:class:`SqliteWriterBackend`; what it adds to the actor's group commit is what a file needs:

- ``BEGIN IMMEDIATE`` takes SQLite's write lock at once; one ``COMMIT`` is one fsync under
  ``synchronous=FULL``.
- A file system that refuses a write (full, read-only: ``SQLITE_FULL``, ``SQLITE_READONLY``,
  an I/O error with ``ENOSPC``/``EDQUOT``/``EROFS``) is not a writer failure: the callers get
  :class:`~agentkeep.errors.StoreNotWritableError` (before COMMIT: not written) or
  :class:`~agentkeep.errors.CommitNotWritableError` (COMMIT itself: outcome unknown), both
  saying why, and the next group tries again, so writes resume by themselves once space is
  back.
- Before each COMMIT the backend checks that the database path still names the file it
  opened (device and inode). Deleted or replaced, the group is rolled back and the store stops
  for good with :class:`~agentkeep.errors.StoreReplacedError`: acknowledging a write into an
  unlinked file would lose it at the next start.
- Automatic checkpoints are off (``wal_autocheckpoint=0``) so a checkpoint error can never
  surface as a COMMIT error; the backend checkpoints when the inbox is empty, the bulk of it in
  the background (:mod:`agentkeep.persistence.checkpointer`, see :meth:`between_groups`).
"""

from __future__ import annotations

import apsw

from agentkeep.errors import CommitNotWritableError, StoreError, StoreReplacedError
from agentkeep.logs import get_logger
from agentkeep.persistence.checkpointer import Checkpointer
from agentkeep.persistence.codec import Statements
from agentkeep.persistence.constraints import constraint_refusal
from agentkeep.persistence.disk import REFUSALS, disk_refusal, file_identity, refused_by_disk
from agentkeep.persistence.faults import FaultInjector, end_writer_if_injected
from agentkeep.persistence.inbox import Counters, Inbox
from agentkeep.persistence.memo import (
    BEGIN_GROUP,
    BEGIN_ITEM,
    COMMIT_GROUP,
    END_ITEM,
    ITEM_SAVEPOINT,
)
from agentkeep.persistence.writer_backend import StopForGood, outcome_unknown

__all__ = ["SqliteWriterBackend"]

log = get_logger(__name__)

#: Background checkpoints asked for before the writer copies a tail that raced them itself.
_BACKGROUND_ROUNDS = 1


class SqliteWriterBackend:
    """The writer's connection to a SQLite file (see the module); implements
    :class:`~agentkeep.persistence.writer_backend.WriterBackend`."""

    def __init__(
        self,
        connection: apsw.Connection,
        inbox: Inbox,
        counters: Counters,
        faults: FaultInjector,
        *,
        checkpoint_pages: int,
        database: str | None = None,
        identity: tuple[int, int] | None = None,
    ) -> None:
        self._connection = connection
        self._inbox = inbox  # asked only whether it is empty (an idle moment to checkpoint)
        self._counters = counters
        self._faults = faults
        self._statements = Statements(connection, faults)
        # The file this connection opened, checked before each COMMIT.
        self._database = database
        self._identity = identity
        self._checkpoint_pages = checkpoint_pages
        self._wal_pages = 0  # frames in the WAL after the last commit (the WAL hook)
        self._checkpointed_at = 0  # frames in the WAL when the last checkpoint began
        self._rounds = 0  # background checkpoints since then, the WAL not restarted yet
        self._checkpointer = Checkpointer(connection, counters)
        connection.set_wal_hook(self._on_wal_commit)

    def _on_wal_commit(self, _connection: apsw.Connection, _name: str, pages: int) -> int:
        self._wal_pages = pages
        return apsw.SQLITE_OK

    @property
    def statements(self) -> Statements:
        return self._statements

    # -- a transaction -----------------------------------------------------------------------
    def begin(self) -> None:
        self._statements.execute(BEGIN_GROUP)

    def begin_item(self, *, alone: bool) -> None:
        if not alone:
            self._statements.execute(BEGIN_ITEM)

    def end_item(self, *, alone: bool) -> None:
        if alone:
            self._statements.end_item()
        else:
            self._statements.execute(END_ITEM)

    def commit(self) -> None:
        self._check_file()
        self._statements.execute(COMMIT_GROUP)

    def _check_file(self) -> None:
        """Before COMMIT: is the database path still the file this connection opened? If not
        (deleted, or replaced by another file), the store stops for good (:class:`StopForGood`
        with ``StoreReplacedError``): nothing of the group is written."""
        if self._database is None or self._identity is None:
            return
        try:
            now = file_identity(self._database)
        except OSError:
            return  # cannot tell (a permission change): the COMMIT itself will say
        if now == self._identity:
            return
        what = "deleted" if now is None else "replaced by another file"
        because = (
            f"The database file {self._database} was {what} while the store was open; "
            "writes into the old file would be lost at the next start, so the store stopped "
            "accepting them. Restart the owner."
        )
        log.error("store_file_replaced", path=self._database, deleted=now is None)
        raise StopForGood(StoreReplacedError(because))

    # -- what an error means to the caller ---------------------------------------------------
    def refused(self, error: BaseException) -> BaseException:
        """A file system's refusal says why; a broken rule of the schema is a
        :class:`~agentkeep.errors.StoreConstraintError`."""
        if isinstance(error, apsw.ConstraintError):
            return constraint_refusal(error, str(error))
        return refused_by_disk(self._connection, error)

    def commit_failed(self, cause: BaseException) -> StoreError:
        reason = disk_refusal(self._connection, cause)
        if reason is None:
            return outcome_unknown(cause)
        return CommitNotWritableError(
            f"COMMIT failed: {REFUSALS[reason]} ({cause}). The transaction may or "
            "may not be durable: re-read by identity (or retry with the same "
            "idempotency key) once writes succeed again; they resume by themselves.",
            reason=reason,
        )

    # -- undoing -----------------------------------------------------------------------------
    def roll_back_item(self) -> bool:
        connection = self._connection
        if connection.get_autocommit():
            return False
        try:
            connection.execute(f"ROLLBACK TO {ITEM_SAVEPOINT}")
            connection.execute(f"RELEASE {ITEM_SAVEPOINT}")
        except apsw.SQLError as exc:
            # The fault hit SAVEPOINT itself: nothing of this item exists to undo.
            if "no such savepoint" not in str(exc):
                return False
        except apsw.Error:
            return False
        return not connection.get_autocommit()

    def rollback(self) -> None:
        # Cleanup is not a counted operation: after a fault it must still run.
        self._statements.reset()  # a failed item may have left a read unfinished
        if self._connection.get_autocommit():
            return
        try:
            self._connection.execute("ROLLBACK")
        except apsw.Error as exc:
            log.error("store_rollback_failed", error=repr(exc))

    # -- between groups: checkpoints ---------------------------------------------------------
    def between_groups(self) -> None:
        """Outside any COMMIT: checkpoint once the WAL grew by the threshold.

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
        self._counters.wal_pages = pages  # one int: atomic
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
                end_writer_if_injected(exc)
            self._counters.add(checkpoint_errors=1)
            log.warning("store_checkpoint_failed", error=repr(exc))
            return False
        self._counters.add(checkpoints=1)
        return True

    def close(self, *, clean: bool) -> None:
        """A clean stop first lets a background checkpoint finish and truncates the WAL
        (unless the process is playing dead: a crash fault fired)."""
        self._checkpointer.close()  # before the connection it copies from goes
        if clean and not self._faults.crashed:
            self._checkpoint(apsw.SQLITE_CHECKPOINT_TRUNCATE, final=True)
        self.rollback()
        try:
            self._connection.close()
        except apsw.Error as exc:
            log.error("store_writer_close_failed", error=repr(exc))
