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
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from agentkeep.errors import StoreLockedError

__all__ = ["LOCK_CLASS", "Holder", "describe_holder", "lock_key", "try_lock"]

#: The high 32 bits of every store's lock key ("akps").
LOCK_CLASS: Final = 0x616B7073

_HOLDER = """
SELECT a.pid, a.application_name, coalesce(a.client_hostname, a.client_addr::text, 'local')
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1
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


def describe_holder(connection: psycopg.Connection[Any], key: int) -> Holder | None:
    """Who holds ``key`` now (None: nobody, or not visible to this user)."""
    row = connection.execute(_HOLDER, (key >> 32, key & 0xFFFFFFFF)).fetchone()
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
    holder = describe_holder(connection, key)
    raise StoreLockedError(
        store,
        None if holder is None else holder.process_pid,
        holder=None if holder is None else str(holder),
    )
