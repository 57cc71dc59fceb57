"""Which store a chaos campaign runs on: SQLite in its state directory, or PostgreSQL.

``CHAOS_DATABASE=postgresql://…`` (or ``python -m agentkeep.chaos --database URL``, ``agentkeep
chaos run --database URL``) runs every campaign that is not SQLite by nature on that server.
Each seed gets a **fresh schema of its own** (``chaos_`` and 16 hex digits), created empty
before the seed and dropped (``CASCADE``) after it, so seeds never see each other's rows and a
failed seed leaves nothing behind. Without a URL the campaigns run on SQLite, as always.

A suite that is SQLite by nature (the fault-injecting VFS, power-loss cuts of the file) names
the reason in :data:`SQLITE_ONLY` and is skipped on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: The environment variable naming the server the campaigns run on (unset: SQLite).
DATABASE_ENV = "CHAOS_DATABASE"

#: Suites that are SQLite by nature, with the reason they are skipped on PostgreSQL.
SQLITE_ONLY: dict[str, str] = {
    "power_loss": "power cuts of the database file through SQLite's fault-injecting VFS",
}

_override: list[str | None] = []


def chaos_database() -> str | None:
    """The server URL the campaigns run on: the innermost :func:`use_database`, else
    ``CHAOS_DATABASE``, else None (SQLite)."""
    if _override:
        return _override[-1]
    return os.environ.get(DATABASE_ENV) or None


@contextlib.contextmanager
def use_database(url: str | None) -> Iterator[None]:
    """Run the campaigns inside on ``url`` (None: SQLite), whatever the environment says."""
    _override.append(url)
    try:
        yield
    finally:
        _override.pop()


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``schema=NAME`` in its query (replacing one already there)."""
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


def server_url(url: str) -> str:
    """``url`` without its ``schema`` parameter: what libpq itself accepts."""
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextlib.contextmanager
def fresh_database(database: str | None = None) -> Iterator[str | None]:
    """A fresh empty schema on ``database`` (default :func:`chaos_database`), dropped on exit;
    yields its URL. Yields None (SQLite) when no server is selected."""
    url = database if database is not None else chaos_database()
    if url is None:
        yield None
        return
    import psycopg
    from psycopg import sql

    schema = f"chaos_{uuid.uuid4().hex[:16]}"
    name = sql.Identifier(schema)
    with psycopg.connect(server_url(url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(name))
    try:
        yield with_schema(url, schema)
    finally:
        # A server a campaign stopped keeps the schema: the cluster goes with it.
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(server_url(url), autocommit=True, connect_timeout=10) as admin,
        ):
            admin.execute("SET lock_timeout = '20s'")
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(name))


__all__ = [
    "DATABASE_ENV",
    "SQLITE_ONLY",
    "chaos_database",
    "fresh_database",
    "server_url",
    "use_database",
    "with_schema",
]
