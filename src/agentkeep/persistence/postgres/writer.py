"""The store writer's backend on PostgreSQL: the owner's session instead of a file.

The :class:`~agentkeep.persistence.writer.StoreWriter` actor (one connection that writes, the
inbox drained into one transaction per group, a savepoint per item, one COMMIT, callers
answered only after it returned) owns one :class:`PostgresWriterBackend`, over the owner's
session (:class:`~agentkeep.persistence.postgres.session.OwnerSession`). What it adds is what
a server needs:

- **Ownership before every group.** A session psycopg saw drop is replaced only by
  :meth:`OwnerSession.reconnect`, which takes the lock again (or stops the store for good with
  :class:`~agentkeep.errors.StoreOwnershipLostError`, through
  :class:`~agentkeep.persistence.writer_backend.StopForGood`). Each new session gets a new executor,
  hence an empty memo: what this writer remembered may have changed while it held no lock.
  The group's ``BEGIN`` travels in its first batch, without a round trip of its own, when
  the session stayed quiet while it idled. The server writes to an idle session only to end
  it (a terminated backend's last message, a restart's closed socket) or with a notice, so
  one that did not stay quiet begins the old way, waiting: a ``BEGIN`` that finds it dead
  reconnects and begins once more (nothing had run, so nothing is repeated).
- **An unknown COMMIT outcome is resolved.** The group's ``BEGIN`` asks for its transaction id
  (``pg_current_xact_id()``) with a Flush request, so the server sends it at once, and the
  COMMIT is sent only once it arrived. If COMMIT raises, a separate connection makes
  sure the old session is gone (terminating it if the server still runs it: it is this
  owner's, so the outcome is final once it ended) and asks ``pg_xact_status``: ``committed``
  answers every caller as a successful COMMIT would (after-commit callbacks included);
  ``aborted`` answers :class:`~agentkeep.errors.StoreUnavailableError` (not written, retry);
  only when the server cannot be asked does the caller get ``CommitOutcomeUnknownError``.
- **A work item is one batch** (libpq's pipeline mode, :mod:`.batch`): its ``SAVEPOINT``,
  the writes it sends without reading their result (``Statements.send``) and its ``RELEASE``
  travel together and are waited for once, at the item's end; a statement whose result the
  item reads waits (for all sent before it too). A sent statement that failed raises at that
  next wait or at the item's end, so the item fails alone as before: ``ROLLBACK TO`` its
  savepoint after leaving the batch. A group's **lone item** (no savepoint) leaves its batch
  open and the group's ``COMMIT`` joins it: one round trip waits for its ``BEGIN``, its writes
  and its COMMIT. If one of its writes failed, the server skipped the COMMIT (the transaction is
  left failed, a known outcome: the item fails with that write's refusal, as when it fails
  before the COMMIT: not a commit error); if the connection dropped, the outcome is resolved
  as below. A group of several items commits after its batches. Either way callers are
  answered only once the COMMIT's answer arrived (or its outcome was resolved).
- **Other processes are told of its commits** (a partition's owner only: a classic store has
  no other reader to wake). Each work item that appended ledger events sends, in its own
  batch, one ``pg_notify(channel, "<sequence> <session>")`` per session it appended to (its
  last sequence), on its partition's channel, while another process follows the partition
  (:mod:`.notifications`). PostgreSQL delivers a
  notification only if its transaction commits (and drops those of a rolled-back savepoint
  with it), so a wake-up never precedes the durable event it announces.
- No checkpoints, no file identity, no disk-refusal mapping: the server owns its files.
- While the server cannot be reached, each group is refused with ``StoreUnavailableError``
  (nothing ran) and the next one tries to reconnect again. A statement that finds the
  connection gone mid-group fails its item with ``StoreUnavailableError`` too: the server
  drops an unfinished transaction with its session, so nothing of the group was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import apsw
import psycopg

from agentkeep.errors import StoreError, StoreOwnershipLostError, StoreUnavailableError
from agentkeep.logs import get_logger
from agentkeep.persistence.codec import Statements
from agentkeep.persistence.constraints import constraint_refusal
from agentkeep.persistence.faults import FaultInjector
from agentkeep.persistence.memo import (
    BEGIN_GROUP,
    BEGIN_ITEM,
    COMMIT_GROUP,
    END_ITEM,
    ITEM_SAVEPOINT,
)
from agentkeep.persistence.postgres.connection import PostgresConnection, connect
from agentkeep.persistence.postgres.dialect import POSTGRES
from agentkeep.persistence.postgres.notifications import NOTIFY_IF_FOLLOWED, notify_payload
from agentkeep.persistence.postgres.session import OwnerSession
from agentkeep.persistence.writer_backend import RefusedAtCommitError, StopForGood, outcome_unknown

__all__ = ["CommitHook", "PostgresWriterBackend", "postgres_statements"]

log = get_logger(__name__)

_TERMINATE_WAIT_MS = 10_000

#: Testing only: called with ``("before", backend_pid)`` right before COMMIT is sent and
#: ``("after", backend_pid)`` right after it returned; what it raises is what COMMIT raised.
CommitHook = Callable[[str, int], None]


class _NotCommittedError(Exception):
    """COMMIT raised, and the server says the transaction did not commit."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"not committed: {cause!r}")
        self.cause = cause


def postgres_statements(
    connection: PostgresConnection, faults: FaultInjector | None = None
) -> Statements:
    """The executor over a PostgreSQL connection (its dialect, a fresh memo).

    :class:`PostgresConnection` has the part of apsw's connection the executor uses
    (``cursor()``, ``changes()``), hence the cast."""
    return Statements(cast(apsw.Connection, connection), faults, dialect=POSTGRES)


class PostgresWriterBackend:
    """The writer's connection: the owner's session (see the module); implements
    :class:`~agentkeep.persistence.writer_backend.WriterBackend`."""

    def __init__(
        self,
        session: OwnerSession,
        faults: FaultInjector,
        *,
        commit_hook: CommitHook | None = None,
        notify_channel: tuple[str, int] | None = None,
    ) -> None:
        #: Where each item's ledger appends are announced to other processes, and the key
        #: its followers hold (None: not announced).
        self._channel: str | None = None if notify_channel is None else notify_channel[0]
        self._follow_key = 0 if notify_channel is None else notify_channel[1]
        self._session = session
        self._commit_hook = commit_hook
        self._faults = faults
        self._xid: str | None = None
        connection = session.connection
        if connection is None or connection.broken:
            connection = session.reconnect()
        self._use(connection)

    def _use(self, connection: PostgresConnection) -> None:
        self._pg = connection
        self._statements = postgres_statements(connection, self._faults)

    @property
    def statements(self) -> Statements:
        return self._statements

    # -- ownership ---------------------------------------------------------------------------
    def begin(self) -> None:
        """BEGIN on a session that holds the lock: a session psycopg saw drop is replaced
        first. On a quiet session (nothing arrived while it idled) the BEGIN is sent in the
        group's first batch, without waiting; otherwise it waits, and one that finds the
        session dead replaces it and begins once more (nothing ran)."""
        if self._session.broken:
            self._reconnect()
        self._xid = None
        if self._pg.quiet():
            self._pg.begin_batch()
            try:
                self._statements.send_raw(BEGIN_GROUP)
            except psycopg.OperationalError:
                self._pg.abandon_batch()
                if not self._pg.broken:
                    raise
                self._reconnect()
            else:
                self._statements.memo.after(BEGIN_GROUP)
                return
        try:
            self._statements.execute(BEGIN_GROUP)
        except psycopg.OperationalError:
            if not self._pg.broken:
                raise
            self._reconnect()
            self._statements.execute(BEGIN_GROUP)

    def begin_item(self, *, alone: bool) -> None:
        """Enter the batch the item's statements are sent in; its ``SAVEPOINT`` goes with
        the first of them (see the module)."""
        self._pg.begin_batch()
        if self._channel is not None:
            self._statements.announced = {}
        if not alone:
            self._statements.send_raw(BEGIN_ITEM)
            self._statements.memo.after(BEGIN_ITEM)

    def end_item(self, *, alone: bool) -> None:
        """Send the item's ``RELEASE`` and end its batch: one round trip that waits for every
        statement it sent, raising the first one's error (the item then fails alone)."""
        statements = self._statements
        announced = statements.announced
        if announced:
            statements.announced = {}
            for agent_id, sequence in announced.items():
                payload = notify_payload(agent_id, sequence)
                statements.send(NOTIFY_IF_FOLLOWED, (self._channel, payload, self._follow_key))
        if alone:
            if statements.flush is not None:
                statements.flush()
            statements.end_item()  # the batch stays open: the COMMIT joins it
            return
        statements.send_raw(END_ITEM)
        self._pg.end_batch()
        statements.memo.after(END_ITEM)

    def _reconnect(self) -> None:
        """A new session with the lock taken again; if another owner has (or had) the store,
        :class:`StopForGood` with ``StoreOwnershipLostError`` (the actor closes the inbox for
        good). A server that cannot be reached raises ``StoreUnavailableError``: this group
        did not run, the next one tries again."""
        try:
            self._use(self._session.reconnect())
        except StoreOwnershipLostError as lost:
            log.error("store_ownership_lost", store=self._session.target.display)
            raise StopForGood(lost) from lost
        except psycopg.Error as exc:
            log.warning("store_server_unreachable", error=repr(exc))
            raise StoreUnavailableError(
                f"The database server cannot be reached ({exc}); this transaction did not "
                "run. Retry it: the writer reconnects (and takes the store's lock again) "
                "before its next transaction."
            ) from exc

    def refused(self, error: BaseException) -> BaseException:
        if isinstance(error, psycopg.OperationalError) and self._pg.broken:
            refused = StoreUnavailableError(
                f"The connection to the database server dropped ({error}) before this "
                "transaction committed, so it was not written. Retry it."
            )
            refused.__cause__ = error
            return refused
        if isinstance(error, psycopg.errors.IntegrityError):  # SQLSTATE class 23
            return constraint_refusal(error, error.diag.message_primary or str(error))
        return error

    # -- commit ------------------------------------------------------------------------------
    def commit(self) -> None:
        """COMMIT; if it raises, ask the server what became of the transaction: return as a
        COMMIT that returned if it committed, raise :class:`_NotCommittedError` if it did not,
        and re-raise (outcome unknown) only if the server cannot tell.

        A lone item's batch is still open: the COMMIT joins it, and one wait answers both.
        If one of the item's writes failed, the server skipped the COMMIT (the transaction
        is left failed): :class:`~agentkeep.persistence.writer_backend.RefusedAtCommitError` carries
        that write's refusal."""
        hook = self._commit_hook
        connection = self._pg
        try:
            # COMMIT is never sent before the transaction's id is known (see _resolve).
            self._xid = connection.await_xid()
        except psycopg.Error as exc:  # COMMIT not sent: nothing was written
            connection.abandon_batch()
            raise RefusedAtCommitError(self.refused(exc)) from exc
        try:
            if hook is not None:
                hook("before", self._session.backend_pid)
            if connection.batch is None:
                self._statements.execute(COMMIT_GROUP)
            else:
                self._statements.send_raw(COMMIT_GROUP)
                connection.end_batch()
                self._statements.memo.after(COMMIT_GROUP)
            if hook is not None:
                hook("after", self._session.backend_pid)
        except psycopg.Error as exc:
            connection.abandon_batch()
            if not connection.broken and connection.in_transaction:
                # A write of the item failed, so the server skipped the COMMIT: not written.
                raise RefusedAtCommitError(self.refused(exc)) from exc
            status = self._resolve(exc)
            log.warning("store_commit_outcome_resolved", status=status, xid=self._xid)
            if status == "committed":
                return
            if status == "aborted":
                raise _NotCommittedError(exc) from exc
            raise

    def commit_failed(self, cause: BaseException) -> StoreError:
        if not isinstance(cause, _NotCommittedError):
            return outcome_unknown(cause)
        error = StoreUnavailableError(
            f"COMMIT reported {cause.cause!r}, and the server says the transaction did "
            "not commit: nothing of it was written. Retry it."
        )
        error.__cause__ = cause.cause
        return error

    def _resolve(self, cause: BaseException) -> str | None:
        """``committed``, ``aborted`` or None (cannot tell): the fate of the transaction
        whose COMMIT raised ``cause``, once no session of this owner can still change it."""
        xid = self._xid
        if xid is None:
            return None
        pid = self._session.backend_pid
        try:
            probe = connect(self._session.target, name=self._session.name + " probe")
        except psycopg.Error as exc:
            log.error("store_commit_unresolved", error=repr(exc), cause=repr(cause))
            return None
        try:
            with probe:
                if not self._pg.broken:
                    # COMMIT raised on a live session: it answered, so the outcome is final.
                    pass
                else:
                    probe.execute(
                        "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity "
                        "WHERE pid = %s AND application_name = %s",
                        (_TERMINATE_WAIT_MS, pid, self._session.name),
                    )
                row = probe.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
        except psycopg.Error as exc:
            log.error("store_commit_unresolved", error=repr(exc), cause=repr(cause))
            return None
        status = None if row is None or row[0] is None else str(row[0])
        return status if status in ("committed", "aborted") else None

    # -- undoing ----------------------------------------------------------------------------
    def roll_back_item(self) -> bool:
        connection = self._pg
        connection.abandon_batch()
        if connection.broken or not connection.in_transaction:
            return False
        try:
            connection.execute(f"ROLLBACK TO SAVEPOINT {ITEM_SAVEPOINT}")
            connection.execute(f"RELEASE SAVEPOINT {ITEM_SAVEPOINT}")
        except psycopg.Error:
            return False
        return connection.in_transaction

    def rollback(self) -> None:
        connection = self._pg
        connection.abandon_batch()
        if connection.broken:
            return
        try:
            self._statements.reset()
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except psycopg.Error as exc:
            log.error("store_rollback_failed", error=repr(exc))

    def between_groups(self) -> None:
        return  # the server checkpoints its own files

    def close(self, *, clean: bool) -> None:
        """Roll back and close the owner's session, which releases the lock."""
        self.rollback()
        self._session.close()
