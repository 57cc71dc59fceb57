"""Opening a state directory: lock, connection, migrations, writer, readers.

``Store.open()`` resolves the state directory (the ``home`` argument, else ``AGENTKEEP_HOME``,
else ``./.agentkeep``), takes the single-owner lock, opens ``agents.db`` in WAL mode with
``synchronous=FULL`` (acknowledged means durable, also on power loss) and foreign keys on,
applies pending migrations, and starts the :class:`~agentkeep.persistence.writer.StoreWriter`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import apsw
import pykka
import structlog

from agentkeep.errors import StoreError
from agentkeep.persistence.faults import FaultInjector, FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.readers import ReaderPool, open_connection
from agentkeep.persistence.schema import migrate
from agentkeep.persistence.writer import (
    StoreWriter,
    StoreWriterHandle,
    WriterStatistics,
    _Counters,
    _Inbox,
)

log = structlog.get_logger(__name__)

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


def _configure_writer(connection: apsw.Connection) -> None:
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
    if str(mode).lower() != "wal":
        raise StoreError(f"Could not put the database in WAL mode (got {mode!r}).")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")
    # Memory-mapped I/O bypasses the VFS's xRead/xWrite; keep every byte visible to it.
    connection.execute("PRAGMA mmap_size = 0")
    # Checkpoints run from the writer when idle, never inside COMMIT, so a checkpoint I/O
    # error cannot make a durable COMMIT look failed.
    connection.wal_autocheckpoint(0)


class Store:
    """An open state directory: the single owner of ``agents.db``.

    Use :meth:`open`; close with :meth:`close` (or a ``with`` block). ``transact`` and
    ``read`` implement :class:`~agentkeep.persistence.interface.StoreHandle`.
    """

    def __init__(
        self,
        *,
        home: Path,
        lock: StoreLock,
        handle: StoreWriterHandle,
        writer: pykka.ActorRef[Any],
        inbox: _Inbox,
        readers: ReaderPool,
    ) -> None:
        self._home = home
        self._lock = lock
        self._handle = handle
        self._writer = writer
        self._inbox = inbox
        self._readers = readers
        self._closed = False

    @classmethod
    def open(
        cls,
        home: str | Path | None = None,
        *,
        faults: FaultPlan | None = None,
        vfs: str | None = None,
        checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
    ) -> Store:
        """Open (creating if needed) the store in ``home``.

        Args:
            home: The state directory; None resolves ``AGENTKEEP_HOME`` then ``./.agentkeep``.
            faults: Chaos testing only: fail or kill at a store operation. None reads
                ``AGENTKEEP_FAULT_AT`` / ``AGENTKEEP_FAULT_MODE`` (unset: no faults).
            vfs: Chaos testing only: the name of a registered apsw VFS to open the
                connections through (injected I/O errors, power-loss simulation).
            checkpoint_pages: WAL size (pages) from which the idle writer checkpoints.

        Raises:
            StoreLockedError: another owner holds the store.
            SchemaTooNewError: the database was written by a newer agentkeep.
        """
        directory = resolve_home(home)
        directory.mkdir(parents=True, exist_ok=True)
        database = directory / DATABASE_NAME
        lock = StoreLock.acquire(directory / LOCK_NAME, store_path=database)
        connection: apsw.Connection | None = None
        readers: ReaderPool | None = None
        try:
            connection = open_connection(str(database), vfs=vfs)
            _configure_writer(connection)
            migrate(connection)
            injector = FaultInjector(faults if faults is not None else FaultPlan.from_env())
            inbox = _Inbox()
            counters = _Counters()
            readers = ReaderPool(str(database), vfs=vfs)
            writer = StoreWriter.start(
                connection, inbox, counters, injector, checkpoint_pages=checkpoint_pages
            )
        except BaseException:
            if readers is not None:
                readers.close()
            if connection is not None:
                connection.close()
            lock.release()
            raise
        handle = StoreWriterHandle(writer, inbox, counters, readers, injector)
        log.info("store_opened", path=str(database))
        return cls(
            home=directory, lock=lock, handle=handle, writer=writer, inbox=inbox, readers=readers
        )

    @property
    def home(self) -> Path:
        """The state directory."""
        return self._home

    @property
    def path(self) -> Path:
        """The database file."""
        return self._home / DATABASE_NAME

    @property
    def handle(self) -> StoreWriterHandle:
        """The writer's handle (a ``StoreHandle``) to give to the rest of the runtime."""
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

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

    def close(self) -> None:
        """Finish queued work, checkpoint, close connections and release the lock.

        Idempotent. Work submitted after close starts raises ``StoreClosedError``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            # pykka handles the stop message after every wake-up already queued, so work
            # accepted before close is committed and answered; the writer then refuses more.
            self._writer.stop(block=True, timeout=_STOP_TIMEOUT_SECONDS)
        finally:
            self._inbox.close()
            self._readers.close()
            self._lock.release()
            log.info("store_closed", path=str(self.path))

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
