"""Opening a state directory to look at it: no lock, so it works while another process owns it.

``list``, ``show``, ``transcript`` and ``db check`` only read. They open the store read-only
(:class:`~agentkeep.persistence.readonly.ReadOnlyStore`): WAL readers need no lock, so they
see the last committed state even while an agent system runs on the store, and they never
write (no migration, no checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from agentkeep.cli.runtime import Home, open_store
from agentkeep.errors import SchemaTooOldError
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readonly import ReadOnlyStore

if TYPE_CHECKING:
    from agentkeep.persistence.postgres import PostgresReadOnlyStore

T = TypeVar("T")


class Reader(Protocol):
    """What a read-only command needs from a store: consistent snapshots."""

    def read(self, work: Callable[[Transaction], T]) -> T: ...


@contextmanager
def open_reader(home: Home) -> Iterator[Reader]:
    """The store in ``home`` for reading, without taking its lock.

    A database this code has not migrated yet is opened the owning way once (which
    migrates it, or names the process that owns it).
    """
    home.require_store()
    store: ReadOnlyStore | PostgresReadOnlyStore | None
    try:
        if home.database is not None:
            # Only here: psycopg takes a while to import, and SQLite needs none of it.
            from agentkeep.persistence.postgres.readers import (
                NoPostgresStoreError,
                PostgresReadOnlyStore,
            )

            try:
                store = PostgresReadOnlyStore.open(home.database, home.path)
            except NoPostgresStoreError as error:
                # As on SQLite: nothing here yet is "not found" (exit 4) with what to do.
                raise Home.no_store(error.where) from None
        else:
            store = ReadOnlyStore.open(home.path)
    except SchemaTooOldError:
        store = None
    if store is None:
        with open_store(home) as owned:
            yield owned
        return
    try:
        yield store
    finally:
        store.close()
