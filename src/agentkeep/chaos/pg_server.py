"""The server side of :mod:`agentkeep.chaos.pg_server_faults`: a cluster the campaign may
stop and start, finding a worker's writer session, and the write log stamped by owner.

The write log: a statement trigger on every table of the store's schema appends the writing
session's ``application_name`` (agentkeep's carries the owner's token ``w=…``) to
``chaos_write_log``; :func:`judge_write_log` checks that each owner's writes form one block.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from agentkeep.chaos.backend import server_url
from agentkeep.chaos.invariants import INVARIANTS

WRITER_WAIT_SECONDS = 30.0

INVARIANTS.update(
    {
        "O1": "no write after ownership was lost: each owner's writes form one block",
        "O2": "one owner at a time: a thief that won finds no session of the worker",
    }
)

_WRITE_LOG = """
CREATE TABLE IF NOT EXISTS chaos_write_log (
    n BIGSERIAL PRIMARY KEY, app TEXT NOT NULL, tbl TEXT NOT NULL);
CREATE OR REPLACE FUNCTION chaos_log_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_write_log (app, tbl)
    VALUES (current_setting('application_name'), TG_TABLE_NAME);
    RETURN NULL;
END $$;
"""


def cluster_script() -> ModuleType:
    """``scripts/postgres_cluster.py`` of this checkout (the restart fault drives its
    ``Cluster``). Raises ``RuntimeError`` when the package runs outside a checkout."""
    path = Path(__file__).resolve().parents[3] / "scripts" / "postgres_cluster.py"
    spec = importlib.util.spec_from_file_location("postgres_cluster", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise RuntimeError(f"the restart fault needs the project's {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class OwnCluster:
    """A throwaway cluster the campaign may stop and start (started on first use)."""

    def __init__(self) -> None:
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._cluster: Any = None
        self.url = ""

    def start(self) -> str:
        """Start the cluster (made on first use, in a directory ``postgres`` can reach);
        returns its URL."""
        if self._cluster is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="pgfaults-", dir="/tmp")
            os.chmod(self._scratch.name, 0o755)
            script = cluster_script()
            self._cluster = script.Cluster(Path(self._scratch.name) / "cluster")
        self.url = str(self._cluster.start())
        return self.url

    def restart(self, pause: float) -> None:
        """Stop the server in ``immediate`` mode (a crash), stay down ``pause`` seconds, start
        it again on the same port and data."""
        self._cluster.stop(mode="immediate")
        time.sleep(pause)  # the outage itself: how long the server stays away
        self.start()

    def close(self) -> None:
        """Stop the cluster (if any) and remove its directory; idempotent."""
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.stop()
        if self._scratch is not None:
            self._scratch.cleanup()
        self._cluster = self._scratch = None


def admin(url: str) -> Any:
    """An autocommit psycopg connection to ``url``'s server (its schema left out)."""
    import psycopg

    return psycopg.connect(server_url(url), autocommit=True, connect_timeout=10)


def writer_backend(url: str, child_pid: int) -> int | None:
    """The backend of ``child_pid``'s writer: the session holding an advisory lock whose
    ``application_name`` names that process."""
    with admin(url) as session:
        row = session.execute(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE %s",
            (f"agentkeep pid={child_pid} %",),
        ).fetchone()
    return int(row[0]) if row else None


def wait_for_writer(url: str, child: subprocess.Popen[str]) -> int | None:
    """The backend pid of ``child``'s writer once it holds the lock; None if ``child`` ended
    or no writer appeared within ``WRITER_WAIT_SECONDS``."""
    deadline = time.monotonic() + WRITER_WAIT_SECONDS
    while time.monotonic() < deadline and child.poll() is None:
        with contextlib.suppress(Exception):
            backend = writer_backend(url, child.pid)
            if backend is not None:
                return backend
        time.sleep(0.02)  # polling the server's view: no event to wait on across processes
    return None


def install_write_log(url: str) -> None:
    """The write log and its statement triggers on every table of the schema (idempotent)."""
    import psycopg
    from psycopg import sql

    schema = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["schema"]
    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        session.execute("SET lock_timeout = '5s'")
        session.execute(_WRITE_LOG)
        tables = session.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE' AND table_name NOT IN "
            "('chaos_write_log', 'agentkeep_owner', 'schema_migrations')",
            (schema,),
        ).fetchall()
        for (table,) in tables:
            name = sql.Identifier(table)
            with contextlib.suppress(psycopg.errors.DuplicateObject):
                session.execute(
                    sql.SQL(
                        "CREATE TRIGGER chaos_log AFTER INSERT OR UPDATE OR DELETE ON {} "
                        "FOR EACH STATEMENT EXECUTE FUNCTION chaos_log_write()"
                    ).format(name)
                )


def write_log(url: str) -> list[str]:
    """The ``application_name`` of every logged write to ``url``'s schema, in commit order
    (empty when the log was never installed)."""
    from psycopg import sql

    schema = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["schema"]
    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        try:
            rows = session.execute("SELECT app FROM chaos_write_log ORDER BY n").fetchall()
        except Exception:
            return []
    return [str(app) for (app,) in rows]


def judge_write_log(apps: list[str]) -> list[str]:
    """``O1``: each owner's writes form one block; a token writing again after another
    token's write wrote without owning the store."""
    tokens = [owner_token(app) for app in apps]
    seen: set[str] = set()
    problems: list[str] = []
    previous: str | None = None
    for index, token in enumerate(tokens):
        if token != previous and token in seen:
            problems.append(
                f"O1: owner {token} wrote again (write #{index + 1}) after owner {previous} "
                "had written: a write after ownership was lost"
            )
        seen.add(token)
        previous = token
    return problems


def owner_token(app: str) -> str:
    """The owner token ``w=…`` of an agentkeep session's ``application_name``."""
    for part in app.split():
        if part.startswith("w="):
            return part[2:]
    return app


__all__ = [
    "OwnCluster",
    "admin",
    "install_write_log",
    "judge_write_log",
    "owner_token",
    "wait_for_writer",
    "write_log",
    "writer_backend",
]
