"""Reader connections: consistent snapshots of committed state, in the caller's thread.

In WAL mode readers never block the writer and see exactly the last COMMIT that finished
before their read transaction started, so ``read()`` never observes a half-done group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import apsw

from agentkeep.errors import StoreClosedError
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.transaction import SqliteTransaction, Statements

T = TypeVar("T")

_BUSY_TIMEOUT_MS = 5_000


def open_connection(path: str, *, vfs: str | None = None) -> apsw.Connection:
    """Open ``path`` read-write (creating it) through ``vfs`` (None: SQLite's default)."""
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    if vfs is None:
        connection = apsw.Connection(path, flags=flags)
    else:
        connection = apsw.Connection(path, flags=flags, vfs=vfs)
    connection.set_busy_timeout(_BUSY_TIMEOUT_MS)
    return connection


def read_snapshot(connection: apsw.Connection, work: Callable[[Transaction], T]) -> T:
    """Run ``work`` on one read-only snapshot of ``connection``; the transaction expires when
    it returns, and the snapshot ends (a read has nothing to commit)."""
    connection.execute("BEGIN")
    tx = SqliteTransaction(Statements(connection), read_only=True)
    try:
        return work(tx)
    finally:
        tx.expire()
        if not connection.get_autocommit():
            connection.execute("ROLLBACK")


class ReaderPool:
    """Idle reader connections, opened on demand, one caller at a time each."""

    def __init__(self, path: str, *, vfs: str | None = None) -> None:
        self._path = path
        self._vfs = vfs
        self._lock = threading.Lock()
        self._idle: list[apsw.Connection] = []
        self._closed = False

    def _take(self) -> apsw.Connection:
        with self._lock:
            if self._closed:
                raise StoreClosedError("The store is closed.")
            if self._idle:
                return self._idle.pop()
        connection = open_connection(self._path, vfs=self._vfs)
        # Readers must never write, and never checkpoint: the writer owns both.
        connection.execute("PRAGMA query_only = ON")
        connection.execute("PRAGMA mmap_size = 0")
        return connection

    def _give(self, connection: apsw.Connection) -> None:
        # A connection left inside a transaction (a failed ROLLBACK) is not reused.
        reusable = connection.get_autocommit()
        with self._lock:
            if reusable and not self._closed:
                self._idle.append(connection)
                return
        connection.close()

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` on a read-only snapshot; the transaction expires when it returns."""
        connection = self._take()
        try:
            return read_snapshot(connection, work)
        finally:
            self._give(connection)

    def close(self) -> None:
        """Close every idle reader; readers in use close when their read ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
