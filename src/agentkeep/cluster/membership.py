"""The membership table and what the coordinator asks the server about workers and locks.

``agentkeep_workers`` (in the store's schema, created if missing) has one row per worker
process that takes part in serving the store:

- ``token`` — the worker's identity for this membership (a new one at each join);
- ``pid``, ``host`` — the process, as its sessions' ``application_name`` names it
  (``agentkeep pid=<pid> host=<host> …``: how a worker's sessions are found on the server);
- ``application_name``, ``backend_pid`` — the coordinator's own session; a worker whose
  session the server no longer runs is dead (SIGKILL, its backend terminated, its machine
  gone once the server noticed);
- ``address`` — its REST address (None when it serves none);
- ``started_ms``, ``heartbeat_ms`` (server clock), ``lease_ms`` — a worker whose last
  heartbeat is older than its lease is dead too, even if its sessions still run (SIGSTOP, a
  hung process, a network cut the server has not noticed);
- ``partitions`` — JSON ``{"<index>": since_ms}``: what it runs, since when (for
  ``agentkeep workers``; the locks are the truth, this is the worker's own account).

Times are the server's (``clock_timestamp()``), so workers on machines whose clocks
disagree still agree on whose lease ran out.

A partition's holder is read from ``pg_locks``: the advisory lock ``(schema oid,
partition)`` (the two-int form), and the holder's session's ``application_name`` names its
process and host.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
import psycopg
from psycopg import sql

from agentkeep.persistence.postgres.connection import PostgresTarget

__all__ = [
    "CREATE_TABLE",
    "PartitionHolder",
    "WorkerRow",
    "connect",
    "create_table",
    "heartbeat",
    "join",
    "leave",
    "name_fields",
    "partition_holders",
    "read_workers",
    "reap",
    "schema_oid",
]

CREATE_TABLE: Final = """
CREATE TABLE IF NOT EXISTS agentkeep_workers (
    token TEXT PRIMARY KEY,
    pid BIGINT NOT NULL,
    host TEXT NOT NULL,
    application_name TEXT NOT NULL,
    backend_pid BIGINT NOT NULL,
    address TEXT,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    lease_ms BIGINT NOT NULL,
    partitions TEXT NOT NULL DEFAULT '{}'
)
"""
#: The first key of the transaction lock creating the table ("akpw").
_CREATE_CLASS: Final = 0x616B7077
#: The server's clock in milliseconds since the epoch.
NOW_MS: Final = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_WORKERS = f"""
SELECT w.token, w.pid, w.host, w.application_name, w.backend_pid, w.address, w.started_ms,
    w.heartbeat_ms, w.lease_ms, w.partitions, {NOW_MS} AS now_ms,
    EXISTS (SELECT 1 FROM pg_stat_activity AS a
            WHERE a.pid = w.backend_pid AND a.application_name = w.application_name)
FROM agentkeep_workers AS w
ORDER BY w.started_ms, w.token
"""
_HOLDERS = """
SELECT l.objid::bigint, a.pid, coalesce(a.application_name, '')
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
"""
_JOIN = f"""
INSERT INTO agentkeep_workers (token, pid, host, application_name, backend_pid, address,
    started_ms, heartbeat_ms, lease_ms, partitions)
VALUES (%s, %s, %s, %s, pg_backend_pid(), %s, {NOW_MS}, {NOW_MS}, %s, '{{}}')
"""
_HEARTBEAT = f"""
UPDATE agentkeep_workers SET heartbeat_ms = {NOW_MS}, partitions = %s,
    backend_pid = pg_backend_pid(), application_name = %s
WHERE token = %s
"""
_LEAVE = "DELETE FROM agentkeep_workers WHERE token = %s"


# Claims a dead worker's row (one reaper wins) before its sessions are terminated.
_CLAIM_DEAD = f"""
DELETE FROM agentkeep_workers AS w
WHERE w.token = %s AND (
    w.heartbeat_ms + w.lease_ms < {NOW_MS}
    OR NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a
                   WHERE a.pid = w.backend_pid AND a.application_name = w.application_name))
RETURNING w.pid, w.host
"""
# Every session of a process, by the prefix of its application name; unless another live
# member has the same pid and host (the pid was reused by a new worker on that machine).
# Signalled all at once (pg_terminate_backend's own wait polls every 100 ms, one by one).
_TERMINATE = """
SELECT a.pid, pg_terminate_backend(a.pid)
FROM pg_stat_activity AS a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
    AND starts_with(a.application_name, %s)
    AND NOT EXISTS (SELECT 1 FROM agentkeep_workers AS w WHERE w.pid = %s AND w.host = %s)
"""
# Until the terminated backends hold no lock any more (pg_locks is read afresh each time,
# unlike pg_stat_activity inside one transaction), for at most {polls} polls of 5 ms.
_AWAIT_EXIT = """
DO $$ BEGIN
    FOR i IN 1..{polls} LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_locks WHERE pid = ANY(ARRAY[{pids}]::int[]));
        PERFORM pg_sleep(0.005);
    END LOOP;
END $$
"""


class WorkerRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``agentkeep_workers``, with what the server says of it now."""

    token: str
    pid: int
    host: str
    application_name: str
    backend_pid: int
    address: str | None
    started_ms: int
    heartbeat_ms: int
    lease_ms: int
    #: Partition index -> since when (server ms) the worker runs it, by its own account.
    partitions: dict[int, int]
    #: The server's clock when the row was read.
    now_ms: int
    #: The coordinator's session still runs on the server.
    connected: bool

    @property
    def fresh(self) -> bool:
        """Its last heartbeat is within its lease."""
        return self.heartbeat_ms + self.lease_ms >= self.now_ms

    @property
    def live(self) -> bool:
        """Counted as a member: connected and heartbeating within its lease."""
        return self.connected and self.fresh


class PartitionHolder(msgspec.Struct, frozen=True, kw_only=True):
    """The session holding a partition's lock, as the server shows it."""

    partition: int
    backend_pid: int
    application_name: str

    @property
    def process(self) -> tuple[int, str] | None:
        """The holder's (pid, host), when its application name is an agentkeep one."""
        fields = name_fields(self.application_name)
        if "pid" not in fields or "host" not in fields:
            return None
        try:
            return int(fields["pid"]), fields["host"]
        except ValueError:
            return None


def name_fields(application_name: str) -> dict[str, str]:
    """``agentkeep pid=1 host=h w=t`` -> ``{"pid": "1", "host": "h", "w": "t"}``."""
    words = application_name.split()
    if not words or words[0] != "agentkeep":
        return {}
    return dict(word.split("=", 1) for word in words[1:] if "=" in word)


def connect(target: PostgresTarget, name: str, *, lease_ms: int) -> psycopg.Connection[Any]:
    """The coordinator's session: autocommit, the store's schema as search path, and
    connection and keepalive timeouts scaled to a third of the lease (so a server that
    vanished is noticed within the lease)."""
    third = max(1, lease_ms // 3000)
    return psycopg.connect(
        target.conninfo,
        autocommit=True,
        application_name=name,
        options=f"-c search_path={target.schema}",
        connect_timeout=third,
        keepalives=1,
        keepalives_idle=third,
        keepalives_interval=1,
        keepalives_count=2,
    )


def create_table(connection: psycopg.Connection[Any], schema: str) -> None:
    """Create ``schema`` and ``agentkeep_workers`` in it, if missing. Workers joining at
    once serialize on a transaction lock of their own (two concurrent ``CREATE … IF NOT
    EXISTS`` may otherwise collide), and an existing schema is not created again (which
    would need ``CREATE`` on the database)."""
    with connection.transaction():
        connection.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_CREATE_CLASS, schema)
        )
        exists = connection.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
        if exists is None:
            connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        connection.execute(CREATE_TABLE)


def schema_oid(connection: psycopg.Connection[Any]) -> int:
    """The oid of the connection's schema: the first key of every partition's lock."""
    row = connection.execute(
        "SELECT oid::bigint FROM pg_namespace WHERE nspname = current_schema()"
    ).fetchone()
    if row is None:
        raise LookupError("the store's schema does not exist")
    return int(row[0])


def read_workers(connection: psycopg.Connection[Any]) -> list[WorkerRow]:
    """Every member row, oldest first (then by token): the agreed order of the spread."""
    rows = connection.execute(_WORKERS).fetchall()
    return [
        WorkerRow(
            token=str(row[0]),
            pid=int(row[1]),
            host=str(row[2]),
            application_name=str(row[3]),
            backend_pid=int(row[4]),
            address=None if row[5] is None else str(row[5]),
            started_ms=int(row[6]),
            heartbeat_ms=int(row[7]),
            lease_ms=int(row[8]),
            partitions={int(key): int(value) for key, value in json.loads(row[9]).items()},
            now_ms=int(row[10]),
            connected=bool(row[11]),
        )
        for row in rows
    ]


def partition_holders(connection: psycopg.Connection[Any]) -> dict[int, PartitionHolder]:
    """Who holds each held partition lock of the connection's schema."""
    return {
        int(row[0]): PartitionHolder(
            partition=int(row[0]), backend_pid=int(row[1]), application_name=str(row[2])
        )
        for row in connection.execute(_HOLDERS).fetchall()
    }


def reap(connection: psycopg.Connection[Any], token: str, *, wait_ms: int) -> list[int] | None:
    """Remove a dead member and end every session of its process; None if it is not dead
    (any more) or another worker reaped it first. Returns the terminated backends' pids
    (each waited for, up to ``wait_ms``, so its locks are free when this returns)."""
    row = connection.execute(_CLAIM_DEAD, (token,)).fetchone()
    if row is None:
        return None
    pid, host = int(row[0]), str(row[1])
    prefix = f"agentkeep pid={pid} host={host} "
    ended = [
        int(backend)
        for backend, _ in connection.execute(_TERMINATE, (prefix, pid, host)).fetchall()
    ]
    if ended:
        pids = ",".join(str(backend) for backend in ended)
        connection.execute(_AWAIT_EXIT.format(polls=max(1, wait_ms // 5), pids=pids))
    return ended


def join(connection: psycopg.Connection[Any], values: tuple[Any, ...]) -> None:
    """Insert this worker's row: ``(token, pid, host, application_name, address,
    lease_ms)``; the backend pid and the times are the server's."""
    connection.execute(_JOIN, values)


def heartbeat(
    connection: psycopg.Connection[Any], token: str, application_name: str, partitions: str
) -> bool:
    """Stamp ``token``'s row with the server's clock, its session and what it runs (JSON);
    False if the row is gone (another worker reaped it)."""
    cursor = connection.execute(_HEARTBEAT, (partitions, application_name, token))
    return cursor.rowcount > 0


def leave(connection: psycopg.Connection[Any], token: str) -> None:
    """Delete ``token``'s row (a graceful leave)."""
    connection.execute(_LEAVE, (token,))
