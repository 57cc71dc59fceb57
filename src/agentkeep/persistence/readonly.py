"""Reading a state directory without owning it: no lock, no migrations, no writer.

In WAL mode a reader needs no lock to see a consistent snapshot: each read transaction sees
exactly the last COMMIT that finished before it started, also while another process owns
the store and writes. So inspecting a store (``agentkeep session list``, ``show``, ``transcript``,
``db check``) works while an agent system runs on it.

A read-only opening never changes the file: it does not migrate, so a database whose schema
differs from the one this code knows is refused with a clear error instead of being misread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import apsw
import msgspec

from agentkeep.errors import (
    SchemaTooNewError,
    SchemaTooOldError,
    StoreClosedError,
    StoreDamagedError,
    StoreDirectoryError,
    StoreError,
)
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readers import read_snapshot
from agentkeep.persistence.schema import MIGRATIONS, Migration, applied_migrations
from agentkeep.persistence.store import DATABASE_NAME, resolve_home

__all__ = ["DAMAGE_ERRORS", "ReadOnlyStore"]

T = TypeVar("T")

#: What SQLite raises when the file's structure is broken (not an I/O error).
DAMAGE_ERRORS: tuple[type[apsw.Error], ...] = (apsw.CorruptError, apsw.NotADBError)

_BUSY_TIMEOUT_MS = 5_000


class ReadOnlyStore:
    """An existing store opened for reading only. Use :meth:`open`; close when done.

    ``read`` has the signature of ``Store.read``: the work runs on a snapshot, in the
    caller's thread, and every write method of its transaction raises.
    """

    def __init__(self, path: Path, connection: apsw.Connection) -> None:
        self._path = path
        self._connection: apsw.Connection | None = connection

    @classmethod
    def open(
        cls, home: str | Path | None = None, *, migrations: tuple[Migration, ...] = MIGRATIONS
    ) -> ReadOnlyStore:
        """Open the store in ``home`` (resolved as ``Store.open`` does) for reading.

        Args:
            home: The state directory; None resolves ``AGENTKEEP_HOME`` then ``./.agentkeep``.
            migrations: The schema this code reads (a parameter so tests can extend it).

        Raises:
            StoreError: there is no database in ``home``; or its migrations are not this
                code's (a different build).
            StoreDirectoryError: ``home`` is a file, or this user cannot read the database.
            StoreDamagedError: the file is not a database, or its schema cannot be read.
            SchemaTooNewError: the database was written by a newer agentkeep.
            SchemaTooOldError: the database predates this code's schema (open it for
                writing once to migrate it).
        """
        directory = resolve_home(home)
        if directory.exists() and not directory.is_dir():
            raise StoreDirectoryError(str(directory), "it is a file, not a directory")
        database = directory / DATABASE_NAME
        if not database.is_file():
            raise StoreError(f"There is no agentkeep store at {database}.")
        try:
            connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.CantOpenError as error:
            raise StoreDirectoryError(str(directory), f"{database.name}: {error}") from None
        connection.set_busy_timeout(_BUSY_TIMEOUT_MS)
        try:
            _check_schema(connection, database, migrations)
        except BaseException:
            connection.close()
            raise
        return cls(database, connection)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def home(self) -> Path:
        """The state directory."""
        return self._path.parent

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run read-only ``work`` on one snapshot of committed state.

        Raises:
            StoreDamagedError: SQLite found the file's structure broken while reading, or a
                stored value does not decode.
            StoreClosedError: the store was closed.
        """
        connection = self._connection
        if connection is None:
            raise StoreClosedError("The store is closed.")
        try:
            return read_snapshot(connection, work)
        except DAMAGE_ERRORS as error:
            raise StoreDamagedError(str(self._path), [str(error)]) from None
        except msgspec.DecodeError as error:
            # SQLite's structure is intact but a stored value is not what was written.
            finding = f"a stored value does not decode ({error})"
            raise StoreDamagedError(str(self._path), [finding]) from None
        except (apsw.CantOpenError, apsw.ReadOnlyError) as error:
            raise _cannot_read(self._path, error) from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _cannot_read(database: Path, error: apsw.Error) -> StoreDirectoryError:
    # SQLite must create agents.db-shm (and -wal) beside a WAL database to read it; in a
    # directory this user may not write, that fails when no owner has created them.
    return StoreDirectoryError(
        str(database.parent),
        f"{database.name} cannot be read without creating files beside it ({error}); "
        "this user may not write there",
    )


def _check_schema(
    connection: apsw.Connection, database: Path, migrations: tuple[Migration, ...]
) -> None:
    try:
        applied = applied_migrations(connection)
    except DAMAGE_ERRORS as error:
        raise StoreDamagedError(str(database), [str(error)]) from None
    except (apsw.CantOpenError, apsw.ReadOnlyError) as error:
        raise _cannot_read(database, error) from None
    known = [(m.version, m.name) for m in migrations]
    newest_known = known[-1][0] if known else 0
    if len(applied) > len(known):
        raise SchemaTooNewError(
            f"The database {database} is at schema version {applied[-1][0]}, newer than this "
            f"agentkeep understands (up to {newest_known}). Upgrade agentkeep to read it."
        )
    if applied != known[: len(applied)]:
        raise StoreError(
            f"The database's applied migrations {applied} do not match this code's list "
            f"{known[: len(applied)]}; it was written by a different build of agentkeep."
        )
    if len(applied) < len(known):
        version = applied[-1][0] if applied else 0
        raise SchemaTooOldError(
            f"The database {database} is at schema version {version}; this agentkeep reads "
            f"version {newest_known}. Open it for writing once (any command that changes it, "
            "or AgentSystem.open) to migrate it."
        )
