"""The owner's session: the writer's one connection, holding the store's advisory lock.

:class:`OwnerSession` connects, creates the store's schema if missing, takes the lock
(:mod:`~agentkeep.persistence.postgres.ownership`) and then stamps the ownership row
(``agentkeep_owner``: this owner's token, pid and host). It is the fence against a gap:

- A dropped connection is never silently replaced. :meth:`OwnerSession.reconnect` opens a new
  session and takes the lock again before anything is written through it. If the old session
  is still alive on the server (a network cut the server has not noticed), it is recognised by
  this owner's token in its ``application_name`` and terminated first, so two sessions of one
  owner never hold anything at once.
- If another process took the lock meanwhile, or took it and let it go again (the ownership
  row carries its token, not ours), this process's view of the store is stale:
  :class:`~agentkeep.errors.StoreOwnershipLostError`, and the writer stops for good.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from agentkeep.errors import StoreLockedError, StoreOwnershipLostError
from agentkeep.logs import get_logger
from agentkeep.persistence.postgres.connection import (
    PostgresConnection,
    PostgresTarget,
    application_name,
    connect,
    new_token,
)
from agentkeep.persistence.postgres.ownership import describe_holder, lock_key, try_lock

__all__ = ["OwnerSession"]

log = get_logger(__name__)

_OWNER_TABLE = """
CREATE TABLE IF NOT EXISTS agentkeep_owner (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT NOT NULL,
    pid BIGINT NOT NULL,
    application_name TEXT NOT NULL,
    since_ms BIGINT NOT NULL
)
"""
_STAMP = """
INSERT INTO agentkeep_owner (id, token, pid, application_name, since_ms)
VALUES (1, %s, pg_backend_pid(), %s, %s)
ON CONFLICT (id) DO UPDATE SET token = excluded.token, pid = excluded.pid,
    application_name = excluded.application_name, since_ms = excluded.since_ms
"""
#: How long a reconnecting owner waits for its own old session to end once terminated.
_OLD_SESSION_WAIT_MS = 10_000


class OwnerSession:
    """The writer's session and the lock it holds (see the module)."""

    def __init__(self, target: PostgresTarget) -> None:
        self.target = target
        self.token = new_token()
        self.name = application_name(self.token)
        self._key: int | None = None
        self.connection: PostgresConnection | None = None
        #: The server process of the current session (for the outcome of a lost COMMIT).
        self.backend_pid = 0

    @classmethod
    def open(cls, target: PostgresTarget) -> OwnerSession:
        """Connect, create the schema if missing, take the lock and stamp the ownership row.

        Raises:
            StoreLockedError: another session holds the store (naming it).
            psycopg.OperationalError: the server cannot be reached.
        """
        session = cls(target)
        raw = connect(target, name=session.name)
        try:
            raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"')
            session._key = lock_key(raw, target.schema)
            try_lock(raw, session._key, store=target.display)
            raw.execute(_OWNER_TABLE)
            raw.execute(_STAMP, (session.token, session.name, time.time_ns() // 1_000_000))
        except BaseException:
            raw.close()
            raise
        session._adopt(raw)
        return session

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection (for migrations, before the writer starts)."""
        assert self.connection is not None
        return self.connection.raw

    def _adopt(self, raw: psycopg.Connection[Any]) -> None:
        self.connection = PostgresConnection(raw)
        self.backend_pid = raw.info.backend_pid

    @property
    def broken(self) -> bool:
        return self.connection is None or self.connection.broken

    def reconnect(self) -> PostgresConnection:
        """A new session holding the lock again, this owner's row unchanged (see the module).

        Raises:
            StoreOwnershipLostError: another owner holds the store, or held it meanwhile.
            psycopg.OperationalError: the server cannot be reached (try again later).
        """
        self.close()
        key = self._key
        assert key is not None
        raw = connect(self.target, name=self.name)
        try:
            try:
                try_lock(raw, key, store=self.target.display)
            except StoreLockedError as error:
                holder = describe_holder(raw, key)
                if holder is None or self.token not in holder.application_name:
                    raise StoreOwnershipLostError(
                        f"The connection to {self.target.display} dropped and another "
                        f"owner holds the store now ({error}); this process stopped writing. "
                        "Restart it once that owner is gone."
                    ) from None
                # Our own old session, still alive on the server: end it, then wait for it.
                log.warning("store_old_session_terminated", backend_pid=holder.backend_pid)
                raw.execute(
                    "SELECT pg_terminate_backend(%s, %s)",
                    (holder.backend_pid, _OLD_SESSION_WAIT_MS),
                )
                try_lock(raw, key, store=self.target.display)
            row = raw.execute("SELECT token FROM agentkeep_owner WHERE id = 1").fetchone()
            if row is None or row[0] != self.token:
                raise StoreOwnershipLostError(
                    f"The connection to {self.target.display} dropped and another owner "
                    "owned the store meanwhile; this process's view of it is stale, so it "
                    "stopped writing. Restart it."
                )
        except BaseException:
            raw.close()
            raise
        self._adopt(raw)
        log.warning("store_reconnected", store=self.target.display, backend_pid=self.backend_pid)
        assert self.connection is not None
        return self.connection

    def close(self) -> None:
        """Release the lock and close the session; idempotent.

        The lock is released by a statement first, while the session is still up: the
        server ends a closed session's backend (and drops its locks) a moment after the
        socket closes, so an owner reopening the store right after closing it would
        otherwise find its own lock still held."""
        connection, self.connection = self.connection, None
        if connection is None:
            return
        key = self._key
        try:
            if key is not None and not connection.broken:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
        except psycopg.Error as exc:  # a dead socket: the server drops the lock with it
            log.warning("store_session_unlock_failed", error=repr(exc))
        try:
            connection.close()
        except psycopg.Error as exc:  # closing a dead socket
            log.warning("store_session_close_failed", error=repr(exc))
