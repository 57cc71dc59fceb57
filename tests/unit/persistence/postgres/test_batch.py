"""The batch (libpq's pipeline mode, driven directly): what psycopg's pipeline did for the
writer and the readers, it still does — placeholders, parameter types, rows decoded, the
first error raised at the wait as psycopg's class for its SQLSTATE, prepared statements
the server refused forgotten, a dropped connection an ``OperationalError``."""

from __future__ import annotations

import os
import resource
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from agentkeep.persistence.postgres.batch import Batch, PreparedStatements, numbered
from agentkeep.persistence.postgres.connection import PostgresConnection
from agentkeep.persistence.postgres.readers import read_snapshot


@pytest.fixture
def raw(server: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to a fresh schema holding one table of every type the store uses."""
    schema = f"batch_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        connection = psycopg.connect(server, autocommit=True, options=f"-c search_path={schema}")
        connection.execute(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, name TEXT, body BYTEA, flag BOOLEAN, x FLOAT8)"
        )
        try:
            yield connection
        finally:
            connection.close()
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_placeholders_become_the_servers_numbers() -> None:
    assert numbered("SELECT %s, %s") == (b"SELECT $1, $2", 2)
    assert numbered("SELECT %(p2)s + %(p1)s, %(p2)s") == (b"SELECT $2 + $1, $2", 2)
    assert numbered("SELECT 'a%%' || %s") == (b"SELECT 'a%' || $1", 1)
    assert numbered("COMMIT") == (b"COMMIT", 0)


def test_writes_and_reads_round_trip_every_type(raw: psycopg.Connection[Any]) -> None:
    connection = PostgresConnection(raw)
    connection.begin_batch()
    cursor = connection.cursor()
    cursor.send("BEGIN")
    big = 2**40
    cursor.send("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", (1, "één", b"\x00\xff", True, 1.5))
    cursor.send("INSERT INTO t VALUES (%s, %s, %s, %s, %s)", (big, None, None, False, None))
    rows = cursor.execute("SELECT k, name, body, flag, x FROM t ORDER BY k").fetchall()
    assert rows == [(1, "één", b"\x00\xff", True, 1.5), (big, None, None, False, None)]
    assert connection.rowcount == 2
    assert cursor.execute("SELECT name FROM t WHERE k = %s", (1,)).fetchone() == ("één",)
    assert cursor.fetchone() is None
    cursor.send("UPDATE t SET flag = %s WHERE k >= %s", (True, 0))
    assert connection.changes() == 2
    cursor.send("COMMIT")
    connection.end_batch()
    assert raw.execute("SELECT count(*) FROM t WHERE flag").fetchone() == (2,)
    assert not connection.in_transaction


def test_the_first_error_is_raised_at_the_wait_as_its_sqlstates_class(
    raw: psycopg.Connection[Any],
) -> None:
    connection = PostgresConnection(raw)
    connection.begin_batch()
    cursor = connection.cursor()
    cursor.send("BEGIN")
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))  # refused: the key is taken
    cursor.send("INSERT INTO t (k) VALUES (%s)", (2,))  # skipped by the server
    with pytest.raises(psycopg.errors.UniqueViolation):
        connection.end_batch()
    assert connection.batch is None
    assert connection.in_transaction  # failed, as a statement failing alone leaves it
    raw.execute("ROLLBACK")
    assert raw.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_a_prepare_the_server_skipped_is_prepared_again(raw: psycopg.Connection[Any]) -> None:
    connection = PostgresConnection(raw)
    cursor = connection.cursor()
    connection.begin_batch()
    cursor.send("BEGIN")
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))  # fails: what follows is skipped
    cursor.send("INSERT INTO t (k, name) VALUES (%s, %s)", (3, "first use"))  # its prepare too
    with pytest.raises(psycopg.errors.UniqueViolation):
        connection.end_batch()
    raw.execute("ROLLBACK")
    connection.begin_batch()
    cursor.send("INSERT INTO t (k, name) VALUES (%s, %s)", (3, "second use"))
    connection.end_batch()
    assert raw.execute("SELECT name FROM t").fetchall() == [("second use",)]


def test_a_wrong_number_of_parameters_is_named(raw: psycopg.Connection[Any]) -> None:
    batch = Batch(raw, PreparedStatements(raw))
    with pytest.raises(psycopg.ProgrammingError, match="takes 2 parameters, 1 were given"):
        batch.send("SELECT %s, %s", (1,))
    with pytest.raises(psycopg.ProgrammingError, match="takes 0 parameters, 1 were given"):
        batch.send("SELECT 1", (1,))
    batch.abandon()
    assert raw.execute("SELECT 1").fetchone() == (1,)  # out of pipeline mode, usable


def test_a_connection_dropped_mid_batch_raises_and_is_broken(
    raw: psycopg.Connection[Any], server: str
) -> None:
    connection = PostgresConnection(raw)
    pid = raw.info.backend_pid
    connection.begin_batch()
    cursor = connection.cursor()
    cursor.send("BEGIN")
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    cursor.send("SELECT pg_sleep(0)")
    with pytest.raises(psycopg.OperationalError):
        connection.end_batch()
    assert connection.broken
    assert connection.batch is None
    connection.abandon_batch()  # nothing left to leave: a no-op


def test_a_rollback_outside_a_batch_keeps_the_batchs_statements(
    raw: psycopg.Connection[Any],
) -> None:
    """psycopg answers a ROLLBACK by deallocating every prepared statement of the session
    once it prepared one of its own (a statement run five times): the connection turns its
    preparing off, so the batch's survive."""
    connection = PostgresConnection(raw)
    cursor = connection.cursor()
    connection.begin_batch()
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))
    connection.end_batch()
    for _ in range(6):  # psycopg would prepare this one from its fifth run on
        connection.execute("SELECT k FROM t WHERE k = %s", (1,))
    connection.execute("BEGIN")
    connection.execute("ROLLBACK")  # psycopg would deallocate everything at its next run
    connection.execute("SELECT k FROM t WHERE k = %s", (1,))
    connection.begin_batch()
    cursor.send("INSERT INTO t (k) VALUES (%s)", (2,))
    connection.end_batch()
    assert raw.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_statements_whose_names_the_session_lost_are_prepared_again(
    raw: psycopg.Connection[Any],
) -> None:
    connection = PostgresConnection(raw)
    cursor = connection.cursor()
    connection.begin_batch()
    cursor.send("INSERT INTO t (k) VALUES (%s)", (1,))
    connection.end_batch()
    raw.execute("DEALLOCATE ALL")
    connection.begin_batch()
    cursor.send("INSERT INTO t (k) VALUES (%s)", (2,))
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        connection.end_batch()  # that statement fails, as any refused statement does
    connection.begin_batch()
    cursor.send("INSERT INTO t (k) VALUES (%s)", (2,))
    connection.end_batch()
    assert raw.execute("SELECT k FROM t ORDER BY k").fetchall() == [(1,), (2,)]


class _CtrlC:
    """libpq's connection, with a Ctrl-C landing just after the call named ``at`` (as
    Python raises one: between any two bytecodes of the main thread)."""

    def __init__(self, pgconn: Any, at: str) -> None:
        self._pgconn = pgconn
        self._at = at

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._pgconn, name)
        if name != self._at:
            return method

        def interrupted(*args: Any, **kwargs: Any) -> Any:
            method(*args, **kwargs)
            raise KeyboardInterrupt

        return interrupted


@pytest.mark.parametrize("at", ["send_query_prepared", "send_prepare", "get_result"])
def test_a_read_torn_by_ctrl_c_closes_its_connection_and_raises_the_ctrl_c(
    raw: psycopg.Connection[Any], at: str
) -> None:
    """A Ctrl-C between a message put on the wire and the batch's note of it (or amid its
    results) leaves the batch unable to line results up with statements: the read raises
    the KeyboardInterrupt itself (``session events --follow`` ends cleanly on it), not a
    confusion of the batch's, and the connection is closed, to be replaced, not misread.
    (CI once saw ``zip() argument 2 is longer than argument 1`` there instead.)"""
    connection = PostgresConnection(raw)
    connection.begin_batch()
    assert connection.batch is not None
    connection.batch._pgconn = _CtrlC(raw.pgconn, at)
    with pytest.raises(KeyboardInterrupt):
        read_snapshot(connection, lambda tx: tx.sql.query("SELECT k FROM t WHERE k = ?", (1,)))
    assert connection.broken
    assert connection.batch is None


def test_a_socket_numbered_past_selects_limit_is_waited_on(server: str) -> None:
    """A daemon's descriptors can pass 1024 (``select``'s limit): the batch waits with
    ``poll``, so a connection whose socket is numbered past it still works."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"this process may open only {hard} descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.dup(0))
        with psycopg.connect(server, autocommit=True) as raw:
            assert raw.pgconn.socket > 1024
            connection = PostgresConnection(raw)
            connection.begin_batch()
            row = connection.cursor().execute("SELECT %s::int + 1", (41,)).fetchone()
            connection.end_batch()
            assert row == (42,)
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
