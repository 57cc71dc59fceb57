"""Who runs what, for a worker's front: the membership read on a session of its own.

A worker's REST front forwards a request to the worker running its partition; it finds that
worker's address in ``agentkeep_workers`` (each member's own account of its partitions)
through a :class:`Directory`. The session is opened at the first read and again after a
failure; the directory never writes.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from agentkeep.cluster import membership
from agentkeep.persistence.postgres.connection import parse_url

__all__ = ["Directory"]


class Directory:
    """Reads ``agentkeep_workers`` of the store at ``database`` (thread-safe, blocking)."""

    def __init__(self, database: str, *, lease_ms: int = 9_000) -> None:
        self.target = parse_url(database)
        self._lease_ms = lease_ms
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[Any] | None = None

    def workers(self) -> list[membership.WorkerRow]:
        """Every member row now (see :func:`~agentkeep.cluster.membership.read_workers`).

        Raises:
            psycopg.Error: the server could not be read (the next call reconnects).
        """
        with self._lock:
            connection = self._connection
            if connection is None or connection.broken:
                if connection is not None:
                    connection.close()
                connection = membership.connect(
                    self.target, "agentkeep directory", lease_ms=self._lease_ms
                )
                self._connection = connection
            try:
                return membership.read_workers(connection)
            except psycopg.Error:
                connection.close()
                self._connection = None
                raise

    def close(self) -> None:
        """Close the session (a later read opens another)."""
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
