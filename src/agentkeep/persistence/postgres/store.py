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
and the next incarnation takes the lock again on a new session).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pykka

from agentkeep.errors import StoreClosedError, StoreError
from agentkeep.logs import get_logger, install_default_logging
from agentkeep.partitions import Partition
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.faults import FaultInjector, FaultPlan
from agentkeep.persistence.handle import StoreWriterHandle
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
from agentkeep.persistence.writer import StoreWriter

__all__ = ["PostgresStore", "open_postgres_store"]

log = get_logger(__name__)

_STOP_TIMEOUT_SECONDS = 60.0


class PostgresStore(Store):
    """An open store in one schema of a PostgreSQL database (see the module)."""

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
        self._home_lock = home_lock
        self._clock = clock  # where the writer's timestamps come from (None: the system's)
        self._target = target
        self._session = session
        self._commit_hook = commit_hook
        self._ledger = ledger
        self._identity = None
        self._home = home
        self._faults = faults
        self._pg_readers = PostgresReaders(target)
        self._restartable = restartable
        self._spare_connection = None
        self._inbox = Inbox(state="down")
        self._counters = Counters()
        self._writer: pykka.ActorRef[Any] | None = None
        # The readers have ReaderPool's surface (read, close).
        readers = cast(ReaderPool, self._pg_readers)
        self._handle = StoreWriterHandle(None, self._inbox, self._counters, readers, faults)
        self._writer_lock = threading.Lock()
        self._closed = False
        self.on_writer_failure = None
        self.partition = session.partition
        self.partition_count = 1 if session.partition is None else session.partition.count
        # A partition's store shares its schema with other processes: its writer announces
        # its commits to them, and it hears theirs (notifications.py). A classic store has
        # no other reader to wake, and pays nothing.
        self._channel: tuple[str, int] | None = None
        self._unlisten: Callable[[], None] = lambda: None
        if session.partition is not None:
            oid, index = session.schema_oid, session.partition.index
            self._channel = (ledger_channel(oid, index), follow_key(oid, index))
            self._unlisten = listen(target, ledger, session.partition)

    @property
    def database(self) -> str:
        """The store's URL, without its password (``schema`` included)."""
        return self._target.display

    @property
    def epoch(self) -> int:
        """The epoch this owner stamped on its partition's ownership row (a classic owner's
        partition is 0): one more than the previous owner's."""
        return self._session.epoch

    @contextlib.contextmanager
    def setup_lock(self) -> Iterator[None]:
        """A partition's owner shares the store: its modules' migrations run under the
        schema's setup lock (``ownership.setup_key``), taken on a connection of its own and
        waited for, so owners opening together apply each migration once."""
        if self.partition is None:
            yield
            return
        key = setup_key(self._target.schema)
        with connect(self._target, name=self._session.name + " setup") as side:
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
        return self._session.lost

    @property
    def ownership_lost(self) -> bool:
        """:attr:`lost` is set (the base store's question, for the system above)."""
        return self._session.lost.is_set()

    @property
    def notifications(self) -> dict[str, object] | None:
        """How this process hears other processes' commits to the store (a partition's
        store: its listener's :meth:`~.notifications.LedgerListener.health`), or None."""
        if self.partition is None:
            return None
        listener = listener_of(self._target)
        return None if listener is None else listener.health()

    def stop_listening(self) -> None:
        """Stop hearing other processes' commits (at close, or an open that failed)."""
        self._unlisten()

    @property
    def backend_pid(self) -> int:
        """The server process of the writer's current session (tests, diagnostics)."""
        return self._session.backend_pid

    def start_writer(self) -> pykka.ActorRef[Any]:
        """Start the writer on the owner's session (see ``Store.start_writer``); a later
        incarnation takes the lock again on a new session first.

        Raises:
            StoreClosedError: the store is closed.
            StoreOwnershipLostError: another owner took the store meanwhile.
        """
        with self._writer_lock:
            if self._closed:
                raise StoreClosedError("The store is closed.")
            if self._writer is not None and self._writer.is_alive():
                raise StoreError("The store writer is already running.")
            backend = PostgresWriterBackend(
                self._session,
                self._faults,
                commit_hook=self._commit_hook,
                notify_channel=self._channel,
            )
            writer = StoreWriter.start(
                backend,
                self._inbox,
                self._counters,
                restartable=self._restartable,
                on_failure=self._writer_failed,
                ledger=self._ledger,
                clock=self._clock,
            )
            self._writer = writer
            self._handle.attach(writer)
            self._inbox.open()
            return writer

    def close(self) -> None:
        """Finish queued work, close the connections; closing the owner's session releases
        the lock. Idempotent."""
        with self._writer_lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
        try:
            if writer is not None:
                writer.stop(block=True, timeout=_STOP_TIMEOUT_SECONDS)
        finally:
            try:
                self._unlisten()
                self._ledger.close()
                self._inbox.close()
                self._pg_readers.close()
            finally:
                self._session.close()
                if self._home_lock is not None:
                    self._home_lock.release()
                log.info("store_closed", store=self._target.display)


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
