"""Ledger wake-ups between processes on PostgreSQL (persistence/postgres/notifications.py).

A partition's writer sends one ``NOTIFY`` per session per work item that appended events,
delivered only if the transaction commits; a classic store sends none. A partition's
system that does not own a session hears the owner's commits through the process's one
listening session, which reconnects by itself when its backend is terminated (and then
wakes every watcher once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agentkeep as ak
from agentkeep.partitions import Partition
from agentkeep.persistence import Store
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.opening import open_store
from agentkeep.persistence.postgres import PostgresStore, parse_url
from agentkeep.persistence.postgres.notifications import (
    follow_key,
    ledger_channel,
    listener_of,
    notify_payload,
    parse_payload,
)
from agentkeep.persistence.postgres.ownership import lock_key
from agentkeep.types.records import AgentRow

DEADLINE = 30.0


class _BoomError(Exception):
    pass


def _oid(url: str) -> int:
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as connection:
        return lock_key(connection, target.schema) & 0xFFFFFFFF


@pytest.fixture
def listening(pg_url: str) -> Iterator[Callable[..., psycopg.Connection[Any]]]:
    """A LISTEN session of the test's own on partition 0's channel (after the store
    exists), following the partition as a worker does (its lock shared) unless told not."""
    opened: list[psycopg.Connection[Any]] = []

    def start(*, follow: bool = True) -> psycopg.Connection[Any]:
        connection = psycopg.connect(parse_url(pg_url).conninfo, autocommit=True)
        opened.append(connection)
        oid = _oid(pg_url)
        if follow:
            connection.execute("SELECT pg_advisory_lock_shared(%s)", (follow_key(oid, 0),))
        connection.execute(f"LISTEN {ledger_channel(oid, 0)}")
        return connection

    yield start
    for connection in opened:
        connection.close()


def _payloads_until(connection: psycopg.Connection[Any], last: str) -> list[str]:
    """Every payload received up to and including ``last`` (in commit order)."""
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while last not in seen:
        assert time.monotonic() < deadline, f"no {last!r} within {DEADLINE} s: {seen}"
        seen.extend(n.payload for n in connection.notifies(timeout=0.5))
    return seen


def _append(store: Store, events: dict[str, int], *, fail: bool = False) -> None:
    def work(tx: Transaction) -> None:
        for agent_id, count in events.items():
            for _ in range(count):
                tx.ledger.append(agent_id, "test.event", {"n": 1})
        if fail:
            raise _BoomError

    store.transact(work)


def _agents(store: Store, *ids: str) -> None:
    def work(tx: Transaction) -> None:
        for agent_id in ids:
            tx.agents.create(AgentRow(id=agent_id, config={}))

    store.transact(work)


def test_a_partitions_commit_notifies_once_per_session_and_a_rolled_back_one_never(
    tmp_path: Path, pg_url: str, listening: Callable[..., psycopg.Connection[Any]]
) -> None:
    with open_store(tmp_path, database=pg_url, partition=Partition(0, 1)) as store:
        _agents(store, "a", "b", "c")
        connection = listening()
        _append(store, {"a": 3, "b": 2})  # one transaction: one notification per session
        with pytest.raises(_BoomError):
            _append(store, {"c": 5}, fail=True)  # rolled back: nothing durable, no wake-up
        _append(store, {"a": 1})
        seen = _payloads_until(connection, notify_payload("a", 4))
    assert sorted(seen[:2]) == sorted([notify_payload("a", 3), notify_payload("b", 2)])
    assert seen[2:] == [notify_payload("a", 4)]
    assert [parse_payload(p) for p in seen if parse_payload(p) is None] == []
    assert "c" not in {agent for agent, _ in filter(None, map(parse_payload, seen))}


@pytest.mark.parametrize("partitioned", [False, True], ids=["classic", "unfollowed"])
def test_no_notification_from_a_classic_store_nor_for_a_partition_nobody_follows(
    tmp_path: Path,
    pg_url: str,
    listening: Callable[..., psycopg.Connection[Any]],
    partitioned: bool,
) -> None:
    partition = Partition(0, 1) if partitioned else None
    with open_store(tmp_path, database=pg_url, partition=partition) as store:
        _agents(store, "a")
        connection = listening(follow=False)  # hears the channel, holds no follower's lock
        _append(store, {"a": 3})
        # A marker sent after the store's commit arrives after anything that commit sent.
        with psycopg.connect(parse_url(pg_url).conninfo, autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, 'marker')", (ledger_channel(_oid(pg_url), 0),))
        assert _payloads_until(connection, "marker") == ["marker"]
        if not partitioned:
            assert listener_of(parse_url(pg_url)) is None  # and listens to nobody


def _open(home: Path, url: str, partition: Partition) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("demo", ak.DemoModel(), kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="demo",
        model="demo-1",
        database=url,
        partition=partition,
    )


@pytest.fixture
def pair(tmp_path: Path, pg_url: str) -> Iterator[tuple[ak.AgentSystem, ak.AgentSystem]]:
    first = _open(tmp_path / "w0", pg_url, Partition(0, 2))
    try:
        second = _open(tmp_path / "w1", pg_url, Partition(1, 2))
    except BaseException:
        first.close()
        raise
    try:
        yield first, second
    finally:
        second.close()
        first.close()


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(DEADLINE), f"no {what} within {DEADLINE} s"


def test_a_non_owner_hears_the_owners_commits_and_its_listener_reconnects(
    pair: tuple[ak.AgentSystem, ak.AgentSystem], pg_url: str
) -> None:
    first, second = pair
    agent = second.create()  # partition 1: only `second` commits its events
    store = first.internals.store
    assert isinstance(store, PostgresStore)
    listener = listener_of(parse_url(pg_url))
    assert listener is not None
    assert listener.attached == 2  # one per process, both stores
    assert listener.listening.wait(DEADLINE)
    assert listener.channels == frozenset()  # nobody follows another partition's session
    moved = threading.Event()
    unwatch = first.internals.surfaces.watch(agent.id, moved.set)
    try:
        # Following a session of partition 1 from partition 0's system: its channel is
        # heard from now on (once heard, its watchers are woken to read what came before).
        _until(lambda: listener.channels == frozenset({1}), "partition 1's channel")
        _wait(moved, "wake-up once the channel is heard")
        moved.clear()
        agent.send(ak.user("hello"))
        _wait(moved, "wake-up of the non-owner from the owner's commit")
        assert agent.wait_for_idle(timeout_seconds=DEADLINE)
        assert "turn.completed" in [e.type for e in first.events(agent.id)]
        # Its session terminated: the listener reconnects, wakes every watcher once (what
        # was announced meanwhile is lost), and the owner's next commits wake it again.
        moved.clear()
        before, pid = listener.reconnects, listener.backend_pid
        target = parse_url(pg_url)
        with psycopg.connect(target.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _until(lambda: listener.reconnects > before, "the listener's reconnect")
        _wait(moved, "wake-up after the listener reconnected")
        assert listener.reconnects == before + 1
        assert listener.backend_pid not in (0, pid)
        moved.clear()
        agent.send(ak.user("again"))
        _wait(moved, "wake-up from a commit after the reconnect")
    finally:
        unwatch()
    assert agent.wait_for_idle(timeout_seconds=DEADLINE)
    _until(lambda: listener.channels == frozenset(), "the channel left once nobody follows")


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE} s"
        time.sleep(0.01)
