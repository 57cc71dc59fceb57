"""A store's SQLite file: opening the writer's connection (checked undamaged, WAL mode,
``synchronous=FULL``, automatic checkpoints off) and :class:`SqliteDatabase`, the part of a
:class:`~agentkeep.persistence.store.Store` that differs on SQLite."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import apsw

from agentkeep.errors import StoreDamagedError, StoreDirectoryError, StoreError
from agentkeep.persistence.disk import file_identity
from agentkeep.persistence.faults import FaultInjector
from agentkeep.persistence.inbox import Counters, Inbox
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.readers import ReaderPool, open_connection
from agentkeep.persistence.schema import set_new_page_size
from agentkeep.persistence.sqlite_writer import SqliteWriterBackend
from agentkeep.persistence.writer_backend import WriterBackend

__all__ = ["SqliteDatabase", "check_lines", "open_writer_connection", "refuse_damaged"]


def refuse_damaged(connection: apsw.Connection, database: Path) -> None:
    """Raise :class:`StoreDamagedError` unless ``PRAGMA quick_check`` passes.

    Runs before anything writes, so a damaged file is never written into (not even the WAL
    header). I/O errors are not damage: they propagate as they are.
    """
    try:
        findings = check_lines(connection.execute("PRAGMA quick_check(20)"))
    except (apsw.CorruptError, apsw.NotADBError) as error:
        raise StoreDamagedError(str(database), [str(error)]) from None
    if findings != ["ok"]:
        raise StoreDamagedError(str(database), findings)


def check_lines(rows: Iterable[tuple[Any, ...]]) -> list[str]:
    """The findings of ``PRAGMA integrity_check`` / ``quick_check``, one per line.

    SQLite puts several findings in one row and heads them ``*** in database main ***``;
    the header says nothing for a single-database connection.
    """
    return [
        line
        for row in rows
        for line in str(row[0]).splitlines()
        if line.strip() and not line.startswith("*** in database ")
    ]


def open_writer_connection(database: Path, vfs: str | None) -> apsw.Connection:
    """The writer's connection, checked undamaged and configured (WAL, FULL sync)."""
    connection = None
    try:
        connection = open_connection(str(database), vfs=vfs)
        # SQLite silently opens a write-protected file read-only; say so before any write.
        if connection.readonly("main"):
            raise _read_only(database, "the file is write-protected")
        refuse_damaged(connection, database)
        set_new_page_size(connection)  # before WAL mode writes the first page
        _configure_writer(connection)
    except (apsw.CantOpenError, apsw.ReadOnlyError) as error:
        if connection is not None:
            connection.close()
        raise _read_only(database, str(error)) from None
    except BaseException:
        if connection is not None:
            connection.close()
        raise
    return connection


def _read_only(database: Path, detail: str) -> StoreDirectoryError:
    return StoreDirectoryError(
        str(database.parent),
        f"it is read-only for this user (uid {os.getuid()}): "
        f"{database.name} cannot be opened for writing ({detail})",
    )


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


class SqliteDatabase:
    """A store's SQLite file (see the module); implements :class:`Database`."""

    def __init__(
        self,
        path: Path,
        *,
        lock: StoreLock,
        connection: apsw.Connection,
        readers: ReaderPool,
        vfs: str | None,
        checkpoint_pages: int,
    ) -> None:
        self.path = path
        self._lock = lock
        self._vfs = vfs
        self._readers = readers
        self._checkpoint_pages = checkpoint_pages
        # The file as opened: every writer checks it before each COMMIT.
        self._identity = file_identity(str(path))
        # The migrated connection, kept for the first writer; later incarnations open their own.
        self._spare_connection: apsw.Connection | None = connection

    @property
    def readers(self) -> ReaderPool:
        return self._readers

    @property
    def name(self) -> str:
        return str(self.path)

    def writer_backend(
        self, inbox: Inbox, counters: Counters, faults: FaultInjector
    ) -> SqliteWriterBackend:
        connection, self._spare_connection = self._spare_connection, None
        if connection is None:
            connection = open_connection(str(self.path), vfs=self._vfs)
            try:
                _configure_writer(connection)
            except BaseException:
                connection.close()
                raise
        return SqliteWriterBackend(
            connection,
            inbox,
            counters,
            faults,
            checkpoint_pages=self._checkpoint_pages,
            database=str(self.path),
            identity=self._identity,
        )

    def writer_not_started(self, backend: WriterBackend) -> None:
        backend.close(clean=False)

    def release(self) -> None:
        try:
            try:
                if self._spare_connection is not None:
                    self._spare_connection.close()
            finally:
                self._readers.close()
        finally:
            # Whatever closing a connection raised (an I/O error, a VFS refusing the WAL's
            # deletion), the lock is released: a store that failed to close cleanly must
            # not stay owned by a process that no longer uses it.
            self._lock.release()
