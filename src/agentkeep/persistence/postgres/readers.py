"""Reading a PostgreSQL store: snapshots on reader connections, with or without owning it.

A read is one ``REPEATABLE READ READ ONLY`` transaction (the dialect spells a reader's
``BEGIN`` so): it sees exactly the COMMITs that finished before it took its snapshot, never
half a group, as a SQLite WAL read transaction does. Reader connections are read-only
sessions (``default_transaction_read_only``), hold no lock and never block the writer, so
``list``/``show``/``events`` read a store while another process owns it
(:class:`PostgresReadOnlyStore`).

A reader whose connection dropped is discarded, with every idle one (a dropped session
usually means the server restarted or went away: they are as stale); the next read opens a
new one. A read whose ``BEGIN`` fails on a kept connection (nothing of ``work`` ran yet) is
tried once more on a new one, so the first read after the server came back succeeds. While
the server cannot be reached a read is refused with ``StoreUnavailableError`` (the daemon's
503 ``store_unavailable``): it did not run, retry it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import psycopg

from agentkeep.errors import (
    SchemaTooOldError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.postgres.connection import (
    PostgresConnection,
    PostgresTarget,
    application_name,
    connect,
    new_token,
    parse_url,
)
from agentkeep.persistence.postgres.schema import POSTGRES_MIGRATIONS, applied_migrations
from agentkeep.persistence.postgres.writer import postgres_statements
from agentkeep.persistence.schema import Migration, check_applied
from agentkeep.persistence.transaction import SqliteTransaction

__all__ = ["NoPostgresStoreError", "PostgresReadOnlyStore", "PostgresReaders"]


class NoPostgresStoreError(StoreError):
    """The schema a URL names holds no agentkeep store (nothing was ever opened there)."""

    code = "no_store"

    def __init__(self, where: str) -> None:
        super().__init__(f"There is no agentkeep store at {where}.")
        self.where = where


T = TypeVar("T")


def read_snapshot(connection: PostgresConnection, work: Callable[[Transaction], T]) -> T:
    """Run ``work`` on one read-only snapshot of ``connection``.

    The connection stays in a batch (libpq's pipeline mode, :mod:`.batch`) from one read to
    the next: the ``BEGIN`` is sent with the read's first statement (one round trip), and
    the ``ROLLBACK`` is sent without waiting for it. The server runs it on arrival (the
    snapshot is let go at once); its answer is collected by the connection's next read,
    with that read's first statement. So a read of one statement is one round trip; each
    statement still waits for its rows. A read that fails ends the batch and rolls back,
    waiting, before the connection is reused."""
    statements = postgres_statements(connection)
    connection.begin_batch()
    try:
        statements.send_raw("BEGIN")
        tx = SqliteTransaction(statements, read_only=True)
        try:
            value = work(tx)
        finally:
            tx.expire()
    except BaseException:
        connection.abandon_batch()
        if not connection.broken and connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    try:
        statements.send_raw("ROLLBACK")
    except psycopg.Error:  # the connection dropped: the server ends the snapshot with it
        connection.abandon_batch()
    except BaseException:  # a Ctrl-C amid the send: a torn batch closes the connection
        connection.abandon_batch()
        raise
    return value


def _unreachable(error: psycopg.Error) -> StoreUnavailableError:
    refused = StoreUnavailableError(
        f"The database server cannot be reached ({error}); this read did not run. Retry it."
    )
    refused.__cause__ = error
    return refused


class PostgresReaders:
    """Reader sessions, opened on demand up to ``max_sessions``, one caller at a time each.

    Invariant: at most ``max_sessions`` sessions are open at once (idle or in use), so a
    store's reads never take more of the server's ``max_connections`` than that, however
    many agents load at once: a read that finds every session busy waits for one to be given
    back (reads are short: one snapshot each). A session that must be replaced (it dropped)
    frees its place before the new one is opened.
    """

    def __init__(self, target: PostgresTarget, *, max_sessions: int | None = None) -> None:
        if max_sessions is None:
            max_sessions = target.readers  # the URL's readers=N, else DEFAULT_MAX_READERS
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._target = target
        self._name = application_name(new_token()) + " reader"
        self._lock = threading.Lock()
        self._given_back = threading.Condition(self._lock)
        self._idle: list[PostgresConnection] = []
        self._open = 0  # sessions open or being opened, idle ones included
        self._max = max_sessions
        self._closed = False

    @property
    def max_sessions(self) -> int:
        return self._max

    def _take(self, *, kept: bool) -> tuple[PostgresConnection, bool]:
        """A connection (an idle one if ``kept`` allows), and whether it was kept; waits
        while ``max_sessions`` are open and none is idle."""
        stale: PostgresConnection | None = None
        with self._lock:
            while True:
                if self._closed:
                    raise StoreClosedError("The store is closed.")
                if kept and self._idle:
                    return self._idle.pop(), True
                if self._open < self._max:
                    self._open += 1
                    break
                if self._idle:  # a new session is wanted: an idle one makes room
                    stale = self._idle.pop()
                    break
                self._given_back.wait()
        if stale is not None:
            stale.close()  # its place (still counted) passes to the new session
        try:
            raw = connect(self._target, name=self._name, read_only=True)
        except psycopg.OperationalError as error:
            self._release(1)
            raise _unreachable(error) from None
        except BaseException:
            self._release(1)
            raise
        return PostgresConnection(raw), False

    def _release(self, count: int) -> None:
        with self._lock:
            self._open -= count
            self._given_back.notify(count)

    def _give(self, connection: PostgresConnection) -> None:
        reusable = not connection.broken and not connection.in_transaction
        with self._lock:
            if reusable and not self._closed:
                self._idle.append(connection)
                self._given_back.notify()
                return
            stale: list[PostgresConnection] = []
            if connection.broken:  # the idle ones most likely dropped with it (a restart)
                stale, self._idle = self._idle, []
        connection.close()
        for each in stale:
            each.close()
        self._release(1 + len(stale))

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` on a read-only snapshot; the transaction expires when it returns.

        A kept session the server dropped meanwhile (a restart) is noticed at the read's
        first statement (the batch sends ``BEGIN`` with it): the read runs once more on a new
        session — a read has no effects, so running its work again is safe.

        Raises:
            StoreUnavailableError: the server cannot be reached (the read did not run).
        """
        connection, kept = self._take(kept=True)
        try:
            try:
                return read_snapshot(connection, work)
            except psycopg.OperationalError as error:
                if not connection.broken:
                    raise
                if not kept:
                    raise _unreachable(error) from None
            self._give(connection)
            connection, _ = self._take(kept=False)
            try:
                return read_snapshot(connection, work)
            except psycopg.OperationalError as again:
                if connection.broken:
                    raise _unreachable(again) from None
                raise
        finally:
            self._give(connection)

    def close(self) -> None:
        """Close every idle reader; readers in use close when their read ends (a read
        waiting for a session is refused with ``StoreClosedError``)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._given_back.notify_all()
        for connection in idle:
            connection.close()


class PostgresReadOnlyStore:
    """An existing PostgreSQL store opened for reading only (``ReadOnlyStore``'s twin)."""

    def __init__(self, target: PostgresTarget, home: Path) -> None:
        self._target = target
        self._home = home
        self._readers: PostgresReaders | None = PostgresReaders(target)

    @classmethod
    def open(
        cls,
        url: str,
        home: Path,
        *,
        migrations: tuple[Migration, ...] = POSTGRES_MIGRATIONS,
    ) -> PostgresReadOnlyStore:
        """Open the store ``url`` names for reading; refuses a schema that is not this code's.

        Raises:
            NoPostgresStoreError: there is no store in that schema.
            StoreError: the server cannot be reached.
            SchemaTooNewError: the store was written by a newer agentkeep.
            SchemaTooOldError: the store predates this code's schema.
        """
        target = parse_url(url)
        try:
            with connect(target, name="agentkeep reader", read_only=True) as raw:
                applied = applied_migrations(raw)
        except psycopg.Error as error:
            raise StoreError(f"Cannot read the store at {target.display}: {error}") from None
        if not applied:
            raise NoPostgresStoreError(target.display)
        check_applied(applied, migrations)
        if len(applied) < len(migrations):
            raise SchemaTooOldError(
                f"The store at {target.display} is at schema version {applied[-1][0]}; this "
                f"agentkeep reads version {migrations[-1].version}. Open it for writing once "
                "to migrate it."
            )
        return cls(target, home)

    @property
    def database(self) -> str:
        """The store's URL (without its password)."""
        return self._target.display

    @property
    def home(self) -> Path:
        """The state directory (the daemon's files, ``providers.toml``)."""
        return self._home

    def read(self, work: Callable[[Transaction], T]) -> T:
        readers = self._readers
        if readers is None:
            raise StoreClosedError("The store is closed.")
        return readers.read(work)

    def close(self) -> None:
        readers, self._readers = self._readers, None
        if readers is not None:
            readers.close()

    def __enter__(self) -> PostgresReadOnlyStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
