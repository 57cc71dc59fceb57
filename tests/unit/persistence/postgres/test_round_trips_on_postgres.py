"""Round trips on PostgreSQL: the writer sends a work item's statements whose results it does
not read in one batch (its SAVEPOINT and RELEASE with them; a lone item's COMMIT with them),
and a reader's one-statement read is one round trip; an item whose sent statement fails
still fails alone, and is not committed.

Round trips are counted on the wire: libpq's trace of the connection, one per message that
makes the client wait for the server (``Sync`` ends an extended-protocol exchange or a
batch, ``Query`` is a simple-protocol statement)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentkeep.errors import StoreConstraintError
from agentkeep.persistence import Store, Transaction
from agentkeep.persistence.postgres.connection import PostgresConnection
from agentkeep.persistence.postgres.store import PostgresStore

TIMEOUT = 30.0


@contextmanager
def wire(connection: PostgresConnection, tmp_path: Path) -> Iterator[list[list[str]]]:
    """The messages ``connection`` sends (``F``) and reads (``B``) inside the block, in
    order (filled on exit): each its trace line's fields (direction, length, message…)."""
    path = tmp_path / f"trace-{id(connection)}.txt"
    messages: list[list[str]] = []
    with path.open("w") as file:
        pgconn = connection.raw.pgconn
        pgconn.trace(file.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield messages
        finally:
            pgconn.untrace()
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 3:
            messages.append(fields)


@contextmanager
def round_trips(connection: PostgresConnection, tmp_path: Path) -> Iterator[list[str]]:
    """The waits ``connection`` makes for the server inside the block (filled on exit)."""
    waits: list[str] = []
    with wire(connection, tmp_path) as messages:
        yield waits
    for fields in messages:
        if fields[0] == "F" and fields[2].startswith(("Sync", "Query")):
            waits.append(fields[2])


def _writer_connection(store: Store) -> PostgresConnection:
    assert isinstance(store, PostgresStore)
    connection = store._pg.session.connection
    assert connection is not None
    return connection


def _three_writes(tx: Transaction) -> int:
    for n in range(3):
        tx.kv.write(f"k{n}", n)
    return 3


def test_a_lone_items_writes_nobody_reads_wait_once(store: Store, tmp_path: Path) -> None:
    store.transact(_three_writes)  # warm: every statement seen once
    with round_trips(_writer_connection(store), tmp_path) as waits:
        assert store.transact(_three_writes) == 3
    # One batch: BEGIN (its transaction id asked for at once), three writes, the COMMIT.
    assert len(waits) == 1, waits
    assert store.read(lambda tx: [tx.kv.read(f"k{n}") for n in range(3)]) == [0, 1, 2]


def test_the_commit_is_sent_only_once_the_transaction_id_arrived(
    store: Store, tmp_path: Path
) -> None:
    """An unknown COMMIT outcome is looked up by the transaction's id, so the id must be
    known before the COMMIT leaves: asked for with the BEGIN (a Flush request makes the
    server send it at once), and read before the COMMIT is sent."""
    store.transact(_three_writes)  # warm
    with wire(_writer_connection(store), tmp_path) as messages:
        assert store.transact(_three_writes) == 3
    texts = [" ".join(fields[2:]) for fields in messages]
    flush = next(i for i, text in enumerate(texts) if text.startswith("Flush"))
    xid = next(i for i, text in enumerate(texts) if text.startswith("DataRow"))
    commit = next(i for i, text in enumerate(texts) if '"COMMIT"' in text)
    assert flush < xid < commit, texts
    assert messages[xid][0] == "B"


def _one_group(store: Store, works: list[Callable[[Transaction], Any]]) -> list[Any]:
    """Run ``works`` as one group (the writer held until all are queued); their outcomes."""
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    holder = threading.Thread(target=store.transact, args=(blocker,))
    holder.start()
    assert started.wait(TIMEOUT)
    outcomes: list[Any] = [None] * len(works)

    def submit(index: int) -> None:
        try:
            outcomes[index] = store.transact(works[index])
        except BaseException as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(works))]
    for index, thread in enumerate(threads):
        thread.start()
        assert store.handle.wait_for_queued(index + 1, timeout_seconds=TIMEOUT)
    release.set()
    for thread in [holder, *threads]:
        thread.join(TIMEOUT)
    return outcomes


def _writes(prefix: str) -> Callable[[Transaction], str]:
    def work(tx: Transaction) -> str:
        for n in range(3):
            tx.kv.write(f"{prefix}{n}", n)
        return prefix

    return work


def _sends_a_duplicate(tx: Transaction) -> None:
    tx.kv.write("dup0", 0)
    statements = tx._x.statements  # type: ignore[attr-defined]
    insert = "INSERT INTO kv (key, value_json) VALUES (?, ?)"
    statements.send(insert, ("dup1", "1"))
    statements.send(insert, ("dup1", "1"))  # fails, but only sent: nothing waits here
    tx.kv.write("dup2", 2)


def test_each_item_of_a_group_waits_once(store: Store, tmp_path: Path) -> None:
    _one_group(store, [_writes("w"), _writes("x")])  # warm
    with round_trips(_writer_connection(store), tmp_path) as waits:
        assert _one_group(store, [_writes("y"), _writes("z")]) == ["y", "z"]
    # The holder's lone item (one batch: BEGIN, its work, its COMMIT), then the group of
    # two: one batch per item (its SAVEPOINT, three writes, RELEASE; the first one's with the
    # BEGIN), the COMMIT.
    assert len(waits) == 1 + 3, waits


def test_a_sent_statement_that_fails_fails_its_item_alone(store: Store) -> None:
    outcomes = _one_group(store, [_writes("a"), _sends_a_duplicate, _writes("b")])
    assert outcomes[0] == "a"
    assert outcomes[2] == "b"
    # The item's own refusal (the sent statement's error is its cause), nobody else's.
    assert isinstance(outcomes[1], StoreConstraintError), outcomes[1]
    assert isinstance(outcomes[1].__cause__, psycopg.errors.UniqueViolation)
    keys = store.read(lambda tx: [key for key, _value in tx.kv.scan("")])
    assert keys == ["a0", "a1", "a2", "b0", "b1", "b2"]
    # The writer goes on.
    assert store.transact(_writes("c")) == "c"


def test_a_lone_item_whose_sent_statement_fails_is_not_committed(store: Store) -> None:
    before = store.statistics()
    with pytest.raises(StoreConstraintError) as refused:
        store.transact(_sends_a_duplicate)
    assert isinstance(refused.value.__cause__, psycopg.errors.UniqueViolation)
    after = store.statistics()
    assert after.commits == before.commits
    # Counted as the item's own failure (as before a COMMIT), not as a failed COMMIT.
    assert after.commit_errors == before.commit_errors
    assert after.failed_transactions == before.failed_transactions + 1
    assert store.read(lambda tx: tx.kv.scan("")) == []
    assert store.transact(_writes("c")) == "c"


def test_a_one_statement_read_is_one_round_trip(store: Store, tmp_path: Path) -> None:
    store.transact(lambda tx: tx.kv.write("k", 1))
    assert store.read(lambda tx: tx.kv.read("k")) == 1  # opens the reader connection
    assert isinstance(store, PostgresStore)
    (reader,) = store._pg.pg_readers._idle
    with round_trips(reader, tmp_path) as waits:
        for _ in range(3):
            assert store.read(lambda tx: tx.kv.read("k")) == 1
    # Each read: BEGIN sent with its SELECT, the ROLLBACK sent and collected by the next.
    assert len(waits) == 3, waits


def test_a_read_sees_one_snapshot_and_commits_made_before_it(store: Store) -> None:
    store.transact(lambda tx: tx.kv.write("k", 1))
    assert store.read(lambda tx: tx.kv.read("k")) == 1
    store.transact(lambda tx: tx.kv.write("k", 2))
    seen: list[Any] = []

    def twice(tx: Transaction) -> None:
        seen.append(tx.kv.read("k"))
        # A COMMIT between two statements of one read is not seen by the second.
        done = threading.Event()
        threading.Thread(
            target=lambda: (store.transact(lambda t: t.kv.write("k", 3)), done.set())
        ).start()
        assert done.wait(TIMEOUT)
        seen.append(tx.kv.read("k"))

    store.read(twice)
    assert seen == [2, 2]
    assert store.read(lambda tx: tx.kv.read("k")) == 3


def test_a_failed_read_leaves_its_connection_reusable(store: Store) -> None:
    store.transact(lambda tx: tx.kv.write("k", 1))

    def bad(tx: Transaction) -> None:
        tx.kv.read("k")
        tx._x.statements.execute("SELECT no_such_column FROM kv")  # type: ignore[attr-defined]

    with pytest.raises(psycopg.errors.UndefinedColumn):
        store.read(bad)
    assert store.read(lambda tx: tx.kv.read("k")) == 1
