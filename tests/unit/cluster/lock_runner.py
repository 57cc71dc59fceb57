"""A partition runner for the coordinator's tests: the partition's real advisory lock.

What the partition's system does about ownership, and nothing else: ``open`` connects a
session of its own named as agentkeep's sessions are (``agentkeep pid=<pid> host=<host>
w=<token>``) and takes ``pg_try_advisory_lock(schema oid, partition)`` (the two-int form) on
it, refusing with ``StoreLockedError`` naming the holder when another session has it;
``shutdown`` releases it by closing the session; ``lost`` says why once that session is gone
(terminated, its server restarted). So lock conflicts, a process's death and a terminated
backend are the server's, not simulated.

Also the child worker's runner (``worker_child.py`` imports it by path).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from typing import Any

import psycopg

from agentkeep.errors import StoreLockedError
from agentkeep.persistence.postgres.connection import parse_url

_HOLDER = """
SELECT a.pid, a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.classid = %s::oid AND l.objid = %s::oid
"""


class LockHandle:
    def __init__(self, runner: LockRunner, index: int, connection: psycopg.Connection[Any]):
        self.runner = runner
        self.index = index
        self.connection = connection
        self._lock = threading.Lock()
        self._lost: str | None = None
        self.shut = threading.Event()

    @property
    def lost(self) -> str | None:
        with self._lock:
            if self._lost is None and not self.shut.is_set():
                try:
                    self.connection.execute("SELECT 1")
                except psycopg.Error as exc:
                    self._lost = f"session ended: {exc!r}"
            return self._lost

    def shutdown(self) -> None:
        with self._lock:
            self.shut.set()
            self.connection.close()
        self.runner.closed(self.index)


class LockRunner:
    """Opens partitions by taking their advisory locks (see the module)."""

    def __init__(self, url: str) -> None:
        self.target = parse_url(url)
        self.host = socket.gethostname()[:30]
        self._lock = threading.Lock()
        self.opened: list[int] = []
        self.running: set[int] = set()
        self._oid: int | None = None

    def open(self, index: int, count: int) -> LockHandle:
        assert 0 <= index < count
        name = f"agentkeep pid={os.getpid()} host={self.host} w={uuid.uuid4().hex[:12]}"
        connection = psycopg.connect(
            self.target.conninfo, autocommit=True, application_name=name[:63]
        )
        try:
            row = connection.execute(
                "SELECT oid::bigint FROM pg_namespace WHERE nspname = %s", (self.target.schema,)
            ).fetchone()
            assert row is not None
            oid = int(row[0])
            got = connection.execute(
                "SELECT pg_try_advisory_lock(%s::int, %s)", (oid, index)
            ).fetchone()
            if got is None or not got[0]:
                holder = connection.execute(_HOLDER, (oid, index)).fetchone()
                raise StoreLockedError(
                    f"{self.target.display} partition {index}",
                    None,
                    holder=None if holder is None else f"backend {holder[0]} {holder[1]}",
                )
        except BaseException:
            connection.close()
            raise
        with self._lock:
            self.opened.append(index)
            self.running.add(index)
        return LockHandle(self, index, connection)

    def closed(self, index: int) -> None:
        with self._lock:
            self.running.discard(index)
