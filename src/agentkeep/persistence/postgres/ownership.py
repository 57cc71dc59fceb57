"""Exclusive ownership of a store on PostgreSQL: a session-level advisory lock.

The owner holds ``pg_advisory_lock(key)`` on the very session its writes go through (the
writer's connection), for the process's lifetime. The key is the store's schema's oid under a
fixed high half, so two stores (schemas) of one database never share a key, and the lock
lives in the database the schema is in.

Why it is a fence, not just a flag: PostgreSQL releases a session's advisory locks when the
session ends — the owner closed it, the process died (``SIGKILL`` included: the server sees
the socket close), the backend was terminated, or the server restarted. Writes go through
that same session, so a process that lost the lock has lost the session its writes would
use: it can never commit another write without first taking the lock again on a new
session, which fails while someone else holds it. There is never a stale lock to clean up.

A second owner is refused with :class:`~agentkeep.errors.StoreLockedError` naming the holder
as ``pg_stat_activity`` shows it: the backend's pid, the client's address and its
``application_name`` (ours carries the owning process's pid and host).

A partitioned store (``agentkeep.partitions``) is owned one partition at a time: the owner of
partition ``i`` holds the store's key SHARED (so a classic owner, which holds it exclusive, and
partition owners exclude each other) and the partition's own lock EXCLUSIVE, in the two-int
form ``pg_advisory_lock(schema_oid, i)`` (:func:`try_lock_partition`), both on its writer's
session. Creating the schema and the ownership tables, and each migration, run under a
transaction-level lock of the schema's name (:func:`setup_key`), so systems opening one fresh
schema at once do not race.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

import psycopg

from agentkeep.errors import StoreLockedError

__all__ = [
    "LOCK_CLASS",
    "SETUP_CLASS",
    "Holder",
    "describe_holder",
    "lock_key",
    "setup_key",
    "try_lock",
    "try_lock_partition",
    "try_lock_shared",
    "unlock_partition",
]

#: The high 32 bits of every store's lock key ("akps").
LOCK_CLASS: Final = 0x616B7073
#: The high 32 bits of the transaction-level lock that serializes a schema's setup ("akpm").
SETUP_CLASS: Final = 0x616B706D

_HOLDER = """
SELECT a.pid, a.application_name, coalesce(a.client_hostname, a.client_addr::text, 'local')
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = %s
"""


class Holder:
    """Who holds a store's lock, as ``pg_stat_activity`` shows it."""

    def __init__(self, backend_pid: int, application_name: str, client: str) -> None:
        self.backend_pid = backend_pid
        self.application_name = application_name
        self.client = client

    @property
    def process_pid(self) -> int | None:
        """The owning process's pid, when the holder is an agentkeep (its application name
        says ``pid=N``); None for another client."""
        for part in self.application_name.split():
            if part.startswith("pid="):
                try:
                    return int(part[4:])
                except ValueError:
                    return None
        return None

    def __str__(self) -> str:
        name = self.application_name or "(no application_name)"
        return f'backend {self.backend_pid} from {self.client}, application "{name}"'


def lock_key(connection: psycopg.Connection[Any], schema: str) -> int:
    """The advisory lock key of the store in ``schema`` (which must exist)."""
    row = connection.execute(
        "SELECT oid::bigint FROM pg_namespace WHERE nspname = %s", (schema,)
    ).fetchone()
    if row is None:
        raise LookupError(f"schema {schema!r} does not exist")
    return (LOCK_CLASS << 32) | int(row[0])


def setup_key(schema: str) -> int:
    """The transaction-level lock key that serializes creating ``schema``, its ownership
    tables and its migrations (the schema may not exist yet: keyed by its name)."""
    return (SETUP_CLASS << 32) | zlib.crc32(schema.encode("utf-8"))


def describe_holder(
    connection: psycopg.Connection[Any], key: int, partition: int | None = None
) -> Holder | None:
    """Who holds ``key`` now — or, given ``partition``, that partition's lock (None:
    nobody, or not visible to this user)."""
    if partition is None:
        params = (key >> 32, key & 0xFFFFFFFF, 1)
    else:
        params = (key & 0xFFFFFFFF, partition, 2)
    row = connection.execute(_HOLDER, params).fetchone()
    if row is None:
        return None
    return Holder(int(row[0]), str(row[1] or ""), str(row[2]))


def try_lock(connection: psycopg.Connection[Any], key: int, *, store: str) -> None:
    """Take ``key`` on ``connection``'s session without waiting.

    Raises:
        StoreLockedError: another session holds it (naming the holder).
    """
    row = connection.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if row is not None and row[0]:
        return
    _refuse(connection, key, None, store)


def try_lock_shared(connection: psycopg.Connection[Any], key: int, *, store: str) -> None:
    """Take ``key`` SHARED on ``connection``'s session without waiting (a partition's owner:
    it excludes an exclusive, classic, owner and no other partition's owner).

    Raises:
        StoreLockedError: a classic owner holds it (naming the holder).
    """
    row = connection.execute("SELECT pg_try_advisory_lock_shared(%s)", (key,)).fetchone()
    if row is not None and row[0]:
        return
    _refuse(connection, key, None, store)


def try_lock_partition(
    connection: psycopg.Connection[Any], key: int, partition: int, *, store: str
) -> None:
    """Take the lock of ``partition`` of the store whose key is ``key``, exclusive, on
    ``connection``'s session without waiting: ``pg_try_advisory_lock(schema_oid, partition)``
    (the two-int form; the oid as PostgreSQL's signed int4).

    Raises:
        StoreLockedError: another session owns the partition (naming the holder).
    """
    row = connection.execute(
        "SELECT pg_try_advisory_lock(%s, %s)", (_int4(key & 0xFFFFFFFF), partition)
    ).fetchone()
    if row is not None and row[0]:
        return
    _refuse(connection, key, partition, f"{store} (partition {partition})")


def unlock_partition(connection: psycopg.Connection[Any], key: int, partition: int) -> None:
    """Release the partition's lock and the store's shared lock taken with it."""
    connection.execute("SELECT pg_advisory_unlock(%s, %s)", (_int4(key & 0xFFFFFFFF), partition))
    connection.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))


def _int4(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _refuse(
    connection: psycopg.Connection[Any], key: int, partition: int | None, store: str
) -> None:
    holder = describe_holder(connection, key, partition)
    raise StoreLockedError(
        store,
        None if holder is None else holder.process_pid,
        holder=None if holder is None else str(holder),
    )
