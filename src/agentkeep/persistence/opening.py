"""Opening a store on either backend: :func:`open_store`.

``database=None`` is SQLite: ``agents.db`` in the state directory (``Store.open``). A
``postgresql://`` URL is a schema of that server's database (docs/postgres.md); the state
directory then holds only the daemon's files and ``providers.toml``, and its lock file, which
the owner holds as on SQLite (one owner per state directory; a daemon is found by the pid it
names). The PostgreSQL package
(and psycopg) is imported only when a URL asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentkeep.errors import InvalidConfigError
from agentkeep.partitions import Partition
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.store import (
    DEFAULT_CHECKPOINT_PAGES,
    Store,
    acquire_lock,
    prepare_directory,
    resolve_home,
)
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES

__all__ = ["DATABASE_ENV", "open_store"]

#: The environment variable the command line reads a ``--database`` URL from.
DATABASE_ENV = "AGENTKEEP_DATABASE"


def open_store(
    home: str | Path | None = None,
    *,
    database: str | None = None,
    faults: FaultPlan | None = None,
    vfs: str | None = None,
    checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
    start_writer: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    database_path: str | Path | None = None,
    clock: Callable[[], int] | None = None,
    partition: Partition | None = None,
) -> Store:
    """``Store.open`` (the same arguments), or the store ``database`` names on PostgreSQL.

    Raises:
        InvalidConfigError: ``database`` is not a ``postgresql://`` URL, or ``vfs`` or
            ``database_path`` (SQLite's) was given with one; ``partition`` without a
            ``postgresql://`` database, or with a count other than the one the store
            recorded.
        StoreLockedError: another owner holds the store (on PostgreSQL naming the holder's
            backend, client and application name).
        SchemaTooNewError: the store was written by a newer agentkeep.
    """
    if database is None:
        if partition is not None:
            raise InvalidConfigError(
                "partition needs a store on PostgreSQL (database='postgresql://…'): a SQLite "
                "store is owned by one process whole"
            )
        return Store.open(
            home,
            faults=faults,
            vfs=vfs,
            checkpoint_pages=checkpoint_pages,
            start_writer=start_writer,
            max_event_bytes=max_event_bytes,
            max_input_bytes=max_input_bytes,
            database_path=database_path,
            clock=clock,
        )
    from agentkeep.persistence.postgres import is_postgres_url, open_postgres_store

    if not is_postgres_url(database):
        raise InvalidConfigError(f"database {database!r} is not a postgresql:// URL")
    if vfs is not None:
        raise InvalidConfigError("vfs is SQLite's (a file system under the store); not here")
    if database_path is not None:
        raise InvalidConfigError(
            "database_path names a SQLite file; it cannot be given with a postgresql:// database"
        )
    ledger = LedgerHub(max_event_bytes, max_input_bytes)
    if clock is not None:
        ledger.clock = clock
    directory = resolve_home(home)
    prepare_directory(directory)
    # The state directory's lock too: its daemon files belong to one owner, and a daemon is
    # found by the pid this file names (client.discovery). A directory this user cannot
    # write is refused as on SQLite (StoreDirectoryError), not a bare PermissionError.
    # A partition's system does not take it: one worker process runs several partitions'
    # systems over one state directory, and the worker (its daemon) owns the directory.
    home_lock = None if partition is not None else acquire_lock(directory, directory)
    return open_postgres_store(
        database,
        directory,
        faults=faults,
        start_writer=start_writer,
        ledger=ledger,
        home_lock=home_lock,
        clock=clock,
        partition=partition,
    )
