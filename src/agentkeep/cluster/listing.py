"""Who serves a store: its members and the partition locks, as ``agentkeep workers`` shows.

Read on a read-only session of its own; takes no lock and writes nothing. A store no worker
ever joined (no ``agentkeep_workers`` table yet) has no members.
"""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg

from agentkeep.cluster import membership
from agentkeep.persistence.postgres.connection import connect, parse_url

__all__ = ["MemberView", "Membership", "read_membership"]


class MemberView(msgspec.Struct, frozen=True, kw_only=True):
    """One member as ``agentkeep workers`` shows it (times in ms since the epoch)."""

    token: str
    pid: int
    host: str
    address: str | None
    started_ms: int
    heartbeat_age_ms: int
    lease_ms: int
    #: Connected and heartbeating within its lease: counted by the others.
    live: bool
    #: Partition index -> since when it runs it (its own account).
    partitions: dict[int, int]


class Membership(msgspec.Struct, frozen=True, kw_only=True):
    """The store's members, oldest first, and who holds each held partition lock."""

    store: str
    now_ms: int
    workers: list[MemberView]
    #: Partition index -> the member token whose process holds its lock ("" if none does).
    locks: dict[int, str]


def read_membership(database: str) -> Membership:
    """Read the members of the store at ``database`` (a ``postgresql://`` URL).

    Raises:
        InvalidConfigError: not a PostgreSQL URL.
        psycopg.OperationalError: the server cannot be reached.
    """
    target = parse_url(database)
    with connect(target, name="agentkeep workers", read_only=True) as connection:
        now = _now(connection)
        exists = connection.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f'"{target.schema}".agentkeep_workers',)
        ).fetchone()
        rows = membership.read_workers(connection) if exists and exists[0] else []
        holders = membership.partition_holders(connection)
    by_process = {(row.pid, row.host): row.token for row in rows}
    locks = {
        index: by_process.get(holder.process or (0, ""), "")
        for index, holder in sorted(holders.items())
    }
    workers = [
        MemberView(
            token=row.token,
            pid=row.pid,
            host=row.host,
            address=row.address,
            started_ms=row.started_ms,
            heartbeat_age_ms=row.now_ms - row.heartbeat_ms,
            lease_ms=row.lease_ms,
            live=row.live,
            partitions=dict(sorted(row.partitions.items())),
        )
        for row in rows
    ]
    return Membership(store=target.display, now_ms=now, workers=workers, locks=locks)


def _now(connection: psycopg.Connection[Any]) -> int:
    row = connection.execute(f"SELECT {membership.NOW_MS}").fetchone()
    assert row is not None
    return int(row[0])
