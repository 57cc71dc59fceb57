"""Opening a store on PostgreSQL: ``Store.open(home, database="postgresql://…")``.

What opening does, in order: parse the URL (the ``schema`` parameter names the store's
schema, default ``agentkeep``); connect the owner's session, create the schema if missing,
take the store's advisory lock (``StoreLockedError`` naming the holder if another session
has it) and stamp the ownership row; apply pending migrations on that session (refusing a
newer schema); start the writer on it. The state directory still holds the daemon's files and
``providers.toml``; nothing of the store is in it, but its owner still holds the directory's
lock file (``agents.db.lock``, taken by ``open_store`` and released with the store): one process
owns a state directory's daemon files, and a daemon is found by the pid that file names.

:class:`PostgresStore` is a :class:`~agentkeep.persistence.store.Store` (the same handle,
inbox, statistics and supervision: ``start_writer`` is called again after a writer failure,
and the next incarnation takes the lock again on a new session) that owns a
:class:`PostgresDatabase` instead of a file, and adds what only a server has.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import psycopg

from agentkeep.errors import StoreError
from agentkeep.logs import get_logger, install_default_logging
from agentkeep.partitions import Partition
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.faults import FaultInjector, FaultPlan
from agentkeep.persistence.inbox import Counters, Inbox
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.postgres.connection import PostgresTarget, connect, parse_url
from agentkeep.persistence.postgres.notifications import (
    follow_key,
    ledger_channel,
    listen,
    listener_of,
)
from agentkeep.persistence.postgres.ownership import setup_key
from agentkeep.persistence.postgres.readers import PostgresReaders
from agentkeep.persistence.postgres.schema import POSTGRES_MIGRATIONS, migrate
from agentkeep.persistence.postgres.session import (
    OwnerSession,
    record_partition_count,
    recorded_partition_count,
)
from agentkeep.persistence.postgres.writer import CommitHook, PostgresWriterBackend
from agentkeep.persistence.readers import ReaderPool
from agentkeep.persistence.schema import Migration
from agentkeep.persistence.store import Store
from agentkeep.persistence.writer_backend import WriterBackend

__all__ = ["PostgresStore", "open_postgres_store"]

log = get_logger(__name__)


def _nothing_to_unlisten() -> None:
    return


class PostgresDatabase:
    """A store's schema on a PostgreSQL server, through the owner's session (see the
    module); implements :class:`~agentkeep.persistence.store.Database`."""

    def __init__(
        self,
        target: PostgresTarget,
        session: OwnerSession,
        *,
        commit_hook: CommitHook | None = None,
        home_lock: StoreLock | None = None,
        notify_channel: tuple[str, int] | None = None,
        unlisten: Callable[[], None] | None = None,
    ) -> None:
        self.target = target
        self.session = session
        self._commit_hook = commit_hook
        self._home_lock = home_lock
        self._channel = notify_channel
        #: Detaches this store from the listener of other processes' commits (a partition's).
        self.unlisten = unlisten or _nothing_to_unlisten
        self.pg_readers = PostgresReaders(target)

    @property
    def readers(self) -> ReaderPool:
        return cast(ReaderPool, self.pg_readers)  # it has ReaderPool's surface (read, close)

    @property
    def name(self) -> str:
        return self.target.display

    def writer_backend(
        self, inbox: Inbox, counters: Counters, faults: FaultInjector
    ) -> PostgresWriterBackend:
        """A later incarnation takes the lock again on a new session first."""
        return PostgresWriterBackend(
            self.session, faults, commit_hook=self._commit_hook, notify_channel=self._channel
        )

    def writer_not_started(self, backend: WriterBackend) -> None:
        return  # the session is the store's: it closes with the store

    def release(self) -> None:
        """Closing the owner's session releases the store's lock."""
        try:
            self.unlisten()
            self.pg_readers.close()
        finally:
            self.session.close()
            if self._home_lock is not None:
                self._home_lock.release()


class PostgresStore(Store):
    """A :class:`~agentkeep.persistence.store.Store` whose database is a schema on a
    PostgreSQL server (see the module), with what only a server has: its URL, the owner's
    epoch, the partition's setup lock, a lost ownership, the notifications of other
    processes' commits."""

    def __init__(
        self,
        *,
        home: Path,
        target: PostgresTarget,
        session: OwnerSession,
        faults: FaultInjector,
        restartable: bool,
        ledger: LedgerHub,
        commit_hook: CommitHook | None = None,
        home_lock: StoreLock | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        # A partition's store shares its schema with other processes: its writer announces
        # its commits to them, and it hears theirs (notifications.py). A classic store has
        # no other reader to wake, and pays nothing.
        channel: tuple[str, int] | None = None
        unlisten: Callable[[], None] | None = None
        if session.partition is not None:
            oid, index = session.schema_oid, session.partition.index
            channel = (ledger_channel(oid, index), follow_key(oid, index))
            unlisten = listen(target, ledger, session.partition)
        self._pg = PostgresDatabase(
            target,
            session,
            commit_hook=commit_hook,
            home_lock=home_lock,
            notify_channel=channel,
            unlisten=unlisten,
        )
        super().__init__(
            home=home,
            database=self._pg,
            faults=faults,
            restartable=restartable,
            ledger=ledger,
            clock=clock,
        )
        self.partition = session.partition
        self.partition_count = 1 if session.partition is None else session.partition.count

    @property
    def database(self) -> str:
        """The store's URL, without its password (``schema`` included)."""
        return self._pg.target.display

    @property
    def epoch(self) -> int:
        """The epoch this owner stamped on its partition's ownership row (a classic owner's
        partition is 0): one more than the previous owner's."""
        return self._pg.session.epoch

    @contextlib.contextmanager
    def setup_lock(self) -> Iterator[None]:
        """A partition's owner shares the store: its modules' migrations run under the
        schema's setup lock (``ownership.setup_key``), taken on a connection of its own and
        waited for, so owners opening together apply each migration once."""
        if self.partition is None:
            yield
            return
        target, session = self._pg.target, self._pg.session
        key = setup_key(target.schema)
        with connect(target, name=session.name + " setup") as side:
            side.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                side.execute("SELECT pg_advisory_unlock(%s)", (key,))

    @property
    def lost(self) -> threading.Event:
        """Set once this owner found another owner of its store (or partition) on
        reconnecting: it stopped writing for good (``StoreOwnershipLostError``). A dropped
        session is noticed at the next write, so an idle owner learns it then."""
        return self._pg.session.lost

    @property
    def ownership_lost(self) -> bool:
        """:attr:`lost` is set (the base store's question, for the system above)."""
        return self._pg.session.lost.is_set()

    @property
    def notifications(self) -> dict[str, object] | None:
        """How this process hears other processes' commits to the store (a partition's
        store: its listener's :meth:`~.notifications.LedgerListener.health`), or None."""
        if self.partition is None:
            return None
        listener = listener_of(self._pg.target)
        return None if listener is None else listener.health()

    def stop_listening(self) -> None:
        """Stop hearing other processes' commits (at close, or an open that failed)."""
        self._pg.unlisten()

    @property
    def backend_pid(self) -> int:
        """The server process of the writer's current session (tests, diagnostics)."""
        return self._pg.session.backend_pid


def open_postgres_store(
    url: str,
    home: Path,
    *,
    faults: FaultPlan | None,
    start_writer: bool,
    ledger: LedgerHub,
    migrations: tuple[Migration, ...] = POSTGRES_MIGRATIONS,
    commit_hook: CommitHook | None = None,
    home_lock: StoreLock | None = None,
    clock: Callable[[], int] | None = None,
    partition: Partition | None = None,
) -> PostgresStore:
    """Open (creating its schema if needed) the store ``url`` names (see the module) — or,
    given ``partition``, that partition of it (its count recorded at the first such open).

    Raises:
        InvalidConfigError: the URL or its schema name is invalid, or the store was
            partitioned with another count.
        StoreLockedError: another session owns the store (or the partition; a classic owner
            and partition owners exclude each other).
        SchemaTooNewError: the store was written by a newer agentkeep.
        StoreError: the server cannot be reached, refused the login, or dropped the session
            while the migrations ran.
    """
    # As Store.open does on SQLite, before the first event (the migrations log): without it
    # structlog's own default prints every event, info included, on the embedder's stdout.
    install_default_logging()
    target = parse_url(url)
    try:
        session = OwnerSession.open(target, partition)
    except psycopg.Error as error:
        if home_lock is not None:
            home_lock.release()
        raise StoreError(f"Cannot open the store at {target.display}: {error}") from None
    except BaseException:
        if home_lock is not None:
            home_lock.release()
        raise
    store: PostgresStore | None = None
    try:
        with store_clock.using(clock):
            migrate(session.raw, migrations)
        if partition is not None:
            record_partition_count(session.raw, target.schema, partition.count)
        count = recorded_partition_count(session.raw)
        injector = FaultInjector(faults if faults is not None else FaultPlan.from_env())
        store = PostgresStore(
            home=home,
            target=target,
            session=session,
            faults=injector,
            restartable=not start_writer,
            ledger=ledger,
            commit_hook=commit_hook,
            home_lock=home_lock,
            clock=clock,
        )
        store.partition_count = 1 if count is None else count
        if start_writer:
            store.start_writer()
    except psycopg.OperationalError as error:
        # The session dropped while migrating (terminated, the server stopped): the open
        # failed for want of the server, as when it cannot be reached at all.
        if store is not None:
            store.stop_listening()
        session.close()
        if home_lock is not None:
            home_lock.release()
        raise StoreError(
            f"Cannot open the store at {target.display}: the connection dropped ({error})"
        ) from None
    except BaseException:
        if store is not None:
            store.stop_listening()
        session.close()
        if home_lock is not None:
            home_lock.release()
        raise
    log.info("store_opened", store=target.display)
    return store
