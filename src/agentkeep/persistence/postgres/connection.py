"""Reaching a PostgreSQL server: the store's URL, and a connection shaped for the executor.

A store on PostgreSQL is named by a URL, ``postgresql://user:password@host:port/database``,
plus an optional ``schema`` query parameter (default :data:`DEFAULT_SCHEMA`): a store is one
schema of one database, so several stores share a server (or a database) side by side; and
an optional ``readers`` (default :data:`DEFAULT_MAX_READERS`): how many reader sessions the
store opens at most. Both are taken out before libpq sees the URL (libpq refuses parameters
it does not know); every other parameter (``sslmode``, ``connect_timeout`` …) is libpq's.

Every connection is in psycopg's autocommit mode: the writer spells its own ``BEGIN`` /
``SAVEPOINT`` / ``COMMIT`` exactly as on SQLite, so nothing begins a transaction behind its
back. ``synchronous_commit`` is ``on`` for every connection (a COMMIT returns once its WAL
record is flushed on the server), whatever the server's default, and the search path is the
store's schema alone.

:class:`PostgresConnection` gives the executor (:class:`~agentkeep.persistence.codec.Statements`)
what it uses of an apsw connection: a reusable cursor, ``changes()``, ``execute``.
"""

from __future__ import annotations

import os
import re
import select
import socket
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec
import psycopg

from agentkeep.errors import InvalidConfigError
from agentkeep.persistence.postgres.batch import Batch, PreparedStatements, Result
from agentkeep.persistence.postgres.dialect import WRITER_BEGIN, XACT_ID, named_parameters

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresConnection",
    "PostgresTarget",
    "is_postgres_url",
    "parse_url",
]

DEFAULT_SCHEMA: Final = "agentkeep"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(database: str | None) -> bool:
    """True if ``database`` names a PostgreSQL server (``postgresql://`` or ``postgres://``)."""
    return database is not None and urlsplit(database).scheme in _SCHEMES


#: How many reader sessions one store opens at most, unless its URL says (``readers=N``).
DEFAULT_MAX_READERS: Final = 8


class PostgresTarget(msgspec.Struct, frozen=True, kw_only=True):
    """Where a store lives: the libpq URL (without ``schema`` and ``readers``), the schema's
    name, and how many reader sessions the store may open at once."""

    conninfo: str
    schema: str
    readers: int = DEFAULT_MAX_READERS

    @property
    def display(self) -> str:
        """The URL without its password, for messages and logs."""
        parts = urlsplit(self.conninfo)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = urlencode([*parse_qsl(parts.query), ("schema", self.schema)])
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def parse_url(url: str) -> PostgresTarget:
    """Split ``url`` into libpq's URL and the store's schema (see the module).

    Raises:
        InvalidConfigError: not a ``postgresql://`` URL, or the schema is not a plain
            lower-case identifier.
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise InvalidConfigError(f"database {url!r} is not a postgresql:// URL")
    schema = DEFAULT_SCHEMA
    readers = DEFAULT_MAX_READERS
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        elif key == "readers":
            if not value.isdigit() or not 1 <= int(value) <= 1000:
                raise InvalidConfigError(
                    f"readers {value!r}: how many reader sessions the store may open at "
                    "once, a whole number from 1 to 1000"
                )
            readers = int(value)
        else:
            kept.append((key, value))
    if not _SCHEMA_NAME.match(schema):
        raise InvalidConfigError(
            f"schema {schema!r}: use a lower-case identifier (letters, digits, _; at most 63)"
        )
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
    return PostgresTarget(conninfo=conninfo, schema=schema, readers=readers)


def application_name(token: str) -> str:
    """What this process's connections call themselves in ``pg_stat_activity``: the
    process id, the host and the writer's token (how a writer recognises its own old
    session after a reconnect). At most 63 bytes, PostgreSQL's limit."""
    host = socket.gethostname()[:30]
    return f"agentkeep pid={os.getpid()} host={host} w={token}"[:63]


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def connect(
    target: PostgresTarget, *, name: str, read_only: bool = False
) -> psycopg.Connection[Any]:
    """A new autocommit connection to ``target``'s database with its schema as search path.

    Raises:
        psycopg.OperationalError: the server cannot be reached or refused the login.
    """
    options = f"-c search_path={target.schema} -c synchronous_commit=on"
    if read_only:
        options += " -c default_transaction_read_only=on"
    return psycopg.connect(
        target.conninfo,
        autocommit=True,
        application_name=name,
        options=options,
        # A server that vanished (a cut cable, not a refused socket) is noticed in ~20 s.
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=2,
    )


_IN_TRANSACTION = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


def _bind(sql: str, params: Sequence[Any]) -> Sequence[Any] | Mapping[str, Any]:
    if params and named_parameters(sql):
        return {f"p{index}": value for index, value in enumerate(params, 1)}
    return params


class PostgresCursor:
    """One reusable psycopg cursor with the apsw cursor's surface the statements use; in a
    batch, its statements go through the connection's :class:`~.batch.Batch` instead."""

    def __init__(self, owner: PostgresConnection) -> None:
        self._owner = owner
        self._cursor = owner.raw.cursor()
        #: What the last statement run in a batch returned (None: read the psycopg cursor).
        self._result: Result | None = None
        self._next = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PostgresCursor:
        """Run ``sql`` and wait for its result (in a batch: with everything sent before it)."""
        owner = self._owner
        batch = owner.batch
        if batch is not None:
            batch.send(sql, params)
            result = self._result = batch.sync()
            self._next = 0
            owner.sent = False
            owner.rowcount = result.rowcount
            return self
        self._result = None
        cursor = self._cursor
        if sql is WRITER_BEGIN:
            cursor.execute(sql)  # the simple protocol: two results, the last one read
            cursor.nextset()
            row = cursor.fetchone()
            owner.xid = None if row is None else str(row[0])
        else:
            cursor.execute(sql, _bind(sql, params))
        owner.rowcount = cursor.rowcount
        return self

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Send ``sql`` without waiting for its result (in a batch; otherwise :meth:`execute`).

        Its error, if any, is raised by the next statement that waits, or by
        :meth:`PostgresConnection.end_batch`; the statements sent after it up to there are
        skipped by the server. Its row count is read only by ``changes()``."""
        owner = self._owner
        batch = owner.batch
        if batch is None:
            self.execute(sql, params)
            return
        if sql is WRITER_BEGIN:
            owner.xid = None
            batch.send("BEGIN")
            batch.ask(XACT_ID, owner.learn_xid)
        else:
            batch.send(sql, params)
        owner.sent = True

    def fetchall(self) -> list[tuple[Any, ...]]:
        result = self._result
        if result is not None:
            rows = [] if result.rows is None else result.rows[self._next :]
            self._next += len(rows)
            return rows
        if self._cursor.description is None:
            return []
        return self._cursor.fetchall()

    def fetchone(self) -> tuple[Any, ...] | None:
        result = self._result
        if result is not None:
            if result.rows is None or self._next >= len(result.rows):
                return None
            self._next += 1
            return result.rows[self._next - 1]
        if self._cursor.description is None:
            return None
        return self._cursor.fetchone()

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def close(self, force: bool = False) -> None:
        del force
        self._result = None
        self._cursor.close()


class PostgresConnection:
    """A psycopg connection as the executor sees one (see the module).

    ``rowcount`` is the row count of the last statement a cursor of it ran (``changes()``).
    """

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        # psycopg prepares nothing of its own on this connection: its manager answers a
        # ROLLBACK (or DROP, ALTER) by deallocating every prepared statement of the session,
        # the batch's included (which then fail: "prepared statement … does not exist").
        # The batch prepares what is worth preparing; what runs outside one is rare.
        raw.prepare_threshold = None
        self.raw = raw
        self.rowcount = 0
        #: The open batch (libpq's pipeline mode, :mod:`.batch`), None outside one.
        self.batch: Batch | None = None
        #: True while a statement was sent and not yet waited for (``changes``).
        self.sent = False
        #: The id of the transaction the writer's ``BEGIN`` opened, once the server said it
        #: (None until then: a ``BEGIN`` sent in a batch asks for it, see :meth:`await_xid`).
        self.xid: str | None = None
        self._prepared = PreparedStatements(raw)

    def begin_batch(self) -> None:
        """Enter pipeline mode (no round trip): :meth:`PostgresCursor.send` then sends a
        statement without waiting for it; :meth:`PostgresCursor.execute` still waits, for
        everything sent before it too."""
        if self.batch is None:
            self.batch = Batch(self.raw, self._prepared)

    def end_batch(self) -> None:
        """Leave pipeline mode: wait for every statement sent (one round trip) and raise the
        first one's error, if any. Pipeline mode is left even when it raises."""
        batch, self.batch = self.batch, None
        sent, self.sent = self.sent, False
        if batch is not None:
            result = batch.end()
            if sent:
                self.rowcount = result.rowcount

    def abandon_batch(self) -> None:
        """Leave pipeline mode after a failure: what was sent runs (the caller rolls it
        back); its errors, and a dropped connection's, are ignored here (the rollback or the
        next statement sees them)."""
        batch, self.batch = self.batch, None
        self.sent = False
        if batch is not None:
            batch.abandon()

    def learn_xid(self, result: Result) -> None:
        """Keep the transaction id a ``BEGIN`` sent in a batch asked for."""
        rows = result.rows
        self.xid = None if not rows else str(rows[0][0])

    def await_xid(self) -> str | None:
        """The open transaction's id, read now if the batch's waits have not brought it yet
        (waiting for it only if it has not arrived: the server was asked to send it at once).

        Raises:
            psycopg.Error: the ``BEGIN`` (or a statement sent before it) failed, or the
                connection dropped."""
        if self.xid is None and self.batch is not None:
            self.batch.answer()
        return self.xid

    def quiet(self) -> bool:
        """True if nothing arrived on this idle connection since its last answer. The
        server writes to an idle session only to end it (a terminated backend's last
        message, a restart's closed socket) or with a notice: either way, False."""
        if self.broken:
            return False
        poller = select.poll()
        poller.register(self.raw.pgconn.socket, select.POLLIN)
        return not poller.poll(0)

    def cursor(self) -> PostgresCursor:
        return PostgresCursor(self)

    def changes(self) -> int:
        """Rows changed by the last statement (one only sent is waited for first)."""
        sent, self.sent = self.sent, False
        if sent and self.batch is not None:
            self.rowcount = self.batch.sync().rowcount
        return max(self.rowcount, 0)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> PostgresCursor:
        return self.cursor().execute(sql, () if params is None else params)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed and not yet rolled back)."""
        status = self.raw.info.transaction_status
        return status in (
            psycopg.pq.TransactionStatus.INTRANS,
            psycopg.pq.TransactionStatus.INERROR,
        )

    def get_autocommit(self) -> bool:
        """apsw's name: True outside any transaction (or once the connection is gone)."""
        if self.raw.closed:
            return True
        return not self.in_transaction

    @property
    def broken(self) -> bool:
        """True once the connection was lost (psycopg noticed) or closed."""
        return self.raw.closed or self.raw.broken

    def close(self) -> None:
        """Close the connection, leaving its batch first (a reader's last ``ROLLBACK`` is
        collected, and nothing is left to finish once it is closed)."""
        if not self.raw.closed:
            self.abandon_batch()
        self.raw.close()
