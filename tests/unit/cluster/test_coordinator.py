"""The coordinator on a real PostgreSQL: membership, the even spread, graceful hand-offs and
a partition lost under a worker. The runner takes each partition's real advisory lock
(``lock_runner.py``), so what conflicts and what is free is the server's say."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs
from tests.unit.cluster.lock_runner import LockRunner

from agentkeep.cluster import Coordinator, CoordinatorSettings, membership
from agentkeep.errors import StoreUnavailableError
from agentkeep.persistence.postgres.connection import parse_url

COUNT = 8
TIMEOUT = 30.0


def settings(**overrides: Any) -> CoordinatorSettings:
    values: dict[str, Any] = {"count": COUNT, "lease_ms": 3000, "tick_ms": 50}
    values.update(overrides)
    return CoordinatorSettings(**values)


class Workers:
    """In-process coordinators of one store, each with its own runner; stopped at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[Coordinator] = []

    def start(self, **overrides: Any) -> Coordinator:
        coordinator = Coordinator(self.url, LockRunner(self.url), settings(**overrides))
        self.started.append(coordinator.start())
        return coordinator

    def stop_all(self) -> None:
        for coordinator in self.started:
            if coordinator._thread is not None and coordinator._thread.is_alive():
                coordinator.stop()


@pytest.fixture
def workers(postgres_url: str) -> Iterator[Workers]:
    pool = Workers(postgres_url)
    try:
        yield pool
    finally:
        pool.stop_all()


def admin(url: str) -> psycopg.Connection[Any]:
    target = parse_url(url)
    return psycopg.connect(
        target.conninfo, autocommit=True, options=f"-c search_path={target.schema}"
    )


def spread(*coordinators: Coordinator) -> list[list[int]]:
    return [sorted(c.owned()) for c in coordinators]


def converged(*coordinators: Coordinator) -> bool:
    """Every partition runs in exactly one of them, each running its fair share."""
    owned = spread(*coordinators)
    everything = sorted(p for own in owned for p in own)
    sizes = sorted(len(own) for own in owned)
    return everything == list(range(COUNT)) and sizes[-1] - sizes[0] <= 1


def held_locks(url: str) -> dict[int, int]:
    with admin(url) as connection:
        return {p: h.backend_pid for p, h in membership.partition_holders(connection).items()}


def test_a_worker_joins_heartbeats_and_leaves_gracefully(workers: Workers) -> None:
    coordinator = workers.start(address="http://127.0.0.1:8123", lease_ms=600, tick_ms=20)
    with admin(workers.url) as connection:
        (row,) = membership.read_workers(connection)
        assert row.token == coordinator.token
        assert (row.pid, row.host) == (os.getpid(), socket.gethostname()[:30])
        assert row.address == "http://127.0.0.1:8123"
        assert row.application_name == f"agentkeep pid={os.getpid()} host={row.host} c={row.token}"
        assert row.live
        assert row.lease_ms == 600
        first = row.heartbeat_ms
        # It heartbeats every lease/3 (200 ms): the server's clock moves its row on.
        assert coordinator.wait_until(
            lambda _: membership.read_workers(connection)[0].heartbeat_ms > first, TIMEOUT
        )
        assert coordinator.wait_until(lambda c: len(c.owned()) == COUNT, TIMEOUT)
        assert coordinator.wait_until(
            lambda c: membership.read_workers(connection)[0].partitions.keys() == set(range(COUNT)),
            TIMEOUT,
        )
        health = coordinator.health()
        assert health.healthy
        assert health.share == COUNT
        assert health.live_workers == 1
        coordinator.stop()
        assert membership.read_workers(connection) == []
    # Each lock's session was closed; its backend lets the lock go as it exits, a moment later.
    deadline = time.monotonic() + TIMEOUT
    while (held := held_locks(workers.url)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held == {}


def test_joining_workers_converge_to_an_even_spread_by_graceful_hand_offs(
    workers: Workers,
) -> None:
    with capture_logs() as logs:
        a = workers.start()
        assert a.wait_until(lambda c: len(c.owned()) == COUNT, TIMEOUT)
        b = workers.start()
        assert a.wait_until(lambda _: converged(a, b), TIMEOUT), spread(a, b)
        assert [len(own) for own in spread(a, b)] == [4, 4]
        c = workers.start()
        assert a.wait_until(lambda _: converged(a, b, c), TIMEOUT), spread(a, b, c)
        assert sorted(len(own) for own in spread(a, b, c)) == [2, 3, 3]
        # Every partition lock is held by the session of the worker that says it runs it.
        holders = held_locks(workers.url)
        assert sorted(holders) == list(range(COUNT))
        # A leaving worker's partitions go to the others.
        b.stop()
        assert a.wait_until(lambda _: converged(a, c), TIMEOUT), spread(a, c)
        assert [len(own) for own in spread(a, c)] == [4, 4]
    events = [e for e in logs if e["event"].startswith("cluster_")]
    hand_offs = [e for e in events if e["event"] == "cluster_partition_released"]
    assert hand_offs
    assert {e["reason"] for e in hand_offs} <= {"hand_off", "stop"}
    assert any(e["reason"] == "hand_off" for e in hand_offs)
    acquired = [e for e in events if e["event"] == "cluster_partition_acquired"]
    assert {e["worker"] for e in acquired} == {a.token, b.token, c.token}
    unwanted = ("cluster_partition_lost", "cluster_tick_failed")
    assert not [e for e in events if e["event"] in unwanted]


def test_two_workers_starting_together_agree(workers: Workers) -> None:
    a = workers.start()
    b = workers.start()
    assert a.wait_until(lambda _: converged(a, b), TIMEOUT), spread(a, b)
    # and stay so: a few more ticks change nothing.
    before = spread(a, b)
    ticks = a.ticks
    assert a.wait_until(lambda c: c.ticks >= ticks + 10, TIMEOUT)
    assert spread(a, b) == before


def test_a_partition_whose_session_is_terminated_is_lost_and_opened_again(
    workers: Workers,
) -> None:
    a = workers.start()
    assert a.wait_until(lambda c: len(c.owned()) == COUNT, TIMEOUT)
    victim = held_locks(workers.url)[3]
    first = a.handle(3)
    with capture_logs() as logs:
        with admin(workers.url) as connection:
            connection.execute("SELECT pg_terminate_backend(%s, 10000)", (victim,))
        assert a.wait_until(lambda c: c.handle(3) is not None and c.handle(3) is not first, TIMEOUT)
    lost = [e for e in logs if e["event"] == "cluster_partition_lost"]
    assert [e["partition"] for e in lost] == [3]
    assert held_locks(workers.url)[3] != victim


def test_a_worker_whose_session_is_cut_is_reaped_by_the_others(workers: Workers) -> None:
    """The coordinator's own session terminated: the other worker (in another process it
    would end every session of it; here one process holds both) deletes its row, and the
    cut worker, reconnecting, finds itself expelled and joins again under a new token."""
    a = workers.start()
    b = workers.start()
    assert a.wait_until(lambda _: converged(a, b), TIMEOUT)
    old = b.token
    with capture_logs() as logs:
        with admin(workers.url) as connection:
            (backend,) = [
                w.backend_pid for w in membership.read_workers(connection) if w.token == old
            ]
            connection.execute("SELECT pg_terminate_backend(%s, 10000)", (backend,))
        assert b.wait_until(lambda c: c.token != old and converged(a, c), TIMEOUT)
    events = {e["event"] for e in logs}
    assert "cluster_worker_reaped" in events or "cluster_expelled" in events


def test_a_worker_that_cannot_reach_the_server_does_not_start(postgres_url: str) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/postgres?schema=t_nowhere&connect_timeout=2"
    coordinator = Coordinator(unreachable, LockRunner(postgres_url), settings())
    with pytest.raises(StoreUnavailableError, match="Could not join the workers"):
        coordinator.start()
    assert not coordinator.health().healthy
