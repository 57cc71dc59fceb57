"""Opening a state directory: lock, connection, migrations, writer, readers.

``Store.open()`` resolves the state directory (the ``home`` argument, else ``AGENTKEEP_HOME``,
else ``./.agentkeep``), takes the single-owner lock, opens ``agents.db`` in WAL mode with
``synchronous=FULL`` (acknowledged means durable, also on power loss) and foreign keys on,
refuses a damaged file (``PRAGMA quick_check``), applies pending migrations, and starts the
:class:`~agentkeep.persistence.writer.StoreWriter`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

import apsw
import pykka

from agentkeep.errors import (
    StoreClosedError,
    StoreDirectoryError,
    StoreError,
)
from agentkeep.logs import get_logger, install_default_logging
from agentkeep.partitions import Partition
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.faults import FaultInjector, FaultPlan
from agentkeep.persistence.handle import StoreWriterHandle
from agentkeep.persistence.histogram import HistogramSnapshot
from agentkeep.persistence.inbox import Counters, Inbox, WriterStatistics
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.readers import ReaderPool
from agentkeep.persistence.schema import migrate
from agentkeep.persistence.sqlite_database import SqliteDatabase, open_writer_connection
from agentkeep.persistence.writer import StoreWriter
from agentkeep.persistence.writer_backend import WriterBackend
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES

log = get_logger(__name__)

T = TypeVar("T")

HOME_ENV = "AGENTKEEP_HOME"
DEFAULT_HOME = ".agentkeep"
DATABASE_NAME = "agents.db"
LOCK_NAME = "agents.db.lock"
DEFAULT_CHECKPOINT_PAGES = 1000
_STOP_TIMEOUT_SECONDS = 60.0


def resolve_home(home: str | Path | None = None) -> Path:
    """The state directory: ``home``, else ``$AGENTKEEP_HOME``, else ``./.agentkeep``."""
    if home is not None:
        return Path(home)
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME)


def prepare_directory(directory: Path) -> None:
    """Create the state directory if needed, or say clearly why it cannot be used.

    Raises:
        StoreDirectoryError: it (or a parent) is a file, or this user may not create it.
    """
    if directory.exists() and not directory.is_dir():
        raise StoreDirectoryError(str(directory), "it is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreDirectoryError(str(directory), "it is a file, not a directory") from None
    except NotADirectoryError:
        raise StoreDirectoryError(str(directory), "a parent of it is a file") from None
    except PermissionError as error:
        raise StoreDirectoryError(
            str(directory), f"this user may not create it ({_strerror(error)})"
        ) from None


def acquire_lock(directory: Path, database: Path, name: str = LOCK_NAME) -> StoreLock:
    """The state directory's lock file; a directory this user cannot write is a
    :class:`StoreDirectoryError` saying so."""
    try:
        return StoreLock.acquire(directory / name, store_path=database)
    except PermissionError as error:
        raise StoreDirectoryError(
            str(directory),
            f"it is read-only for this user (uid {os.getuid()}): {_strerror(error)}",
        ) from None


def _strerror(error: OSError) -> str:
    where = f": {error.filename}" if error.filename else ""
    return f"{error.strerror or error}{where}"


class Database(Protocol):
    """Where a :class:`Store`'s data lives, the part of the store that differs per database
    (:class:`~agentkeep.persistence.sqlite_database.SqliteDatabase`, or
    ``persistence.postgres.store.PostgresDatabase`` on a server): its owner's lock, its
    connections and readers, and the backend each writer incarnation runs on. The store owns
    one; the rest (inbox, handle, ledger, the writer's lifecycle, closing in order) is the
    same on every database."""

    @property
    def readers(self) -> ReaderPool:
        """Where snapshot reads run (``Store.read``, the handle's)."""
        ...

    @property
    def name(self) -> str:
        """What the logs call the store: the file's path, or the server's URL."""
        ...

    def writer_backend(
        self, inbox: Inbox, counters: Counters, faults: FaultInjector
    ) -> WriterBackend:
        """The backend of the writer incarnation starting now (on a fresh connection, or
        the owner's session taken again)."""
        ...

    def writer_not_started(self, backend: WriterBackend) -> None:
        """``backend``'s writer failed to start: free what only it holds."""
        ...

    def release(self) -> None:
        """The store closed: close the connections and readers, then release the owner's
        lock, whatever closing them raised."""
        ...


class Store:
    """An open store: the single owner of its database (a SQLite file, or a schema on a
    PostgreSQL server), through a :class:`Database` part it owns.

    Use :meth:`open`; close with :meth:`close` (or a ``with`` block). ``transact`` and
    ``read`` implement :class:`~agentkeep.persistence.interface.StoreHandle`.
    """

    #: The partition this store's owner runs (``agentkeep.partitions``; None: all of it, as
    #: always on SQLite). Set by a partitioned open on PostgreSQL.
    partition: Partition | None = None
    #: The store's partition count (1 unless it was ever opened partitioned): a new agent's
    #: ``agents.partition`` is ``partition_of(id, partition_count)``.
    partition_count: int = 1

    def setup_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the system runs its modules' migrations: owners sharing this store
        (partitions on PostgreSQL) run them one at a time. Nothing to hold here: the owner
        has the store to itself."""
        return contextlib.nullcontext()

    def __init__(
        self,
        *,
        home: Path,
        database: Database,
        faults: FaultInjector,
        restartable: bool,
        ledger: LedgerHub | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._database = database
        self._ledger = ledger or LedgerHub()
        self._clock = clock
        self._home = home
        self._faults = faults
        self._restartable = restartable
        self._inbox = Inbox(state="down")
        self._counters = Counters()
        self._writer: pykka.ActorRef[Any] | None = None
        self._handle = StoreWriterHandle(
            None, self._inbox, self._counters, database.readers, faults
        )
        self._writer_lock = threading.Lock()
        self._closed = False
        # Told (in the failing writer's thread, before its supervisor hears of it) when a
        # restartable writer fails: waiters can know a restart is coming before it starts.
        self.on_writer_failure: Callable[[], None] | None = None

    @classmethod
    def open(
        cls,
        home: str | Path | None = None,
        *,
        faults: FaultPlan | None = None,
        vfs: str | None = None,
        checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
        start_writer: bool = True,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        database_path: str | Path | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Store:
        """Open (creating if needed) the store in ``home``.

        Args:
            home: The state directory; None resolves ``AGENTKEEP_HOME`` then ``./.agentkeep``.
            faults: Chaos testing only: fail or kill at a store operation. None reads
                ``AGENTKEEP_FAULT_AT`` / ``AGENTKEEP_FAULT_MODE`` (unset: no faults).
            vfs: Chaos testing only: the name of a registered apsw VFS to open the
                connections through (injected I/O errors, power-loss simulation).
            checkpoint_pages: WAL size (pages) from which the idle writer checkpoints.
            start_writer: False leaves the writer to a supervisor: it calls
                :meth:`start_writer` from its child spec (and again after each failure);
                until then writes raise ``StoreUnavailableError``.
            max_event_bytes: The bound on one ledger event's encoded data.
            max_input_bytes: The bound on one input message's encoded JSON.
            database_path: The SQLite file (created if absent, its directory too); None:
                ``agents.db`` in the state directory. Its lock file is beside it
                (``<file>.lock``), so one database has one owner wherever it lives.
            clock: Where the timestamps the store writes come from, in milliseconds since
                the epoch (``persistence.clock``); None: the system clock.

        Raises:
            StoreLockedError: another owner holds the store.
            StoreDirectoryError: the state directory is a file, or not writable by this user.
            StoreDamagedError: ``PRAGMA quick_check`` fails: nothing is written into the file.
            SchemaTooNewError: the database was written by a newer agentkeep.
        """
        install_default_logging()
        ledger = LedgerHub(
            max_event_bytes, max_input_bytes
        )  # InvalidConfigError before the lock is taken
        if clock is not None:
            ledger.clock = clock
        directory = resolve_home(home)
        prepare_directory(directory)
        if database_path is None:
            database = directory / DATABASE_NAME
            lock = acquire_lock(directory, database)
        else:
            database = Path(database_path)
            prepare_directory(database.parent)
            lock = acquire_lock(database.parent, database, f"{database.name}.lock")
        connection: apsw.Connection | None = None
        readers: ReaderPool | None = None
        try:
            connection = open_writer_connection(database, vfs)
            with store_clock.using(clock):
                migrate(connection)
            injector = FaultInjector(faults if faults is not None else FaultPlan.from_env())
            readers = ReaderPool(str(database), vfs=vfs)
            part = SqliteDatabase(
                database,
                lock=lock,
                connection=connection,
                readers=readers,
                vfs=vfs,
                checkpoint_pages=checkpoint_pages,
            )
            store = cls(
                home=directory,
                database=part,
                faults=injector,
                restartable=not start_writer,
                ledger=ledger,
                clock=clock,
            )
            if start_writer:
                store.start_writer()
        except BaseException:
            if readers is not None:
                readers.close()
            if connection is not None:
                connection.close()
            lock.release()
            raise
        log.info("store_opened", store=str(database))
        return store

    def start_writer(self) -> pykka.ActorRef[Any]:
        """Start the writer: the first one, or the next incarnation after one failed.

        For a supervisor's child spec (see ``Store.open(start_writer=False)``): each call
        starts a writer on a fresh connection, routes the handle to it and admits work again.

        Raises:
            StoreClosedError: the store is closed.
            StoreError: a writer is already running.
        """
        with self._writer_lock:
            if self._closed:
                raise StoreClosedError("The store is closed.")
            if self._writer is not None and self._writer.is_alive():
                raise StoreError("The store writer is already running.")
            backend = self._database.writer_backend(self._inbox, self._counters, self._faults)
            try:
                writer = StoreWriter.start(
                    backend,
                    self._inbox,
                    self._counters,
                    restartable=self._restartable,
                    on_failure=self._writer_failed,
                    ledger=self._ledger,
                    clock=self._clock,
                )
            except BaseException:
                self._database.writer_not_started(backend)
                raise
            self._writer = writer
            # The handle wakes the new writer before the inbox admits work for it.
            self._handle.attach(writer)
            self._inbox.open()
            if self._restartable:
                log.info("store_writer_started", store=self._database.name)
            return writer

    def _writer_failed(self) -> None:
        listener = self.on_writer_failure
        if listener is not None:
            listener()

    @property
    def home(self) -> Path:
        """The state directory."""
        return self._home

    @property
    def path(self) -> Path:
        """The database file (``agents.db`` in :attr:`home`, unless opened with another).

        Raises:
            AttributeError: the store is on a server: it has no file.
        """
        database = self._database
        if not isinstance(database, SqliteDatabase):
            raise AttributeError("a store on a PostgreSQL server has no database file")
        return database.path

    @property
    def handle(self) -> StoreWriterHandle:
        """The writer's handle (a ``StoreHandle``) to give to the rest of the runtime."""
        return self._handle

    @property
    def ledger(self) -> LedgerHub:
        """The hub told of every committed ledger event (subscriptions wait on it)."""
        return self._ledger

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ownership_lost(self) -> bool:
        """True once this owner found another owner of its store (or partition) and stopped
        writing for good. Never on SQLite (its owner holds a kernel lock for its life)."""
        return False

    @property
    def refusal(self) -> StoreError | None:
        """Why the store stopped accepting writes for good while open (the database file
        was deleted or replaced: ``StoreReplacedError``), else None."""
        return self._inbox.refusal

    def transact(
        self, work: Callable[[Transaction], T], *, timeout_seconds: float | None = None
    ) -> T:
        """Run ``work`` in a write transaction; see ``StoreHandle.transact``."""
        return self._handle.transact(work, timeout_seconds=timeout_seconds)

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run read-only ``work`` on a snapshot of committed state."""
        return self._handle.read(work)

    def kv(self, *segments: str) -> ScopedKV:
        """The scoped store ``segments``, each operation its own transaction."""
        return ScopedKV.through(self._handle, *segments)

    def statistics(self) -> WriterStatistics:
        """A snapshot of the writer's counters (group commit, checkpoints, operations)."""
        return self._handle.statistics()

    def commit_histograms(self) -> tuple[HistogramSnapshot, HistogramSnapshot]:
        """(commit latency in seconds, group size) of every group the writer committed."""
        return self._handle.commit_histograms()

    def close(self) -> None:
        """Finish queued work (the SQLite writer checkpoints), close the connections and
        release the owner's lock.

        Idempotent. Work submitted after close starts raises ``StoreClosedError``.
        """
        with self._writer_lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
        try:
            # pykka handles the stop message after every wake-up already queued, so work
            # accepted before close is committed and answered; the writer then refuses more.
            if writer is not None:
                writer.stop(block=True, timeout=_STOP_TIMEOUT_SECONDS)
        finally:
            try:
                self._ledger.close()
                self._inbox.close()
            finally:
                self._database.release()  # its lock last, whatever closing raised
                log.info("store_closed", store=self._database.name)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
