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

The ownership row is per partition (``agentkeep_owner``, keyed by ``partition``; a classic
owner is partition 0 of 1) and carries the **epoch**: 1 for the partition's first owner, one
more at each new owner, stamped by the session that holds the lock (so it only grows, and
the owner that stamped it is the only one writing the partition while its session lives).
A partition's owner (``OwnerSession.open(target, partition=Partition(i, n))``) takes the
store's lock shared and the partition's exclusive (``ownership``): a classic owner and
partition owners exclude each other with ``StoreLockedError``. A store's partition count is
recorded at its first partitioned open (``agentkeep_partitioning``, one row,
:func:`record_partition_count`); an open with another count is refused with
``InvalidConfigError`` before it stamps anything.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from agentkeep.errors import InvalidConfigError, StoreLockedError, StoreOwnershipLostError
from agentkeep.logs import get_logger
from agentkeep.partitions import Partition, partition_of
from agentkeep.persistence.postgres.connection import (
    PostgresConnection,
    PostgresTarget,
    application_name,
    connect,
    new_token,
)
from agentkeep.persistence.postgres.ownership import (
    describe_holder,
    lock_key,
    setup_key,
    try_lock,
    try_lock_partition,
    try_lock_shared,
    unlock_partition,
)

__all__ = ["OwnerSession", "record_partition_count", "recorded_partition_count"]

log = get_logger(__name__)

_OWNER_TABLE = """
CREATE TABLE IF NOT EXISTS agentkeep_owner (
    partition INTEGER PRIMARY KEY,
    token TEXT NOT NULL,
    pid BIGINT NOT NULL,
    application_name TEXT NOT NULL,
    since_ms BIGINT NOT NULL,
    epoch BIGINT NOT NULL
)
"""
# A store an earlier agentkeep created has one row keyed ``id = 1``: it becomes partition 0,
# its owner's epoch 1 (run only once the store's lock is held, so no earlier owner runs on).
_UPGRADE_OWNER_TABLE = """
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
            AND table_name = 'agentkeep_owner' AND column_name = 'id') THEN
        ALTER TABLE agentkeep_owner DROP CONSTRAINT IF EXISTS agentkeep_owner_id_check;
        UPDATE agentkeep_owner SET id = 0;
        ALTER TABLE agentkeep_owner RENAME COLUMN id TO partition;
        ALTER TABLE agentkeep_owner ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
    END IF;
END $$
"""
_PARTITIONING_TABLE = """
CREATE TABLE IF NOT EXISTS agentkeep_partitioning (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    count INTEGER NOT NULL CHECK (count >= 1),
    recorded_at_ms BIGINT NOT NULL
)
"""
_STAMP = """
INSERT INTO agentkeep_owner (partition, token, pid, application_name, since_ms, epoch)
VALUES (%s, %s, pg_backend_pid(), %s, %s, 1)
ON CONFLICT (partition) DO UPDATE SET token = excluded.token, pid = excluded.pid,
    application_name = excluded.application_name, since_ms = excluded.since_ms,
    epoch = agentkeep_owner.epoch + 1
RETURNING epoch
"""
#: How long a reconnecting owner waits for its own old session to end once terminated.
_OLD_SESSION_WAIT_MS = 10_000


class OwnerSession:
    """The writer's session and the lock it holds (see the module)."""

    def __init__(self, target: PostgresTarget, partition: Partition | None = None) -> None:
        self.target = target
        #: The partition this session owns (None: the whole store, a classic owner).
        self.partition = partition
        self.token = new_token()
        self.name = application_name(self.token)
        self._key: int | None = None
        self.connection: PostgresConnection | None = None
        #: The server process of the current session (for the outcome of a lost COMMIT).
        self.backend_pid = 0
        #: The epoch this owner stamped on its partition's row (0 until stamped).
        self.epoch = 0
        #: Set once a reconnect found another owner (``StoreOwnershipLostError``): this
        #: owner never writes again. Noticed at the first write after the session dropped.
        self.lost = threading.Event()

    @property
    def schema_oid(self) -> int:
        """The oid of the store's schema (known once the session opened)."""
        if self._key is None:
            raise RuntimeError("the session has not opened")
        return self._key & 0xFFFFFFFF

    @property
    def index(self) -> int:
        """The partition's index in ``agentkeep_owner`` (a classic owner's is 0)."""
        return 0 if self.partition is None else self.partition.index

    @property
    def _what(self) -> str:
        return "the store" if self.partition is None else f"its {self.partition}"

    @classmethod
    def open(cls, target: PostgresTarget, partition: Partition | None = None) -> OwnerSession:
        """Connect, create the schema if missing, take the lock(s) and stamp the ownership
        row (a new epoch).

        Raises:
            StoreLockedError: another session holds the store or the partition (naming it).
            InvalidConfigError: the store was partitioned with another count.
            psycopg.OperationalError: the server cannot be reached.
        """
        session = cls(target, partition)
        raw = connect(target, name=session.name)
        try:
            with raw.transaction():
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (setup_key(target.schema),))
                raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"')
            session._key = lock_key(raw, target.schema)
            session._take(raw, session._key)
            with raw.transaction():
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (setup_key(target.schema),))
                raw.execute(_OWNER_TABLE)
                raw.execute(_UPGRADE_OWNER_TABLE)
                raw.execute(_PARTITIONING_TABLE)
                if partition is not None:
                    _check_count(raw, partition, target.display)
                row = raw.execute(
                    _STAMP,
                    (session.index, session.token, session.name, time.time_ns() // 1_000_000),
                ).fetchone()
                assert row is not None
                session.epoch = int(row[0])
        except BaseException:
            raw.close()
            raise
        session._adopt(raw)
        log.info(
            "store_partition_acquired" if partition is not None else "store_acquired",
            store=target.display,
            partition=session.index,
            epoch=session.epoch,
        )
        return session

    def _take(self, raw: psycopg.Connection[Any], key: int) -> None:
        """Take this owner's lock(s) on ``raw``'s session (see the module)."""
        partition = self.partition
        if partition is None:
            try_lock(raw, key, store=self.target.display)
            return
        try_lock_shared(raw, key, store=self.target.display)
        try:
            try_lock_partition(raw, key, partition.index, store=self.target.display)
        except BaseException:
            raw.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))
            raise

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
                self._take(raw, key)
            except StoreLockedError as error:
                holder = describe_holder(raw, key, None)
                if self.partition is not None and (
                    holder is None or self.token not in holder.application_name
                ):
                    holder = describe_holder(raw, key, self.partition.index)
                if holder is None or self.token not in holder.application_name:
                    self.lost.set()
                    raise StoreOwnershipLostError(
                        f"The connection to {self.target.display} dropped and another "
                        f"owner holds {self._what} now ({error}); this process stopped writing. "
                        "Restart it once that owner is gone."
                    ) from None
                # Our own old session, still alive on the server: end it, then wait for it.
                log.warning("store_old_session_terminated", backend_pid=holder.backend_pid)
                raw.execute(
                    "SELECT pg_terminate_backend(%s, %s)",
                    (holder.backend_pid, _OLD_SESSION_WAIT_MS),
                )
                self._take(raw, key)
            row = raw.execute(
                "SELECT token FROM agentkeep_owner WHERE partition = %s", (self.index,)
            ).fetchone()
            if row is None or row[0] != self.token:
                self.lost.set()
                raise StoreOwnershipLostError(
                    f"The connection to {self.target.display} dropped and another owner "
                    f"owned {self._what} meanwhile; this process's view of it is stale, so "
                    "it stopped writing. Restart it."
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
                if self.partition is None:
                    connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
                else:
                    unlock_partition(connection.raw, key, self.partition.index)
        except psycopg.Error as exc:  # a dead socket: the server drops the lock with it
            log.warning("store_session_unlock_failed", error=repr(exc))
        try:
            connection.close()
        except psycopg.Error as exc:  # closing a dead socket
            log.warning("store_session_close_failed", error=repr(exc))


def _check_count(raw: psycopg.Connection[Any], partition: Partition, store: str) -> None:
    recorded = recorded_partition_count(raw)
    if recorded is not None and recorded != partition.count:
        raise InvalidConfigError(
            f"The store at {store} is divided into {recorded} partitions, not "
            f"{partition.count}: open it with Partition(index, {recorded})."
        )


def recorded_partition_count(raw: psycopg.Connection[Any]) -> int | None:
    """The store's partition count as its first partitioned open recorded it (None: never
    opened partitioned)."""
    row = raw.execute("SELECT count FROM agentkeep_partitioning WHERE id = 1").fetchone()
    return None if row is None else int(row[0])


def record_partition_count(raw: psycopg.Connection[Any], schema: str, count: int) -> None:
    """Record ``count`` as the store's partition count if none is (its first partitioned
    open, after the migrations), stamping every existing agent's ``partition`` with it, in
    one transaction under the schema's setup lock; an existing other count is refused.

    Raises:
        InvalidConfigError: the store was partitioned with another count.
    """
    with raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(%s)", (setup_key(schema),))
        recorded = recorded_partition_count(raw)
        if recorded == count:
            return
        if recorded is not None:
            raise InvalidConfigError(
                f"The store is divided into {recorded} partitions, not {count}: open it "
                f"with Partition(index, {recorded})."
            )
        raw.execute(
            "INSERT INTO agentkeep_partitioning (id, count, recorded_at_ms) VALUES (1, %s, %s)",
            (count, time.time_ns() // 1_000_000),
        )
        ids = [str(r[0]) for r in raw.execute("SELECT id FROM agents").fetchall()]
        if ids:
            raw.execute(
                "UPDATE agents SET partition = v.p FROM "
                "(SELECT unnest(%s::text[]) AS id, unnest(%s::integer[]) AS p) AS v "
                "WHERE agents.id = v.id",
                (ids, [partition_of(i, count) for i in ids]),
            )
    log.info("store_partition_count_recorded", count=count, agents=len(ids))
